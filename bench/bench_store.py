"""The SQLite event store's write path in process (issue 15 items 9/10): no server, the store's
own schema and writer.

1. **Index locality.** Batches of three keyless Proposes (an invocation row and six events each,
   rows shaped like the gate's) inserted with the same multi-row statements as the writer, ids
   either random (128 CSPRNG bits, the baseline) or time-ordered (``callgate.base.ids.new_id``:
   48 bits of milliseconds, 80 random). Prints SQLite CPU per proposal and the ratio to the
   baseline at two database sizes: random keys scatter every commit over the indexes' pages, so
   their cost grows as the indexes outgrow the page cache.
2. **A lone write.** One operation at a time through :class:`SQLiteWorker` (barrier durability):
   queued to the writer thread (the baseline) against run by the event loop when nothing else is
   ready (``store/sqlite_worker.py``, "Alone, on the loop"). Prints p50/p99 of the awaited call.
3. **Event data text.** The six ``data`` mappings of an allowed Propose (as a real sidecar stores
   them) turned into their stored JSON text, as the writer thread does while holding the GIL:
   ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` (the baseline)
   against :func:`callgate.base.jsontext.compact_sorted` (one C encoder kept). Prints CPU per
   Propose (six mappings) and the ratio.

4. **A sweep.** ``--expired`` PREPARED invocations past their deadline ended by the deadline
   sweep: one transaction per invocation (``Confirmations._cancel`` for each of up to
   ``DEADLINE_SWEEP_BATCH`` listed at once, as the sweep did before; the baseline) against ``Confirmations.expire_deadlines`` (``SWEEP_SLICE`` moves per
   transaction, on the writer thread). Prints CPU (all threads) and wall time per invocation,
   and the longest the event loop was held meanwhile (a 1 ms ticker's worst lateness).

5. **Checkpoints beside the commits.** A steady stream of writes (8 callers, 3 KB rows, a short
   pause between a caller's writes) through :class:`SQLiteWorker`: the WAL checkpoint every
   ``CHECKPOINT_EVERY`` commits run by the writer thread on its own connection with the commits
   waiting (the baseline, as before) against the checkpointer thread on a connection of its own.
   Prints the writes' p50 / p99 / p99.9 / max latency and the ratio of the p99.9s.

    .venv/bin/python bench/bench_store.py [--proposals 30000] [--calls 3000] [--expired 2000]
                                          [--writes 12000]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callgate.base.clock import FixedClock, rfc3339  # noqa: E402
from callgate.base.events import EventKind  # noqa: E402
from callgate.base.ids import new_id  # noqa: E402
from callgate.base.jsontext import compact_sorted  # noqa: E402
from callgate.base.states import State  # noqa: E402
from callgate.base.trace import TraceContext  # noqa: E402
from callgate.config import IdempotencyConfig  # noqa: E402
from callgate.policy.serving import ServingSnapshot  # noqa: E402
from callgate.propose.confirmation import DEADLINE_SWEEP_BATCH, SWEEP_SLICE, Confirmations  # noqa: E402
from callgate.propose.idempotency import IdempotencyFlow  # noqa: E402
from callgate.store import sqlite as S  # noqa: E402
from callgate.store.base import EventRecord, InvocationRecord  # noqa: E402
from callgate.store.migrations import sqlite_statements  # noqa: E402
from callgate.store.sqlite import SQLiteStore  # noqa: E402
from callgate.store.sqlite_worker import Durability, SQLiteWorker, open_connection  # noqa: E402

SWEEP_NOW = datetime(2026, 7, 20, 9, 0, tzinfo=UTC)
EVENT_DATA = json.dumps({"tool": "weather.get@v1", "digest": "sha256:" + "a" * 64, "note": "x" * 120})


_SHA = "sha256:" + "0123456789abcdef" * 4
PROPOSE_EVENT_DATA: list[dict[str, object]] = [  # an allowed weather.get, as stored by a sidecar
    {"duration_us": 48, "model_call_id": "bench", "parent_span_id": "", "policy_revision": _SHA,
     "proposal_id": "p1", "raw_len": 36, "raw_sha256": _SHA[7:], "tool": "weather.get@v1",
     "tool_set_digest": _SHA},
    {"duration_us": 692, "top_level_keys": 2},
    {"dialect": "https://json-schema.org/draft/2020-12/schema", "duration_us": 48, "format_assertion": True,
     "tool_spec_digest": _SHA, "validator": "python-jsonschema", "validator_version": "4.26.0"},
    {"applied": ["relative_date:/date"], "digest": _SHA, "duration_us": 15, "locale": "en",
     "reference_clock": "2026-12-02T14:15:26.292834+08:00", "timezone": "Asia/Shanghai"},
    {"capabilities": ["weather.read"], "decision": {"effect": "allow", "engine": "cedar", "error_code": "",
     "policy_ids": ["weather-read-own-tenant"], "reasons": [{"code": "policy_permit", "message": "",
     "policy_id": "weather-read-own-tenant"}]}, "duration_us": 135, "policy_revision": _SHA,
     "resource": "weather:Lyon", "subject": {"id": "alice", "tenant": "acme"}},
    {"confirmation": "not_required", "digest": _SHA, "duration_us": 31},
]  # fmt: skip


def reference_text(v: object) -> str:
    return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def event_texts(encode: Callable[[object], str], rounds: int) -> float:
    """CPU seconds per Propose to turn its six events' data into text (best of five)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(rounds):
            for d in PROPOSE_EVENT_DATA:
                encode(dict(d))  # the store copies each mapping, as _insert_events does
        best = min(best, (time.process_time() - t0) / rounds)
    return best


def random_id() -> str:
    return os.urandom(16).hex()


def insert_batches(path: Path, proposals: int, make_id: Callable[[], str]) -> float:
    """SQLite CPU seconds per proposal, batches of three, as the writer's run_many inserts them."""
    c = open_connection(str(path), schema="", synchronous="NORMAL", busy_timeout_ms=5000)
    for m in S.MIGRATIONS:
        for statement in sqlite_statements(m.sql):
            c.execute(statement)
    c.execute("PRAGMA cache_size=-512")  # the writer's page cache (PAGE_CACHE_KIB)
    args = b'{"city":"Paris","date":"2026-07-20"}'
    t0 = time.process_time()
    for _ in range(proposals // 3):
        c.execute("BEGIN IMMEDIATE")
        rows: list[object] = []
        events: list[object] = []
        for _ in range(3):
            iid = "inv_" + make_id()
            rows += [iid, "ses", "mc", "p", "weather.get", "v1", "acme", "alice", "PREPARED", args,
                     "sha256:" + "b" * 64, args, "{}", None, "", "2026-07-19T14:00:10Z", "", "rev",
                     "2026-07-19T14:00:00Z", "2026-07-19T14:00:00Z", 0, "", "", ""]  # fmt: skip
            for seq in range(1, 7):
                events += [iid, seq, make_id(), "2026-07-19T14:00:00.000001Z", "proposed", None,
                           "PROPOSED", "c" * 32, "d" * 16, EVENT_DATA]  # fmt: skip
        c.execute(S._insert_invocations_sql(3), rows)
        c.execute(S._insert_events_sql(18), events)
        c.execute("COMMIT")
    cpu = (time.process_time() - t0) / proposals
    c.close()
    return cpu


async def lone_writes(path: Path, calls: int, inline: bool) -> list[float]:
    w = SQLiteWorker(
        path, schema="CREATE TABLE IF NOT EXISTS t (k TEXT, v BLOB);", durability=Durability.BARRIER
    )
    if not inline:
        w._inline = False  # the baseline: every operation through the writer thread
    payload = b"x" * 400

    def op(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t VALUES (?, ?)", (new_id(), payload))

    lat = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await w.run(op)
        lat.append(time.perf_counter() - t0)
    assert (w.inline_runs > 0) is inline
    await w.close()
    return lat[calls // 10 :]


async def sweep(path: Path, n: int, batched: bool) -> tuple[float, float, float]:
    """CPU and wall seconds per ended invocation, and the loop's worst lateness (seconds)."""
    store = SQLiteStore(path)
    clock = FixedClock(SWEEP_NOW)
    keys = IdempotencyFlow(backend=store.keys(), store=store, clock=clock, config=IdempotencyConfig())
    conf = Confirmations(store=store, clock=clock, keys=keys, serving=ServingSnapshot(None))
    past = rfc3339(SWEEP_NOW - timedelta(seconds=1))
    for i in range(n):
        inv = InvocationRecord(
            invocation_id="inv_" + new_id(), session_id="ses", model_call_id="mc", proposal_id=f"p{i}",
            tool_name="weather.get", tool_version="v1", tenant="acme", subject="alice", state=State.PREPARED,
            raw_arguments=b'{"city":"Paris"}', digest="sha256:" + "b" * 64, deadline=past,
            created_at=past, updated_at=past,
        )  # fmt: skip
        first = EventRecord(
            new_id(), inv.invocation_id, 1, past, "proposed", None, State.PREPARED, "t" * 32, "s" * 16
        )
        await store.create_invocation(inv, [first])
    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    c0, w0 = time.process_time(), time.perf_counter()
    ended = 0
    if batched:
        while got := await conf.expire_deadlines():
            ended += got
    else:  # the sweep as it was: DEADLINE_SWEEP_BATCH listed at once, one transaction per invocation
        trace = TraceContext.from_traceparent(None)
        while past := await store.list_past_deadline(SWEEP_NOW, DEADLINE_SWEEP_BATCH):
            for inv in past:
                data = {"deadline": inv.deadline}
                ended += await conf._cancel(inv, EventKind.DEADLINE_EXPIRED, data, trace) is not None
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    done.set()
    await tick
    await store.close()
    assert ended == n, (ended, n)
    return cpu / n, wall / n, worst


def _checkpoint_on_the_writer(self: SQLiteWorker) -> None:
    """The baseline of part 5 (the code before the checkpointer thread): the writer thread
    checkpoints on its own connection, holding it, so commits wait; a request from a commit the
    loop ran is served after the writer's next batch."""
    if threading.current_thread() is not self._thread:
        return
    self._commits = 0
    try:
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error:
        return
    self.checkpoints += 1


async def steady_writes(path: Path, writes: int, on_writer: bool) -> list[float]:
    w = SQLiteWorker(path, schema="CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB);",
                     durability=Durability.BARRIER)  # fmt: skip
    if on_writer:
        w._request_checkpoint = types.MethodType(_checkpoint_on_the_writer, w)  # type: ignore[method-assign]
    payload = b"x" * 3000
    lat: list[float] = []
    left = iter(range(writes))

    async def caller() -> None:
        for k in left:
            t = time.perf_counter()
            await w.run(lambda c, k=k: c.execute("INSERT INTO t VALUES (?, ?)", (k, payload)))
            lat.append(time.perf_counter() - t)
            await asyncio.sleep(0.0005)

    await asyncio.gather(*(caller() for _ in range(8)))
    assert w.checkpoints > 0
    await w.close()
    return sorted(lat[writes // 10 :])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proposals", type=int, default=30000)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--expired", type=int, default=2000)
    ap.add_argument("--writes", type=int, default=12000)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cg-bench-store-"))
    print(f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, load {os.getloadavg()[0]:.2f}")
    print()
    print("| proposals inserted | ids | SQLite CPU per proposal | ratio to random | database |")
    print("|---|---|---|---|---|")
    for n in (a.proposals // 6, a.proposals):
        base = 0.0
        for label, make in (("random (baseline)", random_id), ("time-ordered", new_id)):
            path = tmp / f"{label[:4]}-{n}.db"
            cpu = insert_batches(path, n, make)
            base = base or cpu
            size = path.stat().st_size >> 20
            print(f"| {n:,} | {label} | {cpu * 1e6:.0f} µs | {cpu / base:.2f} | {size} MiB |")
    print()
    print("| one write at a time | p50 | p99 | ratio (p50) |")
    print("|---|---|---|---|")
    base = 0.0
    for label, inline in (("through the writer thread (baseline)", False), ("on the loop when alone", True)):
        lat = asyncio.run(lone_writes(tmp / f"lone-{inline}.db", a.calls, inline))
        p50 = statistics.median(lat)
        p99 = sorted(lat)[int(len(lat) * 0.99)]
        base = base or p50
        print(f"| {label} | {p50 * 1e6:.0f} µs | {p99 * 1e6:.0f} µs | {p50 / base:.2f} |")
    print()
    assert all(compact_sorted(d) == reference_text(d) for d in PROPOSE_EVENT_DATA)  # the same bytes
    print("| six events' data as text | CPU per Propose | ratio |")
    print("|---|---|---|")
    base = 0.0
    for label, encode in (("json.dumps (baseline)", reference_text), ("compact_sorted", compact_sorted)):
        cpu = event_texts(encode, a.calls * 10)
        base = base or cpu
        print(f"| {label} | {cpu * 1e6:.1f} µs | {cpu / base:.2f} |")
    print()
    print(f"| deadline sweep of {a.expired:,} invocations | CPU per invocation | wall per invocation | "
          "ratio (CPU) | event loop held at most |")  # fmt: skip
    print("|---|---|---|---|---|")
    base = 0.0
    for label, batched in (
        ("one transaction each (baseline)", False),
        (f"{SWEEP_SLICE} per transaction", True),
    ):
        cpu, wall, worst = asyncio.run(sweep(tmp / f"sweep-{batched}.db", a.expired, batched))
        base = base or cpu
        print(
            f"| {label} | {cpu * 1e6:.0f} µs | {wall * 1e6:.0f} µs | {cpu / base:.2f} | {worst * 1e3:.1f} ms |"
        )
    print()
    print(f"| {a.writes:,} steady writes, checkpoints | p50 | p99 | p99.9 | max | ratio (p99.9) |")
    print("|---|---|---|---|---|---|")
    base = 0.0
    for label, on_writer in (("by the writer thread (baseline)", True), ("on their own thread", False)):
        lat = asyncio.run(steady_writes(tmp / f"steady-{on_writer}.db", a.writes, on_writer))
        q = [lat[int(len(lat) * f)] * 1e3 for f in (0.5, 0.99, 0.999)]
        base = base or q[2]
        print(
            f"| {label} | {q[0]:.2f} ms | {q[1]:.2f} ms | {q[2]:.2f} ms | {lat[-1] * 1e3:.2f} ms | {q[2] / base:.2f} |"
        )


if __name__ == "__main__":
    main()
