"""callgate as the gate of the OpenAI Agents SDK's function tools (``pip install 'callgate[openai-agents]'``).

Importable only when ``openai-agents`` is installed; nothing in callgate's core imports it.

:func:`gate` wraps the application's own ``@function_tool`` functions (typed parameters,
docstrings, bodies unchanged) into SDK ``FunctionTool`` objects that go through callgate. The model
sees each tool under its legal callgate name with the ToolSpec's strict schema (the only schema
callgate accepts) and the function's docstring. Per call:

- the SDK asks ``needs_approval`` first: the call is proposed there (the idempotency key is
  derived from session, model call id, tool call id and tool, so a repeat anywhere replays);
  only NEEDS_CONFIRMATION interrupts the run (``result.interruptions``), and an allowed call
  the wrapped tool's own ``needs_approval`` asks about (kept on top: never fewer approvals). The SDK asks a person
  by itself, without ``needs_approval``, for arguments it cannot parse: each tool's callgate
  input guardrail, run before that (``run_config()``: the SDK's
  ``pre_approval_tool_input_guardrails``), proposes the model's bytes and answers a refusal
  (invalid JSON, schema, repeated keys, deny) to the model, so no one approves a call callgate
  refuses; :meth:`Gate.confirmation` is what the approver is shown (callgate's summary);
- ``on_invoke_tool`` proposes again (an idempotent replay when it already was: this is what lets a
  run state restored in another process resume) and: ALLOWED runs the function through the
  executor path (BeginAttempt -> the function with the canonical arguments and its injected
  values -> ReportOutcome -> EncodeResult); DENIED, REJECTED and REPLAYED answer without running;
- a confirmation is the SDK's own ``state.approve(item)`` / ``state.reject(item)``:

  * with a ``confirmer`` (the application holds the confirmer listener), the SDK's approval
    confirms the exact digest through callgate's Confirmations service, ``confirmed_by`` =
    ``approver``; the SDK's rejection denies it there (``denied_by`` = ``approver``);
  * without one (confirmation lives only in the console), the SDK's approval never confirms by
    itself: the tool waits (``WatchInvocation``) for the console's decision, for as long as the
    invocation waits (its ``expires_at``): confirmed -> it runs once; denied or expired -> the
    model is told ``not_confirmed`` and nothing ran. The SDK's rejection cancels the parked
    invocation (it leaves the console);

- the run being cancelled while the tool waits cancels the parked invocation at once;
- what the model gets is the tool message's ``content`` (docs/RESULT-ENCODING.md: ``status``,
  ``data`` or ``error``, the untrusted-data markers); callgate's envelope (invocation id, state,
  tool call id) goes where the SDK keeps data the model does not see: the output item's
  ``custom_data["callgate"]``;
- a client error (sidecar down, deadline, malformed answer, refusal) raises
  :class:`CallgateToolError` (an ``AgentsException``: the SDK ends the run with it) carrying the
  stable ``code``: never an execution, never text that could read as success.

Limits: the SDK hands ``needs_approval`` the parsed arguments, not the model's bytes, so that
proposal carries them re-serialized (``on_invoke_tool`` proposes the model's bytes; both give the
same digest after normalization; bytes that repeat a key are proposed again exactly and refused).
A tool name the agent does not have never reaches a tool: run with ``gate.run_config()`` so the
SDK answers the model (:meth:`Gate.tool_error_formatter`) instead of ending the run. A rejection is seen when the SDK next lists the tools
(``is_enabled``), which it does as the resumed run starts; in a process that did not park the call
itself the gate finds it through the agent listener's ``ListParked`` (docs/CLIENTS.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents import (
    AgentHooks,
    FunctionTool,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    RunState,
    ToolApprovalItem,
    ToolErrorFormatterArgs,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)
from agents.exceptions import AgentsException
from agents.run_config import ToolExecutionConfig
from agents.tool import FunctionToolCustomDataContext
from agents.tool_context import ToolContext as AgentsToolContext

from callgate.adapters.hitl import Ask, describe, shown_arguments
from callgate.adapters.openai_agents_binding import (
    Attempt,
    Binding,
    ExternalId,
    Secret,
    bind,
    with_descriptions,
)
from callgate.adapters.parts import answer_parts, replayed_parts, watched
from callgate.client import (
    Allowed,
    CallgateClientError,
    Client,
    Confirmer,
    DeadlineExceeded,
    Denied,
    NeedsConfirmation,
    Outcome,
    Rejected,
    Replayed,
    Session,
    ToolCall,
    tool_message,
)
from callgate.client._wire import parked
from callgate.client.outcomes import not_listed
from callgate.client.tools import repeats_a_key
from callgate.gen.v1 import callgate_pb2 as pb

FED_MAX = 1024
"""At most this many fed invocations per model call (the sidecar's limit), the newest."""

DEFAULT_MODEL_CALL_ID = "openai-agents"
"""The model call id the gate lists its tools under when none is given (one per session: a run
resumed in another process must use the same one, so the idempotency keys match)."""

WATCH_SLICE_S = 60.0
"""One ``WatchInvocation`` stream's deadline while waiting for the console; the wait re-opens it
until the invocation is decided (confirmed, denied, expired or cancelled)."""

Approver = str | Callable[[RunContextWrapper[Any]], str]
"""Who decides in the SDK: a fixed identity, or one read from the run context (the
application's own auth), recorded as ``confirmed_by`` / ``denied_by``."""


class CallgateToolError(AgentsException):
    """callgate could not decide or run a tool call (sidecar down, deadline, malformed answer,
    refused call); ``code`` is the client error's stable code, ``error`` the error itself.
    Nothing was executed for the call."""

    def __init__(self, error: CallgateClientError) -> None:
        super().__init__(f"callgate: {error}")
        self.error = error
        self.code = error.code


@dataclass(frozen=True)
class _Parked:
    legal: str
    pending: NeedsConfirmation


@dataclass(frozen=True)
class _Answer:
    """What one call came to: the model-visible output (text, or the SDK's structured parts)
    and callgate's envelope."""

    output: str | list[dict[str, Any]]
    envelope: Mapping[str, str]


def _content(message: str) -> str:
    """The ``content`` of a tool message in the sidecar's shape, as compact JSON text."""
    try:
        doc = json.loads(message)
    except ValueError:
        return message
    if isinstance(doc, dict) and "content" in doc:
        return json.dumps(doc["content"], ensure_ascii=False, separators=(",", ":"))
    return message


APP_ASKS = "the application asks a person first (the tool's own needs_approval)"
"""The reason an allowed invocation is cancelled when the wrapped tool's own ``needs_approval``
asks for an approval: nothing is held PREPARED while a person decides; the approved call is
proposed anew (policy decides again) and runs."""

NOT_ASKED = "confirmation_not_asked"
"""The code of a call the SDK approved without an interruption (a standing approval): not run."""


def _answer(message: str, invocation_id: str, status: str) -> _Answer:
    return _Answer(_content(message), {"invocation_id": invocation_id, "status": status})


class Gate:
    """The gated tools of one callgate session (``.tools``).

    ``tools``: ``{"weather.get": get_weather, ...}`` (callgate tool name -> the application's
    ``@function_tool``), or a list whose names are callgate names. ``client`` needs the agent and
    executor listeners; ``confirmer`` (``client.confirmer()``) only where this process may
    confirm, with ``approver`` naming who decides; ``external_ids``: for each tool that writes,
    the result's field (or a function of the result) holding the external system's id of the
    side effect; ``model_call_id``: the same in every process that resumes the session's runs."""

    def __init__(
        self,
        tools: Mapping[str, FunctionTool] | Sequence[FunctionTool],
        *,
        client: Client,
        session: Session,
        executor_id: str,
        confirmer: Confirmer | None = None,
        approver: Approver | None = None,
        model_call_id: str = DEFAULT_MODEL_CALL_ID,
        external_ids: Mapping[str, ExternalId] | None = None,
    ) -> None:
        if confirmer is not None and approver is None:
            raise CallgateClientError("a confirmer needs an approver (who decides)", code="not_configured")
        self.client = client
        self.session = session
        self.executor_id = executor_id
        self.confirmer = confirmer
        self.approver = approver
        self._parked: dict[str, _Parked] = {}
        self._app_asked: dict[str, str] = {}
        """Tool call id -> the legal name of a call callgate allows that the wrapped tool's own
        ``needs_approval`` asks a person about (an application-level approval)."""
        self._unshown: set[str] = set()
        """Calls parked by a new proposal of the guardrail that no ``needs_approval`` (no
        interruption) has shown to a person yet: the SDK running one is a standing approval."""
        self._answers: dict[str, _Answer] = {}
        self._outcomes: dict[str, Outcome | CallgateClientError] = {}
        self._waiting: dict[str, NeedsConfirmation] = {}
        self.model_call_id = model_call_id
        self._handed: dict[str, str] = {}
        """Tool call id -> invocation id of a tool output the model gets (a stored tool message)."""
        self._looked: set[str] = set()
        self._runs: weakref.WeakKeyDictionary[RunContextWrapper[Any], set[str]] = weakref.WeakKeyDictionary()
        """The calls each run (its context) parked here: what :meth:`abandon` ends for a run
        that raised."""
        self._adoptions: weakref.WeakKeyDictionary[RunContextWrapper[Any], asyncio.Future[None]] = (
            weakref.WeakKeyDictionary()
        )
        listed = {str(t["function"]["name"]): t["function"] for t in session.tools(model_call_id, "openai")}
        self.tools: list[FunctionTool] = []
        for name, user_tool in _by_tool_name(tools, session).items():
            legal = session.names.legal(*name)
            spec = listed[legal]
            listed_tool = session.listed(*name)
            binding = bind(
                name[0],
                user_tool,
                spec["parameters"],
                writes=listed_tool is None or listed_tool.side_effect_class != "read_only",
                external_id=(external_ids or {}).get(name[0]),
            )
            self.tools.append(self._tool(legal, spec, binding, user_tool))

    # ---------------------------------------------------------------- building the SDK tool
    def _tool(
        self, legal: str, spec: Mapping[str, Any], binding: Binding, user: FunctionTool
    ) -> FunctionTool:
        return FunctionTool(
            name=legal,
            description=binding.description or str(spec.get("description", "")),
            params_json_schema=with_descriptions(dict(spec["parameters"]), binding),
            on_invoke_tool=self._invoker(legal, binding),
            strict_json_schema=True,
            is_enabled=self._enabled(legal, user.is_enabled),
            needs_approval=self._needs_approval(legal, user.needs_approval),
            custom_data_extractor=self._custom_data_of(user.custom_data_extractor),
            defer_loading=user.defer_loading,
            tool_input_guardrails=[
                ToolInputGuardrail(self._guard(legal), name="callgate"),
                *(self._theirs(g) for g in user.tool_input_guardrails or ()),
            ],
            tool_output_guardrails=list(user.tool_output_guardrails or ()) or None,
        )

    def _theirs(self, guardrail: ToolInputGuardrail[Any]) -> ToolInputGuardrail[Any]:
        """The wrapped tool's own input guardrail, kept (after callgate's, under its own name):
        when it refuses the call (``reject_content`` or a tripwire), the invocation callgate
        parked or allowed for it is cancelled at once (it leaves the console; nothing runs it)."""

        async def theirs(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            out = await guardrail.run(data)
            if out.behavior["type"] != "allow":
                call_id = data.context.tool_call_id
                self._app_asked.pop(call_id, None)
                self._unshown.discard(call_id)
                held = self._parked.pop(call_id, None)
                decided = self._outcomes.pop(call_id, None)
                ended = held.pending if held is not None else decided
                if isinstance(ended, Allowed | NeedsConfirmation):
                    await asyncio.to_thread(
                        self._cancel,
                        ended.invocation_id,
                        f"refused by the tool's guardrail {guardrail.get_name()}",
                    )
            return out

        return ToolInputGuardrail(theirs, name=guardrail.get_name())

    def _guard(self, legal: str) -> Callable[[ToolInputGuardrailData], Any]:
        """The tool input guardrail: with ``run_config()`` (the SDK's
        ``pre_approval_tool_input_guardrails``) it runs before the SDK would ask a person, so a
        call callgate refuses (arguments the SDK cannot parse and never hands ``needs_approval``,
        arguments that repeat a key, a schema violation, a policy deny) goes straight back to the
        model as callgate's answer and no one is asked to approve it. The model's exact bytes are
        proposed (or ``needs_approval``'s outcome is kept); ``on_invoke_tool`` uses the outcome."""

        async def callgate(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            call_id, raw = data.context.tool_call_id, data.context.tool_arguments
            if call_id in self._app_asked and not repeats_a_key(raw):
                return ToolGuardrailFunctionOutput.allow()  # allowed; proposed anew once approved
            out = self._outcomes.get(call_id)
            if repeats_a_key(raw) and not isinstance(out, Rejected):
                out = await asyncio.to_thread(self._exact, out, call_id, legal, raw)
            elif out is None:
                proposed = await asyncio.to_thread(self._proposed, call_id, legal, raw)
                out, fresh = proposed
                if isinstance(out, NeedsConfirmation):
                    self._parked[call_id] = _Parked(legal, out)
                if fresh:  # shown to no one yet: only needs_approval's interruption shows it
                    self._unshown.add(call_id)
            self._outcomes[call_id] = out
            if isinstance(out, CallgateClientError):
                raise CallgateToolError(out)
            if isinstance(out, Denied | Rejected):  # refused: the model is told, no one is asked
                self._outcomes.pop(call_id, None)
                self._parked.pop(call_id, None)
                return ToolGuardrailFunctionOutput.reject_content(_content(out.message))
            return ToolGuardrailFunctionOutput.allow()

        return callgate

    def _propose(self, call_id: str, legal: str, arguments: bytes | str) -> Outcome | CallgateClientError:
        return self._proposed(call_id, legal, arguments)[0]

    def _proposed(
        self, call_id: str, legal: str, arguments: bytes | str
    ) -> tuple[Outcome | CallgateClientError, bool]:
        """The outcome, and whether it parked a **new** invocation (not the replay of one parked
        before): no interruption can have shown that one to a person yet."""
        try:
            out = self.session.propose(ToolCall(call_id, legal, arguments))
        except CallgateClientError as err:
            return err, False
        if isinstance(out, Replayed) and out.state == "AUTHORIZED":  # still parked
            return self.session.parked(out.invocation_id, call_id) or out, False
        return out, isinstance(out, NeedsConfirmation)

    def _exact(
        self, earlier: Outcome | CallgateClientError | None, call_id: str, legal: str, input_json: str
    ) -> Outcome | CallgateClientError:
        """The model's arguments repeat a key: ``needs_approval`` proposed the SDK's parse of
        them (one of the duplicates, silently), here or in the process that parked the call
        (``earlier`` None: found by the tool call id). That proposal is cancelled (if it could
        still run) and the exact bytes are proposed under a proposal id of their own, so the
        sidecar's strict parse refuses them (``duplicate_key``) and the model is told so."""
        if isinstance(earlier, Allowed | NeedsConfirmation):
            self._cancel(earlier.invocation_id, "the model's arguments repeat a key")
        elif earlier is None:
            try:
                found = self.session.find(call_id, legal, model_call_id=self.model_call_id)
            except CallgateClientError as err:
                return err
            if found is not None and found.state in (pb.AUTHORIZED, pb.PREPARED):
                self._cancel(found.invocation_id, "the model's arguments repeat a key")
        out = self._propose(f"{call_id}~exact", legal, input_json)
        if isinstance(out, CallgateClientError | Allowed | NeedsConfirmation | Replayed):  # never ran
            return CallgateClientError(
                "arguments that repeat a key were not refused", code="malformed_answer"
            )
        return dataclasses.replace(out, tool_call_id=call_id)

    def _needs_approval(
        self, legal: str, theirs: bool | Callable[..., Any]
    ) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Any]:
        """callgate's decision, and the wrapped tool's own ``needs_approval`` (a bool, or a sync
        or async callable of ``(ctx, params, call_id)``, as the SDK takes it) on top: a call
        callgate allows is still asked about when the application's rule says so (never fewer
        approvals than the application wrote). Such an allowed invocation is cancelled at once
        (nothing waits PREPARED while a person decides, :data:`APP_ASKS`); approved, the call is
        proposed anew in ``on_invoke_tool`` and runs as policy then decides. A call callgate
        refuses is never asked; one it parks is asked once (callgate's confirmation)."""

        async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            raw = json.dumps(params, ensure_ascii=False)
            out = await asyncio.to_thread(self._propose, call_id, legal, raw)
            self._outcomes[call_id] = out  # an error too: on_invoke_tool raises it, nothing runs
            if isinstance(out, NeedsConfirmation):
                self._parked[call_id] = _Parked(legal, out)
                self._runs.setdefault(ctx, set()).add(call_id)
                self._unshown.discard(call_id)  # the SDK interrupts the run with it
                return True
            if isinstance(out, Allowed) and await _asks(theirs, ctx, params, call_id):
                self._outcomes.pop(call_id, None)
                self._app_asked[call_id] = legal
                await asyncio.to_thread(self._cancel, out.invocation_id, APP_ASKS)
                return True
            return False

        return needs_approval

    def _enabled(self, legal: str, user: Any) -> Callable[[RunContextWrapper[Any], Any], Any]:
        async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            await self._settle_rejections(ctx, legal, _namespaces(agent, legal))
            if callable(user):
                value = user(ctx, agent)
                return bool(await value if inspect.isawaitable(value) else value)
            return bool(user)

        return is_enabled

    def _custom_data_of(
        self, theirs: Callable[[FunctionToolCustomDataContext], Any] | None
    ) -> Callable[[FunctionToolCustomDataContext], Any]:
        """The output item's SDK-only custom data: the wrapped tool's own
        ``custom_data_extractor`` (kept: called with the same context, the model-visible output
        callgate answered), and callgate's envelope under ``"callgate"`` (callgate's wins that
        key). An error in theirs ends the run as the SDK ends it for an unwrapped tool."""

        async def custom_data(data: FunctionToolCustomDataContext) -> Mapping[str, Any] | None:
            ours = self._custom_data(data)
            mine: Any = None
            if theirs is not None:
                mine = theirs(data)
                mine = await mine if inspect.isawaitable(mine) else mine
            if mine is None:
                return ours
            return {**mine, **(ours or {})}

        return custom_data

    def _custom_data(self, data: FunctionToolCustomDataContext) -> Mapping[str, Any] | None:
        answer = self._answers.pop(data.tool_context.tool_call_id, None)
        return {"callgate": dict(answer.envelope)} if answer is not None else None

    # ---------------------------------------------------------------- one call
    def _invoker(self, legal: str, binding: Binding) -> Callable[[AgentsToolContext[Any], str], Any]:
        async def on_invoke_tool(ctx: AgentsToolContext[Any], input_json: str) -> str | list[dict[str, Any]]:
            call_id = ctx.tool_call_id
            out = self._outcomes.pop(call_id, None)
            if repeats_a_key(input_json) and not isinstance(out, Rejected):  # parsed last-key-wins
                out = await asyncio.to_thread(self._exact, out, call_id, legal, input_json)
            fresh = False
            if out is None:  # resumed here (or unparsable for needs_approval): propose the bytes
                proposed = await asyncio.to_thread(self._proposed, call_id, legal, input_json)
                out, fresh = proposed
            unasked = fresh or call_id in self._unshown
            self._unshown.discard(call_id)
            self._app_asked.pop(call_id, None)
            self._parked.pop(call_id, None)
            if isinstance(out, CallgateClientError):
                raise CallgateToolError(out)
            if unasked and isinstance(out, NeedsConfirmation) and self.confirmer is not None:
                # approved by the SDK although no interruption showed it (a standing approval)
                answer = await asyncio.to_thread(self._not_asked, out)
                self._answers[call_id] = answer
                return answer.output
            try:
                answer = await self._decide(ctx, out, binding)
            except CallgateClientError as err:
                raise CallgateToolError(err) from None
            self._answers[call_id] = answer
            if answer.envelope.get("status") == "OBSERVED":  # its stored tool message: fed next
                self._handed[call_id] = answer.envelope["invocation_id"]
            return answer.output

        return on_invoke_tool

    async def _decide(self, ctx: AgentsToolContext[Any], out: Outcome, binding: Binding) -> _Answer:
        if isinstance(out, NeedsConfirmation):  # reached only after the SDK's approval
            decided = await self._approved(ctx, out)
            if decided is not None:
                return decided
            out = Allowed(out.invocation_id, out.digest, out.tool_call_id, out.normalized_arguments)
        elif isinstance(out, Replayed) and out.state == "PREPARED":  # confirmed, not yet run
            out = Allowed(out.invocation_id, "", out.tool_call_id, b"")
        if isinstance(out, Allowed):
            loop = asyncio.get_running_loop()
            parts: list[dict[str, Any]] = []
            seen: list[str | bytes] = []  # redeemed values and credentials: never in a part
            result = await asyncio.to_thread(
                self.client.run,
                out.invocation_id,
                lambda c: binding.call(watched(c, seen), ctx, loop, parts),
                executor_id=self.executor_id,
            )
            answer = _answer(result.message, out.invocation_id, result.state)
            shown = answer_parts(result.message, parts, seen, result.part_verdicts)
            return answer if shown is None else _Answer(shown, answer.envelope)
        status = out.state if isinstance(out, Replayed) else type(out).__name__.lower()
        answer = _answer(out.message, out.invocation_id, status)
        replayed = replayed_parts(out.message) if isinstance(out, Replayed) else None
        return answer if replayed is None else _Answer(replayed, answer.envelope)

    async def _approved(self, ctx: AgentsToolContext[Any], out: NeedsConfirmation) -> _Answer | None:
        """The SDK approved: confirm through the confirmer, or wait for the console. None when
        the invocation is now PREPARED with this digest; else the model's answer."""
        if self.confirmer is not None:
            by = self._who(ctx)
            try:
                await asyncio.to_thread(
                    self.confirmer.confirm, out.invocation_id, out.digest, confirmed_by=by
                )
                return None
            except CallgateClientError as err:  # e.g. decided meanwhile: trust only its state
                if await asyncio.to_thread(self._prepared, out):
                    return None
                return self._not_confirmed(out, err.code)
        self._waiting[out.tool_call_id] = out
        try:
            ok = await asyncio.to_thread(self._wait_for_console, out)
        except asyncio.CancelledError:  # the run was cancelled: the call leaves the console now
            self._cancel(out.invocation_id, "the agent run was cancelled")
            raise
        finally:
            self._waiting.pop(out.tool_call_id, None)
        if ok:
            return None
        return await asyncio.to_thread(self._ended, out)

    def _ended(self, out: NeedsConfirmation) -> _Answer:
        """The wait ended without PREPARED: run elsewhere (a second resume of the same state
        took it: its result), else denied, expired or cancelled."""
        if self.session.invocation(out.invocation_id).state == pb.OBSERVED:
            return _answer(self.session.result(out.invocation_id), out.invocation_id, "OBSERVED")
        return self._not_confirmed(out, "not_confirmed")

    def _prepared(self, out: NeedsConfirmation) -> bool:
        inv = self.session.invocation(out.invocation_id)
        return inv.digest == out.digest and inv.state == pb.PREPARED

    def _wait_for_console(self, out: NeedsConfirmation) -> bool:
        while True:
            try:
                return self.session.wait_confirmed(out, timeout=WATCH_SLICE_S, cancel_on_close=True)
            except DeadlineExceeded:
                continue  # still parked: watch again (the sidecar expires it at expires_at)

    def _not_asked(self, out: Outcome) -> _Answer:
        """A call the SDK ran as approved although it never interrupted the run for it (a
        standing approval: ``state.approve(item, always_approve=True)`` approves the tool's later
        calls without calling ``needs_approval``): no person saw this call's arguments or digest,
        so the gate never confirms it. The new parked invocation is cancelled (it leaves the
        console) and the model is told it did not run (``confirmation_not_asked``)."""
        assert isinstance(out, NeedsConfirmation)
        self._cancel(out.invocation_id, "approved without asking a person (a standing approval)")
        message = tool_message(
            out.tool_call_id,
            {
                "status": "not_confirmed",
                "code": NOT_ASKED,
                "message": "This call needs a person's confirmation of its exact arguments and none "
                "was asked (a standing approval of the tool does not confirm a callgate call); it "
                "did not run.",
            },
        )
        return _answer(message, out.invocation_id, "not_confirmed")

    def _not_confirmed(self, out: NeedsConfirmation, code: str) -> _Answer:
        message = tool_message(
            out.tool_call_id,
            {
                "status": "not_confirmed",
                "code": code,
                "message": "The call was not confirmed (denied, expired or cancelled); it did not run.",
            },
        )
        return _answer(message, out.invocation_id, "not_confirmed")

    # ---------------------------------------------------------------- names the model was not shown
    def tool_error_formatter(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        """``RunConfig(tool_error_formatter=...)``: a call of a tool the agent does not have (a
        hallucinated or stale name; the SDK's ``tool_not_found``) is answered in callgate's
        shape, as the client answers it (``status`` ``rejected``, ``code``
        ``unknown_tool_version``, the names the model may use); other kinds keep the SDK's
        message (None)."""
        if args.kind != "tool_not_found":
            return None
        out = not_listed(args.call_id, args.tool_name, [t.name for t in self.tools])
        return _content(out.message)

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) where a tool name the model was not shown is
        answered to the model (``tool_not_found_behavior="return_error_to_model"`` with
        :meth:`tool_error_formatter`; ``base``'s own formatter still answers the other kinds)
        instead of ending the run with the SDK's ``ModelBehaviorError``."""
        base = base or RunConfig()
        theirs = base.tool_error_formatter

        async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
            ours = self.tool_error_formatter(args)
            if ours is not None or theirs is None:
                return ours
            value = theirs(args)
            return await value if inspect.isawaitable(value) else value

        execution = base.tool_execution or ToolExecutionConfig()
        return dataclasses.replace(
            base,
            tool_not_found_behavior="return_error_to_model",
            tool_error_formatter=formatter,
            tool_execution=dataclasses.replace(execution, pre_approval_tool_input_guardrails=True),
        )

    def confirmation(self, item: ToolApprovalItem) -> str | None:
        """What the person approving ``item`` (one of ``state.get_interruptions()``) is shown:
        callgate's confirmation summary (the tool, the canonical normalized arguments the digest
        covers with hidden characters as marks and each secret masked, the digest, the expiry,
        who confirms), read from the sidecar's parked invocation (found by tool call id: in any
        process; its ``masked_arguments``), for a call of any of the session's gated tools (the
        gate of another agent of the run, a handoff's or an ``Agent.as_tool``'s, too). Show
        this, not ``item.arguments`` (the model's raw text, the SDK's, secrets in clear). None
        when callgate holds no confirmation for it now (a call it refused, which with
        ``run_config()`` never interrupts, or one that expired or was decided): reject it; and
        for an item of a tool callgate does not gate (:meth:`gates` is False: the application's
        own approval, e.g. ``as_tool(needs_approval=True)``), decided as without callgate."""
        call_id, pending, inv = item.call_id or "", None, None
        if call_id and str(item.tool_name) in self.session.names.by_legal:  # the sidecar's state now
            inv = self.session.find(call_id, str(item.tool_name), model_call_id=self.model_call_id)
            pending = parked(inv, call_id) if inv is not None else None
        tool = self.session.names.by_legal.get(str(item.tool_name))
        if pending is None:
            if inv is not None and self._app_approval(inv, call_id):
                return (
                    f"callgate: {tool[0] if tool is not None else item.tool_name} is allowed by policy "
                    "and needs no confirmation of callgate's; your application's own rule (the "
                    "tool's needs_approval) asks for this approval. Approved, the call is proposed "
                    "again and runs if policy still allows it. Arguments are not shown here: "
                    "callgate masks the secrets only of the arguments it asks about."
                )
            return None
        ask = Ask(
            name=str(item.tool_name),
            arguments=shown_arguments(pending.masked_arguments, pending.normalized_arguments),
            tool=tool[0] if tool is not None else str(item.tool_name),
            tool_call_id=call_id,
            invocation_id=pending.invocation_id,
            digest=pending.digest,
            expires_at=pending.expires_at,
        )
        return describe(ask, "resume" if self.confirmer is not None else "console")

    def gates(self, item: ToolApprovalItem) -> bool:
        """Whether ``item`` is a call of a tool callgate gates in this session (this gate's or
        another agent's gate over the same session): :meth:`confirmation` answers for it."""
        return bool(item.call_id) and str(item.tool_name) in self.session.names.by_legal

    def _app_approval(self, inv: pb.Invocation, call_id: str) -> bool:
        """Whether ``inv`` is a call callgate allowed that the tool's own ``needs_approval`` asks
        about (here, or in the process that asked: its cancellation's reason)."""
        if inv.state != pb.CANCELLED_BEFORE_COMMIT:
            return False
        if call_id in self._app_asked:
            return True
        return any(
            e.kind == "cancelled" and dict(e.data).get("reason") == APP_ASKS
            for e in self.session.events(inv.invocation_id)
        )

    def _who(self, ctx: RunContextWrapper[Any]) -> str:
        approver = self.approver
        return approver(ctx) if callable(approver) else str(approver)

    def _cancel(self, invocation_id: str, reason: str) -> None:
        try:
            self.session.cancel(invocation_id, reason=reason)
        except CallgateClientError:
            pass  # the sidecar expires it at its deadline; nothing can run it meanwhile

    def waiting(self) -> list[NeedsConfirmation]:
        """The calls this gate's runs are waiting on for the console's decision now (approved in
        the SDK, no confirmer here): invocation id, digest, ``expires_at``; for a status line
        (its ``masked_arguments`` for a person, ``normalized_arguments`` are the exact bytes)."""
        return list(self._waiting.values())

    # ---------------------------------------------------------------- fed tool messages
    def hooks(self, theirs: AgentHooks[Any] | None = None) -> AgentHooks[Any]:
        """``Agent(..., hooks=gate.hooks())``: before each model call, tell the sidecar which of
        these tools' outputs are in its input (``ListTools`` with ``fed_invocation_ids`` under a
        model call id of its own), so ``callgate explain`` answers question 8 from the runtime's
        record (docs/OPERATE.md). Outputs handed out by another process (a restored run state)
        are found by their tool call id (``FindInvocation``).

        ``theirs``: the application's own ``AgentHooks`` for this agent (the SDK takes one
        ``hooks`` per agent): every one of its callbacks still runs, first; callgate's record
        follows on ``on_llm_start``. ``Runner.run(..., hooks=...)`` (``RunHooks``) is the
        application's alone and is untouched."""
        return _FedHooks(self, theirs)

    def run_hooks(self, theirs: RunHooks[Any] | None = None) -> RunHooks[Any]:
        """``Runner.run(..., hooks=gate.run_hooks())``: :meth:`hooks` for a whole run (every
        agent a handoff reaches, with no ``hooks=`` of callgate's on each): the same record
        before each model call, of every gated tool of the session. ``theirs``: the
        application's own ``RunHooks`` (the SDK takes one per run), every callback still run,
        first. Give callgate's record either here or on the agents, not both (each model call
        would be recorded twice). An agent used as a tool runs with the ``hooks`` its
        ``as_tool(hooks=...)`` names (not the outer run's): give it these too, or its agent
        :meth:`hooks`."""
        return _FedRunHooks(self, theirs)

    def record_model_call(self, input_items: Sequence[Any]) -> tuple[str, ...]:
        """One model call about to be made with ``input_items``: ListTools naming the invocations
        whose tool messages they carry; those invocation ids."""
        names: dict[str, str] = {}
        outputs: list[str] = []
        for item in input_items:
            if not isinstance(item, Mapping) or not isinstance(item.get("call_id"), str):
                continue
            if item.get("type") == "function_call" and isinstance(item.get("name"), str):
                names[item["call_id"]] = item["name"]
            elif item.get("type") == "function_call_output":
                outputs.append(item["call_id"])
        ours = self.session.names.by_legal  # every gated tool of the session (any agent's gate)
        fed: list[str] = []
        for call_id in outputs:
            if call_id not in self._handed and call_id not in self._looked and names.get(call_id) in ours:
                self._looked.add(call_id)
                inv = self.session.find(call_id, names[call_id], model_call_id=self.model_call_id)
                if inv is not None and inv.state == pb.OBSERVED:
                    self._handed[call_id] = inv.invocation_id
            if call_id in self._handed:
                fed.append(self._handed[call_id])
        ids = tuple(dict.fromkeys(fed))[-FED_MAX:]
        # a session object of its own: the gate's keeps the model call id its proposals use
        Session(self.client, self.session.session_id).tools(
            "mc-" + uuid.uuid4().hex, "openai", fed_invocation_ids=ids
        )
        return ids

    # ---------------------------------------------------------------- abandoned confirmations
    async def _settle_rejections(
        self, ctx: RunContextWrapper[Any], legal: str, namespaces: Sequence[str] = ()
    ) -> None:
        """The SDK's ``state.reject(item)`` calls nothing of the tool: it is seen here, when the
        resumed run lists the tools. The parked invocation is denied (confirmer) or cancelled."""
        adoption = self._adoptions.get(ctx)
        if adoption is None:  # once per run (its context), on the run's own loop
            adoption = self._adoptions[ctx] = asyncio.ensure_future(asyncio.to_thread(self._adopt))
        await asyncio.shield(adoption)
        for call_id, held in list(self._parked.items()):
            if held.legal == legal and _rejected(ctx, legal, call_id, namespaces):
                self._parked.pop(call_id, None)
                self._outcomes.pop(call_id, None)
                await asyncio.to_thread(self._refuse, ctx, held.pending)
        for call_id, name in list(self._app_asked.items()):  # cancelled when asked: nothing to end
            if name == legal and _rejected(ctx, legal, call_id, namespaces):
                self._app_asked.pop(call_id, None)

    def _adopt(self) -> None:
        """Once per run: this session's calls parked by another process (a run state restored
        here) through the agent listener's ``ListParked``, so the SDK's rejection of them is seen
        too, with or without a confirmer in this process."""
        legal = {t.name for t in self.tools}
        try:
            found = self.session.list_parked()
        except CallgateClientError:
            return  # best effort: an unseen rejection only leaves the call to expire
        for inv in found:
            name = self.session.names.by_tool.get(f"{inv.tool_name}@{inv.tool_version}", "")
            pending = parked(inv, inv.proposal_id)
            if name in legal and pending is not None and inv.proposal_id not in self._parked:
                self._parked[inv.proposal_id] = _Parked(name, pending)

    def _refuse(self, ctx: RunContextWrapper[Any], pending: NeedsConfirmation) -> None:
        if self.confirmer is not None:
            try:
                self.confirmer.deny(pending.invocation_id, pending.digest, denied_by=self._who(ctx))
                return
            except CallgateClientError:
                pass  # decided meanwhile, or the confirmer is down: cancel from the agent side
        self._cancel(pending.invocation_id, "rejected in the agent run")

    def _calls_of(self, ctx: RunContextWrapper[Any]) -> set[str]:
        """The calls parked by the run of ``ctx`` and by the runs nested in it: an agent used as
        a tool (``Agent.as_tool``) runs with a context of its own that shares the outer run's
        ``usage`` (the SDK's accounting of one run)."""
        ids: set[str] = set()
        for run, calls in list(self._runs.items()):
            if run is ctx or run.usage is ctx.usage:
                ids |= calls
        return ids

    async def abandon(self, state: RunState[Any] | AgentsException) -> None:
        """The application drops an interrupted run: every parked invocation behind
        ``state``'s interruptions (of the session's gated tools: any agent's, nested ones too)
        is cancelled at once (found by the tool call
        id, ``FindInvocation``: nothing is proposed again). Given the exception a run ended with
        (a guardrail's tripwire, ``MaxTurnsExceeded``, a tool error: no state to resume), every
        call that run parked is cancelled, in the agents it used as tools too (its ``run_data``
        names the run; without one, every call this gate holds parked)."""
        if isinstance(state, AgentsException):
            ctx = state.run_data.context_wrapper if state.run_data is not None else None
            ids = self._calls_of(ctx) if ctx is not None else set(self._parked)
            for call_id in ids:
                held = self._parked.pop(call_id, None)
                self._outcomes.pop(call_id, None)
                if held is not None:
                    await asyncio.to_thread(
                        self._cancel, held.pending.invocation_id, "the agent run ended with an error"
                    )
            return
        names = self.session.names.by_legal  # any gate's tools of the session (several agents)
        for item in state.get_interruptions():
            if str(item.tool_name) in names and item.call_id:
                inv = await asyncio.to_thread(
                    self.session.find, item.call_id, str(item.tool_name), model_call_id=self.model_call_id
                )
                if inv is not None and parked(inv) is not None:
                    await asyncio.to_thread(self._cancel, inv.invocation_id, "the agent run was abandoned")
                self._parked.pop(item.call_id, None)
                self._outcomes.pop(item.call_id, None)


class _Fed:
    """The application's own hooks (``theirs``), then callgate's record of what the model is fed
    (``on_llm_start``). Every other ``on_*`` method of the SDK's hooks class is the application's
    own, bound per instance, so a hook a later SDK version adds reaches it too."""

    def __init__(self, gate: Gate, theirs: Any = None) -> None:
        self._gate = gate
        self._theirs = theirs
        if theirs is not None:
            for name in dir(type(self)):
                mine = getattr(theirs, name, None)
                if name.startswith("on_") and name != "on_llm_start" and callable(mine):
                    setattr(self, name, mine)

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        if self._theirs is not None:
            await self._theirs.on_llm_start(context, agent, system_prompt, input_items)
        try:
            await asyncio.to_thread(self._gate.record_model_call, list(input_items))
        except CallgateClientError as err:  # fail closed: the sidecar refused or is gone
            raise CallgateToolError(err) from None


class _FedHooks(_Fed, AgentHooks[Any]):
    """:meth:`Gate.hooks`: an agent's hooks."""


class _FedRunHooks(_Fed, RunHooks[Any]):
    """:meth:`Gate.run_hooks`: a run's hooks (every agent a handoff reaches)."""


def _namespaces(agent: Any, legal: str) -> tuple[str, ...]:
    """The namespaces (``tool_namespace(...)``, the SDK's ``_tool_namespace`` of its copies)
    under which ``agent`` holds the gated tool ``legal``: the SDK records a decision of a
    namespaced call under the qualified name ``namespace.name``."""
    found = (
        getattr(t, "_tool_namespace", None)
        for t in getattr(agent, "tools", None) or ()
        if getattr(t, "name", None) == legal
    )
    return tuple(dict.fromkeys(n for n in found if isinstance(n, str) and n))


def _rejected(ctx: RunContextWrapper[Any], legal: str, call_id: str, namespaces: Sequence[str]) -> bool:
    """Whether the SDK's ``state.reject`` decided this call (under its bare or qualified name)."""
    return any(
        ctx.is_tool_approved(name, call_id) is False
        for name in (legal, *(f"{n}.{legal}" for n in namespaces))
    )


async def _asks(
    theirs: bool | Callable[..., Any], ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
) -> bool:
    """The wrapped tool's own ``needs_approval`` for this call (the SDK's forms: a bool, a sync
    or async callable); an error in it asks (fail closed)."""
    if not callable(theirs):
        return bool(theirs)
    try:
        value = theirs(ctx, params, call_id)
        return bool(await value if inspect.isawaitable(value) else value)
    except Exception:
        return True


def _by_tool_name(
    tools: Mapping[str, FunctionTool] | Sequence[FunctionTool], session: Session
) -> dict[tuple[str, str], FunctionTool]:
    """(callgate tool name, version) -> the user's tool: a mapping names callgate tools; in a
    sequence each tool's name is the callgate name or its legal form (``weather.get`` /
    ``weather__get``)."""
    pairs = tools.items() if isinstance(tools, Mapping) else ((t.name, t) for t in tools)
    out: dict[tuple[str, str], FunctionTool] = {}
    for name, tool in pairs:
        found = session.names.resolve(name) or next(
            (r for r in session.names.by_legal.values() if r[0] == name), None
        )
        if found is None:
            raise CallgateClientError(f"{name}: the session does not list this tool", code="unknown_tool")
        out[found] = tool
    return out


def gate(tools: Mapping[str, FunctionTool] | Sequence[FunctionTool], **options: Any) -> list[FunctionTool]:
    """The application's ``@function_tool`` functions gated by callgate, for ``Agent(tools=...)``:
    ``Gate(tools, **options).tools`` (the options are :class:`Gate`'s)."""
    return Gate(tools, **options).tools


__all__ = [
    "DEFAULT_MODEL_CALL_ID",
    "Approver",
    "Attempt",
    "ExternalId",
    "CallgateToolError",
    "Gate",
    "Secret",
    "gate",
]
