"""Issue 15 A1/A2: the Cedar engine evaluates a request against its action's slice of the policies
and its own slice of the entities, and decides exactly what the whole set decides.

The reference is Cedar itself over the whole policy text and the whole entity set (what the
engine did before slicing): a grid of requests must give the same decision, the same
determining policies and the same presence of errors."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from callgate.base.model import AuthzRequest, Effect, Subject
from callgate.policy.engines import cedar_slices
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir, to_cedar_value
from callgate.policy.engines.cedar_slices import LineIndex, est_chunked, statement_spans
from tests.conftest import POLICIES

SCHEMA_EXTRA = """
entity Team in [Role] { boss: User };
action "weather.write" in [read, modify] appliesTo {
  principal: User, resource: Resource,
  context: { tenant: String, tool: String, args: { city: String, date: String } }
};
"""

POLICIES_EXTRA = """
// a forbid naming several actions still applies to each of them
@id("no-paris-list")
forbid (principal, action in [Action::"weather.read", Action::"files.delete"], resource)
when { resource.name == "Paris" };

// an unscoped forbid applies to every action
@id("no-blocked")
forbid (principal, action, resource) when { resource.name == "blocked" };

// an action group: weather.read and weather.write are both in read
@id("read-group-tenant")
forbid (principal, action in Action::"read", resource) when { context.tenant == "evil" };

// an entity literal in a condition is dereferenced: its data must be in every slice
@id("carol-tenant")
permit (principal, action == Action::"weather.write", resource)
when { User::"carol".tenant == context.tenant };

// principal membership through a chain (dave -> team -> scheduler)
@id("team-write")
permit (principal in Role::"scheduler", action == Action::"weather.write", resource)
when { resource.name == "Lyon" };

// an erroring forbid (Long overflow) in one slice only
@id("overflow-delete")
forbid (principal, action == Action::"files.delete", resource)
when { 9223372036854775807 + 1 > 0 };
"""

ENTITIES_EXTRA = [
    {
        "uid": {"type": "Team", "id": "t1"},
        "attrs": {"boss": {"type": "User", "id": "bob"}},
        "parents": [{"type": "Role", "id": "scheduler"}],
    },
    {
        "uid": {"type": "User", "id": "dave"},
        "attrs": {"tenant": "acme"},
        "parents": [{"type": "Team", "id": "t1"}],
    },
    {
        "uid": {"type": "Resource", "id": "weather:Lyon"},
        "attrs": {"kind": "weather", "name": "Lyon", "tenant": "acme"},
        "parents": [],
    },
]


@pytest.fixture(scope="module")
def cedar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("slices") / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    schema = (
        (d / "schema.cedarschema").read_text().replace("entity User in [Role]", "entity User in [Role, Team]")
    )
    (d / "schema.cedarschema").write_text(schema + SCHEMA_EXTRA)
    (d / "policies.cedar").write_text((d / "policies.cedar").read_text() + POLICIES_EXTRA)
    ents = json.loads((d / "entities.json").read_text()) + ENTITIES_EXTRA
    (d / "entities.json").write_text(json.dumps(ents))
    return d


ARGS: dict[str, dict[str, Any]] = {
    "weather.read": {"city": "Paris", "date": "2026-07-20"},
    "weather.write": {"city": "Lyon", "date": "2026-07-20"},
    "calendar.create": {"calendar_id": "primary", "title": "x", "start": "s", "duration_minutes": 30},
    "files.delete": {"path": "/tmp/x"},
}


def reference(d: Path, req: AuthzRequest) -> tuple[str, list[str], bool]:
    """Cedar over the whole text and the whole entity set (with the request's own entities)."""
    schema = cedarpy.Schema.from_str((d / "schema.cedarschema").read_text())
    ents = json.loads((d / "entities.json").read_text())
    uids = {(e["uid"]["type"], e["uid"]["id"]) for e in ents}
    if ("User", req.subject.id) not in uids:
        ents.append(
            {
                "uid": {"type": "User", "id": req.subject.id},
                "attrs": {"tenant": req.subject.tenant},
                "parents": [],
            }
        )
    if ("Resource", req.resource) not in uids:
        kind, _, name = req.resource.partition(":")
        ents.append(
            {
                "uid": {"type": "Resource", "id": req.resource},
                "attrs": {"kind": kind, "name": name, "tenant": req.subject.tenant},
                "parents": [],
            }
        )
    text = (d / "policies.cedar").read_text()
    ids = {
        k: v["annotations"]["id"]
        for k, v in json.loads(cedarpy.policies_to_json_str(text))["staticPolicies"].items()
    }
    context = to_cedar_value(dict(req.context))
    context["tenant"] = req.subject.tenant
    r = cedarpy.is_authorized(
        {
            "principal": {"type": "User", "id": req.subject.id},
            "action": {"type": "Action", "id": req.capability},
            "resource": {"type": "Resource", "id": req.resource},
            "context": context,
        },
        text,
        cedarpy.Entities.from_json_str(json.dumps(ents), schema),
        schema,
    )
    return r.decision.value, sorted(ids.get(p, p) for p in r.diagnostics.reasons), bool(r.diagnostics.errors)


def test_sliced_decisions_equal_the_whole_set(cedar_dir: Path) -> None:
    engine = CedarEngine(load_cedar_dir(cedar_dir))
    p = engine._p
    grid = itertools.product(
        [
            ("acme", "alice"),
            ("acme", "bob"),
            ("acme", "carol"),
            ("acme", "dave"),
            ("evil", "eve"),
            ("other", "zed"),
        ],
        ["weather.read", "weather.write", "calendar.create", "files.delete", "no.such.action"],
        ["weather:Paris", "weather:Lyon", "x:blocked", "calendar:primary"],
    )
    checked = 0
    for (tenant, user), action, resource in grid:
        req = AuthzRequest(
            Subject(tenant, user), action, resource, {"tool": "t@v1", "args": ARGS.get(action, {})}
        )
        (d,) = engine.authorize_batch_sync([req])
        verdict, reasons, errors = reference(cedar_dir, req)
        if errors or verdict == "NoDecision":
            assert d.effect is Effect.DENY and d.error_code, (req, d)
        else:
            assert d.effect.value == ("deny" if verdict == "Deny" else d.effect.value), (req, d, verdict)
            assert (d.effect is not Effect.DENY) == (verdict == "Allow"), (req, d, verdict)
            got = sorted(r.policy_id for r in d.reasons if r.policy_id)
            assert got == reasons, (req, got, reasons)
        checked += 1
    assert checked == 6 * 5 * 4
    # the slices are smaller than the set: a weather.read request never sees the files policies
    assert p.slices.sizes["weather.read"] < len(p.policy_ids)


def test_forbids_with_action_lists_groups_and_no_scope_still_apply(cedar_dir: Path) -> None:
    engine = CedarEngine(load_cedar_dir(cedar_dir))

    def one(user: str, action: str, resource: str, tenant: str = "acme") -> tuple[Effect, tuple[str, ...]]:
        (d,) = engine.authorize_batch_sync(
            [AuthzRequest(Subject(tenant, user), action, resource, {"tool": "t@v1", "args": ARGS[action]})]
        )
        return d.effect, d.policy_ids

    assert one("bob", "weather.read", "weather:Paris") == (Effect.DENY, ("no-paris-list",))
    assert one("bob", "weather.read", "x:blocked")[0] is Effect.DENY
    assert "no-blocked" in one("bob", "weather.read", "x:blocked")[1]
    assert one("eve", "weather.write", "weather:Lyon", tenant="evil") == (Effect.DENY, ("read-group-tenant",))
    assert one("dave", "weather.write", "weather:Lyon")[0] is Effect.ALLOW  # via the team chain
    assert one("bob", "weather.write", "weather:Nice")[0] is Effect.ALLOW  # carol's data is in the slice
    assert one("bob", "weather.write", "weather:Nice", tenant="other")[0] is Effect.DENY
    (d,) = engine.authorize_batch_sync(
        [
            AuthzRequest(
                Subject("acme", "carol"),
                "files.delete",
                "file:/tmp/x",
                {"tool": "t@v1", "args": ARGS["files.delete"]},
            )
        ]
    )
    assert d.effect is Effect.DENY and d.error_code == "policy_evaluation_error"


def test_validation_by_group_is_used_and_agrees(cedar_dir: Path) -> None:
    text = (cedar_dir / "policies.cedar").read_text()
    spans = statement_spans(_starts(text), len(text))
    static = est_chunked(text, spans)
    assert static is not None
    schema = cedarpy.Schema.from_str((cedar_dir / "schema.cedarschema").read_text())
    _, graph = cedar_slices.EntityIndex.build(str(cedarpy.Entities.from_json_str("[]", schema)), {})
    assert cedar_slices.validate_grouped(spans, text, static["staticPolicies"], schema, graph)
    bad = (
        text
        + '\n@id("typo")\npermit (principal, action == Action::"weather.write", resource) when { context.args.cty == "x" };\n'
    )
    spans = statement_spans(_starts(bad), len(bad))
    static = est_chunked(bad, spans)
    assert static is not None
    assert not cedar_slices.validate_grouped(spans, bad, static["staticPolicies"], schema, graph)


def _starts(text: str) -> list[int]:
    from callgate.policy.engines.cedar import _statement_starts

    return _statement_starts(text)


def test_chunked_json_form_equals_the_whole_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cedar_slices, "EST_CHUNK", 3)
    text = "".join(
        f'// policy {i}; with a semicolon\n@id("p{i}")\npermit (principal, action == Action::"a{i}", resource)\n'
        f'  when {{ context.s == "x;{i}\\"; y" }};\n'
        for i in range(10)
    )
    spans = statement_spans(_starts(text), len(text))
    got = est_chunked(text, spans)
    assert got is not None
    assert got["staticPolicies"] == json.loads(cedarpy.policies_to_json_str(text))["staticPolicies"]


def test_line_index_matches_counting() -> None:
    text = "a\nbb\n\nccc\n"
    index = LineIndex(text)
    assert [index.line_of(i) for i in range(len(text) + 1)] == [
        text.count("\n", 0, i) + 1 for i in range(len(text) + 1)
    ]


def test_entity_index_finds_exactly_the_entities_of_the_set() -> None:
    ids = ["bob", "bob2", "bo", 'quo"te', "ünï\\code", ""]
    ents = [{"uid": {"type": "User", "id": i}, "attrs": {"tenant": "acme"}, "parents": []} for i in ids]
    ents.append({"uid": {"type": "Role", "id": "bob"}, "attrs": {}, "parents": []})
    rendered = str(cedarpy.Entities.from_json_str(json.dumps(ents)))
    index, _ = cedar_slices.EntityIndex.build(rendered, {})
    assert len(index) == len(ents)
    for i in ids:
        n = index.number(("User", i))
        assert n is not None and json.loads(index.fragment(n))["uid"] == {"type": "User", "id": i}
    assert ("Role", "bob") in index and ("Role", "bob2") not in index and ("User", "b") not in index


def test_a_closed_engine_fails_closed(cedar_dir: Path) -> None:
    """Closing releases the prepared sets (off the loop); a late request is a deny, never a
    decision over a half-released snapshot."""
    import asyncio

    engine = CedarEngine(load_cedar_dir(cedar_dir))
    req = AuthzRequest(
        Subject("acme", "bob"), "weather.read", "weather:Lyon", {"tool": "t@v1", "args": ARGS["weather.read"]}
    )
    assert engine.authorize_batch_sync([req])[0].effect is Effect.ALLOW
    asyncio.run(engine.close())
    (d,) = engine.authorize_batch_sync([req])
    assert d.effect is Effect.DENY and d.error_code == "engine_error"
    assert not engine._p.slices.by_action
