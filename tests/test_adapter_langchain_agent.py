"""callgate as the middleware of LangChain's own agent (``langchain.agents.create_agent``), written
the way LangChain's docs write a human-in-the-loop agent: the interrupt in
``HumanInTheLoopMiddleware``'s shape, ``Command(resume={"decisions": [...]})``, a SQLite
checkpointer, the resume in **another Python process** (``python -m tests.langgraph_app`` with
``"kind": "create_agent"``), ``stream(..., stream_mode="updates")`` and ``astream``. A real sidecar;
a ledger file counts tool runs across the processes."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import Field

from callgate.adapters.langchain_agent import middleware
from callgate.adapters.langgraph import CallgateTools
from callgate.client import AsyncClient, Client
from tests.conftest import Running, short_tmpdir
from tests.langgraph_app import TOOLS, ScriptedModel, app, cfg, summary
from tests.test_adapter_langgraph import World

APPROVE = {"decisions": [{"type": "approve"}]}


@pytest.fixture
def world(server: Running) -> Iterator[World]:
    d = short_tmpdir()
    try:
        yield World(server, d, "ses-lc-" + d.name)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def statuses(s: dict[str, Any]) -> dict[str, str]:
    return {k: json.loads(v["content"])["status"] for k, v in s["tools"].items()}


def test_create_agent_asks_in_langchains_shape_and_a_second_process_runs_each_call_once(world: World) -> None:
    first = world.start({"t1": "both"}, kind="create_agent")["t1"]
    intr = first["interrupt"]
    assert [a["name"] for a in intr["action_requests"]] == ["calendar__create_event"]  # weather: allowed
    assert intr["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject", "respond"]
    assert intr["action_requests"][0]["args"]["calendar_id"] == "primary"  # normalized, defaults in
    assert world.ledger() == []  # nothing runs before the decisions are in
    [parked] = intr["callgate"]
    assert world.pending_ids() == {parked["invocation_id"]}
    done = world.resume({"t1": APPROVE}, kind="create_agent")["t1"]
    assert done["interrupt"] is None and done["last"] == "done"
    assert sorted(statuses(done).values()) == ["ok", "ok"]
    assert sorted(world.ledger()) == ["calendar Standup", "weather Paris"]
    assert world.invocation(parked["invocation_id"]).state == "OBSERVED"
    # the resume value given twice (a retried request, another worker): nothing runs again
    again = world.resume({"t1": APPROVE}, kind="create_agent")["t1"]
    assert again["last"] == "done" and sorted(world.ledger()) == ["calendar Standup", "weather Paris"]
    assert world.pending_ids() == set()


def test_create_agent_reject_deny_and_unknown_names_run_nothing(world: World) -> None:
    with app(world.spec(kind="create_agent")) as (_, agent):
        denied = summary(agent.invoke({"messages": [HumanMessage("deny")]}, cfg("d")))
        unknown = summary(agent.invoke({"messages": [HumanMessage("unknown")]}, cfg("u")))
        asked = summary(agent.invoke({"messages": [HumanMessage("calendar")]}, cfg("r")))
        assert asked["interrupt"] is not None
        reject = {"decisions": [{"type": "reject", "message": "not today"}]}
        rejected = summary(agent.invoke(Command(resume=reject), cfg("r")))
    assert list(statuses(denied).values()) == ["denied"] and denied["interrupt"] is None
    assert [json.loads(v["content"])["code"] for v in unknown["tools"].values()] == [
        "unknown_tool_version"
    ] * 2
    [said] = rejected["tools"].values()
    assert json.loads(said["content"]) == {"status": "rejected_by_user", "message": "not today"}
    assert rejected["last"] == "done"
    assert world.ledger() == [] and world.pending_ids() == set()


def test_create_agent_streams_updates_and_an_edit_is_a_new_proposal(world: World) -> None:
    with app(world.spec(kind="create_agent")) as (_, agent):
        chunks = list(agent.stream({"messages": [HumanMessage("calendar")]}, cfg("s"), stream_mode="updates"))
        [intr] = [c["__interrupt__"] for c in chunks if "__interrupt__" in c]
        old = intr[0].value["callgate"][0]["invocation_id"]
        args = {**intr[0].value["action_requests"][0]["args"], "title": "Edited"}
        edit = {
            "decisions": [{"type": "edit", "edited_action": {"name": "calendar__create_event", "args": args}}]
        }
        chunks = list(agent.stream(Command(resume=edit), cfg("s"), stream_mode="updates"))
        [again] = [c["__interrupt__"] for c in chunks if "__interrupt__" in c]  # asked anew: its own digest
        assert again[0].value["action_requests"][0]["args"]["title"] == "Edited"
        assert world.ledger() == []
        list(agent.stream(Command(resume=APPROVE), cfg("s"), stream_mode="updates"))
    assert world.ledger() == ["calendar Edited"]
    assert world.invocation(old).state == "CANCELLED_BEFORE_COMMIT"


def test_an_async_create_agent_astreams_on_the_async_client(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = world.server.sidecar.addresses

    async def run() -> list[str]:
        async with AsyncClient(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0]) as acg:
            session = await acg.session("acme", "alice", session_id=world.session_id)
            gate = CallgateTools(acg, session, TOOLS, executor_id="lc-test", approver="alice")
            agent = create_agent(
                ScriptedModel(), tools=[], middleware=[middleware(gate)], checkpointer=InMemorySaver()
            )
            seen = []
            async for chunk in agent.astream(
                {"messages": [HumanMessage("both")]}, cfg("a"), stream_mode="updates"
            ):
                seen.extend(chunk)
            async for chunk in agent.astream(Command(resume=APPROVE), cfg("a"), stream_mode="updates"):
                seen.extend(chunk)
            return seen

    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(world.dir / "ledger.txt"))
    seen = asyncio.run(run())
    assert "__interrupt__" in seen
    assert sorted(world.ledger()) == ["calendar Standup", "weather Paris"]


def test_arguments_the_agents_tool_refuses_are_reported_not_reached(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's ``ToolNode`` answers arguments its tool refuses with an error message instead
    of raising (LangChain's default error handling): the tool never ran, so the attempt fails
    before the commit (retried as advised, then FAILED_BEFORE_COMMIT), never a committed result.
    The sidecar's fixed clock is moved along so the advised backoffs pass."""

    @tool
    def create_event(
        title: str, start: str, duration_minutes: Annotated[int, Field(le=5)], calendar_id: str | None = None
    ) -> dict[str, str]:
        """Create a calendar event (at most 5 minutes)."""
        raise AssertionError("never called: its arguments do not validate")

    a = world.server.sidecar.addresses
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(world.dir / "ledger.txt"))
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.1):
            world.server.clock.advance(1)

    with Client(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0]) as cg:
        tools = {**TOOLS, "calendar.create_event": create_event}
        gate = CallgateTools(cg, cg.session("acme", "alice"), tools, executor_id="lc-test", approver="alice")
        agent = create_agent(
            ScriptedModel(), tools=[], middleware=[middleware(gate)], checkpointer=InMemorySaver()
        )
        assert "__interrupt__" in agent.invoke({"messages": [HumanMessage("calendar")]}, cfg("v"))
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            out = summary(agent.invoke(Command(resume=APPROVE), cfg("v")))
        finally:
            stop.set()
            ticker.join()
    [said] = out["tools"].values()
    content = json.loads(said["content"])
    assert content["status"] == "error" and content["commit_status"] == "NOT_COMMITTED", content
    invocation = world.invocation(said["artifact"]["invocation_id"])
    assert invocation.state == "FAILED_BEFORE_COMMIT"


@pytest.mark.parametrize("order", ["hitl-listed-first", "callgate-listed-first"])
def test_with_langchains_own_hitl_middleware_too_a_call_it_rejects_never_runs_and_is_ended(
    world: World, order: str
) -> None:
    """``HumanInTheLoopMiddleware`` on the same tools as well, as LangChain's docs configure it:
    both ask (LangChain runs ``after_model`` hooks last-listed first); approved by both, each
    call runs once; rejected by LangChain's after callgate allowed or confirmed it, nothing runs
    and the invocations are cancelled at the next model call (not left PREPARED)."""
    with app(world.spec()) as (gate, _):
        hitl = HumanInTheLoopMiddleware(interrupt_on={"calendar__create_event": True, "weather__get": True})
        ours = middleware(gate)
        stack = [hitl, ours] if order == "hitl-listed-first" else [ours, hitl]
        agent = create_agent(ScriptedModel(), tools=[], middleware=stack, checkpointer=InMemorySaver())
        for thread, theirs in (("yes", "approve"), ("no", "reject")):
            out = agent.invoke({"messages": [HumanMessage("both")]}, cfg(thread))
            planned: list[str] = []
            while "__interrupt__" in out:
                asked = out["__interrupt__"][0].value
                ours_asked = "callgate" in asked
                planned += [p["invocation_id"] for p in asked.get("callgate", [])]
                kind = "approve" if ours_asked else theirs
                decisions = {"decisions": [{"type": kind}] * len(asked["action_requests"])}
                out = agent.invoke(Command(resume=decisions), cfg(thread))
            if thread == "yes":
                assert sorted(world.ledger()) == ["calendar Standup", "weather Paris"]
                assert out["messages"][-1].content == "done"
            else:
                assert sorted(world.ledger()) == ["calendar Standup", "weather Paris"]  # nothing more
                assert bool(planned) == (order == "hitl-listed-first")  # callgate asked first
                for invocation_id in planned:  # confirmed by callgate, rejected by LangChain's
                    assert world.invocation(invocation_id).state == "CANCELLED_BEFORE_COMMIT"
    assert world.pending_ids() == set()
