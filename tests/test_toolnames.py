"""The one tool-name rule (issue 27 item 1, issue 28 item 4), from the shared fixture
tests/data/tool_names.json: the importer's names and capabilities, what ``check`` accepts (the
ToolSpec loader), and the Python client's model-facing names. The TypeScript client reads the same
fixture (clients/ts/test/names.test.mjs); the MCP gateway serves it from a real upstream
(tests/test_mcp_names.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.base.errors import LoadError
from callgate.client.names import MCP_NAME, import_name, name_of_wire, tool_name_problem, wire_name
from callgate.client.tools import LEGAL_NAME, Tool, ToolNames
from callgate.mcp.importing import assign_names
from callgate.mcp.pins import SideEffect, toolspec_for
from callgate.policy.toolspecs import compile_tool

FIXTURE = json.loads((Path(__file__).parent / "data" / "tool_names.json").read_text(encoding="utf-8"))
UPSTREAM = FIXTURE["upstream"]
TOOLS: list[dict[str, str]] = FIXTURE["tools"]


def _tool(name: str, version: str = "v1") -> Tool:
    return Tool(name, version, "", {"type": "object"}, "read_only", "sha256:x")


def test_import_names_capabilities_and_refusals_are_the_fixtures() -> None:
    refused_names = [n for r in FIXTURE["refused"] for n in (r["upstream_name"], r["clashes_with"])]
    upstream_names = [t["upstream_name"] for t in TOOLS] + refused_names
    naming, refused = assign_names(UPSTREAM, reversed(upstream_names), {})
    assert {k: (v.name, v.capability) for k, v in naming.items()} == {
        t["upstream_name"]: (t["name"], t["capability"]) for t in TOOLS
    }
    clashes = {r["upstream_name"] for r in FIXTURE["refused"]} | {
        r["clashes_with"] for r in FIXTURE["refused"]
    }
    assert set(refused) == clashes  # both sides of a clash, never the rest of the set


@pytest.mark.parametrize("t", TOOLS, ids=[t["upstream_name"][:40] for t in TOOLS])
def test_check_accepts_what_import_writes(t: dict[str, str], tmp_path: Path) -> None:
    doc = toolspec_for(UPSTREAM, {"name": t["upstream_name"], "inputSchema": {"type": "object"}},
                       SideEffect.READ_ONLY, capability=t["capability"], name=t["name"])  # fmt: skip
    path = tmp_path / f"{t['name']}@v1.json"
    path.write_text(json.dumps(doc))
    spec = compile_tool(path).spec
    assert (spec.name, spec.required_capabilities) == (t["name"], (t["capability"],))
    assert doc["upstream"]["tool"] == t["upstream_name"]  # the gateway routes by it


@pytest.mark.parametrize("name", FIXTURE["not_callgate_names"])
def test_names_outside_the_rule_are_refused_by_name(name: str, tmp_path: Path) -> None:
    assert tool_name_problem(name) is not None
    doc: dict[str, Any] = toolspec_for("x", {"name": "t"}, SideEffect.READ_ONLY)
    doc["name"] = name
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(LoadError, match="name"):
        compile_tool(path)


def test_the_python_client_shows_the_fixtures_names_in_any_order() -> None:
    tools = [_tool(t["name"]) for t in TOOLS]
    for order in (tools, tools[::-1]):
        names = ToolNames.build(order)
        for t in TOOLS:
            assert names.legal(t["name"], "v1") == t["wire"] == wire_name(t["name"])
            assert LEGAL_NAME.fullmatch(t["wire"])
            assert names.resolve(t["wire"]) == (t["name"], "v1")
            if "___" not in t["wire"]:
                assert name_of_wire(t["wire"]) == t["name"]  # reversible without the list
    for wire in FIXTURE["unknown_wire_names"]:
        assert ToolNames.build(tools).resolve(wire) is None  # proposed as is: unknown_tool


def test_a_second_version_gets_the_fixtures_name() -> None:
    v = FIXTURE["versions"]
    names = ToolNames.build([_tool(v["name"], ver) for ver in reversed(v["shown"])])
    assert {ver: names.legal(v["name"], ver) for ver in v["shown"]} == v["wire"]


@pytest.mark.parametrize(
    ("upstream", "ok"),
    [("everything", True), ("my-server", True), ("fs_2", True), ("a.b", False), ("a__b", False),
     ("_a", False), ("a@b", False), ("x" * 33, False)],
)  # fmt: skip
def test_upstream_names_are_one_segment_of_a_callgate_name(upstream: str, ok: bool, tmp_path: Path) -> None:
    from callgate.mcp.config import load_gateway_config

    cfg = tmp_path / "callgate.toml"
    cfg.write_text(
        '[server]\nagent = { socket = "a.sock" }\n[policy]\ndir = "p"\n[store]\npath = "s.db"\n'
        f'[[mcp.upstreams]]\nname = "{upstream}"\ncommand = "true"\n'
    )
    if ok:
        load_gateway_config(str(cfg))
    else:
        with pytest.raises(LoadError, match="name' must be 1-32 letters"):
            load_gateway_config(str(cfg))


@settings(max_examples=150, deadline=None)
@given(
    tool=st.from_regex(MCP_NAME, fullmatch=True),
    upstream=st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),
)
def test_every_mcp_name_imports_to_a_callgate_name_with_a_legal_reversible_wire_name(
    tool: str, upstream: str
) -> None:
    name = import_name(upstream, tool)
    assert tool_name_problem(name) is None, name
    wire = wire_name(name)
    assert LEGAL_NAME.fullmatch(wire), wire
    assert name_of_wire(wire) in (name, None)
    if f"{upstream}.{tool}" == name:
        assert len(name) <= 128 and "__" not in tool
