"""One commit per answer (issue 9, "An answer without its record"): the idempotency key lives in
the event database and is claimed, completed, released and given its result in the transaction
that writes its invocation; a claim that loses the key between the gate's look-up and its write
is answered as a replay (or the refusal), never as a second invocation; startup repairs keys an
older version left without their invocation (spec 6.8, 6.13)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from callgate.base.model import Proposal
from callgate.base.states import State
from callgate.base.trace import TraceContext
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.propose.outcome import ProposeOutcome
from callgate.store.base import EventRecord, InvocationRecord, KeyClaim
from callgate.store.idempotency.base import ClaimKind, ExpiredPolicy, IdempotencyKey
from callgate.store.sqlite import SQLiteStore
from tests.conftest import Running
from tests.test_execution import FakeCalendar, prepared_event, run_attempt, sc  # noqa: F401

NOW = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)


def keys_of(db: Path) -> list[tuple[str, str, str, str]]:
    """(idem_key, invocation_id, state, outcome) of every key in the event database."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT idem_key, invocation_id, state, outcome FROM idempotency_keys").fetchall()
    return [tuple(r) for r in rows]


def invocation(inv_id: str, key: str, state: State = State.AUTHORIZED) -> InvocationRecord:
    return InvocationRecord(
        invocation_id=inv_id, session_id="s", model_call_id="m", proposal_id="p", tool_name="t",
        tool_version="v1", tenant="acme", subject="alice", state=state, raw_arguments=b"{}",
        digest="sha256:d", idempotency_key=key, created_at="2026-07-19T06:00:00Z",
        updated_at="2026-07-19T06:00:00Z",
    )  # fmt: skip


def first_event(inv_id: str, state: State = State.AUTHORIZED) -> EventRecord:
    return EventRecord(f"{inv_id}.1", inv_id, 1, "2026-07-19T06:00:00Z", "proposed", None, state, "t", "s")


def claim(key: str) -> KeyClaim:
    return KeyClaim(
        IdempotencyKey("acme", "alice", "t", "v1", key),
        "sha256:d",
        timedelta(hours=1),
        ExpiredPolicy.REJECT,
        NOW,
    )


def test_claim_is_written_with_its_invocation_or_not_at_all(tmp_path: Path) -> None:
    db = tmp_path / "callgate.db"

    async def body() -> None:
        store = SQLiteStore(db)
        try:
            assert (
                await store.create_invocation(
                    invocation("inv_a", "k1"), [first_event("inv_a")], None, claim("k1")
                )
                is None
            )
            # another invocation claiming the same key at commit: nothing of it is written
            lost = await store.create_invocation(
                invocation("inv_b", "k1"), [first_event("inv_b")], None, claim("k1")
            )
            assert lost is not None and lost.kind is ClaimKind.IN_PROGRESS
            assert lost.record is not None and lost.record.invocation_id == "inv_a"
            assert await store.get_invocation("inv_b") is None and await store.list_events("inv_b") == []
            # a write that fails after the claim (duplicate event id) rolls the claim back too
            bad = [first_event("inv_c"), first_event("inv_c")]
            try:
                await store.create_invocation(invocation("inv_c", "k2"), bad, None, claim("k2"))
            except Exception:
                pass
            else:  # pragma: no cover
                raise AssertionError("duplicate events were accepted")
            assert await store.keys().get(claim("k2").key) is None
        finally:
            await store.close()

    asyncio.run(body())
    assert keys_of(db) == [("k1", "inv_a", "claimed", "")]


def test_key_follows_the_executor_half_in_the_same_database(sc: Running) -> None:  # noqa: F811
    cal = FakeCalendar()
    _, resp = prepared_event(sc, "one-commit-1")
    run_attempt(sc, cal, resp.invocation_id)
    assert keys_of(sc.db_path) == [("one-commit-1", resp.invocation_id, "completed", "COMMITTED")]
    sc.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=resp.invocation_id, status="ok", value=b'{"id":"e1"}')
    )
    with sqlite3.connect(sc.db_path) as c:
        (result,) = c.execute("SELECT result FROM idempotency_keys").fetchone()
        (message,) = c.execute("SELECT message FROM results").fetchone()
    assert result is not None and bytes(result) == bytes(message)


def test_cancel_releases_the_key_in_its_transaction(sc: Running) -> None:  # noqa: F811
    _, resp = prepared_event(sc, "one-commit-2")
    sc.gate.Cancel(
        pb.CancelRequest(
            invocation_id=resp.invocation_id,
            reason="changed my mind",
            session_id=sc.session_of(resp.invocation_id),
        )
    )
    assert keys_of(sc.db_path) == [("one-commit-2", resp.invocation_id, "released", "")]


def test_concurrent_claims_on_one_key_are_one_invocation(sc: Running) -> None:  # noqa: F811
    """Eight proposals of one key at once: every look-up finds the key free, one write wins and
    the seven others are answered as replays of it (nothing of them written)."""
    sid = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(sid)
    gate = sc.sidecar.components.gate
    args = json.dumps({"title": "race", "start": "2026-07-20T09:00", "duration_minutes": 10}).encode()

    async def race() -> list[ProposeOutcome]:
        trace = TraceContext.from_traceparent(None)
        return list(
            await asyncio.gather(
                *(
                    gate.propose(
                        Proposal(sid, "mc-1", f"p{i}", "calendar.create_event", "v1", args, "race-key"), trace
                    )
                    for i in range(8)
                )
            )
        )

    outcomes = sc.call(race())
    fresh = [o for o in outcomes if not o.idempotent_replay]
    assert len(fresh) == 1
    assert {o.record.invocation_id for o in outcomes} == {fresh[0].record.invocation_id}
    with sqlite3.connect(sc.db_path) as c:
        (n,) = c.execute("SELECT COUNT(*) FROM invocations WHERE idempotency_key='race-key'").fetchone()
        replays = c.execute("SELECT COUNT(*) FROM events WHERE kind='idempotent_replay'").fetchone()[0]
    assert n == 1 and replays == 7


def test_a_claim_losing_to_other_arguments_is_recorded_as_the_refusal(sc: Running) -> None:  # noqa: F811
    sid = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(sid)
    gate = sc.sidecar.components.gate

    def proposal(i: int) -> Proposal:
        args = {"title": f"race {i}", "start": "2026-07-20T09:00", "duration_minutes": 10}
        return Proposal(
            sid, "mc-1", f"p{i}", "calendar.create_event", "v1", json.dumps(args).encode(), "mix-key"
        )

    async def race() -> list[ProposeOutcome]:
        trace = TraceContext.from_traceparent(None)
        return list(await asyncio.gather(gate.propose(proposal(0), trace), gate.propose(proposal(1), trace)))

    outcomes = sc.call(race())
    states = sorted(o.record.state.value for o in outcomes)
    assert states == ["AUTHORIZED", "VALIDATION_REJECTED"]
    refused = next(o for o in outcomes if o.record.state is State.VALIDATION_REJECTED)
    assert refused.rejection is not None and refused.rejection.code == "idempotency_key_reused"
    events: list[Any] = sc.call(sc.sidecar.components.store.list_events(refused.record.invocation_id))
    assert [e.kind for e in events][-2:] == ["normalized", "validation_rejected"]
    assert all(e.kind != "authorized" for e in events)


def test_startup_releases_a_key_whose_invocation_is_missing(tmp_path: Path) -> None:
    """What the two-store version could leave behind: a key claimed for an invocation that was
    never written. The next start releases it (and logs it); the key is free again."""
    db = tmp_path / "callgate.db"

    async def seed() -> None:
        store = SQLiteStore(db)
        await store.create_invocation(invocation("inv_a", "k1"), [first_event("inv_a")], None, claim("k1"))
        await store.close()

    asyncio.run(seed())
    with sqlite3.connect(db) as c:  # the invocation never made it; the key did
        c.execute("DROP TRIGGER events_append_only_d")
        c.execute("DELETE FROM events")
        c.execute("DELETE FROM invocations")

    async def reopen() -> ClaimKind:
        store = SQLiteStore(db)
        try:
            got = await store.create_invocation(
                invocation("inv_b", "k1"), [first_event("inv_b")], None, claim("k1")
            )
            return ClaimKind.NEW if got is None else got.kind
        finally:
            await store.close()

    assert asyncio.run(reopen()) is ClaimKind.NEW
    assert keys_of(db) == [("k1", "inv_b", "claimed", "")]
