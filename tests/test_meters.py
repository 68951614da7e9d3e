"""Issue 30 items 2-3: declared meters, exact under concurrency, replays and the window's edge.

tests/data/meters/ is a policy folder: ``mail.send`` counts calls per subject (1 h and the
session), ``payments.refund`` sums a decimal amount per account (24 h); the Cedar rules allow at
most 5 sends an hour and confirm refunds past 100.00 a day. A real sidecar (SQLite, gRPC) decides
64 concurrent proposals; the window tests drive the SQLite store with a fixed clock.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf import json_format

from callgate.base.states import State
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.meters import Contribution, Window, parse_meters
from callgate.store.meters import settle_pg, settle_sqlite
from callgate.store.sqlite import SQLiteStore
from tests.conftest import POLICIES, Running, start_sidecar, stop_sidecar
from tests.test_store_contract import fresh_pg_database

T = TypeVar("T")
FIXTURE = Path(__file__).resolve().parent / "data" / "meters"
CLOCK = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)
RACERS = 64
LIMIT = 5
ROUNDS = 20  # issue 30: exactly 5 allowed every time, repeated 20 times (each mode)


def meter_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A copy of the meters fixture with the example folder's Rego contract files beside it."""
    root = tmp_path_factory.mktemp(name) / "policies"
    shutil.copytree(FIXTURE, root)
    for rego in ("decision.rego", "entities.rego", "schema.rego"):
        shutil.copy(POLICIES / "rego" / rego, root / "rego" / rego)
    return root


def admitted(call: Callable[[], T], tries: int = 300) -> T:
    """``call()``, retried while admission sheds it (RESOURCE_EXHAUSTED: nothing recorded)."""
    for _ in range(tries):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            time.sleep(0.02)
    raise AssertionError("never admitted")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return meter_folder(tmp_path_factory, "meters")


@pytest.fixture(scope="module")
def sc(folder: Path) -> Iterator[Running]:
    running, tmp = start_sidecar(folder, clock_at=CLOCK)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def deciding(sc: Running, sid: str, invocation_id: str, kind: str) -> Any:
    """``data.usage`` of the invocation's deciding event."""
    got = sc.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=invocation_id, session_id=sid))
    (event,) = [e for e in got.events if e.kind == kind]
    return json_format.MessageToDict(event.data)["usage"]


def race(sc: Running, sid: str, keys: list[str], tool: str, args: list[dict[str, Any]]) -> list[Any]:
    """Propose ``len(keys)`` calls at once (one thread each, real gRPC)."""

    def one(i: int) -> Any:
        return admitted(lambda: sc.propose(sid, tool, args[i], proposal_id=f"p{i}", idempotency_key=keys[i]))

    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        return list(pool.map(one, range(len(keys))))


@pytest.mark.parametrize("replays", [False, True], ids=["distinct", "with_replays"])
def test_64_concurrent_proposals_against_a_limit_of_5(sc: Running, replays: bool) -> None:
    """Exactly 5 distinct invocations are allowed, every round; a replay answers its original
    and never counts twice (the 6th distinct call sees ``before`` 5)."""
    for r in range(ROUNDS):
        sid = sc.open_session(subject=f"racer-{replays}-{r}")
        sc.list_tools(sid)
        keys = [f"k{i % 40 if replays else i}" for i in range(RACERS)]
        args = [{"to": f"x{i % 40 if replays else i}@example.com"} for i in range(RACERS)]
        answers = race(sc, sid, keys, "mail.send@v1", args)
        allowed = {a.invocation_id for a in answers if a.decision.effect == pb.ALLOW}
        assert len(allowed) == LIMIT, (r, len(allowed))
        if replays:
            assert any(a.idempotent_replay for a in answers)
        # one more, later: the 5 allowed still count (reserved until their deadline)
        extra = sc.propose(
            sid, "mail.send@v1", {"to": "late@example.com"}, proposal_id="late", idempotency_key="late"
        )
        assert extra.decision.effect == pb.DENY


def test_usage_is_recorded_in_the_deciding_event(sc: Running) -> None:
    sid = sc.open_session(subject="recorded")
    sc.list_tools(sid)
    resp = sc.propose(sid, "mail.send@v1", {"to": "a@example.com"}, idempotency_key="r1")
    usage = deciding(sc, sid, resp.invocation_id, "authorized")
    assert usage == {"sends": {"1h": {"before": 0, "after": 1}, "session": {"before": 0, "after": 1}}}


def test_decimal_totals_are_exact_and_confirm_past_the_threshold(sc: Running) -> None:
    """Amounts are summed exactly per account: 60.10 + 39.90 = 100.00 is allowed, the next
    0.01 needs a confirmation; another account starts at 0."""
    sid = sc.open_session(subject="ana")
    sc.list_tools(sid)
    a = sc.propose(sid, "payments.refund@v1", {"account": "A1", "amount": "60.10"}, idempotency_key="a")
    b = sc.propose(sid, "payments.refund@v1", {"account": "A1", "amount": "39.90"}, idempotency_key="b")
    c = sc.propose(sid, "payments.refund@v1", {"account": "A1", "amount": "0.01"}, idempotency_key="c")
    d = sc.propose(sid, "payments.refund@v1", {"account": "B2", "amount": "99.99"}, idempotency_key="d")
    assert [x.decision.effect for x in (a, b, c, d)] == [pb.ALLOW, pb.ALLOW, pb.CONFIRM, pb.ALLOW]
    usage = deciding(sc, sid, c.invocation_id, "authorized")
    assert usage == {"refunded": {"24h": {"before": "100.00", "after": "100.01"}}}


def test_a_deny_releases_its_reservation(sc: Running) -> None:
    sid = sc.open_session(subject="releaser")
    sc.list_tools(sid)
    for i in range(LIMIT):
        assert (
            sc.propose(sid, "mail.send@v1", {"to": f"{i}@x.org"}, idempotency_key=f"r{i}").decision.effect
            == pb.ALLOW
        )
    for i in range(3):  # each sees 5 before it: denied and released, so the next sees 5 again
        resp = sc.propose(sid, "mail.send@v1", {"to": f"d{i}@x.org"}, idempotency_key=f"d{i}")
        assert resp.decision.effect == pb.DENY
    usage = deciding(sc, sid, resp.invocation_id, "authorization_rejected")
    assert usage["sends"]["1h"] == {"before": 5, "after": 6}


# --------------------------------------------------------------------------- the store, fixed clock
def test_declarations_are_checked() -> None:
    schema = {
        "properties": {"amount": {"type": "number"}, "n": {"type": "integer"}, "who": {"type": "string"}}
    }
    ok = parse_meters(
        {
            "input_schema": schema,
            "meters": [
                {"name": "m", "measure": "sum(args.n)", "scope": "args.who", "windows": ["90s", "session"]}
            ],
        },
        "t.json",
    )
    assert ok[0].windows == (Window("90s", 90_000), Window("session", 0))
    for bad, says in (
        ({"name": "m", "measure": "sum(args.nope)", "windows": ["1h"]}, "does not declare"),
        ({"name": "m", "measure": "sum(args.amount)", "windows": ["1h"]}, "not numeric"),
        ({"name": "m", "measure": "calls", "windows": ["1w"]}, "neither 'session'"),
        ({"name": "m", "measure": "calls", "windows": ["40d"]}, "longer than 31 days"),
        ({"name": "m", "scope": "args.nope", "windows": ["1h"]}, "scope args.nope"),
        ({"name": "M", "windows": ["1h"]}, "name:"),
    ):
        with pytest.raises(Exception) as err:
            parse_meters({"input_schema": schema, "meters": [bad]}, "t.json")
        assert says in str(err.value) and "/meters/0" in str(err.value)


async def _store(kind: str, tmp_path: Path, dsn: str) -> tuple[Any, Callable[[str, State], Awaitable[None]]]:
    """The store of ``kind`` and a settle that runs where the invocation's move would."""
    if kind == "sqlite":
        lite = SQLiteStore(tmp_path / "m.db")

        async def settle_lite(inv: str, state: State) -> None:
            await lite.worker.run(lambda c: settle_sqlite(c, inv, state))

        return lite, settle_lite
    from callgate.store.postgres import PostgresStore

    pg = PostgresStore(fresh_pg_database(dsn))
    await pg.start()

    async def settle_postgres(inv: str, state: State) -> None:
        async with pg._tx() as conn:
            await settle_pg(conn, inv, state)

    return pg, settle_postgres


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_count_leaves_the_window_exactly_at_its_edge(kind: str, tmp_path: Path, request: Any) -> None:
    """Fake clock. A call made at t counts in a 1 h window until exactly t + 1 h (one millisecond
    before: counted; at it: gone), wherever t falls in its minute; the session window keeps it;
    a clock that goes back brings it back; a reconciled not-committed call is taken back out."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""

    async def run() -> None:
        store, settle = await _store(kind, tmp_path, dsn)
        meters = store.meters()
        hour, session = Window("1h", 3_600_000), Window("session", 0)
        k = Contribution("m", "acme\x1fs:ana", 1, (hour, session), 0)

        async def seen(at: datetime, w: Window = hour, sid: str = "ses_1") -> int:
            return int(await meters.totals("m", k.scope, w, sid, at))

        t0 = datetime(2026, 7, 19, 6, 0, 30, 123000, tzinfo=UTC)  # not on a minute: no bucket edge
        await meters.reserve("inv_1", "ses_1", [k], t0, t0 + timedelta(minutes=1))
        await settle("inv_1", State.COMMITTED)
        edge = t0 + timedelta(hours=1)
        assert await seen(datetime(2026, 7, 19, 7, 0, tzinfo=UTC)) == 1  # a 1/60 bucket would be gone
        assert await seen(edge - timedelta(milliseconds=1)) == 1
        assert await seen(edge) == 0
        assert await seen(edge - timedelta(milliseconds=1)) == 1  # the clock went back: in again
        assert await seen(edge + timedelta(minutes=30)) == 0
        assert await seen(edge + timedelta(days=3), session) == 1
        assert await seen(edge, session, "ses_2") == 0
        # two calls 1 ms apart leave 1 ms apart
        t2 = edge + timedelta(minutes=1)
        for n, at in (("inv_a", t2), ("inv_b", t2 + timedelta(milliseconds=1))):
            await meters.reserve(n, "ses_1", [k], at, at + timedelta(minutes=1))
            await settle(n, State.COMMITTED)
        end = t2 + timedelta(hours=1)
        assert [
            await seen(end - timedelta(milliseconds=1)),
            await seen(end),
            await seen(end + timedelta(milliseconds=1)),
        ] == [2, 1, 0]
        # a reservation whose invocation was never written counts until its expiry, then not
        t1 = end + timedelta(minutes=5)
        got = await meters.reserve("inv_2", "ses_1", [k], t1, t1 + timedelta(seconds=60))
        assert [(r.window, r.before) for r in got] == [("1h", 0), ("session", 3)]
        assert await seen(t1 + timedelta(seconds=59)) == 1
        assert await seen(t1 + timedelta(seconds=60)) == 0
        await settle("inv_2", State.AUTHORIZATION_REJECTED)
        # OUTCOME_UNKNOWN counts; reconciled FAILED_BEFORE_COMMIT it is taken back out (both windows)
        t3 = t1 + timedelta(minutes=10)
        await meters.reserve("inv_3", "ses_1", [k], t3, t3 + timedelta(minutes=1))
        await settle("inv_3", State.OUTCOME_UNKNOWN)
        assert (await seen(t3), await seen(t3, session)) == (1, 4)
        await settle("inv_3", State.FAILED_BEFORE_COMMIT)
        assert (await seen(t3), await seen(t3, session)) == (0, 3)
        # a sum keeps its decimal places
        money = Contribution("refund", "acme\x1fa:acct=A", 1234567, (Window("24h", 86_400_000),), 4)
        r = await meters.reserve("inv_4", "ses_1", [money], t1, t1 + timedelta(seconds=60))
        assert r[0].as_dict() == {"before": 0, "after": Decimal("123.4567")}
        await store.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_reading_that_moves_no_entry_writes_no_total(kind: str, tmp_path: Path, request: Any) -> None:
    """Issue 30 item 5: a reading at a later time that moves no entry across the window's edge
    leaves the running total's row as it is (its edge stays behind: no entry lies between it and
    the new one, so the total is the same); the reading that moves an entry out brings the edge
    there. The readings stay exact either way, the clock going back included."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""

    async def run() -> None:
        store, settle = await _store(kind, tmp_path, dsn)
        meters = store.meters()
        hour = Window("1h", 3_600_000)
        k = Contribution("m", "acme\x1fs:ana", 1, (hour,), 0)

        async def edge(meter: str = "m") -> int:
            sql = "SELECT through_ms FROM {t}meter_totals WHERE meter={p} AND width_ms > 0"
            if kind == "sqlite":
                q = sql.format(t="", p="?")
                rows = await store.worker.run(lambda c: c.execute(q, (meter,)).fetchall())
            else:
                async with store._tx() as conn:
                    cur = await conn.execute(sql.format(t="callgate_", p="%s"), (meter,))
                    rows = await cur.fetchall()
            return int(rows[0][0])

        async def seen(at: datetime) -> int:
            return int(await meters.totals("m", k.scope, hour, "ses_1", at))

        ms = 3_600_000
        t0 = datetime(2026, 7, 19, 6, 0, 30, 123000, tzinfo=UTC)
        t0_ms = int(t0.timestamp() * 1000)
        await meters.reserve("inv_1", "ses_1", [k], t0, t0 + timedelta(minutes=1))
        await settle("inv_1", State.COMMITTED)
        assert await edge() == t0_ms - ms  # the total was made at the first reading
        assert await seen(t0 + timedelta(minutes=10)) == 1
        got = await meters.reserve(
            "inv_2", "ses_1", [k], t0 + timedelta(minutes=20), t0 + timedelta(minutes=21)
        )
        assert got[0].before == 1
        await settle("inv_2", State.CANCELLED_BEFORE_COMMIT)
        assert await edge() == t0_ms - ms  # nothing crossed: the row was not written
        assert await seen(t0 + timedelta(hours=1)) == 0  # the entry left: the edge moved to it
        assert await edge() == t0_ms
        assert await seen(t0 + timedelta(hours=1, milliseconds=-1)) == 1  # the clock went back
        assert await edge() == t0_ms - 1
        assert await seen(t0 + timedelta(minutes=30)) == 1  # further back: nothing crosses
        assert await edge() == t0_ms - 1
        # an entry of amount 0 that leaves moves the edge too (the next read scans from there)
        zero = Contribution("z", "acme\x1fs:ana", 0, (hour,), 0)
        await meters.reserve("inv_3", "ses_1", [zero], t0, t0 + timedelta(minutes=1))
        await settle("inv_3", State.COMMITTED)
        assert await edge("z") == t0_ms - ms
        await meters.reserve(
            "inv_4", "ses_1", [zero], t0 + timedelta(hours=1), t0 + timedelta(hours=1, minutes=1)
        )
        assert await edge("z") == t0_ms
        await store.close()

    asyncio.run(run())


def read_then_egress(sc: Running, subject: str, read: tuple[str, str], egress: tuple[str, str]) -> str:
    """The read-then-exfiltrate flow through the Python client: ``egress`` is allowed in a session
    that read nothing labelled yet; ``read`` is allowed and runs to OBSERVED (its result carries
    the tool's labels); ``egress`` then needs confirmation; in a new session it is allowed again.
    The id of the invocation that needs confirmation."""
    from callgate.client import Client
    from callgate.client.outcomes import Allowed, NeedsConfirmation
    from callgate.client.sync import Committed, ToolCall

    a = sc.sidecar.addresses
    with Client(a["agent"][0], executor=a["executor"][0]) as cg:
        s = cg.session("acme", subject)
        s.tools("mc-1")
        assert isinstance(s.propose(ToolCall("c0", *egress)), Allowed)  # nothing labelled read yet
        got = s.propose(ToolCall("c1", *read))
        assert isinstance(got, Allowed)
        res = cg.run(got.invocation_id, lambda ctx: Committed({"text": "result"}), executor_id="reader")
        assert res.state == "OBSERVED"
        s.tools("mc-2")
        out = s.propose(ToolCall("c2", *egress))
        assert isinstance(out, NeedsConfirmation)
        fresh = cg.session("acme", subject)
        fresh.tools("mc-1")
        assert isinstance(fresh.propose(ToolCall("c3", *egress)), Allowed)
        return out.invocation_id


def test_exfiltration_example_through_the_python_client(sc: Running) -> None:
    """Read a ``private``-labelled result, then an egress tool asks for confirmation; in a new
    session it does not. ``callgate explain`` shows the labels and the meter the policy saw."""
    from callgate.cli.explain import explain, render_text

    out = read_then_egress(
        sc, "ana", ("docs__read", '{"name": "salaries"}'), ("mail__send", '{"to": "leak@example.com"}')
    )
    x = sc.call(explain(sc.sidecar.components.store, out))
    assert x is not None and x.authorization is not None
    assert x.authorization.session_labels == ("private",)
    text = render_text(x)
    assert "session labels: private" in text and "meter sends: 1h 1 -> 2" in text


def test_callgate_check_names_a_bad_meter_declaration(folder: Path, tmp_path: Path) -> None:
    """``callgate check`` refuses an unknown argument, a non-numeric sum and a bad window, naming
    the file, its line and the member; the folder's policy tests state usage and labels."""
    import json
    import subprocess
    import sys

    bad = tmp_path / "p"
    shutil.copytree(folder, bad)
    toml = tmp_path / "c.toml"
    toml.write_text(f'[policy]\nengine = "cedar"\ndir = "{bad}"\n')
    suite = subprocess.run(
        [sys.executable, "-m", "callgate", "policy", "test", "-c", str(toml), str(bad / "tests")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert suite.returncode == 0 and "7 passed, 0 failed" in suite.stdout, suite.stdout + suite.stderr
    spec = bad / "tools" / "payments.refund@v1.json"
    doc = json.loads(spec.read_text())
    for meter, says in (  # the other refusals: test_declarations_are_checked
        (
            {"name": "m", "measure": "sum(args.account)", "windows": ["1h"]},
            "/meters/0: m: args.account is not numeric",
        ),
    ):
        spec.write_text(json.dumps({**doc, "meters": [meter]}, indent=1))
        got = subprocess.run(
            [sys.executable, "-m", "callgate", "check", "-c", str(toml)], capture_output=True, text=True
        )
        out = got.stdout + got.stderr
        assert got.returncode != 0 and says in out and "payments.refund@v1.json:" in out, out


def test_the_bucketed_meters_become_entries_at_upgrade(tmp_path: Path) -> None:
    """SQLite migration 8: a v7 database's session totals stay, and each meter's finest buckets
    become entries at their starts, which the exact windows then read."""
    import sqlite3

    from callgate.store.migrations import migrate_sqlite
    from callgate.store.sqlite import MIGRATIONS

    path = tmp_path / "v7.db"
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("BEGIN")
    migrate_sqlite(c, MIGRATIONS[:7], at="2026-07-19T06:00:00Z")
    t0 = int(CLOCK.timestamp() * 1000)
    scope = "acme\x1fs:ana"
    c.executemany(
        "INSERT INTO meter_buckets VALUES (?,?,?,?,?)",
        [
            ("m", scope, 60_000, t0 // 60_000, 2),  # the 1 h window's bucket of 06:00
            ("m", scope, 1_440_000, t0 // 1_440_000, 2),  # the same calls in the 24 h window's
            ("m", scope + "\x1eses_1", 0, 0, 5),  # the session window
        ],
    )
    c.execute("COMMIT")
    c.close()

    async def run() -> None:
        store = SQLiteStore(path)  # migrates to the latest version
        meters = store.meters()
        hour, day, session = Window("1h", 3_600_000), Window("24h", 86_400_000), Window("session", 0)
        at = CLOCK + timedelta(minutes=59, seconds=59, milliseconds=999)
        assert await meters.totals("m", scope, hour, "ses_1", at) == 2
        assert await meters.totals("m", scope, hour, "ses_1", CLOCK + timedelta(hours=1)) == 0
        assert await meters.totals("m", scope, day, "ses_1", CLOCK + timedelta(hours=23)) == 2
        assert await meters.totals("m", scope, session, "ses_1", CLOCK + timedelta(days=9)) == 5
        await store.close()

    asyncio.run(run())


# --------------------------------------------------------------------------- SQLite: one commit
def test_sqlite_reservation_commits_with_its_invocation_and_a_moved_reading_is_decided_again(
    tmp_path: Path,
) -> None:
    """Issue 30 item 5 (SQLite): inside :meth:`SQLiteMeters.fold` the reservation is written by
    the invocation's own transaction. Two stores on one file stand for two processes (two
    connections, one write lock). (1) After the reading nothing is reserved (another connection
    sees no row); the write reserves with the invocation, in the key look-up's and the write's
    two transactions (the reading was carried by the look-up). (2) Another connection reserves
    between a reading and its write: the write writes no invocation and raises
    ``MetersMoved`` with the reading under the lock (one more), at which the call is now reserved;
    the next write needs no check. (3) The same on one connection (another call's write in
    between). (4) A claim lost at the write leaves no reservation. (5) A deny reserves nothing."""
    import sqlite3

    from callgate.store.meters import MetersMoved
    from tests.test_store_contract import NOW, claim, ev, inv

    hour = Window("1h", 3_600_000)
    k = Contribution("sends", "acme\x1fs:ana", 1, (hour,), 0)
    later = NOW + timedelta(minutes=5)

    def rows(path: Path) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path) as c:
            return c.execute("SELECT invocation_id FROM meter_reservations ORDER BY invocation_id").fetchall()

    async def run() -> None:
        path = tmp_path / "fold.db"
        one, two = SQLiteStore(path), SQLiteStore(path)
        m1, m2 = one.meters(), two.meters()
        keys = one.keys()
        try:
            # (1) the reading rides on the key's look-up; the write reserves with the invocation
            commits = one.worker._commit_total
            async with m1.fold():
                m1.read_ahead("i1", "s1", [k], NOW, later)
                assert await keys.get(claim("k1").key) is None  # carries the reading
                (seen,) = await m1.reserve("i1", "s1", [k], NOW, later)
                assert seen.before == 0
                assert one.worker._commit_total == commits + 1  # the reading took no transaction
                assert rows(path) == []  # nothing reserved before the write
                lost = await one.create_invocation(
                    inv("i1", "k1", State.PREPARED), [ev("i1", 1, None, State.PREPARED)], claim=claim("k1")
                )
                assert lost is None
                assert one.worker._commit_total == commits + 2
            assert rows(path) == [("i1",)]
            # (2) another connection (process) reserves between the reading and the write
            async with m1.fold():
                (seen,) = await m1.reserve("i2", "s1", [k], NOW, later)
                assert seen.before == 1
                (other,) = await m2.reserve("x2", "s1", [k], NOW, later)
                assert other.before == 1
                with pytest.raises(MetersMoved) as moved:
                    await one.create_invocation(inv("i2", "k2", State.PREPARED), [ev("i2", 1, None, State.PREPARED)],
                                                claim=claim("k2"))  # fmt: skip
                assert [r.before for r in moved.value.readings] == [2]
                assert await one.get_invocation("i2") is None
                assert rows(path) == [("i1",), ("i2",), ("x2",)]  # reserved at the new reading
                assert await one.create_invocation(
                    inv("i2", "k2", State.PREPARED), [ev("i2", 1, None, State.PREPARED)], claim=claim("k2")
                ) is None  # fmt: skip
            assert rows(path) == [("i1",), ("i2",), ("x2",)]
            assert await m1.totals("sends", k.scope, hour, "s1", NOW) == 3

            # (3) the same connection: a concurrent call of the same sidecar reserves in between
            async def other_call() -> None:
                await m1.reserve("y4", "s1", [k], NOW, later)

            async with m1.fold():
                (seen,) = await m1.reserve("i4", "s1", [k], NOW, later)
                assert seen.before == 3
                await asyncio.create_task(other_call())
                with pytest.raises(MetersMoved) as moved:
                    await one.create_invocation(inv("i4", "k4", State.PREPARED), [ev("i4", 1, None, State.PREPARED)],
                                                claim=claim("k4"))  # fmt: skip
                assert [r.before for r in moved.value.readings] == [4]
                await m1.release("i4")  # the call ends without its invocation: the reservation goes
            assert ("i4",) not in rows(path)
            # (4) a claim lost at the write: no invocation, so no reservation
            async with m1.fold():
                await m1.reserve("i5", "s1", [k], NOW, later)
                lost = await one.create_invocation(
                    inv("i5", "k1", State.PREPARED), [ev("i5", 1, None, State.PREPARED)], claim=claim("k1")
                )
                assert lost is not None
            assert ("i5",) not in rows(path)
            # (5) a deny reserves nothing
            async with m1.fold():
                await m1.reserve("i6", "s1", [k], NOW, later)
                assert await one.create_invocation(
                    inv("i6", "k6", State.AUTHORIZATION_REJECTED),
                    [ev("i6", 1, None, State.AUTHORIZATION_REJECTED)], claim=claim("k6"),
                ) is None  # fmt: skip
            assert ("i6",) not in rows(path)
        finally:
            await one.close()
            await two.close()

    asyncio.run(run())


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_a_decision_whose_meters_moved_before_its_write_is_made_again(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    """Issue 30 item 5 (SQLite, one commit): two gates on one file (two connections, as two
    processes sharing it; keyed, the reading rides on the key's look-up; keyless, it is a
    transaction of its own). ``ana`` has 4 sends this hour; her 5th is read at 4 and allowed, and
    while the policy decides another process's 5th send commits. The write finds the meters
    moved under the write lock: it writes no invocation, reserves at 5, and the policy decides
    again: denied, its event records ``before`` 5. Exactly 5 allowed (the reading and the write
    were two transactions; without the check under the lock this would be 6)."""
    from dataclasses import replace

    from callgate.base.clock import FixedClock
    from callgate.base.model import Effect, Proposal, Subject
    from callgate.base.trace import TraceContext
    from callgate.config import load_config
    from callgate.policy.snapshot import load_snapshot
    from callgate.propose import steps
    from callgate.propose.outcome import SessionSpec
    from callgate.server.app import Shared
    from tests.conftest import ROOT

    folder = meter_folder(tmp_path_factory, "moved")
    base = load_config(ROOT / "callgate.toml")
    cfg = replace(base, policy=replace(base.policy, dir=str(folder)))
    snap = load_snapshot(folder, policy=cfg.policy)
    clock = FixedClock(CLOCK)
    trace = TraceContext.from_traceparent(None)
    decide = steps.authorize

    async def run() -> None:
        one, two = SQLiteStore(tmp_path / "shared.db"), SQLiteStore(tmp_path / "shared.db")
        gate_a = Shared.build(cfg, snap, one, clock, one.keys()).gate(cfg, one, clock)
        gate_b = Shared.build(cfg, snap, two, clock, two.keys()).gate(cfg, two, clock)
        try:
            sa = await gate_a.open_session(
                SessionSpec(subject=Subject(tenant="acme", id="ana"), timezone="UTC")
            )
            sb = await gate_b.open_session(
                SessionSpec(subject=Subject(tenant="acme", id="ana"), timezone="UTC")
            )
            await gate_a.list_tools(sa.session_id, "m")
            await gate_b.list_tools(sb.session_id, "m")

            def send(session_id: str, n: str) -> Proposal:
                raw = json.dumps({"to": f"{n}@example.com"}).encode()
                return Proposal(session_id, "m", n, "mail.send", "v1", raw, n if keyed else "")

            for i in range(4):
                got = await gate_a.propose(send(sa.session_id, f"a{i}"), trace)
                assert got.decision is not None and got.decision.effect is Effect.ALLOW
            asked: list[int] = []

            async def meanwhile(call: Any, *a: Any, **kw: Any) -> Any:
                if call.proposal.proposal_id == "a4":
                    asked.append(call.usage["sends"]["1h"]["before"])
                    if len(asked) == 1:  # another process's call commits during this decision
                        other = await gate_b.propose(send(sb.session_id, "b0"), trace)
                        assert other.decision is not None and other.decision.effect is Effect.ALLOW
                return await decide(call, *a, **kw)

            monkeypatch.setattr(steps, "authorize", meanwhile)
            got = await gate_a.propose(send(sa.session_id, "a4"), trace)
            assert asked == [4, 5]  # decided on 4, then again on the reading under the lock
            assert got.decision is not None and got.decision.effect is Effect.DENY
            _, events = await gate_a.get_invocation(got.record.invocation_id, session_id=sa.session_id)
            (deciding_event,) = [e for e in events if e.kind == "authorization_rejected"]
            assert deciding_event.data["usage"]["sends"]["1h"] == {"before": 5, "after": 6}
            assert (
                await one.meters().totals("sends", "acme\x1fs:ana", Window("1h", 3_600_000), "", CLOCK) == 5
            )
        finally:
            await one.close()
            await two.close()

    asyncio.run(run())
