"""PostgreSQL idempotency store: one table shared by several sidecar pods.

Driver: psycopg 3 (async, fully typed) with psycopg_pool's ``AsyncConnectionPool``.

Atomic claims without a table lock:

1. ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit (one round trip). One row inserted
   means NEW. A concurrent uncommitted insert of the same key makes it wait for that
   transaction, so two claimers never both insert.
2. Otherwise a plain ``SELECT`` and the shared :func:`~callgate.store.idempotency.base.decide`:
   COMPLETED / IN_PROGRESS / MISMATCH / EXPIRED_REJECTED write nothing and are answered from
   that committed row (two round trips in all).
3. A take-over (released key, or expired under ``ExpiredPolicy.NEW``) runs in a READ COMMITTED
   transaction: ``SELECT ... FOR UPDATE`` locks the row, ``decide`` runs again on the locked
   row, and the ``UPDATE`` happens under the lock. A second taker blocked on the lock re-reads
   the row after the first commits, sees its claim and answers IN_PROGRESS / MISMATCH.

``complete`` / ``set_result`` / ``release`` are the same lock-read-decide-write pattern. The
schema is created by :meth:`PostgresIdempotencyStore.start` under a transaction-scoped
advisory lock, so pods starting together do not trip over each other's ``CREATE TABLE``.

Infrastructure failures (server unreachable, pool exhausted, connection lost, any driver
error) raise :class:`~callgate.base.errors.CallgateError` with ``store_unavailable``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, IsolationLevel
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from callgate.base.deadline import wait_budget
from callgate.base.errors import store_unavailable
from callgate.store.idempotency.base import (
    RECORD_STATES,
    Action,
    Change,
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    LockedRecordChanges,
    RecordState,
    answer,
    check_claim_args,
    check_now,
    decide,
    fresh_claim,
)

T = TypeVar("T")
Conn = AsyncConnection[Any]

TABLE = "callgate_idempotency"
_SCHEMA_LOCK = 0x63616C6C67617465  # "callgate": advisory lock id for schema creation
_MAX_ROUNDS = 100  # claim attempts when the row vanishes between statements (only a purge does that)

_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
  tenant TEXT NOT NULL, subject TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  digest TEXT NOT NULL, invocation_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in RECORD_STATES)})),
  outcome TEXT NOT NULL, result BYTEA, external_resource_id TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL,
  retention_us BIGINT NOT NULL CHECK (retention_us > 0),
  PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key))""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_expires ON {TABLE} (expires_at)",
)

_KEY_COLS = "tenant, subject, tool_name, tool_version, idem_key"
_VAL_COLS = (
    "digest, invocation_id, state, outcome, result, external_resource_id, created_at, updated_at, "
    "expires_at, retention_us"
)
_KEY_WHERE = "tenant=%s AND subject=%s AND tool_name=%s AND tool_version=%s AND idem_key=%s"
_INSERT = (
    f"INSERT INTO {TABLE} ({_KEY_COLS}, {_VAL_COLS}) VALUES ({', '.join(['%s'] * 15)}) "
    f"ON CONFLICT ({_KEY_COLS}) DO NOTHING"
)
_UPDATE = (
    f"UPDATE {TABLE} SET {', '.join(c.strip() + '=%s' for c in _VAL_COLS.split(','))} WHERE {_KEY_WHERE}"
)
_SELECT = f"SELECT {_VAL_COLS} FROM {TABLE} WHERE {_KEY_WHERE}"
_SELECT_FOR_UPDATE = _SELECT + " FOR UPDATE"


def _us(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


def _key_row(k: IdempotencyKey) -> tuple[str, ...]:
    return (k.tenant, k.subject, k.tool_name, k.tool_version, k.key)


def _val_row(r: IdempotencyRecord) -> tuple[Any, ...]:
    return (
        r.digest, r.invocation_id, r.state, r.outcome, r.result, r.external_resource_id,
        r.created_at, r.updated_at, r.expires_at, _us(r.retention),
    )  # fmt: skip


def _state(s: str) -> RecordState:
    for st in RECORD_STATES:
        if st == s:
            return st
    raise store_unavailable(f"corrupt idempotency record state {s!r}")


def _utc(v: Any) -> datetime:
    if not isinstance(v, datetime) or v.tzinfo is None:
        raise store_unavailable("corrupt idempotency record timestamp")
    return v.astimezone(UTC)


async def _select(conn: Conn, k: IdempotencyKey, *, lock: bool) -> IdempotencyRecord | None:
    cur = await conn.execute(_SELECT_FOR_UPDATE if lock else _SELECT, _key_row(k))
    row = await cur.fetchone()
    if row is None:
        return None
    return IdempotencyRecord(
        key=k, digest=row[0], invocation_id=row[1], state=_state(row[2]), outcome=row[3],
        result=None if row[4] is None else bytes(row[4]), external_resource_id=row[5],
        created_at=_utc(row[6]), updated_at=_utc(row[7]), expires_at=_utc(row[8]),
        retention=timedelta(microseconds=row[9]),
    )  # fmt: skip


async def _write(conn: Conn, r: IdempotencyRecord) -> None:
    await conn.execute(_UPDATE, (*_val_row(r), *_key_row(r.key)))


async def _configure(conn: Conn) -> None:
    await conn.set_autocommit(True)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    # Times are read back as aware datetimes and converted to UTC; a UTC session keeps logs of
    # the server (and anyone reading the table with psql) in the same zone as the records.
    await conn.execute("SET TIME ZONE 'UTC'")


class PostgresIdempotencyStore(LockedRecordChanges):
    """:class:`~callgate.store.idempotency.base.IdempotencyStore` on PostgreSQL (table
    ``callgate_idempotency``, created on :meth:`start`). Point every pod at the same database;
    the key's uniqueness and the row locks do the rest.

    ``dsn`` is a libpq connection string or URI (``postgresql://user@host:5432/db``; passwords
    belong in ``PGPASSWORD`` / ``~/.pgpass``, not in config files). ``min_size`` / ``max_size``
    bound the pool; ``pool_timeout`` is how long a call waits for a free connection;
    ``connect_timeout`` bounds each connection attempt and the wait in :meth:`start`.
    """

    in_store: bool = False
    """The keys live in their own table, beside whatever event store the sidecar has."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        if min_size < 0 or max_size < max(1, min_size):
            raise ValueError("need 0 <= min_size <= max_size and max_size >= 1")
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            open=False,
            min_size=min_size,
            max_size=max_size,
            timeout=pool_timeout,
            kwargs={"connect_timeout": max(1, int(connect_timeout))},
            configure=_configure,
            check=AsyncConnectionPool.check_connection,
            name="callgate-idempotency",
        )
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        try:
            await self._pool.open(wait=True, timeout=self._connect_timeout)
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for stmt in _SCHEMA:
                    await conn.execute(stmt)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            await self._pool.close()
            raise store_unavailable(f"cannot open PostgreSQL idempotency store: {_brief(exc)}") from exc
        self._started = True

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        if not self._started or self._pool.closed:
            raise store_unavailable("idempotency store is not started")
        try:
            async with self._pool.connection(timeout=wait_budget(self._pool_timeout)) as conn:
                yield conn
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise store_unavailable(f"PostgreSQL idempotency store failed: {_brief(exc)}") from exc

    async def _change(self, key: IdempotencyKey, change: Change) -> None:
        """Lock the row, compute the change (which may raise), write it; one transaction."""
        async with self._conn() as conn, conn.transaction():
            new = change(await _select(conn, key, lock=True))
            if new is not None:
                await _write(conn, new)

    # ------------------------------------------------------------------ API
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
        async with self._conn() as conn:
            for _ in range(_MAX_ROUNDS):
                cur = await conn.execute(_INSERT, row)
                if cur.rowcount == 1:
                    return ClaimResult(ClaimKind.NEW, fresh)
                # A duplicate: an answer that writes nothing needs no lock (it describes a
                # committed state at the time of the read). Only a take-over locks the row and
                # decides again under the lock, where a faster taker's claim is visible.
                existing = await _select(conn, key, lock=False)
                if existing is None:  # deleted since the INSERT (a purge): start over
                    continue
                d = decide(existing, digest, invocation_id, now, expired_policy)
                if d.action is Action.RETURN:
                    return answer(d, existing)
                async with conn.transaction():
                    existing = await _select(conn, key, lock=True)
                    if existing is None:
                        continue
                    d = decide(existing, digest, invocation_id, now, expired_policy)
                    if d.action is Action.TAKE_OVER:
                        await _write(conn, fresh)
                        return ClaimResult(ClaimKind.NEW, fresh)
                    return answer(d, existing)
        raise store_unavailable("idempotency record keeps disappearing")

    async def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        async with self._conn() as conn:
            return await _select(conn, key, lock=False)

    async def close(self) -> None:
        self._started = False
        await self._pool.close()


def _brief(exc: BaseException) -> str:
    """The first line of a driver error (never the DSN: psycopg does not echo passwords, but
    keep messages short and free of connection details)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


__all__ = ["PostgresIdempotencyStore", "TABLE"]
