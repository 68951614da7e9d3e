"""The LangGraph adapter as LangGraph users write an app (``@tool`` functions, a chat model with
``bind_tools``, ``ToolNode`` / ``tools_condition``, a checkpointer), against the real library and
a real sidecar; the model is scripted (no network). The app (tests/langgraph_app.py) is
interrupted in this process and resumed in other processes (``python -m tests.langgraph_app``)
from a real SQLite (and PostgreSQL) checkpointer, with each of LangChain's human-in-the-loop
resume shapes; every tool run is counted in a ledger file shared by the processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from callgate.adapters.hitl import InvalidResume, parse_decisions
from callgate.client import AsyncClient, AsyncSession, Client, DeadlineExceeded, Session, TransportError
from callgate.config import IdempotencyConfig, StoreConfig
from tests.conftest import ROOT, Running, calendar_secret, short_tmpdir, start_sidecar, stop_sidecar
from tests.langgraph_app import EVENT, LG_KEY, LG_SECRET, MAP_PNG, aapp, app, build, cfg, summary

SUBPROCESS_TIMEOUT_S = 120


@dataclass
class World:
    """One sidecar, one session, one checkpoint database, one ledger: shared by the processes."""

    server: Running
    dir: Path
    session_id: str

    def spec(self, *, confirmer: bool = True, db: str = "checkpoints.db", **more: Any) -> dict[str, Any]:
        a = self.server.sidecar.addresses
        spec = {
            "agent": a["agent"][0], "executor": a["executor"][0], "session_id": self.session_id,
            "saver": f"sqlite:{self.dir / db}", "ledger": str(self.dir / "ledger.txt"), **more,
        }  # fmt: skip
        if confirmer:
            spec["confirmer"] = a["confirmer"][0]
        return spec

    def start(self, threads: dict[str, str], **spec: Any) -> dict[str, dict[str, Any]]:
        """Run each thread's first turn here (``threads``: thread -> script name)."""
        out = {}
        with app(self.spec(**spec)) as (_, graph):
            for thread, script in threads.items():
                out[thread] = summary(graph.invoke({"messages": [HumanMessage(script)]}, cfg(thread)))
        return out

    def resume(self, values: dict[str, Any], **spec: Any) -> dict[str, dict[str, Any]]:
        """Resume the threads in another Python process."""
        path = self.dir / "spec.json"
        path.write_text(json.dumps(self.spec(resume=values, **spec)))
        proc = subprocess.run(
            [sys.executable, "-m", "tests.langgraph_app", str(path)],
            cwd=ROOT, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return {line.pop("thread"): line for line in lines}

    def ledger(self) -> list[str]:
        path = self.dir / "ledger.txt"
        return path.read_text().splitlines() if path.exists() else []

    def invocation(self, invocation_id: str) -> Any:
        return self.server.call(self.server.sidecar.components.store.get_invocation(invocation_id))

    def events(self, invocation_id: str) -> list[Any]:
        return self.server.call(self.server.sidecar.components.store.list_events(invocation_id))

    def pending_ids(self) -> set[str]:
        with Client(confirmer=self.server.sidecar.addresses["confirmer"][0]) as cg:
            return {p.invocation_id for p in cg.confirmer().list_pending("acme")}


@pytest.fixture
def world(server: Running) -> Iterator[World]:
    d = short_tmpdir()
    try:
        yield World(server, d, "ses-lg-" + d.name)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def content(summary_: dict[str, Any], index: int = 0) -> dict[str, Any]:
    msg = list(summary_["tools"].values())[index]
    return json.loads(msg["content"])


def asked(summary_: dict[str, Any]) -> list[dict[str, Any]]:
    return summary_["interrupt"]["callgate"]


# ---------------------------------------------------------------- one process


def test_allow_and_deny_with_the_model_s_own_ids_and_plain_tool_content(world: World) -> None:
    """Old main: the model's AIMessage id had to be replaced by callgate's model call id, and
    the ToolMessage content repeated ``role`` and ``tool_call_id``."""
    out = world.start({"t-allow": "weather", "t-deny": "deny"})
    allow, deny = out["t-allow"], out["t-deny"]
    assert world.ledger() == ["weather Paris"]
    assert allow["ai_ids"][0] and not allow["ai_ids"][0].startswith("mc-")  # the model's own id
    got = content(allow)
    assert got["status"] == "ok" and "sunny" in got["data"]["forecast"]
    assert "role" not in got and "tool_call_id" not in got
    (call_id,) = allow["tools"]
    assert call_id.startswith("call_0_")  # the model's own tool call id ...
    inv = world.invocation(allow["tools"][call_id]["artifact"]["invocation_id"])
    assert inv.proposal_id == call_id  # ... is the proposal id
    assert content(deny)["status"] == "denied" and allow["last"] == "done"


def test_the_async_graph_runs_the_same_gate(world: World) -> None:
    async def go() -> dict[str, Any]:
        with app(world.spec()) as (gate, _):
            graph = build(gate, InMemorySaver())  # SqliteSaver is sync only
            return summary(await graph.ainvoke({"messages": [HumanMessage("weather")]}, cfg("t-async")))

    out = asyncio.run(go())
    assert world.ledger() == ["weather Paris"] and content(out)["status"] == "ok"


class Observed:
    """Tells the test when the gate's node starts waiting for the console's decision: the real
    session's ``wait_confirmed``, signalled first (sync or asyncio)."""

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def sync(self, session: Session) -> Session:
        inner = session.wait_confirmed

        def wait_confirmed(pending: Any, **kw: Any) -> bool:
            self.waiting.set()
            return inner(pending, **kw)

        session.wait_confirmed = wait_confirmed  # type: ignore[method-assign]
        return session

    def aio(self, session: AsyncSession) -> AsyncSession:
        inner = session.wait_confirmed

        async def wait_confirmed(pending: Any, **kw: Any) -> bool:
            self.waiting.set()
            return await inner(pending, **kw)

        session.wait_confirmed = wait_confirmed  # type: ignore[method-assign]
        return session


@pytest.mark.parametrize("kind", ["aio", "sync-client"])
def test_an_async_graph_never_blocks_the_event_loop_while_it_waits_for_the_console(
    world: World, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ainvoke`` of a graph whose approve waits for the console (no confirmer here): the loop
    keeps running other tasks meanwhile, and the console's confirmation is given by a task on
    that same loop, so a gate that blocked the loop would never see it (console_timeout; 60 s:
    10 s was once run out on the loaded 2-core box by a loop that was not blocked)."""
    from callgate.adapters.langgraph import CallgateTools
    from tests.langgraph_app import TOOLS

    a = world.server.sidecar.addresses
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(world.dir / "ledger.txt"))
    seen = Observed()

    async def go() -> tuple[dict[str, Any], int]:
        async with AsyncClient(confirmer=a["confirmer"][0]) as console:
            if kind == "aio":
                acg = AsyncClient(a["agent"][0], executor=a["executor"][0])
                session: Any = seen.aio(await acg.session("acme", "alice", timezone="Asia/Shanghai"))
                gate = CallgateTools(acg, session, TOOLS, executor_id="lg", console_timeout=60)
            else:
                cg = Client(a["agent"][0], executor=a["executor"][0])
                session = seen.sync(cg.session("acme", "alice", timezone="Asia/Shanghai"))
                gate = CallgateTools(cg, session, TOOLS, executor_id="lg", console_timeout=60)
            graph = build(gate, InMemorySaver(), asynchronous=True)
            first = summary(await graph.ainvoke({"messages": [HumanMessage("calendar")]}, cfg("t-loop")))
            (ask,) = asked(first)
            assert ask["confirmation"] == "console"
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            async def the_console() -> int:
                await asyncio.to_thread(seen.waiting.wait, 30)  # the node waits now
                at_wait = ticks
                while ticks < at_wait + 5:  # the loop runs on while the node waits
                    await asyncio.sleep(0.01)
                await console.confirmer().confirm(ask["invocation_id"], ask["digest"], confirmed_by="dave")
                return ticks - at_wait

            tick = asyncio.create_task(ticker())
            resumed = graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg("t-loop"))
            out, during = await asyncio.gather(resumed, the_console())
            tick.cancel()
            if kind == "aio":
                await acg.close()
            else:
                cg.close()
            return summary(out), during

    out, during = asyncio.run(go())
    assert seen.waiting.is_set() and during >= 5
    assert world.ledger() == ["calendar Standup"] and content(out)["status"] == "ok"


def test_an_async_run_cancelled_while_waiting_for_the_console_cancels_the_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from callgate.adapters.langgraph import CallgateTools
    from tests.langgraph_app import TOOLS

    a = world.server.sidecar.addresses
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(world.dir / "ledger.txt"))
    seen = Observed()

    async def go() -> str:
        async with AsyncClient(a["agent"][0], executor=a["executor"][0]) as acg:
            session = seen.aio(await acg.session("acme", "alice", timezone="Asia/Shanghai"))
            graph = build(
                CallgateTools(acg, session, TOOLS, executor_id="lg"), InMemorySaver(), asynchronous=True
            )
            (ask,) = asked(summary(await graph.ainvoke({"messages": [HumanMessage("calendar")]}, cfg("t"))))
            run = asyncio.create_task(
                graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg("t"))
            )
            await asyncio.to_thread(seen.waiting.wait, 30)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            return str(ask["invocation_id"])

    invocation_id = asyncio.run(go())
    assert world.invocation(invocation_id).state.name == "CANCELLED_BEFORE_COMMIT"
    assert invocation_id not in world.pending_ids() and world.ledger() == []


def test_a_model_call_names_the_tool_messages_fed_into_it(world: World) -> None:
    """``gate.model`` passes ``fed_invocation_ids``: the second model call's ListTools names the
    invocation whose tool message it was given, and the sidecar records it (6.13 question 8)."""
    with app(world.spec()) as (_, graph):
        graph.invoke({"messages": [HumanMessage("weather")]}, cfg("t-fed"))
        msgs = graph.get_state(cfg("t-fed")).values["messages"]
    first, second = [m for m in msgs if isinstance(m, AIMessage)]
    (tool_msg,) = [m for m in msgs if isinstance(m, ToolMessage)]
    invocation_id = tool_msg.artifact["invocation_id"]
    fed = world.server.call(world.server.sidecar.components.store.list_fed(invocation_id))
    assert [f.model_call_id for f in fed] == [second.response_metadata["callgate"]["model_call_id"]]
    assert first.response_metadata["callgate"]["model_call_id"] != fed[0].model_call_id


# ---------------------------------------------------------------- across processes

APPROVE_SHAPES = {
    "langchain": {"decisions": [{"type": "approve"}]},
    "agent_inbox": [{"type": "accept"}],
}


def test_approve_in_another_process_runs_exactly_once(world: World) -> None:
    """Old main: the resume in another process answered ``tools_not_listed`` (and an approve in
    LangChain's shapes was taken as a rejection). One thread per approve shape."""
    firsts = world.start({shape: "both" for shape in APPROVE_SHAPES})
    assert world.ledger() == []  # nothing runs before every decision is in
    asks = {}
    for shape, first in firsts.items():
        (asks[shape],) = asked(first)
        assert asks[shape]["tool"] == "calendar.create_event" and asks[shape]["confirmation"] == "resume"
        assert first["interrupt"]["action_requests"][0]["args"]["title"] == "Standup"
    shutil.copy(world.dir / "checkpoints.db", world.dir / "before.db")
    outs = world.resume(APPROVE_SHAPES, approver="bob")
    assert sorted(world.ledger()) == sorted(["calendar Standup", "weather Paris"] * len(APPROVE_SHAPES))
    for shape, out in outs.items():
        assert [content(out, i)["status"] for i in range(2)] == ["ok", "ok"] and out["last"] == "done"
        confirmed = [e for e in world.events(asks[shape]["invocation_id"]) if e.kind == "confirmed"]
        assert [e.data["confirmed_by"] for e in confirmed] == ["bob"]
    # a third process resumes the same interrupts from the checkpoint taken before (as after a
    # crash that lost the second's checkpoint): the idempotent replay, nothing runs again
    again = world.resume(APPROVE_SHAPES, db="before.db")
    assert sorted(world.ledger()) == sorted(["calendar Standup", "weather Paris"] * len(APPROVE_SHAPES))
    assert {k: v["tools"] for k, v in again.items()} == {k: v["tools"] for k, v in outs.items()}


@pytest.mark.postgres
def test_resume_from_a_postgres_checkpointer_in_another_process(world: World, postgres_dsn: str) -> None:
    """The same with langgraph-checkpoint-postgres against the project's real PostgreSQL."""
    saver, thread = f"postgres:{postgres_dsn}", "t-pg-" + world.dir.name
    first = world.start({thread: "calendar"}, saver=saver)[thread]
    (ask,) = asked(first)
    out = world.resume({thread: {"decisions": [{"type": "approve"}]}}, saver=saver, approver="bob")[thread]
    assert world.ledger() == ["calendar Standup"] and content(out)["status"] == "ok"
    assert world.invocation(ask["invocation_id"]).state.name == "OBSERVED"


def test_an_asyncio_app_resumes_from_an_async_sqlite_checkpointer_in_another_process(world: World) -> None:
    """The asyncio app (``AsyncClient``, ``ainvoke``, langgraph-checkpoint-sqlite's
    ``AsyncSqliteSaver``) interrupted here on an AIMessage with an allowed and a confirmed call,
    approved and resumed in another process: each runs once, the approver is recorded."""

    async def first() -> dict[str, Any]:
        async with aapp(world.spec(db="acheckpoints.db")) as (_, graph):
            return summary(await graph.ainvoke({"messages": [HumanMessage("both")]}, cfg("t-aio")))

    (ask,) = asked(asyncio.run(first()))
    assert ask["tool"] == "calendar.create_event" and world.ledger() == []
    approve = {"t-aio": {"decisions": [{"type": "approve"}]}}
    out = world.resume(approve, db="acheckpoints.db", asyncio=True, approver="bob")["t-aio"]
    assert sorted(world.ledger()) == ["calendar Standup", "weather Paris"]
    assert [content(out, i)["status"] for i in range(2)] == ["ok", "ok"] and out["last"] == "done"
    confirmed = [e for e in world.events(ask["invocation_id"]) if e.kind == "confirmed"]
    assert [e.data["confirmed_by"] for e in confirmed] == ["bob"]


REJECT_SHAPES = {
    "reject": (
        {"decisions": [{"type": "reject", "message": "not this week"}]},
        "rejected_by_user",
        "not this week",
    ),
    "ignore": ([{"type": "ignore"}], "rejected_by_user", "skip"),
    "response": ([{"type": "response", "args": "book it at 10:00 instead"}], "user_response", "10:00"),
    "respond": ({"decisions": [{"type": "respond", "message": "ask Bob first"}]}, "user_response", "Bob"),
}


def test_the_hitl_description_shows_what_the_title_hides(world: World) -> None:
    """Issue 33: the description a person reads marks the bidi override and the Cyrillic letter
    (``args`` keep the exact value); before, it named only the tool, the digest and the expiry."""
    out = world.start({"t-hidden": "hidden"})
    (action,) = out["t-hidden"]["interrupt"]["action_requests"]
    text = action["description"]
    assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧putdnats⟦U+202C POP DIRECTIONAL FORMATTING⟧" in text
    assert "st⟦U+0430 CYRILLIC SMALL LETTER A⟧ndup ⟦mixed scripts: Latin + Cyrillic⟧" in text
    assert "\u202e" not in text and asked(out["t-hidden"])[0]["digest"] in text
    assert action["args"]["title"] == "\u202eputdnats\u202c st\u0430ndup"
    assert world.ledger() == []


@pytest.fixture
def masking_world() -> Iterator[World]:
    """A sidecar whose configured secret (the calendar tool's) is :data:`LG_SECRET`."""
    running, tmp = start_sidecar(secrets=(calendar_secret("CALLGATE_TEST_LG_MASK_TOKEN", LG_SECRET),))
    d = short_tmpdir()
    try:
        yield World(running, d, "ses-lgm-" + d.name)
    finally:
        stop_sidecar(running, tmp)
        shutil.rmtree(d, ignore_errors=True)


def shows_a_secret(value: Any) -> bool:
    """Whether ``value`` (JSON-like) shows the configured secret or the key, in any case, as
    written or JSON-escaped. A bool only: a failing assertion never prints either."""
    text = (json.dumps(value, ensure_ascii=False) + json.dumps(value)).casefold()
    return any(s.casefold() in text for s in (LG_SECRET, LG_KEY))


@pytest.mark.parametrize("hitl", ["langchain", "agent_inbox"])
def test_the_approver_sees_no_secret_and_the_approval_runs_the_exact_call_once(
    masking_world: World, hitl: str
) -> None:
    """The interrupt payload (what the application shows its approver: ``args``, the
    ``description``, the ``callgate`` member) masks the sidecar's configured secret by name and an
    ``sk-`` key with its last four characters, as the console does; the digest in it is the exact
    arguments', and the approval given in another process runs the call once with the real
    values. Before, ``args`` and the description showed both in clear."""
    w, thread = masking_world, "t-secrets-" + hitl
    first = w.start({thread: "secrets"}, hitl=hitl)[thread]
    payload = first["interrupt"]
    assert not shows_a_secret(payload)
    if hitl == "langchain":
        ((action,), (meta,)) = payload["action_requests"], payload["callgate"]
        args, text = action["args"], action["description"]
    else:
        (item,) = payload
        args, text, meta = item["action_request"]["args"], item["description"], item["callgate"]
    shown = f"Standup ⟦masked calendar_api_token⟧ ⟦masked api_key …{LG_KEY[-4:]}⟧"
    assert args["title"] == shown and shown in text and meta["digest"] in text
    inv = w.invocation(meta["invocation_id"])  # what is bound: the exact arguments and their digest
    assert meta["digest"] == inv.digest and LG_SECRET in inv.normalized_arguments.decode()
    assert w.ledger() == []
    approve = {"decisions": [{"type": "approve"}]} if hitl == "langchain" else [{"type": "accept"}]
    out = w.resume({thread: approve}, hitl=hitl, approver="bob")[thread]
    assert w.ledger() == [f"calendar Standup {LG_SECRET} {LG_KEY}"]  # once, with the real values
    assert content(out)["status"] == "ok" and out["last"] == "done"
    assert w.invocation(meta["invocation_id"]).state.name == "OBSERVED"
    confirmed = [e for e in w.events(meta["invocation_id"]) if e.kind == "confirmed"]
    assert [e.data["confirmed_by"] for e in confirmed] == ["bob"]


def test_reject_shapes_tell_the_model_run_nothing_and_leave_the_console(world: World) -> None:
    """Old main: these resume values were all "The user rejected this call"; now each says what
    the person said, and the parked invocation is ended at once (denied with who did it)."""
    firsts = world.start({k: "calendar" for k in REJECT_SHAPES})
    parked = {k: asked(v)[0]["invocation_id"] for k, v in firsts.items()}
    assert set(parked.values()) <= world.pending_ids()
    out = world.resume({k: v[0] for k, v in REJECT_SHAPES.items()}, approver="carol")
    assert world.ledger() == []
    for k, (_, status, text) in REJECT_SHAPES.items():
        got = content(out[k])
        assert got["status"] == status and text in got["message"], (k, got)
        inv = world.invocation(parked[k])
        assert inv.state.name == "CANCELLED_BEFORE_COMMIT"
    assert not set(parked.values()) & world.pending_ids()
    denied = [e for e in world.events(parked["reject"]) if e.kind == "confirmation_rejected"]
    assert denied and denied[0].data.get("denied_by") == "carol"


def test_a_dropped_thread_s_parked_calls_are_abandoned(world: World) -> None:
    with app(world.spec(hitl="agent_inbox")) as (gate, graph):
        graph.invoke({"messages": [HumanMessage("both")]}, cfg("t-drop"))
        (ask,) = [i.value[0]["callgate"] for i in graph.get_state(cfg("t-drop")).interrupts]
        assert ask["invocation_id"] in world.pending_ids()
        assert gate.abandon(graph, cfg("t-drop")) == [ask["invocation_id"]]
    assert ask["invocation_id"] not in world.pending_ids() and world.ledger() == []
    assert world.invocation(ask["invocation_id"]).state.name == "CANCELLED_BEFORE_COMMIT"


EDIT_SHAPES = {
    "langchain": lambda args: {
        "decisions": [{"type": "edit", "edited_action": {"name": "calendar__create_event", "args": args}}]
    },
    "agent_inbox": lambda args: [
        {"type": "edit", "args": {"action": "calendar__create_event", "args": args}}
    ],
}


@pytest.mark.parametrize("shape", sorted(EDIT_SHAPES))
def test_edit_is_a_new_proposal_with_its_own_digest_and_confirmation(world: World, shape: str) -> None:
    hitl = "agent_inbox" if shape == "agent_inbox" else "langchain"
    first = world.start({"t": "calendar"}, hitl=hitl)["t"]
    ask1 = first["interrupt"][0]["callgate"] if hitl == "agent_inbox" else asked(first)[0]
    edited = {**EVENT, "title": "Retro"}
    second = world.resume({"t": EDIT_SHAPES[shape](edited)}, hitl=hitl)["t"]
    assert world.ledger() == []  # the edit is not a confirmation of the edited call
    ask2 = second["interrupt"][0]["callgate"] if hitl == "agent_inbox" else asked(second)[0]
    assert ask2["digest"] != ask1["digest"] and ask2["invocation_id"] != ask1["invocation_id"]
    assert ask2["tool_call_id"] == ask1["tool_call_id"]
    assert world.invocation(ask1["invocation_id"]).state.name == "CANCELLED_BEFORE_COMMIT"
    assert world.pending_ids() >= {ask2["invocation_id"]} and ask1["invocation_id"] not in world.pending_ids()
    approve = {"decisions": [{"type": "approve"}]} if hitl == "langchain" else [{"type": "accept"}]
    third = world.resume({"t": approve}, hitl=hitl)["t"]
    assert world.ledger() == ["calendar Retro"]
    got = content(third)
    assert got["status"] == "ok" and "evt_retro" in json.dumps(got)
    assert list(third["tools"]) == [ask1["tool_call_id"]]  # answers the model's own tool call


def test_console_only_an_approve_waits_for_the_console(world: World) -> None:
    """Without a confirmer listener the resume never confirms by itself: the node waits for the
    console's decision (here given while the other process waits or before it starts)."""
    first = world.start({"t": "calendar"}, confirmer=False)["t"]
    (ask,) = asked(first)
    assert ask["confirmation"] == "console"
    path = world.dir / "spec.json"
    path.write_text(
        json.dumps(world.spec(confirmer=False, resume={"t": {"decisions": [{"type": "approve"}]}}))
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph_app", str(path)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with Client(confirmer=world.server.sidecar.addresses["confirmer"][0]) as cg:
            cg.confirmer().confirm(ask["invocation_id"], ask["digest"], confirmed_by="console-dave")
        stdout, stderr = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert world.ledger() == ["calendar Standup"]
    assert json.loads(stdout.splitlines()[-1])["last"] == "done"


def test_console_only_an_approve_alone_confirms_nothing(world: World) -> None:
    with app(world.spec(confirmer=False, console_timeout=0.5)) as (_, graph):
        first = summary(graph.invoke({"messages": [HumanMessage("calendar")]}, cfg("t")))
        (ask,) = asked(first)
        with pytest.raises(DeadlineExceeded):
            graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg("t"))
    assert world.ledger() == []
    assert world.invocation(ask["invocation_id"]).state.name == "AUTHORIZED"  # still the console's


def test_an_unknown_resume_value_decides_nothing(world: World) -> None:
    with app(world.spec()) as (_, graph):
        (ask,) = asked(summary(graph.invoke({"messages": [HumanMessage("calendar")]}, cfg("t"))))
        again = summary(graph.invoke(Command(resume={"decisions": [{"type": "maybe"}]}), cfg("t")))
        assert world.ledger() == [] and world.invocation(ask["invocation_id"]).state.name == "AUTHORIZED"
        (ask2,) = asked(again)  # asked again, saying why
        assert ask2["invocation_id"] == ask["invocation_id"] and "maybe" in ask2["error"]
        out = summary(graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg("t")))
    assert world.ledger() == ["calendar Standup"] and content(out)["status"] == "ok"


def test_the_earlier_resume_values_still_work_and_a_wrong_digest_runs_nothing(world: World) -> None:
    with app(world.spec()) as (_, graph):
        for thread in ("t-true", "t-digest"):
            graph.invoke({"messages": [HumanMessage("calendar")]}, cfg(thread))
        ok = summary(graph.invoke(Command(resume=True), cfg("t-true")))
        bad = summary(
            graph.invoke(Command(resume={"approve": True, "digest": "sha256:" + "0" * 64}), cfg("t-digest"))
        )
    assert world.ledger() == ["calendar Standup"] and content(ok)["status"] == "ok"
    assert content(bad)["code"] == "confirmation_digest_mismatch"


def test_parse_decisions_shapes() -> None:
    assert [d.kind.value for d in parse_decisions([{"type": "accept"}, {"type": "ignore"}], 2)] == [
        "approve", "reject",
    ]  # fmt: skip
    with pytest.raises(InvalidResume):
        parse_decisions({"decisions": [{"type": "approve"}]}, 2)  # one decision for two actions
    with pytest.raises(InvalidResume):
        parse_decisions({"decisions": [{"type": "edit", "edited_action": {"name": "x"}}]}, 1)
    with pytest.raises(InvalidResume):
        parse_decisions("yes please", 1)


def test_sidecar_down_raises_a_typed_error_and_runs_nothing(world: World) -> None:
    from callgate.adapters.langgraph import CallgateTools
    from tests.langgraph_app import TOOLS

    with Client(str(short_tmpdir() / "nobody.sock"), executor="x.sock", timeout=2) as cg:
        gate = CallgateTools(cg, Session(cg, "s-1"), TOOLS, executor_id="lg", approver="alice")
        with pytest.raises(TransportError):
            gate.list_tools()
    assert world.ledger() == []


def test_a_message_the_gate_never_listed_is_refused(world: World) -> None:
    from callgate.client import CallgateClientError

    with app(world.spec()) as (gate, _):
        g = StateGraph(MessagesState)
        g.add_node("tools", gate.node())
        g.add_edge(START, "tools")
        ai = AIMessage(
            content="", tool_calls=[{"id": "c0", "name": "weather__get", "args": {}, "type": "tool_call"}]
        )
        with pytest.raises(CallgateClientError) as err:  # e.g. an AIMessage made by hand
            g.compile().invoke({"messages": [ai]})
    assert err.value.code == "tools_not_listed" and world.ledger() == []


def test_the_example_app_runs(world: World) -> None:
    """examples/langgraph/app.py (what docs/CLIENTS.md shows) against a real sidecar."""
    run_dir = Path(world.server.sidecar.addresses["agent"][0].removeprefix("unix:")).parent
    proc = subprocess.run(
        [sys.executable, "examples/langgraph/app.py"], cwd=ROOT, capture_output=True, text=True,
        timeout=SUBPROCESS_TIMEOUT_S, env={**os.environ, "CALLGATE_RUN_DIR": str(run_dir)}, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("confirm? calendar__create_event")
    assert [line.split()[:2] for line in lines[1:]] == [
        ["call_0", "success"], ["call_1", "success"], ["call_2", "error"],
    ]  # fmt: skip


# ---------------------------------------------------------------- edges a new user met (user trial)
def resume_here(world: World, thread: str, value: Any) -> dict[str, Any]:
    """Resume a thread in this process (a new gate and graph on the same checkpoints)."""
    with app(world.spec()) as (_, graph):
        return summary(graph.invoke(Command(resume=value), cfg(thread)))


def test_a_tool_name_the_model_was_not_shown_is_a_tool_error_and_the_run_goes_on(world: World) -> None:
    """User trial: a name the model was not shown became ``no_executor`` (a hallucinated name) or
    ``CallRefused(invalid_request)`` ending the graph (the callgate name instead of the legal one).
    Both are now LangGraph's tool error (``status="error"``) in callgate's shape."""
    out = world.start({"t-unknown": "unknown"})["t-unknown"]
    assert world.ledger() == [] and out["last"] == "done"
    for i, name in enumerate(("send_money", "weather.get")):
        msg = list(out["tools"].values())[i]
        got = json.loads(msg["content"])
        assert msg["status"] == "error" and got["status"] == "rejected"
        assert got["code"] == "unknown_tool_version" and f'No tool named "{name}"' in got["message"]
        assert "available: calendar__create_event, weather__get." in got["message"]


def test_arguments_that_repeat_a_key_are_judged_as_the_model_wrote_them(world: World) -> None:
    """User trial: LangChain's ``args`` keep the last of two repeated keys, and the call ran
    with ``Oslo``; the provider's argument text (``additional_kwargs``) is proposed now."""
    out = world.start({"t-dup": "dupkey"})["t-dup"]
    got = content(out)
    assert got["status"] == "rejected" and got["code"] == "duplicate_key", got
    assert world.ledger() == []


def test_parallel_identical_calls_are_two_calls(world: World) -> None:
    out = world.start({"t-par": "parallel"})["t-par"]
    assert world.ledger() == ["weather Paris", "weather Paris"]
    ids = {m["artifact"]["invocation_id"] for m in out["tools"].values()}
    assert len(ids) == 2 and all(content(out, i)["status"] == "ok" for i in range(2))


def test_a_confirmation_that_expires_while_the_graph_waits_runs_nothing(world: World) -> None:
    """User trial: the expired confirmation released the idempotency key, the re-run of the node
    proposed the call anew and the approval given for the expired invocation confirmed the new
    one: it ran. Now the model is told ``not_confirmed`` and the new one leaves the console."""
    first = world.start({"t-exp": "calendar"})["t-exp"]
    (ask,) = asked(first)
    world.server.clock.advance(world.server.config.confirmation.ttl_seconds + 1)
    out = resume_here(world, "t-exp", {"decisions": [{"type": "approve"}]})
    got = content(out)
    assert got["status"] == "not_confirmed" and world.ledger() == [], got
    assert world.invocation(ask["invocation_id"]).state.name == "CANCELLED_BEFORE_COMMIT"
    assert got["code"] == "confirmation_ended" and world.pending_ids() == set()


def test_an_edit_to_a_name_the_model_was_not_shown_runs_nothing(world: World) -> None:
    """User trial: an edit naming the callgate name (``weather.get``, not the legal
    ``weather__get``) was proposed without a version and ended the graph with ``CallRefused``."""
    first = world.start({"t-edit": "calendar"})["t-edit"]
    (ask,) = asked(first)
    edit = {
        "type": "edit",
        "edited_action": {"name": "weather.get", "args": {"city": "Oslo", "date": "2026-07-20"}},
    }
    out = resume_here(world, "t-edit", {"decisions": [edit]})
    got = content(out)
    assert got["code"] == "unknown_tool_version" and world.ledger() == [], got
    assert world.pending_ids() == set()  # the original left the console


def test_a_result_in_content_blocks_reaches_the_model_as_blocks_with_its_text_marked(world: World) -> None:
    """User trial: a tool answering LangChain content blocks (text and an image) reached the
    model as one JSON text with the image's base64 inside the untrusted-data markers. Now the
    ``ToolMessage`` content is blocks: callgate's envelope, the marked text, the image as given."""
    out = world.start({"t-map": "map"})["t-map"]
    (msg,) = out["tools"].values()
    blocks = msg["content"]
    assert [b["type"] for b in blocks] == ["text", "text", "image"] and msg["status"] == "success"
    envelope = json.loads(blocks[0]["text"])
    assert envelope["status"] == "ok" and "data" not in envelope
    nonce = envelope["nonce"]
    assert blocks[1]["text"] == f"⟦untrusted:{nonce}⟧sunny in Lyon⟦/untrusted:{nonce}⟧"
    assert blocks[2] == {"type": "image", "base64": MAP_PNG, "mime_type": "image/png"}
    assert world.ledger() == ["weather Lyon"] and out["last"] == "done"


def test_a_result_in_content_blocks_replayed_in_another_process_answers_in_blocks(world: World) -> None:
    """The thread that answered in blocks (text + image) is replayed by LangGraph from its
    checkpoint before the tools node, in a fresh process and graph: nothing runs again and the
    model gets blocks, the text as first answered, the image as a ``callgate_not_replayed`` note
    with its descriptor (its bytes were never kept)."""
    first = world.start({"t-map": "map"})["t-map"]
    ((call_id, shown),) = first["tools"].items()
    again = world.resume({}, replay=["t-map"])["t-map"]
    msg = again["tools"][call_id]
    blocks = msg["content"]
    assert isinstance(blocks, list) and [b["type"] for b in blocks] == ["text", "text", "text"], blocks
    assert msg["status"] == "success" and world.ledger() == ["weather Lyon"] and again["last"] == "done"
    envelope = json.loads(blocks[0]["text"])
    assert envelope["status"] == "ok" and "data" not in envelope
    assert blocks[1]["text"] == shown["content"][1]["text"]  # the first answer's marked text
    assert f"⟦untrusted:{envelope['nonce']}⟧sunny in Lyon" in blocks[1]["text"]
    note = json.loads(blocks[2]["text"])
    assert note["type"] == "callgate_not_replayed", note
    block = {"type": "image", "base64": MAP_PNG, "mime_type": "image/png"}  # as the tool gave it
    canonical = json.dumps(block, sort_keys=True, separators=(",", ":")).encode()
    assert note["part"]["bytes"] == len(canonical), note
    assert hashlib.sha256(canonical).hexdigest() in note["part"]["sha256"], note  # marked, as strings are
    assert "image" in note["part"]["type"], note
    assert MAP_PNG not in json.dumps(blocks)


def test_a_sidecar_restart_between_the_interrupt_and_the_resume_runs_once() -> None:
    """The sidecar restarts (same store, new sockets) while the thread waits in its SQLite
    checkpoint; the approve is resumed by a new gate against the restarted sidecar: one run."""
    d = short_tmpdir()
    stores = {
        "store": StoreConfig(path=str(d / "callgate.db")),
        "idempotency": IdempotencyConfig(path=str(d / "idempotency.db")),
    }
    try:
        first, tmp1 = start_sidecar(**stores)
        try:
            before = World(first, d, "ses-lg-restart")
            (ask,) = asked(before.start({"t-rs": "calendar"})["t-rs"])
        finally:
            stop_sidecar(first, tmp1)
        second, tmp2 = start_sidecar(**stores)
        try:
            after = World(second, d, "ses-lg-restart")
            out = resume_here(after, "t-rs", {"decisions": [{"type": "approve"}]})
            assert content(out)["status"] == "ok" and after.ledger() == ["calendar Standup"]
            assert after.invocation(ask["invocation_id"]).state.name == "OBSERVED"
        finally:
            stop_sidecar(second, tmp2)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_arguments_the_provider_could_not_parse_are_answered_not_dropped(world: World) -> None:
    """User trial: LangChain reports unparsable arguments as ``invalid_tool_calls``, which
    ``tools_condition`` and ``ToolNode`` never see: the call was dropped unanswered (the next
    OpenAI request then fails on a tool call without a result). Now it is proposed as written and
    the model gets the sidecar's ``invalid_json``; the good call beside it runs."""
    out = world.start({"t-bad": "badjson"})["t-bad"]
    by_call = {k.split("_")[1]: json.loads(m["content"]) for k, m in out["tools"].items()}
    bad, good = by_call["0"], by_call["1"]  # call_0 was unparsable
    assert bad["status"] == "rejected" and bad["code"] == "invalid_json", bad
    assert good["status"] == "ok" and world.ledger() == ["weather Paris"] and out["last"] == "done"
