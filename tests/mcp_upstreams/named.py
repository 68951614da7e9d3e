"""A real MCP server (the SDK's ``MCPServer``, stdio) whose tools carry the awkward names of
tests/data/tool_names.json (every upstream name there, the refused clash included). Each tool takes
``text`` and answers ``<its upstream name>: <text>``, so a test sees which tool ran.

Run: ``python -m tests.mcp_upstreams.named``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "tool_names.json"


def upstream_names() -> list[str]:
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    refused = [n for r in doc["refused"] for n in (r["upstream_name"], r["clashes_with"])]
    return [t["upstream_name"] for t in doc["tools"]] + refused


def _answer(name: str) -> Callable[[str], str]:
    def answer(text: str) -> str:
        return f"{name}: {text}"

    return answer


def build() -> MCPServer:
    server = MCPServer("awkward-names")
    for name in upstream_names():
        server.add_tool(
            _answer(name),
            name=name,
            description=f"Answers with its own name ({name}).",
            annotations=ToolAnnotations(read_only_hint=True),
            structured_output=False,
        )
    return server


if __name__ == "__main__":
    build().run("stdio")
