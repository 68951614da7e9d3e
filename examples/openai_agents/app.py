"""An OpenAI Agents SDK app gated by callgate: run `scripts/serve` in one terminal, then
`.venv/bin/python examples/openai_agents/app.py` from the repository root (offline: scripted model).
"""

import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate.adapters.openai_agents import CallgateTools
from callgate.client import Client, Committed, ToolContext

set_tracing_disabled(True)
RUN = "var/run"


def weather(ctx: ToolContext) -> Committed:  # your tool; ctx.credential is its scoped credential
    return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})


def calendar(ctx: ToolContext) -> Committed:
    return Committed({"event_id": "evt_1"}, external_resource_id="evt_1")


with Client(f"{RUN}/agent.sock", executor=f"{RUN}/executor.sock", confirmer=f"{RUN}/confirmer.sock") as cg:
    session = cg.session("acme", "alice", timezone="Asia/Shanghai")  # from your runtime's auth
    gate = CallgateTools(
        cg, session, {"weather.get": weather, "calendar.create_event": calendar},
        executor_id="example", model_call_id="run-1",
    )  # fmt: skip
    # A real model plugs in here: Agent(..., model="gpt-4.1") instead of the scripted one.
    model = ScriptedModel([
        [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1"),
         function_call("calendar__create_event", {"title": "Standup", "duration_minutes": 15,
                       "start": "2026-07-20T09:00:00+08:00"}, call_id="c2")],
        [assistant_message("Sunny in Paris; the standup is booked.")],
    ])  # fmt: skip
    agent = Agent(name="assistant", model=model, tools=gate.tools)
    result = Runner.run_sync(agent, "Weather in Paris, and book the standup")
    while result.interruptions:  # CONFIRM: the SDK's own approval flow
        state = result.to_state()
        for item in result.interruptions:
            answer = input(f"allow {item.tool_name} {item.arguments}? [y/N] ") if sys.stdin.isatty() else "y"
            if answer.lower() == "y":
                gate.approve(state, item, confirmed_by="alice")
            else:
                gate.reject(state, item)
        result = Runner.run_sync(agent, state)
    print(result.final_output)
