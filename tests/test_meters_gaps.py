"""Issue 30/34: the meter store's gaps after exact windows, on SQLite and the real PostgreSQL.

* a meter shared by two ToolSpecs with different windows keeps the longest one's history;
* PostgreSQL: a transaction that settles several invocations takes its meters' advisory locks at
  once, in one sorted order (a deterministic deadlock on the old per-invocation order);
* retention purges the meter tables (entries past twice the longest window, totals of scopes
  with no entry left, reconcile records no Reconcile can use, reservations never followed by
  their invocation), with a fake clock.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from callgate.base.meters import RESULT_LABELS_KEY
from callgate.base.states import State
from callgate.policy.meters import Contribution, Window, contributions, meter_keeps, registry_keeps
from callgate.policy.toolspecs import load_tools
from callgate.store.base import EventRecord, InvocationRecord, Move
from callgate.store.retention import Purger, RetentionPolicy
from tests.test_meters import FIXTURE, _store
from tests.test_store_contract import ev, inv

T0 = datetime(2026, 7, 19, 6, 0, 30, 123000, tzinfo=UTC)
HOUR, DAY = Window("1h", 3_600_000), Window("24h", 86_400_000)
SCOPE = "acme\x1fs:ana"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _shared_tools(tmp_path: Path) -> Any:
    """mail.send counts ``sends`` over 1 h and the session; sms.send the same meter over 24 h."""
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(FIXTURE / "tools" / "mail.send@v1.json", tools)
    doc = json.loads((FIXTURE / "tools" / "sms.send@v1.json").read_text())
    doc["meters"] = [{"name": "sends", "measure": "calls", "scope": "subject", "windows": ["24h"]}]
    (tools / "sms.send@v1.json").write_text(json.dumps(doc))
    return load_tools(tools)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_shared_meter_keeps_the_history_of_its_longest_window(
    kind: str, tmp_path: Path, request: Any
) -> None:
    """Calls through the 1 h tool; 2 h later (its own keep) a third settles and prunes; the 24 h
    tool still sees all three (the entries are kept twice the longest window of the snapshot)."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""
    registry = _shared_tools(tmp_path)
    mail, sms = registry.get("mail.send", "v1"), registry.get("sms.send", "v1")
    assert mail is not None and sms is not None
    assert meter_keeps(mail.meters) == {"sends": 3_600_000}  # its own declaration alone
    keeps = registry_keeps(registry)
    assert keeps == {"sends": DAY.ms}  # the snapshot's longest, whichever tool calls

    def parts(tool: Any) -> tuple[Contribution, ...]:
        return contributions(
            tool.meters, {"to": "x"}, tenant="acme", subject="ana", session_id="s1", resource="", keeps=keeps
        )

    async def run() -> None:
        store, settle = await _store(kind, tmp_path, dsn)
        meters = store.meters()
        for i, at in enumerate((T0, T0 + timedelta(minutes=1), T0 + timedelta(hours=2, minutes=1))):
            await meters.reserve(f"inv_{i}", "s1", parts(mail), at, at + timedelta(minutes=1))
            await settle(f"inv_{i}", State.COMMITTED)
        now = T0 + timedelta(hours=2, minutes=2)
        assert await meters.totals("sends", SCOPE, HOUR, "s1", now) == 1
        got = await meters.reserve("inv_sms", "s1", parts(sms), now, now + timedelta(minutes=1))
        assert [(r.window, r.before) for r in got] == [("24h", 3)]
        await store.close()

    asyncio.run(run())


@pytest.mark.postgres
def test_settling_several_invocations_takes_the_locks_in_one_sorted_order(
    tmp_path: Path, request: Any
) -> None:
    """Deterministic: a sweep ends ``i_z`` (meter zz) then ``i_a`` (meter aa) in one transaction
    while another transaction holds aa's lock and then asks for zz's, as a reserve of both would
    (sorted). Settling one invocation at a time, the sweep would hold zz while it waits for aa: a
    deadlock PostgreSQL breaks by failing one of them. Taken at once in sorted order, the sweep
    waits for aa holding nothing, and both finish."""
    import psycopg

    dsn = request.getfixturevalue("postgres_dsn")

    async def run() -> None:
        store, _ = await _store("postgres", tmp_path, dsn)
        meters = store.meters()
        for name, meter in (("i_z", "zz"), ("i_a", "aa")):
            k = Contribution(meter, SCOPE, 1, (HOUR,), 0)
            await meters.reserve(name, "s1", [k], T0, T0 + timedelta(minutes=1))
            await store.create_invocation(
                replace(inv(name), state=State.EXECUTING), [ev(name, 1, None, State.EXECUTING)]
            )
        unknown = State.OUTCOME_UNKNOWN
        moves = [
            Move(replace(inv(n), state=unknown), State.EXECUTING, [ev(n, 0, State.EXECUTING, unknown)])
            for n in ("i_z", "i_a")
        ]
        async with await psycopg.AsyncConnection.connect(store._pool.conninfo, autocommit=False) as other:
            await other.execute("SET lock_timeout = '20s'")
            await other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 30))", (f"aa\x1f{SCOPE}",))
            sweep = asyncio.ensure_future(store.transition_many(moves))
            async with await psycopg.AsyncConnection.connect(store._pool.conninfo, autocommit=True) as watch:
                for _ in range(400):  # until the sweep waits for a lock
                    cur = await watch.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND NOT granted"
                    )
                    if (await cur.fetchone())[0]:  # type: ignore[index]
                        break
                    await asyncio.sleep(0.025)
                cur = await watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND granted AND pid <> %s",
                    (other.info.backend_pid,),
                )
                held_while_waiting = (await cur.fetchone())[0]  # type: ignore[index]
            await other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 30))", (f"zz\x1f{SCOPE}",))
            await other.commit()
        assert await sweep == [True, True]
        assert held_while_waiting == 0
        for meter in ("aa", "zz"):
            assert await meters.totals(meter, SCOPE, HOUR, "s1", T0) == 1
        await store.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", BACKENDS)
def test_retention_purges_the_meter_tables(kind: str, tmp_path: Path, request: Any) -> None:
    """Fake clock. A scope's entries go once past twice the meter's longest window (the serving
    snapshot's, longer than any total's), its totals once no entry is left; a busy scope keeps
    what its windows count; a reconcile record goes with its invocation; a reservation whose
    invocation was never written goes a day past its expiry. Nothing a window counts is lost."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""

    async def run() -> None:
        store, settle = await _store(kind, tmp_path, dsn)
        meters = store.meters()
        idle, busy = "acme\x1fs:idle", "acme\x1fs:busy"
        keeps = {"m": DAY.ms}  # another ToolSpec declares m over 24 h; these calls count 1 h
        purger = Purger(
            store, RetentionPolicy(decisions=timedelta(days=1), batch=2), store_clock(), lambda: keeps
        )

        async def call(name: str, scope: str, at: datetime, state: State = State.COMMITTED) -> None:
            k = Contribution("m", scope, 1, (HOUR,), 0, DAY.ms)
            await meters.reserve(name, "s1", [k], at, at + timedelta(minutes=1))
            if state is State.OUTCOME_UNKNOWN:
                await store.create_invocation(replace(inv(name), state=state), [ev(name, 1, None, state)])
            await settle(name, state)

        for i in range(3):
            await call(f"idle_{i}", idle, T0 + timedelta(minutes=i))
        await call("unk", busy, T0, State.OUTCOME_UNKNOWN)
        await meters.reserve(
            "lost", "s1", [Contribution("m", busy, 1, (HOUR,), 0)], T0, T0 + timedelta(minutes=1)
        )

        async def rows(table: str) -> int:
            return int(await count(store, kind, table))

        # a day later: within twice 24 h, nothing of m goes (the 1 h total alone would allow it)
        later = T0 + timedelta(days=1)
        await call("busy_1", busy, later)
        assert (await purger.run_once(later)).meters == 0
        assert await meters.totals("m", idle, DAY, "s1", later - timedelta(minutes=1)) == 3
        # past twice 24 h: the idle scope's entries and totals go; the busy one keeps its own
        end = T0 + timedelta(days=2, minutes=3)
        await call("busy_2", busy, end)
        done = await purger.run_once(end)
        assert done.meters >= 3 + 1 + 1  # idle entries, the idle total, the stale reservation
        assert await rows("meter_entries") == 2  # busy_1 (kept: inside 2 x 24 h) and busy_2
        assert await meters.totals("m", busy, DAY, "s1", end - timedelta(minutes=4)) == 2
        assert await meters.totals("m", busy, HOUR, "s1", end) == 1
        assert await meters.totals("m", idle, DAY, "s1", end) == 0
        assert await rows("meter_reservations") == 0
        assert await rows("meter_unknown") == 1  # its invocation is still OUTCOME_UNKNOWN
        await purge_invocation(store, kind, "unk")  # what invocation retention would do
        assert (await purger.run_once(end)).meters == 1
        assert await rows("meter_unknown") == 0
        # a sweep later: only totals of scopes with entries, entries within 2 x 24 h
        final = end + timedelta(days=3)
        await purger.run_once(final)
        assert (await rows("meter_entries"), await rows("meter_totals WHERE width_ms > 0")) == (0, 0)
        await store.close()

    asyncio.run(run())


def store_clock() -> Any:
    from callgate.base.clock import FixedClock

    return FixedClock(T0)


async def count(store: Any, kind: str, table: str) -> int:
    if kind == "sqlite":
        got = await store.worker.run(lambda c: c.execute(f"SELECT count(*) FROM {table}").fetchone())
        return int(got[0])
    async with store._tx() as conn:
        cur = await conn.execute(f"SELECT count(*) FROM callgate_{table}")
        return int((await cur.fetchone())[0])


async def purge_invocation(store: Any, kind: str, invocation_id: str) -> None:
    if kind == "sqlite":
        await store.worker.run(
            lambda c: c.execute("DELETE FROM invocations WHERE invocation_id=?", (invocation_id,))
        )
        return
    async with store._tx() as conn:
        await conn.execute("DELETE FROM callgate_invocations WHERE invocation_id=%s", (invocation_id,))


# --------------------------------------------------------------------------- the upgrade from buckets
UPGRADE = Path(__file__).resolve().parent / "data" / "upgrade"
NOW = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)


def _old_buckets() -> list[tuple[str, str, int, int, int]]:
    """What the bucketed meters wrote for a meter ``m`` read over 1 h (60 s buckets, kept 2 h)
    and over 24 h (24 min buckets, kept 48 h): 3 calls 20 h ago (their 60 s buckets pruned), 2
    calls 90 min ago and 1 call 10 min ago (in both widths)."""
    rows: dict[tuple[int, int], int] = {}
    for ago, n in ((timedelta(hours=20), 3), (timedelta(minutes=90), 2), (timedelta(minutes=10), 1)):
        at = int((NOW - ago).timestamp() * 1000)
        for width in (60_000, 1_440_000):
            if width == 60_000 and ago > timedelta(hours=2):
                continue  # pruned by the old code: 2 windows of its 1 h
            rows[(width, at // width)] = rows.get((width, at // width), 0) + n
    return [("m", SCOPE, w, b, t) for (w, b), t in sorted(rows.items())]


async def _read_after_upgrade(store: Any) -> tuple[int, ...]:
    meters = store.meters()
    return (
        await meters.totals("m", SCOPE, DAY, "s1", NOW),
        await meters.totals("m", SCOPE, HOUR, "s1", NOW),
        await meters.totals(
            "m", SCOPE, DAY, "s1", NOW + timedelta(hours=4, minutes=1)
        ),  # the 20 h-old calls left
        await meters.totals("m", SCOPE, HOUR, "s1", NOW + timedelta(minutes=50, milliseconds=1)),
    )


def test_the_upgrade_from_the_v7_fixture_keeps_every_windows_total(tmp_path: Path) -> None:
    """The frozen v7 database (the last bucketed schema) with a meter's buckets of both widths
    opens through the real start-up: the 24 h window still counts the calls whose finer buckets
    were pruned (all 6), the 1 h window its own (1), and the calls leave each window at the
    start of their bucket as the buckets did."""
    import sqlite3

    from callgate.store.sqlite import SQLiteStore

    db = tmp_path / "callgate.db"
    shutil.copy(UPGRADE / "sqlite-v7" / "callgate.db", db)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 7
        c.executemany("INSERT INTO meter_buckets VALUES (?,?,?,?,?)", _old_buckets())

    async def run() -> tuple[int, ...]:
        store = SQLiteStore(db)
        try:
            return await _read_after_upgrade(store)
        finally:
            await store.close()

    assert asyncio.run(run()) == (6, 1, 3, 0)


@pytest.mark.postgres
def test_the_upgrade_from_buckets_on_postgres_keeps_every_windows_total(request: Any) -> None:
    """The checked-in PostgreSQL dump (v2), migrated to the last bucketed schema (6) as that
    version's start-up did, given the same buckets, then opened through the real start-up."""
    import psycopg

    from callgate.store.postgres import MIGRATIONS, PostgresStore, _statements
    from tests.test_store_contract import fresh_pg_database
    from tests.test_upgrades import PG_DUMP_FIXTURE, _psql_restore

    dsn = fresh_pg_database(request.getfixturevalue("postgres_dsn"))
    _psql_restore(PG_DUMP_FIXTURE, dsn)
    with psycopg.connect(dsn) as c:
        found = c.execute("SELECT MAX(version) FROM callgate_schema_version").fetchone()
        assert found is not None
        for m in MIGRATIONS[found[0] : 6]:
            for statement in _statements(m.sql):
                c.execute(statement)
            c.execute("INSERT INTO callgate_schema_version VALUES (%s, %s, now())", (m.version, m.name))
        c.cursor().executemany("INSERT INTO callgate_meter_buckets VALUES (%s,%s,%s,%s,%s)", _old_buckets())

    async def run() -> tuple[int, ...]:
        store = PostgresStore(dsn)
        await store.start()
        try:
            return await _read_after_upgrade(store)
        finally:
            await store.close()

    assert asyncio.run(run()) == (6, 1, 3, 0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_idle_sessions_lose_their_session_totals_and_labels(kind: str, tmp_path: Path, request: Any) -> None:
    """Fake clock. ``[store.retention] sessions_idle_seconds``: a session total and a session
    label no call of their session added to for the idle time go; a session still adding keeps
    both; a total written before session totals kept their time (``through_ms`` 0) is stamped
    at the first pass and goes one idle time later; with no idle time nothing of a session goes."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""
    session_w = Window("session", 0)
    idle = timedelta(hours=6)

    async def run() -> None:
        store, settle = await _store(kind, tmp_path, dsn)
        meters = store.meters()
        purger = Purger(store, RetentionPolicy(sessions_idle=idle, batch=2), store_clock())
        keepall = Purger(store, RetentionPolicy(decisions=timedelta(days=1), batch=2), store_clock())

        async def call(name: str, sid: str, at: datetime) -> None:
            k = Contribution("m", SCOPE, 1, (session_w,), 0)
            await meters.reserve(name, sid, [k], at, at + timedelta(minutes=1))
            await settle(name, State.COMMITTED)

        async def label(name: str, sid: str, at: datetime) -> None:
            t = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            rec = InvocationRecord(
                name, sid, "m", name, "w.read", "v1", "acme", "ana", State.EXECUTING, b"{}", created_at=t, updated_at=t
            )  # fmt: skip
            e = EventRecord(f"{name}.1", name, 1, t, "x", None, State.EXECUTING, "t", "s")
            await store.create_invocation(rec, [e])
            done = EventRecord(f"{name}.2", name, 2, t, "x", State.EXECUTING, State.COMMITTED, "t", "s",
                               data={RESULT_LABELS_KEY: ["private"]})  # fmt: skip
            assert await store.transition(replace(rec, state=State.COMMITTED), State.EXECUTING, [done])

        async def seen(sid: str, at: datetime) -> tuple[int, tuple[str, ...]]:
            return int(await meters.totals("m", SCOPE, session_w, sid, at)), await meters.labels("acme", sid)

        for sid in ("quiet", "busy"):
            await call(f"{sid}_1", sid, T0)
            await label(f"{sid}_r", sid, T0)
        # a total of the old layout: no time kept
        await call("old_1", "old", T0)
        if kind == "sqlite":
            await store.worker.run(
                lambda c: c.execute("UPDATE meter_totals SET through_ms=0 WHERE scope LIKE '%old'")
            )
        else:
            async with store._tx() as conn:
                await conn.execute("UPDATE callgate_meter_totals SET through_ms=0 WHERE scope LIKE '%%old'")
        # no idle time configured: nothing of a session goes, however old
        assert (await keepall.run_once(T0 + timedelta(days=30))).meters == 0
        assert await seen("quiet", T0 + timedelta(days=30)) == (1, ("private",))
        # the busy session adds one millisecond before its idle time runs out
        await call("busy_2", "busy", T0 + idle - timedelta(milliseconds=1))
        await label("busy_s", "busy", T0 + idle - timedelta(milliseconds=1))
        # one millisecond before the idle time nothing goes; the old total is stamped
        assert (await purger.run_once(T0 + idle - timedelta(milliseconds=1))).meters == 0
        assert await seen("quiet", T0 + idle) == (1, ("private",))
        # at it the quiet session's total and label go; the busy one keeps both; the old one waits
        assert (await purger.run_once(T0 + idle)).meters == 2
        assert await seen("quiet", T0 + idle) == (0, ())
        assert await seen("busy", T0 + idle) == (2, ("private",))
        assert await seen("old", T0 + idle) == (1, ())
        # an idle time after the stamp the old one goes, and the busy one after its last call
        later = T0 + 2 * idle
        assert (await purger.run_once(later)).meters == 3
        assert (await seen("old", later), await seen("busy", later)) == ((0, ()), (0, ()))
        await store.close()

    asyncio.run(run())
