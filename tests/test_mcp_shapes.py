"""The argument schemas Pydantic (FastMCP) and zod based MCP servers publish, typed for policies
(docs/MCP.md, "Arguments as policies see them"): one ToolSpec written as ``callgate mcp import``
writes it (:func:`callgate.mcp.pins.toolspec_for`) from an ``inputSchema`` holding every shape,
its generated declarations checked, and one table of proposals decided identically by Cedar on
cedarpy, Cedar in the compiled core, embedded Rego (regopy) and a real OPA server.

Shapes: ``Optional[X] = None`` (``anyOf`` / ``oneOf`` of X and ``{"type": "null"}``, either
order), ``Optional[datetime]`` (a Cedar ``datetime``), ``Optional[float]`` (a ``decimal``), an
enum and a nested model as ``$ref`` into ``$defs``, Pydantic v1's ``allOf: [{$ref}]`` wrapper,
``Literal`` (``const``; ``enum`` with ``null``), ``list[str] | None``, zod's union of two string
formats (one type); and with no policy type, left out of ``context.args``: ``dict[str, Any]``,
``Union[int, str]``, ``dict[str, str] | None``. A JSON ``null`` is the argument absent, on every
engine (Cedar has no null; the Rego contract drops ``null`` members as well).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callgate.arguments.parse import ParseLimits
from callgate.mcp.pins import SideEffect, toolspec_for
from callgate.policy.declare import declared, tool_declaration, tool_typing
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.engines.cedar_declare import cedar_schema
from callgate.policy.engines.registry import ENGINES
from callgate.policy.engines.rego import RegoEngine
from callgate.policy.engines.rego_declare import rego_data
from callgate.propose.steps import check_times
from tests import policy_tables
from tests.conftest import POLICIES
from tests.opa_fixture import OpaServer, opa_factory  # noqa: F401 - the fixture
from tests.policy_tables import decide as decide_case
from tests.policy_tables import native_snapshot, normalized, opa_decisions, python_snapshot

loop = policy_tables.loop
LIMITS = ParseLimits()

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "pickArguments",
    "$defs": {
        "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
        "Where": {
            "type": "object",
            "title": "Where",
            "properties": {
                "room": {"type": "string", "title": "Room"},
                "floor": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "width": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}], "default": None},
                "notes": {"type": "object", "additionalProperties": True},
            },
            "required": ["room"],
        },
    },
    "properties": {
        "repo": {"type": "string", "title": "Repo"},
        "branch": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Branch"},
        "limit": {"oneOf": [{"type": "null"}, {"type": "integer", "minimum": 0}], "title": "Limit"},
        "since": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}], "default": None},
        "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
        "color": {"$ref": "#/$defs/Color"},
        "shade": {"allOf": [{"$ref": "#/$defs/Color"}], "default": "red"},
        "where": {"anyOf": [{"$ref": "#/$defs/Where"}, {"type": "null"}], "default": None},
        "mode": {"const": "fast", "type": "string"},
        "level": {"enum": ["low", "high", None]},
        "tags": {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
            "default": None,
        },
        "link": {"anyOf": [{"type": "string", "format": "uri"}, {"type": "string", "format": "email"}]},
        "extra": {"type": "object", "additionalProperties": True, "title": "Extra"},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}], "title": "Either"},
        "meta": {"anyOf": [{"type": "object", "additionalProperties": {"type": "string"}}, {"type": "null"}]},
    },
    "required": ["repo"],
}
REFS = ("color", "shade", "where")
FLAT = {
    **{k: v for k, v in INPUT_SCHEMA.items() if k != "$defs"},
    "properties": {k: v for k, v in INPUT_SCHEMA["properties"].items() if k not in REFS},
}
"""The shapes without ``$ref`` (a ``$ref`` keeps a tool's front stages in Python: the compiled
core's schema subset has none)."""
RECORD = (
    "{ branch?: String, color?: String, level?: String, limit?: Long, link?: String, mode?: String, "
    "ratio?: decimal, repo: String, shade?: String, since?: datetime, tags?: Set<String>, "
    "where?: { floor?: Long, room: String, width?: decimal } }"
)
UNSEEN = {  # by path: a member nested in an argument is left out alone, the argument kept
    "either": "/normalized_schema/properties/either/anyOf",
    "where.notes": "/normalized_schema/$defs/Where/properties/notes",
    "extra": "/normalized_schema/properties/extra",
    "meta": "/normalized_schema/properties/meta/anyOf/0",
}

CEDAR = """
@id("base")
permit (principal, action in [Action::"mcp.shapes.pick", Action::"mcp.shapes.flat"], resource)
when { principal.tenant == context.tenant };
@id("limit-needs-branch")
forbid (principal, action, resource) when { context.args has limit && !(context.args has branch) };
@id("no-main")
forbid (principal, action, resource) when { context.args has branch && context.args.branch == "main" };
@id("no-big-limit")
forbid (principal, action, resource) when { context.args has limit && context.args.limit > 100 };
@id("no-old")
forbid (principal, action, resource) when { context.args has since && context.args.since < datetime("2020-01-01") };
@id("no-high-ratio")
forbid (principal, action, resource) when { context.args has ratio && context.args.ratio.greaterThan(decimal("0.5")) };
@id("no-green")
forbid (principal, action == Action::"mcp.shapes.pick", resource) when { context.args has color && context.args.color == "green" };
@id("no-green-shade")
forbid (principal, action == Action::"mcp.shapes.pick", resource) when { context.args has shade && context.args.shade == "green" };
@id("no-basement")
forbid (principal, action == Action::"mcp.shapes.pick", resource) when { context.args has where && context.args.where has floor && context.args.where.floor < 0 };
@id("no-wide")
forbid (principal, action == Action::"mcp.shapes.pick", resource) when { context.args has where && context.args.where has width && context.args.where.width.greaterThan(decimal("2.0")) };
@id("no-high")
forbid (principal, action, resource) when { context.args has level && context.args.level == "high" };
@id("no-secret-tag")
forbid (principal, action, resource) when { context.args has tags && context.args.tags.contains("secret") };
@id("no-example-link")
forbid (principal, action, resource) when { context.args has link && context.args.link like "*example.com*" };
"""

REGO = """package callgate.authz

args := input.context.args

# no confirmation in this folder (decision.rego reads the map)
confirm := {}

permit contains "base" if {
	input.capability in {"mcp.shapes.pick", "mcp.shapes.flat"}
	principal.tenant == input.context.tenant
}

forbid contains "limit-needs-branch" if {
	args.limit
	not "branch" in object.keys(args)
}

forbid contains "no-main" if args.branch == "main"

forbid contains "no-big-limit" if args.limit > 100

# 2020-01-01T00:00:00Z in epoch milliseconds
forbid contains "no-old" if input.context.millis.args.since < 1577836800000

forbid contains "no-high-ratio" if args.ratio > 0.5

forbid contains "no-green" if args.color == "green"

forbid contains "no-green-shade" if args.shade == "green"

forbid contains "no-basement" if args.where.floor < 0

forbid contains "no-wide" if args.where.width > 2

forbid contains "no-high" if args.level == "high"

forbid contains "no-secret-tag" if "secret" in args.tags

forbid contains "no-example-link" if contains(args.link, "example.com")
"""


def case(name: str, args: dict[str, Any], effect: str, *ids: str) -> dict[str, Any]:
    return {
        "name": name,
        "tool": "shapes.pick@v1",
        "principal": {"tenant": "acme", "id": "ana"},
        "clock": "2026-07-19T14:00:00+00:00",
        "zone": "UTC",
        "args": {"repo": "r", **args},
        "expect": {"effect": effect, "policy_ids": list(ids)},
    }


CASES = [
    case("only the required argument", {}, "allow", "base"),
    case("null is absent", {"limit": None, "branch": None, "since": None, "ratio": None}, "allow", "base"),
    case("a value the record declares", {"branch": "dev", "limit": 5}, "allow", "base"),
    case("a null branch is no branch", {"branch": None, "limit": 5}, "deny", "limit-needs-branch"),
    case("an absent branch", {"limit": 5}, "deny", "limit-needs-branch"),
    case("nullable anyOf, string", {"branch": "main"}, "deny", "no-main"),
    case("nullable oneOf, null first", {"branch": "dev", "limit": 101}, "deny", "no-big-limit"),
    case("Optional[datetime] is a datetime", {"since": "2019-12-31T23:00:00Z"}, "deny", "no-old"),
    case("a recent datetime", {"since": "2026-01-01T00:00:00Z"}, "allow", "base"),
    case("Optional[float] is a decimal", {"ratio": 0.75}, "deny", "no-high-ratio"),
    case("a small decimal", {"ratio": 0.25}, "allow", "base"),
    case("an enum by $ref", {"color": "green"}, "deny", "no-green"),
    case("an allOf $ref wrapper", {"shade": "green"}, "deny", "no-green-shade"),
    case("Optional[Model] by $ref", {"where": {"room": "b", "floor": -1}}, "deny", "no-basement"),
    case("a nested null", {"where": {"room": "b", "floor": None}}, "allow", "base"),
    case("a number in a $ref target is a decimal", {"where": {"room": "b", "width": 2.5}}, "deny", "no-wide"),
    case("a narrow one", {"where": {"room": "b", "width": 1.25}}, "allow", "base"),
    case(
        "a nested dict left out, its argument seen",
        {"where": {"room": "b", "floor": -1, "notes": {"a": 1}}},
        "deny",
        "no-basement",
    ),
    case("Literal const", {"mode": "fast"}, "allow", "base"),
    case("enum with null", {"level": "high"}, "deny", "no-high"),
    case("enum with null: null", {"level": None}, "allow", "base"),
    case("list[str] | None", {"tags": ["a", "secret"]}, "deny", "no-secret-tag"),
    case("zod union of two string formats", {"link": "https://example.com/x"}, "deny", "no-example-link"),
    # left out of context.args: the policy never sees them, whatever they hold
    case("dict[str, Any] left out", {"extra": {"branch": "main", "n": [1, None]}}, "allow", "base"),
    case("Union[int, str] left out", {"either": "main"}, "allow", "base"),
    case("Union[int, str] left out, the other type", {"either": 7}, "allow", "base"),
    case("dict[str, str] | None left out", {"meta": {"k": "v"}}, "allow", "base"),
    case(
        "everything at once",
        {"branch": "dev", "limit": 1, "where": {"room": "a"}, "extra": {}},
        "allow",
        "base",
    ),
]


def want(c: dict[str, Any]) -> dict[str, Any]:
    return {"effect": c["expect"]["effect"], "policy_ids": sorted(c["expect"]["policy_ids"])}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp_shapes") / "policies"
    (root / "tools").mkdir(parents=True)
    (root / "cedar").mkdir()
    (root / "rego").mkdir()
    for name, schema in (("pick", INPUT_SCHEMA), ("flat", FLAT)):
        tool = {"name": name, "description": "Pick things.", "inputSchema": schema}
        doc = toolspec_for("shapes", tool, SideEffect.READ_ONLY)
        (root / "tools" / f"shapes.{name}@v1.json").write_text(json.dumps(doc, indent=2) + "\n")
    (root / "principals.json").write_text(
        json.dumps({"tenants": ["acme"], "users": {"ana": {"tenant": "acme"}}})
    )
    (root / "cedar" / "policies.cedar").write_text(CEDAR)
    (root / "rego" / "shapes.rego").write_text(REGO)
    for name in ("decision.rego", "entities.rego", "schema.rego"):
        (root / "rego" / name).write_text((POLICIES / "rego" / name).read_text())
    return root


def decide(engine: Any, snap: Any, c: dict[str, Any], lp: asyncio.AbstractEventLoop) -> dict[str, Any]:
    return decide_case(engine, snap, c, lp, check_times)


def test_import_types_every_shape(folder: Path) -> None:
    doc = json.loads((folder / "tools" / "shapes.pick@v1.json").read_text())
    assert doc["normalizers"] == [  # Optional[float], also in a $ref target (#/$defs/Where)
        {"kind": "decimal", "field": "/ratio", "scale": 4},
        {"kind": "decimal", "field": "/where/width", "scale": 4, "minimum": 0},
    ]
    defs = doc["normalized_schema"]["$defs"]
    assert defs["Where"]["additionalProperties"] is False  # objects in $defs closed too
    assert defs["Where"]["properties"]["width"]["anyOf"][0]["type"] == "string"
    ratio = doc["normalized_schema"]["properties"]["ratio"]["anyOf"]
    assert ratio[0]["type"] == "string" and ratio[1] == {"type": "null"}
    decl = tool_declaration(folder / "tools" / "shapes.pick@v1.json")
    assert decl.error is None and decl.args is not None
    assert decl.args.cedar() == RECORD
    assert {u.path: u.pointer for u in decl.unseen} == UNSEEN
    assert {u.name for u in decl.unseen} == {"either", "extra", "meta", "where"}
    typing = tool_typing(folder, ENGINES.get("cedar").folder)
    tools = folder / "tools"
    assert not typing.refused
    fields = {"/" + p.replace(".", "/") for p in UNSEEN}
    assert typing.unseen == {
        str(tools / "shapes.pick@v1.json"): fields,
        str(tools / "shapes.flat@v1.json"): fields - {"/where/notes"},
    }
    flat = [v for k, v in UNSEEN.items() if "." not in k]
    assert sorted(p.message.split(":", 1)[0] for p in typing.notes) == sorted([*UNSEEN.values(), *flat])
    assert any("argument 'where.notes' is left out of context.args" in p.message for p in typing.notes)
    schema = cedar_schema(declared(folder), None)
    assert RECORD.replace("{ ", "").split(",")[0] in schema
    rego = rego_data(declared(folder), {}, "data.json")["callgate"]["schema"]["actions"]["mcp.shapes.pick"]
    assert rego["args"]["since"] == {"type": "String", "optional": True}
    assert rego["args"]["ratio"] == {"type": "Decimal", "optional": True}
    assert not set(UNSEEN) & set(rego["args"])


def test_the_table_covers_every_shape() -> None:
    named = {k for c in CASES for k in c["args"]}
    assert named == set(INPUT_SCHEMA["properties"])


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_cedarpy(folder: Path, c: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    snap = python_snapshot(folder)
    engine = CedarEngine(load_cedar_dir(folder / "cedar", cores=SnapshotCores.PYTHON))
    assert decide(engine, snap, c, loop) == want(c)


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_compiled_core(folder: Path, c: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """Cedar in the compiled core decides every case; the core's front stages run the tool
    without ``$ref`` (``shapes.flat``), which has arguments left out of ``context.args`` (and
    time and decimal ones), so the engine's JSON path in the core decides, not the one-call
    decision (which builds ``context.args`` from every argument)."""
    snap, core = native_snapshot(folder)
    assert snap.engine.compiled is not None and snap.engine.compiled.native
    assert core.unsupported() == {"shapes.pick@v1": "input schema outside the native subset"}
    assert decide(snap.engine, snap, c, loop) == want(c)
    if set(REFS) & set(c["args"]):
        return
    flat = {**c, "tool": "shapes.flat@v1"}
    tool, _ = normalized(snap, flat)
    raw = json.dumps(c["args"]).encode()
    answer = core.front(snap, tool, raw, "acme", "en", c["clock"], LIMITS, "ana")
    assert answer is not None and answer.code is None and answer.authz is None, c["name"]
    assert decide(snap.engine, snap, flat, loop) == want(c)


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_embedded_rego(folder: Path, c: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    snap = python_snapshot(folder)
    assert decide(RegoEngine.from_dir(folder / "rego"), snap, c, loop) == want(c)


@pytest.mark.opa
def test_opa(
    folder: Path,
    opa_factory: Callable[..., OpaServer],  # noqa: F811
    loop: asyncio.AbstractEventLoop,
) -> None:
    got = opa_decisions(folder, opa_factory, loop, CASES, check_times)
    assert got == {c["name"]: want(c) for c in CASES}


def test_rego_and_cedar_see_null_as_absent(folder: Path) -> None:
    """What each engine is sent for ``{"branch": null}``: no ``branch`` member at all, and no
    left-out argument."""
    from callgate.base.model import AuthzRequest, Subject
    from callgate.policy.engines.cedar import to_cedar_value
    from callgate.policy.engines.rego_contract import build_input
    from callgate.propose.authorize import policy_context

    snap = python_snapshot(folder)
    where = {"room": "b", "notes": {"a": 1}}
    tool, norm = normalized(
        snap, case("x", {"branch": None, "either": 1, "extra": {"a": 1}, "where": where}, "allow")
    )
    ctx = policy_context(tool, norm)
    assert set(ctx["args"]) == {"repo", "branch", "where"}  # the left-out ones are gone before any engine
    assert (
        ctx["args"]["where"] == {"room": "b"} and norm.value is not None and norm.value["where"] == where
    )  # a copy
    ctx["args"].pop("where")
    assert to_cedar_value(ctx["args"]) == {"repo": "r"}
    request = AuthzRequest(Subject("acme", "ana"), "mcp.shapes.pick", "mcp:shapes.pick", ctx)
    assert build_input(request)["context"]["args"] == {"repo": "r"}


def test_check_passes_and_names_a_policy_reading_a_left_out_argument(folder: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    cfg = tmp_path / "callgate.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "db"}"\n\n[policy]\ndir = "{folder}"\n')

    def check() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "callgate", "check", "-c", str(cfg), "--offline"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return f"rc={done.returncode}\n{done.stdout}{done.stderr}"

    out = check()
    assert out.startswith("rc=0"), out
    warned = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 7 and all("left out of context.args" in ln for ln in warned), out
    assert "not generated" not in out, out
    policies = folder / "cedar" / "policies.cedar"
    policies.write_text(
        CEDAR
        + '@id("reads-either")\nforbid (principal, action, resource) when { context.args.either == 1 };\n'
    )
    try:
        out = check()
        assert out.startswith("rc=1") and "reads-either" in out and "args.either" in out, out
        # and why it is unknown: the warning naming the argument left out, with the error
        assert "argument 'either' is left out of context.args of action 'mcp.shapes.pick'" in out, out
    finally:
        policies.write_text(CEDAR)
