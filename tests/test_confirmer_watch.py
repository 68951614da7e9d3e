"""The confirmer listener's calls for the console (issue 13): WatchPending (live list), the
tenant-scoped GetTenantInvocation (the trail) and Confirm/Deny limited to a tenant."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running
from tests.test_confirmation import EVENT, error_reason, park


def test_pending_carries_raw_arguments_and_created_at(server: Running) -> None:
    parked = park(server, EVENT)
    (item,) = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    assert item.invocation_id == parked.invocation_id
    assert json.loads(item.raw_arguments) == EVENT
    assert item.created_at and item.reasons


def test_watch_pending_streams_the_list_after_each_change(server: Running) -> None:
    stream = server.confirmations.WatchPending(pb.WatchPendingRequest(tenant="acme"), timeout=20)
    first = next(stream)
    assert list(first.pending) == []
    got: list[list[str]] = []

    def read() -> None:
        for msg in stream:
            got.append([p.invocation_id for p in msg.pending])
            if len(got) == 2:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)
    parked = park(server, EVENT)
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got and got[0] == [parked.invocation_id]
    server.confirmations.Deny(
        pb.DenyRequest(invocation_id=parked.invocation_id, digest=parked.digest, denied_by="bob")
    )
    reader.join(10)
    assert got[1] == []
    stream.cancel()
    deadline = time.monotonic() + 5
    while server.sidecar.components.watch.pending_watchers() and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert server.sidecar.components.watch.pending_watchers() == 0  # type: ignore[union-attr]


def test_watch_pending_needs_a_tenant(server: Running) -> None:
    with pytest.raises(grpc.RpcError) as err:
        next(server.confirmations.WatchPending(pb.WatchPendingRequest(), timeout=5))
    assert error_reason(err.value) == "invalid_request"


def test_another_tenant_cannot_confirm_deny_or_read(server: Running) -> None:
    parked = park(server, EVENT)
    for call in (
        lambda: server.confirmations.Confirm(
            pb.ConfirmRequest(
                invocation_id=parked.invocation_id, digest=parked.digest, confirmed_by="eve", tenant="globex"
            )
        ),
        lambda: server.confirmations.Deny(
            pb.DenyRequest(
                invocation_id=parked.invocation_id, digest=parked.digest, denied_by="eve", tenant="globex"
            )
        ),
        lambda: server.confirmations.GetTenantInvocation(
            pb.GetTenantInvocationRequest(invocation_id=parked.invocation_id, tenant="globex")
        ),
    ):
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert error_reason(err.value) == "invocation_not_found"
    got = server.confirmations.Confirm(
        pb.ConfirmRequest(
            invocation_id=parked.invocation_id,
            digest=parked.digest,
            confirmed_by="carol",
            tenant="acme",
            note="checked with the team",
        )
    )
    assert got.state == pb.PREPARED
    trail = server.confirmations.GetTenantInvocation(
        pb.GetTenantInvocationRequest(invocation_id=parked.invocation_id, tenant="acme")
    )
    kinds = [e.kind for e in trail.events]
    assert kinds[0] == "proposed" and kinds[-1] == "confirmed"
    assert trail.events[-1].data["confirmed_by"] == "carol"
    assert trail.events[-1].data["note"] == "checked with the team"
