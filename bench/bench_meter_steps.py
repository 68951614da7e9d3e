"""Issue 30 item 5: where a metered Propose's sidecar CPU goes, step by step, in process.

``bench_meters.py`` part 2 (CPU per ``Gate.propose`` + ``Cancel``, three meters vs none) moves by
hundreds of microseconds between runs on a shared box. This bench times the steps of the same
calls (``time.process_time`` around each: every thread of the process) so that two checkouts can
be compared part by part: the idempotency key's look-up (``keys.claim``; on a branch that reads
the meters there, the reading is in it), ``Metering.prepare`` (the reading and, before
``sqlfold``, the reservation's own transaction), the decision (``steps.authorize``), the
invocation's write (``create_invocation``; with ``sqlfold`` the reservation rows too), the whole
``Gate.propose``, and the ``Cancel`` that settles the call. Same tools and policies as
``bench_meters.py`` part 2, compiled core by default; rounds alternate the two tools.

``--parts`` also times finer parts inside those steps (:data:`PARTS`); ``--thread-clock`` times
everything with ``time.thread_time`` of the event loop's thread (the bench's writes run inline on
the idle loop), which leaves out the checkpointer thread's work that ``process_time`` charges to
whichever step it overlaps (docs/BENCHMARKS.md "where the three meters' extra CPU goes").

Run it with each checkout's interpreter, interleaved, e.g.::

    for i in 1 2 3; do
      /work/wt/sqlfold-base/.venv/bin/python bench/bench_meter_steps.py --label main
      .venv/bin/python bench/bench_meter_steps.py --label branch
    done

(the script imports whichever ``callgate`` the interpreter has installed; it is only read from
this checkout.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_meters import NOW, ROOT, policy_folder

import callgate
from callgate.base.clock import FixedClock
from callgate.base.model import Proposal, Subject
from callgate.base.trace import TraceContext
from callgate.config import CoreConfig, load_config
from callgate.policy.snapshot import load_snapshot
from callgate.propose import steps
from callgate.propose.outcome import SessionSpec
from callgate.server.app import Shared
from callgate.store.sqlite import SQLiteStore

STEPS = ("claim", "prepare", "authorize", "write", "propose", "cancel", "total")
"""``total``: ``Gate.propose`` + ``Cancel``, as ``bench_meters.py`` part 2 counts it."""
PARTS = (
    "front", "core.front", "read_ahead", "contributions", "reading", "core.decide_metered", "reserve_insert",
    "settle",
)  # fmt: skip
"""Finer parts (``--parts``), each inside one of :data:`STEPS`: ``steps.front`` and the compiled
core's ``front`` (the plain tool's one-call decision is in it), ``Metering.read_ahead`` and its
``contributions``, the meters' reading (``_read_stamped``, in the key's look-up), the compiled
core's ``decide_metered``, the reservation ``INSERT`` under the write lock (``fold_sqlite``) and
the settle in the Cancel's transaction (``settle_sqlite``)."""


CLOCK: list[Any] = [time.process_time]
"""What the steps are timed with: ``time.process_time`` (every thread: the writer's and the
checkpointer's work running meanwhile lands in the step it overlaps), or with ``--thread-clock``
``time.thread_time`` (the event loop's thread alone: the bench's writes run inline on the idle
loop, so a step's own work without the checkpointer's)."""


def timed_sync(acc: dict[str, float], name: str, fn: Any) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        c0 = CLOCK[0]()
        try:
            return fn(*a, **kw)
        finally:
            acc[name] += CLOCK[0]() - c0

    return wrapper


def time_parts(acc: dict[str, float], gate: Any) -> None:
    """Wrap the finer parts (:data:`PARTS`) of whichever ``callgate`` the interpreter imports."""
    import callgate.store.meters as meters
    import callgate.store.sqlite as sqlite_store
    from callgate.propose import metering

    steps.front = timed_sync(acc, "front", steps.front)  # type: ignore[assignment]
    gate.core.front = timed_sync(acc, "core.front", gate.core.front)
    gate.core.decide_metered = timed_sync(acc, "core.decide_metered", gate.core.decide_metered)
    gate.metering.read_ahead = timed_sync(acc, "read_ahead", gate.metering.read_ahead)
    metering.contributions = timed_sync(acc, "contributions", metering.contributions)  # type: ignore[attr-defined]
    meters._read_stamped = timed_sync(acc, "reading", meters._read_stamped)  # type: ignore[attr-defined]
    sqlite_store.fold_sqlite = timed_sync(acc, "reserve_insert", sqlite_store.fold_sqlite)  # type: ignore[attr-defined]
    sqlite_store.settle_sqlite = timed_sync(acc, "settle", sqlite_store.settle_sqlite)  # type: ignore[attr-defined]


def timed(acc: dict[str, float], name: str, fn: Any) -> Any:
    async def wrapper(*a: Any, **kw: Any) -> Any:
        c0 = CLOCK[0]()
        try:
            return await fn(*a, **kw)
        finally:
            acc[name] += CLOCK[0]() - c0

    return wrapper


async def run(
    tmp: Path, calls: int, rounds: int, core: str, gap_ms: float = 0.0, parts: bool = False
) -> dict[str, dict[str, list[float]]]:
    base = load_config(ROOT / "callgate.toml")
    folder = policy_folder(tmp)
    cfg = replace(base, core=CoreConfig(engine=core), policy=replace(base.policy, dir=str(folder)))
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_tool_calls=10**9))
    snap = load_snapshot(folder, policy=cfg.policy)
    store = SQLiteStore(tmp / "steps.db")
    clock = FixedClock(NOW)
    gate = Shared.build(cfg, snap, store, clock, store.keys()).gate(cfg, store, clock)
    acc: dict[str, float] = defaultdict(float)
    gate.keys.claim = timed(acc, "claim", gate.keys.claim)  # type: ignore[method-assign]
    gate.metering.prepare = timed(acc, "prepare", gate.metering.prepare)  # type: ignore[method-assign]
    store.create_invocation = timed(acc, "write", store.create_invocation)  # type: ignore[method-assign]
    steps.authorize = timed(acc, "authorize", steps.authorize)  # type: ignore[assignment]
    if parts:
        time_parts(acc, gate)
    s = await gate.open_session(SessionSpec(subject=Subject(tenant="acme", id="alice"), timezone="UTC"))
    await gate.list_tools(s.session_id, "m")
    trace = TraceContext.from_traceparent(None)
    per: dict[str, dict[str, list[float]]] = {t: defaultdict(list) for t in ("bench.plain", "bench.metered")}
    for rnd in range(rounds + 1):  # round 0 warms up
        for tool in ("bench.plain", "bench.metered"):
            raw = [json.dumps({"to": f"x{i}", "n": 7}).encode() for i in range(calls)]
            acc.clear()
            for i in range(calls):
                if gap_ms:  # a call that comes alone (docs/BENCHMARKS.md "what a call costs at a low rate")
                    time.sleep(gap_ms / 1000)
                c0 = CLOCK[0]()
                got = await gate.propose(
                    Proposal(s.session_id, "m", f"{tool}{rnd}-{i}", tool, "v1", raw[i], f"{tool}{rnd}-{i}"),
                    trace,
                )
                c1 = CLOCK[0]()
                assert got.decision is not None and got.decision.effect.value == "allow", got
                await gate.cancel(got.record.invocation_id, "bench", trace, session_id=s.session_id)
                c2 = CLOCK[0]()
                acc["propose"] += c1 - c0
                acc["cancel"] += c2 - c1
                acc["total"] += c2 - c0
            if rnd:
                for name in STEPS + (PARTS if parts else ()):
                    per[tool][name].append(acc[name] / calls * 1e6)
    # not timed: what each Propose + Cancel runs on the writer's connection
    seen: list[str] = []
    store.worker._conn.set_trace_callback(seen.append)
    for tool in ("bench.plain", "bench.metered"):
        seen.clear()
        for i in range(50):
            raw = json.dumps({"to": f"c{i}", "n": 7}).encode()
            got = await gate.propose(
                Proposal(s.session_id, "m", f"{tool}c-{i}", tool, "v1", raw, f"{tool}c-{i}"), trace
            )
            await gate.cancel(got.record.invocation_id, "bench", trace, session_id=s.session_id)
        begins = sum(1 for x in seen if x.startswith("BEGIN"))
        per[tool]["statements"] = [len(seen) / 50]
        per[tool]["transactions"] = [begins / 50]
    store.worker._conn.set_trace_callback(None)
    await store.close()
    return per


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--core", default="native")
    ap.add_argument("--label", default="")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="sleep this long before each call (not timed)")
    ap.add_argument("--parts", action="store_true", help="also time the finer parts (PARTS)")
    ap.add_argument("--thread-clock", action="store_true", help="time.thread_time (the loop's thread)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.thread_clock:
        CLOCK[0] = time.thread_time
    tmp = Path(tempfile.mkdtemp(prefix="cg-bench-steps-"))
    try:
        per = await run(tmp, args.calls, args.rounds, args.core, args.gap_ms, args.parts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    label = args.label or str(Path(callgate.__file__).resolve().parents[1])
    gap = f", {args.gap_ms:g} ms before each call" if args.gap_ms else ""
    clock = ", thread_time" if args.thread_clock else ""
    print(
        f"{label} ({args.core} core, {args.rounds} x {args.calls} calls per tool{gap}{clock}, "
        f"load {load[0]:.1f}/{load[1]:.1f})"
    )
    print(
        f"  {'step (us CPU per call)':<24}{'plain min/med':>16}{'metered min/med':>18}{'extra min/med':>16}"
    )
    out: dict[str, Any] = {"label": label, "load": load[:2]}
    for name in STEPS + (PARTS if args.parts else ()):
        p, m = per["bench.plain"][name], per["bench.metered"][name]
        extra = [b - a for a, b in zip(p, m, strict=True)]
        out[name] = {"plain": p, "metered": m}
        print(
            f"  {name:<24}{min(p):>7.0f} /{statistics.median(p):>6.0f}  {min(m):>7.0f} /{statistics.median(m):>6.0f}"
            f"  {min(m) - min(p):>+6.0f} /{statistics.median(extra):>+6.0f}"
        )
    for name in ("statements", "transactions"):
        p, m = per["bench.plain"][name][0], per["bench.metered"][name][0]
        out[name] = {"plain": p, "metered": m}
        print(f"  {name + ' per call':<24}{p:>16.1f}{m:>18.1f}{m - p:>+16.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
