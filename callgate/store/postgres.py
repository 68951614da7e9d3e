"""PostgreSQL store: every record of :mod:`callgate.store.base` (sessions, tool views,
invocations, events, attempts, results, usage, redemptions, snapshot records) and the
idempotency keys in one database shared by several sidecar pods.

One answer, one transaction, as on SQLite: each :class:`~callgate.store.base.Store` write runs
in one READ COMMITTED transaction on one pooled connection (psycopg 3, ``AsyncConnectionPool``),
committed before the call returns; the key of an invocation is claimed, completed, released and
given its result in that same transaction (:func:`~callgate.store.base.key_follows`). Claims
take the key's row (``INSERT ... ON CONFLICT DO NOTHING``, else ``SELECT ... FOR UPDATE`` and
:func:`~callgate.store.idempotency.base.decide`), so of two pods racing on one key exactly one
writes its invocation; the other is told who holds it and answers as a replay. Compare-and-set
writes are ``UPDATE ... WHERE state = expected``; events appended to an existing invocation lock
its row first, so their sequence numbers never collide. Events are append-only (a trigger).

The schema is versioned (:mod:`callgate.store.migrations`), migrated at :meth:`PostgresStore.start`
under a transaction-scoped advisory lock (pods starting together do not race). The keys table is
the one the shared PostgreSQL idempotency backend used (``callgate_idempotency``, same columns),
so a database that served as the shared key store is adopted with its keys.

Infrastructure failures (server unreachable, pool exhausted, connection lost, any driver
error) raise :class:`~callgate.base.errors.CallgateError` with ``store_unavailable``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection, IsolationLevel
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from callgate.base.clock import rfc3339
from callgate.base.deadline import wait_budget
from callgate.base.errors import CallgateError, store_unavailable
from callgate.base.states import State
from callgate.store import packed
from callgate.store.base import (
    PAST_DEADLINE_STATES,
    AttemptRecord,
    DecisionRecord,
    EventRecord,
    FedResultRecord,
    InvocationRecord,
    KeyClaim,
    Move,
    ResultRecord,
    SessionRecord,
    ToolViewRecord,
    Usage,
    key_follows,
    key_of,
    needs_arguments,
    with_arguments,
)
from callgate.store.idempotency import postgres as keys_pg
from callgate.store.idempotency.base import (
    Action,
    Change,
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    IdempotencyStore,
    LockedRecordChanges,
    answer,
    check_claim_args,
    check_now,
    decide,
    fresh_claim,
    released,
)
from callgate.store.labels import label_pg
from callgate.store.meters import PG_EXACT_MIGRATION, PG_MIGRATION, PostgresMeters, settle_pg, settle_pg_many
from callgate.store.migrations import SCHEMA_VERSION_TABLE, Migration, check_sequence, too_new
from callgate.store.retention import TERMINAL_SQL, PurgeSql, RecordKind, Tombstone, Trail, tombstone_row
from callgate.store.sqlite import (
    _ATTEMPTS,
    _DECISION_COLS,
    _FED_COLS,
    _INVOCATIONS,
    _TOOL_VIEW_COLS,
    _dump,
    _tool_view,
    _tool_view_row,
    _usage_row,
)

log = logging.getLogger("callgate.store")
Conn = AsyncConnection[Any]

_SCHEMA_LOCK: Final = 0x63616C6C67617465  # "callgate": the advisory lock of schema changes
_VERSION_TABLE: Final = f"callgate_{SCHEMA_VERSION_TABLE}"

PURGING_SETTING: Final = "callgate.retention"
"""Set (``SET LOCAL``-style, this transaction only) by a retention delete: the append-only
triggers of events and decisions let its DELETEs through, nothing else."""

# Migrations, version by version. Never edit or renumber a released one; append.
_V1: Final = f"""
CREATE TABLE IF NOT EXISTS callgate_sessions (
  session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, subject TEXT NOT NULL,
  timezone TEXT NOT NULL, locale TEXT NOT NULL, budgets TEXT NOT NULL,
  tool_allowlist TEXT NOT NULL, opened_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS callgate_tool_views (
  session_id TEXT NOT NULL, model_call_id TEXT NOT NULL, tools TEXT NOT NULL,
  spec_digests TEXT NOT NULL, tool_set_digest TEXT NOT NULL, created_at TEXT NOT NULL,
  seq BIGSERIAL, PRIMARY KEY (session_id, model_call_id));
CREATE TABLE IF NOT EXISTS callgate_invocations (
  invocation_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, model_call_id TEXT NOT NULL,
  proposal_id TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  tenant TEXT NOT NULL, subject TEXT NOT NULL, state TEXT NOT NULL, raw_arguments BYTEA NOT NULL,
  digest TEXT NOT NULL, normalized_arguments BYTEA NOT NULL, decision TEXT, rejection TEXT,
  idempotency_key TEXT NOT NULL, deadline TEXT NOT NULL, confirmation_expires_at TEXT NOT NULL,
  policy_revision TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, external_resource_id TEXT NOT NULL DEFAULT '',
  commit_time TEXT NOT NULL DEFAULT '', cancel_requested_at TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS callgate_invocations_pending ON callgate_invocations (state, tenant)
  WHERE confirmation_expires_at != '';
CREATE TABLE IF NOT EXISTS callgate_events (
  invocation_id TEXT NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE,
  at TEXT NOT NULL, kind TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (invocation_id, seq));
CREATE TABLE IF NOT EXISTS callgate_attempts (
  attempt_id TEXT PRIMARY KEY, invocation_id TEXT NOT NULL, number INTEGER NOT NULL,
  executor_id TEXT NOT NULL, jti TEXT NOT NULL, started_at TEXT NOT NULL,
  credential_expires_at TEXT NOT NULL, outcome TEXT NOT NULL, failure_class TEXT NOT NULL,
  finished_at TEXT NOT NULL, external_resource_id TEXT NOT NULL, http_status INTEGER NOT NULL,
  cost_micros BIGINT NOT NULL, retry_reason TEXT NOT NULL, retry_after TEXT NOT NULL,
  UNIQUE (invocation_id, number));
CREATE TABLE IF NOT EXISTS callgate_results (
  invocation_id TEXT PRIMARY KEY, status TEXT NOT NULL, message BYTEA NOT NULL,
  truncated BOOLEAN NOT NULL, remaining BYTEA NOT NULL, page_token TEXT NOT NULL,
  redactions INTEGER NOT NULL, created_at TEXT NOT NULL, nonce TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS callgate_usage (
  session_id TEXT PRIMARY KEY, model_calls BIGINT NOT NULL, tool_calls BIGINT NOT NULL,
  result_bytes BIGINT NOT NULL, cost_micros BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS callgate_redemptions (
  attempt_id TEXT NOT NULL, secret_name TEXT NOT NULL, at TEXT NOT NULL,
  PRIMARY KEY (attempt_id, secret_name));
CREATE TABLE IF NOT EXISTS callgate_snapshots (
  seq BIGSERIAL PRIMARY KEY, revision TEXT NOT NULL, at TEXT NOT NULL, detail TEXT NOT NULL);
CREATE OR REPLACE FUNCTION callgate_events_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'events are append-only'; END $$;
DROP TRIGGER IF EXISTS callgate_events_append_only ON callgate_events;
CREATE TRIGGER callgate_events_append_only BEFORE UPDATE OR DELETE ON callgate_events
  FOR EACH ROW EXECUTE FUNCTION callgate_events_append_only();
CREATE TABLE IF NOT EXISTS {keys_pg.TABLE} (
  tenant TEXT NOT NULL, subject TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  digest TEXT NOT NULL, invocation_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('claimed', 'completed', 'released')),
  outcome TEXT NOT NULL, result BYTEA, external_resource_id TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL,
  retention_us BIGINT NOT NULL CHECK (retention_us > 0),
  PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key));
CREATE INDEX IF NOT EXISTS {keys_pg.TABLE}_expires ON {keys_pg.TABLE} (expires_at);
CREATE INDEX IF NOT EXISTS {keys_pg.TABLE}_invocation ON {keys_pg.TABLE} (invocation_id)
"""

_V2: Final = """
CREATE INDEX IF NOT EXISTS callgate_invocations_open_deadline ON callgate_invocations (deadline)
  WHERE state IN ('AUTHORIZED', 'PREPARED');
CREATE TABLE IF NOT EXISTS callgate_fed_results (
  invocation_id TEXT NOT NULL, session_id TEXT NOT NULL, model_call_id TEXT NOT NULL,
  at TEXT NOT NULL, message_sha256 TEXT NOT NULL, seq BIGSERIAL,
  PRIMARY KEY (invocation_id, session_id, model_call_id));
CREATE TABLE IF NOT EXISTS callgate_decisions (
  decision_id TEXT PRIMARY KEY, at TEXT NOT NULL, tenant TEXT NOT NULL, subject TEXT NOT NULL,
  capability TEXT NOT NULL, resource TEXT NOT NULL, context_digest TEXT NOT NULL,
  context_keys TEXT NOT NULL, decision TEXT NOT NULL, policy_revision TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_span_id TEXT NOT NULL);
CREATE OR REPLACE FUNCTION callgate_decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'decisions are append-only'; END $$;
DROP TRIGGER IF EXISTS callgate_decisions_append_only ON callgate_decisions;
CREATE TRIGGER callgate_decisions_append_only BEFORE UPDATE OR DELETE ON callgate_decisions
  FOR EACH ROW EXECUTE FUNCTION callgate_decisions_append_only()
"""

_V3: Final = f"""
CREATE OR REPLACE FUNCTION callgate_events_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN IF TG_OP = 'DELETE' AND current_setting('{PURGING_SETTING}', true) = 'on' THEN RETURN OLD; END IF; RAISE EXCEPTION 'events are append-only'; END $$;
CREATE OR REPLACE FUNCTION callgate_decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN IF TG_OP = 'DELETE' AND current_setting('{PURGING_SETTING}', true) = 'on' THEN RETURN OLD; END IF; RAISE EXCEPTION 'decisions are append-only'; END $$;
CREATE TABLE IF NOT EXISTS callgate_expired_invocations (
  invocation_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, tool_name TEXT NOT NULL, state TEXT NOT NULL,
  updated_at TEXT NOT NULL, expired_at TEXT NOT NULL, exported_to TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS callgate_expired_invocations_at ON callgate_expired_invocations (expired_at);
CREATE INDEX IF NOT EXISTS callgate_invocations_ended ON callgate_invocations (updated_at)
  WHERE state IN {TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS callgate_decisions_at ON callgate_decisions (at);
CREATE TABLE IF NOT EXISTS callgate_retention_marks (
  kind TEXT PRIMARY KEY, updated_at TEXT NOT NULL, invocation_id TEXT NOT NULL)
"""

_V6: Final = """
ALTER TABLE callgate_events DROP CONSTRAINT IF EXISTS callgate_events_event_id_key;
ALTER TABLE callgate_events ALTER COLUMN event_id DROP NOT NULL, ALTER COLUMN at DROP NOT NULL,
  ALTER COLUMN data TYPE BYTEA USING (CASE WHEN kind = 'stages' THEN decode(data, 'base64') ELSE convert_to(data, 'UTF8') END)
"""
"""No ``event_id`` index; ``event_id`` and ``at`` NULL when they are the invocation's; ``data``
as bytes (a packed row's compressed stages were base64 text) (:mod:`callgate.store.packed`)."""

_V8: Final = r"""
CREATE OR REPLACE FUNCTION callgate_v8_digest(t TEXT) RETURNS BYTEA LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN t ~ '^sha256:[0-9a-f]{64}$' THEN decode(substr(t, 8), 'hex') WHEN t = '' THEN ''::bytea ELSE '\xff'::bytea || convert_to(t, 'UTF8') || CASE WHEN octet_length(convert_to(t, 'UTF8')) = 31 THEN '\xff'::bytea ELSE ''::bytea END END $$;
ALTER TABLE callgate_invocations ALTER COLUMN digest TYPE BYTEA USING callgate_v8_digest(digest),
  ALTER COLUMN policy_revision TYPE BYTEA USING callgate_v8_digest(policy_revision);
DROP FUNCTION callgate_v8_digest(TEXT)
"""
"""An invocation's ``digest`` and ``policy_revision`` as bytes (:func:`_digest_bytes`; issue 34
item 2): ``sha256:`` and 64 hex digits (72 B stored) become the 32 bytes they name (33 B)."""

MIGRATIONS: Final = (
    Migration(1, "every record and the idempotency keys (one commit per answer)", _V1),
    Migration(2, "deadline sweep index, tool messages fed into model calls, Authorize decisions", _V2),
    Migration(3, "retention: deletable trails while purging, tombstones, age indexes", _V3),
    Migration(4, packed.PACKED_MIGRATION, ""),
    Migration(5, "meters: reservations and bucketed totals (issue 30)", PG_MIGRATION),
    Migration(6, packed.EVENTS_MIGRATION, _V6),
    Migration(7, "meters: exact windows (per-call entries, running totals; issue 30)", PG_EXACT_MIGRATION),
    Migration(8, "invocations: digest and policy revision as bytes (issue 34 item 2)", _V8),
)
"""The PostgreSQL store's schema, version by version (:mod:`callgate.store.migrations`)."""


_UPSERT_TOOL_VIEW: Final = (
    f"INSERT INTO callgate_tool_views ({_TOOL_VIEW_COLS}) VALUES (%s,%s,%s,%s,%s,%s) "
    "ON CONFLICT (session_id, model_call_id) DO UPDATE SET tools=excluded.tools, "
    "spec_digests=excluded.spec_digests, tool_set_digest=excluded.tool_set_digest, "
    "created_at=excluded.created_at"
)
"""A tool view, replacing the one of the same model call (a repeated ListTools)."""


def _statements(sql: str) -> list[str]:
    """Split on ``;`` at line ends (function bodies are ``$$``-quoted on one line)."""
    return [s.strip() for s in sql.split(";\n") if s.strip()]


# --------------------------------------------------------------------------- SQL, next to SQLite's
_PURGE: Final = PurgeSql("callgate_", "%s", keys_pg.TABLE)
_INV_COLS: Final = _INVOCATIONS.column_list
_ATT_COLS: Final = _ATTEMPTS.column_list
_INSERT_INVOCATION: Final = (
    f"INSERT INTO callgate_invocations ({_INV_COLS}) VALUES ({','.join(['%s'] * len(_INVOCATIONS.columns))})"
)
_INSERT_ATTEMPT: Final = (
    f"INSERT INTO callgate_attempts ({_ATT_COLS}) VALUES ({','.join(['%s'] * len(_ATTEMPTS.columns))})"
)
_CAS_SETS: Final = ", ".join(f"{col}=%s" for col in _INVOCATIONS.columns[1:])
_ADD_USAGE: Final = (
    "INSERT INTO callgate_usage VALUES (%s,%s,%s,%s,%s) ON CONFLICT (session_id) DO UPDATE SET "
    "model_calls=callgate_usage.model_calls+excluded.model_calls, "
    "tool_calls=callgate_usage.tool_calls+excluded.tool_calls, "
    "result_bytes=callgate_usage.result_bytes+excluded.result_bytes, "
    "cost_micros=callgate_usage.cost_micros+excluded.cost_micros"
)
_SELECT_EVENTS: Final = packed.select_events("callgate_", "%s")


_SHA256: Final = "sha256:"
_DIGEST_WIDTH: Final = 32
_TEXT_MARK: Final = b"\xff"
"""Starts (and, to keep it off 32 bytes, may end) a stored value that is not a SHA-256 digest:
never in UTF-8 text, so the text is exactly what lies between the marks."""


def _digest_bytes(text: str) -> bytes:
    """How ``digest`` and ``policy_revision`` are stored (migration 8): ``sha256:`` and 64
    lower-case hex digits as the 32 bytes they name; ``""`` as no bytes; any other text as its
    UTF-8 between :data:`_TEXT_MARK` s, never 32 bytes long. :func:`_digest_text` reads it back."""
    if len(text) == len(_SHA256) + 2 * _DIGEST_WIDTH and text.startswith(_SHA256):
        try:
            raw = bytes.fromhex(text[len(_SHA256) :])
        except ValueError:
            raw = b""
        if raw.hex() == text[len(_SHA256) :]:
            return raw
    if not text:
        return b""
    marked = _TEXT_MARK + text.encode()
    return marked + _TEXT_MARK if len(marked) == _DIGEST_WIDTH else marked


def _digest_text(stored: bytes | memoryview | None) -> str:
    """The text :func:`_digest_bytes` stored."""
    raw = bytes(stored or b"")
    if len(raw) == _DIGEST_WIDTH:
        return _SHA256 + raw.hex()
    return raw[1:].rstrip(_TEXT_MARK).decode() if raw else ""


_DIGEST_COLUMNS: Final = tuple(_INVOCATIONS.columns.index(c) for c in ("digest", "policy_revision"))


def _inv_row(record: InvocationRecord) -> tuple[Any, ...]:
    """The row of an invocation as this store keeps it (:func:`_digest_bytes`)."""
    row = list(_INVOCATIONS.row(record))
    for i in _DIGEST_COLUMNS:
        row[i] = _digest_bytes(row[i])
    return tuple(row)


def _inv_record(row: Sequence[Any]) -> InvocationRecord:
    values = list(row)
    for i in _DIGEST_COLUMNS:
        values[i] = _digest_text(values[i])
    return _INVOCATIONS.record(values)


def _invocation(row: Sequence[Any] | None) -> InvocationRecord | None:
    return None if row is None else _inv_record(row)


def _event_rows(rows: list[Any]) -> list[Any]:
    """Rows of :data:`_SELECT_EVENTS` with the invocation's digest and revision as text."""
    return [(*r[:11], _digest_text(r[11]), _digest_text(r[12]), r[13]) for r in rows]


async def _cas(
    conn: Conn, record: InvocationRecord, expected: State, extra: str = "", args: tuple[Any, ...] = ()
) -> bool:
    row = _inv_row(record)
    cur = await conn.execute(
        f"UPDATE callgate_invocations SET {_CAS_SETS} WHERE invocation_id=%s AND state=%s{extra}",
        (*row[1:], record.invocation_id, expected.value, *args),
    )
    return cur.rowcount == 1


async def _insert_events(
    conn: Conn, events: Sequence[EventRecord], inv: InvocationRecord | None = None
) -> None:
    """Insert events; ``inv``: the invocation created with them (its first events, numbered
    from 1: :func:`callgate.store.packed.new_event_rows`)."""
    if not events:
        return
    if events[0].seq == 0:  # appended to an existing invocation: lock it, then the next numbers
        inv_id = events[0].invocation_id
        await conn.execute("SELECT 1 FROM callgate_invocations WHERE invocation_id=%s FOR UPDATE", (inv_id,))
        cur = await conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM callgate_events WHERE invocation_id=%s", (inv_id,)
        )
        row = await cur.fetchone()
        last = int(row[0]) if row else 0
        events = [replace(e, seq=last + i) for i, e in enumerate(events, 1)]
    rows = (
        packed.new_event_rows(events, inv, binary=True)
        if inv is not None
        else [packed.event_row(e, binary=True) for e in events]
    )
    values = ",".join(["(" + ",".join(["%s"] * packed.EVENT_WIDTH) + ")"] * len(rows))
    await conn.execute(
        f"INSERT INTO callgate_events ({packed.EVENT_COLUMNS}) VALUES {values}", [v for r in rows for v in r]
    )


async def _follow_key(
    conn: Conn, record: InvocationRecord, message: bytes | None = None, *, settle: bool = True
) -> None:
    """Bring the key ``record`` holds in line with its new state (:func:`key_follows`), and its
    meter reservations (:func:`~callgate.store.meters.settle_pg`; ``settle`` False: the caller
    settled them already, with other invocations')."""
    if settle:
        await settle_pg(conn, record.invocation_id, record.state)
    if not record.idempotency_key:
        return
    rec = await keys_pg._select(conn, key_of(record), lock=True)
    new = key_follows(rec, record, message)
    if new is not None:
        await keys_pg._write(conn, new)


async def _claim(conn: Conn, claim: KeyClaim, invocation_id: str) -> ClaimResult:
    """Claim inside the caller's transaction: insert, or lock the row and decide."""
    fresh = fresh_claim(claim.key, claim.digest, invocation_id, claim.now, claim.retention)
    cur = await conn.execute(keys_pg._INSERT, (*keys_pg._key_row(claim.key), *keys_pg._val_row(fresh)))
    if cur.rowcount == 1:
        return ClaimResult(ClaimKind.NEW, fresh)
    existing = await keys_pg._select(conn, claim.key, lock=True)
    if existing is None:  # deleted since the insert (only a purge does that): a fresh row
        await conn.execute(keys_pg._INSERT, (*keys_pg._key_row(claim.key), *keys_pg._val_row(fresh)))
        return ClaimResult(ClaimKind.NEW, fresh)
    d = decide(existing, claim.digest, invocation_id, claim.now, claim.expired_policy)
    if d.action is Action.TAKE_OVER:
        await keys_pg._write(conn, fresh)
        return ClaimResult(ClaimKind.NEW, fresh)
    return answer(d, existing)


@dataclass(slots=True)
class _Held:
    """The transaction a task holds open across several store calls (:meth:`PostgresStore.transaction`)."""

    store: PostgresStore
    task: asyncio.Task[Any] | None
    conn: Conn
    lock_budget: float
    """The lock wait (seconds) the transaction was begun with (``lock_timeout``)."""


_HELD: ContextVar[_Held | None] = ContextVar("callgate_pg_held", default=None)
"""The transaction the current task holds, if any (checked against the task: a task started
inside the block inherits the variable but not the transaction)."""

_REFRESH_S: Final = 0.05
"""A held transaction's ``lock_timeout`` is cut again before its write when the call's budget
shrank by more than this since it began (a slow decision)."""


def _begin_sql(budget: float) -> str:
    """Begin a transaction whose lock waits end within ``budget`` seconds (one round trip)."""
    return f"BEGIN; SET LOCAL lock_timeout = '{max(1, int(budget * 1000))}ms'"


class _Conflict(Exception):
    """A compare-and-set lost inside a transaction: roll it back, report False."""


class _Lost(Exception):
    """The claim of a new invocation lost: roll back, answer with the holder."""

    def __init__(self, result: ClaimResult) -> None:
        self.result = result


async def _configure(conn: Conn) -> None:
    await conn.set_autocommit(True)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    await conn.execute("SET TIME ZONE 'UTC'")


class PostgresStore:
    """:class:`~callgate.store.base.Store` on PostgreSQL, shared by pods (see the module doc).

    ``dsn`` is a libpq connection string or URI (passwords in ``PGPASSWORD`` / ``~/.pgpass`` or
    the DSN file, never in config files). Call :meth:`start` (connect, migrate, repair) first.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        read_only: bool = False,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._read_only = read_only
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            open=False,
            min_size=min_size,
            max_size=max_size,
            timeout=pool_timeout,
            kwargs={"connect_timeout": max(1, int(connect_timeout))},
            configure=_configure,
            check=AsyncConnectionPool.check_connection,
            name="callgate-store",
        )
        self._started = False
        self._keys = _PostgresKeys(self)

    def keys(self) -> IdempotencyStore:
        """The idempotency keys in this database (``in_store``: they follow its transactions)."""
        return self._keys

    def meters(self) -> PostgresMeters:
        """The meter reservations and totals in this database (shared by the sidecars)."""
        return PostgresMeters(self)

    async def start(self) -> None:
        """Connect; migrate the schema (refusing a newer one) and repair orphaned keys, under the
        schema advisory lock. Read-only (explain): only check the version."""
        if self._started:
            return
        try:
            await self._pool.open(wait=True, timeout=self._connect_timeout)
            async with self._pool.connection() as conn, conn.transaction():
                if self._read_only:
                    found = await _version(conn)
                    if found > len(MIGRATIONS):
                        raise too_new(found, len(MIGRATIONS), "the PostgreSQL store")
                else:
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    await _migrate(conn)
                    await _repair_keys(conn)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            await self._pool.close()
            raise store_unavailable(f"cannot open the PostgreSQL store: {_brief(exc)}") from exc
        except CallgateError:
            await self._pool.close()
            raise
        self._started = True

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """One transaction on one pooled connection; driver errors become ``store_unavailable``."""
        if not self._started or self._pool.closed:
            raise store_unavailable("PostgreSQL store is not started")
        held = self._held()
        try:
            if held is not None:  # the task's held transaction: its end commits or rolls back
                yield held.conn
                return
            async with (
                self._pool.connection(timeout=wait_budget(self._pool_timeout)) as conn,
                conn.transaction(),
            ):
                yield conn
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise store_unavailable(f"PostgreSQL store failed: {_brief(exc)}") from exc

    def _held(self) -> _Held | None:
        held = _HELD.get()
        if held is None or held.store is not self or held.task is not asyncio.current_task():
            return None
        return held

    def holds(self) -> bool:
        """Whether the current task is inside :meth:`transaction` of this store."""
        return self._held() is not None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Run every call this task makes on the store inside the block in one transaction,
        committed when the block ends (rolled back if it raises): a metered Propose's meter
        reservation, the idempotency claim and the invocation's write (issue 30 item 3). Lock
        waits inside it (the meters' advisory locks, the key's row) end within the call's
        budget (:func:`~callgate.base.deadline.wait_budget`), then ``store_unavailable``. Nested:
        the outer block's transaction."""
        if self._held() is not None:
            yield
            return
        if not self._started or self._pool.closed:
            raise store_unavailable("PostgreSQL store is not started")
        try:
            async with self._pool.connection(timeout=wait_budget(self._pool_timeout)) as conn:
                budget = wait_budget(self._pool_timeout)
                await conn.execute(_begin_sql(budget))
                token = _HELD.set(_Held(self, asyncio.current_task(), conn, budget))
                try:
                    yield
                except BaseException:  # the block's own error (or cancellation) goes on as it is
                    _HELD.reset(token)
                    with suppress(psycopg.Error, OSError):  # a broken connection: the pool drops it
                        await conn.execute("ROLLBACK")
                    raise
                _HELD.reset(token)
                await conn.execute("COMMIT")
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise store_unavailable(f"PostgreSQL store failed: {_brief(exc)}") from exc

    async def _restart(self, held: _Held) -> None:
        """Roll the held transaction back (its meter locks go) and begin a fresh one."""
        held.lock_budget = wait_budget(self._pool_timeout)
        await held.conn.execute("ROLLBACK; " + _begin_sql(held.lock_budget))

    async def _refresh(self, conn: Conn) -> None:
        """Cut a held transaction's lock waits to the call's budget now, if it shrank."""
        held = self._held()
        if held is not None and (budget := wait_budget(self._pool_timeout)) < held.lock_budget - _REFRESH_S:
            held.lock_budget = budget
            await conn.execute(f"SET LOCAL lock_timeout = '{max(1, int(budget * 1000))}ms'")

    async def _fetchone(self, sql: str, args: Sequence[Any]) -> Any:
        async with self._tx() as conn:
            cur = await conn.execute(sql, args)
            return await cur.fetchone()

    async def _fetchall(self, sql: str, args: Sequence[Any]) -> list[Any]:
        async with self._tx() as conn:
            cur = await conn.execute(sql, args)
            return await cur.fetchall()

    # ------------------------------------------------------------------ sessions, tool views
    async def put_session(self, s: SessionRecord) -> None:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO callgate_sessions VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                (s.session_id, s.tenant, s.subject, s.timezone, s.locale, _dump(dict(s.budgets)),
                 _dump(list(s.tool_allowlist)), s.opened_at),
            )  # fmt: skip

    async def get_session(self, session_id: str) -> SessionRecord | None:
        row = await self._fetchone(
            "SELECT session_id, tenant, subject, timezone, locale, budgets, tool_allowlist, opened_at "
            "FROM callgate_sessions WHERE session_id=%s",
            (session_id,),
        )
        if row is None:
            return None
        return SessionRecord(
            session_id=row[0], tenant=row[1], subject=row[2], timezone=row[3], locale=row[4],
            budgets=json.loads(row[5]), tool_allowlist=tuple(json.loads(row[6])), opened_at=row[7],
        )  # fmt: skip

    async def put_tool_view(self, v: ToolViewRecord) -> None:
        async with self._tx() as conn:
            await conn.execute(_UPSERT_TOOL_VIEW, _tool_view_row(v))

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        row = await self._fetchone(
            f"SELECT {_TOOL_VIEW_COLS} FROM callgate_tool_views WHERE session_id=%s AND model_call_id=%s",
            (session_id, model_call_id),
        )
        return None if row is None else _tool_view(row)

    async def list_tool_views(self, session_id: str) -> list[ToolViewRecord]:
        """Every tool view of a session, in the order they were recorded (explain)."""
        rows = await self._fetchall(
            f"SELECT {_TOOL_VIEW_COLS} FROM callgate_tool_views WHERE session_id=%s ORDER BY created_at, seq",
            (session_id,),
        )
        return [_tool_view(r) for r in rows]

    # ------------------------------------------------------------------ invocations
    async def create_invocation(
        self,
        record: InvocationRecord,
        events: Sequence[EventRecord],
        usage: Mapping[str, Usage] | None = None,
        claim: KeyClaim | None = None,
    ) -> ClaimResult | None:
        try:
            async with self._tx() as conn:
                await self._refresh(conn)
                if claim is not None:
                    got = await _claim(conn, claim, record.invocation_id)
                    if got.kind is not ClaimKind.NEW:
                        raise _Lost(got)  # roll back: nothing of this invocation is written
                await conn.execute(_INSERT_INVOCATION, _inv_row(record))
                await _insert_events(conn, events, record if events and events[0].seq == 1 else None)
                for sid, d in (usage or {}).items():
                    await conn.execute(_ADD_USAGE, (sid, *_usage_row(d)))
                await _follow_key(conn, record)
        except _Lost as lost:
            held = self._held()
            if held is not None:  # its reservation goes too, and its locks before the replay
                try:
                    await self._restart(held)
                except (psycopg.Error, OSError) as exc:
                    raise store_unavailable(f"PostgreSQL store failed: {_brief(exc)}") from exc
            return lost.result
        return None

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        async with self._tx() as conn:
            if not await _cas(conn, record, expected):
                return False
            await _insert_events(conn, events)
            await _follow_key(conn, record)
            await label_pg(conn, record, expected, events)
            return True

    async def transition_many(self, moves: Sequence[Move]) -> list[bool]:
        if not moves:
            return []
        done = []
        async with self._tx() as conn:
            for m in moves:
                ok = await _cas(conn, m.record, m.expected)
                if ok:
                    await _insert_events(conn, m.events)
                done.append(ok)
            moved = [m for m, ok in zip(moves, done, strict=True) if ok]
            # every meter lock of the transaction at once, in one order (no deadlock with another)
            await settle_pg_many(conn, [(m.record.invocation_id, m.record.state) for m in moved])
            for m in moved:
                await _follow_key(conn, m.record, settle=False)
                await label_pg(conn, m.record, m.expected, m.events)
        return done

    async def append_events(self, events: Sequence[EventRecord]) -> None:
        async with self._tx() as conn:
            await _insert_events(conn, events)

    async def append_to_current(
        self, invocation_id: str, events_of: Callable[[InvocationRecord], Sequence[EventRecord]]
    ) -> InvocationRecord | None:
        async with self._tx() as conn:  # FOR UPDATE (as the event numbering takes): changes wait
            cur = await conn.execute(
                f"SELECT {_INV_COLS} FROM callgate_invocations WHERE invocation_id=%s FOR UPDATE",
                (invocation_id,),
            )
            inv = _invocation(await cur.fetchone())
            if inv is not None:
                await _insert_events(conn, events_of(inv))
            return inv

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        row = await self._fetchone(
            f"SELECT {_INV_COLS} FROM callgate_invocations WHERE invocation_id=%s", (invocation_id,)
        )
        return _invocation(row)

    async def list_events(self, invocation_id: str) -> list[EventRecord]:
        events = packed.read_rows(
            _event_rows(await self._fetchall(_SELECT_EVENTS, (invocation_id,))), "callgate_events"
        )
        if any(needs_arguments(e) for e in events):
            found = await self._fetchone(
                "SELECT normalized_arguments FROM callgate_invocations WHERE invocation_id=%s",
                (invocation_id,),
            )
            events = with_arguments(events, bytes(found[0]) if found else b"")
        return events

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        q = f"SELECT {_INV_COLS} FROM callgate_invocations WHERE state=%s AND confirmation_expires_at != ''"
        args: tuple[Any, ...] = (State.AUTHORIZED.value,)
        if tenant:
            q += " AND tenant=%s"
            args += (tenant,)
        rows = await self._fetchall(q + " ORDER BY created_at", args)
        return [_inv_record(r) for r in rows]

    # ------------------------------------------------------------------ attempts, results
    async def begin_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        async with self._tx() as conn:
            if not await _cas(conn, record, expected, " AND attempts=%s", (record.attempts - 1,)):
                return False
            await conn.execute(_INSERT_ATTEMPT, _ATTEMPTS.row(attempt))
            await _insert_events(conn, events)
            return True

    async def finish_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        try:
            async with self._tx() as conn:
                if not await _cas(conn, record, expected):
                    return False
                cur = await conn.execute(
                    "UPDATE callgate_attempts SET outcome=%s, failure_class=%s, finished_at=%s, "
                    "external_resource_id=%s, http_status=%s, cost_micros=%s, retry_reason=%s, retry_after=%s "
                    "WHERE attempt_id=%s AND outcome=''",
                    (attempt.outcome, attempt.failure_class, attempt.finished_at, attempt.external_resource_id,
                     attempt.http_status, attempt.cost_micros, attempt.retry_reason, attempt.retry_after,
                     attempt.attempt_id),
                )  # fmt: skip
                if cur.rowcount != 1:
                    raise _Conflict()
                await _insert_events(conn, events)
                await _follow_key(conn, record)
                await label_pg(conn, record, expected, events)
                return True
        except _Conflict:
            return False

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        row = await self._fetchone(
            f"SELECT {_ATT_COLS} FROM callgate_attempts WHERE attempt_id=%s", (attempt_id,)
        )
        return None if row is None else _ATTEMPTS.record(row)

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]:
        rows = await self._fetchall(
            f"SELECT {_ATT_COLS} FROM callgate_attempts WHERE invocation_id=%s ORDER BY number",
            (invocation_id,),
        )
        return [_ATTEMPTS.record(r) for r in rows]

    async def put_result(
        self, record: InvocationRecord, expected: State, result: ResultRecord, events: Sequence[EventRecord]
    ) -> bool:
        try:
            async with self._tx() as conn:
                if not await _cas(conn, record, expected):
                    return False
                cur = await conn.execute(
                    "INSERT INTO callgate_results VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                    (result.invocation_id, result.status, result.message, result.truncated, result.remaining,
                     result.page_token, result.redactions, result.created_at, result.nonce),
                )  # fmt: skip
                if cur.rowcount != 1:
                    raise _Conflict()
                await _insert_events(conn, events)
                await _follow_key(conn, record, result.message if record.state is State.OBSERVED else None)
                return True
        except _Conflict:
            return False

    async def get_result(self, invocation_id: str) -> ResultRecord | None:
        row = await self._fetchone(
            "SELECT invocation_id, status, message, truncated, remaining, page_token, redactions, created_at, nonce "
            "FROM callgate_results WHERE invocation_id=%s",
            (invocation_id,),
        )
        if row is None:
            return None
        return ResultRecord(
            row[0], row[1], bytes(row[2]), bool(row[3]), bytes(row[4]), row[5], row[6], row[7], row[8]
        )

    # ------------------------------------------------------------------ usage, secrets, snapshots
    async def add_usage(self, session_id: str, delta: Usage) -> Usage:
        async with self._tx() as conn:
            cur = await conn.execute(
                _ADD_USAGE + " RETURNING model_calls, tool_calls, result_bytes, cost_micros",
                (session_id, *_usage_row(delta)),
            )
            row = await cur.fetchone()
        assert row is not None
        return Usage(*(int(v) for v in row))

    async def redeem_once(self, attempt_id: str, secret_name: str, at: str) -> bool:
        async with self._tx() as conn:
            cur = await conn.execute(
                "INSERT INTO callgate_redemptions VALUES (%s,%s,%s) ON CONFLICT DO NOTHING",
                (attempt_id, secret_name, at),
            )
            return cur.rowcount == 1

    async def record_snapshot(self, revision: str, at: str, detail: Mapping[str, Any]) -> None:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO callgate_snapshots (revision, at, detail) VALUES (%s,%s,%s)",
                (revision, at, _dump(dict(detail))),
            )

    async def get_snapshot(self, revision: str) -> dict[str, Any] | None:
        """When ``revision`` first started serving, and its recorded detail (explain)."""
        row = await self._fetchone(
            "SELECT at, detail FROM callgate_snapshots WHERE revision=%s ORDER BY seq LIMIT 1", (revision,)
        )
        if row is None:
            return None
        detail = json.loads(row[1])
        return {"at": row[0], **(detail if isinstance(detail, dict) else {})}

    # ------------------------------------------------------------------ added by later features
    async def put_tool_view_fed(self, v: ToolViewRecord, fed: Sequence[FedResultRecord]) -> None:
        async with self._tx() as conn:
            await conn.execute(_UPSERT_TOOL_VIEW, _tool_view_row(v))
            for f in fed:
                await conn.execute(
                    f"INSERT INTO callgate_fed_results ({_FED_COLS}) VALUES (%s,%s,%s,%s,%s) "
                    "ON CONFLICT DO NOTHING",
                    (f.invocation_id, f.session_id, f.model_call_id, f.at, f.message_sha256),
                )

    async def list_fed(self, invocation_id: str) -> list[FedResultRecord]:
        rows = await self._fetchall(
            f"SELECT {_FED_COLS} FROM callgate_fed_results WHERE invocation_id=%s ORDER BY at, seq",
            (invocation_id,),
        )
        return [FedResultRecord(*r) for r in rows]

    async def record_decision(self, d: DecisionRecord, *, durable: bool = False) -> None:
        # ``durable`` asks nothing more: a commit here is already durable (see :meth:`barrier`).
        async with self._tx() as conn:
            await conn.execute(
                f"INSERT INTO callgate_decisions ({_DECISION_COLS}) VALUES ({','.join(['%s'] * 13)})",
                (d.decision_id, d.at, d.tenant, d.subject, d.capability, d.resource, d.context_digest,
                 _dump(list(d.context_keys)), _dump(dict(d.decision)), d.policy_revision, d.trace_id,
                 d.span_id, d.parent_span_id),
            )  # fmt: skip

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        r = await self._fetchone(
            f"SELECT {_DECISION_COLS} FROM callgate_decisions WHERE decision_id=%s", (decision_id,)
        )
        if r is None:
            return None
        return DecisionRecord(
            decision_id=r[0], at=r[1], tenant=r[2], subject=r[3], capability=r[4], resource=r[5],
            context_digest=r[6], context_keys=tuple(json.loads(r[7])), decision=json.loads(r[8]),
            policy_revision=r[9], trace_id=r[10], span_id=r[11], parent_span_id=r[12],
        )  # fmt: skip

    async def list_past_deadline(
        self, now: datetime, limit: int, *, executing: bool = False
    ) -> list[InvocationRecord]:
        # As in the SQLite store: rfc3339 strings compared up to the whole second, then exactly.
        bound = rfc3339(now.replace(microsecond=0))
        rows = await self._fetchall(
            f"SELECT {_INV_COLS} FROM callgate_invocations WHERE state IN {PAST_DEADLINE_STATES[executing]} "
            "AND deadline != '' AND deadline <= %s ORDER BY deadline LIMIT %s",
            (bound, limit),
        )
        found = [_inv_record(r) for r in rows]
        return [inv for inv in found if datetime.fromisoformat(inv.deadline) <= now]

    # ------------------------------------------------------------------ retention
    async def expired_trails(self, before: str, now: datetime, limit: int, *, full: bool) -> list[Trail]:
        """:meth:`callgate.store.retention.RetainingStore.expired_trails`."""
        rows = await self._fetchall(_PURGE.expired_invocations(_INV_COLS), (before, now, limit))
        return await self._trails([_inv_record(r) for r in rows], full)

    async def _trails(self, invs: Sequence[InvocationRecord], full: bool) -> list[Trail]:
        if not full:
            return [Trail(inv) for inv in invs]
        return [
            Trail(
                inv,
                await self.list_events(inv.invocation_id),
                await self.list_attempts(inv.invocation_id),
                await self.get_result(inv.invocation_id),
                await self.list_fed(inv.invocation_id),
            )  # fmt: skip
            for inv in invs
        ]

    async def events_due(self, before: str, limit: int, *, full: bool) -> list[Trail]:
        """:meth:`callgate.store.retention.RetainingStore.events_due`."""
        mark = await self._fetchone(_PURGE.get_mark, (RecordKind.EVENTS.value,)) or ("", "")
        rows = await self._fetchall(_PURGE.events_due(_INV_COLS), (before, mark[0], mark[0], mark[1], limit))
        return await self._trails([_inv_record(r) for r in rows], full)

    async def delete_events(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """:meth:`callgate.store.retention.RetainingStore.delete_events`."""
        done = 0
        async with self._tx() as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PURGING_SETTING,))
            for t in trails:
                inv = t.invocation
                cur = await conn.execute(
                    _PURGE.delete_events, (inv.invocation_id, inv.invocation_id, inv.updated_at)
                )
                if cur.rowcount:
                    done += 1
                    await conn.execute(_PURGE.put_tombstone, tombstone_row(inv, expired_at, exported_to))
            last = trails[-1].invocation
            await conn.execute(
                _PURGE.put_mark, (RecordKind.EVENTS.value, last.updated_at, last.invocation_id)
            )
        return done

    async def delete_trails(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """:meth:`callgate.store.retention.RetainingStore.delete_trails`."""
        deleted = 0
        async with self._tx() as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PURGING_SETTING,))
            for t in trails:
                inv = t.invocation
                cur = await conn.execute(_PURGE.delete_invocation, (inv.invocation_id, inv.updated_at))
                if cur.rowcount != 1:
                    continue  # changed since it was listed (and exported): kept for a later pass
                deleted += 1
                for statement in _PURGE.delete_trail:
                    await conn.execute(statement, (inv.invocation_id,))
                await conn.execute(_PURGE.put_tombstone, tombstone_row(inv, expired_at, exported_to))
        return deleted

    async def expired_decisions(self, before: str, limit: int) -> list[DecisionRecord]:
        """Decisions recorded before ``before``, oldest first."""
        rows = await self._fetchall(_PURGE.expired_decisions, (before, limit))
        return [d for (did,) in rows if (d := await self.get_decision(did)) is not None]

    async def delete_decisions(self, ids: Sequence[str]) -> int:
        """Delete these decisions in one transaction; how many."""
        async with self._tx() as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PURGING_SETTING,))
            cur = await conn.execute(
                "DELETE FROM callgate_decisions WHERE decision_id = ANY(%s)", (list(ids),)
            )
            return cur.rowcount

    async def purge_keys(self, expired_before: datetime, limit: int) -> int:
        """:meth:`callgate.store.retention.RetainingStore.purge_keys` (rows another pod's purge
        holds are skipped, not waited for)."""
        async with self._tx() as conn:
            statement = _PURGE.purge_keys("ctid", " FOR UPDATE SKIP LOCKED")
            return (await conn.execute(statement, (expired_before, limit))).rowcount

    async def purge_tombstones(self, before: str, limit: int) -> int:
        """Delete tombstones of invocations deleted before ``before``; how many."""
        async with self._tx() as conn:
            return (await conn.execute(_PURGE.purge_tombstones, (before, limit))).rowcount

    async def get_tombstone(self, invocation_id: str) -> Tombstone | None:
        row = await self._fetchone(_PURGE.get_tombstone, (invocation_id,))
        return None if row is None else Tombstone(*row)

    async def reclaim(self, reserve_pages: int) -> int:
        """Nothing to do: PostgreSQL's autovacuum makes deleted rows' space reusable."""
        return 0

    async def list_pending_page(
        self, tenant: str, after: tuple[str, str] | None, limit: int
    ) -> list[InvocationRecord]:
        q = (
            f"SELECT {_INV_COLS} FROM callgate_invocations"
            " WHERE state=%s AND confirmation_expires_at != '' AND tenant=%s"
        )
        args: tuple[Any, ...] = (State.AUTHORIZED.value, tenant)
        if after is not None:
            q += " AND (created_at, invocation_id) > (%s, %s)"
            args += after
        q += " ORDER BY created_at, invocation_id LIMIT %s"
        rows = await self._fetchall(q, (*args, limit))
        return [_inv_record(r) for r in rows]

    async def barrier(self) -> None:
        """Nothing to do: a commit returns after the server flushed its WAL (``fsync = on``,
        ``synchronous_commit = on``, the server defaults; docs/RELIABILITY.md)."""

    async def close(self) -> None:
        self._started = False
        await self._pool.close()


class _PostgresKeys(LockedRecordChanges):
    """The keys of a :class:`PostgresStore` as an :class:`IdempotencyStore` (``in_store``): the
    gate's look-up and direct calls; the writes that matter ride in the store's transactions."""

    in_store: bool = True

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    async def start(self) -> None:
        """Started with the store."""

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
        async with self._store._tx() as conn:
            return await _claim(conn, KeyClaim(key, digest, retention, expired_policy, now), invocation_id)

    async def _change(self, key: IdempotencyKey, change: Change) -> None:
        async with self._store._tx() as conn:
            new = change(await keys_pg._select(conn, key, lock=True))
            if new is not None:
                await keys_pg._write(conn, new)

    async def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        async with self._store._tx() as conn:
            return await keys_pg._select(conn, key, lock=False)

    async def close(self) -> None:
        """Closed with the store."""


async def _version(conn: Conn) -> int:
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (_VERSION_TABLE,))
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    cur = await conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {_VERSION_TABLE}")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _migrate(conn: Conn) -> None:
    """Apply the missing migrations (inside the caller's transaction, under the schema lock)."""
    latest = check_sequence(MIGRATIONS)
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_VERSION_TABLE} "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
    )
    found = await _version(conn)
    if found > latest:
        raise too_new(found, latest, "the PostgreSQL store")
    for m in MIGRATIONS[found:]:
        for statement in _statements(m.sql):
            await conn.execute(statement)
        await conn.execute(f"INSERT INTO {_VERSION_TABLE} VALUES (%s, %s, now())", (m.version, m.name))
    if found != latest:
        log.info("PostgreSQL store schema migrated from version %d to %d", found, latest)


async def _repair_keys(conn: Conn) -> int:
    """Startup repair, as on SQLite: a claimed key whose invocation is missing is released, a key
    whose invocation moved on without it is brought in line; each is logged."""
    cur = await conn.execute(
        f"SELECT k.tenant, k.subject, k.tool_name, k.tool_version, k.idem_key, k.invocation_id, "
        f"i.invocation_id IS NOT NULL FROM {keys_pg.TABLE} k LEFT JOIN callgate_invocations i "
        f"ON i.invocation_id = k.invocation_id WHERE k.state = 'claimed'"
    )
    changed = 0
    now = datetime.now(UTC)
    for *key_cols, invocation_id, found in await cur.fetchall():
        key = IdempotencyKey(*key_cols)
        rec = await keys_pg._select(conn, key, lock=True)
        if rec is None or rec.state != "claimed":
            continue
        if not found:
            new = released(rec, invocation_id, now)
            log.warning(
                "repair: released the idempotency key held by missing invocation %s (%s@%s)",
                invocation_id, key.tool_name, key.tool_version,
            )  # fmt: skip
        else:
            c2 = await conn.execute(
                f"SELECT {_INV_COLS} FROM callgate_invocations WHERE invocation_id=%s", (invocation_id,)
            )
            inv = _invocation(await c2.fetchone())
            new = None if inv is None else key_follows(rec, inv)
            if new is not None:
                log.warning("repair: idempotency key of %s brought in line with %s", invocation_id, new.state)
        if new is not None:
            await keys_pg._write(conn, new)
            changed += 1
    return changed


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


__all__ = ["MIGRATIONS", "PostgresStore"]
