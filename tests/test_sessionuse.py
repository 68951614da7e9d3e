"""Labels cost only where read (issue 30): ``context.session`` is built for a tool only when a
policy that could decide one of its actions reads it (callgate/policy/sessionuse.py).

The example folder (policies/) labels ``weather.get``'s results ``untrusted``; only the delete
policies read the label. A weather read is then decided by the compiled core in one call (a
decision on a projected context, counted by the core) with no session in its context, while a
delete in the same session still sees the label and asks for confirmation. Real Cedar (cedarpy's
JSON form of real policies), a real sidecar."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.sessionuse import conditions_read
from callgate.policy.snapshot import load_snapshot
from tests.conftest import POLICIES, ROOT, Running
from tests.test_example_meters import authorization
from tests.test_meters import read_then_egress


def _conditions(text: str) -> Any:
    est = json.loads(cedarpy.policies_to_json_str(text))
    (body,) = est["staticPolicies"].values()
    return body["conditions"]


@pytest.mark.parametrize(
    ("condition", "reads"),
    [
        ('context.session.labels.contains("x")', True),
        ("context has session", True),
        ('context has session && context.session.labels.contains("x")', True),
        ('context == {tenant: "a"}', True),  # the whole context: the session's presence counts
        ('context["session"].labels.isEmpty()', True),
        ('[context].contains({tenant: "a"})', True),
        ('context.tenant == "session"', False),  # a string literal is no read
        ('context has usage && context.usage.deletes["1h"].after > 100', False),
        ('context.args.session == "x"', False),  # an argument named session is not the session
        ('principal.tenant == context.tenant && resource.kind == "file"', False),
    ],
)
def test_conditions_read_the_session(condition: str, reads: bool) -> None:
    policy = f"permit (principal, action, resource) when {{ {condition} }};"
    assert conditions_read(_conditions(policy)) is reads, condition
    unless = f"permit (principal, action, resource) unless {{ {condition} }};"
    assert conditions_read(_conditions(unless)) is reads, condition


def test_example_folder_reads_the_session_for_deletes_only() -> None:
    """Only the delete policies (``action in Action::"delete"``: the schema's group) read the
    label; the generated schema (session required) makes every action read it."""
    snap = load_snapshot(POLICIES, "cedar")
    reads = {t.spec.key: snap.reads_labels(t) for t in snap.tools}
    assert reads == {"weather.get@v1": False, "calendar.create_event@v1": False, "files.delete@v1": True}
    meters = load_snapshot(ROOT / "tests" / "data" / "meters", "cedar")
    assert meters.tools and all(meters.reads_labels(t) for t in meters.tools)
    assert all(load_snapshot(POLICIES, "rego").reads_labels(t) for t in snap.tools)  # no reading


def test_unconstrained_or_group_scopes_read(tmp_path: Path) -> None:
    """A reading policy with an unconstrained action scope reaches every action; one scoped to the
    ``read`` group reaches weather.read (and so weather.get) only."""
    for scope, weather, calendar in (("action", True, True), ('action in Action::"read"', True, False)):
        folder = tmp_path / scope.replace(" ", "_").replace('"', "").replace(":", "")
        shutil.copytree(POLICIES, folder)
        with (folder / "cedar" / "policies.cedar").open("a") as f:
            f.write(
                f'\n@id("extra-reader")\nforbid (principal, {scope}, resource)\n'
                'when { context has session && context.session.labels.contains("banned") };\n'
            )
        snap = load_snapshot(folder, "cedar")
        reads = {t.spec.key: snap.reads_labels(t) for t in snap.tools}
        assert reads == {
            "weather.get@v1": weather,
            "calendar.create_event@v1": calendar,
            "files.delete@v1": True,
        }


def test_a_weather_read_is_decided_in_one_call_and_a_delete_still_sees_the_label(server: Running) -> None:
    """The read-then-delete flow (four deletes and one weather read): the weather read is decided
    by the compiled core in one call, without ``context.session``; the delete after it still sees
    the ``untrusted`` label its result recorded and asks for confirmation. (The metered deletes
    are decided by the compiled core too, after the claim, so the counter is read around a lone
    weather read.)"""
    snap = server.sidecar.components.gate.serving.current
    decider = snap.engine.compiled
    native = decider.native_snapshot if decider is not None else None
    assert native is not None, "the sidecar decides Cedar in the compiled core"
    after = read_then_egress(
        server,
        "carol",
        ("weather__get", '{"city": "Paris", "date": "2026-07-20"}'),
        ("files__delete", '{"path": "/tmp/b"}'),
    )
    seen = authorization(server, server.session_of(after), after)
    assert seen["session_labels"] == ["untrusted"]
    assert seen["decision"]["policy_ids"] == ["files-delete-after-untrusted"]
    sid = server.open_session(subject="carol")
    server.list_tools(sid)
    before = native.projected_decisions()
    read = server.propose(sid, "weather.get@v1", {"city": "Paris", "date": "2026-07-20"})
    assert read.decision.effect == pb.ALLOW and native.projected_decisions() == before + 1
    assert "session_labels" not in authorization(server, sid, read.invocation_id)
