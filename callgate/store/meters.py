"""Meter counters in the store (issue 30 items 2, 3, 5): reservations, per-call entries and
running totals with exact window edges.

Tables per backend (SQLite ``meter_*``, PostgreSQL ``callgate_meter_*``):

* ``meter_reservations``: one row per (invocation, meter) while the call is in flight: its amount,
  scope, the proposal's time and the windows it counts in. Taken by :meth:`MeterStore.reserve`
  after the idempotency claim found the key free, before the policy is asked, in one transaction
  that reads the meter and inserts the row (SQLite: the one writer; PostgreSQL: a transaction
  advisory lock per meter and scope, so sidecars sharing the database serialize on it). N
  concurrent proposals therefore see N distinct ``before`` values. A Propose's reservation is
  committed with its invocation: on PostgreSQL the transaction holds the locks across the
  decision (:meth:`PostgresMeters.transaction`); on SQLite the reading is checked again under
  the write lock of the invocation's transaction, and a call whose meters moved is decided
  again on the new reading, at which it is then reserved (:meth:`SQLiteMeters.fold`).
* ``meter_entries``: one row per final contribution (invocation, meter) to a meter with a timed
  window, at the proposal's time ``at_ms``; kept for twice the meter's longest window.
* ``meter_totals``: per meter, scope and window length (``width_ms``; 0 is the session window,
  keyed by session) the running total of the final contributions still inside the window, and
  ``through_ms``: the edge the total was last brought to (every entry at or before it is out).
  A read at ``now`` moves the edge to ``now - width``: it subtracts the entries that crossed it
  since (or adds back those a clock that went back brings in again), so its cost is the entries
  that left the window since the last read (amortized O(1) per call), never the history. The
  row is written only when an entry crossed: otherwise the edge stays where it was (no entry
  lies between it and the new one, so the total is the same; issue 30 item 5: a read that
  moves nothing writes nothing). An entry of amount 0 crossing moves it too, so the entries a
  read scans stay those that left since the last read. A total that does not exist yet is computed
  once from the entries.
* ``meter_unknown``: the contributions of an invocation that ended OUTCOME_UNKNOWN, until a
  Reconcile says what happened: FAILED_BEFORE_COMMIT takes them back out of the totals, COMMITTED
  (or any other final state) keeps them.

**Window semantics** (exact): a contribution made at ``t`` (the proposal's reference clock, in
milliseconds) counts in a window of length ``w`` while ``t > now - w``, i.e. for ``now`` in
``[t, t + w)``: one millisecond before ``t + w`` it counts, at ``t + w`` it is gone.

A reservation follows its invocation in the transaction that moves it (:func:`settle_sqlite`,
:func:`settle_pg`, called where the idempotency key follows): COMMITTED, OUTCOME_UNKNOWN,
FAILED_AFTER_COMMIT and OBSERVED make it final (an entry and the totals); a state that ends before
the commit boundary (denied, cancelled, failed before commit) releases it. Until then it counts
while its invocation is EXECUTING (or past the commit boundary, not yet settled), and otherwise
until ``expires_ms``: the latest deadline the call can have (the proposal's time plus the
confirmation window plus the tool's timeout). An invocation that reaches its deadline before
executing is ended by the deadline sweep, which releases the reservation at once; a reservation
whose invocation was never written (the sidecar died mid-Propose) stops counting at
``expires_ms``.

The logic is written once (:func:`_reserve_steps`, :func:`_settle_steps`: generators of
statements); the two backends differ only in SQL text (:class:`_Dialect`) and in how they lock
(SQLite: the one writer; PostgreSQL: advisory locks per meter and scope, taken by reads and
settles alike).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any, Final, Protocol

from callgate.base.meters import LABEL_PREFIX, Contribution, Reading, Window, label_scope
from callgate.base.states import State

__all__ = [
    "MeterStore",
    "MetersMoved",
    "PG_MIGRATION",
    "SQLITE_MIGRATION",
    "meters_of",
    "settle_pg",
    "settle_pg_many",
    "settle_sqlite",
]

FINAL_STATES: Final = frozenset(
    {State.COMMITTED, State.OUTCOME_UNKNOWN, State.FAILED_AFTER_COMMIT, State.OBSERVED}
)
"""A reservation becomes final when its invocation reaches one of these (the call may have run)."""
RELEASE_STATES: Final = frozenset(
    {
        State.PARSE_REJECTED,
        State.VALIDATION_REJECTED,
        State.AUTHORIZATION_REJECTED,
        State.CANCELLED_BEFORE_COMMIT,
        State.FAILED_BEFORE_COMMIT,
    }
)
"""A reservation is released when its invocation ends in one of these (nothing ran)."""
SETTLING: Final = FINAL_STATES | RELEASE_STATES
_RECONCILED: Final = frozenset({State.COMMITTED, State.FAILED_BEFORE_COMMIT})
"""What a Reconcile of an OUTCOME_UNKNOWN invocation ends in (:data:`FINAL_STATES` keep its count)."""


def _tables(prefix: str, amount: str, big: str, without_rowid: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {prefix}meter_entries (
  meter TEXT NOT NULL, scope TEXT NOT NULL, at_ms {big} NOT NULL, invocation_id TEXT NOT NULL,
  amount {amount} NOT NULL, PRIMARY KEY (meter, scope, at_ms, invocation_id)){without_rowid};
CREATE TABLE IF NOT EXISTS {prefix}meter_totals (
  meter TEXT NOT NULL, scope TEXT NOT NULL, width_ms {big} NOT NULL, total {amount} NOT NULL,
  through_ms {big} NOT NULL, PRIMARY KEY (meter, scope, width_ms)){without_rowid};
CREATE INDEX IF NOT EXISTS {prefix}meter_totals_scope ON {prefix}meter_totals (scope, width_ms);
CREATE TABLE IF NOT EXISTS {prefix}meter_unknown (
  invocation_id TEXT NOT NULL, meter TEXT NOT NULL, scope TEXT NOT NULL, amount {amount} NOT NULL,
  at_ms {big} NOT NULL, session_id TEXT NOT NULL, widths TEXT NOT NULL,
  PRIMARY KEY (invocation_id, meter)){without_rowid};
INSERT INTO {prefix}meter_totals SELECT meter, scope, 0, total, 0 FROM {prefix}meter_buckets
  WHERE width_ms = 0 ON CONFLICT DO NOTHING;
{"".join(_bucket_level(prefix, k) for k in range(BUCKET_LEVELS))}DROP TABLE {prefix}meter_buckets
"""


BUCKET_LEVELS: Final = 8
"""Bucket widths per meter and scope the upgrade converts (one per window of the declarations
that shared the meter; a declaration has at most 4)."""


def _bucket_level(prefix: str, level: int) -> str:
    """The upgrade from buckets, one width at a time, finest first: each bucket of the
    ``level``-th finest width of its meter and scope becomes an entry at its start holding what
    the finer widths' entries inside it do not already hold (the calls whose finer buckets were
    pruned, as the window they belonged to kept only twice its length). Every window therefore
    reads what its own buckets held."""
    return f"""INSERT INTO {prefix}meter_entries SELECT meter, scope, at_ms, invocation_id, amount FROM (
  SELECT b.meter, b.scope, b.bucket * b.width_ms AS at_ms, 'bucket:' || b.width_ms AS invocation_id,
  b.total - COALESCE((SELECT SUM(e.amount) FROM {prefix}meter_entries e WHERE e.meter = b.meter
  AND e.scope = b.scope AND e.at_ms >= b.bucket * b.width_ms AND e.at_ms < (b.bucket + 1) * b.width_ms), 0)
  AS amount FROM {prefix}meter_buckets b WHERE b.width_ms > 0 AND (SELECT COUNT(DISTINCT x.width_ms)
  FROM {prefix}meter_buckets x WHERE x.meter = b.meter AND x.scope = b.scope AND x.width_ms > 0
  AND x.width_ms < b.width_ms) = {level}) AS s WHERE s.amount > 0 ON CONFLICT DO NOTHING;
"""


SQLITE_MIGRATION: Final = """
CREATE TABLE IF NOT EXISTS meter_buckets (
  meter TEXT NOT NULL, scope TEXT NOT NULL, width_ms INTEGER NOT NULL, bucket INTEGER NOT NULL,
  total INTEGER NOT NULL, PRIMARY KEY (meter, scope, width_ms, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meter_reservations (
  invocation_id TEXT NOT NULL, meter TEXT NOT NULL, scope TEXT NOT NULL, amount INTEGER NOT NULL,
  at_ms INTEGER NOT NULL, session_id TEXT NOT NULL, expires_ms INTEGER NOT NULL, widths TEXT NOT NULL,
  PRIMARY KEY (invocation_id, meter)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS meter_reservations_scope ON meter_reservations (meter, scope);
CREATE INDEX IF NOT EXISTS meter_buckets_scope ON meter_buckets (scope, width_ms);
"""
"""SQLite migration (the first meters schema: reservations and 1/60-window buckets)."""

SQLITE_EXACT_MIGRATION: Final = _tables("", "INTEGER", "INTEGER", " WITHOUT ROWID") + ";\n"
"""SQLite migration: exact windows (entries and running totals replace the buckets; a meter's
bucketed history becomes entries at its buckets' starts, every width: :func:`_bucket_level`)."""

PG_MIGRATION: Final = """
CREATE TABLE IF NOT EXISTS callgate_meter_buckets (
  meter TEXT NOT NULL, scope TEXT NOT NULL, width_ms BIGINT NOT NULL, bucket BIGINT NOT NULL,
  total NUMERIC(38, 0) NOT NULL, PRIMARY KEY (meter, scope, width_ms, bucket));
CREATE TABLE IF NOT EXISTS callgate_meter_reservations (
  invocation_id TEXT NOT NULL, meter TEXT NOT NULL, scope TEXT NOT NULL, amount NUMERIC(38, 0) NOT NULL,
  at_ms BIGINT NOT NULL, session_id TEXT NOT NULL, expires_ms BIGINT NOT NULL, widths TEXT NOT NULL,
  PRIMARY KEY (invocation_id, meter));
CREATE INDEX IF NOT EXISTS callgate_meter_reservations_scope ON callgate_meter_reservations (meter, scope);
CREATE INDEX IF NOT EXISTS callgate_meter_buckets_scope ON callgate_meter_buckets (scope, width_ms)
"""
"""PostgreSQL migration (``;\\n``-separated statements): the first meters schema."""

PG_EXACT_MIGRATION: Final = _tables("callgate_", "NUMERIC(38, 0)", "BIGINT", "")
"""PostgreSQL migration: exact windows (as :data:`SQLITE_EXACT_MIGRATION`)."""

_SESSION_SEP: Final = "\x1e"
_LIVE_LATER: Final = frozenset({State.EXECUTING}) | FINAL_STATES
_LIVE_SQL: Final = "(" + ",".join(f"'{x.value}'" for x in sorted(_LIVE_LATER)) + ")"


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


@functools.lru_cache(maxsize=256)
def _widths(windows: tuple[Window, ...], keep_ms: int = 0) -> str:
    """The ``widths`` column: the windows, and the meter's keep when a ToolSpec sharing it
    declares a longer window than these (``{"w": [...], "keep": ms}``)."""
    listed = [[w.name, w.ms] for w in windows]
    if keep_ms > max((w.ms for w in windows), default=0):
        return json.dumps({"w": listed, "keep": keep_ms})
    return json.dumps(listed)


@functools.lru_cache(maxsize=256)
def _windows_of(text: str) -> tuple[tuple[Window, ...], int]:
    """The windows of a ``widths`` column and how long the meter's entries are kept (twice this)."""
    got = json.loads(text)
    listed, keep = (got["w"], int(got["keep"])) if isinstance(got, dict) else (got, 0)
    windows = tuple(Window(str(n), int(ms)) for n, ms in listed)
    return windows, max([keep, *(w.ms for w in windows)])


# --------------------------------------------------------------------------- SQL per dialect
@dataclass(frozen=True, slots=True)
class _Dialect:
    """What differs between the backends: table prefix, placeholder, two scalar functions."""

    prefix: str
    ph: str
    least: str
    greatest: str
    locks: bool
    """Whether readers and settles take advisory locks (several writers share the database)."""

    def sql(self, text: str) -> str:
        """``text`` written with ``{t}`` for the prefix and ``?`` for placeholders."""
        out = text.replace("{t}", self.prefix)
        return out if self.ph == "?" else out.replace("%", "%%").replace("?", self.ph)


SQLITE: Final = _Dialect("", "?", "min", "max", False)
POSTGRES: Final = _Dialect("callgate_", "%s", "LEAST", "GREATEST", True)


@functools.lru_cache(maxsize=128)
def _advance_sql(d: _Dialect, keys: int) -> str:
    """Bring ``keys`` running totals to ``now`` (arg 1, 2, 3: now) and return them: one
    statement. Args after the three ``now``: (meter, scope, width) per key."""
    where = " OR ".join(["(meter=? AND scope=? AND width_ms=?)"] * keys)
    return d.sql(
        "UPDATE {t}meter_totals SET total = total - CASE WHEN width_ms = 0 THEN 0 ELSE "
        "(SELECT COALESCE(SUM(CASE WHEN e.at_ms <= ? - {t}meter_totals.width_ms THEN e.amount "
        "ELSE -e.amount END), 0) FROM {t}meter_entries e WHERE e.meter = {t}meter_totals.meter "
        "AND e.scope = {t}meter_totals.scope "
        f"AND e.at_ms > {d.least}({{t}}meter_totals.through_ms, ? - {{t}}meter_totals.width_ms) "
        f"AND e.at_ms <= {d.greatest}({{t}}meter_totals.through_ms, ? - {{t}}meter_totals.width_ms)) END, "
        "through_ms = CASE WHEN width_ms = 0 THEN through_ms ELSE ? - width_ms END "
        f"WHERE {where} RETURNING meter, scope, width_ms, total"
    )


@functools.lru_cache(maxsize=128)
def _read_totals_sql(d: _Dialect, keys: int) -> str:
    """Read ``keys`` running totals with the entries between each one's edge and ``now``'s:
    their signed sum (what bringing the total to ``now`` takes out of it, as
    :func:`_advance_sql` moves it) and how many there are; one statement that writes nothing
    (two index range searches per timed total; measured a little cheaper than one LEFT JOIN
    with GROUP BY). Args: now (5 times), then (meter, scope, width) per key."""
    where = " OR ".join(["(t.meter=? AND t.scope=? AND t.width_ms=?)"] * keys)
    between = (
        "FROM {t}meter_entries e WHERE e.meter = t.meter AND e.scope = t.scope "
        f"AND e.at_ms > {d.least}(t.through_ms, ? - t.width_ms) "
        f"AND e.at_ms <= {d.greatest}(t.through_ms, ? - t.width_ms)"
    )
    return d.sql(
        "SELECT t.meter, t.scope, t.width_ms, t.total, CASE WHEN t.width_ms = 0 THEN 0 ELSE "
        "(SELECT COALESCE(SUM(CASE WHEN e.at_ms <= ? - t.width_ms THEN e.amount ELSE -e.amount END), 0) "
        f"{between}) END, CASE WHEN t.width_ms = 0 THEN 0 ELSE (SELECT COUNT(*) {between}) END "
        f"FROM {{t}}meter_totals t WHERE {where}"
    )


@functools.lru_cache(maxsize=128)
def _in_flight_sql(d: _Dialect, shape: tuple[tuple[bool, ...], ...]) -> str:
    """The live reservations per (contribution, window) of ``shape`` (per contribution, per
    window: is it the session window): one statement. Args: per column (meter, scope, session id
    or lowest time excluded), then now, then (meter, scope) per contribution."""
    cols = []
    for windows in shape:
        for session in windows:
            cond = "r.session_id = ?" if session else "r.at_ms > ?"
            cols.append(f"SUM(CASE WHEN r.meter=? AND r.scope=? AND {cond} THEN r.amount ELSE 0 END)")
    where = " OR ".join(["(r.meter=? AND r.scope=?)"] * len(shape))
    return d.sql(
        f"SELECT {', '.join(cols)} FROM {{t}}meter_reservations r LEFT JOIN {{t}}invocations i "
        f"ON i.invocation_id = r.invocation_id WHERE (r.expires_ms > ? OR i.state IN {_LIVE_SQL}) "
        f"AND ({where})"
    )


@functools.lru_cache(maxsize=64)
def _insert_sql(d: _Dialect, rows: int) -> str:
    one = "(" + ",".join(["?"] * 8) + ")"
    return d.sql("INSERT INTO {t}meter_reservations VALUES " + ",".join([one] * rows))


@functools.lru_cache(maxsize=8)
def _fixed(d: _Dialect) -> dict[str, str]:
    return {
        k: d.sql(v)
        for k, v in {
            "init": "INSERT INTO {t}meter_totals SELECT ?, ?, ?, COALESCE(SUM(amount), 0), ? "
            "FROM {t}meter_entries WHERE meter=? AND scope=? AND at_ms > ? "
            "ON CONFLICT (meter, scope, width_ms) DO NOTHING RETURNING total",
            "take": "DELETE FROM {t}meter_reservations WHERE invocation_id=? "
            "RETURNING meter, scope, amount, at_ms, session_id, widths",
            "unknown": "INSERT INTO {t}meter_unknown VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
            "take_unknown": "DELETE FROM {t}meter_unknown WHERE invocation_id=? "
            "RETURNING meter, scope, amount, at_ms, session_id, widths",
            "entry": "INSERT INTO {t}meter_entries VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
            "unentry": "DELETE FROM {t}meter_entries WHERE meter=? AND scope=? AND at_ms=? AND invocation_id=?",
            "add_timed": "UPDATE {t}meter_totals SET total = total + ? WHERE meter=? AND scope=? "
            "AND width_ms > 0 AND through_ms < ?",
            "add_session": "INSERT INTO {t}meter_totals VALUES (?,?,0,?,?) ON CONFLICT (meter, scope, width_ms) "
            "DO UPDATE SET total = {t}meter_totals.total + excluded.total, "
            f"through_ms = {d.greatest}({{t}}meter_totals.through_ms, excluded.through_ms)",
            "prune": "DELETE FROM {t}meter_entries WHERE meter=? AND scope=? AND at_ms <= ? AND at_ms <= "
            "COALESCE((SELECT MIN(through_ms) FROM {t}meter_totals WHERE meter=? AND scope=? AND width_ms > 0), ?)",
            "release": "DELETE FROM {t}meter_reservations WHERE invocation_id=?",
            "move": "UPDATE {t}meter_totals SET total = total - ?, through_ms = ? WHERE meter=? AND scope=? "
            "AND width_ms=?",
            "labels": "SELECT meter FROM {t}meter_totals WHERE scope=? AND width_ms=0 AND total>0 "
            "AND meter LIKE 'label:%'",
        }.items()
    }


# --------------------------------------------------------------------------- the logic, once
@dataclass(frozen=True, slots=True)
class _Stmt:
    sql: str
    args: Sequence[Any]
    rows: bool = False
    """Whether the statement returns rows (the driver then sends them back; otherwise the
    driver sends ``[rowcount]``)."""
    lock: bool = False
    """Not a statement: take the advisory locks named in ``args`` (PostgreSQL; SQLite has one
    writer and skips it)."""


def _lock(pairs: Sequence[tuple[str, str]]) -> _Stmt:
    """The advisory locks of these (meter, scope) pairs, in one order (no deadlock between two
    transactions taking several)."""
    return _Stmt("", sorted({f"{m}\x1f{s}" for m, s in pairs}), lock=True)


Steps = Generator[_Stmt, list[Any], Any]


def _reserve_steps(
    d: _Dialect,
    invocation_id: str | None,
    session_id: str,
    ks: Sequence[Contribution],
    now_ms: int,
    exp_ms: int,
) -> Steps:
    """Read every window of ``ks`` at ``now_ms`` (final totals brought to the edge, plus live
    reservations) and, with ``invocation_id``, reserve them: the readings. Runs inside one
    transaction that holds the meters' locks."""
    keys: dict[tuple[str, str, int], None] = {}
    wanted: list[tuple[tuple[str, str, int], Contribution, str]] = []
    flight_args: list[Any] = []
    pairs: list[Any] = []
    for k in ks:
        meter, scope = k.meter, k.scope
        pairs += (meter, scope)
        for w in k.windows:
            if w.ms:
                key = (meter, scope, w.ms)
                flight_args += (meter, scope, now_ms - w.ms)
            else:
                key = (meter, scope + _SESSION_SEP + session_id, 0)
                flight_args += (meter, scope, session_id)
            keys[key] = None
            wanted.append((key, k, w.name))
    if d.locks:
        yield _lock(list(zip(pairs[::2], pairs[1::2], strict=True)))
    got = yield _Stmt(
        _read_totals_sql(d, len(keys)), [*([now_ms] * 5), *(x for key in keys for x in key)], True
    )
    finals: dict[tuple[str, str, int], int] = {}
    for m, s, w, t, out, moved in got:
        key, crossed = (m, s, int(w)), int(out)
        finals[key] = int(t) - crossed
        if int(moved):  # entries crossed the window's edge: the total is brought to it (else it
            # stays as it is: the same value, at an edge no entry lies beyond; no row written)
            yield _Stmt(_fixed(d)["move"], [crossed, now_ms - key[2], *key])
    for key in keys:
        if key not in finals:
            meter, scope, width = key
            if width == 0:
                finals[key] = 0
                continue
            lo = now_ms - width
            row = yield _Stmt(_fixed(d)["init"], [meter, scope, width, lo, meter, scope, lo], True)
            finals[key] = int(row[0][0]) if row else 0
    shape = tuple(tuple(w.ms == 0 for w in k.windows) for k in ks)
    (flight,) = yield _Stmt(_in_flight_sql(d, shape), [*flight_args, now_ms, *pairs], True)
    out = tuple(
        Reading(k.meter, name, finals[key] + int(flight[i] or 0), k.amount, k.scale)
        for i, (key, k, name) in enumerate(wanted)
    )
    if invocation_id is not None:
        yield _reservation(d, invocation_id, session_id, ks, now_ms, exp_ms)
    return out


def _reservation(
    d: _Dialect, invocation_id: str, session_id: str, ks: Sequence[Contribution], now_ms: int, exp_ms: int
) -> _Stmt:
    """The insert of an invocation's reservation rows (one per contribution)."""
    rows: list[Any] = []
    for k in ks:
        rows += (
            invocation_id,
            k.meter,
            k.scope,
            k.amount,
            now_ms,
            session_id,
            exp_ms,
            _widths(k.windows, k.keep_ms),
        )
    return _Stmt(_insert_sql(d, len(ks)), rows)


def _add_steps(d: _Dialect, invocation_id: str, row: Sequence[Any], sign: int) -> Steps:
    """Add (``sign`` 1) or take back (-1) one final contribution: its entry and its totals."""
    meter, scope, amount, at_ms, session_id, widths = row
    amount, at_ms = int(amount) * sign, int(at_ms)
    windows, keep = _windows_of(str(widths))
    timed = [w.ms for w in windows if w.ms]
    if timed:
        if sign > 0:
            yield _Stmt(_fixed(d)["entry"], [meter, scope, at_ms, invocation_id, amount])
            cut = at_ms - 2 * keep
            yield _Stmt(_fixed(d)["prune"], [meter, scope, cut, meter, scope, cut])
        else:
            yield _Stmt(_fixed(d)["unentry"], [meter, scope, at_ms, invocation_id])
        yield _Stmt(_fixed(d)["add_timed"], [amount, meter, scope, at_ms])
    if len(timed) < len(windows):
        yield _Stmt(_fixed(d)["add_session"], [meter, scope + _SESSION_SEP + session_id, amount, at_ms])


def _settle_steps(d: _Dialect, moves: Sequence[tuple[str, State]]) -> Steps:
    """Make each invocation's reservations final or release them as its state says; a Reconcile
    of an OUTCOME_UNKNOWN invocation keeps (COMMITTED) or takes back (FAILED_BEFORE_COMMIT) what
    it counted. All the meters' locks of the moves are taken at once, in one sorted order, before
    any total changes (two transactions that settle several invocations never deadlock)."""
    work: list[tuple[str, Sequence[Any], int, bool]] = []
    for invocation_id, state in moves:
        if state not in SETTLING:
            continue
        if state not in FINAL_STATES and state not in _RECONCILED:  # released: nothing read back
            yield _Stmt(_fixed(d)["release"], [invocation_id])
            continue
        rows = yield _Stmt(_fixed(d)["take"], [invocation_id], True)
        if not rows:
            if state in _RECONCILED:
                known = yield _Stmt(_fixed(d)["take_unknown"], [invocation_id], True)
                if state is State.FAILED_BEFORE_COMMIT and known:
                    work.append((invocation_id, known, -1, False))
        elif state in FINAL_STATES:
            work.append((invocation_id, rows, 1, state is State.OUTCOME_UNKNOWN))
    if d.locks and work:
        yield _lock([(str(r[0]), str(r[1])) for _, taken, _, _ in work for r in taken])
    for invocation_id, taken, sign, unknown in work:
        for row in taken:
            if unknown:
                yield _Stmt(_fixed(d)["unknown"], [invocation_id, *row])
            yield from _add_steps(d, invocation_id, row, sign)


@functools.lru_cache(maxsize=64)
def _stale_sql(d: _Dialect, keeps: int) -> str:
    """The next totals after a mark, in key order, each with what retention does with it
    (:class:`_Due`): a timed total not brought forward for twice its meter's keep (``keeps``
    (meter, keep) pairs in the CASE), a session total idle past the idle time, or one written
    before session totals kept their last time (``through_ms`` 0). Args: now, the pairs, the
    idle time (ms; 0: sessions are kept), the idle cut-off, the mark (meter, scope, width), how
    many to scan."""
    case = "CASE meter " + " ".join(["WHEN ? THEN ?"] * keeps) + " ELSE 0 END" if keeps else "0"
    return d.sql(
        f"SELECT meter, scope, width_ms, CASE WHEN width_ms > 0 THEN (CASE WHEN through_ms < "
        f"? - 2 * {d.greatest}(width_ms, {case}) THEN 1 ELSE 0 END) WHEN ? = 0 THEN 0 "
        "WHEN through_ms = 0 THEN 3 WHEN through_ms <= ? THEN 2 ELSE 0 END FROM {t}meter_totals "
        "WHERE (meter, scope, width_ms) > (?, ?, ?) ORDER BY meter, scope, width_ms LIMIT ?"
    )


class _Due(IntEnum):
    """What a retention batch does with a total it scanned (:func:`_stale_sql`)."""

    KEEP = 0
    STALE = 1
    """A timed total not read for twice its meter's keep: brought forward, its old entries go."""
    IDLE = 2
    """A session total (or label) no call of its session added to for the idle time: it goes."""
    UNSTAMPED = 3
    """A session total written before they kept their last time: stamped now (idle from now)."""


SCAN_PER_BATCH: Final = 10
"""A retention batch reads at most this many times ``batch`` totals (from where the last
one stopped: there is no index on the edge, which every read moves) for its due ones."""
Mark = tuple[str, str, int]
"""Where the scan of the totals stopped (a total's key); the start is ``("", "", 0)``."""
START: Final[Mark] = ("", "", 0)


@functools.lru_cache(maxsize=8)
def _purge_fixed(d: _Dialect) -> dict[str, str]:
    return {
        k: d.sql(v)
        for k, v in {
            # entries of (meter, scope) past twice the longest window, and out of every total
            "entries": "DELETE FROM {t}meter_entries WHERE meter=? AND scope=? AND at_ms <= (SELECT "
            f"{d.least}(? - 2 * {d.greatest}(?, COALESCE(MAX(width_ms), 0)), COALESCE(MIN(through_ms), ?)) "
            "FROM {t}meter_totals WHERE meter=? AND scope=? AND width_ms > 0)",
            # the timed totals of a scope with no entry left (each is 0)
            "totals": "DELETE FROM {t}meter_totals WHERE meter=? AND scope=? AND width_ms > 0 AND NOT EXISTS "
            "(SELECT 1 FROM {t}meter_entries e WHERE e.meter=? AND e.scope=?)",
            # reconcile records no Reconcile can use: the invocation is gone or no longer unknown
            "unknown": "DELETE FROM {t}meter_unknown WHERE (invocation_id, meter) IN (SELECT u.invocation_id, "
            "u.meter FROM {t}meter_unknown u LEFT JOIN {t}invocations i ON i.invocation_id = u.invocation_id "
            f"WHERE i.invocation_id IS NULL OR i.state <> '{State.OUTCOME_UNKNOWN.value}' LIMIT ?)",
            # reservations of a Propose that never wrote its invocation, a day past their expiry
            # a session total idle past the cut-off (checked again: a call may have added since)
            "idle": "DELETE FROM {t}meter_totals WHERE meter=? AND scope=? AND width_ms=0 AND through_ms <= ?",
            "stamp": "UPDATE {t}meter_totals SET through_ms=? WHERE meter=? AND scope=? AND width_ms=0 "
            "AND through_ms=0",
            "reservations": "DELETE FROM {t}meter_reservations WHERE (invocation_id, meter) IN (SELECT "
            "r.invocation_id, r.meter FROM {t}meter_reservations r LEFT JOIN {t}invocations i ON "
            "i.invocation_id = r.invocation_id WHERE r.expires_ms < ? AND i.invocation_id IS NULL LIMIT ?)",
        }.items()
    }


RESERVATION_GRACE_MS: Final = 86_400_000
"""A reservation whose invocation was never written is deleted this long after its expiry (it
stopped counting at its expiry; the Propose that took it is long over)."""


def _purge_steps(
    d: _Dialect, now_ms: int, keeps: dict[str, int], limit: int, mark: Mark, idle_ms: int = 0
) -> Steps:
    """One retention batch of the meter tables (``keeps``: the serving snapshot's longest
    window per meter), scanning the totals after ``mark``: timed totals not read for twice their
    meter's keep are brought to ``now`` (so no entry they still count is lost), the entries of
    their scopes past twice the keep go, then the totals of scopes with no entry left; with
    ``idle_ms``, session totals and session labels no call of their session added to for that
    long go (the session counts as ended); reconcile records no Reconcile can use; reservations
    never followed by their invocation. Returns (rows deleted, the mark to go on from; None: the
    scan reached the end)."""
    pairs_args = [x for m, k in sorted(keeps.items()) for x in (m, k)]
    scan = limit * SCAN_PER_BATCH
    args = [now_ms, *pairs_args, idle_ms, now_ms - idle_ms, *mark, scan]
    rows = yield _Stmt(_stale_sql(d, len(keeps)), args, True)
    due = [(str(m), str(sc), int(w), _Due(int(k))) for m, sc, w, k in rows if int(k)][:limit]
    nxt: Mark | None = None
    if len(due) == limit:
        nxt = (due[-1][0], due[-1][1], due[-1][2])
    elif len(rows) == scan:
        nxt = (str(rows[-1][0]), str(rows[-1][1]), int(rows[-1][2]))
    stale = [key[:3] for key in due if key[3] is _Due.STALE]
    deleted = 0
    for meter, scope, _, kind in due:
        if kind is _Due.IDLE:
            gone = yield _Stmt(_purge_fixed(d)["idle"], [meter, scope, now_ms - idle_ms])
            deleted += int(gone[0]) if gone else 0
        elif kind is _Due.UNSTAMPED:
            yield _Stmt(_purge_fixed(d)["stamp"], [now_ms, meter, scope])
    if stale:
        keys = {(str(m), str(sc), int(w)): None for m, sc, w in stale}
        pairs = sorted({(m, sc) for m, sc, _ in keys})
        if d.locks:
            yield _lock(pairs)
        flat = [x for key in keys for x in key]
        yield _Stmt(_advance_sql(d, len(keys)), [now_ms, now_ms, now_ms, now_ms, *flat], True)
        for meter, scope in pairs:
            keep = keeps.get(meter, 0)
            gone = yield _Stmt(_purge_fixed(d)["entries"], [meter, scope, now_ms, keep, now_ms, meter, scope])
            deleted += int(gone[0]) if gone else 0
            gone = yield _Stmt(_purge_fixed(d)["totals"], [meter, scope, meter, scope])
            deleted += int(gone[0]) if gone else 0
    gone = yield _Stmt(_purge_fixed(d)["unknown"], [limit])
    deleted += int(gone[0]) if gone else 0
    gone = yield _Stmt(_purge_fixed(d)["reservations"], [now_ms - RESERVATION_GRACE_MS, limit])
    deleted += int(gone[0]) if gone else 0
    return deleted, nxt


# --------------------------------------------------------------------------- drivers
def _run_sqlite(c: Any, steps: Steps) -> Any:
    """Run ``steps`` on the SQLite writer's connection (locks: the writer is the only one)."""
    try:
        stmt = next(steps)
        while True:
            if stmt.lock:
                stmt = steps.send([])
                continue
            cur = c.execute(stmt.sql, stmt.args)
            stmt = steps.send(cur.fetchall() if stmt.rows else [cur.rowcount])
    except StopIteration as done:
        return done.value


_PG_LOCKS: Final = "SELECT pg_advisory_xact_lock(hashtextextended(n, 30)) FROM unnest(%s::text[]) AS n"
"""Take the named advisory locks in the order of the array (the sorted order), in one statement."""


async def _run_pg(conn: Any, steps: Steps) -> Any:
    """Run ``steps`` in a PostgreSQL transaction (locks: transaction advisory locks)."""
    try:
        stmt = next(steps)
        while True:
            if stmt.lock:  # one statement, in the sorted order of the names
                await conn.execute(_PG_LOCKS, (list(stmt.args),))
                stmt = steps.send([])
                continue
            cur = await conn.execute(stmt.sql, stmt.args)
            stmt = steps.send(await cur.fetchall() if stmt.rows else [cur.rowcount])
    except StopIteration as done:
        return done.value


class MeterStore(Protocol):
    """Reservations and readings of the declared meters (one backend)."""

    async def reserve(
        self,
        invocation_id: str,
        session_id: str,
        contributions: Sequence[Contribution],
        now: datetime,
        expires: datetime,
    ) -> tuple[Reading, ...]:
        """Read every meter window of ``contributions`` and reserve them for ``invocation_id``,
        atomically (concurrent reservations of one meter and scope are serialized)."""
        ...

    async def release(self, invocation_id: str) -> None:
        """Drop the invocation's reservations (its Propose wrote nothing, or lost its key)."""
        ...

    async def totals(self, meter: str, scope: str, window: Window, session_id: str, now: datetime) -> int:
        """The window's value now, final and in flight (tests, explain)."""
        ...

    async def labels(self, tenant: str, session_id: str) -> tuple[str, ...]:
        """The labels of the results the session has observed (final label meters), sorted."""
        ...

    async def purge(
        self, now: datetime, keeps: Mapping[str, int], limit: int, mark: Mark = START, idle_ms: int = 0
    ) -> tuple[int, Mark | None]:
        """One retention batch of the meter tables at ``now`` (``keeps``: the longest window per
        meter the serving snapshot declares; ``idle_ms``: session totals and labels idle this
        long go, 0: kept), scanning the totals after ``mark``: how many rows were deleted, and
        where to go on (None: the scan reached the end)."""
        ...


def _labels_of(rows: Sequence[Any]) -> tuple[str, ...]:
    return tuple(sorted(str(r[0])[len(LABEL_PREFIX) :] for r in rows))


# --------------------------------------------------------------------------- SQLite
def settle_sqlite(c: Any, invocation_id: str, state: State) -> None:
    """Make the invocation's reservations final, or release them, as ``state`` says (inside the
    transaction that moved it). Nothing for a state that does not settle, or no reservation."""
    if state in SETTLING:
        _run_sqlite(c, _settle_steps(SQLITE, [(invocation_id, state)]))


def settle_sqlite_rows(c: Any, rows: Sequence[tuple[str, State]]) -> None:
    """:func:`settle_sqlite` for the invocations a batched Propose write ended (before the
    commit boundary: releases only)."""
    for invocation_id, state in rows:
        if state in RELEASE_STATES:
            c.execute(_fixed(SQLITE)["release"], (invocation_id,))


class MetersMoved(Exception):
    """The meters a Propose's decision read moved before its invocation was written (SQLite,
    :meth:`SQLiteMeters.fold`): nothing of the invocation was written; the call's reservation is
    now committed at :attr:`readings`, the reading taken under the write lock, and the policy
    must decide again on it (the write that follows then needs no check)."""

    def __init__(self, readings: tuple[Reading, ...]) -> None:
        super().__init__("the meters moved since they were read")
        self.readings = readings


FOLD_STATES: Final = frozenset({State.AUTHORIZED, State.PREPARED, State.AUTHORIZATION_REJECTED})
"""An invocation written in one of these had its decision made on the meters' reading (an
allow or a confirmation reserves; a deny only checks the reading it recorded)."""


@dataclass(slots=True)
class _Fold:
    """A metered Propose's reservation on SQLite, written with its invocation (:meth:`SQLiteMeters.fold`)."""

    meters: SQLiteMeters
    task: asyncio.Task[Any] | None
    invocation_id: str = ""
    session_id: str = ""
    parts: tuple[Contribution, ...] = ()
    now_ms: int = 0
    exp_ms: int = 0
    ahead: Any = None
    """The reading carried by the task's next writer transaction (the key's look-up)."""
    readings: tuple[Reading, ...] | None = None
    """What the decision read (None: nothing read yet)."""
    stamp: tuple[int, int] = (-1, -1)
    """(``PRAGMA data_version``, ``total_changes``) right after the reading: the same values
    at the write mean no connection changed the database since, so the reading still holds."""
    reserved: bool = False
    """The reservation rows are committed (the meters moved: reserved at the new reading)."""
    written: bool = False
    """Committed with the invocation."""


_FOLD: ContextVar[_Fold | None] = ContextVar("callgate_sqlite_fold", default=None)


def _stamp(c: Any) -> tuple[int, int]:
    return int(c.execute("PRAGMA data_version").fetchone()[0]), int(c.total_changes)


def _read_stamped(c: Any, fold: _Fold) -> tuple[tuple[Reading, ...], tuple[int, int]]:
    """The reading of ``fold``'s meters at its time (nothing reserved; a total some entry
    crossed is brought to the edge), and the database's stamp after it."""
    got = _run_sqlite(c, _reserve_steps(SQLITE, None, fold.session_id, fold.parts, fold.now_ms, 0))
    return got, _stamp(c)


def fold_sqlite(c: Any, fold: _Fold, state: State) -> tuple[Reading, ...] | None:
    """Inside the transaction that writes ``fold``'s invocation in ``state`` (the write lock
    held, before anything else of it is written): reserve at the reading the decision was made
    on, or, if the meters moved since that reading, reserve at the new reading and return it
    (then nothing else may be written: the policy decides again). A deny reserves nothing but
    is checked the same way (its event records the reading)."""
    if fold.readings is None or fold.reserved or fold.written or state not in FOLD_STATES:
        return None
    if _stamp(c) == fold.stamp:  # nothing changed the database since the reading: it holds
        if state is not State.AUTHORIZATION_REJECTED:
            stmt = _reservation(
                SQLITE, fold.invocation_id, fold.session_id, fold.parts, fold.now_ms, fold.exp_ms
            )
            c.execute(stmt.sql, stmt.args)
        return None
    got: tuple[Reading, ...] = _run_sqlite(
        c, _reserve_steps(SQLITE, fold.invocation_id, fold.session_id, fold.parts, fold.now_ms, fold.exp_ms)
    )
    if got == fold.readings:  # the same reading (a deny's rows go with its settle, as before)
        return None
    return got


def unfold_sqlite(c: Any, fold: _Fold) -> None:
    """Take back what :func:`fold_sqlite` reserved in this transaction (the write it came with
    lost its idempotency key: no invocation, so no reservation)."""
    c.execute(_fixed(SQLITE)["release"], (fold.invocation_id,))


def held_fold(worker: Any) -> _Fold | None:
    """The current task's fold on ``worker``'s database, if its reading is pending a write."""
    fold = _FOLD.get()
    if fold is None or fold.meters._worker is not worker or fold.task is not asyncio.current_task():
        return None
    if fold.readings is None or fold.reserved or fold.written:
        return None
    return fold


class SQLiteMeters:
    """:class:`MeterStore` on the SQLite store's writer thread. Inside :meth:`fold` a
    reservation is written by the invocation's own transaction (one commit); elsewhere it is a
    writer transaction of its own."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def _fold(self) -> _Fold | None:
        fold = _FOLD.get()
        if fold is None or fold.meters is not self or fold.task is not asyncio.current_task():
            return None
        return fold

    @asynccontextmanager
    async def fold(self) -> AsyncIterator[None]:
        """A metered Propose inside this block: :meth:`reserve` only reads (in the transaction
        of the idempotency key's look-up when :meth:`read_ahead` named the reading first), and
        the invocation's write (:meth:`SQLiteStore.create_invocation`) reserves in its own
        transaction, under the write lock, if the reading still holds there; if the meters moved
        it reserves at the new reading instead and raises :class:`MetersMoved` for the policy
        to decide again. Exact across processes sharing the file: the reservation is written
        under the one write lock with the reading it was decided on."""
        token = _FOLD.set(_Fold(self, asyncio.current_task()))
        try:
            yield
        finally:
            _FOLD.reset(token)
            self._worker.drop_ahead()

    def read_ahead(
        self,
        invocation_id: str,
        session_id: str,
        contributions: Sequence[Contribution],
        now: datetime,
        expires: datetime,
    ) -> None:
        """Inside :meth:`fold`: read these meters in the task's next writer transaction, with
        whatever it runs (the key's look-up), for :meth:`reserve` to use."""
        fold = self._fold()
        if fold is None:
            return
        fold.invocation_id, fold.session_id, fold.parts = invocation_id, session_id, tuple(contributions)
        fold.now_ms, fold.exp_ms = _ms(now), _ms(expires)
        fold.ahead = self._worker.ahead(lambda c: _read_stamped(c, fold))

    def planned(self, invocation_id: str) -> tuple[Contribution, ...] | None:
        """The contributions :meth:`read_ahead` was given for ``invocation_id`` (None: none)."""
        fold = self._fold()
        if fold is None or fold.invocation_id != invocation_id or not fold.parts:
            return None
        return fold.parts

    async def reserve(
        self,
        invocation_id: str,
        session_id: str,
        contributions: Sequence[Contribution],
        now: datetime,
        expires: datetime,
    ) -> tuple[Reading, ...]:
        now_ms, exp_ms = _ms(now), _ms(expires)
        fold = self._fold()
        if fold is not None:
            parts = tuple(contributions)
            same = (fold.invocation_id, fold.session_id, fold.parts, fold.now_ms, fold.exp_ms) == (
                invocation_id, session_id, parts, now_ms, exp_ms,
            )  # fmt: skip
            readings: tuple[Reading, ...]
            if same and fold.ahead is not None and fold.ahead.done:
                readings, fold.stamp = fold.ahead.value
            else:
                fold.invocation_id, fold.session_id, fold.parts = invocation_id, session_id, parts
                fold.now_ms, fold.exp_ms = now_ms, exp_ms
                self._worker.drop_ahead()
                readings, fold.stamp = await self._worker.run(lambda c: _read_stamped(c, fold))
            fold.readings = readings
            return readings
        result: tuple[Reading, ...] = await self._worker.run(
            lambda c: _run_sqlite(
                c, _reserve_steps(SQLITE, invocation_id, session_id, contributions, now_ms, exp_ms)
            )
        )
        return result

    async def release(self, invocation_id: str) -> None:
        fold = self._fold()
        if fold is not None and fold.invocation_id == invocation_id and not fold.reserved:
            return  # nothing committed: the reservation is written with the invocation or not at all
        await self._worker.run(lambda c: c.execute(_fixed(SQLITE)["release"], (invocation_id,)))

    async def totals(self, meter: str, scope: str, window: Window, session_id: str, now: datetime) -> int:
        k = Contribution(meter, scope, 0, (window,), 0)
        got: tuple[Reading, ...] = await self._worker.run(
            lambda c: _run_sqlite(c, _reserve_steps(SQLITE, None, session_id, [k], _ms(now), 0))
        )
        return got[0].before

    async def purge(
        self, now: datetime, keeps: Mapping[str, int], limit: int, mark: Mark = START, idle_ms: int = 0
    ) -> tuple[int, Mark | None]:
        """One retention batch of the meter tables (:func:`_purge_steps`)."""
        got: tuple[int, Mark | None] = await self._worker.run(
            lambda c: _run_sqlite(c, _purge_steps(SQLITE, _ms(now), dict(keeps), limit, mark, idle_ms)),
            alone=False,
        )
        return got

    async def labels(self, tenant: str, session_id: str) -> tuple[str, ...]:
        scope = label_scope(tenant, session_id) + _SESSION_SEP + session_id
        found: tuple[str, ...] = await self._worker.run(
            lambda c: _labels_of(c.execute(_fixed(SQLITE)["labels"], (scope,)).fetchall())
        )
        return found


# --------------------------------------------------------------------------- PostgreSQL
async def settle_pg(conn: Any, invocation_id: str, state: State) -> None:
    """:func:`settle_sqlite` on PostgreSQL (inside the transaction that moved the invocation).
    A contribution made final or taken back holds its meter's advisory lock, as reads do."""
    if state in SETTLING:
        await _run_pg(conn, _settle_steps(POSTGRES, [(invocation_id, state)]))


async def settle_pg_many(conn: Any, moves: Sequence[tuple[str, State]]) -> None:
    """:func:`settle_pg` for several invocations moved in one transaction: their meters' locks
    are taken together, in one sorted order, before any total changes."""
    if any(state in SETTLING for _, state in moves):
        await _run_pg(conn, _settle_steps(POSTGRES, moves))


class PostgresMeters:
    """:class:`MeterStore` on the PostgreSQL store (shared by sidecars)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def reserve(
        self,
        invocation_id: str,
        session_id: str,
        contributions: Sequence[Contribution],
        now: datetime,
        expires: datetime,
    ) -> tuple[Reading, ...]:
        now_ms, exp_ms = _ms(now), _ms(expires)
        async with self._store._tx() as conn:
            result: tuple[Reading, ...] = await _run_pg(
                conn, _reserve_steps(POSTGRES, invocation_id, session_id, contributions, now_ms, exp_ms)
            )
            return result

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """The store's transaction held across a Propose (:meth:`PostgresStore.transaction`):
        :meth:`reserve` inside it is committed with the invocation's write, or not at all."""
        cm: AbstractAsyncContextManager[None] = self._store.transaction()
        return cm

    async def release(self, invocation_id: str) -> None:
        if self._store.holds():  # reserved in the held transaction: its end decides
            return
        async with self._store._tx() as conn:
            await conn.execute(_fixed(POSTGRES)["release"], (invocation_id,))

    async def totals(self, meter: str, scope: str, window: Window, session_id: str, now: datetime) -> int:
        k = Contribution(meter, scope, 0, (window,), 0)
        async with self._store._tx() as conn:
            got: tuple[Reading, ...] = await _run_pg(
                conn, _reserve_steps(POSTGRES, None, session_id, [k], _ms(now), 0)
            )
        return got[0].before

    async def purge(
        self, now: datetime, keeps: Mapping[str, int], limit: int, mark: Mark = START, idle_ms: int = 0
    ) -> tuple[int, Mark | None]:
        """One retention batch of the meter tables (:func:`_purge_steps`)."""
        async with self._store._tx() as conn:
            got: tuple[int, Mark | None] = await _run_pg(
                conn, _purge_steps(POSTGRES, _ms(now), dict(keeps), limit, mark, idle_ms)
            )
        return got

    async def labels(self, tenant: str, session_id: str) -> tuple[str, ...]:
        scope = label_scope(tenant, session_id) + _SESSION_SEP + session_id
        async with self._store._tx() as conn:
            cur = await conn.execute(_fixed(POSTGRES)["labels"], (scope,))
            return _labels_of(await cur.fetchall())


def meters_of(store: object) -> MeterStore | None:
    """The meter store of ``store`` (through wrappers, as retention finds its store), or None."""
    while not hasattr(store, "meters") and hasattr(store, "inner"):
        store = store.inner
    make = getattr(store, "meters", None)
    return make() if callable(make) else None
