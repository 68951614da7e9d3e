"""Meter counters in the store (issue 30 items 2, 3, 5): reservations and bucketed totals.

Two tables per backend (SQLite ``meter_*``, PostgreSQL ``callgate_meter_*``):

* ``meter_reservations``: one row per (invocation, meter) while the call is in flight: its amount,
  scope, the proposal's time and the windows it counts in. Taken by :meth:`MeterStore.reserve`
  after the idempotency claim found the key free, before the policy is asked, in one transaction
  that reads the meter and inserts the row (SQLite: the one writer; PostgreSQL: a transaction
  advisory lock per meter and scope, so sidecars sharing the database serialize on it). N
  concurrent proposals therefore see N distinct ``before`` values.
* ``meter_buckets``: the final totals, per meter, scope, window width and bucket (1/60 of the
  window; ``width_ms`` 0 is the session window, keyed by session).

A reservation follows its invocation in the transaction that moves it (:func:`settle_sqlite`,
:func:`settle_pg`, called where the idempotency key follows): COMMITTED, OUTCOME_UNKNOWN,
FAILED_AFTER_COMMIT and OBSERVED make it final (added to its buckets); a state that ends before
the commit boundary (denied, cancelled, failed before commit) releases it. Until then it counts
while its invocation is EXECUTING (or past the commit boundary, not yet settled), and otherwise
until ``expires_ms``: the latest deadline the call can have (the proposal's time plus the
confirmation window plus the tool's timeout). An invocation that reaches its deadline before
executing is ended by the deadline sweep, which releases the reservation at once; a reservation
whose invocation was never written (the sidecar died mid-Propose) stops counting at
``expires_ms``.

A read touches at most the 60 buckets of a window plus the in-flight reservations of its scope:
its cost does not grow with the number of stored invocations (no event is ever scanned).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, Protocol

from callgate.core.meters import LABEL_PREFIX, Contribution, Reading, Window, label_scope
from callgate.core.states import State

__all__ = [
    "MeterStore",
    "PG_MIGRATION",
    "SQLITE_MIGRATION",
    "meters_of",
    "settle_pg",
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
"""SQLite migration: the meter tables."""

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
"""PostgreSQL migration: the meter tables (``;\\n``-separated statements)."""

_SESSION_SEP: Final = "\x1e"
_LIVE_LATER: Final = frozenset({State.EXECUTING}) | FINAL_STATES


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _bucket_key(c: Contribution, w: Window, session_id: str, at_ms: int) -> tuple[str, int, int]:
    """(scope, width, bucket) of a contribution made at ``at_ms`` in window ``w``."""
    if w.ms == 0:
        return c.scope + _SESSION_SEP + session_id, 0, 0
    g = w.bucket_ms
    return c.scope, g, at_ms // g


def _final_bounds(c: Contribution, w: Window, session_id: str, now_ms: int) -> tuple[str, int, int]:
    """(scope, width, lowest bucket excluded) of the buckets window ``w`` counts at ``now_ms``."""
    if w.ms == 0:
        return c.scope + _SESSION_SEP + session_id, 0, -1
    g = w.bucket_ms
    return c.scope, g, now_ms // g - w.ms // g


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


# --------------------------------------------------------------------------- both backends
_LIVE_SQL: Final = "(" + ",".join(f"'{x.value}'" for x in sorted(_LIVE_LATER)) + ")"


def _read_sql(k: Contribution, session_id: str, now_ms: int, prefix: str, ph: str) -> tuple[str, list[Any]]:
    """One statement reading every window of ``k``: per window its final buckets and its live
    reservations (a reservation counts while it has not expired or its invocation is EXECUTING
    or past the commit boundary and not yet settled). ``ph``: the placeholder."""
    cols: list[str] = []
    args: list[Any] = []
    for w in k.windows:
        scope, width, low = _final_bounds(k, w, session_id, now_ms)
        cols.append(
            f"(SELECT COALESCE(SUM(total), 0) FROM {prefix}meter_buckets WHERE meter={ph} AND scope={ph} "
            f"AND width_ms={ph} AND bucket>{ph})"
        )
        args += [k.meter, scope, width, low]
        wargs: list[Any]
        if w.ms == 0:
            window, wargs = f"r.session_id={ph}", [session_id]
        else:
            g = w.bucket_ms
            window, wargs = f"r.at_ms / {g} > {ph}", [now_ms // g - w.ms // g]
        cols.append(
            f"(SELECT COALESCE(SUM(r.amount), 0) FROM {prefix}meter_reservations r LEFT JOIN "
            f"{prefix}invocations i ON i.invocation_id = r.invocation_id WHERE r.meter={ph} AND r.scope={ph} "
            f"AND (r.expires_ms > {ph} OR i.state IN {_LIVE_SQL}) AND {window})"
        )
        args += [k.meter, k.scope, now_ms, *wargs]
    return "SELECT " + ", ".join(cols), args


def _readings(k: Contribution, row: Sequence[Any]) -> list[Reading]:
    return [
        Reading(k.meter, w.name, int(row[2 * i]) + int(row[2 * i + 1]), k.amount, k.scale)
        for i, w in enumerate(k.windows)
    ]


def _read_all_sql(
    ks: Sequence[Contribution], session_id: str, now_ms: int, prefix: str, ph: str
) -> tuple[str, list[Any]]:
    """:func:`_read_sql` of every contribution as one statement (one round trip)."""
    cols: list[str] = []
    args: list[Any] = []
    for k in ks:
        sql, a = _read_sql(k, session_id, now_ms, prefix, ph)
        cols.append(sql.removeprefix("SELECT "))
        args += a
    return "SELECT " + ", ".join(cols), args


def _all_readings(ks: Sequence[Contribution], row: Sequence[Any]) -> tuple[Reading, ...]:
    out: list[Reading] = []
    at = 0
    for k in ks:
        out += _readings(k, row[at : at + 2 * len(k.windows)])
        at += 2 * len(k.windows)
    return tuple(out)


def _reservation_rows(
    invocation_id: str, session_id: str, ks: Sequence[Contribution], now_ms: int, exp_ms: int
) -> list[Any]:
    rows: list[Any] = []
    for k in ks:
        rows += (invocation_id, k.meter, k.scope, k.amount, now_ms, session_id, exp_ms, _widths(k))
    return rows


# --------------------------------------------------------------------------- SQLite
_SQL_ADD: Final = (
    "INSERT INTO meter_buckets VALUES (?,?,?,?,?) ON CONFLICT (meter, scope, width_ms, bucket) "
    "DO UPDATE SET total = total + excluded.total"
)
_SQL_LABELS: Final = (
    "SELECT meter FROM {t} WHERE scope=? AND width_ms=0 AND bucket=0 AND total>0 AND meter LIKE 'label:%'"
)


def _sqlite_read(c: Any, k: Contribution, session_id: str, now_ms: int) -> list[Reading]:
    sql, args = _read_sql(k, session_id, now_ms, "", "?")
    return _readings(k, c.execute(sql, args).fetchone())


def _widths(k: Contribution) -> str:
    return json.dumps([[w.name, w.ms] for w in k.windows])


def _windows_of(text: str) -> list[Window]:
    return [Window(str(n), int(ms)) for n, ms in json.loads(text)]


def settle_sqlite(c: Any, invocation_id: str, state: State) -> None:
    """Make the invocation's reservations final, or release them, as ``state`` says (inside the
    transaction that moved it). Nothing for a state that does not settle, or no reservation."""
    if state not in SETTLING:
        return
    rows = c.execute(
        "DELETE FROM meter_reservations WHERE invocation_id=? "
        "RETURNING meter, scope, amount, at_ms, session_id, widths",
        (invocation_id,),
    ).fetchall()
    if not rows or state in RELEASE_STATES:
        return
    for meter, scope, amount, at_ms, session_id, widths in rows:
        k = Contribution(meter, scope, int(amount), (), 0)
        for w in _windows_of(widths):
            key_scope, width, bucket = _bucket_key(k, w, session_id, int(at_ms))
            c.execute(_SQL_ADD, (meter, key_scope, width, bucket, int(amount)))
            if width:  # buckets no window reaches any more
                c.execute(
                    "DELETE FROM meter_buckets WHERE meter=? AND scope=? AND width_ms=? AND bucket<=?",
                    (meter, key_scope, width, bucket - 2 * (w.ms // width)),
                )


def settle_sqlite_rows(c: Any, rows: Sequence[tuple[str, State]]) -> None:
    """:func:`settle_sqlite` for the invocations a batched Propose write ended."""
    for invocation_id, state in rows:
        if state in RELEASE_STATES:
            c.execute("DELETE FROM meter_reservations WHERE invocation_id=?", (invocation_id,))


class SQLiteMeters:
    """:class:`MeterStore` on the SQLite store's writer thread (one transaction per reserve)."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker

    async def reserve(
        self,
        invocation_id: str,
        session_id: str,
        contributions: Sequence[Contribution],
        now: datetime,
        expires: datetime,
    ) -> tuple[Reading, ...]:
        now_ms, exp_ms = _ms(now), _ms(expires)

        def op(c: Any) -> tuple[Reading, ...]:
            sql, args = _read_all_sql(contributions, session_id, now_ms, "", "?")
            out = _all_readings(contributions, c.execute(sql, args).fetchone())
            values = ",".join(["(?,?,?,?,?,?,?,?)"] * len(contributions))
            c.execute(
                f"INSERT INTO meter_reservations VALUES {values}",
                _reservation_rows(invocation_id, session_id, contributions, now_ms, exp_ms),
            )
            return out

        result: tuple[Reading, ...] = await self._worker.run(op)
        return result

    async def release(self, invocation_id: str) -> None:
        def op(c: Any) -> None:
            c.execute("DELETE FROM meter_reservations WHERE invocation_id=?", (invocation_id,))

        await self._worker.run(op)

    async def totals(self, meter: str, scope: str, window: Window, session_id: str, now: datetime) -> int:
        k = Contribution(meter, scope, 0, (window,), 0)

        def op(c: Any) -> int:
            return _sqlite_read(c, k, session_id, _ms(now))[0].before

        value: int = await self._worker.run(op)
        return value

    async def labels(self, tenant: str, session_id: str) -> tuple[str, ...]:
        scope = label_scope(tenant, session_id) + _SESSION_SEP + session_id

        def op(c: Any) -> tuple[str, ...]:
            rows = c.execute(_SQL_LABELS.format(t="meter_buckets"), (scope,)).fetchall()
            return tuple(sorted(str(r[0])[len(LABEL_PREFIX) :] for r in rows))

        found: tuple[str, ...] = await self._worker.run(op)
        return found


# --------------------------------------------------------------------------- PostgreSQL
_PG_ADD: Final = (
    "INSERT INTO callgate_meter_buckets VALUES (%s,%s,%s,%s,%s) ON CONFLICT (meter, scope, width_ms, bucket) "
    "DO UPDATE SET total = callgate_meter_buckets.total + excluded.total"
)


async def _pg_read(conn: Any, k: Contribution, session_id: str, now_ms: int) -> list[Reading]:
    """One statement reads the buckets and the reservations (one snapshot under READ COMMITTED:
    a settle that commits meanwhile is seen wholly or not at all)."""
    sql, args = _read_sql(k, session_id, now_ms, "callgate_", "%s")
    cur = await conn.execute(sql, args)
    row = await cur.fetchone()
    assert row is not None
    return _readings(k, row)


async def settle_pg(conn: Any, invocation_id: str, state: State) -> None:
    """:func:`settle_sqlite` on PostgreSQL (inside the transaction that moved the invocation)."""
    if state not in SETTLING:
        return
    cur = await conn.execute(
        "DELETE FROM callgate_meter_reservations WHERE invocation_id=%s "
        "RETURNING meter, scope, amount, at_ms, session_id, widths",
        (invocation_id,),
    )
    rows = await cur.fetchall()
    if not rows or state in RELEASE_STATES:
        return
    for meter, scope, amount, at_ms, session_id, widths in rows:
        k = Contribution(meter, scope, int(amount), (), 0)
        for w in _windows_of(widths):
            key_scope, width, bucket = _bucket_key(k, w, session_id, int(at_ms))
            await conn.execute(_PG_ADD, (meter, key_scope, width, bucket, int(amount)))
            if width:
                await conn.execute(
                    "DELETE FROM callgate_meter_buckets WHERE meter=%s AND scope=%s AND width_ms=%s "
                    "AND bucket<=%s",
                    (meter, key_scope, width, bucket - 2 * (w.ms // width)),
                )


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
            for lock in sorted({f"{k.meter}\x1f{k.scope}" for k in contributions}):
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 30))", (lock,))
            sql, args = _read_all_sql(contributions, session_id, now_ms, "callgate_", "%s")
            cur = await conn.execute(sql, args)
            row = await cur.fetchone()
            assert row is not None
            values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s)"] * len(contributions))
            await conn.execute(
                f"INSERT INTO callgate_meter_reservations VALUES {values}",
                _reservation_rows(invocation_id, session_id, contributions, now_ms, exp_ms),
            )
            return _all_readings(contributions, row)

    async def release(self, invocation_id: str) -> None:
        async with self._store._tx() as conn:
            await conn.execute(
                "DELETE FROM callgate_meter_reservations WHERE invocation_id=%s", (invocation_id,)
            )

    async def totals(self, meter: str, scope: str, window: Window, session_id: str, now: datetime) -> int:
        k = Contribution(meter, scope, 0, (window,), 0)
        async with self._store._tx() as conn:
            return (await _pg_read(conn, k, session_id, _ms(now)))[0].before

    async def labels(self, tenant: str, session_id: str) -> tuple[str, ...]:
        scope = label_scope(tenant, session_id) + _SESSION_SEP + session_id
        async with self._store._tx() as conn:
            sql = (
                _SQL_LABELS.format(t="callgate_meter_buckets")
                .replace("?", "%s")
                .replace("'label:%'", "'label:%%'")
            )
            cur = await conn.execute(sql, (scope,))
            rows = await cur.fetchall()
        return tuple(sorted(str(r[0])[len(LABEL_PREFIX) :] for r in rows))


def meters_of(store: object) -> MeterStore | None:
    """The meter store of ``store`` (through wrappers, as retention finds its store), or None."""
    while not hasattr(store, "meters") and hasattr(store, "inner"):
        store = store.inner
    make = getattr(store, "meters", None)
    return make() if callable(make) else None
