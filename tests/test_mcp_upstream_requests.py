"""Requests an upstream sends the gateway in the middle of a call (``sampling/createMessage``,
``roots/list``, ``elicitation/create``): the gateway declares none of sampling, roots or
elicitation to its upstreams and forwards none of them to its own client (docs/MCP.md,
"Requests from upstreams"). Each is refused at once with a JSON-RPC error naming it (the SDK
client's ``... not supported``), so the upstream's tool ends its call with that error: the MCP
client sees an ``isError`` result naming the refusal, never a wait for the upstream's timeout,
and the gateway and the connection serve the next call.

Upstream: the SDK's ``MCPServer`` of tests/mcp_upstreams/asking.py; client: the official
``mcp`` Python SDK, which itself declares sampling and elicitation (its callbacks answer, and
would let the test see a forwarded request).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.conftest import ROOT, short_tmpdir
from tests.mcp_env import (
    Published,
    cli,
    module_upstream,
    permit_all_folder,
    run,
    stdio,
    stdio_gateway,
    text_of,
    write_config,
    write_principals,
)

pytestmark = pytest.mark.timeout(240)

UPSTREAM = module_upstream("asking", "tests.mcp_upstreams.asking", 40.0)
"""A request left waiting would end the call as the upstream's timeout (``timeout``), not as
the refusal the test expects."""


def make_folder(base: Path) -> Published:
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "cedar" / "policies.cedar").write_text(
        '@id("all") permit (principal == User::"alice", action, resource);\n'
    )
    write_principals(base)
    return Published(base, write_config(base, UPSTREAM), base)


@pytest.fixture
def folder() -> Iterator[Published]:
    base = short_tmpdir()
    try:
        yield make_folder(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def pins() -> Iterator[Path]:
    """``policies/tools`` of one ``callgate mcp import --accept-proposed`` of :data:`UPSTREAM`
    (a folder of its own): the tests that only need it pinned copy it into their fresh folder
    instead of importing the same listing again (a pin names no path of its folder)."""
    base = short_tmpdir()
    try:
        published = make_folder(base)
        r = cli(base, "mcp", "import", "--config", str(published.config), "--accept-proposed")
        assert r.returncode == 0, r.stdout + r.stderr
        yield base / "policies" / "tools"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def imported(folder: Published, pins: Path) -> Published:
    """``folder`` with :data:`UPSTREAM`'s tools pinned (what ``callgate mcp import`` writes)."""
    shutil.copytree(pins, folder.base / "policies" / "tools", dirs_exist_ok=True)
    return folder


@pytest.mark.parametrize(
    ("tool", "arguments", "refusal"),
    [
        ("asking__ask_model", {"question": "2+2?"}, "Sampling not supported"),
        ("asking__ask_roots", {}, "List roots not supported"),
        ("asking__ask_user", {"question": "go on?"}, "Elicitation not supported"),
    ],
)
def test_an_upstream_request_is_refused_at_once(
    imported: Published, tool: str, arguments: dict[str, Any], refusal: str
) -> None:
    folder = imported
    forwarded: list[str] = []

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        forwarded.append("sampling")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="4"), model="client-model"
        )

    async def go() -> None:
        async with stdio(folder, sampling_callback=sampling) as c:
            res = await c.call_tool(tool, arguments)
            assert res.is_error, text_of(res)
            assert refusal in text_of(res), text_of(res)
            again = await c.call_tool("asking__plain", {"text": "next"})
            assert not again.is_error and "plain: next" in text_of(again), text_of(again)

    run(go())
    assert forwarded == []  # never passed on to the gateway's own client


def test_an_upstream_ping_is_answered(imported: Published) -> None:
    """``ping`` from the upstream in the middle of a call is answered by the gateway's client
    session itself (it is no request on anyone's behalf), so the tool answers."""

    async def go() -> None:
        async with stdio(imported) as c:
            res = await c.call_tool("asking__ping_client", {})
            assert not res.is_error and "pong" in text_of(res), text_of(res)

    run(go())


@pytest.mark.node
def test_a_client_s_roots_never_reach_server_filesystem() -> None:
    """The published ``@modelcontextprotocol/server-filesystem`` replaces its allowed
    directories with the client's roots when its client declares ``roots`` (it asks
    ``roots/list`` after ``initialized`` and again on ``notifications/roots/list_changed``).
    Its client is the gateway, which declares no roots: the folder of the config's ``args`` stays
    the only one allowed, whatever the gateway's own client declares. Here that client declares
    ``roots`` (``/`` and a folder beside the allowed one), is never asked for them, and sends
    ``roots/list_changed``: a file outside the configured folder is still refused by the
    upstream, the one inside is read."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.mcp_clients import FILESYSTEM_JS
    from tests.mcp_env import serve_params

    assert FILESYSTEM_JS.is_file(), f"{FILESYSTEM_JS} missing: run scripts/mcp-node install"
    base = short_tmpdir()
    try:
        allowed, outside = base / "allowed", base / "outside"
        allowed.mkdir()
        outside.mkdir()
        (allowed / "in.txt").write_text("inside \u00e9\n")
        (outside / "out.txt").write_text("outside-only-8f2c\n")
        upstream = f"""
[[mcp.upstreams]]
name = "fs"
command = "node"
args = [{json.dumps(str(FILESYSTEM_JS))}, {json.dumps(str(allowed))}]
timeout_seconds = 40.0
"""
        with permit_all_folder(upstream) as env:
            r = cli(env.base, "mcp", "import", "--config", str(env.config), "--accept-proposed")
            assert r.returncode == 0, r.stdout + r.stderr
            asked: list[str] = []

            async def roots(ctx: Any) -> types.ListRootsResult:
                asked.append("roots/list")
                return types.ListRootsResult(
                    roots=[types.Root(uri="file:///"), types.Root(uri=outside.resolve().as_uri())]
                )

            async def go() -> None:
                async with stdio_client(StdioServerParameters(**serve_params(env))) as (rd, wr):
                    async with ClientSession(rd, wr, list_roots_callback=roots) as s:
                        await s.initialize()
                        await s.send_roots_list_changed()
                        res = await s.call_tool("fs__list_allowed_directories", {})
                        assert not res.is_error and str(allowed.resolve()) in text_of(res), text_of(res)
                        assert str(outside) not in text_of(res), text_of(res)
                        res = await s.call_tool("fs__read_text_file", {"path": str(outside / "out.txt")})
                        assert res.is_error and "outside-only" not in text_of(res), text_of(res)
                        assert "Access denied" in text_of(res), text_of(res)
                        res = await s.call_tool("fs__read_text_file", {"path": str(allowed / "in.txt")})
                        assert not res.is_error and "inside \u00e9" in text_of(res), text_of(res)

            run(go())
            assert asked == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


KEY = "asking-key-5ecret-41c2d9e0"
SECRET_UPSTREAM = f"""
[[mcp.upstreams]]
name = "sec"
command = {json.dumps(sys.executable)}
args = ["-m", "tests.mcp_upstreams.asking"]
cwd = {json.dumps(str(ROOT))}
env = {{ ASKING_KEY = {{ secret = "key" }} }}
timeout_seconds = 40.0
"""
SECRET_HEAD = """
[[secrets]]
name = "key"
file = "key.txt"
tools = ["sec.progress_key"]
"""


def test_an_upstream_progress_message_is_redacted(folder: Published) -> None:
    """The secret redeemed for a call, in the upstream's progress message, reaches the client
    as ``[REDACTED:...]`` (like its log messages); before, progress messages were only
    neutralized and the secret was shown."""
    (folder.base / "key.txt").write_text(KEY + "\n")
    write_config(folder.base, UPSTREAM + SECRET_UPSTREAM, head=SECRET_HEAD)
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config), "--accept-proposed")
    assert r.returncode == 0, r.stdout + r.stderr
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async def go() -> None:
        async with stdio_gateway(folder) as (session, seen):
            res = await session.call_tool("sec__progress_key", {}, progress_callback=on_progress)
            assert not res.is_error and "done" in text_of(res), text_of(res)
            assert KEY not in repr(seen)

    run(go())
    upstream = [m for m in messages if m and m.startswith("upstream sec")]
    assert len(upstream) == 1 and "[REDACTED:" in upstream[0], messages
    assert all(KEY not in (m or "") for m in messages), messages


def test_an_upstream_that_cannot_be_listed_after_list_changed_is_announced(imported: Published) -> None:
    """An upstream's ``tools/list_changed`` after which its ``tools/list`` fails: its tools leave
    the gateway's ``tools/list`` and the client is sent ``notifications/tools/list_changed``;
    before, they left silently (the client kept a stale list until it listed again)."""
    folder = imported

    async def go() -> None:
        async with stdio_gateway(folder) as (session, seen):
            assert "asking__plain" in {t.name for t in (await session.list_tools()).tools}
            res = await session.call_tool("asking__break_listing", {})
            assert not res.is_error, text_of(res)
            for _ in range(200):  # the gateway re-lists the upstream in the background
                if any(isinstance(m, types.ToolListChangedNotification) for m in seen):
                    break
                await asyncio.sleep(0.1)
            assert any(isinstance(m, types.ToolListChangedNotification) for m in seen), seen
            names = {t.name for t in (await session.list_tools()).tools}
            assert not {n for n in names if n.startswith("asking__")}, names
            res = await session.call_tool("asking__plain", {"text": "x"})
            assert res.is_error, text_of(res)  # not listed: never run

    run(go())
