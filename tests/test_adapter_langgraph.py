"""The LangGraph adapter against the real library and a real sidecar, with a scripted model (a
plain function node emitting AI messages with tool calls; no network): allow, deny, confirm +
approve (the node re-runs, nothing runs twice), confirm + reject, sidecar down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from callgate.adapters.langgraph import GatedToolNode
from callgate.client import Client, Committed, Session, ToolContext, TransportError
from tests.conftest import Running, short_tmpdir

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}
WEATHER = ("weather__get", {"city": "Paris", "date": "2026-07-20"})


@dataclass
class Harness:
    """The tool functions (they count their runs) and how often the gated node started."""

    ran: list[str] = field(default_factory=list)
    node_runs: int = 0

    def weather(self, ctx: ToolContext) -> Committed:
        self.ran.append("weather")
        return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})

    def calendar(self, ctx: ToolContext) -> Committed:
        self.ran.append("calendar")
        return Committed({"event_id": "evt_1"}, external_resource_id="evt_1")


def build(node: GatedToolNode, h: Harness, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """model (scripted: one AI message with ``calls``, then a final answer) -> tools -> model."""

    def model(state: MessagesState) -> dict[str, Any]:
        mc = node.new_model_call_id()
        node.tools(mc)  # a real model would get these tools
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage(id=mc, content="done")]}
        tcs = [{"id": f"c{i}", "name": n, "args": a, "type": "tool_call"} for i, (n, a) in enumerate(calls)]
        return {"messages": [AIMessage(id=mc, content="", tool_calls=tcs)]}

    def tools(state: MessagesState) -> dict[str, Any]:
        h.node_runs += 1
        return node(state)

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=InMemorySaver())


@pytest.fixture
def gated(server: Running) -> Iterator[tuple[GatedToolNode, Harness]]:
    a = server.sidecar.addresses
    h = Harness()
    with Client(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0]) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        fns = {"weather.get": h.weather, "calendar.create_event": h.calendar}
        yield GatedToolNode(cg, s, fns, executor_id="lg", confirmer="alice"), h


def tool_messages(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m.tool_call_id: json.loads(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}


CFG = {"configurable": {"thread_id": "t1"}}


def test_allow_runs_once_and_the_model_sees_the_result(gated: tuple[GatedToolNode, Harness]) -> None:
    node, h = gated
    out = build(node, h, [WEATHER]).invoke({"messages": []}, CFG)
    assert h.ran == ["weather"]
    assert "sunny" in json.dumps(tool_messages(out)["c0"])
    assert out["messages"][-1].content == "done"


def test_deny_runs_nothing_and_the_model_sees_the_denial(gated: tuple[GatedToolNode, Harness]) -> None:
    node, h = gated
    out = build(node, h, [("calendar__create_event", {**EVENT, "duration_minutes": 600})]).invoke(
        {"messages": []}, CFG
    )
    assert h.ran == []
    assert tool_messages(out)["c0"]["content"]["status"] == "denied"


def test_rejection_runs_nothing(gated: tuple[GatedToolNode, Harness]) -> None:
    node, h = gated
    out = build(node, h, [("weather__get", {"city": "Paris"})]).invoke({"messages": []}, CFG)
    assert h.ran == [] and tool_messages(out)["c0"]["content"]["status"] == "rejected"


def test_confirm_interrupts_then_approve_runs_exactly_once(gated: tuple[GatedToolNode, Harness]) -> None:
    node, h = gated
    graph = build(node, h, [WEATHER, ("calendar__create_event", EVENT)])
    first = graph.invoke({"messages": []}, CFG)
    (intr,) = first["__interrupt__"]
    shown = intr.value
    assert shown["tool"] == "calendar.create_event" and shown["digest"].startswith("sha256:")
    assert shown["arguments"]["title"] == "Standup"
    assert h.ran == ["weather"]  # the allowed call ran before the interrupt; the parked one did not
    out = graph.invoke(Command(resume={"approve": True, "by": "bob", "digest": shown["digest"]}), CFG)
    assert h.node_runs == 2  # the node re-ran from its start on resume ...
    assert h.ran == ["weather", "calendar"]  # ... and nothing ran twice (idempotent replay)
    msgs = tool_messages(out)
    assert "sunny" in json.dumps(msgs["c0"]) and "evt_1" in json.dumps(msgs["c1"])


def test_confirm_then_reject_runs_nothing(gated: tuple[GatedToolNode, Harness], server: Running) -> None:
    node, h = gated
    graph = build(node, h, [("calendar__create_event", EVENT)])
    (intr,) = graph.invoke({"messages": []}, CFG)["__interrupt__"]
    out = graph.invoke(Command(resume={"approve": False, "reason": "not now"}), CFG)
    assert h.ran == [] and tool_messages(out)["c0"]["content"]["status"] == "cancelled"
    state = server.call(server.sidecar.components.store.get_invocation(intr.value["invocation_id"])).state
    assert state.name == "CANCELLED_BEFORE_COMMIT"


def test_approve_with_another_digest_is_a_rejection(gated: tuple[GatedToolNode, Harness]) -> None:
    node, h = gated
    graph = build(node, h, [("calendar__create_event", EVENT)])
    graph.invoke({"messages": []}, CFG)
    out = graph.invoke(Command(resume={"approve": True, "digest": "0" * 64}), CFG)
    assert h.ran == [] and tool_messages(out)["c0"]["content"]["status"] == "cancelled"


def test_sidecar_down_raises_a_typed_error_and_runs_nothing() -> None:
    h = Harness()
    with Client(str(short_tmpdir() / "nobody.sock"), executor="x.sock", timeout=2) as cg:
        s = Session(cg, "s-1")
        node = GatedToolNode(cg, s, {"weather.get": h.weather}, executor_id="lg", confirmer="alice")
        s.model_call_id = "mc-1"
        ai = AIMessage(id="mc-1", content="", tool_calls=[{"id": "c0", "name": "weather.get", "args": {}}])
        with pytest.raises(TransportError):
            node({"messages": [ai]})
    assert h.ran == []
