"""callgate.adapters.openai_agents in multi-agent applications written the way the OpenAI Agents
SDK's docs write them (handoffs, ``Agent.as_tool``, the application's own hooks,
``StopAtTools``, parallel calls, ``max_turns``), against the REAL SDK (``agents.testing.
ScriptedModel``, no network) and a real sidecar, as tests/test_adapter_openai_agents.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from agents import (
    Agent,
    AgentHooks,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunState,
    StopAtTools,
    input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate.adapters.openai_agents import Gate
from tests.conftest import ROOT, Running
from tests.openai_agents_app import RUN, TOOLS, client_for
from tests.test_adapter_openai_agents import (
    EVENT,
    USER,
    console_pending,
    new_session,
    outputs,
    sidecar,
    sockets,
    upstream,
)

__all__ = ["sidecar"]

WEATHER = {"city": "Paris", "date": "2026-07-20"}


def second_process(
    server: Running, session_id: str, saved: str, decision: str, mode: str, *extra: str
) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.openai_agents_multi_app", str(sockets(server)), session_id, decision, mode,
         *extra],
        input=saved, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------- handoffs
@pytest.mark.parametrize("mode", ["confirmer", "console"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_handoff_to_an_agent_whose_gated_call_is_approved_in_a_new_process(
    sidecar: Running, decision: str, mode: str
) -> None:
    from tests.openai_agents_multi_app import triage_and_booker

    with client_for(sockets(sidecar), with_confirmer=mode == "confirmer") as cg:
        session = new_session(cg)
        model = ScriptedModel(
            [
                [function_call("weather__get", WEATHER, call_id="c1")],
                [function_call("transfer_to_booker", {}, call_id="h1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
            ]
        )
        triage, _, gates = triage_and_booker(cg, session, model, with_confirmer=mode == "confirmer")
        result = Runner.run_sync(triage, "book", context=dict(USER), run_config=gates[0].run_config(RUN))
        assert result.last_agent.name == "booker"
        assert [i.call_id for i in result.interruptions] == ["c4"]
        assert [u["tool"] for u in upstream()] == ["weather.get"]
        saved = json.dumps(result.to_state().to_json())
        session_id = session.session_id
    if mode == "console" and decision == "approve":  # the console decides while the tool waits
        threading.Thread(
            target=confirm_in_console, args=(sidecar, session_id, console_pending(sidecar)[0])
        ).start()
    out = second_process(sidecar, session_id, saved, decision, mode)
    assert out["last_agent"] == "booker" and out["final_output"] == "booked"
    assert out["summaries"][0] and "calendar.create_event" in out["summaries"][0]
    ran = [u for u in upstream() if u["tool"] == "calendar.create_event"]
    if decision == "approve":
        assert len(ran) == 1
        assert out["outputs"]["c4"]["custom_data"]["callgate"]["status"] == "OBSERVED"
    else:
        assert ran == []
        assert console_pending(sidecar) == []


def gated(
    cg: Any, session: Any, names: tuple[str, ...], *, with_confirmer: bool = True, **tools: Any
) -> Gate:
    chosen = {n: tools.get(n.replace(".", "_"), TOOLS[n]) for n in names}
    return Gate(
        chosen, client=cg, session=session, executor_id="agents-multi",
        confirmer=cg.confirmer() if with_confirmer else None,
        approver=(lambda ctx: str(ctx.context["user"])) if with_confirmer else None,
        external_ids={"calendar.create_event": "event_id"},
    )  # fmt: skip


# ---------------------------------------------------------------- Agent.as_tool
def test_an_agent_used_as_a_tool_surfaces_its_gated_call_and_the_approval_runs_it_once(
    sidecar: Running,
) -> None:
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("calendar.create_event",))
        model = ScriptedModel(
            [
                [function_call("book", {"input": "book the standup"}, call_id="o1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
                [assistant_message("booked")],
                [assistant_message("done")],
            ]
        )
        booker = Agent(name="booker", model=model, tools=g.tools, hooks=g.hooks())
        outer = Agent(name="assistant", model=model, tools=[booker.as_tool("book", "Books events.")])
        result = Runner.run_sync(outer, "book", context=dict(USER), run_config=g.run_config(RUN))
        assert [i.call_id for i in result.interruptions] == ["c4"]
        assert upstream() == [] and len(console_pending(sidecar)) == 1
        item = result.interruptions[0]
        assert g.confirmation(item) is not None
        state = result.to_state()
        state.approve(item)
        result = Runner.run_sync(outer, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    assert [u["tool"] for u in upstream()] == ["calendar.create_event"]
    assert console_pending(sidecar) == []


@pytest.mark.parametrize("mode", ["confirmer", "console"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_nested_agents_gated_call_is_decided_in_a_new_process(
    sidecar: Running, decision: str, mode: str
) -> None:
    from tests.openai_agents_multi_app import assistant_with_booker_tool

    with client_for(sockets(sidecar), with_confirmer=mode == "confirmer") as cg:
        session = new_session(cg)
        model = ScriptedModel(
            [
                [function_call("book", {"input": "book the standup"}, call_id="o1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
            ]
        )
        outer, _, gates = assistant_with_booker_tool(cg, session, model, with_confirmer=mode == "confirmer")
        result = Runner.run_sync(outer, "book", context=dict(USER), run_config=gates[0].run_config(RUN))
        assert [i.call_id for i in result.interruptions] == ["c4"]
        saved = json.dumps(result.to_state().to_json())
        session_id = session.session_id
    pending = console_pending(sidecar)
    assert len(pending) == 1
    if mode == "console" and decision == "approve":  # the console decides while the tool waits
        threading.Thread(target=confirm_in_console, args=(sidecar, session_id, pending[0])).start()
    out = second_process(sidecar, session_id, saved, decision, mode, "nested")
    assert out["final_output"] == "done" and out["interruptions"] == 0
    assert out["summaries"][0] and "calendar.create_event" in out["summaries"][0]
    ran = [u for u in upstream() if u["tool"] == "calendar.create_event"]
    assert len(ran) == (1 if decision == "approve" else 0)
    assert console_pending(sidecar) == []


def confirm_now(server: Running, invocation_id: str) -> None:
    from callgate.gen.v1 import callgate_pb2 as pb

    found = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    digest = next(p.digest for p in found if p.invocation_id == invocation_id)
    server.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by="ops@console")
    )


def confirm_in_console(server: Running, session_id: str, invocation_id: str) -> None:
    """Once the resuming process proposed the call again (it waits for the console now)."""
    from callgate.gen.v1 import callgate_pb2 as pb

    watched = server.gate.WatchInvocation(
        pb.WatchInvocationRequest(invocation_id=invocation_id, session_id=session_id), timeout=60
    )
    for change in watched:
        if any(e.kind == "idempotent_replay" for e in change.events):
            break
    watched.cancel()
    found = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    digest = next(p.digest for p in found if p.invocation_id == invocation_id)
    server.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by="ops@console")
    )


# ---------------------------------------------------------------- the wrapped tool's own fields
def test_the_tools_own_custom_data_extractor_and_defer_loading_are_kept(sidecar: Running) -> None:
    seen: list[Any] = []

    def extractor(data: Any) -> dict[str, Any]:
        seen.append(data.output)
        return {"mine": data.tool_context.tool_call_id}

    theirs = dataclasses.replace(TOOLS["weather.get"], custom_data_extractor=extractor, defer_loading=True)
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        g = Gate({"weather.get": theirs}, client=cg, session=session, executor_id="x")
        assert g.tools[0].defer_loading is True
        model = ScriptedModel(
            [[function_call("weather__get", WEATHER, call_id="c1")], [assistant_message("ok")]]
        )
        tools = [
            dataclasses.replace(t, defer_loading=False) for t in g.tools
        ]  # ScriptedModel: no tool search
        result = Runner.run_sync(Agent(name="a", model=model, tools=tools), "?", run_config=RUN)
    data = outputs(result)["c1"].custom_data
    assert data["mine"] == "c1" and data["callgate"]["status"] == "OBSERVED"
    assert seen and json.loads(seen[0])["status"] == "ok"


# ---------------------------------------------------------------- the application's own hooks
def test_the_applications_own_hooks_and_callgates_both_run(sidecar: Running) -> None:
    calls: list[str] = []

    class Mine(AgentHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            calls.append("agent.llm_start")

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            calls.append(f"agent.tool_end:{tool.name}")

    class Run(RunHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            calls.append("run.llm_start")

    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("weather.get",), with_confirmer=False)
        model = ScriptedModel(
            [[function_call("weather__get", WEATHER, call_id="c1")], [assistant_message("ok")]]
        )
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks(Mine()))
        result = Runner.run_sync(agent, "?", run_config=RUN, hooks=Run())
    invocation_id = outputs(result)["c1"].custom_data["callgate"]["invocation_id"]
    assert calls.count("agent.llm_start") == 2 and calls.count("run.llm_start") == 2
    assert "agent.tool_end:weather__get" in calls
    from tests.test_adapter_openai_agents import fed

    assert len(fed(sidecar, invocation_id)) == 1  # callgate's hook ran too


def test_a_hook_a_later_sdk_adds_reaches_the_applications_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The combined hooks forward every ``on_*`` method of the SDK's hooks classes, not a list
    written for one SDK version: a method the SDK adds later (simulated here) reaches the
    application's own hooks, on agent and run hooks alike."""
    import asyncio

    from callgate.adapters.openai_agents import _FedHooks, _FedRunHooks

    seen: list[str] = []

    async def base_noop(self: Any, context: Any) -> None:
        return None

    for label, base, fed in (("agent", AgentHooks, _FedHooks), ("run", RunHooks, _FedRunHooks)):
        monkeypatch.setattr(getattr(base, "__origin__", base), "on_future_event", base_noop, raising=False)

        class Mine(base):  # type: ignore[misc, valid-type]
            async def on_future_event(self, context: Any, label: str = label) -> None:
                seen.append(label)

            async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
                seen.append("tool_start")

        hooks = fed(None, Mine())  # type: ignore[arg-type]
        asyncio.run(hooks.on_future_event(None))
        asyncio.run(hooks.on_tool_start(None, None, None))
        asyncio.run(fed(None).on_future_event(None))  # no hooks of the application's: a no-op
    assert seen == ["agent", "tool_start", "run", "tool_start"]


# ---------------------------------------------------------------- one turn, many calls
LATER = {"title": "Retro", "start": "2026-07-21T16:00:00+08:00", "duration_minutes": 30}
DENIED = {**EVENT, "duration_minutes": 600}


def test_parallel_calls_some_denied_some_confirmed_some_rejected_in_one_turn(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("weather.get", "calendar.create_event"))
        model = ScriptedModel(
            [
                [
                    function_call("weather__get", WEATHER, call_id="c1"),
                    function_call("calendar__create_event", DENIED, call_id="c2"),
                    function_call("calendar__create_event", EVENT, call_id="c4"),
                    function_call("calendar__create_event", LATER, call_id="c5"),
                ],
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks())
        result = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN))
        assert sorted(i.call_id for i in result.interruptions) == ["c4", "c5"]
        assert len(console_pending(sidecar)) == 2
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item) if item.call_id == "c4" else state.reject(item)
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    ran = upstream()
    assert [u["tool"] for u in ran] == ["weather.get", "calendar.create_event"]  # each once
    assert ran[1]["title"] == "Standup"
    out = outputs(result)
    assert out["c4"].custom_data["callgate"]["status"] == "OBSERVED"
    assert json.loads(out["c2"].output)["status"] == "denied"  # answered, never asked
    assert "c5" in out and "c1" in out
    assert console_pending(sidecar) == []


# ---------------------------------------------------------------- StopAtTools
def test_stop_at_a_gated_tool_stops_only_after_it_ran_once_confirmed(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("weather.get", "calendar.create_event"))
        model = ScriptedModel(
            [
                [function_call("weather__get", WEATHER, call_id="c1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
            ]
        )
        agent = Agent(
            name="a", model=model, tools=g.tools, hooks=g.hooks(),
            tool_use_behavior=StopAtTools(stop_at_tool_names=["calendar__create_event"]),
        )  # fmt: skip
        result = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN))
        assert [i.call_id for i in result.interruptions] == ["c4"]
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    final = json.loads(result.final_output)
    assert final["status"] == "ok" and "evt_1" in final["data"]["event_id"]  # the tool's output is final
    assert [u["tool"] for u in upstream()] == ["weather.get", "calendar.create_event"]


# ---------------------------------------------------------------- max_turns
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_max_turns_exceeded_after_a_resume_leaves_nothing_parked_after_abandon(
    sidecar: Running, decision: str
) -> None:
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("calendar.create_event",))
        model = ScriptedModel(
            [
                [function_call("calendar__create_event", EVENT, call_id="c4"),
                 function_call("calendar__create_event", LATER, call_id="c5")],
                [function_call("calendar__create_event", LATER, call_id="c6")],
            ]
        )  # fmt: skip
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks())
        result = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN), max_turns=1)
        assert sorted(i.call_id for i in result.interruptions) == ["c4", "c5"]
        saved = json.dumps(result.to_state().to_json())
        # another process (a new gate) resumes it and the run ends with MaxTurnsExceeded
        g2 = gated(cg, Session_of(cg, session), ("calendar.create_event",))
        agent2 = Agent(name="a", model=model, tools=g2.tools, hooks=g2.hooks())

        async def go() -> None:
            state = await RunState.from_json(agent2, json.loads(saved))
            for item in state.get_interruptions():
                if decision == "approve" and item.call_id == "c4":
                    state.approve(item)
                else:
                    state.reject(item)
            with pytest.raises(MaxTurnsExceeded) as exc:
                await Runner.run(agent2, state, run_config=g2.run_config(RUN), max_turns=1)
            await g2.abandon(exc.value)

        asyncio.run(go())
    assert console_pending(sidecar) == []
    assert len(upstream()) == (1 if decision == "approve" else 0)


def Session_of(cg: Any, session: Any) -> Any:
    from callgate.client import Session

    return Session(cg, session.session_id, tenant="acme", subject="alice")


def test_a_run_that_raises_after_a_nested_agent_parked_a_call_leaves_nothing_after_abandon(
    sidecar: Running,
) -> None:
    """The outer agent's input guardrail trips after the agent it uses as a tool parked a booking
    (in the nested run: a context of its own): ``g.abandon(error)`` given the outer run's error
    still cancels it."""

    @input_guardrail
    async def slow_tripwire(
        ctx: RunContextWrapper[Any], agent: Agent[Any], data: Any
    ) -> GuardrailFunctionOutput:
        for _ in range(200):  # the nested booking is parked meanwhile
            if await asyncio.to_thread(console_pending, sidecar):
                break
            await asyncio.sleep(0.05)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    async def run() -> None:
        from tests.openai_agents_multi_app import assistant_with_booker_tool

        with client_for(sockets(sidecar), with_confirmer=True) as cg:
            model = ScriptedModel(
                [
                    [function_call("book", {"input": "book the standup"}, call_id="o1")],
                    [function_call("calendar__create_event", EVENT, call_id="c4")],
                    [assistant_message("booked")],
                    [assistant_message("done")],
                ]
            )
            outer, _, gates = assistant_with_booker_tool(cg, new_session(cg), model, with_confirmer=True)
            outer = outer.clone(input_guardrails=[slow_tripwire])
            with pytest.raises(InputGuardrailTripwireTriggered) as exc:
                await Runner.run(outer, "book it", context=dict(USER), run_config=gates[0].run_config(RUN))
            assert len(console_pending(sidecar)) == 1  # parked inside the nested run
            for g in gates:
                await g.abandon(exc.value)

    asyncio.run(run())
    assert console_pending(sidecar) == [] and upstream() == []


def test_two_parallel_nested_agents_each_park_a_call_and_each_decision_binds_to_its_call(
    sidecar: Running,
) -> None:
    """The outer model calls two booking agents (each ``as_tool``) in one turn; each nested run
    parks a booking of its own. Approving one and rejecting the other runs exactly the approved call's arguments,
    once; dropping the other leaves the console."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("calendar.create_event",))
        first = ScriptedModel(
            [[function_call("calendar__create_event", EVENT, call_id="c4")], [assistant_message("ok")]]
        )
        second = ScriptedModel(
            [[function_call("calendar__create_event", LATER, call_id="c5")], [assistant_message("ok")]]
        )
        standup = Agent(name="standup", model=first, tools=g.tools, hooks=g.hooks())
        retro = Agent(name="retro", model=second, tools=g.tools, hooks=g.hooks())
        # two different agents as two tools, both called in one turn
        outer = Agent(
            name="assistant", model=ScriptedModel(
                [[function_call("book_standup", {"input": "x"}, call_id="o1"),
                  function_call("book_retro", {"input": "y"}, call_id="o2")],
                 [assistant_message("done")]]),
            tools=[standup.as_tool("book_standup", "Books the standup."), retro.as_tool("book_retro", "Books the retro.")],
        )  # fmt: skip
        result = Runner.run_sync(outer, "book", context=dict(USER), run_config=g.run_config(RUN))
        assert sorted(i.call_id for i in result.interruptions) == ["c4", "c5"]
        assert len(console_pending(sidecar)) == 2
        shown = {i.call_id: g.confirmation(i) or "" for i in result.interruptions}
        assert "Standup" in shown["c4"] and "Retro" in shown["c5"]
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item) if item.call_id == "c4" else state.reject(item)
        result = Runner.run_sync(outer, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    assert [(u["tool"], u["title"]) for u in upstream()] == [("calendar.create_event", "Standup")]
    assert console_pending(sidecar) == []


def test_a_dropped_nested_interruption_restored_in_a_new_gate_leaves_the_console(sidecar: Running) -> None:
    """``g.abandon(state)`` of a restored state whose interruption is a nested agent's call."""
    from tests.openai_agents_multi_app import assistant_with_booker_tool

    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        model = ScriptedModel(
            [
                [function_call("book", {"input": "book the standup"}, call_id="o1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
            ]
        )
        outer, _, _ = assistant_with_booker_tool(cg, session, model, with_confirmer=True)
        result = Runner.run_sync(outer, "book", context=dict(USER), run_config=RUN)
        saved = json.dumps(result.to_state().to_json())
        assert len(console_pending(sidecar)) == 1
        outer2, _, gates = assistant_with_booker_tool(cg, Session_of(cg, session), model, with_confirmer=True)

        async def drop() -> None:
            state = await RunState.from_json(outer2, json.loads(saved))
            assert [i.call_id for i in state.get_interruptions()] == ["c4"]
            await gates[0].abandon(state)  # the triage agent's gate: the session's calls

        asyncio.run(drop())
    assert console_pending(sidecar) == [] and upstream() == []


def test_an_agent_tools_own_approval_is_the_applications_and_the_nested_call_is_callgates(
    sidecar: Running,
) -> None:
    """``as_tool(needs_approval=True)``: the SDK first asks about the agent tool call itself (not
    a callgate tool: ``g.gates(item)`` False, no summary); approved, the nested run parks the
    booking, which interrupts again with callgate's summary; approved, it runs once."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("calendar.create_event",))
        model = ScriptedModel(
            [
                [function_call("book", {"input": "book the standup"}, call_id="o1")],
                [function_call("calendar__create_event", EVENT, call_id="c4")],
                [assistant_message("booked")],
                [assistant_message("done")],
            ]
        )
        booker = Agent(name="booker", model=model, tools=g.tools, hooks=g.hooks())
        outer = Agent(
            name="assistant", model=model, tools=[booker.as_tool("book", "Books.", needs_approval=True)]
        )
        result = Runner.run_sync(outer, "book", context=dict(USER), run_config=g.run_config(RUN))
        seen: list[tuple[str, bool, bool]] = []
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                seen.append((str(item.call_id), g.gates(item), g.confirmation(item) is not None))
                state.approve(item)
            result = Runner.run_sync(outer, state, run_config=g.run_config(RUN))
    assert seen == [("o1", False, False), ("c4", True, True)]
    assert result.final_output == "done"
    assert [u["tool"] for u in upstream()] == ["calendar.create_event"]
    assert console_pending(sidecar) == []


@pytest.mark.parametrize("where", ["agents", "run"])
def test_every_agents_model_call_is_recorded_with_the_gated_outputs_it_carries(
    sidecar: Running, where: str
) -> None:
    """After a handoff the second agent's model call carries the first agent's gated output:
    recorded as fed there too, whether callgate's hooks are on each agent (``g.hooks()``) or on
    the run (``g.run_hooks(theirs)``, the application's own ``RunHooks`` still run)."""
    from tests.openai_agents_multi_app import triage_and_booker
    from tests.test_adapter_openai_agents import fed

    calls: list[str] = []

    class Mine(RunHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            calls.append(f"llm:{agent.name}")

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            calls.append(f"handoff:{from_agent.name}->{to_agent.name}")

    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        model = ScriptedModel(
            [
                [function_call("weather__get", WEATHER, call_id="c1")],
                [function_call("transfer_to_booker", {}, call_id="h1")],
                [assistant_message("booked")],
            ]
        )
        triage, booker, gates = triage_and_booker(cg, new_session(cg), model, with_confirmer=True)
        if where == "run":  # no hooks on the agents: the run's
            booker = booker.clone(hooks=None)
            triage = triage.clone(hooks=None, handoffs=[booker])
        hooks = gates[0].run_hooks(Mine()) if where == "run" else Mine()
        result = Runner.run_sync(
            triage, "?", context=dict(USER), run_config=gates[0].run_config(RUN), hooks=hooks
        )
    assert result.final_output == "booked" and result.last_agent.name == "booker"
    assert calls == ["llm:triage", "llm:triage", "handoff:triage->booker", "llm:booker"]
    invocation_id = outputs(result)["c1"].custom_data["callgate"]["invocation_id"]
    assert len(fed(sidecar, invocation_id)) == 2  # the triage's second call and the booker's


def test_a_call_parked_in_the_turn_that_hands_off_runs_once_and_the_handoff_follows(sidecar: Running) -> None:
    """One gate shared by both agents; the first agent's turn parks a booking and hands off; the
    approval runs the booking once, then the second agent answers (streamed)."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        g = gated(cg, new_session(cg), ("weather.get", "calendar.create_event"))
        model = ScriptedModel(
            [
                [
                    function_call("calendar__create_event", EVENT, call_id="c4"),
                    function_call("transfer_to_booker", {}, call_id="h1"),
                ],
                [assistant_message("booked")],
            ]
        )
        booker = Agent(name="booker", model=model, tools=g.tools, hooks=g.hooks())
        triage = Agent(name="triage", model=model, tools=g.tools, handoffs=[booker], hooks=g.hooks())

        async def run() -> Any:
            result = Runner.run_streamed(triage, "?", context=dict(USER), run_config=g.run_config(RUN))
            async for _ in result.stream_events():
                pass
            assert [i.call_id for i in result.interruptions] == ["c4"]
            state = result.to_state()
            state.approve(result.interruptions[0])
            again = Runner.run_streamed(triage, state, run_config=g.run_config(RUN))
            async for _ in again.stream_events():
                pass
            return again

        result = asyncio.run(run())
    assert result.final_output == "booked" and result.last_agent.name == "booker"
    assert [u["tool"] for u in upstream()] == ["calendar.create_event"]
    assert console_pending(sidecar) == []


def test_console_only_parallel_approvals_each_wait_for_the_console_and_run_once(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        g = gated(cg, session, ("calendar.create_event",), with_confirmer=False)
        model = ScriptedModel(
            [
                [
                    function_call("calendar__create_event", EVENT, call_id="c4"),
                    function_call("calendar__create_event", LATER, call_id="c5"),
                ],
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks())
        result = Runner.run_sync(agent, "?", run_config=g.run_config(RUN))
        pending = console_pending(sidecar)
        assert len(pending) == 2
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)

        def console() -> None:  # confirms each call once both tools wait for it
            for _ in range(400):
                if len(g.waiting()) == 2:
                    break
                time.sleep(0.05)
            assert sorted(w.invocation_id for w in g.waiting()) == sorted(pending)
            for invocation_id in pending:
                confirm_now(sidecar, invocation_id)

        threading.Thread(target=console).start()
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    assert sorted(u["title"] for u in upstream()) == ["Retro", "Standup"]
    assert console_pending(sidecar) == []


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_deferred_gated_tools_in_a_namespace_run_and_are_decided_as_any(
    sidecar: Running, decision: str
) -> None:
    """Tools the SDK's docs defer (``defer_loading=True``, a ``tool_namespace``, ``ToolSearchTool``):
    gated, the deferred flag is kept and a namespaced call parks, is shown and decided as any."""
    from agents import ToolSearchTool, tool_namespace

    theirs = {
        n: dataclasses.replace(TOOLS[n], defer_loading=True) for n in ("weather.get", "calendar.create_event")
    }
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        g = Gate(
            theirs, client=cg, session=new_session(cg), executor_id="x", confirmer=cg.confirmer(),
            approver=lambda ctx: str(ctx.context["user"]), external_ids={"calendar.create_event": "event_id"},
        )  # fmt: skip
        assert all(t.defer_loading for t in g.tools)
        tools = [*tool_namespace(name="office", description="Office tools.", tools=g.tools), ToolSearchTool()]
        model = ScriptedModel(
            [
                [
                    function_call("weather__get", WEATHER, call_id="c1", namespace="office"),
                    function_call("calendar__create_event", EVENT, call_id="c4", namespace="office"),
                ],
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="a", model=model, tools=tools, hooks=g.hooks())
        result = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN))
        assert [i.call_id for i in result.interruptions] == ["c4"]
        assert "calendar.create_event" in (g.confirmation(result.interruptions[0]) or "")
        state = result.to_state()
        state.approve(result.interruptions[0]) if decision == "approve" else state.reject(
            result.interruptions[0]
        )
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    ran = [u["tool"] for u in upstream()]
    assert ran == (["weather.get", "calendar.create_event"] if decision == "approve" else ["weather.get"])
    assert console_pending(sidecar) == []
