"""SQLiteWorker: group commit with per-operation isolation, alone or in a batch."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from callgate.base.errors import CallgateError, ErrorCode
from callgate.store import sqlite_worker
from callgate.store.sqlite_worker import CHECKPOINT_EVERY, Durability, SQLiteWorker

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER NOT NULL);"


def rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as c:  # a separate connection sees only what was committed
        return dict(c.execute("SELECT k, v FROM t").fetchall())


def insert(k: str, v: int, then_fail: BaseException | None = None):  # type: ignore[no-untyped-def]
    def op(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t VALUES (?, ?)", (k, v))
        if then_fail is not None:
            raise then_fail
        return k

    return op


def test_an_operation_alone_commits_or_rolls_back(tmp_path: Path) -> None:
    async def main() -> None:
        w = SQLiteWorker(tmp_path / "w.db", schema=SCHEMA)
        assert await w.run(insert("a", 1)) == "a"
        with pytest.raises(ValueError):  # the op's own error passes through, its writes undone
            await w.run(insert("b", 2, then_fail=ValueError("no")))
        with pytest.raises(CallgateError) as err:  # a SQLite error is store_unavailable
            await w.run(insert("a", 3))
        assert err.value.code is ErrorCode.STORE_UNAVAILABLE
        assert await w.run(insert("c", 4)) == "c"  # the connection is usable afterwards
        await w.close()
        with pytest.raises(CallgateError):
            await w.run(insert("d", 5))

    asyncio.run(main())
    assert rows(tmp_path / "w.db") == {"a": 1, "c": 4}


def test_a_failing_operation_in_a_batch_is_rolled_back_alone(tmp_path: Path) -> None:
    async def main() -> list[object]:
        w = SQLiteWorker(tmp_path / "w.db", schema=SCHEMA)
        gate = threading.Event()

        def hold(c: sqlite3.Connection) -> None:  # keeps the writer busy while the batch queues
            gate.wait(5)

        first = asyncio.ensure_future(w.run(hold))
        await asyncio.sleep(0.05)
        ops = [insert("x", 1), insert("y", 2, then_fail=KeyError("y")), insert("x", 9), insert("z", 3)]
        batch = [asyncio.ensure_future(w.run(op)) for op in ops]
        await asyncio.sleep(0.05)
        gate.set()
        await first
        out = await asyncio.gather(*batch, return_exceptions=True)
        await w.close()
        return out

    out = asyncio.run(main())
    assert out[0] == "x" and out[3] == "z"
    assert isinstance(out[1], KeyError)
    assert isinstance(out[2], CallgateError) and out[2].code is ErrorCode.STORE_UNAVAILABLE
    assert rows(tmp_path / "w.db") == {"x": 1, "z": 3}


# --- alone, inline (the event loop commits a lone call's operation itself) ------------------------


def lone_worker(path: Path, **kw: object) -> SQLiteWorker:
    """A writer whose commits do not sync (barrier durability)."""
    return SQLiteWorker(path, schema=SCHEMA, durability=Durability.BARRIER, **kw)  # type: ignore[arg-type]


def on_thread(k: str, v: int, seen: list[int]):  # type: ignore[no-untyped-def]
    def op(c: sqlite3.Connection) -> str:
        seen.append(threading.get_ident())
        c.execute("INSERT INTO t VALUES (?, ?)", (k, v))
        return k

    return op


def test_a_lone_operation_runs_on_the_loop_with_the_same_outcomes(tmp_path: Path) -> None:
    async def main() -> None:
        w = lone_worker(tmp_path / "w.db")
        seen: list[int] = []
        assert await w.run(on_thread("a", 1, seen)) == "a"
        assert seen == [threading.get_ident()]  # the loop's own thread, no round trip
        with pytest.raises(ValueError):  # the op's own error passes through, its writes undone
            await w.run(insert("b", 2, then_fail=ValueError("no")))
        with pytest.raises(CallgateError) as err:  # a SQLite error is store_unavailable
            await w.run(insert("a", 3))
        assert err.value.code is ErrorCode.STORE_UNAVAILABLE
        assert await w.run(insert("c", 4)) == "c"
        assert w.inline_runs == 4
        await w.close()
        with pytest.raises(CallgateError):
            await w.run(insert("d", 5))

    asyncio.run(main())
    assert rows(tmp_path / "w.db") == {"a": 1, "c": 4}


def test_the_writer_thread_runs_overlapping_durable_or_syncing_operations(tmp_path: Path) -> None:
    async def main() -> None:
        here = threading.get_ident()
        lone = lone_worker(tmp_path / "lone.db")
        seen: list[int] = []
        # issued in the same turn of the loop (overlapping calls): one group commit, off the loop
        assert await asyncio.gather(*(lone.run(on_thread(f"k{i}", i, seen)) for i in range(4)))
        assert len(seen) == 4 and here not in seen and lone.inline_runs == 0
        seen.clear()
        await lone.run(on_thread("d", 1, seen), durable=True)  # a barrier: the writer's fsync
        assert seen[0] != here and lone.inline_runs == 0 and lone.barriers == 1
        seen.clear()
        await asyncio.sleep(0.05)  # the writer thread lets go of the connection after settling
        await lone.run(on_thread("e", 1, seen))  # alone again: the loop's
        assert seen == [here] and lone.inline_runs == 1
        syncing = SQLiteWorker(tmp_path / "sync.db", schema=SCHEMA, durability=Durability.PER_ANSWER)
        seen.clear()
        await syncing.run(on_thread("a", 1, seen))  # every commit is an fsync: never on the loop
        assert seen[0] != here and syncing.inline_runs == 0
        for w in (lone, syncing):
            await w.close()

    asyncio.run(main())


def test_a_lone_commit_never_waits_on_the_loop_for_another_connections_lock(tmp_path: Path) -> None:
    async def main() -> None:
        w = lone_worker(tmp_path / "w.db", busy_timeout_ms=5000)
        other = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        seen: list[int] = []
        assert await w.run(on_thread("a", 1, seen)) == "a"  # waited on the writer thread
        assert seen[0] != threading.get_ident() and w.inline_runs == 0
        assert ticks >= 10  # the loop kept running while the lock was held (~30 ticks)
        beat.cancel()
        other.close()
        await w.close()

    asyncio.run(main())
    assert rows(tmp_path / "w.db") == {"a": 1}


def test_lone_operations_set_the_lock_wait_once_and_the_writer_still_waits(tmp_path: Path) -> None:
    """The loop's lone operations never wait for a lock, and set ``busy_timeout`` to 0 once for
    a run of them, not around every BEGIN (docs/BENCHMARKS.md, "Issue 30: what a call costs at a
    low rate"); the writer thread gets its configured wait back before its next batch."""

    async def main() -> None:
        w = lone_worker(tmp_path / "w.db", busy_timeout_ms=5000)
        said: list[str] = []
        w._conn.set_trace_callback(said.append)
        for i in range(5):
            assert await w.run(insert(f"a{i}", i)) == f"a{i}"
        assert w.inline_runs == 5
        assert [s for s in said if "busy_timeout" in s] == ["PRAGMA busy_timeout=0"], said
        other = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock for 0.3 s
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        seen: list[int] = []
        # the loop's try finds the lock taken at once; the writer thread waits for it
        assert await w.run(on_thread("b", 1, seen)) == "b"
        assert seen[0] != threading.get_ident() and w.inline_runs == 5
        assert "PRAGMA busy_timeout=5000" in said
        other.close()
        await asyncio.sleep(0.05)
        assert await w.run(insert("c", 2)) == "c"  # alone again: the loop's, without waiting
        assert w.inline_runs == 6 and said.count("PRAGMA busy_timeout=0") == 2
        await w.close()

    asyncio.run(main())
    assert rows(tmp_path / "w.db") == {**{f"a{i}": i for i in range(5)}, "b": 1, "c": 2}


def test_commits_go_on_while_a_checkpoint_runs(tmp_path: Path) -> None:
    """The checkpointer thread has a connection of its own and holds no write lock: while it
    checkpoints (here: held in its lock, as during a slow copy and sync) commits go on, queued and
    alone; it checkpoints once let go, and stops with the worker."""

    def checkpointers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.endswith("-checkpoint")]

    async def main() -> None:
        before = len(checkpointers())
        w = lone_worker(tmp_path / "w.db")
        assert len(checkpointers()) == before + 1
        with w._ckpt_lock:  # a checkpoint in progress
            writes = [w.run(insert(f"k{i}", i)) for i in range(CHECKPOINT_EVERY)]  # queued together
            await asyncio.wait_for(asyncio.gather(*writes), 10)
            for i in range(CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY + 5):  # one at a time
                await asyncio.wait_for(w.run(insert(f"k{i}", i)), 5)
            assert w.checkpoints == 0
        for _ in range(500):
            if w.checkpoints:
                break
            await asyncio.sleep(0.01)
        assert w.checkpoints >= 1
        await w.close()
        assert len(checkpointers()) == before

    asyncio.run(main())
    assert len(rows(tmp_path / "w.db")) == 2 * CHECKPOINT_EVERY + 5


def test_lone_commits_never_checkpoint_the_checkpointer_thread_does(tmp_path: Path) -> None:
    async def main() -> None:
        w = lone_worker(tmp_path / "w.db")
        auto = await w.run(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        assert auto == 0  # no commit checkpoints by itself (the loop's would write the database)
        for i in range(CHECKPOINT_EVERY + 5):
            await w.run(insert(f"k{i}", i))
        assert w.inline_runs >= CHECKPOINT_EVERY  # (one may meet the checkpoint holding the lock)
        for _ in range(200):  # the checkpoint request is the checkpointer thread's to serve
            if w.checkpoints:
                break
            await asyncio.sleep(0.01)
        assert w.checkpoints >= 1
        await w.close()

    asyncio.run(main())
    assert len(rows(tmp_path / "w.db")) == CHECKPOINT_EVERY + 5


def test_a_sidecar_commits_a_lone_propose_on_the_loop_and_records_overlapping_ones() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.store.sqlite import SQLiteStore
    from tests.conftest import start_sidecar, stop_sidecar

    running, tmp = start_sidecar()
    try:
        store = running.sidecar.components.store.inner  # type: ignore[attr-defined]
        assert isinstance(store, SQLiteStore)
        worker = store.worker
        sid = running.open_session()
        running.list_tools(sid)
        before = worker.inline_runs
        for i in range(20):  # one agent, one call at a time: the commits are the loop's
            r = running.propose(
                sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id=f"a{i}"
            )
            assert r.state == pb.State.PREPARED and not r.rejection.code, r
        assert worker.inline_runs >= before + 15  # (a write that meets a ready callback queues)
        inline = worker.inline_runs
        ids: list[str] = []

        def one(i: int) -> str:
            r = running.propose(
                sid, "weather.get@v1", {"city": "Lyon", "date": "tomorrow"}, proposal_id=f"b{i}"
            )
            return r.invocation_id

        with ThreadPoolExecutor(16) as pool:  # overlapping calls: every answer has its record
            for _ in range(3):
                ids += pool.map(one, range(16))
        # (which of them the loop committed depends on timing; the rule is tested above)
        assert worker.inline_runs >= inline
        for invocation_id in ids:  # every answer has its record
            inv = running.call(store.get_invocation(invocation_id))
            assert inv is not None and inv.state.value == "PREPARED"
    finally:
        stop_sidecar(running, tmp)


def _wal_frames(path: Path) -> int:
    with sqlite3.connect(path) as c:  # (busy, frames in the WAL, frames checkpointed)
        return int(c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def test_the_wal_starts_over_when_a_checkpoint_cannot_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PASSIVE checkpoint that cannot copy the whole WAL (under sustained load: commits append
    while it copies; here a reader pins an old snapshot) leaves it to grow: 1.37 GB after 30 s of
    Propose load, measured. Past :data:`WAL_RESTART_FRAMES` (64 here) the checkpointer follows
    with a ``RESTART``; it does not wait for the reader (that would hold the commits meanwhile),
    it is tried again at the next checkpoint, and once the reader let go the next commit writes
    the WAL from its start. Without it the WAL would still hold every frame since the reader's
    snapshot."""
    monkeypatch.setattr(sqlite_worker, "WAL_RESTART_FRAMES", 64)
    monkeypatch.setattr(sqlite_worker, "IDLE_TRUNCATE_S", 60.0)  # no idle truncate in this test
    path = tmp_path / "w.db"

    async def main() -> None:
        w = lone_worker(path)
        await w.run(insert("first", 0))
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchone()  # pins this snapshot
        for i in range(CHECKPOINT_EVERY + 20):
            await asyncio.wait_for(w.run(insert(f"k{i}", i)), 10)
        for _ in range(500):
            if w.checkpoints:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert w.checkpoints == 1 and w.restarts == 0  # the reader holds it: given up, not waited
        reader.execute("COMMIT")
        for i in range(CHECKPOINT_EVERY):  # the next checkpoint
            await asyncio.wait_for(w.run(insert(f"m{i}", i)), 10)
        for _ in range(500):
            if w.restarts:
                break
            await asyncio.sleep(0.01)
        assert w.restarts == 1
        await w.run(insert("last", 1))
        reader.close()
        frames = _wal_frames(path)  # while the worker is open (the last close removes the WAL)
        await w.close()
        assert frames < 64, f"the WAL holds {frames} frames"  # every frame since the snapshot, without

    asyncio.run(main())
    assert len(rows(path)) == 2 * CHECKPOINT_EVERY + 22


def test_an_idle_store_folds_its_wal_in_and_truncates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once commits pause for :data:`IDLE_TRUNCATE_S` the checkpointer folds the WAL into the
    database and truncates it to zero bytes (a store at rest holds its records in the database
    file alone); a reader holding a snapshot makes it give up at once and try again at the next
    idle look, without holding the commits that come meanwhile."""
    monkeypatch.setattr(sqlite_worker, "IDLE_TRUNCATE_S", 0.1)
    path = tmp_path / "w.db"
    wal = Path(f"{path}-wal")

    async def wait_for(cond: object, what: str) -> None:
        for _ in range(300):
            if cond():  # type: ignore[operator]
                return
            await asyncio.sleep(0.01)
        raise AssertionError(what)

    async def main() -> None:
        w = lone_worker(path, busy_timeout_ms=20_000)
        for i in range(30):
            await w.run(insert(f"k{i}", i))
        assert wal.stat().st_size > 0
        await wait_for(lambda: w.truncates == 1, "no idle truncate")
        assert wal.stat().st_size == 0
        await asyncio.sleep(0.5)  # nothing committed since: no other truncate
        assert w.truncates == 1

        reader = sqlite3.connect(path, isolation_level=None)
        await w.run(insert("while-read", 1))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchone()  # pins a snapshot in the WAL
        await asyncio.sleep(0.5)  # idle looks that find the reader
        assert w.truncates == 1 and wal.stat().st_size > 0
        # commits are not held: a truncation that waited for the reader would hold this one for
        # the whole busy timeout (20 s here; the loop's own commit too, so no asyncio timeout
        # could see it), measured 2.7 s with a 3 s one
        t0 = time.monotonic()
        await w.run(insert("during", 2))
        assert time.monotonic() - t0 < 5.0
        reader.execute("COMMIT")
        reader.close()
        await wait_for(lambda: w.truncates == 2, "no truncate once the reader let go")
        assert wal.stat().st_size == 0
        await w.close()

    asyncio.run(main())
    assert len(rows(path)) == 32
