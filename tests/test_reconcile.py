"""Reconciling an unknown outcome (spec 6.7, 6.12: an unknown outcome is marked, then queried),
through the Executor service of a real sidecar (grpc.aio server on Unix sockets).

The executor loses the answer of a committed write (OUTCOME_UNKNOWN), the runtime cancels, and a
status query of the external calendar then says what happened: ``Reconcile`` records it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest

from callgate.config import SecretConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_confirmation import error_reason
from tests.test_execution import CANARY, FakeCalendar, prepared_event, propose_event, run_attempt, state_of

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture(name="sc")
def _sidecar() -> Iterator[Running]:
    os.environ["CALLGATE_TEST_CALENDAR_TOKEN"] = CANARY
    running, tmp = start_sidecar(
        secrets=(
            SecretConfig(
                name="calendar_api_token",
                env="CALLGATE_TEST_CALENDAR_TOKEN",
                tools=("calendar.create_event",),
                resources=("calendar:*",),
            ),
        )
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def unknown_after_cancel(sc: Running, key: str) -> tuple[str, str, FakeCalendar]:
    """A committed write whose answer was lost, then cancelled by the runtime."""
    cal = FakeCalendar()
    sid, resp = prepared_event(sc, key=key)
    att, out = run_attempt(sc, cal, resp.invocation_id, lose_answer=True)
    assert pb.State.Name(out.state) == "OUTCOME_UNKNOWN"
    cancel = sc.gate.Cancel(
        pb.CancelRequest(
            session_id=sc.session_of(resp.invocation_id), invocation_id=resp.invocation_id, reason="user left"
        )
    )
    assert pb.State.Name(cancel.state) == "OUTCOME_UNKNOWN"  # after the boundary: nothing undone
    # Today's way out is closed: the attempt already reported, and no new attempt may start.
    with pytest.raises(grpc.RpcError) as err:
        sc.executor.ReportOutcome(
            pb.ReportOutcomeRequest(
                attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id="evt_1"
            )
        )
    assert error_reason(err.value) == "attempt_not_allowed"
    return sid, resp.invocation_id, cal


def reconcile(sc: Running, invocation_id: str, finding: int, **kw: str) -> pb.ReconcileResponse:
    return sc.executor.Reconcile(  # type: ignore[no-any-return]
        pb.ReconcileRequest(invocation_id=invocation_id, finding=finding, **kw),
        metadata=(("traceparent", TRACEPARENT),),
    )


def reconcile_error(sc: Running, invocation_id: str, finding: int, **kw: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        reconcile(sc, invocation_id, finding, **kw)
    return error_reason(err.value)


def test_committed_finding_after_cancel_completes_the_key(sc: Running) -> None:
    sid, inv, cal = unknown_after_cancel(sc, "k-rec-1")
    before = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))

    out = reconcile(
        sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_1",
        commit_time="2026-07-19T06:00:01Z", message="GET /events?key=k-rec-1 -> 200", executor_id="calendar-executor",
    )  # fmt: skip
    assert pb.State.Name(out.state) == "COMMITTED" and not out.already_recorded

    got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))
    assert got.invocation.external_resource_id == "evt_1"
    assert got.invocation.commit_time == "2026-07-19T06:00:01Z"
    assert got.invocation.attempts == before.invocation.attempts  # no attempt, no credential
    assert got.invocation.cancel_requested_at  # the cancel stays recorded
    new_events = got.events[len(before.events) :]
    assert [e.kind for e in new_events] == ["reconciled"]
    (ev,) = new_events
    assert ev.trace_id == TRACE_ID
    assert (pb.State.Name(ev.from_state), pb.State.Name(ev.to_state)) == ("OUTCOME_UNKNOWN", "COMMITTED")
    assert ev.data["finding"] == "committed" and ev.data["external_resource_id"] == "evt_1"
    assert ev.data["after_cancel"] is True and ev.data["closed_attempt_id"] == ""
    assert ev.data["message"] == "GET /events?key=k-rec-1 -> 200"
    assert "attempt_started" not in [e.kind for e in new_events]

    # The key is completed: the same call again replays the committed invocation, no new event.
    again = propose_event(sc, sid, "k-rec-1")
    assert again.idempotent_replay and again.invocation_id == inv
    assert pb.State.Name(again.state) == "COMMITTED"
    assert len(cal.events) == 1

    # The same finding again is an idempotent answer; nothing is written.
    n = len(
        sc.gate.GetInvocation(
            pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv)
        ).events
    )
    rep = reconcile(sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_1")
    assert rep.already_recorded and pb.State.Name(rep.state) == "COMMITTED"
    assert (
        len(
            sc.gate.GetInvocation(
                pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv)
            ).events
        )
        == n
    )

    # Contradictions are refused with a stable code; the first finding stands.
    assert reconcile_error(sc, inv, pb.RECONCILE_NOT_COMMITTED) == "reconcile_conflict"
    assert (
        reconcile_error(sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_2") == "reconcile_conflict"
    )
    assert reconcile_error(sc, inv, pb.RECONCILE_FAILED_AFTER_COMMIT, external_resource_id="evt_1") == (
        "reconcile_conflict"
    )
    assert state_of(sc, sc.session_of(inv), inv) == "COMMITTED"
    # Cancelled: the record says what happened, but no tool message goes to the model (6.7, 6.12):
    # the executor's result is recorded for the trail and withheld.
    encoded = sc.executor.EncodeResult(pb.EncodeResultRequest(invocation_id=inv, status="ok", value=b"{}"))
    assert encoded.withheld and not encoded.message
    with pytest.raises(grpc.RpcError) as err:
        sc.gate.GetResult(pb.GetResultRequest(session_id=sc.session_of(inv), invocation_id=inv))
    assert error_reason(err.value) == "output_after_cancel"


def test_not_committed_finding_releases_the_key(sc: Running) -> None:
    sid, inv, cal = unknown_after_cancel(sc, "k-rec-2")
    cal.events.clear()  # the status query found nothing: the write never landed
    out = reconcile(sc, inv, pb.RECONCILE_NOT_COMMITTED, message="GET /events?key=k-rec-2 -> 404")
    assert pb.State.Name(out.state) == "FAILED_BEFORE_COMMIT"
    got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))
    assert got.events[-1].kind == "reconciled" and got.events[-1].trace_id == TRACE_ID
    assert got.invocation.external_resource_id == "" and got.invocation.commit_time == ""
    # Released: the same key with other arguments is a fresh proposal, not a reuse or a replay.
    fresh = propose_event(sc, sid, "k-rec-2", start="2026-07-20T11:00")
    assert not fresh.idempotent_replay and fresh.invocation_id != inv
    assert fresh.decision.effect == pb.CONFIRM
    assert reconcile(sc, inv, pb.RECONCILE_NOT_COMMITTED).already_recorded
    assert (
        reconcile_error(sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_1") == "reconcile_conflict"
    )


def test_failed_after_commit_finding(sc: Running) -> None:
    _, inv, _ = unknown_after_cancel(sc, "k-rec-3")
    out = reconcile(
        sc,
        inv,
        pb.RECONCILE_FAILED_AFTER_COMMIT,
        external_resource_id="evt_1",
        message="reminder step failed",
    )
    assert pb.State.Name(out.state) == "FAILED_AFTER_COMMIT"
    got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))
    assert got.invocation.external_resource_id == "evt_1" and got.invocation.commit_time
    assert reconcile(sc, inv, pb.RECONCILE_FAILED_AFTER_COMMIT, external_resource_id="evt_1").already_recorded


def test_reconcile_closes_a_running_attempt(sc: Running) -> None:
    """A same-key retry started but its executor vanished: the status query answers instead, and
    the open attempt's credential can redeem nothing more."""
    cal = FakeCalendar()
    _, resp = prepared_event(sc, key="k-rec-4")
    inv = resp.invocation_id
    _, out = run_attempt(sc, cal, inv, lose_answer=True)
    sc.clock.advance(out.retry.backoff_ms / 1000 + 0.001)
    att = sc.executor.BeginAttempt(pb.BeginAttemptRequest(invocation_id=inv, executor_id="calendar-executor"))
    assert pb.State.Name(att.state) == "OUTCOME_UNKNOWN"
    done = reconcile(sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_1")
    assert pb.State.Name(done.state) == "COMMITTED"
    ev = sc.gate.GetInvocation(
        pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv)
    ).events[-1]
    assert ev.kind == "reconciled" and ev.data["closed_attempt_id"] == att.attempt_id
    with pytest.raises(grpc.RpcError) as err:
        sc.executor.RedeemSecret(
            pb.RedeemSecretRequest(credential=att.credential, secret_name="calendar_api_token")
        )
    assert error_reason(err.value) == "credential_invalid"
    with pytest.raises(grpc.RpcError) as err:
        sc.executor.ReportOutcome(
            pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=pb.OUTCOME_FAILED_BEFORE_COMMIT)
        )
    assert error_reason(err.value) == "attempt_not_allowed"
    assert state_of(sc, sc.session_of(inv), inv) == "COMMITTED"


def test_refusals(sc: Running) -> None:
    cal = FakeCalendar()
    _, prepared = prepared_event(sc, key="k-rec-5")
    inv = prepared.invocation_id
    # Only an unknown outcome is reconciled.
    assert reconcile_error(sc, inv, pb.RECONCILE_NOT_COMMITTED) == "reconcile_not_allowed"
    run_attempt(sc, cal, inv)  # reported COMMITTED by the attempt itself
    assert reconcile_error(sc, inv, pb.RECONCILE_COMMITTED, external_resource_id="evt_1") == (
        "reconcile_not_allowed"
    )
    assert reconcile_error(sc, "inv_nope", pb.RECONCILE_NOT_COMMITTED) == "invocation_not_found"
    _, unknown, _ = unknown_after_cancel(sc, "k-rec-6")
    # An unset finding never releases a key; a committed finding names its resource.
    assert reconcile_error(sc, unknown, pb.RECONCILE_FINDING_UNSPECIFIED) == "invalid_request"
    assert reconcile_error(sc, unknown, pb.RECONCILE_COMMITTED) == "invalid_request"
    assert (
        reconcile_error(sc, unknown, pb.RECONCILE_NOT_COMMITTED, external_resource_id="evt_9")
        == "invalid_request"
    )
    # An executor id is bound into credentials and never rewritten: one holding a secret is refused.
    leaky_id = "exec Bearer abcdefghijklmnopqrstuvwxyz"
    assert reconcile_error(sc, unknown, pb.RECONCILE_NOT_COMMITTED, executor_id=leaky_id) == "invalid_request"
    assert state_of(sc, sc.session_of(unknown), unknown) == "OUTCOME_UNKNOWN"
