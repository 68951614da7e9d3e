"""A real MCP server (the SDK's low-level ``Server``, stdio) whose one tool gives a JSON ``null``
its own meaning, as published servers do (FastMCP's ``limit: int | None = 10``):

* ``search``: ``q`` (required) and ``limit``, ``anyOf: [integer, null]`` with ``"default": 10``:
  absent is 10 results, ``null`` is no limit.

It answers ``got <its arguments as JSON, keys sorted>``, so a test sees what reached it.

Run: ``python -m tests.mcp_upstreams.nulls``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

SEARCH = types.Tool(
    name="search",
    description="Searches; limit: absent is 10 results, null is no limit.",
    input_schema={
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 10},
        },
        "required": ["q"],
    },
    annotations=types.ToolAnnotations(read_only_hint=True),
)


def build() -> Server[Any]:
    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[SEARCH])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = "got " + json.dumps(params.arguments or {}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("null-meaning", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
