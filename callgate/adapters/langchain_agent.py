"""callgate as LangChain ``create_agent`` middleware (requires ``pip install 'callgate[langchain]'``).

LangChain's own agent (``langchain.agents.create_agent``) runs its tools in its own ``ToolNode``
and asks people through ``HumanInTheLoopMiddleware``. :func:`middleware` puts the same gate as
:class:`~callgate.adapters.langgraph.CallgateTools` (its listing, its plan, its executor path)
into that agent as one ``AgentMiddleware``::

    gate = CallgateTools(cg, cg.session("acme", user, session_id=thread_id),
                         {"weather.get": get_weather, "calendar.create_event": create_event},
                         executor_id="my-agent", approver=user)
    agent = create_agent(model, tools=[], middleware=[middleware(gate)], checkpointer=saver)
    out = agent.invoke({"messages": [...]}, cfg)
    while "__interrupt__" in out:            # HumanInTheLoopMiddleware's request, callgate's calls
        out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg)

- ``wrap_model_call``: per model call, ``ListTools`` (with the tool messages fed into it); the
  model is given the listed tools (legal names, the ToolSpecs' strict schemas) in place of the
  agent's own, and its answer is stamped (what the model saw, each call's exact proposal bytes);
- ``after_model``: every tool call of the answer is proposed; the calls that need a person are
  asked in **one** ``interrupt()`` in ``HumanInTheLoopMiddleware``'s own shape (``action_requests``
  / ``review_configs``, the ``callgate`` list; resume with ``{"decisions": [...]}``: approve,
  edit, reject, respond), decided as the LangGraph node decides them (:mod:`callgate.adapters.
  langgraph`); refused and rejected calls are answered there (their ``ToolMessage``), so the
  agent's ``ToolNode`` never sees them; what runs is kept in the agent's state (a private key);
- ``wrap_tool_call``: an allowed or confirmed call runs the registered tool inside callgate's
  executor path (BeginAttempt -> the tool with the canonical arguments -> ReportOutcome ->
  EncodeResult). A call the middleware did not plan is refused (``tools_not_listed``).

Replay-safe as the node: LangGraph re-runs ``after_model`` from its start on resume; every proposal
is re-sent with its derived key, so a checkpoint resumed in another process, or a resume value
given twice, runs nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Command

from callgate.adapters.langgraph import CallgateTools, Done, Run, Step
from callgate.client import AsyncSession, CallgateClientError, NotReached, Session

STEPS_KEY = "callgate_steps"
"""The agent state's private key: tool call id -> the invocation that runs it and its tool."""


class CallgateState(AgentState[Any]):
    """The agent state with what the middleware planned for the last model answer."""

    callgate_steps: NotRequired[Annotated[dict[str, dict[str, str]], PrivateStateAttr]]


def _last_ai(messages: list[Any]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def _answered(messages: list[Any], ai: AIMessage) -> set[str]:
    """Tool call ids of ``ai`` already answered by a ``ToolMessage`` after it."""
    after = messages[next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is ai) + 1 :]
    return {m.tool_call_id for m in after if isinstance(m, ToolMessage)}


class CallgateMiddleware(AgentMiddleware[CallgateState, Any, Any]):
    """:func:`middleware`."""

    state_schema = CallgateState

    def __init__(self, gate: CallgateTools) -> None:
        super().__init__()
        self.gate = gate
        self.tools = list(gate.tools.values())  # the agent's ToolNode runs them (by their names)

    # ---------------------------------------------------------------- the model call
    def _tools(self, request: ModelRequest[Any], listed: list[dict[str, Any]]) -> list[Any]:
        """The listed tools, plus the request's provider (dict) tools; none of the agent's own
        ``BaseTool`` objects: a call of those would not be gated."""
        return [*listed, *(t for t in request.tools if isinstance(t, dict))]

    def _stamped(self, response: Any) -> Any:
        if isinstance(response, AIMessage):
            return self.gate.stamp(response)
        if isinstance(response, ModelResponse):
            result: list[BaseMessage] = [
                self.gate.stamp(m) if isinstance(m, AIMessage) else m for m in response.result
            ]
            return ModelResponse(result=result, structured_response=response.structured_response)
        return response

    @staticmethod
    def _unrun(request: ModelRequest[Any]) -> list[str]:
        """Invocations planned to run whose call another middleware answered instead (e.g.
        ``HumanInTheLoopMiddleware`` rejected it after callgate allowed or confirmed it): the
        tool never ran them, so they are cancelled rather than left PREPARED until their deadline."""
        found = (request.state or {}).get(STEPS_KEY)
        kept: Mapping[str, Mapping[str, str]] = found if isinstance(found, Mapping) else {}
        out = []
        for m in request.messages:
            if not isinstance(m, ToolMessage) or m.tool_call_id not in kept:
                continue
            planned = kept[m.tool_call_id].get("invocation_id")
            art = m.artifact
            if planned and not (isinstance(art, Mapping) and art.get("invocation_id") == planned):
                out.append(planned)
        return out

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]) -> Any:
        _, session = self.gate._sync()
        for invocation_id in self._unrun(request):
            _cancel(session, invocation_id)
        listing = self.gate.list_tools(fed_invocation_ids=self.gate.fed(request.messages))
        return self._stamped(handler(request.override(tools=self._tools(request, listing.tools))))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        for invocation_id in self._unrun(request):
            await _acancel(self.gate, invocation_id)
        listing = await self.gate.alist_tools(fed_invocation_ids=self.gate.fed(request.messages))
        return self._stamped(await handler(request.override(tools=self._tools(request, listing.tools))))

    # ---------------------------------------------------------------- the decision
    def _calls(self, state: CallgateState) -> tuple[list[Any], list[Any]] | None:
        messages = list(state.get("messages", []))
        ai = _last_ai(messages)
        if ai is None or not ai.tool_calls:
            return None
        done = _answered(messages, ai)
        calls = [c for c in ai.tool_calls if (c.get("id") or "") not in done]
        return (messages, calls) if calls else None

    @staticmethod
    def _update(steps: Mapping[str, Step]) -> dict[str, Any]:
        kept = {
            cid: {"invocation_id": s.invocation_id, "tool": s.tool}
            for cid, s in steps.items()
            if isinstance(s, Run)
        }
        said = [s.message for s in steps.values() if isinstance(s, Done)]
        return {STEPS_KEY: kept, "messages": said}

    def after_model(self, state: CallgateState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        found = self._calls(state)
        if found is None:
            return {STEPS_KEY: {}} if state.get(STEPS_KEY) else None
        messages, calls = found
        return self._update(self.gate.plan(messages, calls, get_config()))

    async def aafter_model(self, state: CallgateState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        found = self._calls(state)
        if found is None:
            return {STEPS_KEY: {}} if state.get(STEPS_KEY) else None
        messages, calls = found
        return self._update(await self.gate.aplan(messages, calls, get_config()))

    # ---------------------------------------------------------------- the run
    @staticmethod
    def _step(request: ToolCallRequest) -> Run:
        kept = (request.state or {}).get(STEPS_KEY) or {}
        step = kept.get(request.tool_call.get("id") or "")
        if not isinstance(step, Mapping):
            raise CallgateClientError("a tool call callgate did not plan", code="tools_not_listed")
        return Run(str(step["invocation_id"]), str(step["tool"]))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        def run(req: ToolCallRequest) -> ToolMessage | Command[Any]:
            return _reached(req, handler(req))

        return self.gate.execute(self._step(request), request, run)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        async def run(req: ToolCallRequest) -> ToolMessage | Command[Any]:
            return _reached(req, await handler(req))

        return await self.gate.aexecute(self._step(request), request, run)


UNRUN = "the agent answered the call without running it (another middleware)"


def _cancel(session: Session, invocation_id: str) -> None:
    try:
        session.cancel(invocation_id, reason=UNRUN)
    except CallgateClientError:
        pass  # best effort: a PREPARED invocation nobody runs ends at its deadline


async def _acancel(gate: CallgateTools, invocation_id: str) -> None:
    try:
        if isinstance(gate.session, AsyncSession):
            await gate.session.cancel(invocation_id, reason=UNRUN)
        else:
            await asyncio.to_thread(gate.session.cancel, invocation_id, reason=UNRUN)
    except CallgateClientError:
        pass


def _reached(req: ToolCallRequest, out: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
    """The agent's ``ToolNode`` (LangChain's default error handling) answers arguments its tool
    refuses (``ToolInvocationError``) with an error ``ToolMessage`` instead of raising: the tool
    never ran, so it is reported as not reached (FAILED_BEFORE_COMMIT), never as a result."""
    if isinstance(out, ToolMessage) and out.status == "error":
        raise NotReached(f"{req.tool_call['name']}: arguments refused")
    return out


def middleware(gate: CallgateTools) -> CallgateMiddleware:
    """``create_agent(..., middleware=[middleware(gate)])``: every tool call of the agent gated by
    ``gate`` (:class:`~callgate.adapters.langgraph.CallgateTools`), asked in
    ``HumanInTheLoopMiddleware``'s shape."""
    return CallgateMiddleware(gate)


__all__ = ["STEPS_KEY", "CallgateMiddleware", "CallgateState", "middleware"]
