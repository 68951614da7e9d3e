"""A real MCP server (the SDK's ``MCPServer``, stdio) that gets stuck the way a server stuck in a
computation does: its tool ``block`` writes the server's process id to the file named by the
environment variable ``STUCK_PIDFILE`` and then blocks the whole process (a synchronous sleep
on the event loop's thread), so it reads neither its stdin, nor a ``notifications/cancelled``,
nor the end of its input. Only a signal ends it. ``block`` is not read-only, so a cancel
after it was sent leaves its outcome unknown and the gateway waits for the answer (6.7). ``ping`` answers ``pong``.

Run: ``python -m tests.mcp_upstreams.stuck``.
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)


def build() -> MCPServer:
    server = MCPServer("stuck-upstream")

    @server.tool(description="Answer pong.", annotations=READ)
    async def ping() -> str:
        return "pong"

    @server.tool(description="Block the whole server for an hour.")  # a write: past the boundary
    async def block() -> str:
        with open(os.environ["STUCK_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)  # on the loop's thread: nothing else of this process runs
        return "unblocked"

    return server


if __name__ == "__main__":
    build().run("stdio")
