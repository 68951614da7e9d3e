"""An OpenAI Agents SDK app gated by callgate: run `scripts/serve` in one terminal, then
`.venv/bin/python examples/openai_agents/app.py` from the repository root (offline: scripted model).
The tools are ordinary `@function_tool` functions; the approval loop is the SDK's own.
"""

import asyncio
import sys
from typing import Annotated

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate.adapters.openai_agents import Attempt, Gate
from callgate.client import Client

set_tracing_disabled(True)
RUN = "var/run"


@function_tool
def get_weather(city: str, date: str) -> dict:
    """Weather forecast for a city on one day.

    Args:
        city: The city.
        date: The day, YYYY-MM-DD.
    """
    return {"city": city, "date": date, "forecast": "sunny"}


@function_tool
def create_event(
    title: str, start: str, duration_minutes: int, calendar_id: str,
    key: Annotated[str, Attempt.IDEMPOTENCY_KEY],  # injected, never shown to the model
) -> dict:  # fmt: skip
    """Create an event in the user's calendar."""
    return {"event_id": f"evt_{key[:8]}"}  # your upstream call, with the key for its dedup


with Client(f"{RUN}/agent.sock", executor=f"{RUN}/executor.sock", confirmer=f"{RUN}/confirmer.sock") as cg:
    session = cg.session("acme", "alice", timezone="Asia/Shanghai")  # from your runtime's auth
    g = Gate(
        {"weather.get": get_weather, "calendar.create_event": create_event},
        client=cg, session=session, executor_id="example",
        confirmer=cg.confirmer(), approver="alice",  # omit both: confirm in the console instead
        external_ids={"calendar.create_event": "event_id"},
    )  # fmt: skip
    # A real model plugs in here: Agent(..., model="gpt-4.1") instead of the scripted one.
    model = ScriptedModel([
        [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1"),
         function_call("calendar__create_event", {"title": "Standup", "duration_minutes": 15,
                       "start": "2026-07-20T09:00:00+08:00", "calendar_id": "primary"}, call_id="c2")],
        [assistant_message("Sunny in Paris; the standup is booked.")],
    ])  # fmt: skip
    agent = Agent(name="assistant", model=model, tools=g.tools, hooks=g.hooks())
    run = g.run_config()  # a tool name the model invents is answered to it, not a crash
    result = Runner.run_sync(agent, "Weather in Paris, and book the standup", run_config=run)
    while result.interruptions:  # CONFIRM: the SDK's own approval flow
        saved = result.to_state().to_string()  # store it anywhere; resume later, in any process
        state = asyncio.run(RunState.from_string(agent, saved))
        for item in state.get_interruptions():
            shown = g.confirmation(item)  # callgate's summary: normalized arguments, digest, expiry
            if shown is None:  # callgate holds no confirmation for it (it refused it): not asked
                state.reject(item)
                continue
            answer = input(f"{shown}\nallow? [y/N] ") if sys.stdin.isatty() else "y"
            state.approve(item) if answer.lower() == "y" else state.reject(item)
        result = Runner.run_sync(agent, state, run_config=run)
    print(result.final_output)
