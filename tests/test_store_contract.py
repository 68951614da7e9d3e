"""One contract for every :class:`~callgate.store.base.Store` backend, run on SQLite and on a real
PostgreSQL (tests/pg_fixture.py; a fresh database per test): records round-trip, compare-and-set
writes let exactly one writer win, events are numbered in order, usage adds up, the idempotency
key is claimed with its invocation and follows it (complete, release, result) in the same
transaction, racing claims make one invocation, startup repairs orphaned keys, and a schema
newer than the code is refused (issue 9)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from callgate.base.errors import CallgateError, ErrorCode
from callgate.base.states import State
from callgate.store.base import (
    EventRecord,
    InvocationRecord,
    KeyClaim,
    Move,
    ResultRecord,
    SessionRecord,
    Store,
    ToolViewRecord,
    Usage,
)
from callgate.store.idempotency.base import ClaimKind, ExpiredPolicy, IdempotencyKey
from tests.test_sqlite_store import ATTEMPT, EVENT, INVOCATION

R = TypeVar("R")
NOW = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Backend:
    kind: str
    target: str
    """SQLite file path, or the DSN of a fresh PostgreSQL database."""

    async def open(self) -> Store:
        if self.kind == "sqlite":
            from callgate.store.sqlite import SQLiteStore

            return SQLiteStore(self.target)
        from callgate.store.postgres import PostgresStore

        store = PostgresStore(self.target, max_size=8)
        await store.start()
        return store

    def run(self, body: Callable[[Store], Awaitable[R]]) -> R:
        async def main() -> R:
            store = await self.open()
            try:
                return await body(store)
            finally:
                await store.close()

        return asyncio.run(main())

    def sql(self, statement: str) -> None:
        """Run one statement behind the store's back (to stage what an older version left)."""
        if self.kind == "sqlite":
            import sqlite3

            with sqlite3.connect(self.target) as c:
                c.execute(statement)
            return
        import psycopg

        with psycopg.connect(self.target, autocommit=True) as c:
            c.execute(statement.replace("invocations", "callgate_invocations"))


def fresh_pg_database(dsn: str) -> str:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"cg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "callgate.db"))
    else:
        yield Backend("postgres", fresh_pg_database(request.getfixturevalue("postgres_dsn")))


def inv(inv_id: str, key: str = "", state: State = State.AUTHORIZED, **kw: Any) -> InvocationRecord:
    return InvocationRecord(
        invocation_id=inv_id, session_id="s1", model_call_id="m", proposal_id="p", tool_name="t",
        tool_version="v1", tenant="acme", subject="alice", state=state, raw_arguments=b"{}",
        digest="sha256:d", idempotency_key=key, confirmation_expires_at="2026-07-19T06:05:00Z",
        created_at="2026-07-19T06:00:00Z", updated_at="2026-07-19T06:00:00Z", **kw,
    )  # fmt: skip


def ev(inv_id: str, seq: int, frm: State | None, to: State, kind: str = "x") -> EventRecord:
    return EventRecord(
        f"{inv_id}.{seq}" if seq else uuid.uuid4().hex, inv_id, seq, "t", kind, frm, to, "t", "s"
    )


def claim(key: str, digest: str = "sha256:d") -> KeyClaim:
    return KeyClaim(
        IdempotencyKey("acme", "alice", "t", "v1", key), digest, timedelta(hours=1), ExpiredPolicy.REJECT, NOW
    )


def test_records_round_trip(backend: Backend) -> None:
    session = SessionRecord(
        "s1", "acme", "alice", "UTC", "en", {"max_tool_calls": 3}, ("t@v1",), "2026-07-19T06:00:00Z"
    )
    view = ToolViewRecord("s1", "m", ("t@v1",), {"t@v1": "d"}, "ts", "2026-07-19T06:00:00Z")
    started = replace(ATTEMPT, outcome="", failure_class="", finished_at="", external_resource_id="",
                      http_status=0, cost_micros=0, retry_reason="", retry_after="")  # fmt: skip
    result = ResultRecord("inv-1", "ok", b"msg", True, b"rest", "page-1", 2, "2026-07-19T06:00:04Z", "n1")

    async def body(store: Store) -> None:
        await store.put_session(session)
        assert await store.get_session("s1") == session and await store.get_session("nope") is None
        await store.put_tool_view(view)
        await store.put_tool_view(replace(view, tool_set_digest="ts2"))  # replaced, not duplicated
        assert await store.get_tool_view("s1", "m") == replace(view, tool_set_digest="ts2")
        created = replace(INVOCATION, attempts=0, idempotency_key="")
        await store.create_invocation(created, [EVENT], {"s1": Usage(tool_calls=1)})
        assert await store.get_invocation("inv-1") == created
        assert await store.list_events("inv-1") == [EVENT]
        current = replace(INVOCATION, idempotency_key="")
        assert await store.begin_attempt(current, State.AUTHORIZED, started, [])
        assert not await store.begin_attempt(current, State.AUTHORIZED, replace(started, attempt_id="a2"), [])
        assert await store.get_attempt(ATTEMPT.attempt_id) == started
        assert await store.finish_attempt(current, State.AUTHORIZED, ATTEMPT, [])
        assert not await store.finish_attempt(current, State.AUTHORIZED, ATTEMPT, [])  # finished once
        assert await store.list_attempts("inv-1") == [ATTEMPT]
        assert await store.put_result(current, State.AUTHORIZED, result, [])
        assert not await store.put_result(current, State.AUTHORIZED, result, [])
        assert await store.get_result("inv-1") == result
        assert await store.add_usage("s1", Usage(model_calls=2, cost_micros=5)) == Usage(2, 1, 0, 5)
        assert await store.redeem_once("a1", "token", "t") and not await store.redeem_once("a1", "token", "t")
        await store.record_snapshot("rev1", "2026-07-19T06:00:00Z", {"engine": "cedar"})

    backend.run(body)


def test_transitions_are_compare_and_set_with_numbered_events(backend: Backend) -> None:
    async def body(store: Store) -> None:
        await store.create_invocation(inv("i1"), [ev("i1", 1, None, State.AUTHORIZED)])
        moved = replace(inv("i1"), state=State.PREPARED)
        assert not await store.transition(
            moved, State.PREPARED, [ev("i1", 0, State.AUTHORIZED, State.PREPARED)]
        )
        results = await asyncio.gather(
            *(
                store.transition(moved, State.AUTHORIZED, [ev("i1", 0, State.AUTHORIZED, State.PREPARED)])
                for _ in range(5)
            )
        )
        assert results.count(True) == 1
        await asyncio.gather(
            *(store.append_events([ev("i1", 0, State.PREPARED, State.PREPARED)]) for _ in range(5))
        )
        assert [e.seq for e in await store.list_events("i1")] == list(range(1, 8))
        assert (await store.get_invocation("i1")) == moved
        assert [i.invocation_id for i in await store.list_pending("acme")] == []
        await store.create_invocation(inv("i2"), [ev("i2", 1, None, State.AUTHORIZED)])
        assert [i.invocation_id for i in await store.list_pending("acme")] == ["i2"]
        assert await store.list_pending("other") == []

    backend.run(body)


def test_a_replay_records_the_state_its_own_transaction_read(backend: Backend) -> None:
    """Issue 34: a replay raced the deadline sweep and appended ``PREPARED -> PREPARED`` after
    ``CANCELLED_BEFORE_COMMIT``. ``append_to_current`` reads and appends in one transaction, so
    each replay event repeats the state of the event before it, whatever the interleaving."""

    def replay(current: InvocationRecord) -> list[EventRecord]:
        return [ev(current.invocation_id, 0, current.state, current.state, "idempotent_replay")]

    async def body(store: Store) -> None:
        for n in range(4):
            iid = f"r{n}"
            await store.create_invocation(inv(iid), [ev(iid, 1, None, State.AUTHORIZED)])
            prepared = replace(inv(iid), state=State.PREPARED)
            cancelled = replace(inv(iid), state=State.CANCELLED_BEFORE_COMMIT)
            await asyncio.gather(
                *(store.append_to_current(iid, replay) for _ in range(6)),
                store.transition(prepared, State.AUTHORIZED, [ev(iid, 0, State.AUTHORIZED, State.PREPARED)]),
                store.transition(
                    cancelled, State.PREPARED, [ev(iid, 0, State.PREPARED, State.CANCELLED_BEFORE_COMMIT)]
                ),
                *(store.append_to_current(iid, replay) for _ in range(6)),
            )
            events = await store.list_events(iid)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert sum(e.kind == "idempotent_replay" for e in events) == 12
            for before, e in zip(events, events[1:], strict=False):
                assert e.from_state == before.to_state, (before, e)
        assert await store.append_to_current("nope", replay) is None

    backend.run(body)


def test_many_moves_in_one_transaction_skip_only_the_stale_ones(backend: Backend) -> None:
    """transition_many (the sweeps): each move is a compare-and-set of its own; a stale one is
    skipped, the others are written with their numbered events and their keys follow them."""

    async def body(store: Store) -> None:
        assert await store.transition_many([]) == []
        for i, key in (("i1", "k1"), ("i2", ""), ("i3", "")):
            await store.create_invocation(inv(i, key), [ev(i, 1, None, State.AUTHORIZED)], None,
                                          claim(key) if key else None)  # fmt: skip
        confirmed = replace(inv("i2"), state=State.PREPARED)  # another call moved i2 first
        assert await store.transition(
            confirmed, State.AUTHORIZED, [ev("i2", 0, State.AUTHORIZED, State.PREPARED)]
        )
        cancel = State.CANCELLED_BEFORE_COMMIT
        moves = [
            Move(replace(inv(i, key), state=cancel), State.AUTHORIZED, [ev(i, 0, State.AUTHORIZED, cancel)])
            for i, key in (("i1", "k1"), ("i2", ""), ("i3", ""))
        ]
        assert await store.transition_many(moves) == [True, False, True]
        assert [(await store.get_invocation(i)).state for i in ("i1", "i2", "i3")] == [
            cancel,
            State.PREPARED,
            cancel,
        ]  # type: ignore[union-attr]
        assert [(e.seq, e.to_state) for e in await store.list_events("i1")] == [
            (1, State.AUTHORIZED),
            (2, cancel),
        ]
        assert [e.to_state for e in await store.list_events("i2")] == [State.AUTHORIZED, State.PREPARED]
        rec = await store.keys().get(claim("k1").key)
        assert rec is not None and rec.state == "released"  # in the same transaction as its move
        assert await store.transition_many(moves) == [False, False, False]  # nothing is moved twice

    backend.run(body)


def test_key_is_claimed_with_its_invocation_and_follows_it(backend: Backend) -> None:
    async def body(store: Store) -> None:
        keys = store.keys()
        assert keys.in_store
        assert (
            await store.create_invocation(
                inv("i1", "k1"), [ev("i1", 1, None, State.AUTHORIZED)], None, claim("k1")
            )
            is None
        )
        lost = await store.create_invocation(
            inv("i2", "k1"), [ev("i2", 1, None, State.AUTHORIZED)], None, claim("k1")
        )
        assert lost is not None and lost.kind is ClaimKind.IN_PROGRESS and lost.record is not None
        assert lost.record.invocation_id == "i1" and await store.get_invocation("i2") is None
        other = await store.create_invocation(
            inv("i3", "k1"), [ev("i3", 1, None, State.AUTHORIZED)], None, claim("k1", "sha256:other")
        )
        assert other is not None and other.kind is ClaimKind.MISMATCH
        # cancelled before the boundary: released in the same transaction
        cancelled = replace(
            inv("i1", "k1"), state=State.CANCELLED_BEFORE_COMMIT, updated_at="2026-07-19T06:00:05Z"
        )
        assert await store.transition(
            cancelled, State.AUTHORIZED, [ev("i1", 0, State.AUTHORIZED, State.CANCELLED_BEFORE_COMMIT)]
        )
        rec = await keys.get(claim("k1").key)
        assert rec is not None and rec.state == "released"
        # past the boundary: completed by the attempt's outcome, its tool message kept by put_result
        executing = inv("i4", "k4", State.EXECUTING, attempts=1)
        assert (
            await store.create_invocation(executing, [ev("i4", 1, None, State.EXECUTING)], None, claim("k4"))
            is None
        )
        started = replace(ATTEMPT, invocation_id="i4", attempt_id="a4", outcome="", finished_at="")
        done = replace(
            executing, state=State.COMMITTED, external_resource_id="evt-1", updated_at="2026-07-19T06:00:06Z"
        )
        # the attempt row must exist for finish_attempt
        assert await store.begin_attempt(replace(executing, attempts=2), State.EXECUTING, started, [])
        assert await store.finish_attempt(
            replace(done, attempts=2), State.EXECUTING, replace(started, outcome="committed"), []
        )
        rec = await keys.get(claim("k4").key)
        assert rec is not None and (rec.state, rec.outcome, rec.external_resource_id) == (
            "completed",
            "COMMITTED",
            "evt-1",
        )
        result = ResultRecord("i4", "ok", b"the message", False, b"", "", 0, "t", "n")
        observed = replace(done, state=State.OBSERVED, attempts=2)
        assert await store.put_result(observed, State.COMMITTED, result, [])
        rec = await keys.get(claim("k4").key)
        assert rec is not None and rec.result == b"the message"

    backend.run(body)


def test_racing_claims_make_one_invocation(backend: Backend) -> None:
    async def body(store: Store) -> None:
        got = await asyncio.gather(
            *(
                store.create_invocation(
                    inv(f"r{i}", "race"), [ev(f"r{i}", 1, None, State.AUTHORIZED)], None, claim("race")
                )
                for i in range(8)
            )
        )
        winners = [i for i, g in enumerate(got) if g is None]
        assert len(winners) == 1
        held = {g.record.invocation_id for g in got if g is not None and g.record is not None}
        assert held == {f"r{winners[0]}"}

    backend.run(body)


def test_start_releases_keys_whose_invocation_is_missing(backend: Backend) -> None:
    async def seed(store: Store) -> None:
        await store.create_invocation(inv("gone", "k9"), [], None, claim("k9"))

    backend.run(seed)
    backend.sql("DELETE FROM invocations WHERE invocation_id = 'gone'")

    async def check(store: Store) -> None:
        rec = await store.keys().get(claim("k9").key)
        assert rec is not None and rec.state == "released"
        assert await store.create_invocation(inv("again", "k9"), [], None, claim("k9")) is None

    backend.run(check)


def test_schema_newer_than_the_code_is_refused(backend: Backend) -> None:
    async def nothing(store: Store) -> None:
        return None

    backend.run(nothing)
    table = "schema_version" if backend.kind == "sqlite" else "callgate_schema_version"
    backend.sql(f"INSERT INTO {table} VALUES (999, 'from the future', '2030-01-01T00:00:00Z')")
    with pytest.raises(CallgateError) as ei:
        backend.run(nothing)
    assert ei.value.code is ErrorCode.STORE_UNAVAILABLE and "schema version 999" in ei.value.message


def test_queries_and_records_of_later_features(backend: Backend) -> None:
    """The store methods added after the contract was first written, on every backend: the
    deadline sweep query, keyset-paged pending confirmations, tool messages fed into a model call
    (6.13 question 8) and Authorize decision records."""
    from callgate.store.base import DecisionRecord, FedResultRecord

    view = ToolViewRecord("s1", "m2", ("t@v1",), {"t@v1": "d"}, "ts", "2026-07-19T06:00:09Z")
    fed = FedResultRecord("a1", "s1", "m2", "2026-07-19T06:00:09Z", "sha256:m")
    decision = DecisionRecord(
        decision_id="dec-1", at="2026-07-19T06:00:10Z", tenant="acme", subject="alice",
        capability="weather.read", resource="city:paris", context_digest="sha256:c",
        context_keys=("tool",), decision={"effect": "allow", "policy_ids": ["p"]},
        policy_revision="sha256:r", trace_id="0" * 31 + "1", span_id="0" * 15 + "2",
    )  # fmt: skip

    async def body(store: Store) -> None:
        # deadlines: AUTHORIZED/PREPARED past theirs, earliest first, sub-second exact, limited
        past = [
            inv("a1", state=State.PREPARED, deadline="2026-07-19T05:59:58Z"),
            inv("a2", state=State.AUTHORIZED, deadline="2026-07-19T05:59:59.500000Z"),
            inv("a3", state=State.PREPARED, deadline="2026-07-19T06:00:00.250000Z"),  # after NOW
            inv("a4", state=State.EXECUTING, deadline="2026-07-19T05:00:00Z"),  # executing: not ours
            inv("a5", state=State.PREPARED),  # no deadline
        ]
        for i, record in enumerate(past):
            await store.create_invocation(
                replace(record, created_at=f"2026-07-19T06:00:0{i}Z"),
                [ev(record.invocation_id, 1, None, record.state)],
            )
        got = await store.list_past_deadline(NOW, 10)
        assert [r.invocation_id for r in got] == ["a1", "a2"]
        assert [r.invocation_id for r in await store.list_past_deadline(NOW, 1)] == ["a1"]
        executing = await store.list_past_deadline(NOW, 10, executing=True)  # the EXECUTING sweep
        assert [r.invocation_id for r in executing] == ["a4"]
        # pending confirmations: AUTHORIZED of the tenant, (created_at, id) keyset pages
        first = await store.list_pending_page("acme", None, 1)
        assert [r.invocation_id for r in first] == ["a2"]
        after = (first[-1].created_at, first[-1].invocation_id)
        assert await store.list_pending_page("acme", after, 5) == []
        assert await store.list_pending_page("globex", None, 5) == []
        # fed tool messages: recorded with the view, a repeat kept once
        await store.put_tool_view_fed(view, [fed, fed])
        assert await store.get_tool_view("s1", "m2") == view
        assert await store.list_fed("a1") == [fed]
        assert await store.list_fed("a2") == []
        # Authorize decisions: append, read back
        await store.record_decision(decision)
        assert await store.get_decision("dec-1") == decision
        assert await store.get_decision("nope") is None

    backend.run(body)


def test_normalized_event_reads_back_with_the_invocations_arguments(backend: Backend) -> None:
    """Issue 15 A5: the arguments are stored once (the invocation row); a ``normalized`` event
    stored without them is read back with the invocation's, and one written before (carrying
    its own copy) is read as it was stored."""
    args = b'{"records":[1,2,3],"table":"t"}'

    def normalized(inv_id: str, data: dict[str, Any]) -> EventRecord:
        return EventRecord(f"{inv_id}.2", inv_id, 2, "t", "normalized", State.VALIDATED, State.VALIDATED,
                           "t", "s", data)  # fmt: skip

    new = normalized("i-new", {"digest": "sha256:d", "applied": []})
    old = normalized(
        "i-old", {"digest": "sha256:d", "applied": [], "normalized_arguments": '{"as":"stored"}'}
    )

    async def body(store: Store) -> None:
        first = ev("i-new", 1, None, State.VALIDATED)
        await store.create_invocation(inv("i-new", normalized_arguments=args), [first, new])
        await store.create_invocation(
            inv("i-old", normalized_arguments=args), [ev("i-old", 1, None, State.VALIDATED), old]
        )
        got = await store.list_events("i-new")
        assert got[0] == first
        assert got[1] == replace(new, data={**new.data, "normalized_arguments": args.decode()})
        assert (await store.list_events("i-old"))[1] == old
        # no arguments, nothing to add (a call refused before normalization has none)
        await store.create_invocation(inv("i-none"), [normalized("i-none", {"digest": ""})])
        assert (await store.list_events("i-none"))[0].data == {"digest": ""}

    backend.run(body)
