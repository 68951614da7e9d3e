"""One SQLite connection on its own thread with group commit, shared by the event store and the
idempotency store.

Operations queued while a commit is in flight run together in the next transaction (group
commit), each inside its own SAVEPOINT so a failing operation is rolled back alone. A caller's
future resolves only after the transaction that ran its operation committed. The asyncio event
loop never syncs, checkpoints or waits for a lock; it runs a commit itself only when nothing
else is ready to run (below).

Durability (docs/RELIABILITY.md, spec 6.7/6.8): with :attr:`Durability.PER_ANSWER` every commit
runs at the configured ``synchronous`` (``FULL``: on disk before the gate answers). With
:attr:`Durability.BARRIER` ordinary commits run at ``synchronous=NORMAL`` (in the WAL, durable
against a crash of the process, not of the machine) and a *barrier* (an operation run with
``durable=True``, or :meth:`SQLiteWorker.barrier`) fdatasyncs the WAL after its batch committed:
one sync covers every transaction committed before it, and every barrier queued while the
previous batch ran is served by the same sync (they coalesce). A failed sync is sticky: the
page cache can no longer be trusted to reach the disk, so every later barrier fails with
``store_unavailable`` until the process restarts.

**Alone, on the loop.** When nothing else is ready to run on the event loop (no other call
waiting for its turn: :func:`_loop_idle`), nothing is queued or running on the writer thread,
and the commit does not sync (``synchronous=NORMAL``/``OFF``, not a barrier), the loop runs the
operation itself: the same transaction with the same outcomes, without the two thread wake-ups
of the round trip. Nobody waits meanwhile, so nobody is delayed, and a lone Propose spends ~300
us less in its handler (measured at 1 call in flight; a sidecar serves one agent, whose calls
mostly come one at a time). Under load other calls are ready, operations queue and group-commit
on the writer thread as before, which keeps the SQLite work off the loop's core. The loop never
waits for another connection's lock (the write lock is tried without a busy wait; if it is
taken, the operation queues), and its commits never checkpoint: the connection's automatic
checkpoint is off and a checkpointer thread, on a connection of its own, runs a ``PASSIVE``
checkpoint after every :data:`CHECKPOINT_EVERY` commits, so the loop neither writes the database
file nor syncs, and commits go on while the checkpoint copies and syncs. The WAL stays under
:data:`WAL_RESTART_FRAMES` pages under load and is truncated to zero bytes once commits pause
(:data:`IDLE_TRUNCATE_S`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from callgate.base.errors import CallgateError, store_unavailable

log = logging.getLogger("callgate.store")
T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")

PAGE_CACHE_KIB = 512
"""Page cache of a writer connection (``PRAGMA cache_size``; SQLite's default is 2,000 KiB, a
cache that fills in minutes of traffic). A writer appends: it touches the few pages on the
paths to the ends of its tables and indexes, and misses are served from the OS page cache."""
CACHED_STATEMENTS = 32
"""Prepared statements a writer connection keeps (the :mod:`sqlite3` default is 128). The
group-commit inserts take as many rows as their batch holds, one statement text per batch size:
128 of them held 2.7 MiB of VDBE programs after 15 s of Propose load; the fixed statements run
every batch and stay in the LRU."""


CHECKPOINT_EVERY = 100
"""Commits between two WAL checkpoints, run by the checkpointer thread (``PRAGMA
wal_checkpoint(PASSIVE)``; SQLite's automatic checkpoint, which would run inside whichever commit
crosses 1,000 pages, is off). A Propose dirties ~5-10 pages, so this is near SQLite's default."""

WAL_RESTART_FRAMES = 1024
"""WAL frames (pages: 4 MiB at SQLite's 4 KiB) past which the checkpointer follows its PASSIVE
checkpoint with a ``RESTART`` one (which does not wait: busy, it is tried again
:data:`RESTART_TRIES` times, then at the next checkpoint; :func:`_without_waiting`). Under sustained writes a PASSIVE checkpoint never finds the
whole WAL copied (commits append while it copies), so SQLite never starts the WAL over: measured
on 2026-12-05, 1.37 GB of WAL and a 2.6 MiB shared-memory index after 30 s of Propose load,
growing until the disk fills. ``RESTART`` holds the next commits while it copies the rest (what
the PASSIVE one just before left: a few commits), and makes the next commit write the WAL from
its start. It was 16,384 frames (64 MiB) until 2026-12-07: a WAL that
size is ~670 B per allowed Propose over a 100,000-Propose run, more than the rows' own growth
left of the 1.5 KB target (issue 34; docs/BENCHMARKS.md has the before/after throughput)."""
RESTART_TRIES = 20
RESTART_RETRY_S = 0.002
"""A ``RESTART`` that found the write lock or a reader busy is tried again this many times, this
long apart, on the checkpointer's thread (nobody waits for it): under load the writer thread
holds the lock for most of the time, and gives it up between two transactions. Measured with
one try per checkpoint: the WAL reached 18.5 MiB over 100,000 Proposes at 16 in flight."""
WAL_SIZE_LIMIT_BYTES = WAL_RESTART_FRAMES * 4096
"""``PRAGMA journal_size_limit`` of a writer connection: a WAL file left larger than this (it grew
while the restarts found it busy) is truncated to it when the WAL starts over."""
IDLE_TRUNCATE_S = 2.0
"""With no commit for this long (measured between two looks of the checkpointer, so after 2-4 s
without a commit) and commits since the WAL was last emptied, the checkpointer folds the WAL into
the database and truncates it to zero bytes (``wal_checkpoint(TRUNCATE)``, without waiting for
readers: busy, it tries at the next idle look). A store at rest then holds its records in the
database file alone."""


class Durability(str, Enum):
    """When a committed record is made durable against power loss (``store.durability``)."""

    BARRIER = "barrier"
    """Commit (WAL, ``synchronous=NORMAL``) before the answer; fsync at a barrier taken before
    anything can run (BeginAttempt, an accepted confirmation, a reconciled outcome, an
    Authorize allow)."""
    PER_ANSWER = "per_answer"
    """Every commit at the configured ``synchronous`` (``full``: an fsync before every answer)."""


Item = tuple[Op, asyncio.AbstractEventLoop, "asyncio.Future[Any]", bool]


@dataclass(slots=True)
class Ahead:
    """An operation a task wants run in the same transaction as its next one on a worker
    (:meth:`SQLiteWorker.ahead`): e.g. a metered Propose's meter reading, carried by its
    idempotency key's look-up (one transaction instead of two). :attr:`done` once the
    transaction that ran it committed; :attr:`value` is then what it returned."""

    worker: SQLiteWorker
    task: asyncio.Task[Any] | None
    op: Op
    taken: bool = False
    done: bool = False
    value: Any = field(default=None)


_AHEAD: ContextVar[Ahead | None] = ContextVar("callgate_sqlite_ahead", default=None)
"""The operation the current task wants carried by its next one (checked against the task: a
task started meanwhile inherits the variable, not the wish)."""


class SQLiteWorker:
    """One SQLite connection on its own thread, group commit with a SAVEPOINT per operation.

    ``run(op)`` queues ``op(conn)`` and resolves with its return value once the transaction that
    ran it committed, or raises what ``op`` raised (its writes rolled back to its savepoint; the
    other operations of the batch are unaffected). If the BEGIN or COMMIT itself fails (disk,
    lock timeout), every operation of the batch fails with ``store_unavailable``. ``sqlite3``
    errors raised by an operation become ``store_unavailable`` too; other exceptions pass through.

    """

    def __init__(
        self,
        path: str | Path,
        *,
        schema: str,
        synchronous: str = "full",
        durability: Durability = Durability.PER_ANSWER,
        busy_timeout_ms: int = 5000,
        max_batch: int = 256,
        name: str = "callgate-sqlite",
        setup: Op | None = None,
        fsync: Callable[[int], None] = os.fdatasync,
        on_barrier: Callable[[], None] | None = None,
    ) -> None:
        self._path = str(path)
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._sync = synchronous.upper()
        if self._sync not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNC_MODES)}")
        self.durability = Durability(durability)
        # A barrier syncs only when the configured level asks for syncs at all (FULL, EXTRA);
        # ordinary commits then run at NORMAL. In PER_ANSWER mode every commit is the barrier.
        self._barrier_syncs = self.durability is Durability.BARRIER and self._sync in ("FULL", "EXTRA")
        self._commit_sync = "NORMAL" if self._barrier_syncs else self._sync
        self.fsync = fsync
        """Test seam: the sync a barrier runs (``os.fdatasync`` of the WAL file descriptor)."""
        self.on_barrier = on_barrier
        """Test seam: called on the worker thread after each successful barrier sync (nothing
        commits meanwhile: the files are then exactly what the sync made durable)."""
        self._barrier_error: str = ""
        self.barriers = 0
        """Syncs taken (one per batch holding at least one barrier)."""
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must be >= 0")
        self._busy_ms = busy_timeout_ms
        self._schema = schema
        self._setup = setup
        self._max_batch = max_batch
        self._q: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._conn: sqlite3.Connection  # the writer thread's, set before _ready
        self._conn_lock = threading.Lock()
        """Held by whoever uses the connection: the writer thread for a batch (and its barrier and
        checkpoint), the event loop for an operation it runs alone (:meth:`run`)."""
        self._inline = self._commit_sync in ("NORMAL", "OFF")
        self._loop_waits = False
        """The connection's ``busy_timeout`` is 0, as the event loop left it (``_conn_lock``
        held to read or change it): the loop sets it once for a run of lone operations and the
        writer thread puts the configured wait back before its next batch
        (:meth:`_writer_waits`), instead of two ``PRAGMA`` statements around every lone BEGIN
        (each a cold statement at a low call rate: docs/BENCHMARKS.md, "Issue 30: what a call
        costs at a low rate")."""
        self._outstanding = 0
        """Operations queued to the writer thread and not yet settled (event-loop side)."""
        self._commits = 0
        self.checkpoints = 0
        """PASSIVE checkpoints the checkpointer thread ran."""
        self.restarts = 0
        """``RESTART`` checkpoints it ran (:data:`WAL_RESTART_FRAMES`)."""
        self.truncates = 0
        """Idle ``TRUNCATE`` checkpoints it ran (:data:`IDLE_TRUNCATE_S`)."""
        self._commit_total = 0
        """Commits since the store opened (both paths; the checkpointer reads it to see idleness)."""
        self.inline_runs = 0
        """Operations the event loop ran itself (module docstring)."""
        self._ready = threading.Event()
        self._init_error: BaseException | None = None
        self._closing = False
        self._ckpt_wake = threading.Event()
        self._ckpt_stop = False
        self._ckpt_lock = threading.Lock()
        """Held by the checkpointer while it checkpoints, and around :attr:`on_barrier` (the files
        are then exactly what the sync made durable)."""
        self._ckpt_thread: threading.Thread | None = None
        """Started once the database exists (below); none for an in-memory database."""
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._init_error is not None:
            raise store_unavailable(f"cannot open SQLite database: {self._init_error}")
        if self._path != ":memory:":  # an in-memory database has no WAL to checkpoint
            self._ckpt_thread = threading.Thread(
                target=self._checkpointer, name=f"{name}-checkpoint", daemon=True
            )
            self._ckpt_thread.start()

    # ------------------------------------------------------------------ worker thread
    def _open(self) -> sqlite3.Connection:
        conn = open_connection(
            self._path, schema=self._schema, synchronous=self._commit_sync, busy_timeout_ms=self._busy_ms
        )
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread checkpoints
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        if self._setup is not None:  # e.g. startup repair, in one transaction before any call
            ok, value = _run_alone(conn, self._setup)
            if not ok:
                conn.close()
                raise value
        return conn

    def _main(self) -> None:
        try:
            conn = self._open()
        except BaseException as exc:
            self._init_error = exc
            self._ready.set()
            return
        self._conn = conn
        self._ready.set()
        stop = False
        try:
            while not stop:
                first = self._q.get()
                if first is None:
                    break
                batch: list[Item] = [first]
                while len(batch) < self._max_batch:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                with self._conn_lock:
                    self._writer_waits(conn)
                    self._run_batch(conn, batch)
                    if self._commits >= CHECKPOINT_EVERY:
                        self._request_checkpoint()
        finally:
            with self._conn_lock:
                conn.close()
            self._fail_pending()

    def _writer_waits(self, conn: sqlite3.Connection) -> None:
        """Before a batch (``_conn_lock`` held): the writer thread waits up to ``busy_timeout``
        for another connection's lock, whatever the event loop's lone operations left set."""
        if self._loop_waits:
            try:
                conn.execute(f"PRAGMA busy_timeout={int(self._busy_ms)}")
            except sqlite3.Error:
                return  # tried again before the next batch; this one's BEGIN reports
            self._loop_waits = False

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _, loop, fut, _ = item
                err = store_unavailable("store is closed")
                loop.call_soon_threadsafe(_settle_all, [(fut, False, err)])

    def _request_checkpoint(self) -> None:
        """Wake the checkpointer (``_conn_lock`` held: the commit count is reset under it)."""
        self._commits = 0
        self._ckpt_wake.set()

    def _checkpointer(self) -> None:
        """Copy the WAL into the database where no reader needs it, on a connection and a thread
        of its own: a ``PASSIVE`` checkpoint takes no write lock, so commits go on meanwhile
        (it took ~5 ms per checkpoint, every :data:`CHECKPOINT_EVERY` commits, with the writer
        stopped, when the writer thread ran it). Its ``synchronous`` is the commits' (``NORMAL``:
        the WAL is synced before the copy and the database after it, as SQLite's own checkpoint
        does); a busy or failed checkpoint is retried at the next request. A WAL that holds
        :data:`WAL_RESTART_FRAMES` or more after it is checkpointed again with ``RESTART``, so
        that it starts over instead of growing for as long as commits never pause; once commits
        pause (:data:`IDLE_TRUNCATE_S`) the WAL is folded in and truncated to zero bytes."""
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_ms)}")
            conn.execute(f"PRAGMA synchronous={self._commit_sync}")
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error as exc:
            log.error(
                "the WAL checkpointer cannot open %s (%s): the WAL grows until callgate restarts",
                self._path,
                exc,
            )
            return
        try:
            self._checkpoint_loop(conn)
        finally:
            conn.close()

    def _checkpoint_loop(self, conn: sqlite3.Connection) -> None:
        seen = truncated = 0  # commit counts: at the last idle look, when the WAL was last emptied
        while True:
            woke = self._ckpt_wake.wait(IDLE_TRUNCATE_S)
            if self._ckpt_stop:
                return
            if woke:
                self._ckpt_wake.clear()
                with self._ckpt_lock:
                    self._checkpoint(conn)
                continue
            total = self._commit_total
            if total == seen and total != truncated:  # idle for a whole look after some commits
                with self._ckpt_lock:
                    if self._truncate(conn):
                        truncated = total
            seen = total

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """PASSIVE, then RESTART past :data:`WAL_RESTART_FRAMES` (a failure: retried next time)."""
        try:
            _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            return
        self.checkpoints += 1
        if frames >= WAL_RESTART_FRAMES:
            for _ in range(RESTART_TRIES):  # between two of the writer's transactions
                if _without_waiting(conn, "RESTART", self._busy_ms):
                    self.restarts += 1
                    return
                time.sleep(RESTART_RETRY_S)

    def _truncate(self, conn: sqlite3.Connection) -> bool:
        """Fold the whole WAL into the database and truncate it to zero bytes; False when a reader
        or a writer held it."""
        done = _without_waiting(conn, "TRUNCATE", self._busy_ms)
        self.truncates += done
        return done

    def _run_batch(self, conn: sqlite3.Connection, batch: list[Item]) -> None:
        if not batch:
            return
        self._commits += 1
        self._commit_total += 1
        if self._barrier_error and any(durable for _, _, _, durable in batch):
            # After a failed sync a durable operation is refused before it writes anything.
            refused = [item for item in batch if item[3]]
            self._settle(refused, [(False, self._barrier_refusal())] * len(refused))
            batch = [item for item in batch if not item[3]]
            if not batch:
                return
        results = execute_batch(conn, [op for op, _, _, _ in batch])
        if any(durable for _, _, _, durable in batch):
            failed = self._barrier()
            if failed is not None:  # the records may not be on disk: nothing may run on them
                results = [
                    (False, failed) if durable else r
                    for r, (_, _, _, durable) in zip(results, batch, strict=True)
                ]
        self._settle(batch, results)

    def _barrier(self) -> CallgateError | None:
        """One durable sync covering every transaction committed so far (worker thread)."""
        if not self._barrier_syncs and not self._barrier_error:
            return None  # PER_ANSWER: each commit was the sync; NORMAL/OFF: no sync asked for
        if not self._barrier_error:
            try:
                fd = os.open(self._path + "-wal", os.O_RDONLY)
            except FileNotFoundError:
                fd = -1  # nothing written since the last checkpoint (which synced the database)
            except OSError as exc:
                self._barrier_error = f"cannot open the WAL: {exc}"
                fd = -1
            if fd >= 0:
                try:
                    self.fsync(fd)
                except OSError as exc:
                    self._barrier_error = str(exc) or type(exc).__name__
                finally:
                    os.close(fd)
            if not self._barrier_error:
                self.barriers += 1
                if self.on_barrier is not None:
                    with self._ckpt_lock:  # no checkpoint writes the database meanwhile
                        self.on_barrier()
                return None
        return self._barrier_refusal()

    def _barrier_refusal(self) -> CallgateError:
        return store_unavailable(
            f"durability barrier failed ({self._barrier_error}); nothing can run until callgate restarts"
        )

    @staticmethod
    def _settle(batch: list[Item], results: list[tuple[bool, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for (ok, value), (_, loop, fut, _) in zip(results, batch, strict=False):
            by_loop.setdefault(loop, []).append((fut, ok, value))
        for loop, items in by_loop.items():  # one wake-up per loop per batch
            try:
                loop.call_soon_threadsafe(_settle_all, items)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass

    # ------------------------------------------------------------------ API
    def ahead(self, op: Op) -> Ahead:
        """Run ``op`` first in the transaction of the current task's next :meth:`run` on this
        worker (whatever that operation is), so both cost one transaction. Until that run
        committed the returned :class:`Ahead` is not ``done`` (no such run, or it failed: the
        caller runs ``op`` itself). :meth:`drop_ahead` forgets it."""
        wish = Ahead(self, asyncio.current_task(), op)
        _AHEAD.set(wish)
        return wish

    @staticmethod
    def drop_ahead() -> None:
        _AHEAD.set(None)

    async def run(
        self, op: Callable[[sqlite3.Connection], T], *, durable: bool = False, alone: bool = True
    ) -> T:
        """``op(conn)``'s value once its transaction committed; with ``durable`` once a barrier
        after that commit made it (and everything committed before) durable on disk. ``alone``
        False keeps ``op`` off the event loop even when the loop is idle (a long operation, e.g.
        a sweep's slice of moves, would hold every call that arrives meanwhile). An operation
        the task asked to run ahead (:meth:`ahead`) runs first in the same transaction."""
        if self._closing or not self._thread.is_alive():
            raise store_unavailable("store is closed")
        wish = _AHEAD.get()
        if wish is None or wish.taken or wish.worker is not self or wish.task is not asyncio.current_task():
            return await self._run(op, durable, alone)
        wish.taken = True
        box: list[Any] = []
        first = wish.op

        def both(c: sqlite3.Connection) -> T:
            box[:] = [first(c)]
            return op(c)

        value = await self._run(both, durable, alone)  # raised: not done (the caller runs it)
        if box:
            wish.done, wish.value = True, box[0]
        return value

    async def _run(self, op: Callable[[sqlite3.Connection], T], durable: bool, alone: bool) -> T:
        loop = asyncio.get_running_loop()
        if (
            self._inline
            and alone
            and not durable
            and not self._outstanding
            and _loop_idle(loop)
            and self._conn_lock.acquire(blocking=False)
        ):
            try:
                done = self._alone(op)
                if done is not None:
                    self._commits += 1
                    self._commit_total += 1
                    self.inline_runs += 1
                    if self._commits >= CHECKPOINT_EVERY:
                        self._request_checkpoint()  # the checkpointer thread's, off the loop
            finally:
                self._conn_lock.release()
            if done is not None:
                ok, value = done
                if ok:
                    return value  # type: ignore[no-any-return]
                raise value
            # another connection holds the write lock: the writer thread waits for it, not the loop
        fut: asyncio.Future[T] = loop.create_future()
        self._outstanding += 1
        try:
            self._q.put((op, loop, fut, durable))
            return await fut
        finally:
            self._outstanding -= 1

    def _alone(self, op: Op) -> tuple[bool, Any] | None:
        """:func:`_try_alone` on the event loop (``_conn_lock`` held), which never waits for a
        lock: the connection's ``busy_timeout`` is set to 0 once, not around every BEGIN."""
        if not self._loop_waits:
            try:
                self._conn.execute("PRAGMA busy_timeout=0")
            except sqlite3.Error:
                return None  # the writer thread runs it, and reports
            self._loop_waits = True
        return _try_alone(self._conn, op)

    async def barrier(self) -> None:
        """Every transaction committed before this call is durable on disk when it returns
        (coalesced with the other barriers of the same batch); ``store_unavailable`` if not."""
        if self._barrier_syncs or self._barrier_error:
            await self.run(_nothing, durable=True)

    async def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._q.put(None)
        if self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        if self._ckpt_thread is not None and self._ckpt_thread.is_alive():
            self._ckpt_stop = True
            self._ckpt_wake.set()
            await asyncio.get_running_loop().run_in_executor(None, self._ckpt_thread.join)


def open_connection(path: str, *, schema: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection in WAL mode with ``synchronous`` set and ``schema`` applied."""
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        timeout=busy_timeout_ms / 1000,
        check_same_thread=False,
        cached_statements=CACHED_STATEMENTS,
    )
    # busy_timeout first: switching a fresh file to WAL and creating the schema can meet
    # another process doing the same.
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
    # Only takes on a file without tables yet (a new database): its free pages can then be handed
    # back to the file system (retention, ``PRAGMA incremental_vacuum``); an older file keeps its
    # mode and reuses them (docs/RELIABILITY.md "Retention").
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.executescript(schema)
            break
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(0.01)
    if path != ":memory:" and str(mode).lower() != "wal":
        conn.close()
        raise sqlite3.OperationalError(f"cannot switch {path} to WAL (journal_mode={mode})")
    return conn


def execute_batch(conn: sqlite3.Connection, ops: list[Op]) -> list[tuple[bool, Any]]:
    """Run ``ops`` in one transaction, each isolated (a SAVEPOINT each when there are several):
    an operation's own exception rolls back its writes only and is its result; a failing
    BEGIN/COMMIT fails every operation with ``store_unavailable``. Returns (ok, value) per op.

    Consecutive operations of one :class:`MergeableOp` type run as one (``run_many``: one
    multi-row statement per table instead of a few statements and a savepoint per operation;
    fewer sqlite calls, so fewer GIL round trips for this thread). Should the merged run raise,
    its writes are rolled back and each operation runs alone, isolated as above."""
    if len(ops) == 1:  # the common case when idle: no savepoint needed, the transaction is the op's
        return [_run_alone(conn, ops[0])]
    results: list[tuple[bool, Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            i = 0
            while i < len(ops):
                j = i + 1
                run_many = getattr(ops[i], "run_many", None)
                if run_many is not None:
                    while j < len(ops) and type(ops[j]) is type(ops[i]):
                        j += 1
                if j - i > 1 and run_many is not None and _merged(conn, run_many, ops[i:j], results):
                    i = j
                    continue
                for op in ops[i:j]:
                    conn.execute("SAVEPOINT op")
                    try:
                        value = op(conn)
                    except Exception as exc:
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                        results.append((False, _store_error(exc)))
                    else:
                        conn.execute("RELEASE op")
                        results.append((True, value))
                i = j
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except Exception as exc:
        results = [(False, _transaction_failed(exc))] * len(ops)
    return results


class MergeableOp(Protocol):
    """An operation the worker may run together with the consecutive operations of its type."""

    def __call__(self, conn: sqlite3.Connection) -> Any: ...

    def run_many(self, conn: sqlite3.Connection, ops: Sequence[Any]) -> list[Any]:
        """Run ``ops`` (this one among them, all of this type, in order) as one; their values."""
        ...


def _merged(
    conn: sqlite3.Connection,
    run_many: Callable[[sqlite3.Connection, Sequence[Any]], list[Any]],
    ops: Sequence[Op],
    results: list[tuple[bool, Any]],
) -> bool:
    """Run ``ops`` as one under a savepoint; False (nothing written) when that raised."""
    conn.execute("SAVEPOINT many")
    try:
        values = run_many(conn, ops)
    except Exception:
        conn.execute("ROLLBACK TO many")
        conn.execute("RELEASE many")
        return False
    conn.execute("RELEASE many")
    results.extend((True, v) for v in values)
    return True


def _run_alone(conn: sqlite3.Connection, op: Op) -> tuple[bool, Any]:
    """One operation in its own transaction: same outcomes as inside a batch."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except Exception as exc:
        return False, _transaction_failed(exc)
    return _op_then_commit(conn, op)


def _op_then_commit(conn: sqlite3.Connection, op: Op) -> tuple[bool, Any]:
    """Inside a transaction just begun: run ``op`` and commit, or roll back (its outcome)."""
    try:
        value = op(conn)
    except Exception as exc:
        _rollback(conn)
        return False, _store_error(exc)
    except BaseException:
        _rollback(conn)
        raise
    try:
        conn.execute("COMMIT")
    except Exception as exc:
        _rollback(conn)
        return False, _transaction_failed(exc)
    return True, value


def _loop_idle(loop: asyncio.AbstractEventLoop) -> bool:
    """Nothing else is ready to run on ``loop`` (CPython's event loops keep their ready callbacks
    in ``_ready``; a loop without it never counts as idle, so its operations always queue).
    Measured under a Go load generator: at 1 call in flight the queue was empty at 1,505 of 1,510
    writes, at 16 in flight at 201 of 2,143."""
    ready = getattr(loop, "_ready", None)
    return ready is not None and not ready


def _try_alone(conn: sqlite3.Connection, op: Op) -> tuple[bool, Any] | None:
    """:func:`_run_alone` on the event loop, which must not wait: ``conn``'s ``busy_timeout`` is
    0 (:attr:`SQLiteWorker._loop_waits`), so None (nothing run) when another connection holds
    the write lock. Once BEGIN IMMEDIATE holds it, nothing else in the transaction waits on
    another connection (WAL; this connection never checkpoints on commit)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return None  # busy (or any failure to begin): the writer thread tries, and reports
    return _op_then_commit(conn, op)


def _without_waiting(conn: sqlite3.Connection, mode: str, busy_timeout_ms: int) -> bool:
    """``wal_checkpoint(mode)`` (``RESTART``/``TRUNCATE``) with ``busy_timeout`` 0: True when the
    WAL was started over. Measured: such a checkpoint that waits for a reader holding a snapshot
    (busy_timeout 3 s) held the event loop's own commit, begun with ``busy_timeout`` 0, for the
    2.7 s it waited; without waiting it gives up at once and is tried again later."""
    try:
        conn.execute("PRAGMA busy_timeout=0")
        try:
            busy, _, _ = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    except sqlite3.Error:
        return False
    return not busy


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # no transaction left to roll back


def _transaction_failed(exc: Exception) -> CallgateError:
    return store_unavailable(f"SQLite transaction failed: {exc}")


def _store_error(exc: Exception) -> Exception:
    if isinstance(exc, sqlite3.Error):
        return store_unavailable(f"SQLite operation failed: {exc}")
    return exc


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _settle_all(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
