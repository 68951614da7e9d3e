"""An application written the way the OpenAI Agents SDK's docs write one: ``@function_tool``
functions with typed parameters and docstrings, an ``Agent``, ``Runner.run``, the approval loop on
``result.interruptions`` with ``state.approve`` / ``state.reject``, ``to_string`` /
``RunState.from_string``. callgate only wraps the tools (``gate``).

Used by tests/test_adapter_openai_agents.py in the test process and, as ``python -m
tests.openai_agents_app``, as the **second process** that restores a saved run state and resumes
it. The "upstream" is a ledger file (``CALLGATE_TEST_LEDGER``): one line per side effect, so
the test counts executions across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import SecretStr

from callgate.adapters.openai_agents import Attempt, Gate, Secret
from callgate.client import Client, Session

set_tracing_disabled(True)
RUN = RunConfig(tracing_disabled=True)
CANARY = "sk-upstream-canary-8d1f"
LATER_EVENT = {"title": "Board review", "start": "2026-07-21T16:00:00+08:00", "duration_minutes": 90}
"""The event the model books after a standing approval (``approve-always``): a call no one saw."""


def _upstream(record: dict[str, Any]) -> None:
    with open(os.environ["CALLGATE_TEST_LEDGER"], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


@function_tool
def get_weather(city: str, date: str) -> dict[str, str]:
    """Weather forecast for a city on one day.

    Args:
        city: The city, e.g. Paris.
        date: The day, YYYY-MM-DD.
    """
    _upstream({"tool": "weather.get", "city": city, "date": date})
    return {"city": city, "date": date, "forecast": "sunny"}


@function_tool
def create_event(
    title: str,
    start: str,
    duration_minutes: int,
    calendar_id: str,
    token: Annotated[SecretStr, Secret("calendar_api_token")],
    key: Annotated[str, Attempt.IDEMPOTENCY_KEY],
) -> dict[str, str]:
    """Create an event in the user's calendar.

    Args:
        title: The event's title.
        start: RFC 3339 start time.
        duration_minutes: Length in minutes.
        calendar_id: Which calendar.
    """
    _upstream(
        {
            "tool": "calendar.create_event",
            "title": title,
            "start": start,
            "duration_minutes": duration_minutes,
            "calendar_id": calendar_id,
            "token_ok": token.get_secret_value() == CANARY,
            "key": key,
        }
    )
    return {"event_id": "evt_1", "echo": f"authorized with {token.get_secret_value()}"}


TOOLS: dict[str, FunctionTool] = {"weather.get": get_weather, "calendar.create_event": create_event}


def client_for(sockets: Path, *, with_confirmer: bool) -> Client:
    confirmer = str(sockets / "confirmer.sock") if with_confirmer else None
    return Client(
        str(sockets / "agent.sock"), executor=str(sockets / "executor.sock"), confirmer=confirmer, timeout=5
    )


def gated_agent(cg: Client, session: Session, model: ScriptedModel, *, with_confirmer: bool) -> Agent[Any]:
    return gate_and_agent(cg, session, model, with_confirmer=with_confirmer)[1]


def gate_and_agent(
    cg: Client, session: Session, model: ScriptedModel, *, with_confirmer: bool
) -> tuple[Gate, Agent[Any]]:
    g = Gate(
        TOOLS,
        client=cg,
        session=session,
        executor_id="agents-app",
        confirmer=cg.confirmer() if with_confirmer else None,
        approver=(lambda ctx: str(ctx.context["user"])) if with_confirmer else None,
        external_ids={"calendar.create_event": "event_id"},
    )
    return g, Agent(name="assistant", model=model, tools=g.tools, hooks=g.hooks())


async def resume(
    sockets: Path, session_id: str, saved: str, decision: str, *, with_confirmer: bool
) -> dict[str, Any]:
    """The second process: a new client, a new gate, the state restored with the SDK's own
    ``RunState.from_string``, the SDK's own decision, the run resumed."""
    with client_for(sockets, with_confirmer=with_confirmer) as cg:
        script = [[assistant_message("done")]]
        if decision == "approve-always":  # the model books another event after the approval
            script.insert(0, [function_call("calendar__create_event", LATER_EVENT, call_id="c9")])
        model = ScriptedModel(script)
        session = Session(cg, session_id, tenant="acme", subject="alice")  # the runtime knows its user
        g, agent = gate_and_agent(cg, session, model, with_confirmer=with_confirmer)
        state = await RunState.from_string(agent, saved)
        summaries = []
        for item in state.get_interruptions():
            summaries.append(await asyncio.to_thread(g.confirmation, item))  # what the approver sees
            if decision == "approve":
                state.approve(item)
            elif decision == "approve-always":  # the SDK's standing approval of the tool
                state.approve(item, always_approve=True)
            else:
                state.reject(item)
        result = await Runner.run(agent, state, run_config=RUN)
    outputs = {
        str(i.raw_item["call_id"]): {"output": i.output, "custom_data": i.custom_data}
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    }
    return {
        "final_output": result.final_output,
        "interruptions": len(result.interruptions),
        "outputs": outputs,
        "summaries": summaries,
    }


if __name__ == "__main__":
    sockets, session_id, decision, mode = sys.argv[1:5]
    out = asyncio.run(
        resume(Path(sockets), session_id, sys.stdin.read(), decision, with_confirmer=mode == "confirmer")
    )
    print(json.dumps(out))
