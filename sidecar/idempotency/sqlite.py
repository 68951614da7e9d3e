"""SQLite idempotency store (the embedded default).

The patterns of :mod:`sidecar.store.sqlite`: one dedicated thread owns the connection, so the
event loop never blocks on disk; operations queued while a commit is in flight run together in
the next ``BEGIN IMMEDIATE`` transaction (group commit), each inside its own SAVEPOINT so a
failing operation is rolled back alone; a future resolves only after its transaction committed
(``synchronous=FULL`` by default: a claim is on disk before the tool runs).

Atomic claims: ``BEGIN IMMEDIATE`` takes the database's write lock before the first read, then
``INSERT ... ON CONFLICT DO NOTHING`` and, on conflict, a read and the decision of
:func:`sidecar.idempotency.base.decide` happen under that lock. Inside one process the single
writer thread serializes claims; across processes sharing the file (several sidecars on one
host) the write lock does, with WAL and ``busy_timeout`` making the other writers wait instead
of failing. SQLite locking needs a local filesystem: for several hosts, use PostgreSQL.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from sidecar.errors import CallgateError, ErrorCode
from sidecar.idempotency.base import (
    RECORD_STATES,
    Action,
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    RecordState,
    answer,
    check_claim_args,
    check_now,
    check_outcome,
    completed,
    decide,
    fresh_claim,
    released,
    with_result,
)

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


class SQLiteWorker:
    """One SQLite connection on its own thread, group commit with a SAVEPOINT per operation.

    ``run(op)`` queues ``op(conn)`` and resolves with its return value once the transaction that
    ran it committed, or raises what ``op`` raised (its writes rolled back to its savepoint; the
    other operations of the batch are unaffected). If the BEGIN or COMMIT itself fails (disk,
    lock timeout), every operation of the batch fails with ``store_unavailable``. ``sqlite3``
    errors raised by an operation become ``store_unavailable`` too; other exceptions pass through.

    Not specific to idempotency: :mod:`sidecar.store.sqlite` could be rebuilt on it.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        schema: str,
        synchronous: str = "full",
        busy_timeout_ms: int = 5000,
        max_batch: int = 256,
        name: str = "callgate-sqlite",
    ) -> None:
        self._path = str(path)
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._sync = synchronous.upper()
        if self._sync not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNC_MODES)}")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must be >= 0")
        self._busy_ms = busy_timeout_ms
        self._schema = schema
        self._max_batch = max_batch
        self._q: queue.SimpleQueue[tuple[Op, asyncio.AbstractEventLoop, asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._ready = threading.Event()
        self._init_error: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._init_error is not None:
            raise CallgateError(
                code=ErrorCode.STORE_UNAVAILABLE, message=f"cannot open SQLite database: {self._init_error}"
            )

    # ------------------------------------------------------------------ worker thread
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, timeout=self._busy_ms / 1000)
        # busy_timeout first: switching a fresh file to WAL and creating the schema can meet
        # another process doing the same.
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_ms)}")
        deadline = time.monotonic() + self._busy_ms / 1000
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                conn.execute(f"PRAGMA synchronous={self._sync}")
                conn.executescript(self._schema)
                break
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if self._path != ":memory:" and str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch {self._path} to WAL (journal_mode={mode})")
        return conn

    def _main(self) -> None:
        try:
            conn = self._open()
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor
            self._init_error = exc
            self._ready.set()
            return
        self._ready.set()
        stop = False
        try:
            while not stop:
                first = self._q.get()
                if first is None:
                    break
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                self._run_batch(conn, batch)
        finally:
            conn.close()
            self._fail_pending()

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _, loop, fut = item
                err = CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message="store is closed")
                loop.call_soon_threadsafe(_settle_all, [(fut, False, err)])

    def _run_batch(
        self, conn: sqlite3.Connection, batch: list[tuple[Op, asyncio.AbstractEventLoop, asyncio.Future[Any]]]
    ) -> None:
        results: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for op, _, _ in batch:
                    conn.execute("SAVEPOINT op")
                    try:
                        value = op(conn)
                    except Exception as exc:  # noqa: BLE001 - the op's own failure, isolated
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                        results.append((False, _store_error(exc)))
                    else:
                        conn.execute("RELEASE op")
                        results.append((True, value))
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        except Exception as exc:  # noqa: BLE001 - nothing of the batch is durable
            err = CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message=f"SQLite transaction failed: {exc}")
            results = [(False, err)] * len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for (ok, value), (_, loop, fut) in zip(results, batch):
            by_loop.setdefault(loop, []).append((fut, ok, value))
        for loop, items in by_loop.items():  # one wake-up per loop per batch
            try:
                loop.call_soon_threadsafe(_settle_all, items)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass

    # ------------------------------------------------------------------ API
    async def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._closing or not self._thread.is_alive():
            raise CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message="store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._q.put((op, loop, fut))
        return await fut

    async def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._q.put(None)
        if self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)


def _store_error(exc: Exception) -> Exception:
    if isinstance(exc, sqlite3.Error):
        return CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message=f"SQLite operation failed: {exc}")
    return exc


def _settle_all(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


# ---------------------------------------------------------------------- the store

TABLE = "idempotency_keys"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  tenant TEXT NOT NULL, subject TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  digest TEXT NOT NULL, invocation_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in RECORD_STATES)})),
  outcome TEXT NOT NULL, result BLOB, external_resource_id TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT NOT NULL,
  retention_us INTEGER NOT NULL CHECK (retention_us > 0),
  PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key));
CREATE INDEX IF NOT EXISTS {TABLE}_expires ON {TABLE} (expires_at);
"""

_KEY_COLS = "tenant, subject, tool_name, tool_version, idem_key"
_VAL_COLS = (
    "digest, invocation_id, state, outcome, result, external_resource_id, created_at, updated_at, "
    "expires_at, retention_us"
)
_KEY_WHERE = "tenant=? AND subject=? AND tool_name=? AND tool_version=? AND idem_key=?"
_INSERT = (
    f"INSERT INTO {TABLE} ({_KEY_COLS}, {_VAL_COLS}) VALUES ({', '.join('?' * 15)}) "
    f"ON CONFLICT ({_KEY_COLS}) DO NOTHING"
)
_UPDATE = f"UPDATE {TABLE} SET {', '.join(c.strip() + '=?' for c in _VAL_COLS.split(','))} WHERE {_KEY_WHERE}"
_SELECT = f"SELECT {_VAL_COLS} FROM {TABLE} WHERE {_KEY_WHERE}"

_TS = "%Y-%m-%dT%H:%M:%S.%fZ"


def _ts(dt: datetime) -> str:
    """Fixed-width UTC text (microseconds always present), so text order is time order."""
    return dt.astimezone(timezone.utc).strftime(_TS)


def _parse_ts(s: str) -> datetime:
    return datetime.strptime(s, _TS).replace(tzinfo=timezone.utc)


def _us(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


def _key_row(k: IdempotencyKey) -> tuple[str, ...]:
    return (k.tenant, k.subject, k.tool_name, k.tool_version, k.key)


def _val_row(r: IdempotencyRecord) -> tuple[Any, ...]:
    return (
        r.digest, r.invocation_id, r.state, r.outcome, r.result, r.external_resource_id,
        _ts(r.created_at), _ts(r.updated_at), _ts(r.expires_at), _us(r.retention),
    )  # fmt: skip


def _state(s: str) -> RecordState:
    for st in RECORD_STATES:
        if st == s:
            return st
    raise CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message=f"corrupt idempotency record state {s!r}")


def _select(c: sqlite3.Connection, k: IdempotencyKey) -> IdempotencyRecord | None:
    row = c.execute(_SELECT, _key_row(k)).fetchone()
    if row is None:
        return None
    return IdempotencyRecord(
        key=k, digest=row[0], invocation_id=row[1], state=_state(row[2]), outcome=row[3],
        result=None if row[4] is None else bytes(row[4]), external_resource_id=row[5],
        created_at=_parse_ts(row[6]), updated_at=_parse_ts(row[7]), expires_at=_parse_ts(row[8]),
        retention=timedelta(microseconds=row[9]),
    )  # fmt: skip


def _write(c: sqlite3.Connection, r: IdempotencyRecord) -> None:
    c.execute(_UPDATE, (*_val_row(r), *_key_row(r.key)))


class SQLiteIdempotencyStore:
    """:class:`~sidecar.idempotency.base.IdempotencyStore` on one SQLite file.

    The table ``idempotency_keys`` may live in its own file (recommended: the event store's
    writes then never wait on this lock) or in the event store's file; the two use separate
    connections either way. Several processes on one host may share the file.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        busy_timeout_ms: int = 5000,
        max_batch: int = 256,
    ) -> None:
        self._worker = SQLiteWorker(
            path, schema=_SCHEMA, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms,
            max_batch=max_batch, name="callgate-idempotency",
        )  # fmt: skip

    async def start(self) -> None:
        """Nothing to do: the file is opened and the schema created by the constructor."""

    async def claim(
        self,
        key: IdempotencyKey,
        digest: str,
        invocation_id: str,
        *,
        now: datetime,
        retention: timedelta,
        expired_policy: ExpiredPolicy,
    ) -> ClaimResult:
        now = check_now(now)
        check_claim_args(digest, invocation_id, retention)
        fresh = fresh_claim(key, digest, invocation_id, now, retention)
        row = (*_key_row(key), *_val_row(fresh))

        def op(c: sqlite3.Connection) -> ClaimResult:
            if c.execute(_INSERT, row).rowcount == 1:
                return ClaimResult(ClaimKind.NEW, fresh)
            existing = _select(c, key)
            if existing is None:  # pragma: no cover - impossible under the write lock
                raise CallgateError(code=ErrorCode.INTERNAL, message="idempotency record vanished")
            d = decide(existing, digest, invocation_id, now, expired_policy)
            if d.action is Action.TAKE_OVER:
                _write(c, fresh)
                return ClaimResult(ClaimKind.NEW, fresh)
            return answer(d, existing)

        return await self._worker.run(op)

    async def complete(
        self, key: IdempotencyKey, invocation_id: str, *, outcome: str, external_resource_id: str, now: datetime
    ) -> None:
        now = check_now(now)
        check_outcome(outcome)

        def op(c: sqlite3.Connection) -> None:
            new = completed(_select(c, key), invocation_id, outcome, external_resource_id, now)
            if new is not None:
                _write(c, new)

        await self._worker.run(op)

    async def set_result(self, key: IdempotencyKey, invocation_id: str, result: bytes, *, now: datetime) -> None:
        now = check_now(now)

        def op(c: sqlite3.Connection) -> None:
            new = with_result(_select(c, key), invocation_id, result, now)
            if new is not None:
                _write(c, new)

        await self._worker.run(op)

    async def release(self, key: IdempotencyKey, invocation_id: str, *, now: datetime) -> None:
        now = check_now(now)

        def op(c: sqlite3.Connection) -> None:
            new = released(_select(c, key), invocation_id, now)
            if new is not None:
                _write(c, new)

        await self._worker.run(op)

    async def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        return await self._worker.run(lambda c: _select(c, key))

    async def close(self) -> None:
        await self._worker.close()
