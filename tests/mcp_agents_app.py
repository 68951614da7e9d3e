"""An OpenAI Agents SDK application whose tools come from an MCP server, written the way the
SDK's docs write one: ``agents.mcp.MCPServerStdio`` launching a server command (here ``callgate
mcp serve``, in place of the upstream it fronts), ``require_approval`` on the server for the
write tools, ``result.interruptions``, ``state.approve`` / ``state.reject``, ``RunState.to_json``
and ``RunState.from_json``. The model is the SDK's own test double (``agents.testing.ScriptedModel``).

Used by tests/test_mcp_openai_agents.py in the test process and, as ``python -m
tests.mcp_agents_app resume STATE CONFIG BASE DECISION``, as the **second process** that restores
a saved run state, approves or rejects its interruptions and resumes the run (a new gateway
connection); it prints one JSON line: the tool outputs by call id and the final output.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, RunState, set_tracing_disabled
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp, MCPToolMetaContext
from agents.testing import ScriptedModel, assistant_message

set_tracing_disabled(True)
RUN = RunConfig(tracing_disabled=True)
ROOT = Path(__file__).resolve().parents[1]
IDEMPOTENCY_KEY = "io.callgate/idempotency-key"
"""The ``_meta`` member the gateway reads as the client's idempotency key (docs/MCP.md)."""
APPROVE = ["up__write_note", "up__remove"]
"""The tools the application asks its own user about (the SDK's ``require_approval``)."""


def call_key(ctx: MCPToolMetaContext) -> dict[str, Any] | None:
    """The SDK's ``tool_meta_resolver``: the model's call id as callgate's idempotency key, so a
    call resumed twice from one saved state (a crash after sending, a second worker) is one call."""
    call_id = getattr(ctx.run_context, "tool_call_id", None)
    return {IDEMPOTENCY_KEY: f"agents-{call_id}"} if call_id else None


def gateway(config: Path, base: Path, *, keyed: bool = False) -> MCPServer:
    """``callgate mcp serve`` as the SDK's stdio MCP server, approval asked for :data:`APPROVE`;
    ``keyed``: each call carries :func:`call_key`. With ``CALLGATE_TEST_MCP_URL`` set, the SDK's
    streamable HTTP server at that URL instead (bearer ``CALLGATE_TEST_MCP_TOKEN``): a running
    ``callgate mcp serve --transport http`` both processes connect to."""
    common: dict[str, Any] = {
        "name": "callgate",
        "cache_tools_list": True,
        "client_session_timeout_seconds": 60,
        "require_approval": {"always": {"tool_names": APPROVE}},
        "tool_meta_resolver": call_key if keyed else None,
    }
    url = os.environ.get("CALLGATE_TEST_MCP_URL")
    if url:
        token = os.environ["CALLGATE_TEST_MCP_TOKEN"]
        return MCPServerStreamableHttp(
            params={"url": url, "headers": {"Authorization": f"Bearer {token}"}}, **common
        )
    return MCPServerStdio(
        params={
            "command": sys.executable,
            "args": ["-m", "callgate", "mcp", "serve", "--config", str(config)],
            "cwd": str(base),
            "env": {"PYTHONPATH": str(ROOT)},
        },
        **common,
    )


def agent(server: MCPServer, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="notes", instructions="Keep notes.", model=model, mcp_servers=[server])


def outputs(result: Any) -> dict[str, str]:
    """call id -> the output the model is sent."""
    found: dict[str, str] = {}
    for item in result.new_items:
        if type(item).__name__ == "ToolCallOutputItem" and isinstance(item.raw_item, dict):
            out = item.raw_item.get("output")
            found[str(item.raw_item["call_id"])] = out if isinstance(out, str) else json.dumps(out)
    return found


async def resume(state_file: Path, config: Path, base: Path, decision: str) -> dict[str, Any]:
    """Restore the saved state in this process, decide every interruption, resume the run
    (``decision`` ``approve`` / ``reject``; ``+keyed``: with :func:`call_key`)."""
    decision, _, keyed = decision.partition("+")
    async with gateway(config, base, keyed=keyed == "keyed") as server:
        model = ScriptedModel([[assistant_message("done")]])
        a = agent(server, model)
        state = await RunState.from_json(a, json.loads(state_file.read_text()))
        pending = state.get_interruptions()
        for item in pending:
            if decision == "approve":
                state.approve(item)
            else:
                state.reject(item)
        result = await Runner.run(a, state, run_config=RUN)
        return {
            "decided": [i.call_id for i in pending],
            "outputs": outputs(result),
            "final": result.final_output,
            "interruptions": [i.call_id for i in result.interruptions],
        }


def main() -> None:
    _, cmd, state_file, config, base, decision = sys.argv
    assert cmd == "resume"
    print(json.dumps(asyncio.run(resume(Path(state_file), Path(config), Path(base), decision))))


if __name__ == "__main__":
    main()
