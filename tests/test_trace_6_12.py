"""The write-call trace of spec 6.12 up to PREPARED, over gRPC, with its events (6.13)."""

from __future__ import annotations

import json

import grpc
import pytest

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.store.sqlite import stored_events
from tests.conftest import Running

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = (("traceparent", f"00-{TRACE_ID}-00f067aa0ba902b7-01"),)
SPEC_ARGS = {
    "calendar_id": "primary",
    "title": "带护照",
    "start": "2026-07-20T09:00:00+08:00",
    "duration_minutes": 10,
}


def state(s: int) -> str:
    return pb.State.Name(s)


def test_calendar_create_event_trace_to_prepared(server: Running) -> None:
    sid = server.open_session(subject="alice", tz="Asia/Shanghai")
    tools = server.list_tools(sid, "mc-17")
    assert "calendar.create_event" in [t.name for t in tools.tools]

    # The model spells the same intent loosely: relative-free local time, default calendar.
    resp = server.propose(
        sid,
        "calendar.create_event@v1",
        '{"title": " 带护照", "start": "2026-07-20T09:00", "duration_minutes": 10}',
        model_call_id="mc-17",
        proposal_id="call_17",
        idempotency_key="req-42:create-event:1",
        metadata=TRACEPARENT,
    )
    assert state(resp.state) == "AUTHORIZED"
    assert resp.decision.effect == pb.CONFIRM
    assert json.loads(resp.normalized_arguments) == SPEC_ARGS
    expected_digest = invocation_digest("acme", "calendar.create_event", "v1", canonicalize(SPEC_ARGS))
    assert resp.digest == expected_digest
    assert resp.schema_dialect == "https://json-schema.org/draft/2020-12/schema"
    assert resp.validator.startswith("python-jsonschema")

    # Pending for the confirmer, showing exactly what will run.
    pending = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme"))
    mine = [p for p in pending.pending if p.invocation_id == resp.invocation_id]
    assert mine and mine[0].digest == resp.digest and json.loads(mine[0].normalized_arguments) == SPEC_ARGS

    confirmed = server.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=resp.invocation_id, digest=resp.digest, confirmed_by="alice@ui"),
        metadata=TRACEPARENT,
    )
    assert state(confirmed.state) == "PREPARED"

    got = server.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=resp.invocation_id, session_id=sid))
    kinds = [(e.kind, state(e.to_state)) for e in got.events]
    assert kinds == [
        ("proposed", "PROPOSED"),
        ("parsed", "PARSED"),
        ("validated", "VALIDATED"),
        ("normalized", "VALIDATED"),
        ("authorized", "AUTHORIZED"),
        ("confirmation_requested", "AUTHORIZED"),
        ("confirmed", "PREPARED"),
    ]
    assert {e.trace_id for e in got.events} == {TRACE_ID}
    assert len({e.event_id for e in got.events}) == len(got.events)
    assert len({e.span_id for e in got.events}) == len(got.events)
    by_kind = {e.kind: e for e in got.events}
    v = by_kind["validated"].data
    assert v["dialect"] == "https://json-schema.org/draft/2020-12/schema" and v["format_assertion"] is True
    n = by_kind["normalized"].data
    assert n["reference_clock"] == "2026-07-19T14:00:00+08:00" and n["timezone"] == "Asia/Shanghai"
    assert json.loads(n["normalized_arguments"]) == SPEC_ARGS
    a = by_kind["authorized"].data
    assert a["subject"]["id"] == "alice" and a["resource"] == "calendar:primary"
    assert list(a["capabilities"]) == ["calendar.create"]
    assert by_kind["confirmed"].data["digest"] == resp.digest
    assert got.invocation.idempotency_key == "req-42:create-event:1"
    assert (
        got.invocation.raw_arguments
        == '{"title": " 带护照", "start": "2026-07-20T09:00", "duration_minutes": 10}'.encode()
    )

    # Terminal and confirmed states do not move backwards; a second confirm is refused.
    with pytest.raises(grpc.RpcError) as err:
        server.confirmations.Confirm(pb.ConfirmRequest(invocation_id=resp.invocation_id, digest=resp.digest))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_events_are_durable_and_append_only(server: Running) -> None:
    import sqlite3

    sid = server.open_session()
    server.list_tools(sid)
    resp = server.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})
    # Durable before the RPC answered: a separate connection sees every event now.
    conn = sqlite3.connect(server.db_path)
    rows = [(e.kind, e.to_state.value) for e in stored_events(conn, resp.invocation_id)]
    assert rows[-1] == ("prepared", "PREPARED")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET kind='x' WHERE invocation_id=?", (resp.invocation_id,))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events WHERE invocation_id=?", (resp.invocation_id,))
    conn.close()
