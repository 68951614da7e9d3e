"""Issue 27 item 3, the two gaps left: an argument without a policy type is left out of
``context.args`` alone (its ToolSpec serves; it used to refuse the ToolSpec, and before that the
set), and an undeclared argument of a hand-written open schema is a validation
error naming it (never a policy evaluation error), through the real loader, ``callgate check``
and a real sidecar (cedarpy and the compiled core)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.snapshot import load_snapshot
from tests.conftest import short_tmpdir, start_sidecar, stop_sidecar
from tests.test_one_declaration import cli

POLICY = '@id("all") permit (principal, action, resource) when { principal.tenant == context.tenant };\n'

# the three shapes a combinator takes in published upstreams' schemas
UNTYPED = {
    "any_of": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "one_of": {"oneOf": [{"type": "string"}, {"type": "boolean"}]},
    "mixed": {"type": ["string", "integer"]},
}


def toolspec(name: str, props: dict[str, Any], *, closed: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": ["id"]}
    if closed:
        schema["additionalProperties"] = False
    return {
        "name": name,
        "version": "v1",
        "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
        "input_schema": schema,
        "side_effect_class": "read_only",
        "required_capabilities": [name],
        "resource_template": "thing:{id}",
    }


def policy_folder(untyped: dict[str, Any]) -> Path:
    """``notes.add`` (open schema, written by hand), ``notes.deep`` (an open nested object) and
    one ``notes.pick_<kind>`` per combinator; no hand-written Cedar schema (actions generated)."""
    base = short_tmpdir() / "policies"
    tools = base / "tools"
    tools.mkdir(parents=True)
    (base / "cedar").mkdir()
    (base / "cedar" / "policies.cedar").write_text(POLICY)
    (base / "principals.json").write_text(
        json.dumps({"tenants": ["acme"], "users": {"alice": {"tenant": "acme"}}})
    )
    docs = [
        toolspec("notes.add", {"id": {"type": "string"}, "text": {"type": "string"}}),
        toolspec(
            "notes.deep",
            {
                "id": {"type": "string"},
                "where": {"type": "object", "properties": {"room": {"type": "string"}}},
            },
        ),
        *(
            toolspec(f"notes.pick_{kind}", {"id": {"type": "string"}, "choice": prop})
            for kind, prop in untyped.items()
        ),
    ]
    for doc in docs:
        (tools / f"{doc['name']}@v1.json").write_text(json.dumps(doc, indent=2))
    return base


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    yield policy_folder(UNTYPED)


def test_a_combinator_argument_is_left_out_and_its_tool_serves(folder: Path) -> None:
    snap = load_snapshot(folder)  # was: the tool refused (and before: LoadError for the set)
    assert not snap.refused
    picks = [f"notes.pick_{k}@v1" for k in sorted(UNTYPED)]
    assert sorted(t.spec.key for t in snap.tools) == ["notes.add@v1", "notes.deep@v1", *picks]
    assert all(snap.tools.get(k.split("@")[0], "v1").unseen == {"/choice"} for k in picks)  # type: ignore[union-attr]
    left = {p.place: p for p in snap.unseen}
    assert sorted(left) == [f"tool {k}" for k in picks]
    for kind in UNTYPED:
        problem = left[f"tool notes.pick_{kind}@v1"]
        path, line = problem.file.rsplit(":", 1)
        assert Path(path).name == f"notes.pick_{kind}@v1.json"
        pointer = problem.message.split(": ", 1)[0]
        assert pointer.startswith("/input_schema/properties/choice"), problem.message
        last = pointer.rsplit("/", 1)[1]
        assert f'"{last}"' in Path(path).read_text().splitlines()[int(line) - 1]
        assert "argument 'choice' is left out of context.args" in problem.message and problem.warning


def test_check_names_the_left_out_argument_and_pointer_and_passes(folder: Path) -> None:
    toml = folder.parent / "callgate.toml"
    toml.write_text(f'[policy]\ndir = "{folder}"\n[store]\npath = "{folder.parent}/db"\n')
    r = cli("check", "--config", str(toml), "--offline")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out  # a warning, the set is ready
    for kind in UNTYPED:
        line = next(ln for ln in out.splitlines() if f"notes.pick_{kind}@v1.json" in ln)
        assert line.startswith("warning:") and "/input_schema/properties/choice" in line, line
        assert f"tool notes.pick_{kind}@v1" in line and "left out of context.args" in line, line
    # a policy that reads the left-out argument fails the check, naming it
    policies = folder / "cedar" / "policies.cedar"
    policies.write_text(
        POLICY + '@id("reads-choice") forbid (principal, action == Action::"notes.pick_any_of", resource) '
        'when { context.args.choice == "x" };\n'
    )
    try:
        r = cli("check", "--config", str(toml), "--offline")
        out = r.stdout + r.stderr
        assert r.returncode != 0 and "reads-choice" in out and "choice" in out, out
    finally:
        policies.write_text(POLICY)


def sidecar(folder: Path, core: str) -> Any:
    from callgate.config import CoreConfig
    from callgate.propose.core import load_native

    if core == "native" and load_native() is None:
        # Never a skip: scripts/test builds the core (scripts/bootstrap -> scripts/native); a
        # missing build is a failure that says how to get it (as tests/test_native_cedar.py).
        pytest.fail(
            "the compiled core is not built (scripts/native build); needs a Rust toolchain", pytrace=False
        )
    return start_sidecar(folder, core=CoreConfig(engine=core))


@pytest.mark.parametrize("core", ["python", "native"])
def test_an_undeclared_argument_is_a_validation_error_naming_it(core: str) -> None:
    sc, tmp = sidecar(policy_folder({}), core)
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        ok = sc.propose(sid, "notes.add@v1", {"id": "n1", "text": "hi"})
        assert ok.decision.effect == pb.ALLOW, ok
        # an argument the generated action has no room for: named, before any policy (was: a
        # deny with policy_evaluation_error that named nothing), at the top and nested
        for i, (tool, args, name) in enumerate(
            [
                ("notes.add@v1", {"id": "n2", "text": "hi", "extra": 1}, "extra"),
                ("notes.deep@v1", {"id": "n3", "where": {"room": "a", "floor": 2}}, "floor"),
            ]
        ):
            r = sc.propose(sid, tool, args, proposal_id=f"c{i}")
            assert pb.State.Name(r.state) == "VALIDATION_REJECTED", r
            assert r.rejection.code == "schema_violation", r.rejection
            assert any(name in v.pointer + v.message for v in r.rejection.violations), r.rejection
    finally:
        stop_sidecar(sc, tmp)


@pytest.mark.parametrize("core", ["python", "native"])
def test_a_tool_with_a_left_out_argument_is_listed_and_served(folder: Path, core: str) -> None:
    sc, tmp = sidecar(folder, core)
    try:
        sid = sc.open_session()
        listed = {t.name for t in sc.list_tools(sid).tools}
        assert listed == {"notes.add", "notes.deep", *(f"notes.pick_{k}" for k in UNTYPED)}, listed
        assert sc.propose(sid, "notes.add@v1", {"id": "n1"}).decision.effect == pb.ALLOW
        for i, choice in enumerate(["a", 5]):  # either type of the union: the policy decides
            r = sc.propose(sid, "notes.pick_any_of@v1", {"id": "n4", "choice": choice}, proposal_id=f"c{i}")
            assert r.decision.effect == pb.ALLOW, r
        # still validated against its schema: a value of neither type is refused, named
        r = sc.propose(sid, "notes.pick_any_of@v1", {"id": "n5", "choice": [1]}, proposal_id="c9")
        assert pb.State.Name(r.state) == "VALIDATION_REJECTED", r
        assert any("choice" in v.pointer for v in r.rejection.violations), r.rejection
    finally:
        stop_sidecar(sc, tmp)
