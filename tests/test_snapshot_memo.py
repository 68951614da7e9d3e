"""Per-request values live with the snapshot they belong to (issue 29 item 4): no process-wide
cache keyed by ``id()``. The wire message of a decision is built once per distinct decision of a
snapshot's calls (:meth:`callgate.policy.snapshot.SnapshotMemo.decision_form`) and dropped with
the snapshot."""

from __future__ import annotations

import pytest

from callgate.base.model import Decision, Effect, Reason
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy import snapshot as snapshot_module
from callgate.policy.snapshot import SnapshotMemo
from callgate.server.services import decision_pb


def test_a_decision_s_message_is_built_once_per_snapshot_and_distinct_decision() -> None:
    built: list[Decision] = []

    def build(d: Decision) -> pb.Decision:
        built.append(d)
        return decision_pb(d)

    allow = Decision(Effect.ALLOW, (Reason("", "p1", ""),), "cedar")
    memo = SnapshotMemo()
    first = memo.decision_form(allow, build)
    assert memo.decision_form(allow, build) is first
    # an equal decision (another object: the Python engines build one per call) shares it
    assert memo.decision_form(Decision(Effect.ALLOW, (Reason("", "p1", ""),), "cedar"), build) is first
    deny = Decision(Effect.DENY, (Reason("x", "p2", "no"),), "cedar", error_code="x")
    assert memo.decision_form(deny, build).effect == pb.DENY
    assert built == [allow, deny]
    assert first == decision_pb(allow)
    # another builder is another form; another snapshot has its own memo
    assert memo.decision_form(allow, decision_pb) is not first
    assert SnapshotMemo().decision_form(allow, build) is not first
    assert len(built) == 3


def test_the_forms_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_module, "SHARED_DECISIONS_MAX", 2)
    memo = SnapshotMemo()
    decisions = [Decision(Effect.DENY, (Reason("c", f"p{i}", ""),), "cedar") for i in range(3)]
    forms = [memo.decision_form(d, decision_pb) for d in decisions]
    assert memo.decision_form(decisions[2], decision_pb) is forms[2]
    assert memo.decision_form(decisions[0], decision_pb) is not forms[0]  # forgotten at the bound
