"""JSON ``number`` arguments through the gateway (issue 27 item 3), with the published
``@modelcontextprotocol/server-everything`` (tests/mcp_node) as the upstream: its ``get-sum``
takes two JSON numbers. ``callgate mcp import`` declares them as Cedar decimals (a ``decimal``
normalizer, scale 4, and a ``normalized_schema``), the generated action types them so, policies
compare them, and the upstream still receives numbers. Driven by the official MCP SDK client over
stdio to ``callgate mcp serve``.

Also: ``callgate check`` names (file and tool) an action declared by hand without the context
every request carries, so that no request can ever be allowed for it (docs/MCP.md used to show
such declarations).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, short_tmpdir
from tests.markers import Needs, require
from tests.mcp_clients import NODE_DIR
from tests.mcp_env import (
    Published,
    accept,
    cli,
    payload,
    run,
    stdio_gateway,
    text_of,
    write_config,
    write_principals,
)

pytestmark = pytest.mark.node

EVERYTHING_JS = (
    NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
KEEP = ("get-sum", "trigger-long-running-operation")

POLICIES = """
@id("sum-small")
permit (principal, action == Action::"mcp.everything.get_sum", resource)
when { context.args.a.lessThan(decimal("100.0")) && context.args.b.lessThan(decimal("100.0")) };

@id("sum-large-confirm")
@confirm("adding large numbers needs the user's OK")
permit (principal, action == Action::"mcp.everything.get_sum", resource)
when { context.args.a.greaterThanOrEqual(decimal("100.0")) };

@id("no-negative")
forbid (principal, action == Action::"mcp.everything.get_sum", resource)
when { context.args.a.lessThan(decimal("0.0")) || context.args.b.lessThan(decimal("0.0")) };
"""


@pytest.fixture
def base() -> Iterator[Path]:
    require(Needs.NODE)
    assert EVERYTHING_JS.is_file(), f"{EVERYTHING_JS} missing: run scripts/mcp-node install"
    b = short_tmpdir()
    (b / "policies" / "cedar").mkdir(parents=True)
    write_principals(b)
    (b / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
    write_config(
        b,
        f"""
[[mcp.upstreams]]
name = "everything"
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]
timeout_seconds = 30.0
""",
    )
    yield b
    shutil.rmtree(b, ignore_errors=True)


def import_numbers(base: Path) -> Path:
    """Import, then keep the two tools with number arguments (the others are other issues'),
    under the names import gives them (kebab-case kept: docs/MCP.md "Tool names")."""
    r = cli(base, "mcp", "import", "--config", "callgate.toml", "--accept-proposed")
    assert r.returncode == 0, r.stdout + r.stderr
    tools = base / "policies" / "tools"
    for path in sorted(tools.glob("*.json")):
        if json.loads(path.read_text())["upstream"]["tool"] not in KEEP:
            path.unlink()
    return tools


def test_the_policies_are_the_docs() -> None:
    """docs/MCP.md "From import to allow, confirm and deny" shows these policies and these names."""
    doc = (ROOT / "docs" / "MCP.md").read_text(encoding="utf-8")
    section = doc[doc.index("## From import to allow, confirm and deny") : doc.index("## Arguments as")]
    assert POLICIES.strip() in section
    prose = " ".join(section.split())
    assert "the client calls `everything__get-sum`" in prose and "rename" not in prose


@pytest.mark.timeout(200)
def test_number_arguments_are_cedar_decimals_and_reach_the_upstream_as_numbers(base: Path) -> None:
    tools = import_numbers(base)
    doc = json.loads((tools / "everything.get-sum@v1.json").read_text())
    assert [n["field"] for n in doc["normalizers"]] == ["/a", "/b"], doc
    assert doc["normalized_schema"]["properties"]["a"]["type"] == "string"
    assert doc["normalized_schema"]["additionalProperties"] is False
    # no hand-written schema: the actions are generated, numbers typed as decimal
    r = cli(base, "check", "--config", "callgate.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "everything.get-sum@v1" in r.stdout and "everything.trigger-long-running-operation@v1" in r.stdout
    yes = accept(True)

    async def go() -> None:
        env = Published(base, base / "callgate.toml", base)
        async with stdio_gateway(env, yes) as (s, _):
            names = {t.name for t in (await s.list_tools()).tools}
            assert "everything__get-sum" in names, names
            # allow: both under 100; the upstream adds the numbers it got
            r = await s.call_tool("everything__get-sum", {"a": 2.5, "b": 40})
            assert not r.is_error, text_of(r)
            assert "42.5" in payload(r)["data"], text_of(r)
            # confirm: a >= 100 asks the user, then runs
            r = await s.call_tool("everything__get-sum", {"a": 150, "b": 0.25})
            assert not r.is_error, text_of(r)
            assert "150.25" in payload(r)["data"], text_of(r)
            assert len(yes.asked) == 1 and '"a": "150.0000"' in yes.asked[0]  # type: ignore[attr-defined]
            # deny: a forbid on a negative number
            r = await s.call_tool("everything__get-sum", {"a": -1, "b": 2})
            assert r.is_error and payload(r)["status"] == "denied", text_of(r)
            assert payload(r)["reasons"] == ["policy_forbid"], text_of(r)
            # an argument the Cedar record has no room for: a schema violation naming it, not
            # a policy error (the imported normalized_schema closes the object)
            r = await s.call_tool("everything__get-sum", {"a": 1, "b": 2, "c": 3})
            assert r.is_error and payload(r)["code"] == "schema_violation", text_of(r)
            assert "/c" in text_of(r) or "'c'" in text_of(r), text_of(r)
            # more fractional digits than Cedar's decimal keeps: refused, never rounded
            r = await s.call_tool("everything__get-sum", {"a": 1.23456, "b": 1})
            assert r.is_error and payload(r)["code"] == "decimal_invalid", text_of(r)

    run(go(), 180)


def test_check_names_an_action_no_request_can_match(base: Path) -> None:
    import_numbers(base)
    schema = base / "policies" / "cedar" / "schema.cedarschema"
    schema.write_text(
        "entity Role in [Role];\nentity User in [Role] { tenant: String };\n"
        "entity Resource { kind: String, name: String, tenant: String };\n"
        "action read, create, modify, delete;\n"
        # declared by hand without a context: every request carries one, so none conforms
        'action "mcp.everything.get_sum" in [read] appliesTo { principal: User, resource: Resource };\n'
        'action "mcp.everything.trigger_long_running_operation" in [read] appliesTo { principal: User, '
        "resource: Resource, context: { tenant: String, tool: String, args: { duration?: decimal, "
        "steps?: decimal } } };\n"
    )
    # a policy that reads no context validates against it (as docs/MCP.md once showed)
    (base / "policies" / "cedar" / "policies.cedar").write_text(
        '@id("sum") permit (principal, action == Action::"mcp.everything.get_sum", resource);\n'
    )
    r = cli(base, "check", "--config", "callgate.toml")
    out = r.stdout + r.stderr
    assert "everything.get-sum@v1.json" in out and "tool everything.get-sum@v1" in out, out
    assert "no request can ever be allowed: action mcp.everything.get_sum" in out, out
    assert "declares no context" in out, out
    assert "trigger-long-running-operation@v1.json" not in out, out  # that one can match
