"""Scoping through the gRPC API (issue 9): ListPending needs a tenant and pages; the agent's
GetInvocation, GetResult and Cancel answer only for the caller's own session, and another
session's invocation is indistinguishable from an unknown one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import grpc
import pytest
from grpc_status import rpc_status

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.propose.confirmation import PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX
from tests.conftest import POLICIES, Running, short_tmpdir, start_sidecar, stop_sidecar
from tests.test_confirmation import EVENT, error_reason


@pytest.fixture
def server() -> Iterator[Running]:
    """A sidecar whose example policies also know a scheduler of a second tenant (globex/dave)."""
    root = short_tmpdir()
    policies = root / "policies"
    shutil.copytree(POLICIES, policies)
    entities = policies / "cedar" / "entities.json"
    doc = json.loads(entities.read_text(encoding="utf-8"))
    doc.append(
        {
            "uid": {"type": "User", "id": "dave"},
            "attrs": {"tenant": "globex"},
            "parents": [{"type": "Role", "id": "scheduler"}],
        }
    )
    entities.write_text(json.dumps(doc), encoding="utf-8")
    running, tmp = start_sidecar(policies)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)
        shutil.rmtree(root, ignore_errors=True)


def park(server: Running, tenant: str, n: int, subject: str = "alice") -> tuple[str, list[str]]:
    """``n`` parked calendar events of one session of ``tenant``; (session id, invocation ids)."""
    sid = server.open_session(tenant=tenant, subject=subject)
    server.list_tools(sid)
    ids = []
    for i in range(n):
        resp = server.propose(
            sid, "calendar.create_event@v1", EVENT, proposal_id=f"p{i}", idempotency_key=f"{sid}-k{i}"
        )
        assert resp.decision.effect == pb.CONFIRM, resp
        ids.append(resp.invocation_id)
    return sid, sorted(ids)  # the fixed test clock gives them one created_at: then by id


def list_all(server: Running, tenant: str, page_size: int) -> tuple[list[str], int]:
    """Every pending id of ``tenant`` page by page; (ids, number of pages)."""
    ids: list[str] = []
    token, pages = "", 0
    while True:
        page = server.confirmations.ListPending(
            pb.ListPendingRequest(tenant=tenant, page_size=page_size, page_token=token)
        )
        assert len(page.pending) <= min(page_size or PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX)
        ids += [p.invocation_id for p in page.pending]
        pages += 1
        token = page.next_page_token
        if not token:
            return ids, pages
        assert pages < 100  # bounded


def refused(call: object, request: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(request)  # type: ignore[operator]
    return err.value


def test_list_pending_needs_a_tenant(server: Running) -> None:
    park(server, "acme", 1)
    err = refused(server.confirmations.ListPending, pb.ListPendingRequest())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and error_reason(err) == "invalid_request"


def test_list_pending_pages_one_tenant_without_gaps_or_duplicates(server: Running) -> None:
    _, acme = park(server, "acme", 7)
    _, other = park(server, "globex", 2, subject="dave")
    got, pages = list_all(server, "acme", 3)
    assert got == acme and pages == 3  # oldest first: 3 + 3 + 1, then no token
    assert not set(got) & set(other)
    assert list_all(server, "globex", 3) == (other, 1)
    assert list_all(server, "acme", 0) == (acme, 1)  # 0: the default page size
    assert list_all(server, "acme", 10_000) == (acme, 1)  # above the maximum: the maximum
    assert PAGE_SIZE_DEFAULT == 50 and PAGE_SIZE_MAX == 500
    # The last full page has a token only if more follow.
    exact = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme", page_size=7))
    assert len(exact.pending) == 7 and exact.next_page_token == ""


def test_page_token_is_stable_when_earlier_items_change(server: Running) -> None:
    sid, ids = park(server, "acme", 5)
    first = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme", page_size=2))
    assert [p.invocation_id for p in first.pending] == ids[:2]
    # The confirmer handles the first page before asking for the next one.
    for p in first.pending:
        server.confirmations.Confirm(pb.ConfirmRequest(invocation_id=p.invocation_id, digest=p.digest))
    second = server.confirmations.ListPending(
        pb.ListPendingRequest(tenant="acme", page_size=2, page_token=first.next_page_token)
    )
    assert [p.invocation_id for p in second.pending] == ids[2:4]  # no item skipped, none repeated
    again = server.confirmations.ListPending(
        pb.ListPendingRequest(tenant="acme", page_size=2, page_token=first.next_page_token)
    )
    assert again == second  # the same token gives the same page


def test_bad_page_requests_are_invalid(server: Running) -> None:
    park(server, "acme", 3)
    park(server, "globex", 1, subject="dave")
    token = server.confirmations.ListPending(
        pb.ListPendingRequest(tenant="acme", page_size=1)
    ).next_page_token
    assert token
    for req in (
        pb.ListPendingRequest(tenant="globex", page_token=token),  # another tenant's token
        pb.ListPendingRequest(tenant="acme", page_token="not-a-token"),
        pb.ListPendingRequest(tenant="acme", page_token=token[:-3]),
        pb.ListPendingRequest(tenant="acme", page_size=-1),
    ):
        err = refused(server.confirmations.ListPending, req)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and error_reason(err) == "invalid_request"


def test_expired_confirmations_are_skipped_and_the_page_is_filled(server: Running) -> None:
    _, old = park(server, "acme", 3)
    server.clock.advance(server.config.confirmation.ttl_seconds - 1)
    _, new = park(server, "acme", 3)
    server.clock.advance(2)  # the first three are past their window, not yet swept
    page = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme", page_size=2))
    assert [p.invocation_id for p in page.pending] == new[:2] and page.next_page_token
    assert list_all(server, "acme", 2)[0] == new
    assert not set(old) & set(list_all(server, "acme", 1)[0])


def _not_found(err: grpc.RpcError) -> tuple[grpc.StatusCode, str, str]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    return err.code(), error_reason(err), status.message


def test_agent_rpcs_answer_only_for_the_callers_session(server: Running) -> None:
    sid, [inv] = park(server, "acme", 1)
    intruder = server.open_session(tenant="acme", subject="mallory")
    unknown = _not_found(
        refused(server.gate.GetInvocation, pb.GetInvocationRequest(invocation_id="inv_nope", session_id=sid))
    )
    assert unknown[:2] == (grpc.StatusCode.NOT_FOUND, "invocation_not_found")
    for session in (intruder, "", "ses_nope"):  # another session, none, an unknown one
        calls = [
            (server.gate.GetInvocation, pb.GetInvocationRequest(invocation_id=inv, session_id=session)),
            (server.gate.GetResult, pb.GetResultRequest(invocation_id=inv, session_id=session)),
            (server.gate.Cancel, pb.CancelRequest(invocation_id=inv, reason="x", session_id=session)),
        ]
        for call, req in calls:
            assert _not_found(refused(call, req)) == unknown, (session, req)
    # Nothing happened to the invocation, and its own session still reaches it.
    got = server.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=inv, session_id=sid))
    assert pb.State.Name(got.invocation.state) == "AUTHORIZED"
    assert not [e for e in got.events if "cancel" in e.kind]
    own = refused(server.gate.GetResult, pb.GetResultRequest(invocation_id=inv, session_id=sid))
    assert error_reason(own) == "result_not_available"  # the owner learns the real answer
    out = server.gate.Cancel(pb.CancelRequest(invocation_id=inv, reason="user left", session_id=sid))
    assert pb.State.Name(out.state) == "CANCELLED_BEFORE_COMMIT"


def test_get_result_of_an_observed_invocation_is_scoped(server: Running) -> None:
    sid = server.open_session(tenant="acme", subject="bob")
    server.list_tools(sid)
    resp = server.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})
    att = server.executor.BeginAttempt(
        pb.BeginAttemptRequest(invocation_id=resp.invocation_id, executor_id="w")
    )
    server.executor.ReportOutcome(
        pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED)
    )
    enc = server.executor.EncodeResult(
        pb.EncodeResultRequest(
            invocation_id=resp.invocation_id, status="ok", value=json.dumps({"t": 21}).encode()
        )
    )
    mine = server.gate.GetResult(pb.GetResultRequest(invocation_id=resp.invocation_id, session_id=sid))
    assert mine.message == enc.message
    other = server.open_session(tenant="acme", subject="bob")  # same subject, another session
    err = refused(
        server.gate.GetResult, pb.GetResultRequest(invocation_id=resp.invocation_id, session_id=other)
    )
    assert error_reason(err) == "invocation_not_found"
