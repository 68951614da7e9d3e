"""No secret reaches the model in any part of a result in parts (spec 6.10), through the real
OpenAI Agents SDK and LangGraph (sync, async with the sync client, async with ``AsyncClient``)
against a real sidecar whose configured secret is the canary: a text part's canary is redacted by
the sidecar; a part whose URL or file name held it, or whose bytes held the invocation's
credential or a redeemed secret, is answered as a ``callgate_withheld`` text part (the MCP
gateway's check, ``callgate.execute.redaction.holds_secret``); a clean image passes as given.
Neither what the model gets nor what the sidecar stored (the tool message, the trail) holds any
form of the canary the redactor knows (case, URL, base64, hex, JSON escapes)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from agents import (
    Agent,
    Runner,
    RunState,
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
    function_tool,
)
from agents.testing import ScriptedModel as AgentsModel
from agents.testing import assistant_message, function_call
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import SecretStr

from callgate.adapters.langgraph import CallgateTools
from callgate.adapters.openai_agents import Gate, Secret
from callgate.client import AsyncClient, Client, Session
from callgate.execute.redaction import Redactor
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, calendar_secret, start_sidecar, stop_sidecar
from tests.langgraph_app import MAP_PNG, TOOLS, VAULT_CANARY, build, cfg
from tests.openai_agents_app import RUN, get_weather

FORMS = Redactor([VAULT_CANARY], patterns=())
"""Finds the canary in any form the sidecar's redactor knows."""

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(16)).decode()


@pytest.fixture(scope="module")
def vault() -> Iterator[Running]:
    """A sidecar whose one configured secret (the calendar tool's) is the canary."""
    running, tmp = start_sidecar(secrets=(calendar_secret("CALLGATE_TEST_VAULT_TOKEN", VAULT_CANARY),))
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def stored(server: Running, invocation_id: str) -> str:
    """What the sidecar keeps of the call: the tool message (GetResult) and every event."""
    session_id = server.session_of(invocation_id)
    res = server.gate.GetResult(pb.GetResultRequest(invocation_id=invocation_id, session_id=session_id))
    inv = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=invocation_id, session_id=session_id)
    )
    return bytes(res.message).decode() + json.dumps([dict(e.data) for e in inv.events], default=str)


def withheld(part: dict[str, Any], text_key: str = "text") -> bool:
    try:
        return bool(json.loads(part[text_key])["type"] == "callgate_withheld")
    except (KeyError, ValueError, TypeError):
        return False


# ---------------------------------------------------------------- LangGraph


async def _lg_async(server: Running, *, aio: bool) -> list[ToolMessage]:
    a = server.sidecar.addresses
    cg: Any = AsyncClient(a["agent"][0], executor=a["executor"][0]) if aio else None
    if cg is not None:
        session: Any = await cg.session("acme", "alice", timezone="Asia/Shanghai")
    else:
        cg = Client(a["agent"][0], executor=a["executor"][0])
        session = cg.session("acme", "alice", timezone="Asia/Shanghai")
    try:
        graph = build(CallgateTools(cg, session, TOOLS, executor_id="lg"), InMemorySaver(), asynchronous=True)
        out = await graph.ainvoke({"messages": [HumanMessage("vault")]}, cfg("t-vault"))
    finally:
        await cg.close() if aio else cg.close()
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("path", ["sync", "async", "aio"])
def test_langgraph_parts_never_carry_a_secret(
    vault: Running, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALLGATE_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    if path == "sync":
        a = vault.sidecar.addresses
        with Client(a["agent"][0], executor=a["executor"][0]) as cg:
            session = cg.session("acme", "alice", timezone="Asia/Shanghai")
            graph = build(CallgateTools(cg, session, TOOLS, executor_id="lg"), InMemorySaver())
            out = graph.invoke({"messages": [HumanMessage("vault")]}, cfg("t-vault"))
        (msg,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    else:
        (msg,) = asyncio.run(_lg_async(vault, aio=path == "aio"))
    blocks = msg.content
    assert isinstance(blocks, list) and len(blocks) == 7, blocks
    assert not FORMS.contains_known_secret(json.dumps(blocks, ensure_ascii=False))
    envelope = json.loads(blocks[0]["text"])
    nonce = envelope["nonce"]
    assert blocks[1]["text"] == (
        f"⟦untrusted:{nonce}⟧key [REDACTED:secret] / [REDACTED:secret]⟦/untrusted:{nonce}⟧"
    )
    # the credential in the bytes, the canary in the file name, the URL, a nested member: withheld
    assert [withheld(b) for b in blocks[2:6]] == [True, True, True, True], blocks
    assert blocks[6] == {"type": "image", "base64": MAP_PNG, "mime_type": "image/png"}
    record = stored(vault, envelope["invocation_id"])
    assert envelope["invocation_id"] in record and not FORMS.contains_known_secret(record)


# ---------------------------------------------------------------- OpenAI Agents SDK


@function_tool
def vault_event(
    title: str,
    start: str,
    duration_minutes: int,
    calendar_id: str,
    token: Annotated[SecretStr, Secret("calendar_api_token")],
) -> list[Any]:
    """Create an event; answers in parts that echo the redeemed token everywhere.

    Args:
        title: The event's title.
        start: RFC 3339 start time.
        duration_minutes: Length in minutes.
        calendar_id: Which calendar.
    """
    t = token.get_secret_value()
    return [
        ToolOutputText(text=f"booked with {t.lower()}"),
        ToolOutputImage(image_url="data:image/png;base64," + base64.b64encode(b"PNG:" + t.encode()).decode()),
        ToolOutputFileContent(file_data=base64.b64encode(b"x" + t.encode()).decode(), filename="ok.csv"),
        ToolOutputFileContent(file_data=base64.b64encode(b"a,b").decode(), filename=f"{t}.csv"),
        ToolOutputImage(image_url=f"https://maps.example/t.png?k={t.encode().hex()}"),
        ToolOutputImage(image_url="data:image/png;base64," + PNG),
    ]


def test_agents_parts_never_carry_a_secret(vault: Running) -> None:
    sockets = Path(vault.sidecar.addresses["agent"][0].removeprefix("unix:")).parent
    event = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}
    with Client(
        str(sockets / "agent.sock"), executor=str(sockets / "executor.sock"),
        confirmer=str(sockets / "confirmer.sock"), timeout=5,
    ) as cg:  # fmt: skip
        model = AgentsModel(
            [[function_call("calendar__create_event", event, call_id="v1")], [assistant_message("done")]]
        )
        g = Gate(
            {"calendar.create_event": vault_event, "weather.get": get_weather},
            client=cg, session=cg.session("acme", "alice", timezone="Asia/Shanghai"), executor_id="x",
            confirmer=cg.confirmer(), approver=lambda ctx: "alice",
            external_ids={"calendar.create_event": lambda value: "evt_v"},
        )  # fmt: skip
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks())
        first = Runner.run_sync(agent, "book", context={}, run_config=RUN)
        saved = first.to_state().to_string()
        state = first.to_state()
        state.approve(first.interruptions[0])
        result = Runner.run_sync(agent, state, run_config=RUN)
        # the same saved state resumed again by a new gate (a second worker): replayed, not run
        model2 = AgentsModel([[assistant_message("done")]])
        g2 = Gate(
            {"calendar.create_event": vault_event, "weather.get": get_weather},
            client=cg, session=Session(cg, g.session.session_id, tenant="acme", subject="alice"),
            executor_id="x", confirmer=cg.confirmer(), approver=lambda ctx: "alice",
            external_ids={"calendar.create_event": lambda value: "evt_v"},
        )  # fmt: skip
        agent2 = Agent(name="a", model=model2, tools=g2.tools, hooks=g2.hooks())
        again = asyncio.run(RunState.from_string(agent2, saved))
        for interruption in again.get_interruptions():
            again.approve(interruption)
        replay = Runner.run_sync(agent2, again, run_config=RUN)
    (item,) = [
        i
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    ]
    sent = item.raw_item["output"]
    assert isinstance(sent, list) and len(sent) == 7, sent
    assert not FORMS.contains_known_secret(json.dumps(sent, ensure_ascii=False))
    assert "[REDACTED:secret]" in sent[1]["text"]
    # the token in the image's bytes, the file's bytes, the file name, the URL (hex): withheld
    assert [withheld(p) for p in sent[2:6]] == [True, True, True, True], sent
    assert sent[6]["type"] == "input_image" and sent[6]["image_url"] == "data:image/png;base64," + PNG
    invocation_id = item.custom_data["callgate"]["invocation_id"]
    assert not FORMS.contains_known_secret(stored(vault, invocation_id))
    (item2,) = [
        i
        for i in replay.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    ]
    shown = item2.raw_item["output"]
    assert isinstance(shown, list) and len(shown) == 7, shown
    assert not FORMS.contains_known_secret(json.dumps(shown, ensure_ascii=False))
    assert shown[:2] == sent[:2]  # the envelope and the marked, redacted text as first answered
    notes = [json.loads(p["text"]) for p in shown[2:]]
    assert [n["type"] for n in notes] == ["callgate_not_replayed"] * 5, notes
    nonce = json.loads(sent[0]["text"])["nonce"]
    kinds = ["image", "file", "file", "image", "image"]  # the descriptors' strings stay marked
    assert [n["part"]["type"] for n in notes] == [
        f"⟦untrusted:{nonce}⟧{k}⟦/untrusted:{nonce}⟧" for k in kinds
    ]
