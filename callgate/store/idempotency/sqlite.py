"""SQLite idempotency store (the embedded default).

The patterns of :mod:`callgate.store.sqlite`: one dedicated thread owns the connection, so the
event loop never blocks on disk; operations queued while a commit is in flight run together in
the next ``BEGIN IMMEDIATE`` transaction (group commit), each inside its own SAVEPOINT so a
failing operation is rolled back alone; a future resolves only after its transaction committed
(``synchronous=FULL`` by default: a claim is on disk before the tool runs).

Atomic claims: ``BEGIN IMMEDIATE`` takes the database's write lock before the first read, then
``INSERT ... ON CONFLICT DO NOTHING`` and, on conflict, a read and the decision of
:func:`callgate.store.idempotency.base.decide` happen under that lock. Inside one process the single
writer thread serializes claims; across processes sharing the file (several sidecars on one
host) the write lock does, with WAL and ``busy_timeout`` making the other writers wait instead
of failing. SQLite locking needs a local filesystem: for several hosts, use PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from callgate.base.errors import internal, store_unavailable
from callgate.store.idempotency.base import (
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
from callgate.store.sqlite_worker import SQLiteWorker

# ---------------------------------------------------------------------- the store

TABLE = "idempotency_keys"

SCHEMA = f"""
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
    return dt.astimezone(UTC).strftime(_TS)


def _parse_ts(s: str) -> datetime:
    """The inverse of :func:`_ts`. Text of exactly its shape is read by
    ``datetime.fromisoformat`` (~0.25 us against 8-22 us for ``strptime``, and a keyed Propose
    + Cancel reads six: docs/BENCHMARKS.md, "Issue 30: what a call costs at a low rate");
    anything else by ``strptime`` as before, which raises on what is not ``_TS``."""
    if len(s) == 27 and s[4] + s[7] + s[10] + s[13] + s[16] + s[19] + s[26] == "--T::.Z":
        return datetime.fromisoformat(s)
    return datetime.strptime(s, _TS).replace(tzinfo=UTC)


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
    raise store_unavailable(f"corrupt idempotency record state {s!r}")


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


# The read-modify-writes of each operation, on a connection inside a transaction: the standalone
# store runs each in its own, the event store (:mod:`callgate.store.sqlite`) runs them inside the
# transaction that writes the invocation they belong to.


def claim_op(
    c: sqlite3.Connection,
    key: IdempotencyKey,
    digest: str,
    invocation_id: str,
    now: datetime,
    retention: timedelta,
    expired_policy: ExpiredPolicy,
) -> ClaimResult:
    """Claim ``key`` under the transaction's write lock (see :func:`decide`)."""
    fresh = fresh_claim(key, digest, invocation_id, now, retention)
    if c.execute(_INSERT, (*_key_row(key), *_val_row(fresh))).rowcount == 1:
        return ClaimResult(ClaimKind.NEW, fresh)
    existing = _select(c, key)
    if existing is None:  # pragma: no cover - impossible under the write lock
        raise internal("idempotency record vanished")
    d = decide(existing, digest, invocation_id, now, expired_policy)
    if d.action is Action.TAKE_OVER:
        _write(c, fresh)
        return ClaimResult(ClaimKind.NEW, fresh)
    return answer(d, existing)


def complete_op(
    c: sqlite3.Connection,
    key: IdempotencyKey,
    invocation_id: str,
    outcome: str,
    external_resource_id: str,
    now: datetime,
) -> None:
    new = completed(_select(c, key), invocation_id, outcome, external_resource_id, now)
    if new is not None:
        _write(c, new)


def result_op(
    c: sqlite3.Connection, key: IdempotencyKey, invocation_id: str, result: bytes, now: datetime
) -> None:
    new = with_result(_select(c, key), invocation_id, result, now)
    if new is not None:
        _write(c, new)


def release_op(c: sqlite3.Connection, key: IdempotencyKey, invocation_id: str, now: datetime) -> None:
    new = released(_select(c, key), invocation_id, now)
    if new is not None:
        _write(c, new)


def select(c: sqlite3.Connection, key: IdempotencyKey) -> IdempotencyRecord | None:
    """The record of ``key``, or ``None``."""
    return _select(c, key)


def write(c: sqlite3.Connection, record: IdempotencyRecord) -> None:
    """Replace the stored record of ``record.key``."""
    _write(c, record)


class SQLiteIdempotencyStore:
    """:class:`~callgate.store.idempotency.base.IdempotencyStore` on one SQLite file.

    Standalone (``SQLiteIdempotencyStore(path)``) it owns its file and connection. The sidecar
    uses the keys of its event store instead (:meth:`callgate.store.sqlite.SQLiteStore.keys`,
    ``in_store`` true): the same table in the event database, on the event store's writer, so a
    key is claimed, completed and released in the transaction that writes its invocation.
    """

    in_store: bool = False
    """True when the keys live in the event store and follow its transactions."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        busy_timeout_ms: int = 5000,
        max_batch: int = 256,
        worker: SQLiteWorker | None = None,
    ) -> None:
        if worker is not None:  # the event store's own connection (see in_store)
            self._worker = worker
            self._owns_worker = False
            self.in_store = True
            return
        self._owns_worker = True
        self._worker = SQLiteWorker(
            path, schema=SCHEMA, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms,
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
        return await self._worker.run(
            lambda c: claim_op(c, key, digest, invocation_id, now, retention, expired_policy)
        )

    async def complete(
        self,
        key: IdempotencyKey,
        invocation_id: str,
        *,
        outcome: str,
        external_resource_id: str,
        now: datetime,
    ) -> None:
        now = check_now(now)
        check_outcome(outcome)
        await self._worker.run(
            lambda c: complete_op(c, key, invocation_id, outcome, external_resource_id, now)
        )

    async def set_result(
        self, key: IdempotencyKey, invocation_id: str, result: bytes, *, now: datetime
    ) -> None:
        now = check_now(now)
        await self._worker.run(lambda c: result_op(c, key, invocation_id, result, now))

    async def release(self, key: IdempotencyKey, invocation_id: str, *, now: datetime) -> None:
        now = check_now(now)
        await self._worker.run(lambda c: release_op(c, key, invocation_id, now))

    async def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        return await self._worker.run(lambda c: _select(c, key))

    async def close(self) -> None:
        if self._owns_worker:  # the event store closes its own connection
            await self._worker.close()
