"""SQLite store (the embedded default): WAL mode, one writer thread, group commit
(:mod:`callgate.store.sqlite_worker`): every answer's records are committed (WAL) before the gate
answers the RPC, and the asyncio event loop never blocks on the disk. With ``durability =
barrier`` (default) they reach the disk at the next barrier (:meth:`SQLiteStore.barrier`, taken
before anything can run); with ``per_answer`` and ``synchronous=FULL`` at every commit.

Events are append-only, enforced by the database itself (triggers abort UPDATE and DELETE).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, Generic, TypeVar, get_type_hints
from urllib.parse import quote

from callgate.base.clock import rfc3339
from callgate.base.errors import store_unavailable
from callgate.base.jsontext import compact_sorted
from callgate.base.states import State
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
from callgate.store.idempotency import sqlite as keys_sql
from callgate.store.idempotency.base import ClaimKind, ClaimResult, IdempotencyKey, IdempotencyStore, released
from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore
from callgate.store.labels import label_sqlite
from callgate.store.meters import (
    FOLD_STATES,
    SQLITE_EXACT_MIGRATION,
    SQLITE_MIGRATION,
    MetersMoved,
    SQLiteMeters,
    fold_sqlite,
    held_fold,
    settle_sqlite,
    settle_sqlite_rows,
    unfold_sqlite,
)
from callgate.store.migrations import Migration, migrate_sqlite, sqlite_version, too_new
from callgate.store.packed import (
    EVENT_COLUMNS,
    EVENT_WIDTH,
    EVENTS_MIGRATION,
    PACKED_MIGRATION,
    event_row,
    new_event_rows,
    read_rows,
    select_events,
)
from callgate.store.retention import TERMINAL_SQL, PurgeSql, RecordKind, Tombstone, Trail, tombstone_row
from callgate.store.sqlite_worker import Durability, SQLiteWorker

T = TypeVar("T")
log = logging.getLogger("callgate.store")

RECLAIM_PAGES_PER_OP: Final = 256
"""Pages one writer operation hands back to the file system (:meth:`SQLiteStore.reclaim`)."""
RECLAIM_OPS_PER_PASS: Final = 64
"""Such operations per retention pass (64 MiB at 4 KiB pages); the rest waits for the next."""

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, subject TEXT NOT NULL,
  timezone TEXT NOT NULL, locale TEXT NOT NULL, budgets TEXT NOT NULL,
  tool_allowlist TEXT NOT NULL, opened_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_views (
  session_id TEXT NOT NULL, model_call_id TEXT NOT NULL, tools TEXT NOT NULL,
  spec_digests TEXT NOT NULL, tool_set_digest TEXT NOT NULL, created_at TEXT NOT NULL,
  PRIMARY KEY (session_id, model_call_id));
CREATE TABLE IF NOT EXISTS invocations (
  invocation_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, model_call_id TEXT NOT NULL,
  proposal_id TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  tenant TEXT NOT NULL, subject TEXT NOT NULL, state TEXT NOT NULL, raw_arguments BLOB NOT NULL,
  digest TEXT NOT NULL, normalized_arguments BLOB NOT NULL, decision TEXT, rejection TEXT,
  idempotency_key TEXT NOT NULL, deadline TEXT NOT NULL, confirmation_expires_at TEXT NOT NULL,
  policy_revision TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, external_resource_id TEXT NOT NULL DEFAULT '',
  commit_time TEXT NOT NULL DEFAULT '', cancel_requested_at TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS invocations_pending ON invocations (state, tenant)
  WHERE confirmation_expires_at != '';
CREATE TABLE IF NOT EXISTS events (
  invocation_id TEXT NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE,
  at TEXT NOT NULL, kind TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (invocation_id, seq));
CREATE TABLE IF NOT EXISTS attempts (
  attempt_id TEXT PRIMARY KEY, invocation_id TEXT NOT NULL, number INTEGER NOT NULL,
  executor_id TEXT NOT NULL, jti TEXT NOT NULL, started_at TEXT NOT NULL,
  credential_expires_at TEXT NOT NULL, outcome TEXT NOT NULL, failure_class TEXT NOT NULL,
  finished_at TEXT NOT NULL, external_resource_id TEXT NOT NULL, http_status INTEGER NOT NULL,
  cost_micros INTEGER NOT NULL, retry_reason TEXT NOT NULL, retry_after TEXT NOT NULL,
  UNIQUE (invocation_id, number));
CREATE TABLE IF NOT EXISTS results (
  invocation_id TEXT PRIMARY KEY, status TEXT NOT NULL, message BLOB NOT NULL,
  truncated INTEGER NOT NULL, remaining BLOB NOT NULL, page_token TEXT NOT NULL,
  redactions INTEGER NOT NULL, created_at TEXT NOT NULL, nonce TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
  session_id TEXT PRIMARY KEY, model_calls INTEGER NOT NULL, tool_calls INTEGER NOT NULL,
  result_bytes INTEGER NOT NULL, cost_micros INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS redemptions (
  attempt_id TEXT NOT NULL, secret_name TEXT NOT NULL, at TEXT NOT NULL,
  PRIMARY KEY (attempt_id, secret_name));
CREATE TABLE IF NOT EXISTS snapshots (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, revision TEXT NOT NULL, at TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS events_append_only_u BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_d BEFORE DELETE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"""

_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
  tenant TEXT NOT NULL, subject TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  digest TEXT NOT NULL, invocation_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('claimed', 'completed', 'released')),
  outcome TEXT NOT NULL, result BLOB, external_resource_id TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT NOT NULL,
  retention_us INTEGER NOT NULL CHECK (retention_us > 0),
  PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key));
CREATE INDEX IF NOT EXISTS idempotency_keys_expires ON idempotency_keys (expires_at);
CREATE INDEX IF NOT EXISTS idempotency_keys_invocation ON idempotency_keys (invocation_id);
CREATE TABLE IF NOT EXISTS key_imports (
  source TEXT PRIMARY KEY, at TEXT NOT NULL, keys INTEGER NOT NULL);
"""

_SCHEMA_V3 = """
CREATE INDEX IF NOT EXISTS invocations_open_deadline ON invocations (deadline)
  WHERE state IN ('AUTHORIZED', 'PREPARED');
CREATE TABLE IF NOT EXISTS fed_results (
  invocation_id TEXT NOT NULL, session_id TEXT NOT NULL, model_call_id TEXT NOT NULL,
  at TEXT NOT NULL, message_sha256 TEXT NOT NULL,
  PRIMARY KEY (invocation_id, session_id, model_call_id));
CREATE TABLE IF NOT EXISTS decisions (
  decision_id TEXT PRIMARY KEY, at TEXT NOT NULL, tenant TEXT NOT NULL, subject TEXT NOT NULL,
  capability TEXT NOT NULL, resource TEXT NOT NULL, context_digest TEXT NOT NULL,
  context_keys TEXT NOT NULL, decision TEXT NOT NULL, policy_revision TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_span_id TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS decisions_append_only_u BEFORE UPDATE ON decisions
  BEGIN SELECT RAISE(ABORT, 'decisions are append-only'); END;
CREATE TRIGGER IF NOT EXISTS decisions_append_only_d BEFORE DELETE ON decisions
  BEGIN SELECT RAISE(ABORT, 'decisions are append-only'); END;
"""

_SCHEMA_V4 = f"""
CREATE TABLE IF NOT EXISTS retention_purging (one INTEGER PRIMARY KEY CHECK (one = 1));
DROP TRIGGER IF EXISTS events_append_only_d;
CREATE TRIGGER events_append_only_d BEFORE DELETE ON events
  WHEN NOT EXISTS (SELECT 1 FROM retention_purging)
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
DROP TRIGGER IF EXISTS decisions_append_only_d;
CREATE TRIGGER decisions_append_only_d BEFORE DELETE ON decisions
  WHEN NOT EXISTS (SELECT 1 FROM retention_purging)
  BEGIN SELECT RAISE(ABORT, 'decisions are append-only'); END;
CREATE TABLE IF NOT EXISTS expired_invocations (
  invocation_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, tool_name TEXT NOT NULL, state TEXT NOT NULL,
  updated_at TEXT NOT NULL, expired_at TEXT NOT NULL, exported_to TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS expired_invocations_at ON expired_invocations (expired_at);
CREATE INDEX IF NOT EXISTS invocations_ended ON invocations (updated_at) WHERE state IN {TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS decisions_at ON decisions (at);
CREATE TABLE IF NOT EXISTS retention_marks (
  kind TEXT PRIMARY KEY, updated_at TEXT NOT NULL, invocation_id TEXT NOT NULL);
"""

_SCHEMA_V7 = """
CREATE TABLE events_v7 (
  invocation_id TEXT NOT NULL, seq INTEGER NOT NULL, event_id TEXT,
  at TEXT, kind TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (invocation_id, seq)) WITHOUT ROWID;
INSERT INTO events_v7 SELECT invocation_id, seq,
  CASE WHEN event_id = invocation_id || '.' || seq THEN NULL ELSE event_id END,
  at, kind, from_state, to_state, trace_id, span_id, data FROM events;
DROP TABLE events;
ALTER TABLE events_v7 RENAME TO events;
CREATE TRIGGER events_append_only_u BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_append_only_d BEFORE DELETE ON events
  WHEN NOT EXISTS (SELECT 1 FROM retention_purging)
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"""
"""Events in one B-tree keyed by (invocation, seq): no rowid, no separate key index, no
``event_id`` index (an id is ``<invocation>.<seq>``, NULL, or a random one of an appended event);
``at`` NULL when it is the invocation's ``created_at`` (:mod:`callgate.store.packed`)."""

MIGRATIONS: Final = (
    Migration(
        1, "sessions, tool views, invocations, events, attempts, results, usage, snapshots", _SCHEMA_V1
    ),
    Migration(2, "idempotency keys in the event database (one commit per answer)", _SCHEMA_V2),
    Migration(3, "deadline sweep index, tool messages fed into model calls, Authorize decisions", _SCHEMA_V3),
    Migration(4, "retention: deletable trails while purging, tombstones, age indexes", _SCHEMA_V4),
    Migration(5, PACKED_MIGRATION, ""),
    Migration(6, "meters: reservations and bucketed totals (issue 30)", SQLITE_MIGRATION),
    Migration(7, EVENTS_MIGRATION, _SCHEMA_V7),
    Migration(
        8, "meters: exact windows (per-call entries, running totals; issue 30)", SQLITE_EXACT_MIGRATION
    ),
)
"""The SQLite store's schema, version by version (:mod:`callgate.store.migrations`)."""

_ADD_USAGE = (
    "INSERT INTO usage VALUES (?,?,?,?,?) ON CONFLICT(session_id) DO UPDATE SET "
    "model_calls=model_calls+excluded.model_calls, tool_calls=tool_calls+excluded.tool_calls, "
    "result_bytes=result_bytes+excluded.result_bytes, cost_micros=cost_micros+excluded.cost_micros"
)


def _usage_row(u: Usage) -> tuple[int, int, int, int]:
    return (u.model_calls, u.tool_calls, u.result_bytes, u.cost_micros)


def _dump(v: Any) -> str | None:
    return None if v is None else compact_sorted(v)


def _tool_view_row(v: ToolViewRecord) -> tuple[Any, ...]:
    """The ``tool_views`` row of ``v`` (both backends). The views recorded from one shown set
    carry its JSON made once (``propose/sessions.py``), not per ListTools (0.34 ms a call at
    1,000 tools)."""
    return (
        v.session_id, v.model_call_id, v.tools_json or _dump(list(v.tools)),
        v.spec_digests_json or _dump(dict(v.spec_digests)), v.tool_set_digest, v.created_at,
    )  # fmt: skip


def _identity(v: Any) -> Any:
    return v


def _load_json(v: Any) -> Any:
    return json.loads(v) if v else None


def _to_state(v: Any) -> State:
    return State(v)


def _state_value(v: State) -> str:
    return v.value


# How a field of each type is stored (record -> column) and read back (column -> record). A field
# of any other type stops the import: it needs a conversion written here, not a silent default.
_CONVERSIONS: dict[Any, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    str: (_identity, _identity),
    int: (_identity, _identity),
    bytes: (_identity, bytes),
    State: (_state_value, _to_state),
    Mapping[str, Any] | None: (_dump, _load_json),
}

R = TypeVar("R", InvocationRecord, AttemptRecord)


@dataclass(frozen=True, slots=True)
class _RowMapping(Generic[R]):
    """The columns of a record table and the conversion between a record and its row, derived
    once from the record dataclass: one column per field, named like it, in field order (which
    is the table's column order in ``_SCHEMA``). A field added to the record is therefore stored
    and read back without a second list to update (``tests/test_sqlite_store.py`` checks the
    columns against the schema and round-trips every field)."""

    record_type: type[R]
    columns: tuple[str, ...]
    column_list: str
    """``"a, b, c"``: the columns for ``SELECT`` and ``INSERT`` statements."""
    to_sql: tuple[tuple[int, Callable[[Any], Any]], ...]
    """``(column index, conversion)`` for the columns that are not stored as they are."""
    from_sql: tuple[Callable[[Any], Any], ...]

    @classmethod
    def of(cls, record_type: type[R]) -> _RowMapping[R]:
        """The mapping of ``record_type``; ``TypeError`` for a field type without a conversion."""
        hints = get_type_hints(record_type)
        names = tuple(f.name for f in fields(record_type))
        conversions = []
        for name in names:
            conversion = _CONVERSIONS.get(hints[name])
            if conversion is None:
                raise TypeError(f"{record_type.__name__}.{name}: no SQLite conversion for {hints[name]!r}")
            conversions.append(conversion)
        return cls(
            record_type=record_type,
            columns=names,
            column_list=", ".join(names),
            to_sql=tuple((i, c[0]) for i, c in enumerate(conversions) if c[0] is not _identity),
            from_sql=tuple(c[1] for c in conversions),
        )

    def row(self, record: R) -> tuple[Any, ...]:
        """The row of ``record``, in column order."""
        values = list(attrgetter(*self.columns)(record))
        for i, convert in self.to_sql:
            values[i] = convert(values[i])
        return tuple(values)

    def record(self, row: Sequence[Any]) -> R:
        """The record of a row selected with :attr:`column_list`."""
        return self.record_type(*(convert(v) for convert, v in zip(self.from_sql, row, strict=True)))


_INVOCATIONS: Final = _RowMapping.of(InvocationRecord)
_ATTEMPTS: Final = _RowMapping.of(AttemptRecord)
_INV_COLS: Final = _INVOCATIONS.column_list
_UPDATE_INVOCATION: Final = (
    f"UPDATE invocations SET {', '.join(f'{col}=?' for col in _INVOCATIONS.columns[1:])} "
    "WHERE invocation_id=? AND state=?"
)
"""The compare-and-set of :func:`_cas_invocation` (a condition of its own may follow)."""
_ATT_COLS: Final = _ATTEMPTS.column_list
_INSERT_INVOCATION: Final = (
    f"INSERT INTO invocations ({_INV_COLS}) VALUES ({','.join('?' * len(_INVOCATIONS.columns))})"
)
_INSERT_ATTEMPT: Final = (
    f"INSERT INTO attempts ({_ATT_COLS}) VALUES ({','.join('?' * len(_ATTEMPTS.columns))})"
)


def _cas_invocation(
    c: sqlite3.Connection,
    record: InvocationRecord,
    expected: State,
    extra: str = "",
    args: tuple[Any, ...] = (),
) -> bool:
    row = _INVOCATIONS.row(record)
    cur = c.execute(_UPDATE_INVOCATION + extra, (*row[1:], record.invocation_id, expected.value, *args))
    return cur.rowcount == 1


def read_events(c: sqlite3.Connection, invocation_id: str) -> list[EventRecord]:
    """The ordered events of one invocation (also used by :class:`SQLiteReader`)."""
    events = stored_events(c, invocation_id)
    if any(needs_arguments(e) for e in events):
        row = c.execute(
            "SELECT normalized_arguments FROM invocations WHERE invocation_id=?", (invocation_id,)
        )
        found = row.fetchone()
        events = with_arguments(events, bytes(found[0]) if found else b"")
    return events


def stored_events(c: sqlite3.Connection, invocation_id: str) -> list[EventRecord]:
    """The ordered events of one invocation as stored: a row of packed stage events
    (:mod:`callgate.store.packed`) reads as the events it holds; a ``normalized`` event is
    without the arguments that :func:`read_events` puts back."""
    return read_rows(c.execute(_SELECT_EVENTS, (invocation_id,)).fetchall(), "events")


_SELECT_EVENTS: Final = select_events("", "?")


# Reads shared by the store (on its writer connection) and :class:`SQLiteReader` (read-only).


def _read_invocation(c: sqlite3.Connection, invocation_id: str) -> InvocationRecord | None:
    row = c.execute(f"SELECT {_INV_COLS} FROM invocations WHERE invocation_id=?", (invocation_id,)).fetchone()
    return None if row is None else _INVOCATIONS.record(row)


def _read_attempt(c: sqlite3.Connection, attempt_id: str) -> AttemptRecord | None:
    row = c.execute(f"SELECT {_ATT_COLS} FROM attempts WHERE attempt_id=?", (attempt_id,)).fetchone()
    return None if row is None else _ATTEMPTS.record(row)


def _read_attempts(c: sqlite3.Connection, invocation_id: str) -> list[AttemptRecord]:
    rows = c.execute(
        f"SELECT {_ATT_COLS} FROM attempts WHERE invocation_id=? ORDER BY number", (invocation_id,)
    ).fetchall()
    return [_ATTEMPTS.record(r) for r in rows]


def _read_result(c: sqlite3.Connection, invocation_id: str) -> ResultRecord | None:
    row = c.execute(
        "SELECT invocation_id, status, message, truncated, remaining, page_token, redactions, created_at, nonce "
        "FROM results WHERE invocation_id=?",
        (invocation_id,),
    ).fetchone()
    if row is None:
        return None
    return ResultRecord(
        row[0], row[1], bytes(row[2]), bool(row[3]), bytes(row[4]), row[5], row[6], row[7], row[8]
    )


_TOOL_VIEW_COLS: Final = "session_id, model_call_id, tools, spec_digests, tool_set_digest, created_at"


def _tool_view(row: Sequence[Any]) -> ToolViewRecord:
    return ToolViewRecord(
        session_id=row[0], model_call_id=row[1], tools=tuple(json.loads(row[2])),
        spec_digests=json.loads(row[3]), tool_set_digest=row[4], created_at=row[5],
    )  # fmt: skip


def _read_tool_view(c: sqlite3.Connection, session_id: str, model_call_id: str) -> ToolViewRecord | None:
    row = c.execute(
        f"SELECT {_TOOL_VIEW_COLS} FROM tool_views WHERE session_id=? AND model_call_id=?",
        (session_id, model_call_id),
    ).fetchone()
    return None if row is None else _tool_view(row)


@dataclass(frozen=True, slots=True)
class _NewInvocation:
    """``create_invocation`` without a key: the invocation row, its events (numbered from 1)
    and the pending usage. The writer runs consecutive ones as one (:meth:`run_many`): one
    INSERT for their invocations, one for their events, one upsert per session's usage."""

    record: InvocationRecord
    row: tuple[Any, ...]
    events: tuple[EventRecord, ...]
    usage: dict[str, Usage]

    def __call__(self, c: sqlite3.Connection) -> None:
        self.run_many(c, (self,))

    def run_many(self, c: sqlite3.Connection, ops: Sequence[_NewInvocation]) -> list[None]:
        limit = c.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        width = len(_INVOCATIONS.columns)
        rows = [op.row for op in ops]
        per = max(1, limit // width)
        for k in range(0, len(rows), per):
            chunk = rows[k : k + per]
            c.execute(_insert_invocations_sql(len(chunk)), [v for r in chunk for v in r])
        _insert_new_events(c, [(op.events, op.record) for op in ops], limit)
        total: dict[str, list[int]] = {}
        for op in ops:
            for sid, u in op.usage.items():
                t = total.setdefault(sid, [0, 0, 0, 0])
                for n, v in enumerate(_usage_row(u)):
                    t[n] += v
        if total:
            c.executemany(_ADD_USAGE, [(sid, *t) for sid, t in total.items()])
        settle_sqlite_rows(
            c, [(op.events[-1].invocation_id, op.events[-1].to_state) for op in ops if op.events]
        )
        return [None] * len(ops)


@functools.lru_cache(maxsize=64)
def _insert_invocations_sql(n: int) -> str:
    one = "(" + ",".join("?" * len(_INVOCATIONS.columns)) + ")"
    return f"INSERT INTO invocations ({_INV_COLS}) VALUES " + ",".join([one] * n)


def _insert_new_events(
    conn: sqlite3.Connection,
    trails: Sequence[tuple[Sequence[EventRecord], InvocationRecord]],
    limit: int = 0,
) -> None:
    """Insert the first events of new invocations (each trail numbered from 1, with the
    invocation created with it)."""
    _insert_rows(conn, [row for events, inv in trails for row in new_event_rows(events, inv)], limit)


def _insert_rows(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]], limit: int = 0) -> None:
    per = max(1, (limit or conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)) // EVENT_WIDTH)
    for k in range(0, len(rows), per):
        chunk = rows[k : k + per]
        # one statement: one step for all rows
        conn.execute(_insert_events_sql(len(chunk)), [v for r in chunk for v in r])


def _insert_events(conn: sqlite3.Connection, events: Sequence[EventRecord], limit: int = 0) -> None:
    if events and events[0].seq == 0:  # appended to an existing invocation: next numbers
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE invocation_id=?", (events[0].invocation_id,)
        ).fetchone()
        events = [replace(e, seq=last + i) for i, e in enumerate(events, 1)]
    _insert_rows(conn, [event_row(e) for e in events], limit)


@functools.lru_cache(maxsize=64)
def _insert_events_sql(n: int) -> str:
    return f"INSERT INTO events ({EVENT_COLUMNS}) VALUES " + ",".join(["(?,?,?,?,?,?,?,?,?,?)"] * n)


_FED_COLS: Final = "invocation_id, session_id, model_call_id, at, message_sha256"
_DECISION_COLS: Final = (
    "decision_id, at, tenant, subject, capability, resource, context_digest, context_keys, decision, "
    "policy_revision, trace_id, span_id, parent_span_id"
)


def _read_fed(c: sqlite3.Connection, invocation_id: str) -> list[FedResultRecord]:
    rows = c.execute(
        f"SELECT {_FED_COLS} FROM fed_results WHERE invocation_id=? ORDER BY at, rowid", (invocation_id,)
    ).fetchall()
    return [FedResultRecord(*r) for r in rows]


def _read_decision(c: sqlite3.Connection, decision_id: str) -> DecisionRecord | None:
    r = c.execute(f"SELECT {_DECISION_COLS} FROM decisions WHERE decision_id=?", (decision_id,)).fetchone()
    if r is None:
        return None
    return DecisionRecord(
        decision_id=r[0], at=r[1], tenant=r[2], subject=r[3], capability=r[4], resource=r[5],
        context_digest=r[6], context_keys=tuple(json.loads(r[7])), decision=json.loads(r[8]),
        policy_revision=r[9], trace_id=r[10], span_id=r[11], parent_span_id=r[12],
    )  # fmt: skip


_PURGE: Final = PurgeSql("", "?", keys_sql.TABLE)


def _trails(c: sqlite3.Connection, invs: Sequence[InvocationRecord], full: bool) -> list[Trail]:
    """``invs`` as trails: with ``full`` everything ``explain`` reads, else the invocation alone."""
    if not full:
        return [Trail(inv) for inv in invs]
    return [
        Trail(
            inv,
            read_events(c, inv.invocation_id),
            _read_attempts(c, inv.invocation_id),
            _read_result(c, inv.invocation_id),
            _read_fed(c, inv.invocation_id),
        )  # fmt: skip
        for inv in invs
    ]


def _read_tombstone(c: sqlite3.Connection, invocation_id: str) -> Tombstone | None:
    row = c.execute(_PURGE.get_tombstone, (invocation_id,)).fetchone()
    return None if row is None else Tombstone(*row)


def _follow_key(c: sqlite3.Connection, record: InvocationRecord, message: bytes | None = None) -> None:
    """Bring the key ``record`` holds in line with its new state (:func:`key_follows`), and its
    meter reservations (:func:`~callgate.store.meters.settle_sqlite`)."""
    settle_sqlite(c, record.invocation_id, record.state)
    if not record.idempotency_key:
        return
    rec = keys_sql.select(c, key_of(record))
    new = key_follows(rec, record, message)
    if new is not None:
        keys_sql.write(c, new)


def repair_keys(c: sqlite3.Connection) -> int:
    """Startup repair: a key whose invocation is missing (an older version wrote them in two
    stores, and a crash between them left the key alone) is released; a key whose invocation
    moved on without it is brought in line. Returns how many keys changed; each is logged."""
    rows = c.execute(
        f"SELECT k.tenant, k.subject, k.tool_name, k.tool_version, k.idem_key, k.invocation_id, "
        f"i.invocation_id FROM {keys_sql.TABLE} k LEFT JOIN invocations i "
        f"ON i.invocation_id = k.invocation_id WHERE k.state != 'released'"
    ).fetchall()
    changed = 0
    now = datetime.now(UTC)
    for *key_cols, invocation_id, found in rows:
        key = IdempotencyKey(*key_cols)
        rec = keys_sql.select(c, key)
        if rec is None:  # pragma: no cover - read under the write lock
            continue
        if found is None:
            if rec.state == "claimed":
                keys_sql.write(c, released(rec, invocation_id, now) or rec)
                log.warning(
                    "repair: released the idempotency key held by missing invocation %s (%s@%s)",
                    invocation_id, key.tool_name, key.tool_version,
                )  # fmt: skip
                changed += 1
            continue
        inv = _read_invocation(c, invocation_id)
        if inv is None:  # pragma: no cover
            continue
        before = rec
        _follow_key(c, inv)
        if keys_sql.select(c, key) != before:
            log.warning(
                "repair: idempotency key of %s brought in line with %s", invocation_id, inv.state.value
            )
            changed += 1
    return changed


_KEY_COLS: Final = (
    "tenant, subject, tool_name, tool_version, idem_key, digest, invocation_id, state, outcome, result, "
    "external_resource_id, created_at, updated_at, expires_at, retention_us"
)


def import_legacy_keys(c: sqlite3.Connection, legacy: Path, at: str) -> int:
    """Copy the keys of a separate idempotency file (the layout before one commit per answer)
    into this database, once per file; keys already here win. Returns how many were copied."""
    source = str(legacy.resolve())
    if not legacy.is_file() or c.execute("SELECT 1 FROM key_imports WHERE source=?", (source,)).fetchone():
        return 0
    old = sqlite3.connect(f"file:{quote(source)}?mode=ro", uri=True)
    try:
        has = old.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (keys_sql.TABLE,))
        rows = old.execute(f"SELECT {_KEY_COLS} FROM {keys_sql.TABLE}").fetchall() if has.fetchone() else []
    finally:
        old.close()
    copied = 0
    for row in rows:
        cur = c.execute(
            f"INSERT INTO {keys_sql.TABLE} ({_KEY_COLS}) VALUES ({','.join('?' * 15)}) ON CONFLICT DO NOTHING",
            row,
        )
        copied += cur.rowcount
    c.execute("INSERT INTO key_imports VALUES (?,?,?)", (source, at, copied))
    log.warning("imported %d idempotency keys from %s into the event database", copied, source)
    return copied


def _setup(legacy_keys: Path | None) -> Callable[[sqlite3.Connection], None]:
    """At open, in one transaction: migrations, the legacy key import, the key repair."""

    def setup(c: sqlite3.Connection) -> None:
        at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        found, now = migrate_sqlite(c, MIGRATIONS, at=at)
        if found != now:
            log.info("SQLite store schema migrated from version %d to %d", found, now)
        if legacy_keys is not None:
            import_legacy_keys(c, legacy_keys, at)
        repair_keys(c)
        # A retention delete removes its marker in its own transaction; should one ever have been
        # committed, the append-only triggers would stay open: never past a start.
        c.execute("DELETE FROM retention_purging")

    return setup


class SQLiteStore:
    """:class:`~callgate.store.base.Store` on SQLite (one writer thread, group commit:
    :class:`~callgate.store.sqlite_worker.SQLiteWorker`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        durability: Durability = Durability.BARRIER,
        max_batch: int = 256,
        legacy_keys: str | Path | None = None,
        fsync: Callable[[int], None] = os.fdatasync,
        on_barrier: Callable[[], None] | None = None,
    ) -> None:
        """Open (create, migrate, repair) the database at ``path``. ``legacy_keys``: a separate
        idempotency file of an older version, whose keys are imported once. ``fsync`` and
        ``on_barrier`` are test seams of the barrier (:class:`SQLiteWorker`)."""
        legacy = Path(legacy_keys) if legacy_keys is not None else None
        if legacy is not None and legacy.resolve() == Path(path).resolve():
            legacy = None
        self._worker = SQLiteWorker(
            path, schema="", synchronous=synchronous, durability=durability, max_batch=max_batch,
            name="callgate-events", setup=_setup(legacy), fsync=fsync, on_barrier=on_barrier,
        )  # fmt: skip
        self._keys = SQLiteIdempotencyStore(path, worker=self._worker)
        self._path = str(path)
        self._purge_reader: sqlite3.Connection | None = None
        """Retention's own read connection (:meth:`_read_for_purge`), opened on first use."""

    def keys(self) -> IdempotencyStore:
        """The idempotency keys in this database, on this store's writer (``in_store``)."""
        return self._keys

    def meters(self) -> SQLiteMeters:
        """The meter reservations and totals in this database, on this store's writer."""
        return SQLiteMeters(self._worker)

    async def _call(self, op: Callable[[sqlite3.Connection], T]) -> T:
        return await self._worker.run(op)

    async def barrier(self) -> None:
        """Every record committed before this call is on disk (one coalesced WAL sync)."""
        await self._worker.barrier()

    @property
    def worker(self) -> SQLiteWorker:
        """The writer thread (its ``barriers`` count and ``durability``)."""
        return self._worker

    async def _call_cas(self, op: Callable[[sqlite3.Connection], bool], *, durable: bool = False) -> bool:
        """Run a compare-and-set write; a ``_Conflict`` raised inside rolls it back (its
        savepoint) and reads as "another writer won". ``durable``: behind a barrier."""
        try:
            return await self._worker.run(op, durable=durable)
        except _Conflict:
            return False

    # ------------------------------------------------------------------ API
    async def put_session(self, s: SessionRecord) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)",
                (s.session_id, s.tenant, s.subject, s.timezone, s.locale, _dump(dict(s.budgets)),
                 _dump(list(s.tool_allowlist)), s.opened_at),
            )  # fmt: skip

        await self._call(op)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        def op(c: sqlite3.Connection) -> SessionRecord | None:
            row = c.execute("SELECT * FROM sessions WHERE session_id=?", (session_id,)).fetchone()
            if row is None:
                return None
            return SessionRecord(
                session_id=row[0], tenant=row[1], subject=row[2], timezone=row[3], locale=row[4],
                budgets=json.loads(row[5]), tool_allowlist=tuple(json.loads(row[6])), opened_at=row[7],
            )  # fmt: skip

        return await self._call(op)

    async def put_tool_view(self, v: ToolViewRecord) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO tool_views VALUES (?,?,?,?,?,?)", _tool_view_row(v))

        await self._call(op)

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        return await self._call(lambda c: _read_tool_view(c, session_id, model_call_id))

    async def create_invocation(
        self,
        record: InvocationRecord,
        events: Sequence[EventRecord],
        usage: Mapping[str, Usage] | None = None,
        claim: KeyClaim | None = None,
    ) -> ClaimResult | None:
        row = _INVOCATIONS.row(record)
        fold = held_fold(self._worker)  # a metered Propose's reservation, written here
        if fold is None and claim is None and not record.idempotency_key and events and events[0].seq != 0:
            # the common Propose: merged with its batch's like it (one statement per table)
            return await self._call(_NewInvocation(record, row, tuple(events), dict(usage or {})))

        def op(c: sqlite3.Connection) -> ClaimResult | _Moved | None:
            if fold is not None:  # first: if the meters moved, only the reservation is written
                moved = fold_sqlite(c, fold, record.state)
                if moved is not None:
                    return _Moved(moved)
            if claim is not None:
                got = keys_sql.claim_op(
                    c, claim.key, claim.digest, record.invocation_id, claim.now, claim.retention,
                    claim.expired_policy,
                )  # fmt: skip
                if got.kind is not ClaimKind.NEW:  # nothing written: the key went to another invocation
                    if fold is not None:
                        unfold_sqlite(c, fold)
                    return got
            c.execute(_INSERT_INVOCATION, row)
            if events and events[0].seq == 1:
                _insert_new_events(c, [(events, record)])
            else:
                _insert_events(c, events)
            if usage:
                c.executemany(_ADD_USAGE, [(sid, *_usage_row(d)) for sid, d in usage.items()])
            _follow_key(c, record)
            return None

        got = await self._call(op)
        if isinstance(got, _Moved):
            assert fold is not None
            fold.readings, fold.reserved = got.readings, True
            raise MetersMoved(got.readings)
        if fold is not None and got is None and record.state in FOLD_STATES:
            fold.written = True
        return got

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            if not _cas_invocation(c, record, expected):
                return False
            _insert_events(c, events)
            _follow_key(c, record)
            label_sqlite(c, record, expected, events)
            return True

        return await self._call(op)

    async def transition_many(self, moves: Sequence[Move]) -> list[bool]:
        def op(c: sqlite3.Connection) -> list[bool]:
            done = []
            for m in moves:
                ok = _cas_invocation(c, m.record, m.expected)
                if ok:
                    _insert_events(c, m.events)
                    _follow_key(c, m.record)
                    label_sqlite(c, m.record, m.expected, m.events)
                done.append(ok)
            return done

        return await self._worker.run(op, alone=False) if moves else []  # off the loop: many rows

    async def begin_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            if not _cas_invocation(c, record, expected, " AND attempts=?", (record.attempts - 1,)):
                return False
            c.execute(_INSERT_ATTEMPT, _ATTEMPTS.row(attempt))
            _insert_events(c, events)
            return True

        # The barrier: the attempt and every record before it are on disk before the
        # credential leaves the sidecar (spec 6.7), or the attempt is refused.
        return await self._worker.run(op, durable=True)

    async def finish_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            if not _cas_invocation(c, record, expected):
                return False
            cur = c.execute(
                "UPDATE attempts SET outcome=?, failure_class=?, finished_at=?, external_resource_id=?, "
                "http_status=?, cost_micros=?, retry_reason=?, retry_after=? WHERE attempt_id=? AND outcome=''",
                (attempt.outcome, attempt.failure_class, attempt.finished_at, attempt.external_resource_id,
                 attempt.http_status, attempt.cost_micros, attempt.retry_reason, attempt.retry_after,
                 attempt.attempt_id),
            )  # fmt: skip
            if cur.rowcount != 1:
                raise _Conflict()
            _insert_events(c, events)
            _follow_key(c, record)
            label_sqlite(c, record, expected, events)
            return True

        return await self._call_cas(op)

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        return await self._call(lambda c: _read_attempt(c, attempt_id))

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]:
        return await self._call(lambda c: _read_attempts(c, invocation_id))

    async def put_result(
        self, record: InvocationRecord, expected: State, result: ResultRecord, events: Sequence[EventRecord]
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            if not _cas_invocation(c, record, expected):
                return False
            cur = c.execute(
                "INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?)",
                (result.invocation_id, result.status, result.message, int(result.truncated), result.remaining,
                 result.page_token, result.redactions, result.created_at, result.nonce),
            )  # fmt: skip
            if cur.rowcount != 1:
                raise _Conflict()
            _insert_events(c, events)
            _follow_key(c, record, result.message if record.state is State.OBSERVED else None)
            return True

        return await self._call_cas(op)

    async def get_result(self, invocation_id: str) -> ResultRecord | None:
        return await self._call(lambda c: _read_result(c, invocation_id))

    async def add_usage(self, session_id: str, delta: Usage) -> Usage:
        def op(c: sqlite3.Connection) -> Usage:
            c.execute(_ADD_USAGE, (session_id, *_usage_row(delta)))
            row = c.execute(
                "SELECT model_calls, tool_calls, result_bytes, cost_micros FROM usage WHERE session_id=?",
                (session_id,),
            ).fetchone()
            return Usage(*row)

        return await self._call(op)

    async def redeem_once(self, attempt_id: str, secret_name: str, at: str) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            cur = c.execute("INSERT OR IGNORE INTO redemptions VALUES (?,?,?)", (attempt_id, secret_name, at))
            return cur.rowcount == 1

        return await self._call(op)

    async def append_events(self, events: Sequence[EventRecord]) -> None:
        await self._call(lambda c: _insert_events(c, events))

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        return await self._call(lambda c: _read_invocation(c, invocation_id))

    async def append_to_current(
        self, invocation_id: str, events_of: Callable[[InvocationRecord], Sequence[EventRecord]]
    ) -> InvocationRecord | None:
        def op(c: sqlite3.Connection) -> InvocationRecord | None:
            inv = _read_invocation(c, invocation_id)
            if inv is not None:
                _insert_events(c, events_of(inv))
            return inv

        return await self._call(op)

    async def list_events(self, invocation_id: str) -> list[EventRecord]:
        return await self._call(lambda c: read_events(c, invocation_id))

    # ------------------------------------------------------------------ retention
    async def _purge_write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """A retention write: always on the writer thread (``alone=False``), never run by the
        event loop itself, so a call arriving meanwhile is not held behind it."""
        return await self._worker.run(op, alone=False)

    async def expired_trails(self, before: str, now: datetime, limit: int, *, full: bool) -> list[Trail]:
        """:meth:`callgate.store.retention.RetainingStore.expired_trails`."""

        def op(c: sqlite3.Connection) -> list[Trail]:
            rows = c.execute(_PURGE.expired_invocations(_INV_COLS), (before, keys_sql._ts(now), limit))
            return _trails(c, [_INVOCATIONS.record(r) for r in rows.fetchall()], full)

        return await self._read_for_purge(op)

    async def delete_trails(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """:meth:`callgate.store.retention.RetainingStore.delete_trails`."""

        def op(c: sqlite3.Connection) -> int:
            c.execute("INSERT INTO retention_purging VALUES (1)")  # the append-only triggers let it
            deleted = 0
            for t in trails:
                inv = t.invocation
                if c.execute(_PURGE.delete_invocation, (inv.invocation_id, inv.updated_at)).rowcount != 1:
                    continue  # changed since it was listed (and exported): kept for a later pass
                deleted += 1
                for statement in _PURGE.delete_trail:
                    c.execute(statement, (inv.invocation_id,))
                c.execute(_PURGE.put_tombstone, tombstone_row(inv, expired_at, exported_to))
            c.execute("DELETE FROM retention_purging")
            return deleted

        return await self._purge_write(op)

    async def events_due(self, before: str, limit: int, *, full: bool) -> list[Trail]:
        """:meth:`callgate.store.retention.RetainingStore.events_due`."""

        def op(c: sqlite3.Connection) -> list[Trail]:
            mark = c.execute(_PURGE.get_mark, (RecordKind.EVENTS.value,)).fetchone() or ("", "")
            rows = c.execute(_PURGE.events_due(_INV_COLS), (before, mark[0], mark[0], mark[1], limit))
            return _trails(c, [_INVOCATIONS.record(r) for r in rows.fetchall()], full)

        return await self._read_for_purge(op)

    async def delete_events(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """:meth:`callgate.store.retention.RetainingStore.delete_events`."""

        def op(c: sqlite3.Connection) -> int:
            c.execute("INSERT INTO retention_purging VALUES (1)")
            done = 0
            for t in trails:
                inv = t.invocation
                if c.execute(
                    _PURGE.delete_events, (inv.invocation_id, inv.invocation_id, inv.updated_at)
                ).rowcount:
                    done += 1
                    c.execute(_PURGE.put_tombstone, tombstone_row(inv, expired_at, exported_to))
            last = trails[-1].invocation
            c.execute(_PURGE.put_mark, (RecordKind.EVENTS.value, last.updated_at, last.invocation_id))
            c.execute("DELETE FROM retention_purging")
            return done

        return await self._purge_write(op)

    async def expired_decisions(self, before: str, limit: int) -> list[DecisionRecord]:
        """Decisions recorded before ``before``, oldest first."""

        def op(c: sqlite3.Connection) -> list[DecisionRecord]:
            rows = c.execute(_PURGE.expired_decisions, (before, limit)).fetchall()
            return [d for (did,) in rows if (d := _read_decision(c, did)) is not None]

        return await self._read_for_purge(op)

    async def delete_decisions(self, ids: Sequence[str]) -> int:
        """Delete these decisions in one transaction; how many."""

        def op(c: sqlite3.Connection) -> int:
            c.execute("INSERT INTO retention_purging VALUES (1)")
            n = sum(c.execute("DELETE FROM decisions WHERE decision_id=?", (i,)).rowcount for i in ids)
            c.execute("DELETE FROM retention_purging")
            return n

        return await self._purge_write(op)

    async def purge_keys(self, expired_before: datetime, limit: int) -> int:
        """:meth:`callgate.store.retention.RetainingStore.purge_keys`."""
        args = (keys_sql._ts(expired_before), limit)
        return await self._purge_write(lambda c: c.execute(_PURGE.purge_keys("rowid"), args).rowcount)

    async def purge_tombstones(self, before: str, limit: int) -> int:
        """Delete tombstones of invocations deleted before ``before``; how many."""
        return await self._purge_write(lambda c: c.execute(_PURGE.purge_tombstones, (before, limit)).rowcount)

    async def get_tombstone(self, invocation_id: str) -> Tombstone | None:
        return await self._call(lambda c: _read_tombstone(c, invocation_id))  # a read: alone is fine

    async def reclaim(self, reserve_pages: int) -> int:
        """Free pages past ``reserve_pages`` go back to the file system (``incremental_vacuum``;
        a database created before ``auto_vacuum = INCREMENTAL`` reuses them instead: its file
        stops growing but does not shrink, docs/RELIABILITY.md). At most
        :data:`RECLAIM_PAGES_PER_OP` pages per writer operation (Python's sqlite3 steps a PRAGMA
        once, and one step frees one page: ~60 us each), so calls queue behind ~15 ms at most."""

        def op(c: sqlite3.Connection) -> int:
            (mode,) = c.execute("PRAGMA auto_vacuum").fetchone()
            (free,) = c.execute("PRAGMA freelist_count").fetchone()
            n = min(int(free) - reserve_pages, RECLAIM_PAGES_PER_OP) if mode == 2 else 0
            for _ in range(max(0, n)):
                c.execute("PRAGMA incremental_vacuum(1)")
            return max(0, n)

        total = 0
        for _ in range(RECLAIM_OPS_PER_PASS):
            n = await self._purge_write(op)
            total += n
            if n < RECLAIM_PAGES_PER_OP:
                break
        return total

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        def op(c: sqlite3.Connection) -> list[InvocationRecord]:
            q = f"SELECT {_INV_COLS} FROM invocations WHERE state=? AND confirmation_expires_at != ''"
            args: tuple[Any, ...] = (State.AUTHORIZED.value,)
            if tenant:
                q += " AND tenant=?"
                args += (tenant,)
            return [_INVOCATIONS.record(r) for r in c.execute(q + " ORDER BY created_at", args).fetchall()]

        return await self._call(op)

    async def record_snapshot(self, revision: str, at: str, detail: Mapping[str, Any]) -> None:
        await self._call(
            lambda c: c.execute(
                "INSERT INTO snapshots (revision, at, detail) VALUES (?,?,?)",
                (revision, at, _dump(dict(detail))),
            )
        )

    async def close(self) -> None:
        if self._purge_reader is not None:
            self._purge_reader.close()
            self._purge_reader = None
        await self._worker.close()

    async def _read_for_purge(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run a retention read on a connection of its own, in a thread: the writer thread only
        deletes (what it reads may be a commit behind; every delete checks again). An in-memory
        database has no second connection: the writer reads."""
        if self._path == ":memory:":
            return await self._call(op)
        if self._purge_reader is None:
            self._purge_reader = sqlite3.connect(
                f"file:{quote(str(Path(self._path).resolve()))}?mode=ro", uri=True, check_same_thread=False
            )
        reader = self._purge_reader
        try:
            return await asyncio.to_thread(op, reader)
        except sqlite3.Error as exc:
            raise store_unavailable(f"retention read failed: {exc}") from exc

    async def put_tool_view_fed(self, v: ToolViewRecord, fed: Sequence[FedResultRecord]) -> None:
        def op(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO tool_views VALUES (?,?,?,?,?,?)", _tool_view_row(v))
            c.executemany(
                f"INSERT OR IGNORE INTO fed_results ({_FED_COLS}) VALUES (?,?,?,?,?)",
                [(f.invocation_id, f.session_id, f.model_call_id, f.at, f.message_sha256) for f in fed],
            )

        await self._call(op)

    async def list_fed(self, invocation_id: str) -> list[FedResultRecord]:
        return await self._call(lambda c: _read_fed(c, invocation_id))

    async def record_decision(self, d: DecisionRecord, *, durable: bool = False) -> None:
        row = (
            d.decision_id, d.at, d.tenant, d.subject, d.capability, d.resource, d.context_digest,
            _dump(list(d.context_keys)), _dump(dict(d.decision)), d.policy_revision, d.trace_id,
            d.span_id, d.parent_span_id,
        )  # fmt: skip
        await self._worker.run(
            lambda c: c.execute(
                f"INSERT INTO decisions ({_DECISION_COLS}) VALUES ({','.join('?' * 13)})", row
            ),
            durable=durable,
        )

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        return await self._call(lambda c: _read_decision(c, decision_id))

    async def list_past_deadline(
        self, now: datetime, limit: int, *, executing: bool = False
    ) -> list[InvocationRecord]:
        # Deadlines are rfc3339() strings: "...:SSZ" or "...:SS.ffffffZ". Selecting up to the
        # whole second of ``now`` ("Z" sorts after ".") is a superset; the exact cut is below.
        bound = rfc3339(now.replace(microsecond=0))

        def op(c: sqlite3.Connection) -> list[InvocationRecord]:
            rows = c.execute(
                f"SELECT {_INV_COLS} FROM invocations WHERE state IN {PAST_DEADLINE_STATES[executing]} "
                "AND deadline != '' AND deadline <= ? ORDER BY deadline LIMIT ?",
                (bound, limit),
            ).fetchall()
            return [_INVOCATIONS.record(r) for r in rows]

        return [inv for inv in await self._call(op) if datetime.fromisoformat(inv.deadline) <= now]

    async def list_pending_page(
        self, tenant: str, after: tuple[str, str] | None, limit: int
    ) -> list[InvocationRecord]:
        def op(c: sqlite3.Connection) -> list[InvocationRecord]:
            q = (
                f"SELECT {_INV_COLS} FROM invocations"
                " WHERE state=? AND confirmation_expires_at != '' AND tenant=?"
            )
            args: tuple[Any, ...] = (State.AUTHORIZED.value, tenant)
            if after is not None:
                q += " AND (created_at, invocation_id) > (?, ?)"
                args += after
            q += " ORDER BY created_at, invocation_id LIMIT ?"
            return [_INVOCATIONS.record(r) for r in c.execute(q, (*args, limit)).fetchall()]

        return await self._call(op)


@dataclass(frozen=True, slots=True)
class _Moved:
    """What a metered invocation's write returns when the meters moved (:func:`fold_sqlite`)."""

    readings: tuple[Any, ...]


class _Conflict(Exception):
    """A compare-and-set lost inside an operation: roll its writes back, report False."""


class SQLiteReader:
    """Read-only access to a callgate SQLite store (``callgate explain``): never writes, never
    migrates. It has the reads of :class:`~callgate.cli.explain.ExplainSource` (invocation,
    events, attempts, result, tool view) plus the tool views of a session and the first
    recording of a policy snapshot, with the same row mapping as :class:`SQLiteStore`.

    Next to a running sidecar (its ``-wal`` file exists) it reads through the WAL like any reader,
    without blocking the writer. A stopped sidecar's store (checkpointed, no ``-wal``) is opened as
    immutable, so not even the ``-wal``/``-shm`` side files are created."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path).resolve()
        if not p.is_file():
            raise FileNotFoundError(str(p))
        live = Path(str(p) + "-wal").exists()
        self._conn = sqlite3.connect(
            f"file:{quote(str(p))}?mode=ro{'' if live else '&immutable=1'}", uri=True
        )
        self._conn.execute("PRAGMA query_only=ON")
        found = sqlite_version(self._conn)
        if found > len(MIGRATIONS):
            self._conn.close()
            raise too_new(found, len(MIGRATIONS), str(p))

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def _tables(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """The invocation record, or ``None``."""
        return _read_invocation(self._conn, invocation_id)

    async def list_events(self, invocation_id: str) -> list[EventRecord]:
        """The invocation's events, in order."""
        return read_events(self._conn, invocation_id)

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]:
        """The invocation's attempts, by number."""
        return _read_attempts(self._conn, invocation_id)

    async def get_result(self, invocation_id: str) -> ResultRecord | None:
        """The encoded tool message of the invocation, or ``None``."""
        return _read_result(self._conn, invocation_id)

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        """The tools shown for one model call, or ``None``."""
        return _read_tool_view(self._conn, session_id, model_call_id)

    async def get_tombstone(self, invocation_id: str) -> Tombstone | None:
        """What is left of an invocation deleted by retention, or ``None``."""
        return _read_tombstone(self._conn, invocation_id) if "expired_invocations" in self._tables() else None

    async def list_tool_views(self, session_id: str) -> list[ToolViewRecord]:
        """Every tool view of a session, in the order they were recorded."""
        rows = self._conn.execute(
            f"SELECT {_TOOL_VIEW_COLS} FROM tool_views WHERE session_id=? ORDER BY created_at, rowid",
            (session_id,),
        ).fetchall()
        return [_tool_view(r) for r in rows]

    async def get_snapshot(self, revision: str) -> dict[str, Any] | None:
        """When ``revision`` first started serving, and its recorded detail (engine, tools)."""
        if "snapshots" not in self._tables():
            return None
        row = self._conn.execute(
            "SELECT at, detail FROM snapshots WHERE revision=? ORDER BY seq LIMIT 1", (revision,)
        ).fetchone()
        if row is None:
            return None
        detail = json.loads(row[1])
        return {"at": row[0], **(detail if isinstance(detail, dict) else {})}

    async def list_fed(self, invocation_id: str) -> list[FedResultRecord]:
        """The model calls the runtime said it fed the invocation's tool message into (an older
        store without the table: none)."""
        if "fed_results" not in self._tables():
            return []
        return _read_fed(self._conn, invocation_id)

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        """One recorded ``Authorize`` decision, or ``None``."""
        if "decisions" not in self._tables():
            return None
        return _read_decision(self._conn, decision_id)
