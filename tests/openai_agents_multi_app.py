"""A multi-agent application written the way the OpenAI Agents SDK's docs write one: a triage
agent that hands off to a booking agent, each with its own gated ``@function_tool`` functions
(``gate``), the approval loop on ``state.approve`` / ``state.reject`` and ``RunState.to_json`` /
``RunState.from_json``. callgate only wraps the tools.

Used by tests/test_adapter_openai_agents_multi.py in the test process and, as ``python -m
tests.openai_agents_multi_app``, as the **second process** that restores the saved state and
resumes it (the upstream is the ledger file of tests/openai_agents_app.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState
from agents.testing import ScriptedModel, assistant_message

from callgate.adapters.openai_agents import Gate
from callgate.client import Client, Session
from tests.openai_agents_app import RUN, TOOLS, client_for


def triage_and_booker(
    cg: Client, session: Session, model: ScriptedModel, *, with_confirmer: bool
) -> tuple[Agent[Any], Agent[Any], list[Gate]]:
    """Two agents, each with gated tools of its own: the triage agent reads the weather and
    hands off to the booker, whose calendar tool needs a confirmation."""
    options: dict[str, Any] = {
        "client": cg,
        "session": session,
        "executor_id": "agents-multi-app",
        "confirmer": cg.confirmer() if with_confirmer else None,
        "approver": (lambda ctx: str(ctx.context["user"])) if with_confirmer else None,
        "external_ids": {"calendar.create_event": "event_id"},
    }
    reads = Gate({"weather.get": TOOLS["weather.get"]}, **options)
    writes = Gate({"calendar.create_event": TOOLS["calendar.create_event"]}, **options)
    booker = Agent(name="booker", model=model, tools=writes.tools, hooks=writes.hooks())
    triage = Agent(name="triage", model=model, tools=reads.tools, handoffs=[booker], hooks=reads.hooks())
    return triage, booker, [reads, writes]


def assistant_with_booker_tool(
    cg: Client, session: Session, model: ScriptedModel, *, with_confirmer: bool
) -> tuple[Agent[Any], Agent[Any], list[Gate]]:
    """An assistant that uses the booking agent as a tool (``Agent.as_tool``): the gated
    calendar call is made inside the nested run."""
    _, booker, gates = triage_and_booker(cg, session, model, with_confirmer=with_confirmer)
    outer = Agent(name="assistant", model=model, tools=[booker.as_tool("book", "Books calendar events.")])
    return outer, booker, gates


async def resume(
    sockets: Path, session_id: str, saved: str, decision: str, *, with_confirmer: bool, nested: bool = False
) -> dict[str, Any]:
    with client_for(sockets, with_confirmer=with_confirmer) as cg:
        steps = [[assistant_message("booked")]] + ([[assistant_message("done")]] if nested else [])
        model = ScriptedModel(steps)
        session = Session(cg, session_id, tenant="acme", subject="alice")
        build = assistant_with_booker_tool if nested else triage_and_booker
        triage, _, gates = build(cg, session, model, with_confirmer=with_confirmer)
        state = await RunState.from_json(triage, json.loads(saved))
        summaries = []
        for item in state.get_interruptions():  # one gate answers for every agent's gated calls
            summaries.append(await asyncio.to_thread(gates[0].confirmation, item))
            if decision == "approve":
                state.approve(item)
            else:
                state.reject(item)
        result = await Runner.run(triage, state, run_config=gates[0].run_config(RUN))
    outputs = {
        str(i.raw_item["call_id"]): {"output": i.output, "custom_data": i.custom_data}
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    }
    return {
        "final_output": result.final_output,
        "last_agent": result.last_agent.name,
        "interruptions": len(result.interruptions),
        "outputs": outputs,
        "summaries": summaries,
    }


if __name__ == "__main__":
    sockets, session_id, decision, mode = sys.argv[1:5]
    nested = sys.argv[5:6] == ["nested"]
    saved = sys.stdin.read()
    out = asyncio.run(
        resume(Path(sockets), session_id, saved, decision, with_confirmer=mode == "confirmer", nested=nested)
    )
    print(json.dumps(out))
