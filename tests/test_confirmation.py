"""Confirmation bound to the invocation digest (spec 6.6, 6.11, 6.14 row 5), cancel, listeners."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import Running

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}


def error_reason(err: grpc.RpcError) -> str:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, "callgate errors carry a google.rpc.Status"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            assert info.domain == "callgate.dev"
            return str(info.reason)
    raise AssertionError("no ErrorInfo detail")


@dataclass(frozen=True)
class Parked:
    """A parked invocation and the agent session that proposed it."""

    sid: str
    invocation_id: str
    digest: str


def park(server: Running, args: dict[str, Any], proposal_id: str = "p1") -> Parked:
    sid = server.open_session(subject="alice")
    server.list_tools(sid)
    resp = server.propose(
        sid, "calendar.create_event@v1", args, proposal_id=proposal_id, idempotency_key=f"key-{proposal_id}"
    )
    assert resp.decision.effect == pb.CONFIRM, resp
    return Parked(sid, resp.invocation_id, resp.digest)


def inv_state(server: Running, parked: Parked) -> str:
    got = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=parked.sid)
    )
    return pb.State.Name(got.invocation.state)


def test_replaced_arguments_need_a_new_confirmation(server: Running) -> None:
    shown = park(server, EVENT, "p1")
    replaced = park(server, {**EVENT, "start": "2026-07-20T21:00:00+08:00"}, "p2")
    assert shown.digest != replaced.digest
    # The UI confirmed what it showed (digest of `shown`), but someone tries to run `replaced`
    # under it: presenting another digest is rejected and cancels the parked invocation.
    with pytest.raises(grpc.RpcError) as err:
        server.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=shown.invocation_id, digest=replaced.digest)
        )
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert error_reason(err.value) == "confirmation_digest_mismatch"
    assert inv_state(server, shown) == "CANCELLED_BEFORE_COMMIT"
    # The changed arguments are their own proposal, confirmed on their own digest.
    ok = server.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=replaced.invocation_id, digest=replaced.digest)
    )
    assert pb.State.Name(ok.state) == "PREPARED"


def test_confirmation_expires(server: Running) -> None:
    parked = park(server, EVENT)
    server.clock.advance(server.config.confirmation.ttl_seconds + 1)
    assert parked.invocation_id not in [
        p.invocation_id
        for p in server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    ]
    with pytest.raises(grpc.RpcError) as err:
        server.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest)
        )
    assert error_reason(err.value) == "confirmation_expired"
    assert inv_state(server, parked) == "CANCELLED_BEFORE_COMMIT"


def test_confirm_only_once_under_race(server: Running) -> None:
    parked = park(server, EVENT)
    req = pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest)

    def attempt(_: int) -> str:
        try:
            return pb.State.Name(server.confirmations.Confirm(req).state)
        except grpc.RpcError as err:
            return error_reason(err)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    assert outcomes.count("PREPARED") == 1
    assert set(outcomes) == {"PREPARED", "confirmation_not_pending"}
    got = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=parked.sid)
    )
    assert [e.kind for e in got.events].count("confirmed") == 1


def test_cancel_before_commit_and_terminal_states(server: Running) -> None:
    parked = park(server, EVENT)
    resp = server.gate.Cancel(
        pb.CancelRequest(
            invocation_id=parked.invocation_id, reason="user closed the chat", session_id=parked.sid
        )
    )
    assert pb.State.Name(resp.state) == "CANCELLED_BEFORE_COMMIT"
    with pytest.raises(grpc.RpcError) as err:
        server.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest)
        )
    assert error_reason(err.value) == "confirmation_not_pending"
    # Cancel is idempotent (6.7): a second cancel answers the state and records nothing.
    before = len(
        server.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=parked.sid)
        ).events
    )
    again = server.gate.Cancel(pb.CancelRequest(invocation_id=parked.invocation_id, session_id=parked.sid))
    assert pb.State.Name(again.state) == "CANCELLED_BEFORE_COMMIT"
    after = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=parked.sid)
    ).events
    assert len(after) == before


def test_confirmer_rpcs_are_not_on_the_agent_listener(server: Running) -> None:
    parked = park(server, EVENT)
    sneaky = pb_grpc.ConfirmationsStub(server.channels["agent"])
    with pytest.raises(grpc.RpcError) as err:
        sneaky.Confirm(pb.ConfirmRequest(invocation_id=parked.invocation_id, digest=parked.digest))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.AuthorizerStub(server.channels["agent"]).Authorize(pb.AuthorizeRequest())
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.GateStub(server.channels["confirmer"]).OpenSession(pb.OpenSessionRequest())
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert inv_state(server, parked) == "AUTHORIZED"


def test_unknown_session_and_invocation_are_errors(server: Running) -> None:
    with pytest.raises(grpc.RpcError) as err:
        server.propose("ses_nope", "weather.get@v1", {"city": "x", "date": "today"})
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and error_reason(err.value) == "session_not_found"
    with pytest.raises(grpc.RpcError) as err:
        server.gate.GetInvocation(pb.GetInvocationRequest(invocation_id="inv_nope"))
    assert error_reason(err.value) == "invocation_not_found"
    with pytest.raises(grpc.RpcError) as err:
        server.gate.OpenSession(
            pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="a"), timezone="Mars/Base")
        )
    assert error_reason(err.value) == "invalid_request"
