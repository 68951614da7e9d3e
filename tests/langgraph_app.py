"""A LangGraph app gated by callgate, as its users write one: ``@tool`` functions, a chat model
with ``bind_tools`` (scripted here: no network), ``tools_condition`` and a checkpointer. The tests
of tests/test_adapter_langgraph.py start it in their own process and resume it in others::

    python -m tests.langgraph_app SPEC.json      # prints one JSON line per thread resumed

SPEC: ``{"agent", "executor", "confirmer" (optional), "session_id", "saver" ("sqlite:PATH" or
"postgres:DSN"), "ledger", "approver", "hitl", "console_timeout", "resume": {thread: value}, "replay": [thread],
"kind" ("create_agent": LangChain's agent with callgate's middleware)}``
(``replay``: run the thread again from its checkpoint before the tools node, LangGraph's replay).
With ``"asyncio": true`` the app is the asyncio one: ``AsyncClient``, the graph's coroutine agent
node, ``ainvoke`` and ``AsyncSqliteSaver`` (saver ``"sqlite:PATH"``), resuming ``resume`` only.
Every tool run appends a line to the ledger file, so runs are counted across processes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from callgate.adapters.hitl import HITLFormat
from callgate.adapters.langgraph import CallgateTools, tool_context
from callgate.client import AsyncClient, Client, Committed

LEDGER_ENV = "CALLGATE_TEST_LEDGER"
EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}


def _ran(line: str) -> None:
    with open(os.environ[LEDGER_ENV], "a", encoding="utf-8") as f:
        f.write(line + "\n")


MAP_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@tool
def get_weather(city: str, date: str) -> Any:
    """The forecast for a city on a date."""
    _ran(f"weather {city}")
    if city == "Lyon":  # a forecast with a map: LangChain content blocks, text and an image
        return [
            {"type": "text", "text": f"sunny in {city}"},
            {"type": "image", "base64": MAP_PNG, "mime_type": "image/png"},
        ]
    if city == "Vault":
        return vault_parts(tool_context().credential)
    return {"city": city, "forecast": "sunny"}


LG_SECRET = "calTok-" + "Lg7Qz9mask-approver"
"""The calendar tool's configured secret in the sidecar of the masking test (``secrets``)."""
LG_KEY = "sk-" + "lgMaskKeyA1b2C3d4E5f6W9x8"
"""A key the default ``api_key`` pattern describes (not configured)."""

VAULT_CANARY = "Lg-Canary-7Qz9-vault"
"""A configured secret of the sidecar in tests/test_adapter_part_secrets.py (never redeemed by
the weather tool: only the sidecar knows it)."""


def vault_parts(credential: str) -> list[dict[str, Any]]:
    """One part of each kind with a secret: the canary in a text (twice, once upper-cased), the
    invocation's credential in an image's bytes, the canary in a file's name and URL-encoded in
    an image's URL, lower-cased in a nested member; then a clean image that passes as given."""
    return [
        {"type": "text", "text": f"key {VAULT_CANARY} / {VAULT_CANARY.upper()}"},
        {"type": "image", "base64": base64.b64encode(b"PNG" + credential.encode()).decode(), "mime_type": "image/png"},
        {"type": "file", "base64": base64.b64encode(b"a,b").decode(), "mime_type": "text/csv", "filename": f"{VAULT_CANARY}.csv"},
        {"type": "image", "url": "https://maps.example/t.png?k=" + quote(VAULT_CANARY, safe="")},
        {"type": "file", "base64": "YQ==", "mime_type": "text/plain", "extras": {"notes": [VAULT_CANARY.lower()]}},
        {"type": "image", "base64": MAP_PNG, "mime_type": "image/png"},
    ]  # fmt: skip


@tool(response_format="content_and_artifact")
def create_event(
    title: str, start: str, duration_minutes: int, calendar_id: str | None = None
) -> tuple[dict[str, str], Committed]:
    """Create a calendar event."""
    _ran(f"calendar {title}")
    event = {"event_id": "evt_" + title.lower()}
    return event, Committed(event, external_resource_id=event["event_id"])  # the side effect's id


TOOLS = {"weather.get": get_weather, "calendar.create_event": create_event}

WEATHER = {"city": "Paris", "date": "2026-07-20"}

SCRIPTS: dict[str, list[tuple[str, dict[str, Any] | str]]] = {
    "weather": [("weather__get", {"city": "Paris", "date": "2026-07-20"})],
    "calendar": [("calendar__create_event", EVENT)],
    "both": [("weather__get", {"city": "Paris", "date": "2026-07-20"}), ("calendar__create_event", EVENT)],
    "deny": [("calendar__create_event", {**EVENT, "duration_minutes": 600})],
    "reject": [("weather__get", {"city": "Paris"})],
    # free text that hides characters (issue 33): a bidi override and a Cyrillic letter
    "hidden": [("calendar__create_event", {**EVENT, "title": "\u202eputdnats\u202c st\u0430ndup"})],
    # names the model was not shown: a hallucinated one, and the callgate name for the legal one
    "unknown": [("send_money", {"to": "mallory"}), ("weather.get", WEATHER)],
    # argument text as the provider sent it (a str: kept in additional_kwargs, as ChatOpenAI does)
    "dupkey": [("weather__get", '{"city":"Paris","city":"Oslo","date":"2026-07-20"}')],
    # two identical calls in one turn (parallel tool calls)
    "parallel": [("weather__get", WEATHER), ("weather__get", WEATHER)],
    "map": [("weather__get", {"city": "Lyon", "date": "2026-07-20"})],
    # a forecast in parts with secrets in every part kind (tests/test_adapter_part_secrets.py)
    "vault": [("weather__get", {"city": "Vault", "date": "2026-07-20"})],
    # arguments the provider could not parse (LangChain's invalid_tool_calls), beside a good call
    "badjson": [("weather__get", '{"city":"Paris",'), ("weather__get", WEATHER)],
    # a title holding the sidecar's configured secret and an sk- key no one configured
    # (tests/test_adapter_langgraph.py: masked in what the approver is shown, run as written)
    "secrets": [("calendar__create_event", {**EVENT, "title": f"Standup {LG_SECRET} {LG_KEY}"})],
}


def _parsed(args: dict[str, Any] | str) -> dict[str, Any] | None:
    if not isinstance(args, str):
        return args
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ScriptedModel(BaseChatModel):
    """Answers the first turn with the script named by the user's message, then "done"."""

    seen: list[list[dict[str, Any]]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        self.seen.append(list(tools))
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            ai = AIMessage(content="done")
        else:
            script = SCRIPTS[str(messages[0].content)]
            ids = [f"call_{i}_{messages[0].id or ''}" for i in range(len(script))]
            calls = [
                {"id": i, "name": n, "args": _parsed(a), "type": "tool_call"}
                for i, (n, a) in zip(ids, script, strict=True)
                if _parsed(a) is not None
            ]
            invalid = [  # as ChatOpenAI reports arguments it could not parse
                {"id": i, "name": n, "args": a, "error": "not JSON", "type": "invalid_tool_call"}
                for i, (n, a) in zip(ids, script, strict=True)
                if _parsed(a) is None
            ]
            raw = [  # OpenAI's tool calls as ChatOpenAI keeps them: the argument text as sent
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in zip(ids, script, strict=True)
                if isinstance(a, str)
            ]
            ai = AIMessage(
                content="",
                tool_calls=calls,
                invalid_tool_calls=invalid,
                additional_kwargs={"tool_calls": raw} if raw else {},
            )
        return ChatResult(generations=[ChatGeneration(message=ai)])


def build(gate: CallgateTools, checkpointer: Any, *, asynchronous: bool = False) -> Any:
    """The graph; ``asynchronous``: its agent node is a coroutine (``await model.ainvoke``), as
    an app run with ``ainvoke`` / ``astream`` writes it."""
    model = gate.model(ScriptedModel())

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", aagent if asynchronous else agent)
    g.add_node("tools", gate.node())
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


@contextmanager
def saver(spec: str) -> Iterator[Any]:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(where) as s:
            yield s
    elif kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as s:
            s.setup()
            yield s
    else:
        raise ValueError(f"unknown saver {spec!r}")


def build_agent(gate: CallgateTools, checkpointer: Any) -> Any:
    """LangChain's own agent, as its docs write one, with callgate as its middleware in place of
    ``HumanInTheLoopMiddleware`` (the tools are the gate's)."""
    from langchain.agents import create_agent

    from callgate.adapters.langchain_agent import middleware

    return create_agent(ScriptedModel(), tools=[], middleware=[middleware(gate)], checkpointer=checkpointer)


@contextmanager
def app(spec: dict[str, Any]) -> Iterator[tuple[CallgateTools, Any]]:
    """The gate and the compiled graph of ``spec`` (``"kind": "create_agent"``: LangChain's agent,
    :func:`build_agent`); the session reopened by its id."""
    os.environ[LEDGER_ENV] = spec["ledger"]
    with Client(spec["agent"], executor=spec["executor"], confirmer=spec.get("confirmer")) as cg:
        session = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id=spec["session_id"])
        gate = CallgateTools(
            cg, session, TOOLS, executor_id="lg-test", approver=spec.get("approver", "alice"),
            hitl=HITLFormat(spec.get("hitl", "langchain")), console_timeout=spec.get("console_timeout"),
        )  # fmt: skip
        with saver(spec["saver"]) as cp:
            yield gate, (build_agent(gate, cp) if spec.get("kind") == "create_agent" else build(gate, cp))


@asynccontextmanager
async def aapp(spec: dict[str, Any]) -> AsyncIterator[tuple[CallgateTools, Any]]:
    """:func:`app` as an asyncio application writes it: ``AsyncClient`` and ``AsyncSqliteSaver``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    kind, _, where = spec["saver"].partition(":")
    assert kind == "sqlite", spec["saver"]
    os.environ[LEDGER_ENV] = spec["ledger"]
    async with AsyncClient(spec["agent"], executor=spec["executor"], confirmer=spec.get("confirmer")) as cg:
        session = await cg.session("acme", "alice", timezone="Asia/Shanghai", session_id=spec["session_id"])
        gate = CallgateTools(
            cg, session, TOOLS, executor_id="lg-test", approver=spec.get("approver", "alice"),
            hitl=HITLFormat(spec.get("hitl", "langchain")), console_timeout=spec.get("console_timeout"),
        )  # fmt: skip
        async with AsyncSqliteSaver.from_conn_string(where) as cp:
            yield gate, build(gate, cp, asynchronous=True)


async def amain(spec: dict[str, Any]) -> None:
    async with aapp(spec) as (_, graph):
        for thread, value in spec.get("resume", {}).items():
            out = await graph.ainvoke(Command(resume=value), cfg(thread))
            print(json.dumps({"thread": thread, **summary(out)}), flush=True)


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """What a test asserts on: the interrupt payload (if any), each tool message, the last text."""
    intr = out.get("__interrupt__") or ()
    msgs = out.get("messages", [])
    return {
        "interrupt": intr[0].value if intr else None,
        "tools": {
            m.tool_call_id: {"content": m.content, "status": m.status, "artifact": m.artifact}
            for m in msgs
            if isinstance(m, ToolMessage)
        },
        "ai_ids": [m.id for m in msgs if isinstance(m, AIMessage)],
        "last": msgs[-1].content if msgs else "",
    }


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    if spec.get("asyncio"):
        asyncio.run(amain(spec))
        return 0
    with app(spec) as (_, graph):
        for thread, value in spec.get("resume", {}).items():
            out = graph.invoke(Command(resume=value), cfg(thread))
            print(json.dumps({"thread": thread, **summary(out)}), flush=True)
        for thread in spec.get("replay", ()):  # LangGraph's replay: from the checkpoint before tools
            before = next(s for s in graph.get_state_history(cfg(thread)) if s.next == ("tools",))
            out = graph.invoke(None, before.config)
            print(json.dumps({"thread": thread, **summary(out)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
