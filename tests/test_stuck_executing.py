"""Issue 34, "nothing stuck": an EXECUTING invocation past its deadline ends (spec 6.2, 6.7, 6.9),
through the gRPC API of a real sidecar with a FixedClock (callgate/execute/expiry.py).

Before: after BeginAttempt and ReportOutcome FAILED_BEFORE_COMMIT/NOT_REACHED with a retry advised,
past the deadline the state stayed EXECUTING for ever: BeginAttempt answered DEADLINE_EXCEEDED,
Reconcile ``reconcile_not_allowed``, a same-key Propose replayed "EXECUTING" and the key stayed
claimed for its whole retention, though nothing ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from callgate.config import ConfirmationConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_deadlines_cancel import CALENDAR_TIMEOUT_S, invocation, kinds, restarted_later, state
from tests.test_execution import prepared_event, propose_event
from tests.test_lifecycle import wait_for
from tests.test_reconcile import reconcile

FAST = ConfirmationConfig(sweep_interval_ms=50)


@pytest.fixture
def fast() -> Iterator[Running]:
    running, tmp = start_sidecar(confirmation=FAST)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def _begin(sc: Running, invocation_id: str, executor: str = "calendar-executor") -> pb.BeginAttemptResponse:
    return sc.executor.BeginAttempt(pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor))


def _failed_with_retry_advised(sc: Running, key: str) -> tuple[str, str]:
    """A calendar write (3 attempts allowed) whose first attempt was not reached: EXECUTING, a
    retry advised, no attempt open. Returns (session id, invocation id)."""
    sid, resp = prepared_event(sc, key=key)
    att = _begin(sc, resp.invocation_id)
    out = sc.executor.ReportOutcome(
        pb.ReportOutcomeRequest(
            attempt_id=att.attempt_id, outcome=pb.OUTCOME_FAILED_BEFORE_COMMIT, failure_class=pb.NOT_REACHED
        )
    )
    assert out.retry.retry
    assert state(sc, resp.invocation_id) == "EXECUTING"
    return sid, resp.invocation_id


def test_executing_with_every_attempt_failed_before_commit_ends_at_its_deadline(fast: Running) -> None:
    sid, iid = _failed_with_retry_advised(fast, "k-stuck-failed")
    deadline = invocation(fast, iid).invocation.deadline
    fast.clock.advance(CALENDAR_TIMEOUT_S + 1)
    wait_for(lambda: state(fast, iid) == "FAILED_BEFORE_COMMIT", timeout=5)
    last = invocation(fast, iid).events[-1]
    assert last.kind == "failed_before_commit"
    assert pb.State.Name(last.from_state) == "EXECUTING"
    assert last.data["reason"] == "deadline_expired" and last.data["deadline"] == deadline
    assert last.data["attempts"] == 1 and last.data["open_attempt"] == ""
    sweeper = fast.sidecar.sweeper
    assert sweeper is not None and sweeper.last is not None
    wait_for(lambda: sweeper.total_deadlines == 1, timeout=5)
    fast.list_tools(sid)
    again = propose_event(fast, sid, "k-stuck-failed")  # nothing ran: the key is free, a new call
    assert not again.idempotent_replay and again.invocation_id != iid


def test_an_attempt_that_never_reported_ends_outcome_unknown_and_can_be_reconciled(fast: Running) -> None:
    _, resp = prepared_event(fast, key="k-stuck-open")
    att = _begin(fast, resp.invocation_id)
    fast.clock.advance(CALENDAR_TIMEOUT_S + 1)
    wait_for(lambda: state(fast, resp.invocation_id) == "OUTCOME_UNKNOWN", timeout=5)
    last = invocation(fast, resp.invocation_id).events[-1]
    assert last.kind == "outcome_unknown" and last.data["open_attempt"] == att.attempt_id
    assert last.data["reason"] == "deadline_expired"
    # A status query of the calendar found the event: Reconcile now takes it (6.7).
    rec = reconcile(fast, resp.invocation_id, pb.RECONCILE_COMMITTED, external_resource_id="evt_9")
    assert pb.State.Name(rec.state) == "COMMITTED"


def test_a_late_report_of_the_open_attempt_resolves_the_unknown_outcome(fast: Running) -> None:
    _, resp = prepared_event(fast, key="k-stuck-late")
    att = _begin(fast, resp.invocation_id)
    fast.clock.advance(CALENDAR_TIMEOUT_S + 1)
    wait_for(lambda: state(fast, resp.invocation_id) == "OUTCOME_UNKNOWN", timeout=5)
    fast.executor.ReportOutcome(
        pb.ReportOutcomeRequest(
            attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id="evt_late"
        )
    )
    assert state(fast, resp.invocation_id) == "COMMITTED"


def test_a_read_whose_attempt_never_reported_fails_before_commit(fast: Running) -> None:
    sid = fast.open_session(subject="bob")
    fast.list_tools(sid)
    resp = fast.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})
    _begin(fast, resp.invocation_id, executor="weather")
    deadline = datetime.fromisoformat(invocation(fast, resp.invocation_id).invocation.deadline)
    fast.clock.advance(int((deadline - fast.clock.now()).total_seconds()) + 1)
    wait_for(lambda: state(fast, resp.invocation_id) == "FAILED_BEFORE_COMMIT", timeout=5)
    assert kinds(fast, resp.invocation_id)[-1] == "failed_before_commit"


def test_before_its_deadline_a_retry_advised_invocation_is_left_alone(fast: Running) -> None:
    _, iid = _failed_with_retry_advised(fast, "k-stuck-early")
    sweeper = fast.sidecar.sweeper
    assert sweeper is not None
    before = sweeper.last
    wait_for(lambda: sweeper.last is not before, timeout=5)  # at least one more sweep ran
    assert state(fast, iid) == "EXECUTING"
    fast.clock.advance(3)  # past the advised backoff (<= 2 s), inside the 10 s deadline
    retry = _begin(fast, iid)  # the retry the sweep must not take away
    assert retry.attempt_id and state(fast, iid) == "EXECUTING"


def test_executing_past_its_deadline_while_down_ends_at_startup() -> None:
    with restarted_later(
        lambda sc: _failed_with_retry_advised(sc, "k-stuck-startup"), CALENDAR_TIMEOUT_S + 5
    ) as (
        second,
        (_, iid),
    ):
        wait_for(lambda: state(second, iid) == "FAILED_BEFORE_COMMIT", timeout=5)
        assert invocation(second, iid).events[-1].data["reason"] == "deadline_expired"
