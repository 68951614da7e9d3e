"""callgate.adapters.openai_agents against the REAL OpenAI Agents SDK (a scripted ``Model``, no
network) and a real sidecar: allow runs once, deny never runs and the model sees the denial,
confirm interrupts and runs once after approval (or never after rejection), a sidecar that is down
ends the run with a typed error and runs nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate.adapters.openai_agents import CallgateToolError, CallgateTools
from callgate.client import Client, Committed, ToolContext
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar

set_tracing_disabled(True)  # offline: no trace uploads

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}


class Ran:
    """The user's functions, counting what actually executed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def weather(self, ctx: ToolContext) -> Committed:
        self.calls.append(("weather.get", dict(ctx.arguments)))
        return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})

    def calendar(self, ctx: ToolContext) -> Committed:
        self.calls.append(("calendar.create_event", dict(ctx.arguments)))
        return Committed({"event_id": "evt_1"}, external_resource_id="evt_1")


def client_for(server: Running) -> Client:
    a = server.sidecar.addresses
    return Client(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0], timeout=5)


def gate_for(cg: Client, ran: Ran) -> CallgateTools:
    s = cg.session("acme", "alice", timezone="Asia/Shanghai")
    return CallgateTools(
        cg,
        s,
        {"weather.get": ran.weather, "calendar.create_event": ran.calendar},
        executor_id="agents-test",
        model_call_id="mc-1",
        confirm_timeout=10,
    )


def agent_for(gate: CallgateTools, *steps: Any) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(list(steps))
    return Agent(name="assistant", model=model, tools=list(gate.tools)), model


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """What the model was sent back as each call's result (the last model call's input)."""
    last = model.last_call
    assert last is not None
    items = last.input if isinstance(last.input, list) else []
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            out[str(item["call_id"])] = str(item["output"])
    return out


RUN = RunConfig(tracing_disabled=True)


def test_tools_come_from_the_session_with_legal_names(server: Running) -> None:
    with client_for(server) as cg:
        gate = gate_for(cg, Ran())
    names = sorted(t.name for t in gate.tools)
    assert names == ["calendar__create_event", "weather__get"]
    assert all(t.params_json_schema.get("additionalProperties") is False for t in gate.tools)


def test_allow_runs_once_and_the_model_sees_the_result(server: Running) -> None:
    ran = Ran()
    with client_for(server) as cg:
        gate = gate_for(cg, ran)
        agent, model = agent_for(
            gate,
            [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1")],
            [assistant_message("sunny")],
        )
        result = Runner.run_sync(agent, "weather?", run_config=RUN)
    assert not result.interruptions
    assert ran.calls == [("weather.get", {"city": "Paris", "date": "2026-07-20"})]
    assert "sunny" in tool_outputs(model)["c1"]


def test_deny_and_rejection_are_returned_to_the_model_and_never_run(server: Running) -> None:
    ran = Ran()
    with client_for(server) as cg:
        gate = gate_for(cg, ran)
        agent, model = agent_for(
            gate,
            [
                function_call("calendar__create_event", {**EVENT, "duration_minutes": 600}, call_id="c2"),
                function_call("weather__get", {"city": "Paris"}, call_id="c3"),
            ],
            [assistant_message("could not")],
        )
        result = Runner.run_sync(agent, "book it", run_config=RUN)
    assert not result.interruptions
    assert ran.calls == []
    outputs = tool_outputs(model)
    assert json.loads(outputs["c2"])["content"]["status"] == "denied"
    assert json.loads(outputs["c3"])["content"]["status"] == "rejected"


def _interrupted(
    server: Running, ran: Ran, cg: Client
) -> tuple[CallgateTools, Agent[Any], ScriptedModel, Any]:
    gate = gate_for(cg, ran)
    agent, model = agent_for(
        gate,
        [function_call("calendar__create_event", EVENT, call_id="c4")],
        [assistant_message("done")],
    )
    first = Runner.run_sync(agent, "book the standup", run_config=RUN)
    assert [i.call_id for i in first.interruptions] == ["c4"]
    assert ran.calls == []  # parked, not run
    pending = gate.pending(first.interruptions[0])
    inv = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=pending.invocation_id, session_id=gate.session.session_id)
    )
    assert pb.State.Name(inv.invocation.state) == "AUTHORIZED"
    return gate, agent, model, first


def test_confirm_interrupts_then_approve_confirms_the_digest_and_runs_once(server: Running) -> None:
    ran = Ran()
    with client_for(server) as cg:
        gate, agent, model, first = _interrupted(server, ran, cg)
        item = first.interruptions[0]
        invocation_id = gate.pending(item).invocation_id
        state = first.to_state()
        gate.approve(state, item, confirmed_by="alice")
        result = Runner.run_sync(agent, state, run_config=RUN)
        inv = server.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=invocation_id, session_id=gate.session.session_id)
        )
    assert not result.interruptions
    assert ran.calls == [("calendar.create_event", {**EVENT, "calendar_id": "primary"})]  # normalized
    assert "evt_1" in tool_outputs(model)["c4"]
    assert pb.State.Name(inv.invocation.state) == "OBSERVED"


def test_confirm_then_reject_cancels_and_never_runs(server: Running) -> None:
    ran = Ran()
    with client_for(server) as cg:
        gate, agent, model, first = _interrupted(server, ran, cg)
        item = first.interruptions[0]
        invocation_id = gate.pending(item).invocation_id
        state = first.to_state()
        gate.reject(state, item)
        result = Runner.run_sync(agent, state, run_config=RUN)
        inv = server.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=invocation_id, session_id=gate.session.session_id)
        )
    assert not result.interruptions
    assert ran.calls == []
    assert json.loads(tool_outputs(model)["c4"])["content"]["status"] == "rejected_by_user"
    assert pb.State.Name(inv.invocation.state) == "CANCELLED_BEFORE_COMMIT"


@pytest.fixture
def doomed() -> Iterator[tuple[Running, Any]]:
    """A sidecar the test itself stops."""
    running, tmp = start_sidecar()
    yield running, tmp


def test_sidecar_down_is_a_typed_error_and_nothing_runs(doomed: tuple[Running, Any]) -> None:
    running, tmp = doomed
    ran = Ran()
    cg = client_for(running)
    try:
        gate = gate_for(cg, ran)
        stop_sidecar(running, tmp)  # the sidecar goes away between listing tools and the call
        agent, _ = agent_for(
            gate,
            [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1")],
            [assistant_message("never")],
        )
        with pytest.raises(CallgateToolError) as exc:
            Runner.run_sync(agent, "weather?", run_config=RUN)
    finally:
        cg.close()
    assert exc.value.code in ("unavailable", "deadline_exceeded")
    assert ran.calls == []
