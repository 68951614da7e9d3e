"""A real MCP server (the SDK's low-level ``Server``, stdio) with two tools whose ``inputSchema``
is the shape published servers send:

* ``read_pdf``: what npm ``@sylphlab/pdf-reader-mcp`` 0.3.23 lists (zod-to-json-schema's older
  output): ``"exclusiveMinimum": true`` beside ``"minimum": 0``, draft-04's boolean form, which is
  not JSON Schema 2020-12 (there ``exclusiveMinimum`` is a number);
* ``echo``: a plain 2020-12 schema.

Each tool answers ``<name>: <arguments as JSON>``.

Run: ``python -m tests.mcp_upstreams.draft04``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

READ_PDF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sources": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1},
                    "pages": {
                        "anyOf": [
                            {
                                "type": "array",
                                "items": {"type": "integer", "exclusiveMinimum": True, "minimum": 0},
                                "minItems": 1,
                            },
                            {"type": "string", "minLength": 1},
                        ]
                    },
                },
                "additionalProperties": False,
            },
            "minItems": 1,
        }
    },
    "required": ["sources"],
    "additionalProperties": False,
}

TOOLS = [
    types.Tool(
        name="read_pdf",
        description="Reads PDFs (schema as @sylphlab/pdf-reader-mcp 0.3.23 lists it).",
        input_schema=READ_PDF_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="echo",
        description="Answers with its arguments.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
]


def build() -> Server[Any]:
    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = f"{params.name}: {json.dumps(params.arguments or {}, sort_keys=True)}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("draft04-schemas", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
