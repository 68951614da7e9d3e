"""Issue 31 item 4: ListTools by policy (callgate/policy/reach.py).

* unit: a tool no permit of the subject's scope reaches is hidden, one with only a
  context-conditional permit is shown, one an unconditional forbid blocks is hidden;
* property: on 200 seeded random policy sets, whenever the reading says *never* for a principal
  and an action, the real engine (cedarpy) denies every sampled request of that principal for
  that action (resources and contexts varied): a usable tool is never hidden;
* a real sidecar (``policy.list_by_policy`` on by default): subjects see different sets, and a
  Propose for a hidden tool is answered by the engine's deny, its event marked ``hidden_by_policy``;
  on Rego and a real OPA server the default changes nothing (every allowlisted tool shown).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from callgate.cli.explain import explain, render_text
from callgate.config import PolicyConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.engines.cedar import load_cedar_dir
from callgate.policy.reach import Reach
from tests.conftest import POLICIES, Running, start_sidecar, stop_sidecar
from tests.test_gate_cases import engine_server  # noqa: F401  (rego and a real OPA server)

ACTIONS = ("weather.read", "calendar.create", "files.delete")


def _reach(tmp_path: Path, text: str) -> Reach:
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root, ignore=shutil.ignore_patterns("tests", "properties.toml"))
    (root / "cedar" / "policies.cedar").write_text(text)
    reach = load_cedar_dir(root / "cedar").reach
    assert reach is not None
    return reach


def test_no_permit_conditional_permit_and_unconditional_forbid(tmp_path: Path) -> None:
    reach = _reach(
        tmp_path,
        """
@id("weather-all")
permit (principal, action == Action::"weather.read", resource)
when { context.tenant == "acme" };

@id("calendar-schedulers")
@confirm("ask")
permit (principal in Role::"scheduler", action == Action::"calendar.create", resource);

@id("delete-admins")
permit (principal in Role::"admin", action in Action::"delete", resource);

@id("no-delete-for-carol")
forbid (principal == User::"carol", action == Action::"files.delete", resource);
""",
    )
    # alice is a scheduler: calendar (confirm) and the conditional weather permit are reachable
    assert reach.never("alice", ACTIONS) == {"files.delete"}
    # bob has no role: only the context-conditional permit reaches him
    assert reach.never("bob", ACTIONS) == {"calendar.create", "files.delete"}
    # carol is admin, but an unconditional forbid blocks her deletes
    assert reach.never("carol", ACTIONS) == {"calendar.create", "files.delete"}
    # someone the entity set does not hold has no roles
    assert reach.never("zed", ACTIONS) == {"calendar.create", "files.delete"}
    # tools: one never-allowed capability hides the whole call; cached per principal
    tools = [("weather.get@v1", ("weather.read",)), ("mixed@v1", ("weather.read", "files.delete"))]
    assert reach.hidden("bob", tools) == {"mixed@v1"}
    assert reach.hidden("bob", []) == {"mixed@v1"}  # the cached answer (same snapshot's tools)
    assert reach.hidden("carol", []) == {"mixed@v1"}  # indexed once, at the first call


def test_conditional_forbid_and_unknown_shapes_show(tmp_path: Path) -> None:
    reach = _reach(
        tmp_path,
        """
@id("delete-admins")
permit (principal in Role::"admin", action in Action::"delete", resource);

@id("forbid-when")
forbid (principal, action, resource) when { context.tenant == "other" };

@id("forbid-one-resource")
forbid (principal == User::"carol", action, resource == Resource::"file:/x");
""",
    )
    # neither forbid blocks every request: carol's deletes stay shown
    assert reach.never("carol", ACTIONS) == {"weather.read", "calendar.create"}


def test_conditions_that_surely_fail_or_hold_and_the_undecided_rest(tmp_path: Path) -> None:
    reach = _reach(
        tmp_path,
        """
@id("never-applies")
permit (principal, action == Action::"files.delete", resource) when { false };

@id("always-applies")
permit (principal, action == Action::"weather.read", resource) when { true } unless { false };

@id("sometimes")
permit (principal, action == Action::"calendar.create", resource) when { context.tenant == "acme" };
""",
    )
    never, shown = reach.assess("bob", ACTIONS)
    assert never == {"files.delete"}  # a permit whose condition surely fails decides nothing
    assert shown == {"weather.read"}  # surely shown: an unconditional permit and no forbid
    assert reach.solver is None and not reach.proved  # no solver pass: calendar stays shown
    assert reach.never("bob", ACTIONS) == {"files.delete"}


# --- property: never hides what the real engine could allow -------------------------------------
PRINCIPALS = ("alice", "bob", "carol", "zed")
ENTITIES = [
    {"uid": {"type": "Role", "id": "scheduler"}, "attrs": {}, "parents": []},
    {"uid": {"type": "Role", "id": "admin"}, "attrs": {}, "parents": [{"type": "Role", "id": "staff"}]},
    {"uid": {"type": "Role", "id": "staff"}, "attrs": {}, "parents": []},
    {"uid": {"type": "User", "id": "alice"}, "attrs": {}, "parents": [{"type": "Role", "id": "scheduler"}]},
    {"uid": {"type": "User", "id": "bob"}, "attrs": {}, "parents": []},
    {"uid": {"type": "User", "id": "carol"}, "attrs": {}, "parents": [{"type": "Role", "id": "admin"}]},
    *(
        {"uid": {"type": "Action", "id": a}, "attrs": {}, "parents": [{"type": "Action", "id": g}]}
        for a, g in (("weather.read", "read"), ("calendar.create", "create"), ("files.delete", "delete"))
    ),
]
DESCENDANTS = {"read": {"weather.read"}, "create": {"calendar.create"}, "delete": {"files.delete"}}
RESOURCES = ("weather:x", "file:/a", "file:/etc/p")
TENANTS = ("acme", "other")
KINDS = ("file", "weather")


def _random_policy(rng: random.Random, n: int) -> str:
    principal = rng.choice(
        [
            "principal",
            f'principal == User::"{rng.choice(PRINCIPALS)}"',
            f'principal in Role::"{rng.choice(("scheduler", "admin", "staff"))}"',
            "principal is User",
            f'principal is User in Role::"{rng.choice(("admin", "staff"))}"',
        ]
    )
    action = rng.choice(
        [
            "action",
            f'action == Action::"{rng.choice(ACTIONS)}"',
            f'action in Action::"{rng.choice(("read", "create", "delete"))}"',
            f'action in [Action::"{rng.choice(ACTIONS)}", Action::"{rng.choice(ACTIONS)}"]',
        ]
    )
    resource = rng.choice(
        ["resource", "resource is Resource", f'resource == Resource::"{rng.choice(RESOURCES)}"']
    )
    cond = rng.choice(
        [
            "",
            "",
            f'when {{ context.tenant == "{rng.choice(TENANTS)}" }}',
            f'unless {{ context.tenant == "{rng.choice(TENANTS)}" }}',
            "when { false }",
            # shapes the reading of the scopes cannot decide (the solver pass does):
            'when { context.tenant == "acme" && context.tenant == "other" }',  # never together
            f'when {{ resource.kind == "{rng.choice(KINDS)}" }}',  # an attribute of the resource
            "when { principal.tenant == context.tenant }",
            "unless { principal.tenant == context.tenant }",
            f'when {{ context.tenant == "{rng.choice(TENANTS)}" }} unless {{ context.tenant == "acme" }}',
        ]
    )
    effect = rng.choice(["permit", "permit", "forbid"])
    confirm = '@confirm("c")\n' if effect == "permit" and rng.random() < 0.3 else ""
    return f'@id("p{n}")\n{confirm}{effect} ({principal}, {action}, {resource}) {cond};\n'


def test_never_hides_a_usable_tool_on_200_sets() -> None:
    rng = random.Random(31)
    entities = json.dumps(ENTITIES)
    hidden_pairs = shown_pairs = 0
    for _ in range(200):
        text = "".join(_random_policy(rng, n) for n in range(rng.randint(1, 6)))
        static = json.loads(cedarpy.policies_to_json_str(text))["staticPolicies"]
        reach = Reach.build(
            static,
            list(static),
            DESCENDANTS,
            entities,
            principal_type="User",
            resource_type="Resource",
            action_type="Action",
        )
        for who in PRINCIPALS:
            never = reach.never(who, ACTIONS)
            for act in ACTIONS:
                allowed = any(
                    cedarpy.is_authorized(
                        {
                            "principal": f'User::"{who}"',
                            "action": f'Action::"{act}"',
                            "resource": f'Resource::"{res}"',
                            "context": {"tenant": tenant},
                        },
                        text,
                        entities,
                    ).allowed
                    for res in RESOURCES
                    for tenant in TENANTS
                )
                if act in never:
                    hidden_pairs += 1
                    assert not allowed, (who, act, text)
                else:
                    shown_pairs += 1
    # the reading hides something (the property is not vacuous) and shows what it cannot decide
    assert hidden_pairs > 500 and shown_pairs > 500, (hidden_pairs, shown_pairs)


# --- a real sidecar -----------------------------------------------------------------------------
def _events(running: Running, sid: str, invocation_id: str) -> list[dict[str, Any]]:
    got = running.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=invocation_id, session_id=sid))
    return [dict(e.data) for e in got.events]


def test_sidecar_lists_by_subject_and_the_engine_denies_the_hidden_tool() -> None:
    running, tmp = start_sidecar()  # policy.list_by_policy is on by default
    try:
        names = {}
        sessions = {}
        for who in ("alice", "bob", "carol"):
            sessions[who] = running.open_session(subject=who)
            names[who] = {t.name for t in running.list_tools(sessions[who]).tools}
        # example policies: weather for all (conditional), calendar for schedulers, deletes for admins
        assert names["alice"] == {"weather.get", "calendar.create_event"}
        assert names["bob"] == {"weather.get"}
        assert names["carol"] == {"weather.get", "files.delete"}
        # a Propose for a hidden tool runs the chain: the engine's deny answers it (spec 6.14),
        # and the decision event says the tool was hidden by policy
        args = {"title": "t", "start": "2026-07-20T10:00:00+08:00"}
        resp = running.propose(sessions["bob"], "calendar.create_event@v1", args, idempotency_key="k-bob")
        assert pb.State.Name(resp.state) == "AUTHORIZATION_REJECTED"
        assert [r.code for r in resp.decision.reasons] == ["no_matching_permit"]
        events = _events(running, sessions["bob"], resp.invocation_id)
        assert events[-1].get("hidden_by_policy") is True
        x = running.call(explain(running.sidecar.components.store, resp.invocation_id))
        assert x is not None and x.tool_seen.hidden_by_policy and not x.tool_seen.shown
        assert "hidden by policy" in render_text(x)
        # a shown tool's decision event carries no such mark
        resp = running.propose(sessions["alice"], "calendar.create_event@v1", args, idempotency_key="k-alice")
        assert "hidden_by_policy" not in _events(running, sessions["alice"], resp.invocation_id)[-1]
        # a tool outside the session's allowlist is still not shown at all
        sid = running.open_session(subject="carol", tool_allowlist=["weather.get"])
        running.list_tools(sid)
        resp = running.propose(sid, "files.delete@v1", {"path": "/a"}, idempotency_key="k-carol")
        assert resp.rejection.code == "unknown_tool_version"
    finally:
        stop_sidecar(running, tmp)


def test_a_reload_that_could_allow_a_hidden_tool_refuses_it_as_not_shown(tmp_path: Path) -> None:
    pdir = tmp_path / "policies"
    shutil.copytree(POLICIES, pdir, ignore=shutil.ignore_patterns("tests"))
    running, tmp = start_sidecar(pdir, policy=replace(PolicyConfig(), watch=False))
    try:
        sid = running.open_session(subject="bob")
        assert {t.name for t in running.list_tools(sid).tools} == {"weather.get"}
        # bob becomes a scheduler: the serving snapshot no longer hides calendar.create_event
        ents = json.loads((pdir / "cedar" / "entities.json").read_text())
        for e in ents:
            if e["uid"] == {"type": "User", "id": "bob"}:
                e["parents"] = [{"type": "Role", "id": "scheduler"}]
        (pdir / "cedar" / "entities.json").write_text(json.dumps(ents))
        assert running.sidecar.lifecycle is not None
        assert running.call(running.sidecar.lifecycle.reload("test")) is True
        args = {"title": "t", "start": "2026-07-20T10:00:00+08:00"}
        resp = running.propose(sid, "calendar.create_event@v1", args, idempotency_key="k-bob-2")
        assert pb.State.Name(resp.state) == "PARSE_REJECTED"
        assert resp.rejection.code == "unknown_tool_version"  # the model never saw it: list again
        running.list_tools(sid, model_call_id="mc-2")
        resp = running.propose(
            sid, "calendar.create_event@v1", args, model_call_id="mc-2", idempotency_key="k-bob-3"
        )
        assert pb.State.Name(resp.state) == "AUTHORIZED"  # now shown, and confirm is asked
    finally:
        stop_sidecar(running, tmp)


def test_sidecar_off_lists_every_allowlisted_tool() -> None:
    running, tmp = start_sidecar(policy=replace(PolicyConfig(), list_by_policy=False))
    try:
        sid = running.open_session(subject="bob")
        assert {t.name for t in running.list_tools(sid).tools} == {
            "weather.get",
            "calendar.create_event",
            "files.delete",
        }
    finally:
        stop_sidecar(running, tmp)


def test_rego_and_opa_show_every_allowlisted_tool(engine_server: Running) -> None:  # noqa: F811
    """No reading of Rego: with the default (on) every allowlisted tool is shown, nothing is hidden."""
    assert engine_server.sidecar.components.gate.snapshot.engine.reach is None
    sid = engine_server.open_session(subject="bob")
    assert {t.name for t in engine_server.list_tools(sid).tools} == {
        "weather.get",
        "calendar.create_event",
        "files.delete",
    }
    resp = engine_server.propose(sid, "files.delete@v1", {"path": "/a"}, idempotency_key="k-bob-rego")
    assert pb.State.Name(resp.state) == "AUTHORIZATION_REJECTED"
    assert "hidden_by_policy" not in _events(engine_server, sid, resp.invocation_id)[-1]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
