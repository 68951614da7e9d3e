"""Two more published MCP servers as real upstreams (issue 27, tests), taken as a new user would:
``callgate mcp import --accept-proposed`` then ``callgate check`` with no hand edit at all (no
hand-written Cedar schema: every action is generated from the imported ToolSpecs), then serve,
list and call with allow, confirm and deny under policies written here, driven by the official MCP
Python SDK client over stdio and over streamable HTTP:

* ``time``: PyPI ``mcp-server-time`` (``--local-timezone Europe/Oslo``): string arguments,
  read-only tools hinted so (imported without a proposal to accept);
* ``memory``: npm ``@modelcontextprotocol/server-memory`` (tests/mcp_node, the installed
  ``dist/index.js`` run with node) on a file of this test (``MEMORY_FILE_PATH``): arrays of
  objects (Cedar ``Set<{...}>``), writes whose effects are counted in that file.

docs/MCP.md ("Upstream × MCP feature") has the rows these tests fill.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import short_tmpdir
from tests.mcp_clients import NODE_DIR
from tests.mcp_env import (
    Published,
    accept,
    cli,
    http_gateway,
    http_session,
    payload,
    run,
    stdio_gateway,
    text_of,
    write_config,
    write_principals,
)

MEMORY_JS = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")
TOKEN = secrets.token_urlsafe(32)

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

POLICIES = """
@id("reads")
permit (principal == User::"alice", action in Action::"read", resource);

@id("no-antarctica")
forbid (principal, action == Action::"mcp.time.get_current_time", resource)
when { context.args.timezone like "Antarctica/*" };

@id("tokyo-needs-user")
@confirm("converting to Tokyo time needs the user's OK")
permit (principal == User::"alice", action == Action::"mcp.time.convert_time", resource)
when { context.args.target_timezone == "Asia/Tokyo" };

@id("memory-create")
permit (principal == User::"alice", action in Action::"create", resource);

@id("memory-delete-needs-user")
@confirm("deleting from the memory graph needs the user's OK")
permit (principal == User::"alice", action == Action::"mcp.memory.delete_entities", resource);

@id("memory-keep-alice")
forbid (principal, action == Action::"mcp.memory.delete_entities", resource)
when { context.args.entityNames.contains("alice") };
"""


@pytest.fixture(scope="module")
def wild() -> Iterator[Published]:
    """Import and check, as a new user would: nothing edited between import and serve."""
    assert MEMORY_JS.is_file(), f"{MEMORY_JS} missing: run scripts/mcp-node install"
    assert TIME_SERVER.is_file(), f"{TIME_SERVER} missing: run scripts/bootstrap"
    base = short_tmpdir()
    memory = base / "memory.jsonl"
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
    write_principals(base)
    config = write_config(
        base,
        f"""
[[mcp.upstreams]]
name = "time"
command = {json.dumps(str(TIME_SERVER))}
args = ["--local-timezone", "Europe/Oslo"]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "memory"
command = "node"
args = [{json.dumps(str(MEMORY_JS))}]
env = {{ MEMORY_FILE_PATH = {json.dumps(str(memory))} }}
timeout_seconds = 30.0
""",
        tokens={TOKEN: "alice"},
    )
    env = Published(base, config, memory)
    out = env.import_pins(declare_rest=False)
    assert "pinned time.get_current_time@v1 read_only (readOnlyHint)" in out, out
    assert "pinned memory.delete_entities@v1 modify (accepted proposal)" in out, out
    assert not (base / "policies" / "cedar" / "schema.cedarschema").exists()
    r = cli(base, "check", "--config", str(config), "--offline")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: 11 tools" in r.stdout and "warning" not in r.stdout + r.stderr, r.stdout + r.stderr
    for action in ("mcp.time.convert_time", "mcp.memory.create_entities", "mcp.memory.delete_entities"):
        assert action in r.stdout, r.stdout
    yield env


def entities(memory: Path) -> list[str]:
    """The entity names the memory server has written to its file."""
    if not memory.exists():
        return []
    lines = [json.loads(line) for line in memory.read_text().splitlines() if line.strip()]
    return sorted(e["name"] for e in lines if e.get("type") == "entity")


def denied(r: Any, reason: str) -> bool:
    return bool(r.is_error) and payload(r)["status"] == "denied" and payload(r)["reasons"] == [reason]


def test_time_and_memory_over_stdio(wild: Published) -> None:
    yes = accept(True)

    async def go() -> None:
        async with stdio_gateway(wild, yes) as (s, _):
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert {"time__get_current_time", "time__convert_time", "memory__create_entities"} <= set(tools)
            # 11 pinned; the two no policy permits are hidden by policy (docs/POLICIES.md)
            assert len([n for n in tools if n.startswith(("time__", "memory__"))]) == 9, tools
            assert not {"memory__delete_observations", "memory__delete_relations"} & set(tools), tools
            # annotations: readOnlyHint is the side-effect class import recorded
            hints = {n: t.annotations.read_only_hint for n, t in tools.items() if t.annotations}
            assert hints["time__get_current_time"] and hints["memory__read_graph"], hints
            assert hints["memory__delete_entities"] is False, hints
            # time: allow, confirm (asked, then runs), deny (a forbid on the argument)
            r = await s.call_tool("time__get_current_time", {"timezone": "Europe/Oslo"})
            assert not r.is_error and "Europe/Oslo" in text_of(r), text_of(r)
            # structuredContent passes, checked by the SDK client against the tool's outputSchema
            assert (r.structured_content or {}).get("timezone") == "Europe/Oslo", r
            args = {"source_timezone": "Europe/Oslo", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            r = await s.call_tool("time__convert_time", args)
            assert not r.is_error and "Asia/Tokyo" in text_of(r), text_of(r)
            assert len(yes.asked) == 1 and "Asia/Tokyo" in yes.asked[0]  # type: ignore[attr-defined]
            r = await s.call_tool("time__get_current_time", {"timezone": "Antarctica/Troll"})
            assert denied(r, "policy_forbid"), text_of(r)
            # memory: allow (written), confirm (asked, then deleted), deny (nothing deleted)
            people = [
                {"name": n, "entityType": "person", "observations": [f"{n} likes tea"]}
                for n in ("alice", "bob")
            ]
            r = await s.call_tool("memory__create_entities", {"entities": people})
            assert not r.is_error, text_of(r)
            assert entities(wild.data) == ["alice", "bob"]
            r = await s.call_tool("memory__delete_entities", {"entityNames": ["bob"]})
            assert not r.is_error, text_of(r)
            assert len(yes.asked) == 2 and '"bob"' in yes.asked[1]  # type: ignore[attr-defined]
            assert entities(wild.data) == ["alice"]
            r = await s.call_tool("memory__delete_entities", {"entityNames": ["alice", "carol"]})
            assert denied(r, "policy_forbid"), text_of(r)
            assert len(yes.asked) == 2 and entities(wild.data) == ["alice"]
            # an argument no declared action has room for: named, before any policy
            r = await s.call_tool("memory__search_nodes", {"query": "tea", "limit": 3})
            assert r.is_error and payload(r)["code"] == "schema_violation", text_of(r)
            assert "limit" in text_of(r), text_of(r)

    run(go(), 200)


def test_time_and_memory_over_streamable_http(wild: Published) -> None:
    no = accept(False)

    async def go(port: int) -> None:
        async with http_session(f"http://127.0.0.1:{port}/mcp", TOKEN, no) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"time__convert_time", "memory__delete_entities"} <= names, names
            r = await s.call_tool("time__get_current_time", {"timezone": "Asia/Tokyo"})
            assert not r.is_error and "Asia/Tokyo" in text_of(r), text_of(r)
            r = await s.call_tool(
                "memory__create_entities",
                {"entities": [{"name": "dave", "entityType": "person", "observations": []}]},
            )
            assert not r.is_error and "dave" in entities(wild.data), text_of(r)
            # confirm declined over HTTP: asked, never runs
            r = await s.call_tool("memory__delete_entities", {"entityNames": ["dave"]})
            assert r.is_error and payload(r)["code"] == "confirmation_declined", text_of(r)
            assert len(no.asked) == 1 and "dave" in entities(wild.data)  # type: ignore[attr-defined]
            r = await s.call_tool("time__get_current_time", {"timezone": "Antarctica/Casey"})
            assert denied(r, "policy_forbid"), text_of(r)
            r = await s.call_tool("memory__read_graph", {})
            assert not r.is_error and "dave" in text_of(r), text_of(r)
            assert "dave" in [e["name"] for e in (r.structured_content or {}).get("entities", [])], r

    with http_gateway(wild) as port:
        run(go(port), 200)
