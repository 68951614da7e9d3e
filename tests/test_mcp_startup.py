"""``callgate mcp serve`` is usable with MCP clients' default start-up timeouts (branch
``gwstart``; docs/MCP.md, "Start-up"): ``initialize`` is answered while the embedded sidecar and
the upstreams start in the background, and ``tools/list`` shows an upstream not listed yet from
its pins, without weakening the pin check: nothing is sent to an upstream before its live
``tools/list`` was compared with the pins, and a changed tool is refused as before.

Real parts: the OpenAI Agents SDK's ``MCPServerStdio`` with its **default**
``client_session_timeout_seconds`` (5 s, asserted) and the official ``mcp`` Python client, each
launching ``callgate mcp serve`` (embedded sidecar) in front of three published upstreams the
suite installs: PyPI ``mcp-server-time``, npm ``server-everything`` and npm ``server-memory``.
``memory`` is started through a wrapper that waits before it execs the server (an upstream slow
to start: a cold ``npx``, a container), so the gateway cannot answer in time if it waits for
its upstreams, whatever the machine: before this branch ``initialize`` came after every
upstream was listed and the SDK gave up (``Request 'initialize' timed out``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from agents import Runner
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import short_tmpdir
from tests.mcp_agents_app import RUN, agent, outputs
from tests.mcp_clients import NODE_DIR
from tests.mcp_env import (
    LIST_WAIT,
    ROOT,
    Published,
    payload,
    permit_all_folder,
    run,
    serve_params,
    stdio_gateway,
    text_of,
    write_principals,
)

MODULES = NODE_DIR / "node_modules" / "@modelcontextprotocol"
MEMORY_JS = MODULES / "server-memory" / "dist" / "index.js"
EVERYTHING_JS = MODULES / "server-everything" / "dist" / "index.js"
TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

SLOW_START = (
    "import os, sys, time; from pathlib import Path; "
    "p = Path(sys.argv[1]); time.sleep(float(p.read_text()) if p.exists() else 0.0); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)
"""Waits the seconds written in the file ``argv[1]`` (none: no wait), then execs ``argv[2:]``."""

MEMORY_DELAY_S = 15.0
"""How long ``memory`` takes to start while serving: more than the SDK's 5 s, and than the
gateway's own start on a loaded 2-core machine (so its first tools/list is served from pins)."""

POLICIES = """
@id("reads")
permit (principal == User::"alice", action in Action::"read", resource);

@id("memory-create")
permit (principal == User::"alice", action == Action::"mcp.memory.create_entities", resource);
"""

SDK_DEFAULT_TIMEOUT_S = 5.0


def config_text(base: Path) -> str:
    """Sockets under ``run/``, the stores, alice on stdio; no ``[mcp]`` timing key: defaults."""
    return f"""
[server]
agent = {{ socket = "run/a.sock" }}
confirmer = {{ socket = "run/c.sock" }}
authorizer = {{ socket = "run/z.sock" }}
executor = {{ socket = "run/x.sock" }}
[policy]
dir = "policies"
[store]
path = "var/cg.db"
synchronous = "normal"
[idempotency]
path = "var/idem.db"

[mcp.identity]
tenant = "acme"
user = "alice"

[[mcp.upstreams]]
name = "time"
command = {json.dumps(str(TIME_SERVER))}
args = ["--local-timezone", "Europe/Oslo"]
timeout_seconds = 60.0

[[mcp.upstreams]]
name = "everything"
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]
timeout_seconds = 60.0

[[mcp.upstreams]]
name = "memory"
command = {json.dumps(sys.executable)}
args = ["-c", {json.dumps(SLOW_START)}, {json.dumps(str(base / "memory-delay"))}, "node", {json.dumps(str(MEMORY_JS))}]
env = {{ MEMORY_FILE_PATH = {json.dumps(str(base / "memory.jsonl"))} }}
timeout_seconds = 60.0
"""


@pytest.fixture(name="gw")
def gw_fixture() -> Iterator[Published]:
    """The folder, pinned by ``callgate mcp import --accept-proposed`` (memory starts at once
    during the import), then ``memory`` made slow to start."""
    for path in (MEMORY_JS, EVERYTHING_JS):
        assert path.is_file(), f"{path} missing: run scripts/mcp-node install"
    assert TIME_SERVER.is_file(), f"{TIME_SERVER} missing: run scripts/bootstrap"
    base = short_tmpdir()
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
    write_principals(base)
    config = base / "callgate.toml"
    config.write_text(config_text(base))
    env = Published(base, config, base / "memory.jsonl")
    out = env.import_pins(declare_rest=False)
    assert "memory.read_graph@v1" in out and "time.get_current_time@v1" in out, out
    (base / "memory-delay").write_text(str(MEMORY_DELAY_S))
    yield env


def invocation_states(env: Published, tool: str) -> list[str]:
    path = env.base / "var" / "cg.db"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT state FROM invocations WHERE tool_name = ?", (tool,)).fetchall()
        return [str(r[0]) for r in rows]
    finally:
        db.close()


def entities(env: Published) -> list[str]:
    if not env.data.exists():
        return []
    lines = [json.loads(line) for line in env.data.read_text().splitlines() if line.strip()]
    return sorted(e["name"] for e in lines if e.get("type") == "entity")


def test_agents_sdk_with_its_default_timeout_lists_and_calls(gw: Published) -> None:
    """``MCPServerStdio`` as the SDK's docs write it, ``client_session_timeout_seconds`` left at
    its default: connect (``initialize``), list the tools (the slow upstream's from its pins) and
    a run whose model calls ``time__get_current_time``; the model gets the time."""
    server = MCPServerStdio(params=serve_params(gw), name="callgate")
    assert server.client_session_timeout_seconds == SDK_DEFAULT_TIMEOUT_S  # the SDK's default

    async def go() -> tuple[list[str], dict[str, str], Any]:
        async with server:
            names = [t.name for t in await server.list_tools()]
            model = ScriptedModel(
                [
                    [function_call("time__get_current_time", {"timezone": "Europe/Oslo"}, call_id="t1")],
                    [assistant_message("done")],
                ]
            )
            result = await Runner.run(agent(server, model), "what time is it in Oslo?", run_config=RUN)
            return names, outputs(result), result

    names, out, result = asyncio.run(asyncio.wait_for(go(), 120))
    assert {"time__get_current_time", "time__convert_time"} <= set(names), names
    assert "memory__read_graph" in names, names  # memory not up yet: shown from its pin
    assert "everything__echo" in names, names
    assert "Europe/Oslo" in out["t1"], out
    assert result.final_output == "done"


def test_python_client_a_call_to_an_upstream_still_starting_waits_for_its_listing(gw: Published) -> None:
    """The ``mcp`` client with a 5 s read timeout too for the handshake and the first list; a
    call to the slow upstream's tool waits until the upstream is listed and its definition
    compared with the pin, then runs; the client is told ``tools/list_changed`` once it is."""
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async def go() -> tuple[float, float, list[str], types.CallToolResult, float]:
        t0 = time.monotonic()
        async with stdio_client(StdioServerParameters(**serve_params(gw))) as (read, write):
            async with ClientSession(
                read, write, read_timeout_seconds=SDK_DEFAULT_TIMEOUT_S, message_handler=on_message
            ) as s:  # fmt: skip
                await s.initialize()
                t_init = time.monotonic() - t0
                names = [t.name for t in (await s.list_tools()).tools]
                t_list = time.monotonic() - t0
                r = await s.call_tool(
                    "memory__create_entities",
                    {"entities": [{"name": "ada", "entityType": "person", "observations": ["counts"]}]},
                    read_timeout_seconds=120,
                )
                t_call = time.monotonic() - t0
                return t_init, t_list, names, r, t_call

    t_init, t_list, names, r, t_call = asyncio.run(asyncio.wait_for(go(), 150))
    assert t_init < SDK_DEFAULT_TIMEOUT_S and t_list < 2 * SDK_DEFAULT_TIMEOUT_S, (t_init, t_list)
    assert "memory__create_entities" in names and "time__get_current_time" in names, names
    assert not r.is_error, text_of(r)
    assert t_call >= MEMORY_DELAY_S, t_call  # it waited for memory's listing
    assert entities(gw) == ["ada"]  # ran once, after the pin was checked
    assert any(isinstance(m, types.ToolListChangedNotification) for m in seen), seen


def test_a_tool_whose_live_definition_no_longer_matches_its_pin_is_refused_when_listed_from_pins(
    gw: Published,
) -> None:
    """The slow upstream's ``create_entities`` pin altered (as if the upstream had changed the
    tool after approval): the first tools/list, served before ``memory`` is up, shows it from
    the pin; the call waits for the listing and is refused ``upstream_definition_changed``;
    nothing reaches the upstream; the next tools/list no longer shows it."""
    gw.alter_pin("memory.create_entities")

    async def go() -> tuple[list[str], types.CallToolResult, list[str]]:
        async with stdio_client(StdioServerParameters(**serve_params(gw))) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as s:
                await s.initialize()
                first = [t.name for t in (await s.list_tools()).tools]
                r = await s.call_tool(
                    "memory__create_entities",
                    {"entities": [{"name": "mallory", "entityType": "person", "observations": []}]},
                )
                after = [t.name for t in (await s.list_tools()).tools]
                return first, r, after

    first, r, after = asyncio.run(asyncio.wait_for(go(), 150))
    assert "memory__create_entities" in first, first  # shown from the pin: memory not listed yet
    assert r.is_error and payload(r)["code"] == "upstream_definition_changed", text_of(r)
    assert entities(gw) == [] and not gw.data.exists()  # never sent
    assert invocation_states(gw, "memory.create_entities") == ["CANCELLED_BEFORE_COMMIT"]
    assert "memory__create_entities" not in after and "memory__read_graph" in after, after


def test_a_start_that_fails_after_initialize_answers_the_waiting_request_and_exits_2(gw: Published) -> None:
    """The embedded sidecar cannot start (its store's folder cannot be made): ``initialize`` was
    answered already; the ``tools/list`` waiting for the start gets JSON-RPC -32603 (nothing ran)
    and the process ends with exit 2 and ``cannot start`` in its log, the client's stdin still
    open (its reader thread would otherwise keep the process alive)."""
    bad = gw.base / "bad.toml"
    bad.write_text(gw.config.read_text().replace('path = "var/cg.db"', 'path = "/proc/nonexistent/cg.db"'))
    params = serve_params(gw)
    args = [*params["args"][:-1], str(bad)]
    err = gw.base / "bad.log"
    with err.open("wb") as log:
        proc = subprocess.Popen(
            [params["command"], *args], cwd=gw.base, env={**os.environ, **params["env"]},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for msg in (
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                 "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            ):  # fmt: skip
                proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()
            answers = [json.loads(line) for line in (proc.stdout.readline(), proc.stdout.readline())]
            code = proc.wait(60)  # stdin left open
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert answers[0]["id"] == 1 and "result" in answers[0], answers
    assert answers[1]["id"] == 2 and answers[1]["error"]["code"] == -32603, answers
    assert "could not start" in answers[1]["error"]["message"], answers
    assert code == 2
    assert "cannot start" in err.read_text(), err.read_text()[-2000:]


GATED_START = (
    "import os, sys, time; from pathlib import Path; "
    "p = Path(sys.argv[1]); end = time.monotonic() + 120; "
    "[time.sleep(0.05) for _ in iter(lambda: p.exists() or time.monotonic() > end, True)]; "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)
"""Waits until the file ``argv[1]`` exists (at most 120 s), then execs ``argv[2:]``: an upstream
that is listed exactly when the test lets it."""


def entries(tools: list[types.Tool], prefix: str) -> dict[str, str]:
    """``tools/list`` entries of one upstream as JSON text (camelCase, members the SDK got)."""
    return {
        t.name: t.model_dump_json(by_alias=True, exclude_none=True)
        for t in tools
        if t.name.startswith(prefix)
    }


def test_a_tool_shown_from_its_pin_looks_as_the_listed_tool_with_title_and_hints() -> None:
    """The SDK upstream of tests/mcp_upstreams/rich.py (``media``: a ``title``, all four hints)
    held back until the first ``tools/list`` was answered from the pins (``list_wait_seconds =
    0``): each entry is the same JSON before and after its upstream was listed. Before, a tool
    shown from its pin lacked ``title``, ``idempotentHint``, ``openWorldHint`` and the upstream's
    ``destructiveHint: false``. A pin written before import kept them (its ``upstream`` block
    without ``title``/``annotations``) still loads and is shown with callgate's hints only."""
    gate = "gate"
    up = f"""
[[mcp.upstreams]]
name = "rich"
command = {json.dumps(sys.executable)}
args = ["-c", {json.dumps(GATED_START)}, {json.dumps(gate)}, {json.dumps(sys.executable)}, "-W", "ignore",
        "-m", "tests.mcp_upstreams.rich"]
cwd = {json.dumps(str(ROOT))}
env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}
timeout_seconds = 60.0
"""
    with permit_all_folder(up) as env:
        gate_file = env.base / gate
        cfg = env.config.read_text().replace(LIST_WAIT, "list_wait_seconds = 0")
        env.config.write_text(cfg.replace(json.dumps(gate), json.dumps(str(gate_file))))
        gate_file.touch()  # listed at once during the import
        env.import_pins(declare_rest=False)
        gate_file.unlink()
        old = env.tools_dir / "rich.big@v1.json"  # as written before the pin kept title and annotations
        doc = json.loads(old.read_text())
        assert doc["upstream"]["annotations"]["idempotentHint"] is True, doc["upstream"]
        doc["upstream"] = {k: doc["upstream"][k] for k in ("server", "tool", "definition_sha256")}
        old.write_text(json.dumps(doc, indent=2) + "\n")
        media = json.loads((env.tools_dir / "rich.media@v1.json").read_text())["upstream"]
        assert media["title"] == "Media sampler", media

        async def go() -> tuple[dict[str, str], dict[str, str]]:
            async with stdio_gateway(env) as (s, seen):
                first = entries((await s.list_tools()).tools, "rich__")
                changed = [m for m in seen if isinstance(m, types.ToolListChangedNotification)]
                assert not changed, seen  # the upstream is held back: these came from the pins
                gate_file.touch()
                for _ in range(1200):
                    if any(isinstance(m, types.ToolListChangedNotification) for m in seen):
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError(f"no tools/list_changed after the upstream was let start: {seen}")
                return first, entries((await s.list_tools()).tools, "rich__")

        first, live = run(go(), 150)
    assert "rich__media" in first and set(first) == set(live), (first, live)
    shown = json.loads(first["rich__media"])
    assert shown["title"] == "Media sampler", shown
    assert shown["annotations"] == {
        "readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False,
    }, shown  # fmt: skip
    for name in first:
        if name != "rich__big":
            assert first[name] == live[name], (name, first[name], live[name])
    # the old pin: callgate's hint only until the listing; then as listed
    assert json.loads(first["rich__big"])["annotations"] == {"readOnlyHint": True}, first["rich__big"]
    assert json.loads(live["rich__big"])["annotations"]["idempotentHint"] is True, live["rich__big"]
