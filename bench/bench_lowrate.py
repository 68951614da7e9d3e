"""Issue 30: why a Propose costs more CPU at a low open-loop rate than under load.

Dogwood's comparison workload (``bench_dogwood.py``: ``mail.send@v1`` with a meter, 10 Cedar
policies reading it, durability ``barrier``) on one real ``callgate serve``, driven by
``bench/loadgen`` in four shapes, in turn (``--rounds`` times): closed loop at 16 and at 1 in
flight, open loop at ``--rates`` (100/s by default). For each it prints p50, the sidecar's CPU
per call, and per thread of the sidecar (``/proc/PID/task/*/schedstat``): CPU per call and times
scheduled in per call (wake-ups), so a cost that only low rates pay (a thread hand-off, a wake-up
of the loop, a timer) shows as a thread whose share grows when the calls stop overlapping. The
load generator's own CPU per call is printed beside (it is not the sidecar's).

    .venv/bin/python bench/bench_lowrate.py [--seconds 4] [--rounds 2] [--rates 100,10]
        [--inflight 16,1] [--policies 10] [--subjects 64] [--recipients 97] [--phases]
        [--baseline DIR] [--variant NAME:KEY=VALUE,...] [--json FILE]
    .venv/bin/python bench/bench_lowrate.py --gaps [--baseline DIR]   # in process, spaced or not
    .venv/bin/python bench/bench_lowrate.py --keys [--rounds 8]       # the key store's time parsing
    .venv/bin/python bench/bench_lowrate.py --entities [--baseline DIR]  # entity slices cached or not

``--phases`` runs the sidecar under bench/_phase_serve.py and prints, per shape, the median wall
and event-loop CPU of the Propose handler, of ``Gate.propose`` in it and of the store operations
it awaited, how many of those ran on the loop or went to the writer thread, and the p50 minus the
handler (gRPC core, the interceptor, the loop's scheduling). ``--baseline DIR`` runs another
checkout's sidecar (with its own ``.venv``) before this one's in every round: a before/after in
the same run. ``--variant`` (repeatable) runs this checkout's sidecar once more per round with
environment variables set for it (e.g. ``GRPC_POLL_STRATEGY=poll``), and these keys read by the
bench: ``CPUS=1`` (the sidecar started on those CPUs only, ``+`` between several),
``RUNNER=bench/_pin_serve.py`` (another runner: its keys go to its environment),
``SUBJECTS=10,RECIPIENTS=49`` (the pairs the calls rotate over; 64 x 97 by default).
``--entities`` times the compiled core's decision per call in one sidecar (bench/_decide_serve.py)
with its (subject, resource) pairs past the entity-slice cache and within it.

Threads are named by ``comm`` (gRPC core names its own); the sidecar's Python threads are
``python``, told apart by creation order (``py1`` the SQLite writer of the event store, and so
on; ``main`` is the event loop's). A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _harness import ROOT, GoLoad, dump, machine_line, sidecar
from bench_dogwood import PROPOSE, folder, proposal, sessions


def threads(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread of ``pid``: (run time ns, times scheduled in), keyed by a stable name."""
    out: dict[str, tuple[int, int]] = {}
    py = 0
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            run, _wait, slices = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if tid == pid:
            name = "main"
        elif comm.startswith("python"):
            py += 1
            name = f"py{py}"
        else:
            name = comm
        while name in out:
            name += "+"
        out[name] = (int(run), int(slices))
    return out


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def shape(
    sc: Any, go: GoLoad, reqs: Path, offset: int, kind: str, value: float, seconds: float
) -> dict[str, Any]:
    t0, cpu0, kid0, la = threads(sc.proc.pid), sc.cpu_seconds(), children_cpu(), os.getloadavg()[0]
    start = time.perf_counter()
    if kind == "open":
        r = go.run(PROPOSE, reqs, seconds=seconds, rate=value, offset=offset, timeout="30s")
    else:
        r = go.run(PROPOSE, reqs, seconds=seconds, inflight=int(value), offset=offset)
    end = time.perf_counter()
    t1, cpu1, kid1 = threads(sc.proc.pid), sc.cpu_seconds(), children_cpu()
    n = max(1, r["n"])
    per: dict[str, dict[str, float]] = {}
    for name, (run, slices) in t1.items():
        run0, sl0 = t0.get(name, (0, 0))
        if run - run0 > 0:
            per[name] = {"cpu_us": (run - run0) / 1e3 / n, "wakeups": (slices - sl0) / n}
    total_ns = sum(v["cpu_us"] for v in per.values())
    label = f"open {value:g}/s" if kind == "open" else f"closed {value:g} in flight"
    print(
        f"{label:<20} n={r['n']:>6} {r['throughput_rps']:>6.0f}/s p50={r['percentiles_ms']['50']:.2f} ms "
        f"p99={r['percentiles_ms']['99']:.2f} ms errors={r['errors']} {r['error_codes'] or ''} CPU/call={(cpu1 - cpu0) * 1e6 / n:.0f} us "
        f"(threads {total_ns:.0f} us) loadgen CPU/call={(kid1 - kid0) * 1e6 / n:.0f} us load1={la:.2f}"
    )
    for name, v in sorted(per.items(), key=lambda kv: -kv[1]["cpu_us"]):
        if v["cpu_us"] >= 5 or v["wakeups"] >= 0.2:
            print(f"    {name:<18} {v['cpu_us']:>7.0f} us/call  {v['wakeups']:>5.2f} wake-ups/call")
    return {
        "shape": label,
        "n": r["n"],
        "rps": r["throughput_rps"],
        "p50_ms": r["percentiles_ms"]["50"],
        "p99_ms": r["percentiles_ms"]["99"],
        "errors": r["error_codes"],
        "cpu_us_per_call": (cpu1 - cpu0) * 1e6 / n,
        "loadgen_cpu_us_per_call": (kid1 - kid0) * 1e6 / n,
        "load1": la,
        "threads": per,
        "window": (start, end),
    }


_AFFINITY = os.sched_getaffinity(0)
BENCH_KEYS = ("CPUS", "RUNNER", "SUBJECTS", "RECIPIENTS")
"""Keys of a ``--variant`` that this bench reads (the rest go to the sidecar's environment)."""


@contextmanager
def variant_env(env: dict[str, str]) -> Iterator[None]:
    """A variant's environment for the sidecar started inside (``CPUS``: the CPUs it may run on,
    inherited from this process at its start; :func:`restore_affinity` then frees this one)."""
    saved = {k: os.environ.get(k) for k in env}
    cpus = env.get("CPUS")
    os.environ.update({k: v for k, v in env.items() if k not in BENCH_KEYS})
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split("+")})
    try:
        yield
    finally:
        restore_affinity()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def restore_affinity() -> None:
    os.sched_setaffinity(0, _AFFINITY)


PHASES = ("handler", "gate", "store")


def phases(runs: list[dict[str, Any]], path: Path) -> None:
    """Median per phase of the calls each run's window holds (bench/_phase_serve.py)."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    print("phases (median per call, us; wall / event-loop CPU; store ops inline:queued per call):")
    for run in runs:
        start, end = run.pop("window")
        got = [r for r in recs if start <= r["at"] <= end and "gate_wall" in r]
        if not got:
            continue
        med = {
            f"{p}_{k}": statistics.median(r[f"{p}_{k}"] for r in got) for p in PHASES for k in ("wall", "cpu")
        }
        med["inline"] = statistics.mean(r["inline"] for r in got)
        med["queued"] = statistics.mean(r["queued"] for r in got)
        med["outside_handler_wall"] = run["p50_ms"] * 1000 - med["handler_wall"]
        run["phases"] = med
        print(
            f"  {run['shape']:<20} "
            + "  ".join(f"{p} {med[p + '_wall']:.0f}/{med[p + '_cpu']:.0f}" for p in PHASES)
            + f"  store ops {med['inline']:.1f}:{med['queued']:.1f}"
            + f"  p50 minus handler {med['outside_handler_wall']:.0f}"
        )


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def metered_gate(root: Path) -> tuple[Any, Any]:
    """bench_meters.py's gate in process (compiled core, SQLite store) and a keyed Propose of its
    metered tool followed by the Cancel that settles it."""
    from dataclasses import replace

    import bench_meters as bm

    from callgate.config import CoreConfig

    base = bm.load_config(bm.ROOT / "callgate.toml")
    pol = bm.policy_folder(root / f"gate-{time.monotonic_ns()}")
    cfg = replace(base, core=CoreConfig(engine="native"), policy=replace(base.policy, dir=str(pol)))
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_tool_calls=10**9))
    store = bm.SQLiteStore(root / f"gate-{time.monotonic_ns()}.db")
    clock = bm.FixedClock(bm.NOW)
    gate = bm.Shared.build(cfg, bm.load_snapshot(pol, policy=cfg.policy), store, clock, store.keys()).gate(
        cfg, store, clock
    )
    s = await gate.open_session(bm.SessionSpec(subject=bm.Subject(tenant="acme", id="alice"), timezone="UTC"))
    await gate.list_tools(s.session_id, "m")
    trace = bm.TraceContext.from_traceparent(None)

    async def propose(i: int) -> None:
        raw = json.dumps({"to": f"x{i}", "n": 7}).encode()
        got = await gate.propose(
            bm.Proposal(s.session_id, "m", f"g{i}", "bench.metered", "v1", raw, f"g{i}"), trace
        )
        await gate.cancel(got.record.invocation_id, "bench", trace, session_id=s.session_id)

    return store, propose


async def key_times(root: Path, calls: int, rounds: int) -> dict[str, float]:
    """In process, back to back: a keyed Propose + Cancel with the key store's times read by
    ``strptime`` (before 2026-12-07) and by the current ``_parse_ts``, alternating rounds."""
    from datetime import UTC, datetime

    from callgate.store.idempotency import sqlite as keys_sqlite

    current = keys_sqlite._parse_ts

    def strptime(text: str) -> datetime:
        return datetime.strptime(text, keys_sqlite._TS).replace(tzinfo=UTC)

    store, propose = await metered_gate(root)
    got: dict[str, list[float]] = {}
    k = 0
    for rnd in range(rounds + 1):
        for name, parse in (("strptime", strptime), ("current", current)):
            keys_sqlite._parse_ts = parse  # type: ignore[assignment]
            cpu = 0.0
            for _ in range(calls):
                k += 1
                c0 = time.thread_time()
                await propose(k)
                cpu += time.thread_time() - c0
            if rnd:
                got.setdefault(name, []).append(cpu / calls * 1e6)
    keys_sqlite._parse_ts = current
    await store.close()
    out: dict[str, float] = {}
    for name, v in got.items():
        out[f"keyed propose+cancel, {name}, min"] = min(v)
        out[f"keyed propose+cancel, {name}, median"] = statistics.median(v)
        print(f"  keyed Propose+Cancel, times by {name:<9} min {min(v):5.0f} us  median {statistics.median(v):5.0f} us "
              f"CPU  load1={os.getloadavg()[0]:.2f}")  # fmt: skip
    return out


async def entity_slices(root: Path, seconds: float, rounds: int, baseline: str) -> dict[str, float]:
    """A sidecar under bench/_decide_serve.py (thread CPU of each ``Core.front`` and
    ``Core.decide_metered``) per round and checkout (``baseline`` first, when given), each with
    windows of calls whose (subject, resource) pairs rotate over 64 x 97 = 6,208 (the default
    workload: more than the compiled core's 4,096 cached entity slices, FIFO, so every Cedar
    request builds its slice) and over 64 x 7 = 448 (every slice cached): closed 16 in flight
    and open 100/s for each. Prints the medians per window."""
    os.environ["CALLGATE_DECIDE_OUT"] = str(root / "decide.json")
    runner = (str(Path(__file__).with_name("_decide_serve.py")),)
    checkouts = [("baseline", Path(baseline))] if baseline else []
    checkouts.append(("this checkout", ROOT))
    out: dict[str, float] = {}
    for rnd in range(rounds):
        for who, checkout in checkouts:
            windows: list[tuple[str, float, float, float, float]] = []
            with sidecar(
                policy_dir=folder(root / f"entities-{rnd}-{who[0]}", 10), runner=runner, checkout=checkout
            ) as sc:
                go = GoLoad(target=sc.agent, tmp=root)
                sids = await sessions(sc.agent, 64, "s")
                per = int(4000 * seconds) + 1000
                reqs = {
                    n: go.requests(f"r{n}", [proposal(sids[i % 64], i, n) for i in range(per * 2 + 600)])
                    for n in (97, 7)
                }
                go.run(PROPOSE, reqs[7], seconds=2.0, inflight=4, offset=per * 2)  # warm-up
                for n in (97, 7):
                    for k, (label, kw) in enumerate(
                        (("closed 16", {"inflight": 16}), ("open 100/s", {"rate": 100.0}))
                    ):
                        t0 = time.perf_counter()
                        r = go.run(PROPOSE, reqs[n], seconds=seconds, offset=per * k, timeout="30s", **kw)  # type: ignore[arg-type]
                        windows.append(
                            (
                                f"{n} recipients, {label}",
                                t0,
                                time.perf_counter(),
                                r["percentiles_ms"]["50"],
                                os.getloadavg()[0],
                            )
                        )
            time.sleep(0.5)
            rec = json.loads((root / "decide.json").read_text())
            print(f"-- round {rnd + 1}, {who} ({checkout})")
            for label, a, b, p50, la in windows:
                line = f"  {label:<26} p50 {p50:6.2f} ms"
                for name, rows in rec.items():
                    got = [x for x in rows if a <= x[0] <= b]
                    if got:
                        cpu = statistics.median(x[1] for x in got)
                        out[f"round {rnd + 1} {who} {label} {name} cpu_us"] = cpu
                        line += f"  {name} CPU median {cpu:4.0f} us (n={len(got)})"
                print(line + f"  load1={la:.2f}", flush=True)
    return out


async def gaps(root: Path, calls: int, rounds: int) -> dict[str, float]:
    """In process, no gRPC and no other thread timed: the CPU (``time.thread_time``) of the same
    work run back to back and with a 10 ms gap before each (asleep, or spinning on the CPU):
    a bare SQLite write transaction (WAL, ``synchronous=NORMAL``), and a Propose of a metered
    tool on the gate (compiled core, SQLite store) with its Cancel (bench_meters.py's gate)."""
    db = sqlite3.connect(root / "gaps.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")

    async def txn(i: int) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (v) VALUES (?)", ("x" * 200,))
        db.execute("COMMIT")

    store, propose = await metered_gate(root)

    out: dict[str, float] = {}
    k = 0
    for rnd in range(rounds):
        for name, work in (("sqlite txn", txn), ("propose+cancel", propose)):
            for gap in ("none", "sleep 10 ms", "spin 10 ms"):
                cpu = 0.0
                for _ in range(calls):
                    k += 1
                    if gap.startswith("sleep"):
                        time.sleep(0.01)
                    elif gap.startswith("spin"):
                        _spin(0.01)
                    c0 = time.thread_time()
                    await work(k)
                    cpu += time.thread_time() - c0
                us = cpu / calls * 1e6
                print(
                    f"  round {rnd + 1} {name:<15} gap {gap:<12} CPU/call {us:6.0f} us  load1={os.getloadavg()[0]:.2f}"
                )
                if rnd:  # the first round warms up
                    key = f"{name}, gap {gap}"
                    out[key] = min(out.get(key, us), us)
    await store.close()
    db.close()
    return out


async def lone_writes(root: Path, baseline: str, calls: int, rounds: int) -> dict[str, float]:
    """In process: CPU of one small write through ``SQLiteWorker.run`` run by the event loop
    itself (a lone operation), back to back and 10 ms apart, with this checkout's worker and, with
    ``baseline``, that checkout's ``callgate/store/sqlite_worker.py`` in turn."""
    import importlib.util

    from callgate.store import sqlite_worker

    mods: dict[str, Any] = {"this checkout": sqlite_worker}
    if baseline:
        spec = importlib.util.spec_from_file_location(
            "baseline_worker", Path(baseline) / "callgate" / "store" / "sqlite_worker.py"
        )
        assert spec is not None and spec.loader is not None
        mods = {"baseline": importlib.util.module_from_spec(spec), **mods}
        spec.loader.exec_module(mods["baseline"])

    def write(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t (v) VALUES (?)", ("x" * 200,))

    schema = "CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT);"
    workers = {
        k: m.SQLiteWorker(root / f"lone-{i}.db", schema=schema, durability=m.Durability.BARRIER)
        for i, (k, m) in enumerate(mods.items())
    }
    got: dict[str, list[float]] = {}
    for rnd in range(rounds + 1):
        for gap in (0.0, 0.01):
            for name, w in workers.items():
                cpu, before = 0.0, w.inline_runs
                for _ in range(calls):
                    if gap:
                        time.sleep(gap)
                    c0 = time.thread_time()
                    await w.run(write)
                    cpu += time.thread_time() - c0
                if rnd and w.inline_runs - before == calls:  # the first round warms up
                    got.setdefault(f"{name}, gap {gap * 1000:.0f} ms", []).append(cpu / calls * 1e6)
    for w in workers.values():
        await w.close()
    out = {k: statistics.median(v) for k, v in got.items()}
    for k, v in out.items():
        print(f"  lone write on the loop, {k:<28} median {v:5.0f} us CPU  load1={os.getloadavg()[0]:.2f}")
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rates", default="100")
    ap.add_argument("--inflight", default="16,1")
    ap.add_argument("--policies", type=int, default=10)
    ap.add_argument(
        "--subjects", type=int, default=64, help="sessions (each its own subject) the calls rotate over"
    )
    ap.add_argument(
        "--recipients", type=int, default=97, help="distinct recipients (resources) the calls rotate over"
    )
    ap.add_argument("--durability", default="barrier", choices=("barrier", "per_answer"))
    ap.add_argument("--phases", action="store_true", help="time each Propose by phase (_phase_serve.py)")
    ap.add_argument("--keys", action="store_true", help="only the key store's time parsing A/B (key_times())")
    ap.add_argument("--gaps", action="store_true", help="only the in-process gap experiment (gaps())")
    ap.add_argument(
        "--entities", action="store_true", help="only the entity-slice A/B in one sidecar (entity_slices())"
    )
    ap.add_argument("--baseline", default="", help="another checkout (own .venv), run in turn with this one")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME:KEY=VALUE,... this checkout's sidecar again with these environment variables "
        "(CPUS=0 pins it to CPU 0 with sched_setaffinity); repeatable, run in turn with the others",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    print(machine_line(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="cg-lowrate-"))
    if args.keys:
        dump(args.json, await key_times(root, 300, max(2, args.rounds)))
        return
    if args.entities:
        dump(args.json, await entity_slices(root, args.seconds, max(2, args.rounds), args.baseline))
        return
    if args.gaps:
        got = await lone_writes(root, args.baseline, 300, max(2, args.rounds))
        dump(args.json, {**got, **await gaps(root, 200, max(2, args.rounds))})
        return
    shapes = [("closed", float(x)) for x in args.inflight.split(",") if x]
    shapes += [("open", float(x)) for x in args.rates.split(",") if x]
    out: list[dict[str, Any]] = []
    runner: tuple[str, ...] = ("-m", "callgate")
    if args.phases:
        os.environ["CALLGATE_PHASES_OUT"] = str(root / "phases.jsonl")
        runner = (str(Path(__file__).with_name("_phase_serve.py")),)
    checkouts: list[tuple[str, Path, dict[str, str]]] = [("this checkout", ROOT, {})]
    if args.baseline:
        checkouts.insert(0, ("baseline", Path(args.baseline), {}))
    for spec in args.variant:
        vname, _, pairs = spec.partition(":")
        env = dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
        checkouts.append((vname, ROOT, env))
    for rnd in range(args.rounds):
        for name, checkout, env in checkouts:
            print(f"-- round {rnd + 1}, {name} ({checkout}) {env or ''}", flush=True)
            with (
                variant_env(env),
                sidecar(
                    policy_dir=folder(root / f"{rnd}-{len(out)}", args.policies),
                    durability=args.durability,
                    runner=(env["RUNNER"],) if "RUNNER" in env else runner,
                    checkout=checkout,
                ) as sc,
            ):
                restore_affinity()
                go = GoLoad(target=sc.agent, tmp=root)
                sids = await sessions(sc.agent, int(env.get("SUBJECTS", args.subjects)), "s")
                recipients = int(env.get("RECIPIENTS", args.recipients))
                per = 4000 * int(args.seconds) + 2000
                reqs = go.requests(
                    "all",
                    [proposal(sids[i % len(sids)], i, recipients) for i in range(per * (len(shapes) + 1))],
                )
                go.run(PROPOSE, reqs, seconds=2.0, inflight=4)  # warm-up
                for i, (kind, value) in enumerate(shapes):
                    got = shape(sc, go, reqs, per * (i + 1), kind, value, args.seconds)
                    out.append({"checkout": name, "round": rnd + 1, **got})
    if args.phases:
        phases(out, root / "phases.jsonl")
    else:
        for run in out:
            run.pop("window")
    dump(args.json, {"durability": args.durability, "policies": args.policies, "runs": out})


if __name__ == "__main__":
    asyncio.run(main())
