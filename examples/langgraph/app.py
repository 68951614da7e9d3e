"""A LangGraph agent gated by callgate, with a scripted model so it runs offline.

    scripts/serve                                  # terminal 1: the sidecar on the example policies
    .venv/bin/python examples/langgraph/app.py     # terminal 2 (needs the `langgraph` extra)

CALLGATE_RUN_DIR overrides the socket directory (default: var/run of this checkout). The user
"alice" comes from the runtime's own authentication, never from the model.
"""

import os
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from callgate.adapters.langgraph import CallgateTools
from callgate.client import Client, Committed


@tool
def get_weather(city: str, date: str) -> dict:
    """The forecast for a city on a date."""
    return {"city": city, "forecast": "sunny"}


@tool(response_format="content_and_artifact")
def create_event(title: str, start: str, duration_minutes: int, calendar_id: str | None = None) -> tuple:
    """Create a calendar event."""
    return {"event_id": "ev-1"}, Committed({"event_id": "ev-1"}, external_resource_id="ev-1")


class ScriptedModel(BaseChatModel):  # a real model plugs in here: ChatOpenAI(...), ChatAnthropic(...)
    _llm_type = "scripted"

    def bind_tools(self, tools: Any, **kw: Any) -> "ScriptedModel":
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        calls = [] if isinstance(messages[-1], ToolMessage) else [  # allowed, needs confirmation, denied
            ("weather__get", {"city": "Paris", "date": "tomorrow"}),
            ("calendar__create_event", {"title": "Picnic", "start": "2026-07-20T12:00:00+02:00", "duration_minutes": 90}),
            ("calendar__create_event", {"title": "Hackathon", "start": "2026-07-21T09:00:00+02:00", "duration_minutes": 600}),
        ]  # fmt: skip
        tcs = [
            {"id": f"call_{i}", "name": n, "args": a, "type": "tool_call"} for i, (n, a) in enumerate(calls)
        ]
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("" if tcs else "Done.", tool_calls=tcs))]
        )


run = Path(os.environ.get("CALLGATE_RUN_DIR", Path(__file__).resolve().parents[2] / "var/run"))
cg = Client(
    str(run / "agent.sock"), executor=str(run / "executor.sock"), confirmer=str(run / "confirmer.sock")
)
gate = CallgateTools(
    cg,
    cg.session("acme", "alice", timezone="Europe/Paris", session_id="demo-alice"),  # reopens on a rerun
    {"weather.get": get_weather, "calendar.create_event": create_event},
    executor_id="lg-example",
    approver="alice",
)
model = gate.model(ScriptedModel())
g = StateGraph(MessagesState)
g.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
g.add_node("tools", gate.node())
g.add_edge(START, "agent")
g.add_conditional_edges("agent", tools_condition, ["tools", END])
g.add_edge("tools", "agent")
app = g.compile(checkpointer=InMemorySaver())  # SqliteSaver / PostgresSaver resume in another process
cfg = {"configurable": {"thread_id": "demo"}}
out = app.invoke({"messages": [("user", "Plan a picnic in Paris tomorrow.")]}, cfg)
while "__interrupt__" in out:  # CONFIRM: LangChain's HITL request; a person approves, edits or rejects
    req = out["__interrupt__"][0].value
    for action in req["action_requests"]:
        print("confirm?", action["name"], action["args"])
    out = app.invoke(Command(resume={"decisions": [{"type": "approve"}] * len(req["action_requests"])}), cfg)
for m in out["messages"]:
    if isinstance(m, ToolMessage):
        print(m.tool_call_id, m.status, m.content)
cg.close()
