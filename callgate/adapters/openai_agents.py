"""callgate as the gate of the OpenAI Agents SDK's function tools (``pip install 'callgate[openai-agents]'``).

Importable only when ``openai-agents`` is installed; nothing in callgate's core imports it.

:class:`CallgateTools` turns the session's ToolSpecs (``Session.tools(dialect=openai)``: legal
names, strict schemas, descriptions) into SDK ``FunctionTool`` objects, one per tool the runtime
can execute (``functions`` is keyed by callgate's tool name, e.g. ``weather.get``). For each call
the model makes:

- the SDK asks ``needs_approval`` first: the call is proposed to callgate there and its outcome
  kept by call id; only NEEDS_CONFIRMATION answers True, which makes the SDK interrupt the run
  (``result.interruptions``);
- ``on_invoke_tool``: ALLOWED runs through the executor path (:meth:`Client.run`: BeginAttempt ->
  the user's function -> ReportOutcome -> EncodeResult) and the model gets the encoded result;
  DENIED, REJECTED and REPLAYED are returned to the model as their message, nothing runs;
- a confirmation: :meth:`CallgateTools.approve` confirms the exact digest through the
  Confirmations service, then approves the SDK item; after ``Runner.run(agent, state)`` the tool
  waits (``WatchInvocation``) for PREPARED with that digest and runs once.
  :meth:`CallgateTools.reject` cancels the parked invocation and rejects the SDK item with the
  model-facing message;
- a client error (sidecar down, deadline, malformed answer, refusal) raises
  :class:`CallgateToolError` (an ``AgentsException``, so the SDK lets it end the run unchanged)
  carrying the stable ``code``: never an execution, never text that could read as success.

Limits: the SDK hands ``needs_approval`` the parsed arguments, not the model's bytes, so the
proposal carries them re-serialized (duplicate keys are already collapsed by the SDK's parser);
arguments the SDK cannot parse skip ``needs_approval`` (the SDK then asks for approval itself) and
are proposed as raw bytes from ``on_invoke_tool``, where callgate rejects them. Outcomes are kept
in this object: resume a run with the same :class:`CallgateTools` instance.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState
from agents.exceptions import AgentsException
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext as AgentsToolContext

from callgate.client import (
    Allowed,
    CallgateClientError,
    Client,
    Committed,
    NeedsConfirmation,
    Outcome,
    Session,
    ToolCall,
    ToolContext,
    tool_message,
)

ToolFunction = Callable[[ToolContext], Committed]
"""The user's function for one tool: gets the attempt's context, returns :class:`Committed`."""


class CallgateToolError(AgentsException):
    """callgate could not decide or run a tool call (sidecar down, deadline, malformed answer,
    refused call); ``code`` is the client error's stable code, ``error`` the error itself.
    Nothing was executed for the call."""

    def __init__(self, error: CallgateClientError) -> None:
        super().__init__(f"callgate: {error}")
        self.error = error
        self.code = error.code


class CallgateTools:
    """The SDK function tools for one callgate session and model call.

    ``client`` needs the agent and executor listeners (and the confirmer listener for
    :meth:`approve`); ``functions`` maps callgate tool names to the functions that run them;
    ``confirm_timeout`` bounds the wait for PREPARED after an approval (seconds)."""

    def __init__(
        self,
        client: Client,
        session: Session,
        functions: Mapping[str, ToolFunction],
        *,
        executor_id: str,
        model_call_id: str,
        confirm_timeout: float = 30.0,
    ) -> None:
        self.client = client
        self.session = session
        self.executor_id = executor_id
        self.confirm_timeout = confirm_timeout
        self._outcomes: dict[str, Outcome | CallgateClientError] = {}
        listed = session.tools(model_call_id, "openai")
        self.tools: list[FunctionTool] = []
        shown: set[str] = set()
        for entry in listed:
            fn_spec = entry["function"]
            legal = str(fn_spec["name"])
            resolved = session.names.resolve(legal)
            if resolved is None or resolved[0] not in functions:
                continue  # a tool this runtime cannot run is not offered to the model
            shown.add(resolved[0])
            self.tools.append(
                FunctionTool(
                    name=legal,
                    description=str(fn_spec.get("description", "")),
                    params_json_schema=dict(fn_spec["parameters"]),
                    on_invoke_tool=self._invoker(legal, functions[resolved[0]]),
                    strict_json_schema=True,
                    needs_approval=self._needs_approval(legal),
                )
            )
        missing = sorted(set(functions) - shown)
        if missing:
            raise CallgateClientError(
                f"functions for tools the session does not list: {', '.join(missing)}", code="unknown_tool"
            )

    # ---------------------------------------------------------------- SDK hooks
    def _propose(self, call_id: str, legal: str, arguments: bytes | str) -> Outcome | CallgateClientError:
        try:
            return self.session.propose(ToolCall(call_id, legal, arguments))
        except CallgateClientError as err:
            return err

    def _needs_approval(self, legal: str) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Any]:
        async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            raw = json.dumps(params, ensure_ascii=False)
            out = await asyncio.to_thread(self._propose, call_id, legal, raw)
            self._outcomes[call_id] = out  # an error too: on_invoke_tool raises it, nothing runs
            return isinstance(out, NeedsConfirmation)

        return needs_approval

    def _invoker(self, legal: str, fn: ToolFunction) -> Callable[[AgentsToolContext[Any], str], Any]:
        async def on_invoke_tool(ctx: AgentsToolContext[Any], input_json: str) -> str:
            call_id = ctx.tool_call_id
            out = self._outcomes.pop(call_id, None)
            if out is None:  # the SDK could not parse the arguments: propose the bytes as they are
                out = await asyncio.to_thread(self._propose, call_id, legal, input_json)
            if isinstance(out, CallgateClientError):
                raise CallgateToolError(out)
            try:
                if isinstance(out, NeedsConfirmation):  # reached only after the SDK's approval
                    ok = await asyncio.to_thread(
                        self.session.wait_confirmed, out, timeout=self.confirm_timeout
                    )
                    if not ok:
                        return out.message
                    out = Allowed(out.invocation_id, out.digest, out.tool_call_id, out.normalized_arguments)
                if isinstance(out, Allowed):
                    result = await asyncio.to_thread(
                        self.client.run, out.invocation_id, fn, executor_id=self.executor_id
                    )
                    return result.message
            except CallgateClientError as err:
                raise CallgateToolError(err) from None
            return out.message

        return on_invoke_tool

    # ---------------------------------------------------------------- the approval flow
    def pending(self, item: ToolApprovalItem) -> NeedsConfirmation:
        """The parked invocation behind an interruption of one of these tools."""
        out = self._outcomes.get(item.call_id or "")
        if not isinstance(out, NeedsConfirmation):
            raise CallgateClientError("no callgate confirmation for this approval item", code="not_pending")
        return out

    def approve(self, state: RunState[Any], item: ToolApprovalItem, *, confirmed_by: str) -> None:
        """The user approved: confirm this exact digest in callgate (Confirmations), then approve
        the SDK item; resume with ``Runner.run(agent, state)``. ``confirmed_by`` is the user's
        identity from the runtime's own auth."""
        out = self.pending(item)
        try:
            self.client.confirmer().confirm(out.invocation_id, out.digest, confirmed_by=confirmed_by)
        except CallgateClientError as err:
            raise CallgateToolError(err) from None
        state.approve(item)

    def reject(
        self, state: RunState[Any], item: ToolApprovalItem, *, reason: str = "rejected by the user"
    ) -> None:
        """The user rejected: cancel the parked invocation in callgate, then reject the SDK item;
        the model is told the call was rejected and did not run."""
        out = self.pending(item)
        try:
            self.session.cancel(out.invocation_id, reason=reason)
        except CallgateClientError as err:
            raise CallgateToolError(err) from None
        self._outcomes.pop(item.call_id or "", None)
        message = tool_message(
            item.call_id or "",
            {"status": "rejected_by_user", "message": "The user rejected this call; it was not executed."},
        )
        state.reject(item, rejection_message=message)


__all__ = ["CallgateToolError", "CallgateTools", "ToolFunction"]
