"""Issue 9, deadlines and cancel, through the gRPC API of a real sidecar with a FixedClock.

* Deadlines end by themselves (6.2, 6.7): an AUTHORIZED or PREPARED invocation past its deadline
  becomes CANCELLED_BEFORE_COMMIT with a ``deadline_expired`` event and its idempotency key is
  free again, by the sweeper and at startup. The deadline counts from PREPARED: a call parked for
  a confirmation can be confirmed inside its window even after the tool's timeout, and never
  after the window (its deadline while parked).
* ``Cancel`` is idempotent on every state and answers the state (6.7, 6.12).
* A cancel after the commit boundary withholds the tool message, not the record (6.7, 6.12).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from callgate.base.states import State
from callgate.cli.explain import SQLiteReader, explain, render_text
from callgate.config import ConfirmationConfig, IdempotencyConfig, StoreConfig
from callgate.execute.execution import WITHHELD_MESSAGE
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.store.base import InvocationRecord
from tests.conftest import Running, short_tmpdir, start_sidecar, stop_sidecar
from tests.test_confirmation import error_reason
from tests.test_execution import (
    prepared_event,
    prepared_event_unconfirmed,
    propose_event,
)
from tests.test_lifecycle import wait_for

FAST = ConfirmationConfig(sweep_interval_ms=50)
SLOW = ConfirmationConfig(sweep_interval_ms=3_600_000)  # only the startup sweep runs in a test
CALENDAR_TIMEOUT_S = 10  # policies/tools/calendar.create_event@v1.json timeout_policy
T = TypeVar("T")


@pytest.fixture
def fast() -> Iterator[Running]:
    running, tmp = start_sidecar(confirmation=FAST)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


@pytest.fixture
def slow() -> Iterator[Running]:
    running, tmp = start_sidecar(confirmation=SLOW)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def invocation(sc: Running, invocation_id: str) -> pb.GetInvocationResponse:
    return sc.gate.GetInvocation(
        pb.GetInvocationRequest(session_id=sc.session_of(invocation_id), invocation_id=invocation_id)
    )


def state(sc: Running, invocation_id: str) -> str:
    return pb.State.Name(invocation(sc, invocation_id).invocation.state)


def kinds(sc: Running, invocation_id: str) -> list[str]:
    return [e.kind for e in invocation(sc, invocation_id).events]


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s)


# ----------------------------------------------------------------------------- deadlines
def test_prepared_past_its_deadline_ends_by_itself_and_frees_its_key(fast: Running) -> None:
    sid, resp = prepared_event(fast, key="k-dl-prepared")
    got = invocation(fast, resp.invocation_id).invocation
    assert (ts(got.deadline) - fast.clock.now()).total_seconds() == CALENDAR_TIMEOUT_S  # from Confirm
    fast.clock.advance(CALENDAR_TIMEOUT_S + 1)
    wait_for(lambda: state(fast, resp.invocation_id) == "CANCELLED_BEFORE_COMMIT", timeout=5)
    events = invocation(fast, resp.invocation_id).events
    last = events[-1]
    assert last.kind == "deadline_expired"
    assert pb.State.Name(last.from_state) == "PREPARED"
    assert last.data["deadline"] == got.deadline
    sweeper = fast.sidecar.sweeper
    assert sweeper is not None
    wait_for(lambda: sweeper.total_deadlines == 1, timeout=5)  # counted once its sweep returns
    with pytest.raises(grpc.RpcError) as err:  # nothing may start any more
        fast.executor.BeginAttempt(
            pb.BeginAttemptRequest(invocation_id=resp.invocation_id, executor_id="calendar-executor")
        )
    assert error_reason(err.value) in ("deadline_exceeded", "attempt_not_allowed")
    again = propose_event(fast, sid, "k-dl-prepared")  # the key is free again: a new invocation
    assert not again.idempotent_replay and again.invocation_id != resp.invocation_id
    assert again.decision.effect == pb.CONFIRM


def test_confirm_after_the_tool_timeout_inside_the_window_starts_the_deadline(slow: Running) -> None:
    """The issue's stuck case: confirmed after the 10 s timeout (window 300 s) answered PREPARED,
    then BeginAttempt said DEADLINE_EXCEEDED and the call stayed PREPARED forever."""
    _, parked = prepared_event_unconfirmed(slow, "k-dl-late-confirm")
    rec = invocation(slow, parked.invocation_id).invocation
    assert rec.deadline == parked.confirmation_expires_at  # while parked: the window's end
    slow.clock.advance(CALENDAR_TIMEOUT_S + 20)
    ok = slow.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest, confirmed_by="alice")
    )
    assert pb.State.Name(ok.state) == "PREPARED"
    got = invocation(slow, parked.invocation_id)
    confirmed = [e for e in got.events if e.kind == "confirmed"][0]
    assert (ts(got.invocation.deadline) - slow.clock.now()).total_seconds() == CALENDAR_TIMEOUT_S
    assert confirmed.data["deadline"] == got.invocation.deadline
    att = slow.executor.BeginAttempt(  # executable now: the execution budget counts from here
        pb.BeginAttemptRequest(invocation_id=parked.invocation_id, executor_id="calendar-executor")
    )
    assert att.attempt_id and state(slow, parked.invocation_id) == "EXECUTING"


def test_no_confirmation_is_accepted_after_the_deadline(slow: Running) -> None:
    sid, parked = prepared_event_unconfirmed(slow, "k-dl-window")
    slow.clock.advance(slow.config.confirmation.ttl_seconds)  # exactly the deadline
    with pytest.raises(grpc.RpcError) as err:
        slow.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest)
        )
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert state(slow, parked.invocation_id) == "CANCELLED_BEFORE_COMMIT"
    assert kinds(slow, parked.invocation_id)[-1] == "confirmation_expired"
    fresh = propose_event(slow, sid, "k-dl-window")
    assert not fresh.idempotent_replay


def test_a_parked_record_with_an_earlier_deadline_is_never_confirmed_past_it(slow: Running) -> None:
    """A record parked by an older version carries deadline = proposal + timeout (< the window):
    a Confirm after that deadline is refused and ends it (deadline_expired, key released)."""
    sid, parked = prepared_event_unconfirmed(slow, "k-dl-legacy")
    store = slow.sidecar.components.store
    inv = slow.call(store.get_invocation(parked.invocation_id))
    assert inv is not None
    early = replace(inv, deadline=inv.created_at)  # as the previous version wrote it, roughly
    assert slow.call(store.transition(early, State.AUTHORIZED, []))
    slow.clock.advance(1)
    with pytest.raises(grpc.RpcError) as err:
        slow.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest)
        )
    assert error_reason(err.value) == "deadline_exceeded"
    assert state(slow, parked.invocation_id) == "CANCELLED_BEFORE_COMMIT"
    assert kinds(slow, parked.invocation_id)[-1] == "deadline_expired"
    assert not propose_event(slow, sid, "k-dl-legacy").idempotent_replay


@contextmanager
def restarted_later(before: Callable[[Running], T], seconds: float) -> Iterator[tuple[Running, T]]:
    """A sidecar that ran ``before`` on its own store, stopped, and started again ``seconds``
    later by its clock (only the startup sweep runs: the periodic one is an hour away)."""
    data = short_tmpdir()
    paths = {
        "store": StoreConfig(path=str(data / "callgate.db")),
        "idempotency": IdempotencyConfig(path=str(data / "idempotency.db")),
    }
    try:
        first, tmp1 = start_sidecar(confirmation=SLOW, **paths)
        try:
            got = before(first)
            down_at = first.clock.now()
        finally:
            stop_sidecar(first, tmp1)
        second, tmp2 = start_sidecar(
            confirmation=SLOW, clock_at=down_at + timedelta(seconds=seconds), **paths
        )
        try:
            yield second, got
        finally:
            stop_sidecar(second, tmp2)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_deadlines_that_passed_while_down_end_at_startup() -> None:
    with restarted_later(lambda sc: prepared_event(sc, key="k-dl-startup"), CALENDAR_TIMEOUT_S + 5) as (
        second,
        (sid, resp),
    ):
        wait_for(lambda: state(second, resp.invocation_id) == "CANCELLED_BEFORE_COMMIT", timeout=5)
        assert kinds(second, resp.invocation_id)[-1] == "deadline_expired"
        sweeper = second.sidecar.sweeper
        assert sweeper is not None
        wait_for(lambda: sweeper.total_deadlines == 1, timeout=5)
        second.list_tools(sid)
        assert not propose_event(second, sid, "k-dl-startup").idempotent_replay  # key free


# ----------------------------------------------------------------------------- cancel
def _files(sc: Running) -> str:
    sid = sc.open_session(subject="carol")
    sc.list_tools(sid)
    return sid


def _begin(sc: Running, invocation_id: str, executor: str = "files") -> pb.BeginAttemptResponse:
    return sc.executor.BeginAttempt(pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor))


def _report(
    sc: Running, attempt_id: str, outcome: pb.Outcome.ValueType, **kw: object
) -> pb.ReportOutcomeResponse:
    return sc.executor.ReportOutcome(pb.ReportOutcomeRequest(attempt_id=attempt_id, outcome=outcome, **kw))


def _in_every_state(sc: Running) -> dict[str, str]:
    """One invocation per reachable stored state: state name -> invocation id."""
    out: dict[str, str] = {}
    alice = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(alice)
    out["PARSE_REJECTED"] = sc.propose(alice, "calendar.create_event@v1", b'{"title": ').invocation_id
    out["VALIDATION_REJECTED"] = sc.propose(
        alice, "calendar.create_event@v1", {"title": 1}, proposal_id="c2"
    ).invocation_id
    denied = sc.propose(
        alice,
        "calendar.create_event@v1",
        {"title": "x", "start": "2026-07-20T09:00", "duration_minutes": 500},
        idempotency_key="k-every-deny",
        proposal_id="c3",
    )
    out["AUTHORIZATION_REJECTED"] = denied.invocation_id
    out["AUTHORIZED"] = propose_event(sc, alice, "k-every-parked", start="2026-07-21T09:00").invocation_id
    files = _files(sc)
    for name, path in (
        ("PREPARED", "/tmp/a"),
        ("EXECUTING", "/tmp/b"),
        ("COMMITTED", "/tmp/c"),
        ("OBSERVED", "/tmp/d"),
        ("OUTCOME_UNKNOWN", "/tmp/e"),
        ("FAILED_BEFORE_COMMIT", "/tmp/f"),
        ("FAILED_AFTER_COMMIT", "/tmp/g"),
        ("CANCELLED_BEFORE_COMMIT", "/tmp/h"),
    ):
        r = sc.propose(files, "files.delete@v1", {"path": path}, proposal_id=f"f-{name}")
        assert pb.State.Name(r.state) == "PREPARED", name
        iid = r.invocation_id
        out[name] = iid
        if name in ("PREPARED",):
            continue
        if name == "CANCELLED_BEFORE_COMMIT":
            sc.gate.Cancel(pb.CancelRequest(session_id=sc.session_of(iid), invocation_id=iid))
            continue
        att = _begin(sc, iid)
        if name == "EXECUTING":
            continue
        if name in ("COMMITTED", "OBSERVED"):
            _report(sc, att.attempt_id, pb.OUTCOME_COMMITTED, external_resource_id=f"file:{path}")
            if name == "OBSERVED":
                sc.executor.EncodeResult(pb.EncodeResultRequest(invocation_id=iid, status="ok", value=b"{}"))
        elif name == "OUTCOME_UNKNOWN":
            _report(sc, att.attempt_id, pb.OUTCOME_UNKNOWN_COMMIT, failure_class=pb.TIMEOUT)
        elif name == "FAILED_BEFORE_COMMIT":
            _report(sc, att.attempt_id, pb.OUTCOME_FAILED_BEFORE_COMMIT, failure_class=pb.NOT_REACHED)
        elif name == "FAILED_AFTER_COMMIT":
            _report(sc, att.attempt_id, pb.OUTCOME_FAILED_AFTER_COMMIT)
    for name, iid in out.items():
        assert state(sc, iid) == name, (name, state(sc, iid))
    return out


BEFORE_BOUNDARY = {"AUTHORIZED", "PREPARED"}
AFTER_BOUNDARY = {"EXECUTING", "COMMITTED", "OUTCOME_UNKNOWN", "FAILED_AFTER_COMMIT"}
TERMINAL = {
    "PARSE_REJECTED",
    "VALIDATION_REJECTED",
    "AUTHORIZATION_REJECTED",
    "OBSERVED",
    "FAILED_BEFORE_COMMIT",
    "CANCELLED_BEFORE_COMMIT",
}


def test_cancel_is_idempotent_on_every_state_and_answers_the_state(slow: Running) -> None:
    ids = _in_every_state(slow)
    assert set(ids) == BEFORE_BOUNDARY | AFTER_BOUNDARY | TERMINAL
    for name, iid in ids.items():
        before = kinds(slow, iid)
        first = slow.gate.Cancel(
            pb.CancelRequest(session_id=slow.session_of(iid), invocation_id=iid, reason="user left")
        )
        second = slow.gate.Cancel(
            pb.CancelRequest(session_id=slow.session_of(iid), invocation_id=iid, reason="user left again")
        )
        after = kinds(slow, iid)
        expected = "CANCELLED_BEFORE_COMMIT" if name in BEFORE_BOUNDARY else name
        assert pb.State.Name(first.state) == expected, name
        assert pb.State.Name(second.state) == expected, name  # the second changes nothing
        assert state(slow, iid) == expected, name
        if name in BEFORE_BOUNDARY:
            assert after == [*before, "cancelled"], name
        elif name in AFTER_BOUNDARY:  # stops what follows, recorded once (6.7)
            assert after == [*before, "cancel_requested"], name
            assert invocation(slow, iid).invocation.cancel_requested_at, name
        else:  # terminal: nothing changes, nothing recorded
            assert after == before, name
            assert not invocation(slow, iid).invocation.cancel_requested_at, name
    with pytest.raises(grpc.RpcError) as err:
        slow.gate.Cancel(
            pb.CancelRequest(
                session_id=slow.session_of("inv_does_not_exist"), invocation_id="inv_does_not_exist"
            )
        )
    assert error_reason(err.value) == "invocation_not_found"
    # an observed result stays readable: the cancel came after it was handed out
    assert slow.gate.GetResult(
        pb.GetResultRequest(session_id=slow.session_of(ids["OBSERVED"]), invocation_id=ids["OBSERVED"])
    ).message


# ----------------------------------------------------------------------------- withheld
def test_cancel_after_the_boundary_withholds_the_summary_not_the_record(slow: Running) -> None:
    sid, resp = prepared_event(slow, key="k-withheld")
    iid = resp.invocation_id
    att = _begin(slow, iid, "calendar-executor")
    _report(slow, att.attempt_id, pb.OUTCOME_COMMITTED, external_resource_id="evt_1")
    slow.gate.Cancel(
        pb.CancelRequest(session_id=slow.session_of(iid), invocation_id=iid, reason="user closed the chat")
    )
    with pytest.raises(grpc.RpcError) as err:  # before a result: says why none will come
        slow.gate.GetResult(pb.GetResultRequest(session_id=slow.session_of(iid), invocation_id=iid))
    assert error_reason(err.value) == "output_after_cancel"
    value = json.dumps({"event_id": "evt_1", "summary": "created"}).encode()
    enc = slow.executor.EncodeResult(pb.EncodeResultRequest(invocation_id=iid, status="ok", value=value))
    assert enc.withheld and enc.message == b"" and not enc.next_page_token
    assert pb.State.Name(enc.state) == "COMMITTED"  # never OBSERVED: nothing went to the model
    with pytest.raises(grpc.RpcError) as err:
        slow.gate.GetResult(pb.GetResultRequest(session_id=slow.session_of(iid), invocation_id=iid))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(err.value) == "output_after_cancel"
    assert err.value.details() == WITHHELD_MESSAGE
    got = invocation(slow, iid)
    assert pb.State.Name(got.invocation.state) == "COMMITTED"
    last = got.events[-1]
    assert last.kind == "result_encoded" and last.data["withheld"] == "output_after_cancel"
    assert int(last.data["message_bytes"]) > 0
    # a repeat of the key replays the commit, never the withheld bytes
    replay = propose_event(slow, sid, "k-withheld")
    assert replay.idempotent_replay and replay.invocation_id == iid and replay.replayed_message == b""
    # the record keeps the bytes; explain shows them and that they were withheld
    live = slow.call(explain(slow.sidecar.components.store, iid))
    assert live.tool_message is not None and live.tool_message.withheld
    assert b"evt_1" in live.tool_message.message
    assert not live.context.tool_message_in_context
    text = render_text(live)
    assert "WITHHELD" in text and "evt_1" in text
    reader = SQLiteReader(slow.db_path)
    try:
        offline = asyncio.run(explain(reader, iid))
    finally:
        reader.close()
    assert offline.tool_message is not None and offline.tool_message.withheld
    with pytest.raises(grpc.RpcError) as err:  # recorded once
        slow.executor.EncodeResult(pb.EncodeResultRequest(invocation_id=iid, status="ok", value=value))
    assert error_reason(err.value) == "terminal_state"


def test_cancel_while_executing_then_committed_result_is_withheld(slow: Running) -> None:
    sid = _files(slow)
    r = slow.propose(sid, "files.delete@v1", {"path": "/tmp/x"})
    att = _begin(slow, r.invocation_id)
    slow.gate.Cancel(
        pb.CancelRequest(session_id=slow.session_of(r.invocation_id), invocation_id=r.invocation_id)
    )
    _report(slow, att.attempt_id, pb.OUTCOME_COMMITTED, external_resource_id="file:/tmp/x")
    assert state(slow, r.invocation_id) == "COMMITTED"
    enc = slow.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=r.invocation_id, status="ok", value=b'{"deleted": true}')
    )
    assert enc.withheld and pb.State.Name(enc.state) == "COMMITTED"
    with pytest.raises(grpc.RpcError) as err:
        slow.gate.GetResult(
            pb.GetResultRequest(session_id=slow.session_of(r.invocation_id), invocation_id=r.invocation_id)
        )
    assert error_reason(err.value) == "output_after_cancel"


def test_a_result_for_a_call_cancelled_before_the_boundary_is_refused(slow: Running) -> None:
    sid = _files(slow)
    r = slow.propose(sid, "files.delete@v1", {"path": "/tmp/y"})
    slow.gate.Cancel(
        pb.CancelRequest(session_id=slow.session_of(r.invocation_id), invocation_id=r.invocation_id)
    )
    with pytest.raises(grpc.RpcError) as err:  # nothing ran: there is nothing to record
        slow.executor.EncodeResult(
            pb.EncodeResultRequest(invocation_id=r.invocation_id, status="error", value=b"{}")
        )
    assert error_reason(err.value) == "output_after_cancel"
    with pytest.raises(grpc.RpcError) as err:
        slow.gate.GetResult(
            pb.GetResultRequest(session_id=slow.session_of(r.invocation_id), invocation_id=r.invocation_id)
        )
    assert error_reason(err.value) == "output_after_cancel"


def test_explain_text_names_a_deadline_expiry(fast: Running) -> None:
    _, resp = prepared_event(fast, key="k-dl-explain")
    fast.clock.advance(CALENDAR_TIMEOUT_S + 1)
    wait_for(lambda: state(fast, resp.invocation_id) == "CANCELLED_BEFORE_COMMIT", timeout=5)
    x = fast.call(explain(fast.sidecar.components.store, resp.invocation_id))
    assert any("deadline" in n and "passed before it executed" in n for n in x.notes)
    assert "deadline_expired" in render_text(x)


# ----------------------------------------------------------------------------- the store query
def test_store_lists_open_invocations_past_their_deadline(tmp_path: Path) -> None:
    """``list_past_deadline``: AUTHORIZED/PREPARED only, exact to the microsecond (deadlines with
    and without a fraction in the same second), earliest first, bounded by ``limit``."""
    from callgate.store.sqlite import SQLiteStore
    from tests.test_sqlite_store import INVOCATION

    def rec(iid: str, st: State, deadline: str) -> InvocationRecord:
        return replace(INVOCATION, invocation_id=iid, state=st, deadline=deadline)

    rows = [
        rec("a", State.PREPARED, "2026-07-19T06:10:00Z"),
        rec("b", State.AUTHORIZED, "2026-07-19T06:10:00.400000Z"),
        rec("c", State.PREPARED, "2026-07-19T06:10:00.600000Z"),  # after "now"
        rec("d", State.EXECUTING, "2026-07-19T06:00:00Z"),  # executing: the deadline ends nothing
        rec("e", State.CANCELLED_BEFORE_COMMIT, "2026-07-19T06:00:00Z"),
        rec("f", State.PREPARED, ""),  # no deadline
        rec("g", State.PREPARED, "2026-07-19T06:09:59.999999Z"),
    ]
    now = datetime.fromisoformat("2026-07-19T06:10:00.500000+00:00")

    async def go() -> tuple[list[str], list[str]]:
        store = SQLiteStore(tmp_path / "s.db")
        try:
            for r in rows:
                await store.create_invocation(r, [])
            every = [i.invocation_id for i in await store.list_past_deadline(now, 100)]
            first = [i.invocation_id for i in await store.list_past_deadline(now, 1)]
            return every, first
        finally:
            await store.close()

    every, first = asyncio.run(go())
    assert sorted(every) == ["a", "b", "g"] and every[0] == "g"
    assert first == ["g"]
