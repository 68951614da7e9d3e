"""A tiny MCP server (official Python SDK) that asks its client to confirm through elicitation
and reports progress: the harness self-test in tests/test_mcp_upstreams.py runs it over stdio to
prove both clients answer elicitation per their scripted choice, over stdio
(``python elicit_server.py``) and over streamable HTTP (``python elicit_server.py --http PORT``:
``http://127.0.0.1:PORT/mcp``)."""

from __future__ import annotations

import sys
from typing import Annotated

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

server = MCPServer("elicit-test")


class Confirm(BaseModel):
    confirm: bool


def ask(what: str) -> Elicit[Confirm]:
    return Elicit(f"Run the action {what!r}?", Confirm)


@server.tool()
async def act(what: str, answer: Annotated[ElicitationResult[Confirm], Resolve(ask)], ctx: Context) -> str:
    """Ask the client to confirm, then say what happened."""
    await ctx.report_progress(1, 2, "asked")
    if isinstance(answer, AcceptedElicitation) and answer.data.confirm:
        return f"done {what}"
    return f"not done {what} ({answer.action})"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), streamable_http_path="/mcp")
    else:
        server.run("stdio")
