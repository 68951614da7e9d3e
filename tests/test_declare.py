"""One declaration per tool (issue 12 item 2): what a ToolSpec and principals.json imply for the
engines, ``callgate check`` comparing ToolSpec argument types with the hand-written schemas, and
``callgate new tool`` refusing bad names. The end-to-end refund is tests/test_one_declaration.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from callgate.base.errors import LoadError
from callgate.cli.main import main
from callgate.policy.declare import (
    ArgType,
    Problem,
    check_tools,
    declared,
    load_principals,
    tool_declaration,
    tool_typing,
)
from callgate.policy.engines.cedar_declare import BASE_CEDAR_SCHEMA, cedar_declared_actions, cedar_schema
from callgate.policy.engines.registry import ENGINES, policy_folders
from callgate.policy.engines.rego_declare import rego_data
from callgate.policy.snapshot import load_snapshot
from tests.conftest import POLICIES
from tests.test_one_declaration import cli


def write_tool(directory: Path, name: str, schema: dict[str, Any], **extra: Any) -> Path:
    doc = {
        "name": name,
        "version": "v1",
        "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
        "input_schema": schema,
        "side_effect_class": "create",
        "required_capabilities": [name],
        "resource_template": "thing:{id}",
        **extra,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}@v1.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def test_the_cedar_fragment_and_rego_data_a_toolspec_implies(tmp_path: Path) -> None:
    schema = obj(
        {
            "id": {"type": "string"},
            "count": {"type": "integer"},
            "urgent": {"type": "boolean"},
            "price": {"type": ["number", "string"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "kind": {"enum": ["a", "b"]},
            "note": {"type": ["string", "null"]},
            "where": obj({"city": {"type": "string"}, "zip": {"type": "string"}}, ["city"]),
            "odd name": {"type": "string"},
        },
        ["id", "count", "price"],
    )
    write_tool(
        tmp_path / "tools",
        "shop.order",
        schema,
        normalizers=[{"kind": "decimal", "field": "/price", "scale": 2}],
    )
    d = declared(tmp_path)
    cedar = cedar_schema(d, None)
    assert cedar.startswith(BASE_CEDAR_SCHEMA)
    assert 'action "shop.order" in [create] appliesTo {' in cedar
    assert (
        'args: { count: Long, id: String, kind?: String, note?: String, "odd name"?: String, price: decimal, '
        "tags?: Set<String>, urgent?: Bool, where?: { city: String, zip?: String } }"
    ) in cedar
    import cedarpy

    cedarpy.Schema.from_str(cedar)  # Cedar takes it
    assert cedar_declared_actions(cedar)["shop.order"] == d.tools[0].args
    rego = rego_data(d, {}, "data.json")["callgate"]
    assert rego["schema"]["actions"]["shop.order"] == {
        "member_of": ["create"],
        "args": {
            "count": {"type": "Long"},
            "id": {"type": "String"},
            "kind": {"type": "String", "optional": True},
            "note": {"type": "String", "optional": True},
            "odd name": {"type": "String", "optional": True},
            "price": {"type": "Decimal"},
            "tags": {"type": "Set", "optional": True},
            "urgent": {"type": "Bool", "optional": True},
            "where": {"type": "Record", "optional": True},
        },
    }
    # an action the hand-written schema declares is not generated again
    hand = BASE_CEDAR_SCHEMA + 'action "shop.order" in [create];\n'
    assert cedar_schema(d, hand).count('action "shop.order"') == 1


@pytest.mark.parametrize(
    ("prop", "pointer", "message"),
    [
        ({"type": "number"}, "/input_schema/properties/x/type", "declare a decimal normalizer"),
        ({"type": ["integer", "string"]}, "/input_schema/properties/x", "exactly one JSON type"),
        ({"type": "array"}, "/input_schema/properties/x", "needs an 'items' schema"),
        ({"enum": ["a", 1]}, "/input_schema/properties/x/enum", "all strings, integers or booleans"),
        ({"minLength": 1}, "/input_schema/properties/x", "exactly one JSON type"),
    ],
)
def test_an_argument_without_a_policy_type_is_named(
    tmp_path: Path, prop: dict[str, Any], pointer: str, message: str
) -> None:
    path = write_tool(tmp_path / "tools", "t.x", obj({"id": {"type": "string"}, "x": prop}, ["id"]))
    decl = tool_declaration(path)
    assert decl.args is not None and decl.args.cedar() == "{ id: String }" and decl.error is None
    assert [(u.name, u.pointer) for u in decl.unseen] == [("x", pointer)]
    assert cedar_schema(
        declared(tmp_path), BASE_CEDAR_SCHEMA + 'action "t.x" in [create];\n'
    )  # declared by hand: fine
    # a schema that does not declare it, or none: generated without it; the argument alone is
    # left out of context.args (the tool serves), with a warning naming it
    assert 'action "t.x"' in cedar_schema(declared(tmp_path), None)
    typing = tool_typing(tmp_path, ENGINES.get("cedar").folder)
    assert not typing.refused and typing.unseen == {str(path): frozenset({"/x"})}
    (problem,) = typing.notes
    assert problem.place == "tool t.x@v1" and problem.warning
    assert problem.message.startswith(pointer + ":") and message in problem.message
    assert "argument 'x' is left out of context.args of action 't.x'" in problem.message
    line = int(problem.file.rsplit(":", 1)[1])
    last = pointer.rsplit("/", 1)[1]
    assert f'"{last}"' in path.read_text().splitlines()[line - 1]


def test_a_member_without_a_policy_type_is_left_out_alone(tmp_path: Path) -> None:
    """Untyped only deep inside (a free-form ``meta`` in the records of a Set): that member is
    left out of the record, the argument (``points``, its ``x``) kept; ``seen`` strips it from
    every item; a hand-written record without it is no type difference."""
    from types import SimpleNamespace

    from callgate.policy.declare import type_diff
    from callgate.policy.toolspecs import CompiledTool

    point = obj({"x": {"type": "integer"}, "meta": {"type": "object"}}, ["x"])
    path = write_tool(
        tmp_path / "tools",
        "t.p",
        obj({"id": {"type": "string"}, "points": {"type": "array", "items": point}}, ["id"]),
    )
    decl = tool_declaration(path)
    assert decl.args is not None and decl.args.cedar() == "{ id: String, points?: Set<{ x: Long }> }"
    (u,) = decl.unseen
    assert (u.name, u.field, u.path) == ("points", "/points/*/meta", "points[].meta")
    assert u.pointer == "/input_schema/properties/points/items/properties/meta"
    typing = tool_typing(tmp_path, ENGINES.get("cedar").folder)
    assert typing.unseen == {str(path): frozenset({"/points/*/meta"})}
    assert "argument 'points[].meta' is left out of context.args" in typing.notes[0].message
    have = ArgType(
        "Record",
        fields=(
            ("id", ArgType("String"), True),
            (
                "points",
                ArgType(
                    "Set",
                    element=ArgType(
                        "Record", fields=(("meta", ArgType("String"), True), ("x", ArgType("Long"), True))
                    ),
                ),
                False,
            ),
        ),
    )
    assert type_diff("", decl.args, have, {u.path}) == []
    assert type_diff("", decl.args, have) == [
        "points[].meta: required by the schema, not in the ToolSpec (every request is denied)"
    ]
    args = {"id": "a", "points": [{"x": 1, "meta": {"k": [1]}}, {"x": 2}, 3]}
    tool = SimpleNamespace(unseen=typing.unseen[str(path)])  # what CompiledTool.seen reads
    assert CompiledTool.seen(tool, args) == {"id": "a", "points": [{"x": 1}, {"x": 2}, 3]}  # type: ignore[arg-type]
    assert args["points"][0] == {"x": 1, "meta": {"k": [1]}}  # the call's own arguments unchanged


def test_two_toolspecs_typing_one_capability_differently(tmp_path: Path) -> None:
    write_tool(
        tmp_path / "tools",
        "a.one",
        obj({"id": {"type": "string"}}, ["id"]),
        required_capabilities=["shared.cap"],
    )
    write_tool(
        tmp_path / "tools",
        "a.two",
        obj({"id": {"type": "integer"}}, ["id"]),
        required_capabilities=["shared.cap"],
    )
    with pytest.raises(LoadError) as exc:
        cedar_schema(declared(tmp_path), None)
    assert "shared.cap" in exc.value.message and "a.one@v1" in exc.value.message


def copy_example(tmp_path: Path) -> Path:
    dst = tmp_path / "policies"
    shutil.copytree(POLICIES, dst)
    return dst


def config_for(tmp_path: Path, policies: Path, engine: str = "cedar") -> Path:
    toml = tmp_path / "callgate.toml"
    toml.write_text(f'[policy]\ndir = "{policies}"\nengine = "{engine}"\n[store]\npath = "{tmp_path}/db"\n')
    return toml


def test_check_reports_toolspec_types_against_the_hand_written_schemas(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    policies = copy_example(tmp_path)
    assert check_tools(policies, policy_folders()) == []
    path = policies / "tools" / "calendar.create_event@v1.json"
    doc = json.loads(path.read_text())
    for member in ("input_schema", "normalized_schema"):
        doc[member]["properties"]["duration_minutes"] = {"type": "string"}
        doc[member]["properties"]["colour"] = {"type": "string"}
    path.write_text(json.dumps(doc, indent=2))
    problems = check_tools(policies, policy_folders())
    text = path.read_text().splitlines()
    by_message = {p.message: p for p in problems}
    cedar = policies / "cedar" / "schema.cedarschema"
    want = {
        f"calendar.create in {cedar}: args.duration_minutes: the ToolSpec makes it String, the schema Long",
        f"calendar.create in {cedar}: args.colour: in the ToolSpec, not declared in the schema (a request carrying it is denied)",
    }
    assert want <= set(by_message)
    for p in problems:
        assert p.file == str(path)
        line = int(p.place.removeprefix("line "))
        arg = p.message.split("args.", 1)[1].split(":", 1)[0]
        assert f'"{arg}"' in text[line - 1], (p, text[line - 1])
    assert any("data.json" in p.message and "duration_minutes" in p.message for p in problems)
    # through the real CLI: exit 1, each problem named by file, place and message
    r = cli("check", "--config", str(config_for(tmp_path, policies)))
    out = r.stdout
    assert r.returncode == 1, r
    assert re.search(
        rf"error: {re.escape(str(path))}:\d+: .*args\.duration_minutes: the ToolSpec makes it String, the schema Long",
        out,
    ), out
    assert isinstance(problems[0], Problem)


def test_principals_file_errors_are_located(tmp_path: Path) -> None:
    (tmp_path / "principals.json").write_text(
        json.dumps(
            {"roles": {"finance": {}}, "users": {"dana": {"tenant": "acme", "roles": ["finanse"]}}}, indent=2
        )
    )
    with pytest.raises(LoadError) as exc:
        load_principals(tmp_path)
    assert "/users/dana/roles" in exc.value.message and "'finanse' is not declared" in exc.value.message
    line = int(exc.value.source.rsplit(":", 1)[1])
    assert '"roles": [' in (tmp_path / "principals.json").read_text().splitlines()[line - 1]
    (tmp_path / "principals.json").write_text(
        json.dumps({"users": {"dana": {"tenant": "acme", "role": "x"}}})
    )
    with pytest.raises(LoadError) as exc:
        load_principals(tmp_path)
    assert "/users/dana" in exc.value.message and "'role'" in exc.value.message


@pytest.mark.parametrize("engine", ["cedar", "rego"])
def test_users_in_two_places_are_refused(tmp_path: Path, engine: str) -> None:
    policies = copy_example(tmp_path)
    (policies / "principals.json").write_text(json.dumps({"users": {"dana": {"tenant": "acme"}}}))
    with pytest.raises(LoadError) as exc:
        load_snapshot(policies, engine)
    assert "declared twice" in exc.value.message and "principals.json" in exc.value.message
    legacy = "entities.json" if engine == "cedar" else "data.json"
    assert exc.value.source.endswith(legacy)


def test_legacy_files_still_load_unchanged(tmp_path: Path) -> None:
    """The example folder (schema.cedarschema, entities.json, data.json) loads as before: nothing
    is generated for actions it declares, and the Rego data equals data.json."""
    for engine in ("cedar", "rego"):
        load_snapshot(POLICIES, engine)
    from callgate.policy.engines.rego_contract import load_rego_dir

    assert load_rego_dir(POLICIES / "rego").data == json.loads((POLICIES / "rego" / "data.json").read_text())
    assert (
        cedar_schema(declared(POLICIES), (POLICIES / "cedar" / "schema.cedarschema").read_text())
        == (POLICIES / "cedar" / "schema.cedarschema").read_text()
    )


# -- callgate new tool ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "needs a name"),
        ("@v1", "needs a name"),
        ("Payments.Refund", "dotted lower_snake_case"),
        ("payments..refund", "dotted lower_snake_case"),
        ("payments-refund", "dotted lower_snake_case"),
        ("9lives", "dotted lower_snake_case"),
        ("delete", "capability class"),
        ("payments.refund@", "version ''"),
        ("payments.refund@v 1", "version 'v 1'"),
        ("weather.get@v1", "exists"),
    ],
)
def test_new_tool_refuses_bad_names_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    policies = copy_example(tmp_path)
    before = sorted(p.relative_to(policies) for p in policies.rglob("*"))
    rc = main(["new", "tool", name, "--dir", str(policies)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and message in err, err
    assert sorted(p.relative_to(policies) for p in policies.rglob("*")) == before  # nothing written


def test_new_tool_scaffolds_a_loadable_denying_tool(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    policies = copy_example(tmp_path)
    r = cli("new", "tool", "billing.invoice_get", "--dir", str(policies))
    assert r.returncode == 0, r
    out = r.stdout
    assert "tools/billing.invoice_get@v1.json" in out and "rego/billing_invoice_get.rego" in out
    for engine in ("cedar", "rego"):
        snap = load_snapshot(policies, engine)
        assert snap.tools.get("billing.invoice_get", "v1") is not None
        assert main(["check", "--config", str(config_for(tmp_path, policies, engine))]) == 0
        assert (
            main(
                [
                    "policy",
                    "test",
                    str(policies / "tests"),
                    "--config",
                    str(config_for(tmp_path, policies, engine)),
                ]
            )
            == 0
        )
    capfd.readouterr()
    assert main(["new", "tool", "billing.invoice_get", "--dir", str(policies)]) == 2  # twice: refused
    assert "exists" in capfd.readouterr().err
    assert ArgType("Long").cedar() == "Long"


def test_an_untyped_argument_a_hand_written_schema_types_is_no_type_error(tmp_path: Path) -> None:
    """An argument the ToolSpec cannot type (a union of two types) that the hand-written schema
    declares (required, as String): not reported as missing from the ToolSpec, and not left out
    of ``context.args`` (the action is not generated); ``callgate check`` warns that the ToolSpec
    admits values the declared type has no room for."""
    policies = copy_example(tmp_path)
    path = policies / "tools" / "calendar.create_event@v1.json"
    doc = json.loads(path.read_text())
    for member in ("input_schema", "normalized_schema"):
        doc[member]["properties"]["title"] = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    path.write_text(json.dumps(doc, indent=2))
    decl = tool_declaration(path)
    assert [u.name for u in decl.unseen] == ["title"]
    problems = check_tools(policies, policy_folders())
    assert problems and all(p.warning for p in problems), problems
    assert all("admits values of other types than the String declared" in p.message for p in problems), (
        problems
    )
    assert not tool_typing(policies, ENGINES.get("cedar").folder).unseen
