"""Awkward tool names from import to call through the MCP gateway (issue 27 item 1): the names of
tests/data/tool_names.json served by a real MCP server (tests/mcp_upstreams/named.py) and the
published ``@modelcontextprotocol/server-everything`` (npm, kebab-case names: ``get-tiny-image``,
``trigger-long-running-operation``), pinned by ``callgate mcp import`` with no hand edit, accepted
by ``callgate check``, listed by ``callgate mcp serve`` under the fixture's model-facing names (the
Python and TypeScript clients show the same: tests/test_toolnames.py, clients/ts/test) and called
by those names with the official MCP Python SDK client and the TypeScript SDK client.

The Cedar actions are declared here (generating them is issue 27 item 3).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.client.names import wire_name
from tests.conftest import short_tmpdir
from tests.mcp_clients import CLIENTS, NODE_DIR, result_text
from tests.mcp_env import CONFIG_HEAD, MCP_HEAD, SCHEMA_HEAD, cli

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((ROOT / "tests" / "data" / "tool_names.json").read_text(encoding="utf-8"))
EVERYTHING_JS = (
    NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
EVERYTHING_TOOLS = {  # server-everything 2026.8.31 (tests/mcp_node/package.json)
    "echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
    "get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
    "toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation",
}  # fmt: skip
"""Its tools but ``simulate-research-query``, which declares ``taskSupport: "required"``: import
skips it and the gateway never lists it (docs/MCP.md, "Tasks")."""
NOT_READ = {"gzip-file-as-resource", "toggle-simulated-logging", "toggle-subscriber-updates"}
"""Imported as writes: the one policy permits reads, so they are hidden by policy (docs/POLICIES.md)."""
ARGS = {"awk": "text: String", "everything.echo": "message: String", "everything.get-tiny-image": ""}
"""The Cedar context of the tools called (by ToolSpec name, or upstream for all of its tools)."""

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[Path, Path, str]]:
    assert EVERYTHING_JS.is_file(), f"{EVERYTHING_JS} missing: run scripts/mcp-node install"
    base = short_tmpdir()
    cedar = base / "policies" / "cedar"
    cedar.mkdir(parents=True)
    (cedar / "policies.cedar").write_text(
        '@id("read")\npermit (principal == User::"alice", action in Action::"read", resource);\n'
    )
    (cedar / "entities.json").write_text(
        json.dumps([{"uid": {"type": "User", "id": "alice"}, "attrs": {"tenant": "acme"}, "parents": []}])
    )
    config = base / "callgate.toml"
    config.write_text(
        CONFIG_HEAD
        + MCP_HEAD
        + f"""
[[mcp.upstreams]]
name = "awk"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.mcp_upstreams.named"]
cwd = {json.dumps(str(ROOT))}
env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}

[[mcp.upstreams]]
name = "everything"
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]
"""
    )
    imported = cli(base, "mcp", "import", "--config", str(config), "--accept-proposed")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    # The Cedar actions of what import wrote: a read group, and the context of the tools called.
    lines = [SCHEMA_HEAD]
    for path in sorted((base / "policies" / "tools").glob("*.json")):
        doc = json.loads(path.read_text())
        group = "read" if doc["side_effect_class"] == "read_only" else "modify"
        args = ARGS.get(doc["name"], ARGS.get(doc["upstream"]["server"])) if group == "read" else None
        context = (
            f", context: {{ tenant: String, tool: String, args: {{ {args} }} }}" if args is not None else ""
        )
        lines.append(
            f'action "{doc["required_capabilities"][0]}" in [{group}] appliesTo '
            f"{{ principal: User, resource: Resource{context} }};"
        )
    (cedar / "schema.cedarschema").write_text("\n".join(lines) + "\n")
    yield base, config, imported.stdout
    shutil.rmtree(base, ignore_errors=True)


def test_import_pins_every_name_and_check_accepts_them(gateway: tuple[Path, Path, str]) -> None:
    base, config, out = gateway
    names = {json.loads(p.read_text())["name"] for p in (base / "policies" / "tools").glob("*.json")}
    assert names == {t["name"] for t in FIXTURE["tools"]} | {f"everything.{t}" for t in EVERYTHING_TOOLS}
    for r in FIXTURE["refused"]:  # a clash refuses the two tools, never the set
        assert f"refused upstream awk tool {r['upstream_name']!r}" in out, out
        assert f"refused upstream awk tool {r['clashes_with']!r}" in out, out
    checked = cli(base, "check", "--config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("client", ["python", "ts"])
def test_the_gateway_lists_and_calls_the_fixtures_names(gateway: tuple[Path, Path, str], client: str) -> None:
    base, config, _ = gateway
    steps: list[dict[str, object]] = [{"op": "list_tools"}]
    steps += [
        {"op": "call", "id": t["upstream_name"], "name": t["wire"], "arguments": {"text": "hi"}}
        for t in FIXTURE["tools"]
    ]
    steps += [
        {"op": "call", "id": "everything", "name": "everything__echo", "arguments": {"message": "hello"}},
        {"op": "call", "id": "kebab", "name": "everything__get-tiny-image", "arguments": {}},
        {"op": "call", "id": "ts-form", "name": "awk_echo", "arguments": {"text": "hi"}},
    ]
    run = CLIENTS[client](
        {
            "server": {
                "command": sys.executable,
                "args": ["-m", "callgate", "mcp", "serve", "--config", str(config)],
                "cwd": str(base),
                "env": {"PYTHONPATH": str(ROOT)},
            },
            "steps": steps,
        },
        timeout=240,
    )
    listed = {t["name"] for t in run.of("tools")[0]["tools"]}
    expected = (
        {t["wire"] for t in FIXTURE["tools"]}
        | {wire_name(f"everything.{t}") for t in EVERYTHING_TOOLS - NOT_READ}
        | {"callgate_result_page"}
    )  # the gateway's paging tool (docs/MCP.md, "Truncated results")
    assert listed == expected
    assert "everything__get-tiny-image" in listed and "awk__getTinyImage" in listed
    for t in FIXTURE["tools"]:
        out = run.outcome(t["upstream_name"])
        assert out.get("isError") is False and f"{t['upstream_name']}: hi" in result_text(out), out
    echo = run.outcome("everything")
    assert echo.get("isError") is False and "hello" in result_text(echo), echo
    kebab = run.outcome("kebab")  # a published server's kebab-case tool, called by its listed name
    assert kebab.get("isError") is False, kebab
    unknown = run.outcome("ts-form")  # no other form of a name is a tool
    assert unknown.get("isError") is True or unknown.get("event") == "error", unknown
