"""A LangGraph tool node that gates every tool call through callgate (requires ``langgraph``).

Install with ``pip install 'callgate[langgraph]'``; the core never imports this module.

For each tool call of the last AI message, :class:`GatedToolNode` proposes the call (Propose,
spec 6.3-6.7) and answers with one ``ToolMessage``:

- rejected / denied: the client's model-facing message; nothing runs;
- allowed: the user's function runs through the executor path (:meth:`Client.run`:
  BeginAttempt -> function -> ReportOutcome -> EncodeResult, 6.9);
- needs confirmation: ``interrupt(payload)`` with what a person must see (tool, normalized
  arguments, digest, expiry); ``Command(resume=...)`` approves (Confirm with that exact digest,
  then the executor path) or rejects (Cancel). See :func:`parse_resume` for the resume values.

Replay-safe: LangGraph re-runs the node from its start on resume. Every proposal is repeated
with the same deterministic idempotency key (session, model call = the AI message's id, tool call
id, tool name), so callgate answers it as an idempotent replay (6.8): a call that already ran
returns its original tool message and runs nothing again; a parked one is interrupted again (the
interrupt then returns the resume value). Transport failures, deadlines and malformed answers
raise the client's typed errors (:mod:`callgate.client.errors`); nothing runs.

The model node must list the tools for the same model call id it gives its AI message::

    mc = gate.new_model_call_id()
    tools = gate.tools(mc)                     # what the model may call (OpenAI dialect)
    ai = model.invoke(..., tools=tools)        # your model
    return {"messages": [AIMessage(id=mc, content=..., tool_calls=...)]}
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.types import interrupt

from callgate.client import (
    Allowed,
    CallgateClientError,
    CallRefused,
    Client,
    Committed,
    Denied,
    MalformedAnswer,
    NeedsConfirmation,
    Rejected,
    Replayed,
    Session,
    ToolCall,
    ToolContext,
    tool_message,
)

ToolFn = Callable[[ToolContext], Committed]


class Verdict(Enum):
    """What the person decided on resume."""

    APPROVE = "approve"
    REJECT = "reject"


@dataclass(frozen=True)
class Resume:
    """A parsed resume value: the verdict, who gave it, and the digest they saw (if sent)."""

    verdict: Verdict
    by: str
    digest: str
    reason: str


def parse_resume(value: object, default_by: str) -> Resume:
    """``True`` / ``"approve"`` / ``{"approve": true, "by": ..., "digest": ...}`` approve;
    ``False`` / ``"reject"`` / ``{"approve": false, "reason": ...}`` reject. Anything else is a
    rejection (fail closed)."""
    if value is True or value == "approve":
        return Resume(Verdict.APPROVE, default_by, "", "")
    if isinstance(value, Mapping) and value.get("approve") is True:
        by, digest = value.get("by", default_by), value.get("digest", "")
        if isinstance(by, str) and by and isinstance(digest, str):
            return Resume(Verdict.APPROVE, by, digest, "")
    reason = value.get("reason", "") if isinstance(value, Mapping) else ""
    return Resume(Verdict.REJECT, default_by, "", reason if isinstance(reason, str) else "")


def _msg(tool_call_id: str, status: str, **fields: object) -> str:
    """The adapter's own notes in the sidecar's tool-message shape, like every other message the
    model gets (callgate.client.outcomes.tool_message)."""
    return tool_message(tool_call_id, {"status": status, **fields})


def cancelled_message(tool_call_id: str) -> str:
    return _msg(tool_call_id, "cancelled", message="The user rejected this call; it was not executed.")


def not_confirmed_message(tool_call_id: str, code: str) -> str:
    return _msg(
        tool_call_id, "not_confirmed", code=code, message="The confirmation did not go through; nothing ran."
    )


def no_executor_message(tool_call_id: str, tool: str) -> str:
    return _msg(tool_call_id, "rejected", code="no_executor", message=f"no function is registered for {tool}")


class GatedToolNode:
    """A LangGraph node (``graph.add_node("tools", GatedToolNode(...))``) for a ``messages``
    state: every tool call of the last AI message goes through callgate.

    ``functions`` maps callgate tool names (``weather.get``) to executor functions;
    ``confirmer`` is the user id recorded as ``confirmed_by`` when a resume value names nobody
    (the runtime's authenticated user, never the model); the ``client`` needs the agent,
    executor and confirmer listeners."""

    def __init__(
        self,
        client: Client,
        session: Session,
        functions: Mapping[str, ToolFn],
        *,
        executor_id: str,
        confirmer: str,
    ) -> None:
        self.client = client
        self.session = session
        self.functions = dict(functions)
        self.executor_id = executor_id
        self.confirmer = confirmer

    # ---------------------------------------------------------------- for the model node
    @staticmethod
    def new_model_call_id() -> str:
        return "mc-" + uuid.uuid4().hex

    def tools(self, model_call_id: str, dialect: str = "openai") -> list[dict[str, Any]]:
        """ListTools for this model call (give the AI message ``id=model_call_id``)."""
        return self.session.tools(model_call_id, dialect)

    # ---------------------------------------------------------------- the node
    def __call__(self, state: Mapping[str, Any]) -> dict[str, list[ToolMessage]]:
        messages: list[AnyMessage] = list(state.get("messages", []))
        ai = messages[-1] if messages else None
        if not isinstance(ai, AIMessage) or not ai.tool_calls:
            return {"messages": []}
        if not ai.id or ai.id != self.session.model_call_id:
            raise CallgateClientError(
                "the AI message's id is not the model call whose tools were listed",
                code="tools_not_listed",
            )
        out: list[ToolMessage] = []
        for tc in ai.tool_calls:
            call_id = tc.get("id") or ""
            text = self._one(ToolCall(call_id, tc["name"], json.dumps(tc.get("args", {}))))
            out.append(ToolMessage(content=text, tool_call_id=call_id, name=tc["name"]))
        return {"messages": out}

    def _fn(self, legal: str) -> tuple[str, ToolFn | None]:
        resolved = self.session.names.resolve(legal)
        name = resolved[0] if resolved is not None else legal
        return name, self.functions.get(name)

    def _run(self, invocation_id: str, fn: ToolFn) -> str:
        return self.client.run(invocation_id, fn, executor_id=self.executor_id).message

    def _one(self, call: ToolCall) -> str:
        name, fn = self._fn(call.name)
        if fn is None:  # nothing could execute it: not proposed, not parked
            return no_executor_message(call.id, name)
        out = self.session.propose(call)
        if isinstance(out, Allowed):
            return self._run(out.invocation_id, fn)
        if isinstance(out, Denied | Rejected):
            return out.message
        if isinstance(out, NeedsConfirmation):
            return self._confirm(
                call.id, name, out.invocation_id, out.digest, out.normalized_arguments, out.expires_at, fn
            )
        assert isinstance(out, Replayed)
        if out.state == "AUTHORIZED":  # parked: the node re-runs after (or before) a resume
            parked = self.session.parked(out.invocation_id, out.tool_call_id)
            if parked is None:  # ended meanwhile (expired, cancelled): its state says what
                return out.message
            return self._confirm(
                call.id,
                name,
                parked.invocation_id,
                parked.digest,
                parked.normalized_arguments,
                parked.expires_at,
                fn,
            )
        if out.state == "PREPARED":  # confirmed (or allowed) but never begun: run it now
            return self._run(out.invocation_id, fn)
        return out.message  # ran already (its original tool message) or ended otherwise

    def _confirm(
        self,
        call_id: str,
        name: str,
        invocation_id: str,
        digest: str,
        arguments: bytes,
        expires_at: str,
        fn: ToolFn,
    ) -> str:
        try:
            shown = json.loads(arguments)
        except ValueError:
            raise MalformedAnswer("normalized arguments that are not JSON") from None
        answer = interrupt(
            {
                "kind": "callgate_confirmation",
                "tool": name,
                "invocation_id": invocation_id,
                "arguments": shown,
                "digest": digest,
                "expires_at": expires_at,
            }
        )
        decision = parse_resume(answer, self.confirmer)
        if decision.verdict is Verdict.APPROVE and decision.digest in ("", digest):
            confirmer = self.client.confirmer()
            try:
                confirmer.confirm(invocation_id, digest, confirmed_by=decision.by)
            except CallRefused as err:  # expired, already decided, digest mismatch: nothing runs
                return not_confirmed_message(call_id, err.code)
            return self._run(invocation_id, fn)
        self.session.cancel(invocation_id, reason=decision.reason or "rejected by the user")
        return cancelled_message(call_id)


__all__ = ["GatedToolNode", "Resume", "ToolFn", "Verdict", "cancelled_message", "parse_resume"]
