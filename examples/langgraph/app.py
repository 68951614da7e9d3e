"""A LangGraph agent gated by callgate, with a scripted model so it runs offline.

    scripts/serve                                  # terminal 1: the sidecar on the example policies
    .venv/bin/python examples/langgraph/app.py     # terminal 2 (needs the `langgraph` extra)

CALLGATE_RUN_DIR overrides the socket directory (default: var/run of this checkout). The user
"alice" comes from the runtime's own authentication, never from the model.
"""

import json
import os
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from callgate.adapters.langgraph import GatedToolNode
from callgate.client import Client, Committed

run = Path(os.environ.get("CALLGATE_RUN_DIR", Path(__file__).resolve().parents[2] / "var/run"))
cg = Client(
    str(run / "agent.sock"), executor=str(run / "executor.sock"), confirmer=str(run / "confirmer.sock")
)
functions = {  # the real implementations; they run only through the executor path
    "weather.get": lambda ctx: Committed({"city": ctx.arguments["city"], "forecast": "sunny"}),
    "calendar.create_event": lambda ctx: Committed({"event_id": "ev-1"}, external_resource_id="ev-1"),
}
gate = GatedToolNode(
    cg,
    cg.session("acme", "alice", timezone="Europe/Paris"),
    functions,
    executor_id="lg-example",
    confirmer="alice",
)
script = [[  # the scripted model's one turn of tool calls (allowed, needs confirmation, denied, rejected)
    ("weather__get", {"city": "Paris", "date": "tomorrow"}),
    ("calendar__create_event", {"calendar_id": None, "title": "Picnic", "start": "2026-07-20T12:00:00+02:00", "duration_minutes": 90}),
    ("calendar__create_event", {"calendar_id": None, "title": "Hackathon", "start": "2026-07-21T09:00:00+02:00", "duration_minutes": 600}),
    ("weather__get", {"city": "Paris"}),
]]  # fmt: skip


def model(state: MessagesState) -> dict[str, list[AIMessage]]:
    mc = gate.new_model_call_id()
    tools = gate.tools(mc)  # a real model plugs in here: llm.bind_tools(tools).invoke(state["messages"])
    calls = script.pop(0) if script and tools else []  # ... and give its AIMessage id=mc
    tcs = [{"id": f"call_{i}", "name": n, "args": a, "type": "tool_call"} for i, (n, a) in enumerate(calls)]
    return {"messages": [AIMessage(id=mc, content="" if tcs else "Done.", tool_calls=tcs)]}


g = StateGraph(MessagesState)
g.add_node("model", model)
g.add_node("tools", gate)
g.add_edge(START, "model")
g.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END])
g.add_edge("tools", "model")
app = g.compile(checkpointer=InMemorySaver())
cfg = {"configurable": {"thread_id": "demo"}}
out = app.invoke({"messages": [("user", "Plan a picnic in Paris tomorrow.")]}, cfg)
while "__interrupt__" in out:  # CONFIRM: a person sees tool, arguments and digest, then decides
    ask = out["__interrupt__"][0].value
    print("confirm?", ask["tool"], json.dumps(ask["arguments"]), ask["digest"][:12])
    out = app.invoke(Command(resume={"approve": True, "by": "alice", "digest": ask["digest"]}), cfg)
for m in out["messages"]:
    if isinstance(m, ToolMessage):
        print(m.tool_call_id, m.content)
cg.close()
