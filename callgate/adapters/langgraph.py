"""LangGraph / LangChain, gated by callgate (requires ``pip install 'callgate[langgraph]'``).

Your ``@tool`` functions stay as they are; :class:`CallgateTools` gates them::

    gate = CallgateTools(cg, cg.session("acme", user, session_id=thread_id),
                         {"weather.get": get_weather, "calendar.create_event": create_event},
                         executor_id="my-agent", approver=user)
    model = gate.model(llm)                 # per model call: ListTools, bind_tools, invoke
    graph.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    graph.add_node("tools", gate.node())    # a langgraph.prebuilt.ToolNode
    graph.add_conditional_edges("agent", tools_condition)

What the model saw is kept on its own ``AIMessage`` (``response_metadata["callgate"]``: the model
call id, the names shown and each tool call's exact proposal), never by replacing its id, so a
graph resumed from a checkpointer in another process proposes the same bytes again. Each tool
call's proposal id is the model's own tool call id.

The node (:class:`CallgateToolNode`, a ``ToolNode`` subclass) proposes every tool call first:
DENIED / REJECTED become the ``ToolMessage`` (nothing runs); calls that need a person are asked in
one ``interrupt()`` in LangChain's human-in-the-loop shape (:mod:`callgate.adapters.hitl`:
approve / edit / reject / respond, or Agent Inbox's accept / edit / ignore / response), the
arguments in it with each secret masked by the sidecar (its ``masked_arguments``; the digest and
what runs are the exact arguments'). An ``edit`` cancels the original and proposes the edited call anew (its own digest; a new interrupt
when it needs confirmation too). Then ALLOWED and confirmed calls run through ``ToolNode`` itself
(injected arguments, ``ToolRuntime``), inside the executor path (BeginAttempt -> the tool with
the canonical arguments -> ReportOutcome -> EncodeResult, :meth:`Client.run`).

Who confirms (``how`` in the payload): with a confirmer listener on the client (the application
holds a confirmer) an approve confirms that exact digest through ``Confirmations.Confirm``
recorded with the approver, and a reject / edit denies it (``Confirmations.Deny``); without one
(confirmation lives only in the console) an approve never confirms: the node waits on
``WatchInvocation`` for the console's decision until the confirmation expires, and a reject / edit
cancels (``Gate.Cancel``). Either way a rejected call leaves the console at once.

Async graphs (``ainvoke`` / ``astream``): give :class:`CallgateTools` an ``AsyncClient`` and its
``AsyncSession`` (``callgate.client.aio``): every call to the sidecar, the console wait included,
is awaited, so the event loop is never blocked; one written plan (:class:`_Io`) serves both paths.
``gate.model`` names the tool messages fed into each model call (``fed_invocation_ids``).

Replay-safe (LangGraph re-runs the node from its start on resume): every proposal is re-sent with
its derived idempotency key, so callgate answers with the replay (6.8); which calls are asked is
read from the invocations (one that was ever parked is asked again, whatever it became), so the
interrupts and their resume values line up on every run, in any process; nothing runs twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, TypeVar, cast

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.messages.tool import ToolCall as LCToolCall
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolInvocationError
from langgraph.types import Command, interrupt

from callgate.adapters.hitl import (
    Ask,
    Decision,
    HITLFormat,
    InvalidResume,
    Kind,
    parse_decisions,
    request,
    shown_arguments,
)
from callgate.adapters.parts import answer_parts, committed, replayed_parts, watched
from callgate.client import (
    Allowed,
    AsyncClient,
    AsyncSession,
    CallgateClientError,
    CallRefused,
    Client,
    Committed,
    DeadlineExceeded,
    Denied,
    MalformedAnswer,
    NeedsConfirmation,
    NotReached,
    Outcome,
    Rejected,
    Replayed,
    Session,
    ToolCall,
    ToolContext,
    ToolResult,
    idempotency_key,
)
from callgate.client.outcomes import not_listed
from callgate.client.tools import ToolNames
from callgate.gen.v1 import callgate_pb2 as pb

STAMP = "callgate"
"""The key of ``AIMessage.response_metadata`` that keeps what the model saw."""

TOOL_MESSAGE_OF = "tool_message_of"
"""The ``ToolMessage.artifact`` key naming the session whose stored tool message the content is
(an executed call's, or its replay): such messages are reported as fed into the next model call."""

FED_MAX = 1024
"""At most this many fed invocations per model call (the sidecar's limit), the newest."""

Approver = str | Callable[[RunnableConfig], str]
T = TypeVar("T")


class Confirmation(Enum):
    """Who confirms, as the interrupt payload says (``callgate[].confirmation``)."""

    RESUME = "resume"  # the application holds a confirmer: the resume decision confirms
    CONSOLE = "console"  # only the console confirms: an approve waits for it


@dataclass(frozen=True)
class Listing:
    """One model call's tools (the ``openai`` dialect by default) and its id."""

    model_call_id: str
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class Run:
    """Execute this invocation with the tool registered for ``tool``."""

    invocation_id: str
    tool: str


@dataclass(frozen=True)
class Done:
    """Answer the model with this message; nothing (more) runs."""

    message: ToolMessage


Step = Run | Done


@dataclass(frozen=True)
class _Parked:
    """A call a person is asked about (or was asked about, on a re-run)."""

    call_id: str
    legal: str
    req: pb.ProposeRequest
    inv: pb.Invocation
    replayed: str
    fresh: bool = False
    """Proposed anew on this run of the node. A decision read back on a re-run answers what was
    asked on an earlier run, which a replay finds again; a fresh one means that invocation ended
    meanwhile (its confirmation expired, or it was denied or cancelled: the key was released)
    and this one was never shown to anyone."""


_CURRENT: ContextVar[ToolContext] = ContextVar("callgate_tool_context")
_PLAN: ContextVar[Mapping[str, Step]] = ContextVar("callgate_plan")


def tool_context() -> ToolContext:
    """Inside a gated tool's body: this attempt's :class:`ToolContext` (``redeem(secret_name)``
    for a secret the sidecar binds to the tool, the credential, the idempotency key)."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise CallgateClientError("not inside a tool run by callgate", code="not_configured") from None


def _content(envelope: str) -> dict[str, Any]:
    """The ``content`` of the sidecar's tool message (its role and tool_call_id are LangChain's
    ``ToolMessage`` fields already)."""
    try:
        content = json.loads(envelope)["content"]
    except (ValueError, KeyError, TypeError):
        raise MalformedAnswer("a tool message that is not the sidecar's envelope") from None
    if not isinstance(content, dict):
        raise MalformedAnswer("a tool message whose content is not an object")
    return content


def _message(
    call_id: str, name: str, content: Mapping[str, Any], invocation_id: str = "", tool_message_of: str = ""
) -> ToolMessage:
    """``tool_message_of``: the session whose stored tool message of ``invocation_id`` this is
    (kept in the artifact, so the next model call names it as fed: :meth:`CallgateTools.fed`)."""
    artifact: dict[str, str] | None = {"invocation_id": invocation_id} if invocation_id else None
    if artifact is not None and tool_message_of:
        artifact[TOOL_MESSAGE_OF] = tool_message_of
    return ToolMessage(
        content=json.dumps(content, ensure_ascii=False, separators=(",", ":")),
        tool_call_id=call_id,
        name=name,
        status="success" if content.get("status") == "ok" else "error",
        artifact=artifact,
    )


def _note(call_id: str, name: str, status: str, message: str, invocation_id: str = "", **more: str) -> Done:
    return Done(_message(call_id, name, {"status": status, "message": message, **more}, invocation_id))


PART_TYPES = frozenset({"text", "image", "image_url", "file", "audio", "video"})
"""LangChain's content block types a tool's list result is kept in parts for (anything else in a
list is data: encoded, marked, as JSON)."""


def _parts(content: Any) -> list[dict[str, Any]] | None:
    """A tool's content as LangChain content blocks (a bare string is a text block), else None."""
    if not isinstance(content, list) or not content:
        return None
    out: list[dict[str, Any]] = []
    for item in content:
        block = {"type": "text", "text": item} if isinstance(item, str) else item
        if not isinstance(block, Mapping) or block.get("type") not in PART_TYPES:
            return None
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            return None
        out.append(dict(block))
    return out


def _committed(out: ToolMessage | Command[Any], parts: list[dict[str, Any]] | None = None) -> Committed:
    """What the tool committed, for the sidecar's encoding: the ``Committed`` a tool with
    ``response_format="content_and_artifact"`` returns as its artifact (with the external
    system's id of the side effect, its cost), else its result: content blocks (text, images,
    files) as their descriptors (:mod:`callgate.adapters.parts`, the blocks put in ``parts`` for
    the answer), an object or list when the tool returned one (LangChain serialized it as JSON),
    else its text."""
    if not isinstance(out, ToolMessage):
        raise TypeError("a gated tool must return a result, not a Command")
    if isinstance(out.artifact, Committed):
        return out.artifact
    content = out.content
    blocks = _parts(content)
    if blocks is not None and parts is not None:
        parts[:] = blocks
        return committed(blocks)  # the parts' bytes go to the sidecar's secret check
    if isinstance(content, str):
        try:
            parsed = json.loads(content)
        except ValueError:
            return Committed(content)
        return Committed(parsed if isinstance(parsed, dict | list) else content)
    return Committed(content)


class _Io(Protocol):
    """The gate's calls to the sidecar during a plan, as coroutines: :class:`_SyncIo` (the sync
    client; its coroutines never suspend, :func:`_drive` runs them) or :class:`_AsyncIo`
    (``callgate.client.aio``: the event loop is never blocked)."""

    async def propose(self, req: pb.ProposeRequest) -> Outcome: ...
    async def invocation(self, invocation_id: str) -> pb.Invocation: ...
    async def confirm(self, invocation_id: str, digest: str, by: str) -> None: ...
    async def deny(self, invocation_id: str, digest: str, by: str) -> None: ...
    async def cancel(self, invocation_id: str, reason: str) -> None: ...
    async def wait_confirmed(self, pending: NeedsConfirmation, timeout: float) -> bool:
        """Wait for the console's decision; given up otherwise (the process dies), the sidecar
        cancels the parked call (``cancel_on_close``)."""
        ...


@dataclass(frozen=True)
class _SyncIo:
    client: Client
    session: Session

    async def propose(self, req: pb.ProposeRequest) -> Outcome:
        return self.session.propose_prepared(req)

    async def invocation(self, invocation_id: str) -> pb.Invocation:
        return self.session.invocation(invocation_id)

    async def confirm(self, invocation_id: str, digest: str, by: str) -> None:
        self.client.confirmer().confirm(invocation_id, digest, confirmed_by=by)

    async def deny(self, invocation_id: str, digest: str, by: str) -> None:
        self.client.confirmer().deny(invocation_id, digest, denied_by=by)

    async def cancel(self, invocation_id: str, reason: str) -> None:
        self.session.cancel(invocation_id, reason=reason)

    async def wait_confirmed(self, pending: NeedsConfirmation, timeout: float) -> bool:
        return self.session.wait_confirmed(pending, timeout=timeout, cancel_on_close=True)


@dataclass(frozen=True)
class _AsyncIo:
    client: AsyncClient
    session: AsyncSession

    async def propose(self, req: pb.ProposeRequest) -> Outcome:
        return await self.session.propose_prepared(req)

    async def invocation(self, invocation_id: str) -> pb.Invocation:
        return await self.session.invocation(invocation_id)

    async def confirm(self, invocation_id: str, digest: str, by: str) -> None:
        await self.client.confirmer().confirm(invocation_id, digest, confirmed_by=by)

    async def deny(self, invocation_id: str, digest: str, by: str) -> None:
        await self.client.confirmer().deny(invocation_id, digest, denied_by=by)

    async def cancel(self, invocation_id: str, reason: str) -> None:
        await self.session.cancel(invocation_id, reason=reason)

    async def wait_confirmed(self, pending: NeedsConfirmation, timeout: float) -> bool:
        return await self.session.wait_confirmed(pending, timeout=timeout, cancel_on_close=True)


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a plan over :class:`_SyncIo` to its end in this thread: its awaits are the sync
    client's calls, so it never suspends (one written plan serves the sync and asyncio paths)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError("a sync plan awaited something that suspends")


def _wrong_client(path: str) -> CallgateClientError:
    other = {"sync": "an AsyncClient: run the graph with ainvoke / astream", "async": "a Client"}[path]
    return CallgateClientError(f"this gate was built on {other}", code="not_configured")


class CallgateTools:
    """Gates LangChain tools: ``tools`` maps callgate tool names (``weather.get``) to your
    ``BaseTool`` (``@tool``) objects. The ``client`` needs the agent and executor listeners,
    and the confirmer listener when the application confirms (see the module docstring): a
    :class:`Client` with its :class:`Session`, or an :class:`AsyncClient` with its
    :class:`AsyncSession` for a graph run with ``ainvoke`` / ``astream`` (the event loop is never
    blocked; a sync ``Client`` under an async graph runs its calls in worker threads).
    ``approver``: the user id recorded as ``confirmed_by`` / ``denied_by`` (or a function of
    the run's config giving it); a decision's ``"by"`` overrides it. ``hitl``: the interrupt
    payload's shape. ``console_timeout``: how long an approve waits for the console at most
    (default: until the confirmation expires)."""

    def __init__(
        self,
        client: Client | AsyncClient,
        session: Session | AsyncSession,
        tools: Mapping[str, BaseTool],
        *,
        executor_id: str,
        approver: Approver = "",
        hitl: HITLFormat = HITLFormat.LANGCHAIN,
        console_timeout: float | None = None,
    ) -> None:
        if isinstance(client, AsyncClient) != isinstance(session, AsyncSession):
            raise CallgateClientError(
                "pass a Client with its Session, or an AsyncClient with its AsyncSession",
                code="not_configured",
            )
        self.client = client
        self.session = session
        self.tools = dict(tools)
        self.executor_id = executor_id
        self.approver = approver
        self.hitl = hitl
        self.console_timeout = console_timeout

    @property
    def confirmation(self) -> Confirmation:
        return Confirmation.RESUME if self.client.confirmations is not None else Confirmation.CONSOLE

    def _sync(self) -> tuple[Client, Session]:
        if isinstance(self.client, AsyncClient) or isinstance(self.session, AsyncSession):
            raise _wrong_client("sync")
        return self.client, self.session

    # ---------------------------------------------------------------- the model side
    def list_tools(self, dialect: str = "openai", *, fed_invocation_ids: tuple[str, ...] = ()) -> Listing:
        """ListTools for a new model call: give ``tools`` to your model, then :meth:`stamp` its
        answer (or use :meth:`model`, which does both). ``fed_invocation_ids``: the invocations
        whose tool messages are in the model call's context (:meth:`fed`)."""
        _, session = self._sync()
        mc = "mc-" + uuid.uuid4().hex
        return Listing(mc, session.tools(mc, dialect, fed_invocation_ids=fed_invocation_ids))

    async def alist_tools(
        self, dialect: str = "openai", *, fed_invocation_ids: tuple[str, ...] = ()
    ) -> Listing:
        """:meth:`list_tools` on the asyncio path."""
        if not isinstance(self.session, AsyncSession):
            return await asyncio.to_thread(self.list_tools, dialect, fed_invocation_ids=fed_invocation_ids)
        mc = "mc-" + uuid.uuid4().hex
        return Listing(mc, await self.session.tools(mc, dialect, fed_invocation_ids=fed_invocation_ids))

    def fed(self, messages: Any) -> tuple[str, ...]:
        """The invocations whose tool messages (sent by this gate's node, in this session) are
        among ``messages``: what the runtime feeds into the model call (``fed_invocation_ids``,
        recorded with its tool view: docs/OPERATE.md, question 8), the newest
        :data:`FED_MAX`."""
        if not isinstance(messages, Sequence) or isinstance(messages, str):
            return ()
        ids = [
            m.artifact["invocation_id"]
            for m in messages
            if isinstance(m, ToolMessage)
            and isinstance(m.artifact, Mapping)
            and m.artifact.get(TOOL_MESSAGE_OF) == self.session.session_id
            and isinstance(m.artifact.get("invocation_id"), str)
        ]
        return tuple(dict.fromkeys(ids))[-FED_MAX:]

    def stamp(self, ai: AIMessage) -> AIMessage:
        """``ai`` (the model's answer to the last :meth:`list_tools`) with what the model saw kept in
        ``response_metadata["callgate"]``; its id and tool calls are left as the model made them,
        except that a call whose arguments the provider could not parse (LangChain's
        ``invalid_tool_calls``, which ``ToolNode`` and ``tools_condition`` never see) becomes a
        tool call with empty ``args`` whose proposal is the exact text: the sidecar refuses it
        (``invalid_json``) and the model is told, instead of the call being dropped unanswered."""
        s = self.session
        proposals = {}
        exact = _argument_texts(ai)
        unparsed = [c for c in ai.invalid_tool_calls if c.get("id") and c.get("name")]
        for c in unparsed:
            exact[str(c["id"])] = c.get("args") or ""
        calls = [
            *ai.tool_calls,
            *(LCToolCall(name=str(c["name"]), args={}, id=c["id"], type="tool_call") for c in unparsed),
        ]
        for tc in calls:
            call_id = tc.get("id") or ""
            text = exact[call_id] if call_id in exact else json.dumps(tc.get("args", {}))
            req = s.prepare(ToolCall(call_id, tc["name"], text))
            proposals[req.proposal_id] = {
                "tool": req.tool_name, "version": req.tool_version, "arguments": req.arguments.decode(),
            }  # fmt: skip
        names = {legal: list(nv) for legal, nv in s.names.by_legal.items()}
        kept = {
            "session_id": s.session_id,
            "model_call_id": s.model_call_id,
            "names": names,
            "proposals": proposals,
        }
        update: dict[str, Any] = {"response_metadata": {**ai.response_metadata, STAMP: kept}}
        if unparsed:
            update["tool_calls"] = calls
            update["invalid_tool_calls"] = [c for c in ai.invalid_tool_calls if c not in unparsed]
        return ai.model_copy(update=update)

    def model(self, llm: Any, dialect: str = "openai") -> Runnable[Any, AIMessage]:
        """``llm`` (a chat model with ``bind_tools``) as a runnable that lists this model call's
        tools (with the invocations fed into it: :meth:`fed`), binds them, invokes and stamps the
        answer; ``ainvoke`` lists and invokes on the asyncio path."""

        def checked(ai: Any) -> AIMessage:
            if not isinstance(ai, AIMessage):
                raise TypeError("the model did not answer with an AIMessage")
            return self.stamp(ai)

        def call(messages: Any, config: RunnableConfig) -> AIMessage:
            listing = self.list_tools(dialect, fed_invocation_ids=self.fed(messages))
            return checked(llm.bind_tools(listing.tools).invoke(messages, config))

        async def acall(messages: Any, config: RunnableConfig) -> AIMessage:
            listing = await self.alist_tools(dialect, fed_invocation_ids=self.fed(messages))
            return checked(await llm.bind_tools(listing.tools).ainvoke(messages, config))

        return RunnableLambda(call, afunc=acall)

    def node(self, *, name: str = "tools", messages_key: str = "messages") -> CallgateToolNode:
        """The tool node: a ``ToolNode`` over these tools, every call gated."""
        return CallgateToolNode(self, name=name, messages_key=messages_key)

    @staticmethod
    def _parked_ids(graph_state: Any) -> list[str]:
        ids: list[str] = []
        for intr in graph_state.interrupts:
            value = intr.value
            items = value.get("callgate", []) if isinstance(value, Mapping) else [
                v.get("callgate", {}) for v in value if isinstance(v, Mapping)
            ] if isinstance(value, list) else []  # fmt: skip
            for item in items:
                if isinstance(item, Mapping) and isinstance(item.get("invocation_id"), str):
                    ids.append(item["invocation_id"])
        return ids

    def abandon(self, graph: Any, config: RunnableConfig, *, reason: str = "abandoned") -> list[str]:
        """Cancel every call parked behind the thread's pending interrupts (a conversation dropped
        without resuming): they leave the console at once. The invocation ids cancelled."""
        _, session = self._sync()
        ids = self._parked_ids(graph.get_state(config))
        for invocation_id in ids:
            session.cancel(invocation_id, reason=reason)
        return ids

    async def aabandon(self, graph: Any, config: RunnableConfig, *, reason: str = "abandoned") -> list[str]:
        """:meth:`abandon` on the asyncio path (``graph.aget_state``)."""
        ids = self._parked_ids(await graph.aget_state(config))
        for invocation_id in ids:
            if isinstance(self.session, AsyncSession):
                await self.session.cancel(invocation_id, reason=reason)
            else:
                await asyncio.to_thread(self.session.cancel, invocation_id, reason=reason)
        return ids

    # ---------------------------------------------------------------- the gate
    def plan(
        self, messages: Sequence[AnyMessage], calls: Sequence[Mapping[str, Any]], config: RunnableConfig
    ) -> dict[str, Step]:
        """Propose ``calls`` (of AI messages in ``messages``), ask a person about the parked ones
        (``interrupt``, one per round) and say per tool call id what to do."""
        client, session = self._sync()
        return _drive(self._plan(_SyncIo(client, session), messages, calls, config))

    async def aplan(
        self, messages: Sequence[AnyMessage], calls: Sequence[Mapping[str, Any]], config: RunnableConfig
    ) -> dict[str, Step]:
        """:meth:`plan` on the asyncio path: ``callgate.client.aio`` with an :class:`AsyncClient`,
        else the sync client's calls in a worker thread; the event loop never waits on the sidecar
        (nor on a console's decision)."""
        if isinstance(self.client, AsyncClient) and isinstance(self.session, AsyncSession):
            return await self._plan(_AsyncIo(self.client, self.session), messages, calls, config)
        return await asyncio.to_thread(self.plan, messages, calls, config)

    async def _plan(
        self,
        io: _Io,
        messages: Sequence[AnyMessage],
        calls: Sequence[Mapping[str, Any]],
        config: RunnableConfig,
    ) -> dict[str, Step]:
        steps: dict[str, Step] = {}
        parked: list[_Parked] = []
        for call in calls:
            call_id, legal = call.get("id") or "", call["name"]
            kept = self._stamp_of(messages, call_id)
            p = kept["proposals"].get(call_id)
            req = (
                self._request(kept, call_id, p["tool"], p["version"], p["arguments"].encode()) if p else None
            )
            if req is None:
                raise CallgateClientError(
                    f"tool call {call_id!r} was not listed by callgate", code="tools_not_listed"
                )
            await self._classify(io, call_id, legal, req, steps, parked, kept.get("names", {}))
        round_ = 0
        while parked:
            asks = [self._ask(p) for p in parked]
            parked = await self._decide(io, parked, self._decisions(asks), round_, steps, messages, config)
            round_ += 1
        return steps

    def _decisions(self, asks: Sequence[Ask]) -> tuple[Decision, ...]:
        """One interrupt for ``asks``; a resume value that is no decision shape decides nothing
        and is asked again (the next interrupt, with the error), as many times as it takes."""
        error = ""
        while True:
            try:
                return parse_decisions(
                    interrupt(request(asks, self.hitl, self.confirmation.value, error)), len(asks)
                )
            except InvalidResume as err:
                error = err.message

    def _stamp_of(self, messages: Sequence[AnyMessage], call_id: str) -> Mapping[str, Any]:
        for m in reversed(messages):
            if isinstance(m, AIMessage) and any(tc.get("id") == call_id for tc in m.tool_calls):
                kept = m.response_metadata.get(STAMP)
                if not isinstance(kept, Mapping) or not isinstance(kept.get("proposals"), Mapping):
                    break
                if kept.get("session_id") != self.session.session_id:
                    raise CallgateClientError(
                        "the AI message was listed in another session", code="tools_not_listed"
                    )
                return kept
        raise CallgateClientError(
            "the AI message carries no callgate listing: make it with gate.model(llm) or gate.stamp(ai)",
            code="tools_not_listed",
        )

    def _request(
        self, kept: Mapping[str, Any], proposal_id: str, tool: str, version: str, raw: bytes
    ) -> pb.ProposeRequest:
        sid, mc = self.session.session_id, str(kept["model_call_id"])
        return pb.ProposeRequest(
            session_id=sid, model_call_id=mc, proposal_id=proposal_id, tool_name=tool, tool_version=version,
            arguments=raw, idempotency_key=idempotency_key(sid, mc, proposal_id, tool),
        )  # fmt: skip

    def _said(self, call_id: str, legal: str, message: str, invocation_id: str, *, stored: bool) -> Done:
        """The sidecar's tool message as the ``ToolMessage``; ``stored``: it is the invocation's
        stored tool message (fed into the next model call, :meth:`fed`)."""
        of = self.session.session_id if stored else ""
        said = _message(call_id, legal, _content(message), invocation_id, of)
        replayed = replayed_parts(message) if stored else None  # a result in parts: as parts
        return Done(said if replayed is None else said.model_copy(update={"content": replayed}))

    async def _classify(
        self, io: _Io, call_id: str, legal: str, req: pb.ProposeRequest, steps: dict[str, Step],
        parked: list[_Parked], shown: Mapping[str, Any],
    ) -> None:  # fmt: skip
        """``shown``: the names the model call was shown (legal name -> tool and version)."""
        if not req.tool_version:  # a name the model was not shown: the client's answer, not proposed
            unknown = not_listed(call_id, legal, shown)
            steps[call_id] = self._said(call_id, legal, unknown.message, "", stored=False)
            return
        if req.tool_name not in self.tools:  # nothing could execute it: not proposed, not parked
            steps[call_id] = _note(
                call_id, legal, "rejected", f"no tool is registered for {req.tool_name}", code="no_executor"
            )
            return
        out = await io.propose(req)
        if isinstance(out, Allowed):
            steps[call_id] = Run(out.invocation_id, req.tool_name)
        elif isinstance(out, Denied | Rejected):
            steps[call_id] = self._said(call_id, legal, out.message, out.invocation_id, stored=False)
        elif isinstance(out, NeedsConfirmation):
            parked.append(
                _Parked(call_id, legal, req, await io.invocation(out.invocation_id), "", fresh=True)
            )
        else:
            assert isinstance(out, Replayed)
            inv = await io.invocation(out.invocation_id)
            if inv.confirmation_expires_at:  # it was parked once: asked again (same order, same index)
                parked.append(_Parked(call_id, legal, req, inv, out.message))
            elif inv.state == pb.PREPARED:  # allowed, never begun: run it now
                steps[call_id] = Run(out.invocation_id, req.tool_name)
            else:  # ran already (its original message) or ended otherwise
                stored = inv.state == pb.OBSERVED
                steps[call_id] = self._said(call_id, legal, out.message, out.invocation_id, stored=stored)

    @staticmethod
    def _ask(p: _Parked) -> Ask:
        return Ask(
            p.legal,
            shown_arguments(p.inv.masked_arguments, p.inv.normalized_arguments),
            p.req.tool_name,
            p.call_id,
            p.inv.invocation_id,
            p.inv.digest,
            p.inv.confirmation_expires_at,
        )

    def _who(self, d: Decision, config: RunnableConfig) -> str:
        by = d.by or (self.approver(config) if callable(self.approver) else self.approver)
        if not by:
            raise CallgateClientError(
                "no approver: pass approver= or a decision's 'by'", code="not_configured"
            )
        return by

    async def _decide(
        self, io: _Io, parked: list[_Parked], decisions: Sequence[Decision], round_: int,
        steps: dict[str, Step], messages: Sequence[AnyMessage], config: RunnableConfig,
    ) -> list[_Parked]:  # fmt: skip
        again: list[_Parked] = []
        for p, d in zip(parked, decisions, strict=True):
            inv_id = p.inv.invocation_id
            if d.kind is Kind.APPROVE and p.fresh:  # the call approved ended before the approval
                await io.cancel(inv_id, "the approval was for an invocation that had ended")
                text = "The call ended before it was approved (expired, denied or cancelled); nothing ran."
                steps[p.call_id] = _note(
                    p.call_id, p.legal, "not_confirmed", text, inv_id, code="confirmation_ended"
                )
                continue
            if d.kind is Kind.APPROVE and d.digest in ("", p.inv.digest):
                steps[p.call_id] = await self._approve(io, p, d, config)
                continue
            await self._end(io, p, d, config)
            if d.kind is Kind.EDIT:
                kept = self._stamp_of(messages, p.call_id)
                tool, version = self._edited_tool(kept, d.tool or p.legal, p)
                raw = json.dumps(d.arguments, ensure_ascii=False, sort_keys=True).encode()
                tag = hashlib.sha256(f"{tool}@{version}\x00".encode() + raw).hexdigest()[:12]
                req = self._request(kept, f"{p.call_id}~edit{round_}-{tag}", tool, version, raw)
                await self._classify(io, p.call_id, p.legal, req, steps, again, kept.get("names", {}))
            elif d.kind is Kind.RESPOND:
                steps[p.call_id] = _note(p.call_id, p.legal, "user_response", d.message, inv_id)
            elif d.kind is Kind.APPROVE:  # an approval of another digest than the one parked
                text = "The approval named another digest than the one shown; nothing ran."
                steps[p.call_id] = _note(
                    p.call_id, p.legal, "not_confirmed", text, inv_id, code="confirmation_digest_mismatch"
                )
            else:
                text = d.message or "The user rejected this call; it was not executed."
                steps[p.call_id] = _note(p.call_id, p.legal, "rejected_by_user", text, inv_id)
        return again

    @staticmethod
    def _edited_tool(kept: Mapping[str, Any], name: str, p: _Parked) -> tuple[str, str]:
        names = ToolNames(by_legal={k: (v[0], v[1]) for k, v in kept.get("names", {}).items()})
        got = names.resolve(name)
        if got is not None:
            return got
        if name == p.req.tool_name:
            return p.req.tool_name, p.req.tool_version
        return name, ""  # not shown to the model: answered as not listed (unknown_tool_version)

    async def _approve(self, io: _Io, p: _Parked, d: Decision, config: RunnableConfig) -> Step:
        inv_id, tool = p.inv.invocation_id, p.req.tool_name
        state = p.inv.state
        if state == pb.AUTHORIZED and self.confirmation is Confirmation.RESUME:
            try:
                await io.confirm(inv_id, p.inv.digest, self._who(d, config))
            except CallRefused as err:  # expired, decided meanwhile: nothing runs
                return _note(
                    p.call_id,
                    p.legal,
                    "not_confirmed",
                    "The confirmation did not go through; nothing ran.",
                    inv_id,
                    code=err.code,
                )
            return Run(inv_id, tool)
        if state == pb.AUTHORIZED:  # only the console confirms: wait for its decision
            if await self._console_confirmed(io, p):
                return Run(inv_id, tool)
            return _note(
                p.call_id,
                p.legal,
                "not_confirmed",
                "The console did not confirm this call; nothing ran.",
                inv_id,
            )
        if state == pb.PREPARED:  # confirmed (on an earlier run, or by the console), never begun
            return Run(inv_id, tool)
        if state in (pb.OBSERVED, pb.FAILED_AFTER_COMMIT) and p.replayed:  # ran on an earlier run
            return self._said(p.call_id, p.legal, p.replayed, inv_id, stored=state == pb.OBSERVED)
        return _note(
            p.call_id,
            p.legal,
            "not_confirmed",
            "This call ended before it was confirmed; nothing ran.",
            inv_id,
            state=pb.State.Name(state),
        )

    async def _console_confirmed(self, io: _Io, p: _Parked) -> bool:
        wait = _seconds_until(p.inv.confirmation_expires_at) + 1.0
        if self.console_timeout is not None:
            wait = min(wait, self.console_timeout)
        pending = NeedsConfirmation(
            p.inv.invocation_id,
            p.inv.digest,
            p.call_id,
            p.inv.confirmation_expires_at,
            p.inv.normalized_arguments,
            "",
        )
        try:
            return await io.wait_confirmed(pending, max(wait, 0.1))
        except DeadlineExceeded:
            if self.console_timeout is None:  # past the expiry: the sweeper ends it
                return False
            raise
        except asyncio.CancelledError:  # the run was cancelled (asyncio path): it leaves the console
            await asyncio.shield(io.cancel(p.inv.invocation_id, "the agent run was cancelled"))
            raise

    async def _end(self, io: _Io, p: _Parked, d: Decision, config: RunnableConfig) -> None:
        """Take a rejected (or edited) call out of the console at once: Deny with the approver
        when the application confirms, else Cancel."""
        reason = {Kind.EDIT: "edited by the user", Kind.APPROVE: "approved another digest"}.get(
            d.kind, d.message or "rejected by the user"
        )
        if p.inv.state == pb.AUTHORIZED and self.confirmation is Confirmation.RESUME:
            try:
                await io.deny(p.inv.invocation_id, p.inv.digest, self._who(d, config))
                return
            except CallRefused:  # decided meanwhile: the cancel below is idempotent
                pass
        await io.cancel(p.inv.invocation_id, reason[:200])

    # ---------------------------------------------------------------- execution
    def _edited_call(self, step: Run, request_: ToolCallRequest, ctx: ToolContext) -> ToolCallRequest:
        """The tool call with the canonical arguments callgate approved, for the tool of ``step``."""
        tool = self.tools[step.tool]
        call = LCToolCall(
            name=tool.name, args=dict(ctx.arguments), id=request_.tool_call.get("id"), type="tool_call"
        )
        return request_.override(tool_call=call, tool=tool)

    def _answer(
        self,
        request_: ToolCallRequest,
        res: ToolResult,
        parts: Sequence[Mapping[str, Any]] = (),
        seen: Sequence[str | bytes] = (),
    ) -> ToolMessage:
        """The tool message; a result in content blocks as blocks: callgate's envelope (status,
        the markers' nonce) as the first text block, then the tool's blocks, text marked."""
        call = request_.tool_call
        of = self.session.session_id
        message = _message(call.get("id") or "", call["name"], _content(res.message), res.invocation_id, of)
        shown = answer_parts(res.message, parts, seen, res.part_verdicts)
        return message if shown is None else message.model_copy(update={"content": shown})

    def execute(
        self,
        step: Run,
        request_: ToolCallRequest,
        execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage:
        client, _ = self._sync()
        parts: list[dict[str, Any]] = []
        seen: list[str | bytes] = []  # redeemed values and credentials: never in a part

        def fn(ctx: ToolContext) -> Committed:
            ctx = watched(ctx, seen)
            token = _CURRENT.set(ctx)
            try:
                return _committed(_invoked(execute, self._edited_call(step, request_, ctx)), parts)
            finally:
                _CURRENT.reset(token)

        res = client.run(step.invocation_id, fn, executor_id=self.executor_id)
        return self._answer(request_, res, parts, seen)

    async def aexecute(
        self,
        step: Run,
        request_: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        """:meth:`execute` on the asyncio path: ``AsyncClient.run`` (``await
        tool_context().redeem(name)`` inside the tool), or the sync helper in a worker thread."""
        if isinstance(self.client, AsyncClient):
            parts: list[dict[str, Any]] = []
            seen: list[str | bytes] = []

            async def afn(ctx: ToolContext) -> Committed:
                ctx = watched(ctx, seen)
                token = _CURRENT.set(ctx)
                try:
                    edited = self._edited_call(step, request_, ctx)
                    try:
                        out = await execute(edited)
                    except ToolInvocationError as err:  # the tool refused the arguments: it never ran
                        raise NotReached(f"{edited.tool_call['name']}: arguments refused") from err
                    return _committed(out, parts)
                finally:
                    _CURRENT.reset(token)

            res = await self.client.run(step.invocation_id, afn, executor_id=self.executor_id)
            return self._answer(request_, res, parts, seen)
        loop = asyncio.get_running_loop()

        def on_loop(req: ToolCallRequest) -> ToolMessage | Command[Any]:
            return asyncio.run_coroutine_threadsafe(_awaited(execute(req)), loop).result()

        return await asyncio.to_thread(self.execute, step, request_, on_loop)


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def _invoked(
    execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]], req: ToolCallRequest
) -> ToolMessage | Command[Any]:
    try:
        return execute(req)
    except ToolInvocationError as err:  # the tool refused the arguments: it never ran
        raise NotReached(f"{req.tool_call['name']}: arguments refused") from err


class CallgateToolNode(ToolNode):
    """A ``ToolNode`` over the gate's tools whose every call is gated (:class:`CallgateTools`),
    on LangGraph's sync and async paths. Tool errors are not turned into messages by LangGraph:
    they reach callgate's executor path, which records the outcome and encodes what the model
    sees."""

    def __init__(self, gate: CallgateTools, *, name: str = "tools", messages_key: str = "messages") -> None:
        self.gate = gate
        super().__init__(
            list(gate.tools.values()), name=name, messages_key=messages_key, handle_tool_errors=False,
            wrap_tool_call=self._wrap, awrap_tool_call=self._awrap,
        )  # fmt: skip

    def _messages(self, input: Any, config: RunnableConfig) -> list[AnyMessage]:
        state = self._extract_state(input, config)
        messages = state if isinstance(state, list) else (
            state.get(self._messages_key, []) if isinstance(state, dict) else getattr(state, self._messages_key, [])
        )  # fmt: skip
        return list(messages)

    def _func(self, input: Any, config: RunnableConfig, runtime: Any) -> Any:
        calls, _ = self._parse_input(input)
        token = _PLAN.set(self.gate.plan(self._messages(input, config), calls, config))
        try:
            return super()._func(input, config, runtime)
        finally:
            _PLAN.reset(token)

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Any) -> Any:
        calls, _ = self._parse_input(input)
        token = _PLAN.set(await self.gate.aplan(self._messages(input, config), calls, config))
        try:
            return await super()._afunc(input, config, runtime)
        finally:
            _PLAN.reset(token)

    @staticmethod
    def _step(req: ToolCallRequest) -> Step:
        step = _PLAN.get({}).get(req.tool_call.get("id") or "")
        if step is None:
            raise CallgateClientError("a tool call the gate did not plan", code="tools_not_listed")
        return step

    def _wrap(
        self, req: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage:
        step = self._step(req)
        return step.message if isinstance(step, Done) else self.gate.execute(step, req, execute)

    async def _awrap(
        self,
        req: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        step = self._step(req)
        return step.message if isinstance(step, Done) else await self.gate.aexecute(step, req, execute)


def _argument_texts(ai: AIMessage) -> dict[str, str]:
    """Tool call id -> the argument text exactly as the model wrote it, where the provider kept
    it (OpenAI's ``additional_kwargs["tool_calls"]``): LangChain's ``args`` is its parse, which
    keeps one of two repeated keys silently; the sidecar's strict parse judges the text."""
    raw = ai.additional_kwargs.get("tool_calls")
    out: dict[str, str] = {}
    if not isinstance(raw, list):
        return out
    for item in raw:
        fn = item.get("function") if isinstance(item, Mapping) else None
        if (
            isinstance(fn, Mapping)
            and isinstance(item.get("id"), str)
            and isinstance(fn.get("arguments"), str)
        ):
            out[item["id"]] = fn["arguments"]
    return out


def _seconds_until(rfc3339: str) -> float:
    try:
        at = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (at - datetime.now(UTC)).total_seconds()


__all__ = [
    "STAMP",
    "CallgateToolNode",
    "CallgateTools",
    "Confirmation",
    "Done",
    "HITLFormat",
    "Listing",
    "Run",
    "tool_context",
]
