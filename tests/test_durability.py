"""Durability where it matters (issue 15 item 9, spec 6.7/6.8, docs/RELIABILITY.md).

With ``store.durability = "barrier"`` (default) an answer's records are committed (WAL,
``synchronous=NORMAL``: durable against a crash of the process; ``tests/test_crash_consistency.py``
kills a real ``callgate serve`` in this mode) and made durable against power loss by a barrier, one
WAL sync, taken before anything can run: before BeginAttempt hands out a credential, before a
confirmation is accepted, before a reconciled outcome is answered. Here:

* the pragmas of each mode, and concurrent barriers coalescing into one sync;
* an injected fsync failure: the BeginAttempt behind it is refused (``store_unavailable``, no
  credential), and every later barrier too (sticky: BeginAttempt, Confirm, an Authorize allow),
  with nothing written for them;
* a power loss, simulated: the database files are copied at each successful barrier (on the
  writer thread, so nothing commits meanwhile: the copy is exactly what the sync made durable,
  and unsynced WAL frames are what a power loss may discard). Restored, the copy holds every
  attempt whose credential was handed out and every accepted confirmation, with their proposals
  and events; what it lacks are answered proposals nothing ran.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.store.sqlite import SQLiteStore, stored_events
from callgate.store.sqlite_worker import Durability, SQLiteWorker
from tests.conftest import Running
from tests.test_confirmation import error_reason
from tests.test_decision_records import CONTEXT, authorize
from tests.test_execution import FakeCalendar, prepared_event, propose_event, run_attempt, sc  # noqa: F401


def worker_of(sc: Running) -> SQLiteWorker:  # noqa: F811
    store = sc.sidecar.components.store
    inner = getattr(store, "inner", store)
    assert isinstance(inner, SQLiteStore)
    return inner.worker


def _sync_level(w: SQLiteWorker) -> int:
    async def go() -> int:
        return int(await w.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]))

    return asyncio.run(go())


def test_modes_set_the_commit_level_and_barriers_coalesce(tmp_path: Path) -> None:
    syncs: list[int] = []

    def counting(fd: int) -> None:
        syncs.append(fd)

    schema = "CREATE TABLE IF NOT EXISTS t(x INTEGER);"

    async def go() -> None:
        w = SQLiteWorker(tmp_path / "b.db", schema=schema, durability=Durability.BARRIER, fsync=counting)
        try:
            assert await w.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 1  # NORMAL
            release = threading.Event()
            blocker = asyncio.ensure_future(w.run(lambda c: release.wait(10)))  # holds the writer
            await asyncio.sleep(0.05)
            writes = [w.run(lambda c, i=i: c.execute("INSERT INTO t VALUES (?)", (i,))) for i in range(30)]
            barriers = [w.barrier() for _ in range(20)]
            gathered = asyncio.gather(*writes, *barriers)
            await asyncio.sleep(0.05)
            release.set()
            await blocker
            await gathered
            assert len(syncs) == 1 and w.barriers == 1  # 20 barriers queued together: one sync
            await w.barrier()
            assert len(syncs) == 2
        finally:
            await w.close()
        per = SQLiteWorker(tmp_path / "p.db", schema=schema, durability=Durability.PER_ANSWER, fsync=counting)
        try:
            assert await per.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 2  # FULL
            await per.barrier()  # every commit already synced: nothing to do
            assert len(syncs) == 2 and per.barriers == 0
        finally:
            await per.close()
        normal = SQLiteWorker(tmp_path / "n.db", schema=schema, synchronous="normal", fsync=counting)
        try:
            assert await normal.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 1
            await normal.barrier()  # synchronous = normal asks for no sync anywhere
            assert len(syncs) == 2
        finally:
            await normal.close()

    asyncio.run(go())


def _attempts(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as c:
        return [tuple(r) for r in c.execute("SELECT attempt_id, invocation_id FROM attempts")]


def test_a_failed_barrier_refuses_what_would_run(sc: Running) -> None:  # noqa: F811
    w = worker_of(sc)
    assert w.durability is Durability.BARRIER
    _, first = prepared_event(sc, "dur-1")
    _, second = prepared_event(sc, "dur-2")
    sid = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(sid)
    parked = propose_event(sc, sid, "dur-3")

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "injected fsync failure")

    w.fsync = failing
    with pytest.raises(grpc.RpcError) as err:
        sc.executor.BeginAttempt(
            pb.BeginAttemptRequest(invocation_id=first.invocation_id, executor_id="calendar-executor")
        )
    assert error_reason(err.value) == "store_unavailable"
    assert "durability barrier failed" in (err.value.details() or "")
    # Its attempt was committed before the sync failed: a record of something that never ran
    # (no credential left), never the reverse.
    recorded = _attempts(sc.db_path)
    assert [inv for _, inv in recorded] == [first.invocation_id]

    synced: list[int] = []
    w.fsync = synced.append  # the disk is back: the failure stays (the page cache is suspect)
    with pytest.raises(grpc.RpcError) as err:
        sc.executor.BeginAttempt(
            pb.BeginAttemptRequest(invocation_id=second.invocation_id, executor_id="calendar-executor")
        )
    assert error_reason(err.value) == "store_unavailable"
    with pytest.raises(grpc.RpcError) as err:
        sc.confirmations.Confirm(pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest))
    assert error_reason(err.value) == "store_unavailable"
    assert _attempts(sc.db_path) == recorded and synced == []  # refused before writing anything
    # An Authorize allow is something a caller may act on: refused too; a deny is still answered.
    with pytest.raises(grpc.RpcError) as err:
        authorize(sc, "carol", "files.delete", CONTEXT)
    assert error_reason(err.value) == "store_unavailable"
    assert authorize(sc, "bob", "files.delete", CONTEXT).decision.effect == pb.DENY
    # Proposals are still answered (committed, durable against a process crash); nothing runs.
    assert propose_event(sc, sid, "dur-4").decision.effect == pb.CONFIRM


def test_a_full_disk_refuses_and_loses_nothing_then_serves_again(sc: Running) -> None:  # noqa: F811
    """SQLite's ``database or disk is full`` (here: ``max_page_count`` pinned at the database's
    size on the writer's connection, so no new page can be added): a call whose records do not
    fit is refused with ``store_unavailable`` and leaves nothing behind (no invocation without
    its events, no key without its invocation); once there is room again the refused keys are
    free and everything is served, a credential included."""
    w = worker_of(sc)
    sid, confirmed = prepared_event(sc, "full-0")

    def pin(limit: int) -> None:
        async def go() -> None:
            await w.run(lambda c: c.execute(f"PRAGMA max_page_count={limit}").fetchone())

        asyncio.run(go())

    pin(1)  # never below the database's current size: pinned at it
    served, refused = [], []
    for n in range(300):  # the pages' free space fills first
        key = f"fill-{n}"
        try:
            served.append(propose_event(sc, sid, key).invocation_id)
        except grpc.RpcError as err:
            assert error_reason(err) == "store_unavailable"
            assert "database or disk is full" in (err.details() or "")
            refused.append(key)
            if len(refused) == 5:
                break
    assert len(refused) == 5, "the pinned database never filled"
    with sqlite3.connect(sc.db_path) as c:
        orphans = c.execute(
            "SELECT COUNT(*) FROM invocations i WHERE NOT EXISTS "
            "(SELECT 1 FROM events e WHERE e.invocation_id = i.invocation_id)"
        ).fetchone()[0]
        dangling = c.execute(
            "SELECT COUNT(*) FROM idempotency_keys k WHERE NOT EXISTS "
            "(SELECT 1 FROM invocations i WHERE i.invocation_id = k.invocation_id)"
        ).fetchone()[0]
        keys = {r[0] for r in c.execute("SELECT idem_key FROM idempotency_keys")}
        invocations = c.execute("SELECT COUNT(*) FROM invocations").fetchone()[0]
    assert orphans == 0 and dangling == 0
    assert not keys & set(refused) and invocations == len(served) + 1

    pin(1073741823)  # room again
    for key in refused:  # fresh invocations, not replays of anything half-written
        again = propose_event(sc, sid, key)
        assert again.decision.effect == pb.CONFIRM and again.invocation_id not in served
    attempt = sc.executor.BeginAttempt(
        pb.BeginAttemptRequest(invocation_id=confirmed.invocation_id, executor_id="calendar-executor")
    )
    assert attempt.credential


def _copy_db(db: Path, into: Path) -> None:
    into.mkdir(exist_ok=True)
    for suffix in ("", "-wal"):
        src = Path(str(db) + suffix)
        if src.exists():
            shutil.copyfile(src, into / (db.name + suffix))
        else:
            (into / (db.name + suffix)).unlink(missing_ok=True)


def test_power_loss_keeps_every_record_of_what_ran(sc: Running, tmp_path: Path) -> None:  # noqa: F811
    w = worker_of(sc)
    durable = tmp_path / "as-of-last-barrier"
    w.on_barrier = lambda: _copy_db(sc.db_path, durable)
    cal = FakeCalendar()
    ran: dict[str, str] = {}  # invocation id -> attempt id whose credential was handed out
    confirmed: list[str] = []
    for i in range(12):
        _, resp = prepared_event(sc, f"pl-{i}")
        confirmed.append(resp.invocation_id)
        if i % 3 != 2:
            att, _ = run_attempt(sc, cal, resp.invocation_id)
            ran[resp.invocation_id] = att.attempt_id
    # Answered after the last barrier, never run: what a power loss may take.
    sid = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(sid)
    unsynced = [propose_event(sc, sid, f"pl-late-{i}").invocation_id for i in range(5)]
    barriers = w.barriers
    w.on_barrier = None

    restored = sqlite3.connect(durable / sc.db_path.name)
    try:
        assert restored.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

        def state(inv: str) -> str | None:
            row = restored.execute("SELECT state FROM invocations WHERE invocation_id=?", (inv,)).fetchone()
            return None if row is None else str(row[0])

        def kinds(inv: str) -> list[str]:
            return [e.kind for e in stored_events(restored, inv)]  # packed stages expanded

        for inv in confirmed:  # every accepted confirmation, with its proposal
            assert state(inv) is not None and "confirmed" in kinds(inv), inv
        for inv, attempt_id in ran.items():  # every attempt handed out, with all that led to it
            got = restored.execute("SELECT invocation_id FROM attempts WHERE attempt_id=?", (attempt_id,))
            assert got.fetchone() == (inv,)
            assert {"proposed", "confirmed", "attempt_started"} <= set(kinds(inv)), inv
            key = restored.execute(
                "SELECT invocation_id FROM idempotency_keys WHERE invocation_id=?", (inv,)
            ).fetchone()
            assert key == (inv,)
        lost = [inv for inv in unsynced if state(inv) is None]
    finally:
        restored.close()
    # The loss is real and only of that kind: the late proposals are not in the durable copy.
    assert lost == unsynced
    print(f"\n[durability] barriers={barriers} ran={len(ran)} confirmed={len(confirmed)} lost={len(lost)}")


def test_config_durability_is_checked() -> None:
    from dataclasses import replace

    from callgate.base.errors import LoadError
    from callgate.config import Config, validate

    cfg = Config()
    validate(replace(cfg, store=replace(cfg.store, durability="per_answer")))
    with pytest.raises(LoadError):
        validate(replace(cfg, store=replace(cfg.store, durability="sometimes")))


def test_an_authorize_allow_is_durable_in_one_writer_round_trip(sc: Running) -> None:  # noqa: F811
    """The allow's record is behind the barrier when it is answered, in the same writer
    operation as the record itself (``record_decision(durable=True)``); a deny takes no sync."""
    w = worker_of(sc)
    ops: list[bool] = []
    run = w.run

    async def counting(op: Callable[[sqlite3.Connection], Any], *, durable: bool = False) -> Any:
        if "record_decision" in op.__qualname__ or "_nothing" in op.__qualname__:  # not the sweeper's
            ops.append(durable)
        return await run(op, durable=durable)

    w.run = counting  # type: ignore[method-assign]
    before = w.barriers
    assert authorize(sc, "carol", "files.delete", CONTEXT).decision.effect == pb.ALLOW
    assert (ops, w.barriers - before) == ([True], 1)
    ops.clear()
    assert authorize(sc, "bob", "files.delete", CONTEXT).decision.effect == pb.DENY
    assert (ops, w.barriers - before) == ([False], 1)
