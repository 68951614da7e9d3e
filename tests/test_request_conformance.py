"""Issue 27 item 3, the last gap: a request that does not conform to a hand-written Cedar
schema (an action whose ``context.args`` record has no room for an argument the ToolSpec's open
schema admits, or types it otherwise) is a ``schema_violation`` naming the argument's pointer
and the action, never a ``policy_evaluation_error`` deny; ``callgate check`` warns (file, tool).
Through a real sidecar on cedarpy and the compiled core, and the real ``callgate check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import short_tmpdir, stop_sidecar
from tests.test_one_declaration import cli
from tests.test_tool_refusals import POLICY, sidecar, toolspec

SCHEMA = """\
entity Role in [Role];
entity User in [Role] { tenant: String };
entity Resource { kind: String, name: String, tenant: String };
action read, create, modify, delete;
action "notes.add" in [read] appliesTo { principal: User, resource: Resource,
  context: { tenant: String, tool: String,
             args: { id: String, text?: String, tag?: String, where?: { room: String } } } };
"""


def policy_folder() -> Path:
    """``notes.add``: an open ToolSpec schema (``tag`` of two types, ``where`` an open object)
    whose action is declared by hand with a closed record."""
    base = short_tmpdir() / "policies"
    (base / "tools").mkdir(parents=True)
    (base / "cedar").mkdir()
    (base / "cedar" / "policies.cedar").write_text(POLICY)
    (base / "cedar" / "schema.cedarschema").write_text(SCHEMA)
    (base / "principals.json").write_text(
        json.dumps({"tenants": ["acme"], "users": {"alice": {"tenant": "acme"}}})
    )
    doc = toolspec(
        "notes.add",
        {
            "id": {"type": "string"},
            "text": {"type": "string"},
            "tag": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "where": {"type": "object", "properties": {"room": {"type": "string"}}, "required": ["room"]},
        },
    )
    (base / "tools" / "notes.add@v1.json").write_text(json.dumps(doc, indent=2))
    return base


@pytest.mark.parametrize("core", ["python", "native"])
def test_a_request_the_cedar_schema_cannot_hold_is_a_validation_error_naming_it(core: str) -> None:
    sc, tmp = sidecar(policy_folder(), core)
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        ok = sc.propose(sid, "notes.add@v1", {"id": "n1", "text": "hi", "tag": "x", "where": {"room": "a"}})
        assert ok.decision.effect == pb.ALLOW, ok
        cases: list[tuple[dict[str, Any], str]] = [
            ({"id": "n2", "limit": "s3cr3t"}, "/limit"),  # not in the record
            ({"id": "n3", "where": {"room": "a", "floor": 2}}, "/where/floor"),  # nested
            ({"id": "n4", "tag": 7}, "/tag"),  # a Long where the record has a String
        ]
        for i, (args, pointer) in enumerate(cases):
            r = sc.propose(sid, "notes.add@v1", args, proposal_id=f"c{i}")
            # was: AUTHORIZATION_REJECTED, policy_evaluation_error, "request does not conform"
            assert pb.State.Name(r.state) == "VALIDATION_REJECTED", r
            assert r.rejection.code == "schema_violation", r.rejection
            assert [v.pointer for v in r.rejection.violations] == [pointer], r.rejection
            assert "notes.add" in r.rejection.violations[0].message, r.rejection
            assert "s3cr3t" not in str(r.rejection)  # places and kinds, never values
        # a refused call does not keep its idempotency key: the corrected call runs under it
        bad = sc.propose(sid, "notes.add@v1", {"id": "n5", "x": 1}, proposal_id="k1", idempotency_key="k")
        assert bad.rejection.code == "schema_violation", bad
        good = sc.propose(sid, "notes.add@v1", {"id": "n5"}, proposal_id="k2", idempotency_key="k")
        assert good.decision.effect == pb.ALLOW, good
    finally:
        stop_sidecar(sc, tmp)


def test_check_warns_that_the_toolspec_admits_what_the_action_cannot_hold() -> None:
    folder = policy_folder()
    toml = folder.parent / "callgate.toml"
    toml.write_text(f'[policy]\ndir = "{folder}"\n[store]\npath = "{folder.parent}/db"\n')
    r = cli("check", "--config", str(toml), "--offline")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out  # warnings: such a request is refused, fail closed
    lines = [ln for ln in out.splitlines() if "notes.add@v1.json" in ln and ln.startswith("warning:")]
    for where in ("/input_schema:", "/input_schema/properties/where:", "/input_schema/properties/tag:"):
        assert any(where in ln and "tool notes.add@v1" in ln for ln in lines), (where, out)
