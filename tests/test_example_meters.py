"""The example folder's meter and label (issue 30 item 6) through a real sidecar (SQLite, gRPC).

policies/ declares one meter and one label: ``files.delete@v1`` counts ``deletes`` per subject
over 1 h and the policy forbids the 101st of an hour (``files-delete-rate``); ``weather.get@v1``
labels its results ``untrusted`` and, once a session has taken one in, an admin's delete needs
confirmation (``files-delete-after-untrusted``); a new session deletes without it. The same
requests, stated as usage and labels, are policy tests in policies/tests/ and
policies/rego/policies_test.rego.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running
from tests.test_meters import read_then_egress

RATE = 100


def authorization(server: Running, sid: str, invocation_id: str) -> dict[str, Any]:
    """``data`` of the invocation's deciding event (``authorized`` / ``authorization_rejected``)."""
    got = server.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=invocation_id, session_id=sid))
    (event,) = [e for e in got.events if e.kind in ("authorized", "authorization_rejected")]
    return dict(json_format.MessageToDict(event.data))


def test_the_101st_delete_of_the_hour_is_forbidden_and_released(server: Running) -> None:
    """100 deletes in the (fixed-clock) hour, over four sessions, are allowed; the 101st is
    denied by the rate (the meter counts per subject, across sessions) and releases its
    reservation: the next one sees 100 before it again. Another subject is not counted with
    carol."""
    for i in range(RATE):
        if i % 25 == 0:  # a session's tool-call budget is 100: the count is the subject's anyway
            sid = server.open_session(subject="carol")
            server.list_tools(sid)
        r = server.propose(sid, "files.delete@v1", {"path": f"/tmp/f{i}"}, proposal_id=f"p{i}")
        assert r.decision.effect == pb.ALLOW, (i, r.decision)
    for n in range(2):
        over = server.propose(sid, "files.delete@v1", {"path": "/tmp/over"}, proposal_id=f"over{n}")
        assert over.decision.effect == pb.DENY
        assert list(over.decision.policy_ids) == ["files-delete-rate"]
        seen = authorization(server, sid, over.invocation_id)
        assert seen["usage"] == {"deletes": {"1h": {"before": RATE, "after": RATE + 1}}}
    bob = server.open_session(subject="bob")  # no admin: denied by no permit, not by the rate
    server.list_tools(bob)
    other = server.propose(bob, "files.delete@v1", {"path": "/tmp/x"})
    assert other.decision.effect == pb.DENY and list(other.decision.policy_ids) == []
    assert authorization(server, bob, other.invocation_id)["usage"]["deletes"]["1h"]["before"] == 0


def test_a_delete_after_an_untrusted_read_asks_for_confirmation(server: Running) -> None:
    """Read the weather (results labelled ``untrusted``) and commit it; a delete in that session
    needs the user's confirmation; in a new session it does not. The label is recorded in the
    deciding event and shown by ``callgate explain``."""
    from callgate.cli.explain import explain, render_text

    after = read_then_egress(
        server,
        "carol",
        ("weather__get", '{"city": "Paris", "date": "2026-07-20"}'),
        ("files__delete", '{"path": "/tmp/b"}'),
    )
    x = server.call(explain(server.sidecar.components.store, after))
    assert x is not None and x.authorization is not None
    assert x.authorization.session_labels == ("untrusted",)
    assert x.authorization.policy_ids == ("files-delete-after-untrusted",)
    text = render_text(x)
    assert "session labels: untrusted" in text and "meter deletes: 1h 1 -> 2" in text
