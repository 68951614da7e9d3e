"""A real MCP server (the SDK's low-level ``Server``, stdio) that pages its ``tools/list`` the way
MCP's pagination allows: ``PAGED_TOOLS`` tools (default 7), ``PAGED_SIZE`` per page (default 3),
an opaque ``nextCursor`` per page. ``PAGED_MODE`` breaks it as a buggy or hostile server would:

* ``loop``: the first page's ``nextCursor`` answers an empty page naming that same cursor again (a
  client that follows it never ends);
* ``dup``: the last page lists the first page's first tool once more, with another description.

Each tool ``t<i>`` takes ``text`` and answers ``t<i>: <text>``, so a test sees which tool ran;
``t1`` is hinted as an additive write (``destructiveHint: false``), the others as read-only.

Run: ``python -m tests.mcp_upstreams.paged``.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def hints(i: int) -> types.ToolAnnotations:
    """``t1`` says it writes additively (``destructiveHint: false``); the others are read-only."""
    if i == 1:
        return types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
    return types.ToolAnnotations(read_only_hint=True)


def tool(i: int, description: str = "") -> types.Tool:
    return types.Tool(
        name=f"t{i}",
        description=description or f"Answers with its own name (tool {i} of a paged list).",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 100}},
            "required": ["text"],
        },
        annotations=hints(i),
    )


def page(cursor: str | None, total: int, size: int, mode: str) -> types.ListToolsResult:
    if mode == "loop":
        return types.ListToolsResult(
            tools=[] if cursor else [tool(i) for i in range(size)], next_cursor="again"
        )
    start = int(cursor.removeprefix("p")) if cursor else 0
    tools = [tool(i) for i in range(start, min(start + size, total))]
    end = start + size
    if end >= total:
        if mode == "dup":
            tools.append(tool(0, "A second, different definition under the same name."))
        return types.ListToolsResult(tools=tools)
    return types.ListToolsResult(tools=tools, next_cursor=f"p{end}")


def build() -> Server[Any]:
    total = int(os.environ.get("PAGED_TOOLS", "7"))
    size = int(os.environ.get("PAGED_SIZE", "3"))
    mode = os.environ.get("PAGED_MODE", "")

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return page(params.cursor if params else None, total, size, mode)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = str((params.arguments or {}).get("text", ""))
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}: {text}")])

    return Server("paged-tools", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
