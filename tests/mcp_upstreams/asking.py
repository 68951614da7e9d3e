"""A real MCP server (the SDK's ``MCPServer``, stdio) whose tools each send the client a request
of their own in the middle of a call: ``ask_model`` sends ``sampling/createMessage``,
``ask_roots`` sends ``roots/list`` and ``ask_user`` sends ``elicitation/create``. Each answers
with what the client answered, or lets the client's error end the call. ``ping_client`` sends
``ping`` (which every MCP client answers) and answers ``pong``. ``plain`` asks nothing;
``progress_key`` reports progress whose message holds the environment variable ``ASKING_KEY``
(a secret the gateway redeemed for the call), then answers ``done``; ``break_listing`` makes
every later ``tools/list`` an error and sends ``notifications/tools/list_changed``.

callgate's gateway declares none of sampling, roots or elicitation to its upstreams (docs/MCP.md,
"Requests from upstreams"), so each request is refused at once by the gateway's client session.

Run: ``python -m tests.mcp_upstreams.asking``.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel

warnings.simplefilter("ignore")  # sampling and roots are deprecated by 2026-07-28, still sent

READ = ToolAnnotations(read_only_hint=True)


class Confirm(BaseModel):
    ok: bool


def build() -> MCPServer:
    server = MCPServer("asking-upstream")

    @server.tool(description="Ask the client's model one question (sampling).", annotations=READ)
    async def ask_model(question: str, ctx: Context) -> str:
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))
        answer = await ctx.session.create_message([message], max_tokens=16)
        return f"model said: {answer.content}"

    @server.tool(description="Ask the client for its roots.", annotations=READ)
    async def ask_roots(ctx: Context) -> str:
        roots = await ctx.session.list_roots()
        return f"roots: {[str(r.uri) for r in roots.roots]}"

    @server.tool(description="Ask the user to confirm (elicitation).", annotations=READ)
    async def ask_user(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, Confirm)
        return f"user said: {answer.action}"

    @server.tool(description="Ping the client, then answer.", annotations=READ)
    async def ping_client(ctx: Context) -> str:
        await ctx.session.send_ping()
        return "pong"

    @server.tool(description="Answers without asking anything.", annotations=READ)
    def plain(text: str) -> str:
        return f"plain: {text}"

    @server.tool(description="Report progress naming the key it was given.", annotations=READ)
    async def progress_key(ctx: Context) -> str:
        await ctx.report_progress(1, 2, f"working with key {os.environ.get('ASKING_KEY', '')}")
        return "done"

    broken: list[bool] = []
    listing = server.list_tools

    async def list_tools() -> Any:
        if broken:
            raise RuntimeError("this server can no longer list its tools")
        return await listing()

    server.list_tools = list_tools  # type: ignore[method-assign]

    @server.tool(description="Break tools/list from now on and say the tools changed.", annotations=READ)
    async def break_listing(ctx: Context) -> str:
        broken.append(True)
        await ctx.session.send_tool_list_changed()
        return "broken"

    return server


if __name__ == "__main__":
    build().run("stdio")
