"""callgate.adapters.openai_agents against the REAL OpenAI Agents SDK (``agents.testing.
ScriptedModel``, no network) and a real sidecar, written the way the SDK's docs write an approval
loop (tests/openai_agents_app.py): the application's own ``@function_tool`` functions, gated;
``state.approve`` / ``state.reject``; ``to_string`` and ``RunState.from_string`` in a **separate
Python process**; one execution counted at the upstream (a ledger file) and the approver read back
from the event trail."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunState,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    ToolOutputImage,
    ToolOutputText,
    function_tool,
    input_guardrail,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from callgate.adapters.openai_agents import CallgateToolError, Gate
from callgate.client import CallgateClientError, Client, Session
from callgate.config import IdempotencyConfig, StoreConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import ROOT, Running, calendar_secret, short_tmpdir, start_sidecar, stop_sidecar
from tests.openai_agents_app import (
    CANARY,
    LATER_EVENT,
    RUN,
    TOOLS,
    client_for,
    gate_and_agent,
    gated_agent,
    resume,
)

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}
USER = {"user": "alice@agent-ui"}


@pytest.fixture
def sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    """A sidecar with the calendar tool's upstream secret, and an empty upstream ledger."""
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(tmp_path / "upstream.jsonl"))
    running, tmp = start_sidecar(secrets=(calendar_secret("CALLGATE_TEST_AGENTS_TOKEN", CANARY),))
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def sockets(server: Running) -> Path:
    return Path(server.sidecar.addresses["agent"][0].removeprefix("unix:")).parent


def upstream() -> list[dict[str, Any]]:
    """What reached the upstream: one line per execution, in any process."""
    path = Path(os.environ["CALLGATE_TEST_LEDGER"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def outputs(result: Any) -> dict[str, Any]:
    """call id -> the tool output item (what the model is sent, and the SDK-only custom data)."""
    return {
        str(i.raw_item["call_id"]): i
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    }


def new_session(cg: Client) -> Session:
    return cg.session("acme", "alice", timezone="Asia/Shanghai")


def trail(server: Running, invocation_id: str) -> tuple[str, list[pb.Event]]:
    inv = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=invocation_id, session_id=server.session_of(invocation_id))
    )
    return pb.State.Name(inv.invocation.state), list(inv.events)


def booking(cg: Client, session: Session, *, with_confirmer: bool, then: str = "done") -> Agent[Any]:
    model = ScriptedModel(
        [[function_call("calendar__create_event", EVENT, call_id="c4")], [assistant_message(then)]]
    )
    return gated_agent(cg, session, model, with_confirmer=with_confirmer)


def interrupted(cg: Client, session: Session, *, with_confirmer: bool) -> tuple[Agent[Any], Any]:
    agent = booking(cg, session, with_confirmer=with_confirmer)
    result = Runner.run_sync(agent, "book the standup", context=dict(USER), run_config=RUN)
    assert [i.call_id for i in result.interruptions] == ["c4"]
    assert upstream() == []  # parked, not run
    return agent, result


def parked_id(server: Running) -> str:
    pending = server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    assert len(pending) == 1
    return str(pending[0].invocation_id)


def console_pending(server: Running) -> list[str]:
    return [
        p.invocation_id
        for p in server.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
    ]


def event(events: list[pb.Event], kind: str) -> dict[str, Any]:
    found = [dict(e.data) for e in events if e.kind == kind]
    assert found, f"no {kind} event in {[e.kind for e in events]}"
    return found[-1]


# ---------------------------------------------------------------- tools and outputs
def test_the_users_function_tools_are_shown_under_callgate_names_without_injected_parameters(
    sidecar: Running,
) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        agent = gated_agent(cg, new_session(cg), ScriptedModel([]), with_confirmer=False)
    tools = {t.name: t for t in agent.tools}
    assert sorted(tools) == ["calendar__create_event", "weather__get"]
    cal = tools["calendar__create_event"]
    assert cal.description.startswith("Create an event in the user's calendar.")  # the docstring
    props = cal.params_json_schema["properties"]
    assert sorted(props) == ["calendar_id", "duration_minutes", "start", "title"]  # no token, no key
    assert props["title"]["description"] == "The event's title."
    assert cal.params_json_schema["additionalProperties"] is False


def test_allow_runs_the_typed_function_once_and_the_model_gets_the_content(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel(
            [
                [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1")],
                [assistant_message("sunny")],
            ]
        )
        result = Runner.run_sync(
            gated_agent(cg, new_session(cg), model, with_confirmer=False), "?", run_config=RUN
        )
    assert upstream() == [{"tool": "weather.get", "city": "Paris", "date": "2026-07-20"}]
    item = outputs(result)["c1"]
    content = json.loads(item.output)
    assert "role" not in content and "tool_call_id" not in content  # no second envelope
    assert content["type"] == "tool_result" and content["status"] == "ok"
    assert "Paris" in content["data"]["city"] and "sunny" in content["data"]["forecast"]
    assert item.raw_item["output"] == item.output  # exactly what the model is sent
    assert item.custom_data["callgate"] == {"invocation_id": content["invocation_id"], "status": "OBSERVED"}
    # the second model call named the tool message fed into it (gate.hooks(), 6.13 question 8)
    assert len(fed(sidecar, content["invocation_id"])) == 1


def fed(server: Running, invocation_id: str) -> list[Any]:
    """The model calls the runtime said it fed the invocation's tool message into."""
    return list(server.call(server.sidecar.components.store.list_fed(invocation_id)))


def test_a_tool_message_handed_out_by_another_process_is_reported_as_fed(sidecar: Running) -> None:
    """A gate that did not run the call (another process, a restored state) finds the output's
    invocation by its tool call id and names it on the next model call's ListTools."""
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        model = ScriptedModel(
            [
                [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1")],
                [assistant_message("ok")],
            ]
        )
        result = Runner.run_sync(Agent(name="a", model=model, tools=Gate(TOOLS, client=cg, session=session,
            executor_id="x", external_ids={"calendar.create_event": "event_id"}).tools), "?", run_config=RUN)  # fmt: skip
        invocation_id = outputs(result)["c1"].custom_data["callgate"]["invocation_id"]
        assert fed(sidecar, invocation_id) == []  # no hooks: nothing reported
        other = Gate(
            TOOLS, client=cg, session=Session(cg, session.session_id), executor_id="x",
            external_ids={"calendar.create_event": "event_id"},
        )  # fmt: skip
        items = result.to_input_list()
        assert other.record_model_call(items) == (invocation_id,)
    assert len(fed(sidecar, invocation_id)) == 1


def test_an_async_function_taking_the_sdks_context_gets_it(sidecar: Running) -> None:
    seen: list[tuple[str, str]] = []

    @function_tool
    async def get_weather(ctx: RunContextWrapper[Any], city: str, date: str) -> str:
        """Forecast."""
        seen.append((ctx.context["user"], city))
        return "rain"

    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        tools = Gate({"weather.get": get_weather}, client=cg, session=new_session(cg), executor_id="x").tools
        model = ScriptedModel(
            [
                [function_call("weather__get", {"city": "Oslo", "date": "2026-07-20"}, call_id="c1")],
                [assistant_message("rain")],
            ]
        )
        result = Runner.run_sync(
            Agent(name="a", model=model, tools=tools), "?", context=dict(USER), run_config=RUN
        )
    assert seen == [("alice@agent-ui", "Oslo")]
    assert "rain" in json.loads(outputs(result)["c1"].output)["data"]


def test_deny_and_rejection_reach_the_model_as_content_and_never_run(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel(
            [
                [
                    function_call("calendar__create_event", {**EVENT, "duration_minutes": 600}, call_id="c2"),
                    function_call("weather__get", {"city": "Paris"}, call_id="c3"),
                ],
                [assistant_message("could not")],
            ]
        )
        result = Runner.run_sync(
            gated_agent(cg, new_session(cg), model, with_confirmer=False), "?", run_config=RUN
        )
    assert not result.interruptions and upstream() == []
    out = outputs(result)
    assert json.loads(out["c2"].output)["status"] == "denied"
    assert json.loads(out["c3"].output)["status"] == "rejected"


def test_a_function_that_does_not_fit_the_toolspec_is_refused_by_name(sidecar: Running) -> None:
    @function_tool
    def create_event(title: str, start: str) -> str:
        """Drops calendar_id and duration_minutes: would run something else than approved."""
        return title

    with client_for(sockets(sidecar), with_confirmer=False) as cg, pytest.raises(CallgateClientError) as exc:
        Gate({"calendar.create_event": create_event}, client=cg, session=new_session(cg), executor_id="x")
    assert exc.value.code == "tool_mismatch"
    assert "calendar.create_event" in str(exc.value) and "calendar_id" in str(exc.value)


def test_a_list_of_tools_is_matched_by_callgate_name_and_an_unknown_one_is_refused(sidecar: Running) -> None:
    @function_tool(name_override="weather.get")
    def weather(city: str, date: str) -> str:
        """Forecast."""
        return city

    @function_tool
    def send_money(to: str) -> str:
        """Not a tool this session lists."""
        return to

    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        assert [t.name for t in Gate([weather], client=cg, session=session, executor_id="x").tools] == [
            "weather__get"
        ]
        with pytest.raises(CallgateClientError) as exc:
            Gate([send_money], client=cg, session=session, executor_id="x")
    assert exc.value.code == "unknown_tool" and "send_money" in str(exc.value)


# ---------------------------------------------------------------- approvals with a confirmer
def test_sdk_approve_confirms_through_the_confirmer_runs_once_and_records_the_approver(
    sidecar: Running,
) -> None:
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        agent, first = interrupted(cg, new_session(cg), with_confirmer=True)
        invocation_id = parked_id(sidecar)
        state = first.to_state()
        state.approve(first.interruptions[0])  # the SDK's own approval, nothing of callgate's
        result = Runner.run_sync(agent, state, run_config=RUN)
    assert not result.interruptions and result.final_output == "done"
    [ran] = upstream()
    assert ran["calendar_id"] == "primary" and ran["duration_minutes"] == 15  # canonical arguments
    assert ran["token_ok"] is True and ran["key"]  # the secret and the key, injected, typed
    content = json.loads(outputs(result)["c4"].output)
    assert content["status"] == "ok" and "evt_1" in content["data"]["event_id"]
    assert CANARY not in outputs(result)["c4"].output  # the echoed secret is redacted
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "OBSERVED"
    assert event(events, "confirmed")["confirmed_by"] == "alice@agent-ui"


@pytest.mark.parametrize("with_confirmer", [True, False], ids=["confirmer", "console-only"])
def test_sdk_reject_ends_the_parked_call_at_once(sidecar: Running, with_confirmer: bool) -> None:
    with client_for(sockets(sidecar), with_confirmer=with_confirmer) as cg:
        agent, first = interrupted(cg, new_session(cg), with_confirmer=with_confirmer)
        invocation_id = parked_id(sidecar)
        state = first.to_state()
        state.reject(first.interruptions[0])  # the SDK's own rejection
        result = Runner.run_sync(agent, state, run_config=RUN)
    assert not result.interruptions and upstream() == []
    assert outputs(result)["c4"].output == "Tool execution was not approved."  # the SDK's own text
    assert console_pending(sidecar) == []  # it left the console
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "CANCELLED_BEFORE_COMMIT"
    if with_confirmer:  # denied through the confirmer, with who decided
        assert event(events, "confirmation_rejected")["denied_by"] == "alice@agent-ui"
    else:  # cancelled from the agent side
        assert event(events, "cancelled")


def resume_elsewhere(
    server: Running, session: Session, saved: str, decision: str, mode: str
) -> dict[str, Any]:
    """Restore and resume in a separate Python process (tests/openai_agents_app.py)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.openai_agents_app",
            str(sockets(server)),
            session.session_id,
            decision,
            mode,
        ],
        input=saved,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def parked_and_saved(server: Running, *, with_confirmer: bool = True) -> tuple[Session, str, str]:
    """A run interrupted here, its state saved with the SDK's ``to_string``."""
    with client_for(sockets(server), with_confirmer=with_confirmer) as cg:
        session = new_session(cg)
        _, first = interrupted(cg, session, with_confirmer=with_confirmer)
        saved = first.to_state().to_string()
    return session, saved, parked_id(server)


def test_a_saved_state_resumes_in_a_new_process_and_completes_exactly_once(sidecar: Running) -> None:
    session, saved, invocation_id = parked_and_saved(sidecar)
    digest = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0].digest
    done = resume_elsewhere(sidecar, session, saved, "approve", "confirmer")
    assert done["final_output"] == "done" and done["interruptions"] == 0
    [shown] = done["summaries"]  # callgate's summary, read from the sidecar by the new process
    assert f"digest {digest}" in shown and '"calendar_id": "primary"' in shown, shown
    assert json.loads(done["outputs"]["c4"]["output"])["status"] == "ok"
    assert done["outputs"]["c4"]["custom_data"]["callgate"]["invocation_id"] == invocation_id
    assert len(upstream()) == 1
    # the same snapshot resumed once more, here (a retry, a second worker): replayed, not run again
    again = asyncio.run(resume(sockets(sidecar), session.session_id, saved, "approve", with_confirmer=True))
    assert again["final_output"] == "done"
    assert again["outputs"]["c4"]["output"] == done["outputs"]["c4"]["output"]
    assert len(upstream()) == 1
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "OBSERVED"
    assert event(events, "confirmed")["confirmed_by"] == "alice@agent-ui"


def test_a_saved_state_rejected_in_a_new_process_is_denied_and_never_runs(sidecar: Running) -> None:
    session, saved, invocation_id = parked_and_saved(sidecar)
    done = resume_elsewhere(sidecar, session, saved, "reject", "confirmer")
    assert done["outputs"]["c4"]["output"] == "Tool execution was not approved."
    assert upstream() == []
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "CANCELLED_BEFORE_COMMIT"
    assert event(events, "confirmation_rejected")["denied_by"] == "alice@agent-ui"
    assert console_pending(sidecar) == []


def test_console_only_a_saved_state_rejected_in_a_new_process_leaves_the_console_at_once(
    sidecar: Running,
) -> None:
    """No confirmer in either process (the role separation): the SDK's ``state.reject`` applied
    in the second process finds the call parked by the first (ListParked) and cancels it."""
    session, saved, invocation_id = parked_and_saved(sidecar, with_confirmer=False)
    assert console_pending(sidecar) == [invocation_id]
    done = resume_elsewhere(sidecar, session, saved, "reject", "console")
    assert done["outputs"]["c4"]["output"] == "Tool execution was not approved."
    assert done["final_output"] == "done" and upstream() == []
    assert console_pending(sidecar) == []  # it left the console, not at its expiry
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "CANCELLED_BEFORE_COMMIT"
    assert event(events, "cancelled")["reason"] == "rejected in the agent run"


def test_console_only_a_saved_state_approved_in_a_new_process_waits_for_the_console_and_runs_once(
    sidecar: Running,
) -> None:
    """No confirmer anywhere: the second process's ``state.approve`` confirms nothing; it waits
    for the console, whose confirmation (given while it waits) runs the call once there."""
    session, saved, invocation_id = parked_and_saved(sidecar, with_confirmer=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_agents_app", str(sockets(sidecar)), session.session_id,
         "approve", "console"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
    )  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(saved)
        proc.stdin.close()
        watched = sidecar.gate.WatchInvocation(
            pb.WatchInvocationRequest(invocation_id=invocation_id, session_id=session.session_id), timeout=60
        )
        for change in watched:  # the second process's approval alone confirmed nothing
            assert pb.State.Name(change.invocation.state) == "AUTHORIZED"
            if any(e.kind == "idempotent_replay" for e in change.events):
                break  # it proposed the call again: it is at its console wait now (or about to be)
        watched.cancel()
        assert upstream() == []
        digest = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0].digest
        sidecar.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by="bob@console")
        )
        proc.stdin = None  # written and closed above
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    done = json.loads(stdout.strip().splitlines()[-1])
    assert done["final_output"] == "done" and json.loads(done["outputs"]["c4"]["output"])["status"] == "ok"
    assert len(upstream()) == 1
    state_name, events = trail(sidecar, invocation_id)
    assert state_name == "OBSERVED" and event(events, "confirmed")["confirmed_by"] == "bob@console"


# ---------------------------------------------------------------- confirmation only in the console
class ToolStarted(RunHooks[Any]):
    """Tells the test the resumed run reached the tool (it then waits for the console)."""

    def __init__(self) -> None:
        self.started = threading.Event()

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.started.set()


def resume_in_thread(
    agent: Agent[Any], state: Any, hooks: ToolStarted
) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = Runner.run_sync(agent, state, run_config=RUN, hooks=hooks)
        except BaseException as exc:  # surfaced to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


@pytest.mark.parametrize("console", ["confirm", "deny"])
def test_without_a_confirmer_sdk_approve_waits_for_the_consoles_decision(
    sidecar: Running, console: str
) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        agent, first = interrupted(cg, new_session(cg), with_confirmer=False)
        invocation_id = parked_id(sidecar)
        state = first.to_state()
        state.approve(first.interruptions[0])  # the SDK's approval does not confirm by itself
        hooks = ToolStarted()
        t, box = resume_in_thread(agent, state, hooks)
        assert hooks.started.wait(30)
        assert console_pending(sidecar) == [invocation_id]  # still the console's to decide
        inv = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0]
        if console == "confirm":
            sidecar.confirmations.Confirm(
                pb.ConfirmRequest(invocation_id=invocation_id, digest=inv.digest, confirmed_by="bob@console")
            )
        else:
            sidecar.confirmations.Deny(
                pb.DenyRequest(invocation_id=invocation_id, digest=inv.digest, denied_by="bob@console")
            )
        t.join(60)
    assert "error" not in box, box.get("error")
    content = json.loads(outputs(box["result"])["c4"].output)
    state_name, events = trail(sidecar, invocation_id)
    if console == "confirm":
        assert content["status"] == "ok" and len(upstream()) == 1 and state_name == "OBSERVED"
        assert event(events, "confirmed")["confirmed_by"] == "bob@console"
    else:
        assert content["status"] == "not_confirmed" and upstream() == []
        assert state_name == "CANCELLED_BEFORE_COMMIT"


def test_a_run_cancelled_while_waiting_for_the_console_cancels_the_call(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        agent, first = interrupted(cg, new_session(cg), with_confirmer=False)
        invocation_id = parked_id(sidecar)
        state = first.to_state()
        state.approve(first.interruptions[0])
        hooks = ToolStarted()

        async def cancel_midway() -> None:
            task = asyncio.create_task(Runner.run(agent, state, run_config=RUN, hooks=hooks))
            await asyncio.to_thread(hooks.started.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_midway())
    assert upstream() == [] and console_pending(sidecar) == []
    assert trail(sidecar, invocation_id)[0] == "CANCELLED_BEFORE_COMMIT"


def test_gate_abandon_cancels_every_parked_call_of_a_dropped_run(sidecar: Running) -> None:
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        session = new_session(cg)
        g = Gate(
            TOOLS,
            client=cg,
            session=session,
            executor_id="x",
            external_ids={"calendar.create_event": "event_id"},
        )
        model = ScriptedModel([[function_call("calendar__create_event", EVENT, call_id="c9")]])
        first = Runner.run_sync(Agent(name="assistant", model=model, tools=g.tools), "book", run_config=RUN)
        invocation_id = parked_id(sidecar)
        asyncio.run(g.abandon(first.to_state()))
    assert console_pending(sidecar) == []
    assert trail(sidecar, invocation_id)[0] == "CANCELLED_BEFORE_COMMIT"


# ---------------------------------------------------------------- failures are typed, nothing runs
def test_sidecar_down_is_a_typed_error_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(tmp_path / "upstream.jsonl"))
    running, tmp = start_sidecar()
    cg = client_for(sockets(running), with_confirmer=False)
    try:
        model = ScriptedModel(
            [[function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="c1")]]
        )
        agent = gated_agent(cg, new_session(cg), model, with_confirmer=False)
        stop_sidecar(running, tmp)  # the sidecar goes away between listing tools and the call
        with pytest.raises(CallgateToolError) as exc:
            Runner.run_sync(agent, "weather?", run_config=RUN)
    finally:
        cg.close()
    assert exc.value.code in ("unavailable", "deadline_exceeded")
    assert upstream() == []


# ---------------------------------------------------------------- edges a new user met (user trial)
def gate_of(
    cg: Client, session: Session, model: ScriptedModel, *, with_confirmer: bool = False
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


def test_a_tool_name_the_model_was_not_shown_is_answered_to_the_model_and_the_run_goes_on(
    sidecar: Running,
) -> None:
    """User trial: the SDK ends the run (``ModelBehaviorError``) on a name it does not have;
    ``gate.run_config()`` makes it the SDK's ``return_error_to_model`` answer in callgate's shape."""
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel(
            [[function_call("send_money", {"to": "mallory"}, call_id="u1")], [assistant_message("sorry")]]
        )
        g, agent = gate_of(cg, new_session(cg), model)
        result = Runner.run_sync(agent, "pay", run_config=g.run_config(RUN))
    assert result.final_output == "sorry" and upstream() == []
    got = json.loads(outputs(result)["u1"].output)
    assert got["status"] == "rejected" and got["code"] == "unknown_tool_version"
    assert 'No tool named "send_money"' in got["message"]
    assert "available: calendar__create_event, weather__get." in got["message"]


def test_arguments_that_repeat_a_key_are_refused_as_the_sidecar_refuses_them(sidecar: Running) -> None:
    """User trial: the SDK hands ``needs_approval`` its last-key-wins parse, so the call ran with
    one of the two values the model wrote (``Oslo``) instead of the sidecar's ``duplicate_key``."""
    dup = '{"city":"Paris","city":"Oslo","date":"2026-07-20"}'
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel([[function_call("weather__get", dup, call_id="d1")], [assistant_message("ok")]])
        session = new_session(cg)
        _, agent = gate_of(cg, session, model)
        result = Runner.run_sync(agent, "?", run_config=RUN)
        earlier = session.find("d1", "weather__get", model_call_id="openai-agents")
    assert upstream() == []
    got = json.loads(outputs(result)["d1"].output)
    assert got["status"] == "rejected" and got["code"] == "duplicate_key", got
    assert earlier is not None and pb.State.Name(earlier.state) == "CANCELLED_BEFORE_COMMIT"


def test_a_call_callgate_refuses_never_asks_a_person_and_the_model_gets_callgates_answer(
    sidecar: Running,
) -> None:
    """With ``gate.run_config()`` callgate decides before the SDK would ask a person (the SDK's
    pre-approval tool input guardrails): arguments the SDK cannot parse (it would ask a person
    without asking the tool), a schema violation, repeated keys and a policy deny are answered to
    the model in callgate's shape; no interruption, nothing runs."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        dup = '{"city":"Paris","city":"Oslo","date":"2026-07-20"}'
        model = ScriptedModel(
            [
                [
                    function_call("weather__get", '{"city":"Paris",', call_id="b1"),
                    function_call("weather__get", {"city": "Paris"}, call_id="b2"),
                    function_call("calendar__create_event", {**EVENT, "duration_minutes": 600}, call_id="b3"),
                    function_call("weather__get", dup, call_id="b4"),
                ],
                [assistant_message("ok")],
            ]
        )
        g, agent = gate_of(cg, new_session(cg), model, with_confirmer=True)
        result = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN))
    assert not result.interruptions and result.final_output == "ok" and upstream() == []
    got = {k: json.loads(v.output) for k, v in outputs(result).items()}
    assert (got["b1"]["status"], got["b1"]["code"]) == ("rejected", "invalid_json"), got["b1"]
    assert (got["b2"]["status"], got["b2"]["code"]) == ("rejected", "schema_violation"), got["b2"]
    assert got["b3"]["status"] == "denied", got["b3"]
    assert (got["b4"]["status"], got["b4"]["code"]) == ("rejected", "duplicate_key"), got["b4"]
    assert console_pending(sidecar) == []


def test_without_the_gates_run_config_the_sdk_asks_and_callgate_says_there_is_nothing_to_approve(
    sidecar: Running,
) -> None:
    """Without ``gate.run_config()`` the SDK still asks a person about arguments it cannot parse
    (its own fail-closed rule); ``gate.confirmation(item)`` is None: callgate holds no
    confirmation for it, so the application rejects it instead of showing raw arguments."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        model = ScriptedModel(
            [[function_call("weather__get", "not json", call_id="b1")], [assistant_message("ok")]]
        )
        g, agent = gate_of(cg, new_session(cg), model, with_confirmer=True)
        first = Runner.run_sync(agent, "?", context=dict(USER), run_config=RUN)
        [item] = first.interruptions
        assert g.confirmation(item) is None
        state = first.to_state()
        state.approve(item)  # approved anyway: refused all the same, nothing runs
        result = Runner.run_sync(agent, state, context=dict(USER), run_config=RUN)
    assert json.loads(outputs(result)["b1"].output)["code"] == "invalid_json" and upstream() == []


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_only_a_confirm_interrupts_and_the_approver_sees_callgates_summary(
    sidecar: Running, decision: str
) -> None:
    """One turn with an unparsable call and a call policy sends for confirmation: exactly one
    interruption (the confirm); ``gate.confirmation(item)`` is callgate's summary (the normalized
    arguments, the digest), also in a new gate over the restored ``to_json`` state; approved it
    runs once, rejected it never runs."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        model = ScriptedModel(
            [
                [
                    function_call("weather__get", "not json", call_id="b1"),
                    function_call("calendar__create_event", EVENT, call_id="c4"),
                ],
                [assistant_message("done")],
            ]
        )
        g, agent = gate_of(cg, session, model, with_confirmer=True)
        first = Runner.run_sync(agent, "?", context=dict(USER), run_config=g.run_config(RUN))
        assert [i.call_id for i in first.interruptions] == ["c4"] and upstream() == []
        summary = g.confirmation(first.interruptions[0])
        invocation_id = parked_id(sidecar)
        assert summary is not None and "calendar.create_event needs your confirmation" in summary
        digest = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0].digest
        assert digest in summary and '"calendar_id": "primary"' in summary  # normalized, not raw
        stored = first.to_state().to_json()
        # a new gate (nothing of the first kept) over the state restored from JSON
        model2 = ScriptedModel([[assistant_message("done")]])
        g2, agent2 = gate_of(
            cg, Session(cg, session.session_id, tenant="acme", subject="alice"), model2, with_confirmer=True
        )
        state = asyncio.run(RunState.from_json(agent2, stored))
        [item] = state.get_interruptions()
        assert g2.confirmation(item) == summary
        state.approve(item) if decision == "approve" else state.reject(item)
        result = Runner.run_sync(agent2, state, run_config=g2.run_config(RUN))
    assert not result.interruptions and result.final_output == "done"
    assert json.loads(outputs(first)["b1"].output)["code"] == "invalid_json"
    state_name, _ = trail(sidecar, invocation_id)
    if decision == "approve":
        assert json.loads(outputs(result)["c4"].output)["status"] == "ok"
        assert len(upstream()) == 1 and state_name == "OBSERVED"
    else:
        assert upstream() == [] and state_name == "CANCELLED_BEFORE_COMMIT"
    assert console_pending(sidecar) == []


def test_parallel_identical_calls_are_two_calls(sidecar: Running) -> None:
    """Two calls with the same arguments in one model turn (distinct call ids) are two
    invocations and run twice; the same call id twice is one call (the SDK's identity)."""
    args = {"city": "Paris", "date": "2026-07-20"}
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel(
            [
                [
                    function_call("weather__get", args, call_id="p1"),
                    function_call("weather__get", args, call_id="p2"),
                ],
                [assistant_message("ok")],
            ]
        )
        _, agent = gate_of(cg, new_session(cg), model)
        result = Runner.run_sync(agent, "?", run_config=RUN)
    out = outputs(result)
    ids = {c: out[c].custom_data["callgate"]["invocation_id"] for c in ("p1", "p2")}
    assert ids["p1"] != ids["p2"] and len(upstream()) == 2
    for c in ("p1", "p2"):
        got = json.loads(out[c].output)
        assert got["status"] == "ok" and got["data"]["city"].startswith("⟦untrusted:")  # marked data
        assert "Paris" in got["data"]["city"]


def test_a_confirmation_that_expires_while_the_run_is_paused_runs_nothing(sidecar: Running) -> None:
    """The state is approved after the confirmation expired: the model is told ``not_confirmed``
    (with the sidecar's code), the run goes on, nothing ran."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        agent, first = interrupted(cg, new_session(cg), with_confirmer=True)
        invocation_id = parked_id(sidecar)
        sidecar.clock.advance(sidecar.config.confirmation.ttl_seconds + 1)
        state = first.to_state()
        state.approve(first.interruptions[0])
        result = Runner.run_sync(agent, state, context=dict(USER), run_config=RUN)
    assert result.final_output == "done" and upstream() == []
    got = json.loads(outputs(result)["c4"].output)
    assert got["status"] == "not_confirmed", got
    assert trail(sidecar, invocation_id)[0] == "CANCELLED_BEFORE_COMMIT"


def test_a_sidecar_restart_between_the_interruption_and_the_resume_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidecar restarts (same store, new sockets) while the saved run waits; the state is
    restored (``RunState.from_string``), approved and resumed against the restarted sidecar by a
    new client and gate: one execution."""
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(tmp_path / "upstream.jsonl"))
    data = short_tmpdir()
    stores = {
        "store": StoreConfig(path=str(data / "callgate.db")),
        "idempotency": IdempotencyConfig(path=str(data / "idempotency.db")),
    }
    secret = calendar_secret("CALLGATE_TEST_AGENTS_TOKEN", CANARY)
    try:
        first, tmp1 = start_sidecar(secrets=(secret,), **stores)
        try:
            session, saved, invocation_id = parked_and_saved(first)
        finally:
            stop_sidecar(first, tmp1)
        second, tmp2 = start_sidecar(secrets=(secret,), **stores)
        try:
            done = asyncio.run(
                resume(sockets(second), session.session_id, saved, "approve", with_confirmer=True)
            )
            state_name, _ = trail(second, invocation_id)
        finally:
            stop_sidecar(second, tmp2)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    assert done["final_output"] == "done" and json.loads(done["outputs"]["c4"]["output"])["status"] == "ok"
    assert len(upstream()) == 1 and state_name == "OBSERVED"


def test_a_result_in_parts_reaches_the_model_as_parts_with_its_text_marked(sidecar: Running) -> None:
    """User trial: a tool answering ``[ToolOutputText, ToolOutputImage]`` reached the model as one
    JSON text with the image's base64 inside the untrusted-data markers. Now the model gets the
    SDK's parts (``input_text`` / ``input_image``): callgate's envelope, the marked text, the image
    as the tool gave it; the trail records the image's size and sha256, never its bytes."""
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()

    @function_tool
    def get_weather(city: str, date: str) -> list[Any]:
        """Forecast with a map."""
        return [ToolOutputText(text=f"sunny in {city}"), ToolOutputImage(image_url=png)]

    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        model = ScriptedModel(
            [
                [function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="i1")],
                [assistant_message("done")],
            ]
        )
        g = Gate({"weather.get": get_weather}, client=cg, session=new_session(cg), executor_id="x")
        result = Runner.run_sync(Agent(name="a", model=model, tools=g.tools), "?", run_config=RUN)
    item = outputs(result)["i1"]
    sent = item.raw_item["output"]
    assert [p["type"] for p in sent] == ["input_text", "input_text", "input_image"]
    envelope = json.loads(sent[0]["text"])
    assert envelope["status"] == "ok" and "data" not in envelope
    assert sent[1]["text"] == f"⟦untrusted:{envelope['nonce']}⟧sunny in Paris⟦/untrusted:{envelope['nonce']}⟧"
    assert sent[2]["image_url"] == png
    _, events = trail(sidecar, item.custom_data["callgate"]["invocation_id"])
    assert "iVBOR" not in json.dumps([dict(e.data) for e in events], default=str)  # no image bytes


def test_repeated_keys_parked_in_one_process_are_refused_and_cancelled_in_another(sidecar: Running) -> None:
    """The call with a repeated key was parked (needs_approval proposed the SDK's parse); the
    state is restored by a new gate (nothing of the first kept), approved: the parked
    invocation is cancelled and the model gets ``duplicate_key``; nothing runs."""
    dup = (
        '{"title":"Standup","title":"Party","start":"2026-07-20T09:00:00+08:00",'
        '"duration_minutes":15,"calendar_id":"primary"}'
    )
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        model = ScriptedModel([[function_call("calendar__create_event", dup, call_id="d2")]])
        _, agent = gate_of(cg, session, model, with_confirmer=True)
        first = Runner.run_sync(agent, "?", context=dict(USER), run_config=RUN)
        assert [i.call_id for i in first.interruptions] == ["d2"]
        saved = first.to_state().to_string()
    assert len(console_pending(sidecar)) == 1
    done = asyncio.run(resume(sockets(sidecar), session.session_id, saved, "approve", with_confirmer=True))
    got = json.loads(done["outputs"]["d2"]["output"])
    assert got["code"] == "duplicate_key" and upstream() == [], got
    assert console_pending(sidecar) == []


def test_a_standing_approval_never_confirms_a_call_no_one_was_shown(sidecar: Running) -> None:
    """``state.approve(item, always_approve=True)`` (the SDK's "always allow this tool"): the
    approved call runs once; a later call of the tool, which the SDK then runs without an
    interruption, was never shown to anyone, so the gate does not confirm it: it is cancelled,
    the model gets ``not_confirmed`` (``confirmation_not_asked``), nothing runs. Before, the
    confirmer confirmed it in the approver's name and the second event was created."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        model = ScriptedModel(
            [
                [function_call("calendar__create_event", EVENT, call_id="c4")],
                [function_call("calendar__create_event", LATER_EVENT, call_id="c5")],
                [assistant_message("done")],
            ]
        )
        g, agent = gate_and_agent(cg, new_session(cg), model, with_confirmer=True)
        first = Runner.run_sync(agent, "book both", context=dict(USER), run_config=g.run_config(RUN))
        assert [i.call_id for i in first.interruptions] == ["c4"]
        state = first.to_state()
        state.approve(first.interruptions[0], always_approve=True)
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert not result.interruptions and result.final_output == "done"
    assert [r["title"] for r in upstream()] == ["Standup"]  # the shown call only
    got = json.loads(outputs(result)["c5"].output)
    assert got["status"] == "not_confirmed" and got["code"] == "confirmation_not_asked", got
    later = outputs(result)["c5"].custom_data["callgate"]["invocation_id"]
    assert trail(sidecar, later)[0] == "CANCELLED_BEFORE_COMMIT"
    assert console_pending(sidecar) == []


def test_a_standing_approval_given_in_a_new_process_confirms_only_the_shown_call(sidecar: Running) -> None:
    """The same in the second process (state restored with ``RunState.from_string``, approved
    with ``always_approve=True``, resumed without the gate's run config): the restored call runs
    once, the model's next booking is refused unconfirmed."""
    session, saved, invocation_id = parked_and_saved(sidecar)
    out = resume_elsewhere(sidecar, session, saved, "approve-always", "confirmer")
    assert out["final_output"] == "done" and out["interruptions"] == 0
    assert [r["title"] for r in upstream()] == ["Standup"]
    assert json.loads(out["outputs"]["c4"]["output"])["status"] == "ok"
    got = json.loads(out["outputs"]["c9"]["output"])
    assert got["status"] == "not_confirmed" and got["code"] == "confirmation_not_asked", got
    assert trail(sidecar, invocation_id)[0] == "OBSERVED"
    assert console_pending(sidecar) == []


# ---------------------------------------------------------------- secrets in the arguments
AG_KEY = "sk-" + "agMaskKeyA1b2C3d4E5f6W9x8"
"""A key the default ``api_key`` pattern describes (not configured)."""
SECRET_EVENT = {**EVENT, "title": f"Standup {CANARY} {AG_KEY}"}
"""A title holding the sidecar's configured secret (``calendar_api_token``) and the key."""
MASKED_TITLE = f"Standup ⟦masked calendar_api_token⟧ ⟦masked api_key …{AG_KEY[-4:]}⟧"


def shows_a_secret(text: str) -> bool:
    """Whether ``text`` shows the configured secret or the key, in any case, as written or
    JSON-escaped. A bool only: a failing assertion never prints either."""
    folded = (text + json.dumps(text)).casefold()
    return any(s.casefold() in folded for s in (CANARY, AG_KEY))


def secret_booking(cg: Client, session: Session, *, with_confirmer: bool) -> tuple[Gate, Agent[Any], Any]:
    model = ScriptedModel(
        [[function_call("calendar__create_event", SECRET_EVENT, call_id="c4")], [assistant_message("done")]]
    )
    g, agent = gate_and_agent(cg, session, model, with_confirmer=with_confirmer)
    first = Runner.run_sync(agent, "book it", context=dict(USER), run_config=g.run_config(RUN))
    assert [i.call_id for i in first.interruptions] == ["c4"] and upstream() == []
    return g, agent, first


def test_the_approver_sees_no_secret_and_the_approval_in_a_new_process_runs_the_exact_call_once(
    sidecar: Running,
) -> None:
    """``gate.confirmation(item)`` (what callgate puts in front of the approver) masks the
    configured secret by name and the ``sk-`` key with its last four characters, in the process
    that parked the call and in the one that restores the state and approves; the digest shown is
    the exact arguments' and the approved call runs once with the real values. The SDK's own
    ``ToolApprovalItem`` still carries the model's raw arguments (the SDK's, docs/CLIENTS.md).
    Before, the summary showed both in clear."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g, _, first = secret_booking(cg, session, with_confirmer=True)
        summary = g.confirmation(first.interruptions[0])
        saved = first.to_state().to_string()
    assert summary is not None and not shows_a_secret(summary)
    assert MASKED_TITLE in summary
    pending = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0]
    assert f"digest {pending.digest}" in summary
    stored = sidecar.call(sidecar.sidecar.components.store.get_invocation(pending.invocation_id))
    assert stored.digest == pending.digest and CANARY in stored.normalized_arguments.decode()
    assert shows_a_secret(str(first.interruptions[0].arguments))  # the SDK's item: the model's raw call
    done = resume_elsewhere(sidecar, session, saved, "approve", "confirmer")
    [shown] = done["summaries"]
    assert not shows_a_secret(shown) and MASKED_TITLE in shown and pending.digest in shown
    assert done["final_output"] == "done" and json.loads(done["outputs"]["c4"]["output"])["status"] == "ok"
    [ran] = upstream()
    assert ran["title"] == SECRET_EVENT["title"] and ran["token_ok"] is True  # the real values, once
    state_name, events = trail(sidecar, pending.invocation_id)
    assert state_name == "OBSERVED" and event(events, "confirmed")["confirmed_by"] == "alice@agent-ui"


def test_console_only_what_waits_for_the_console_is_listed_masked(sidecar: Running) -> None:
    """Without a confirmer: ``gate.waiting()`` (a status line's calls waiting for the console)
    carries the masked arguments beside the exact ones; the console's confirmation runs the call
    once with the real values."""
    with client_for(sockets(sidecar), with_confirmer=False) as cg:
        g, agent, first = secret_booking(cg, new_session(cg), with_confirmer=False)
        summary = g.confirmation(first.interruptions[0])
        assert summary is not None and not shows_a_secret(summary) and MASKED_TITLE in summary
        state = first.to_state()
        state.approve(first.interruptions[0])
        hooks = ToolStarted()
        t, box = resume_in_thread(agent, state, hooks)
        assert hooks.started.wait(30)
        for _ in range(100):  # the tool reached its console wait
            if g.waiting():
                break
            threading.Event().wait(0.1)
        [waiting] = g.waiting()
        assert not shows_a_secret(waiting.masked_arguments.decode())
        assert json.loads(waiting.masked_arguments)["title"] == MASKED_TITLE
        assert json.loads(waiting.normalized_arguments)["title"] == SECRET_EVENT["title"]
        pending = sidecar.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending[0]
        assert pending.digest == waiting.digest
        sidecar.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=waiting.invocation_id, digest=waiting.digest, confirmed_by="bob")
        )
        t.join(60)
    assert "error" not in box, box.get("error")
    assert json.loads(outputs(box["result"])["c4"].output)["status"] == "ok"
    [ran] = upstream()
    assert ran["title"] == SECRET_EVENT["title"] and ran["token_ok"] is True


# ---------------------------------------------------------------- the tool's own needs_approval
def test_the_tools_own_async_needs_approval_still_asks_for_a_call_callgate_allows(sidecar: Running) -> None:
    """A ``@function_tool(needs_approval=<async callable>)`` as the SDK's docs write one: the
    application's rule is kept on top of callgate's decision (before, the gate replaced it and
    the call ran unasked). A call callgate allows and the rule asks about interrupts the run; its
    invocation is cancelled at once (nothing waits PREPARED), approved it is proposed anew and runs
    once, rejected it never runs; a call the rule lets through runs at once. Resumed with a new
    client and gate (``RunState.from_string``), which finds the asked calls by tool call id."""
    asked_for: list[str] = []

    async def rule(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        asked_for.append(call_id)
        return bool(params["city"] != "Oslo")

    @function_tool(needs_approval=rule)
    def get_weather(city: str, date: str) -> dict[str, str]:
        """Forecast."""
        with open(os.environ["CALLGATE_TEST_LEDGER"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": "weather.get", "city": city}) + "\n")
        return {"city": city, "forecast": "sunny"}

    def weather_gate(cg: Client, session: Session) -> Gate:
        return Gate({"weather.get": get_weather}, client=cg, session=session, executor_id="x",
                    confirmer=cg.confirmer(), approver="alice@agent-ui")  # fmt: skip

    calls = [
        function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="w1"),
        function_call("weather__get", {"city": "Oslo", "date": "2026-07-20"}, call_id="w2"),
        function_call("weather__get", {"city": "Rome", "date": "2026-07-20"}, call_id="w3"),
    ]
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g = weather_gate(cg, session)
        agent = Agent(name="a", model=ScriptedModel([calls, [assistant_message("done")]]), tools=g.tools)
        first = Runner.run_sync(agent, "?", run_config=g.run_config(RUN))
        assert sorted(i.call_id for i in first.interruptions) == ["w1", "w3"]
        assert [r["city"] for r in upstream()] == ["Oslo"]  # the rule let it through
        saved = first.to_state().to_string()
    assert console_pending(sidecar) == []  # nothing of callgate's to confirm, nothing held
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        g = weather_gate(cg, Session(cg, session.session_id))
        agent = Agent(name="a", model=ScriptedModel([[assistant_message("done")]]), tools=g.tools)
        state = asyncio.run(RunState.from_string(agent, saved))
        for item in state.get_interruptions():
            summary = g.confirmation(item)
            assert summary is not None and "needs_approval" in summary, summary
            state.approve(item) if item.call_id == "w1" else state.reject(item)
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert result.final_output == "done"
    assert [r["city"] for r in upstream()] == ["Oslo", "Paris"]  # approved: once; rejected: never
    out = outputs(result)
    assert json.loads(out["w1"].output)["status"] == "ok"
    assert out["w3"].output == "Tool execution was not approved."
    ran = out["w1"].custom_data["callgate"]["invocation_id"]
    assert trail(sidecar, ran)[0] == "OBSERVED"
    assert set(asked_for) == {"w1", "w2", "w3"}


def test_streamed_run_with_a_standing_rejection_proposes_nothing_for_later_calls(sidecar: Running) -> None:
    """``Runner.run_streamed`` interrupted and resumed streamed, the interruption rejected with
    ``always_reject=True``: the parked call is denied (it leaves the console), the model's next
    call of the tool is answered by the SDK without being proposed; nothing runs."""

    async def run() -> Any:
        with client_for(sockets(sidecar), with_confirmer=True) as cg:
            model = ScriptedModel(
                [
                    [function_call("calendar__create_event", EVENT, call_id="c4")],
                    [function_call("calendar__create_event", LATER_EVENT, call_id="c5")],
                    [assistant_message("done")],
                ]
            )
            g, agent = gate_and_agent(cg, new_session(cg), model, with_confirmer=True)
            first = Runner.run_streamed(agent, "book both", context=dict(USER), run_config=g.run_config(RUN))
            async for _ in first.stream_events():
                pass
            assert [i.call_id for i in first.interruptions] == ["c4"]
            parked = parked_id(sidecar)
            state = first.to_state()
            state.reject(first.interruptions[0], always_reject=True)
            again = Runner.run_streamed(agent, state, run_config=g.run_config(RUN))
            async for _ in again.stream_events():
                pass
            later = g.session.find("c5", "calendar__create_event", model_call_id=g.model_call_id)
            return again, parked, later

    result, parked, later = asyncio.run(run())
    assert result.final_output == "done" and not result.interruptions and upstream() == []
    out = outputs(result)
    assert out["c4"].output == out["c5"].output == "Tool execution was not approved."
    assert trail(sidecar, parked)[0] == "CANCELLED_BEFORE_COMMIT"
    assert console_pending(sidecar) == []
    assert later is None  # c5 was never proposed


def test_the_tools_own_guardrails_are_kept_and_a_refusal_ends_callgates_invocation(sidecar: Running) -> None:
    """``@function_tool(tool_input_guardrails=..., tool_output_guardrails=...)`` as the SDK's docs
    write them: kept on the gated tool (before, the gate dropped them and the call ran). The
    tool's input guardrail runs after callgate's; when it refuses, nothing runs, the model gets its
    message, and the invocation callgate allowed or parked for the call is cancelled at once (a
    call that needed a person never interrupts and leaves the console). The output guardrail
    replaces what the model gets of a call that ran once."""

    @tool_input_guardrail
    def no_rome_no_board(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        args = json.loads(data.context.tool_arguments or "{}")
        if args.get("city") == "Rome" or args.get("title") == "Board review":
            return ToolGuardrailFunctionOutput.reject_content("refused by the app")
        return ToolGuardrailFunctionOutput.allow()

    @tool_output_guardrail
    def hide_oslo(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        if "Oslo" in str(data.output):
            return ToolGuardrailFunctionOutput.reject_content("output withheld by the app")
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[no_rome_no_board], tool_output_guardrails=[hide_oslo])
    def get_weather(city: str, date: str) -> dict[str, str]:
        """Forecast."""
        with open(os.environ["CALLGATE_TEST_LEDGER"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": "weather.get", "city": city}) + "\n")
        return {"city": city, "forecast": "sunny"}

    guarded_event = function_tool(
        TOOLS["calendar.create_event"].__wrapped__,  # type: ignore[attr-defined]
        tool_input_guardrails=[no_rome_no_board],
    )
    calls = [
        function_call("weather__get", {"city": "Rome", "date": "2026-07-20"}, call_id="w1"),
        function_call("weather__get", {"city": "Oslo", "date": "2026-07-20"}, call_id="w2"),
        function_call("calendar__create_event", LATER_EVENT, call_id="c1"),
    ]
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        g = Gate(
            {"weather.get": get_weather, "calendar.create_event": guarded_event}, client=cg,
            session=new_session(cg), executor_id="x", confirmer=cg.confirmer(), approver="alice@agent-ui",
            external_ids={"calendar.create_event": "event_id"},
        )  # fmt: skip
        assert [t.get_name() for t in g.tools[0].tool_input_guardrails or []] == [
            "callgate",
            "no_rome_no_board",
        ]
        agent = Agent(name="a", model=ScriptedModel([calls, [assistant_message("done")]]), tools=g.tools)
        result = Runner.run_sync(agent, "?", run_config=g.run_config(RUN))
        ended = {
            call_id: g.session.find(call_id, name, model_call_id=g.model_call_id)
            for call_id, name in (("w1", "weather__get"), ("c1", "calendar__create_event"))
        }
    assert not result.interruptions and result.final_output == "done"
    assert [r["city"] for r in upstream()] == ["Oslo"]  # Rome refused by the app; Oslo ran once
    out = outputs(result)
    assert out["w1"].output == "refused by the app" and out["c1"].output == "refused by the app"
    assert out["w2"].output == "output withheld by the app"
    assert console_pending(sidecar) == []  # the parked booking left the console at once
    for call_id, inv in ended.items():
        assert inv is not None and inv.state == pb.CANCELLED_BEFORE_COMMIT, (call_id, inv)


def test_a_run_ended_by_a_guardrails_tripwire_leaves_nothing_in_the_console_after_abandon(
    sidecar: Running,
) -> None:
    """An agent input guardrail that trips (run in parallel with the model, the SDK's default)
    ends the run with ``InputGuardrailTripwireTriggered`` after the model's booking was parked: no
    state is left to resume it, so ``g.abandon(error)`` cancels the calls that run parked and the
    console is empty; nothing of the booking ran."""

    @input_guardrail
    async def slow_tripwire(
        ctx: RunContextWrapper[Any], agent: Agent[Any], data: Any
    ) -> GuardrailFunctionOutput:
        for _ in range(200):  # the model answers and the booking is parked meanwhile
            if await asyncio.to_thread(console_pending, sidecar):
                break
            await asyncio.sleep(0.05)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    async def run() -> None:
        with client_for(sockets(sidecar), with_confirmer=True) as cg:
            model = ScriptedModel(
                [[function_call("calendar__create_event", EVENT, call_id="c4")], [assistant_message("done")]]
            )
            g, agent = gate_and_agent(cg, new_session(cg), model, with_confirmer=True)
            agent = agent.clone(input_guardrails=[slow_tripwire])
            with pytest.raises(InputGuardrailTripwireTriggered) as exc:
                await Runner.run(agent, "book it", context=dict(USER), run_config=g.run_config(RUN))
            assert len(console_pending(sidecar)) == 1  # parked before the tripwire
            await g.abandon(exc.value)

    asyncio.run(run())
    assert console_pending(sidecar) == [] and upstream() == []


def test_a_run_with_an_sqlite_session_resumes_with_a_new_gate_and_keeps_one_history(
    sidecar: Running, tmp_path: Path
) -> None:
    """The SDK's sessions (``SQLiteSession``) as its docs pair them with approvals: interrupted
    with a session, the state saved, approved and resumed with a new client, gate and session
    object over the same database: the call runs once and the conversation history holds the
    call and its output once each."""
    db = str(tmp_path / "conversation.db")
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        session = new_session(cg)
        g, agent = gate_and_agent(
            cg, session, ScriptedModel([[function_call("calendar__create_event", EVENT, call_id="c4")]]),
            with_confirmer=True,
        )  # fmt: skip
        first = Runner.run_sync(
            agent,
            "book it",
            context=dict(USER),
            run_config=g.run_config(RUN),
            session=SQLiteSession("conv", db),
        )
        assert [i.call_id for i in first.interruptions] == ["c4"]
        saved = first.to_state().to_string()
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        g, agent = gate_and_agent(
            cg,
            Session(cg, session.session_id),
            ScriptedModel([[assistant_message("booked")]]),
            with_confirmer=True,
        )
        state = asyncio.run(RunState.from_string(agent, saved))
        for item in state.get_interruptions():
            assert g.confirmation(item) is not None
            state.approve(item)
        conversation = SQLiteSession("conv", db)
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN), session=conversation)
        items = asyncio.run(conversation.get_items())
    assert result.final_output == "booked" and len(upstream()) == 1
    kinds = [(i.get("type"), i.get("call_id")) for i in items if isinstance(i, dict) and i.get("call_id")]
    assert kinds == [("function_call", "c4"), ("function_call_output", "c4")], kinds


@pytest.mark.parametrize("other", ["undecided", "rejected"])
def test_a_standing_approval_covers_the_calls_its_interruptions_showed_and_a_rejection_wins(
    sidecar: Running, other: str
) -> None:
    """Two bookings parked in one turn, both interruptions (each shown with its own summary);
    the first approved with ``always_approve=True``: the second, shown in the same list, is
    covered by the standing approval (confirmed with its own digest) unless rejected explicitly,
    which wins: it never runs and leaves the console."""
    with client_for(sockets(sidecar), with_confirmer=True) as cg:
        model = ScriptedModel(
            [
                [
                    function_call("calendar__create_event", EVENT, call_id="c4"),
                    function_call("calendar__create_event", LATER_EVENT, call_id="c5"),
                ],
                [assistant_message("done")],
            ]
        )
        g, agent = gate_and_agent(cg, new_session(cg), model, with_confirmer=True)
        first = Runner.run_sync(agent, "book both", context=dict(USER), run_config=g.run_config(RUN))
        assert sorted(i.call_id for i in first.interruptions) == ["c4", "c5"]
        assert all(g.confirmation(i) for i in first.interruptions)  # both shown
        state = first.to_state()
        for item in first.interruptions:
            if item.call_id == "c4":
                state.approve(item, always_approve=True)
            elif other == "rejected":
                state.reject(item)
        result = Runner.run_sync(agent, state, run_config=g.run_config(RUN))
    assert result.final_output == "done" and console_pending(sidecar) == []
    titles = sorted(r["title"] for r in upstream())  # the SDK runs a turn's calls concurrently
    assert titles == (["Board review", "Standup"] if other == "undecided" else ["Standup"])
    if other == "rejected":
        assert outputs(result)["c5"].output == "Tool execution was not approved."
