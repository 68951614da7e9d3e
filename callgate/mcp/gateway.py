"""The MCP gateway: an MCP server (official SDK, low-level ``Server``) whose ``tools/list`` is
the session's ListTools view and whose ``tools/call`` runs callgate's whole chain before an
upstream MCP server is called (docs/MCP.md has the sequence diagram).

It talks to the sidecar only over gRPC with :mod:`callgate.client` (agent role: OpenSession,
ListTools, Propose, Cancel; executor role: BeginAttempt, RedeemSecret, ReportOutcome,
EncodeResult; confirmer role: Confirm after an accepted elicitation, recorded as
``mcp-elicitation:<subject>``). Every refusal is an ``isError`` result with a stable code
(callgate's, or :class:`McpCode` for what only the gateway can see); nothing unknown is ever run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import anyio
import grpc
import mcp_types as types
import rfc8785
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import is_version_at_least

from callgate.client import (
    AsyncClient,
    CallgateClientError,
    Denied,
    NeedsConfirmation,
    Rejected,
    Replayed,
    Tool,
    ToolCall,
    ToolNames,
)
from callgate.client._wire import outcome_of, parse_tools, propose_request
from callgate.client.aio import _call
from callgate.client.sync import target
from callgate.client.tools import Dialect, render
from callgate.config import Config
from callgate.core import unitext
from callgate.execute.encode import unmarked_data
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.mcp.argtypes import as_numbers
from callgate.mcp.callkey import IDEMPOTENCY_META_KEY, REQUEST_ID_META_KEY, RequestScope, call_key
from callgate.mcp.config import McpConfig
from callgate.mcp.pins import Pin, PinState, definition_sha256, read_pins
from callgate.mcp.upstreams import Answered, CallEnd, Lost, NotSent, Refused, Upstream, redeem_names
from callgate.mcp.wire import as_proposed, wire_arguments, wire_call_of

log = logging.getLogger("callgate.mcp")

CONFIRM_INPUT_KEY = "callgate_confirm"
"""Key of the confirmation question in a 2026-07-28 ``InputRequiredResult`` (and its answer)."""

INPUT_REQUIRED_VERSION = "2026-07-28"
"""First protocol revision without server-initiated requests mid-call: a confirmation is asked
with the declarative ``InputRequiredResult`` round trip instead of ``elicitation/create``."""

MAX_PARKED = 1024
"""Confirmations parked at once (2026-07-28 mode); past it the oldest is cancelled."""

REQUEST_STATE_AUDIENCE = "callgate-mcp"
"""Audience claim of the sealed ``requestState`` (the SDK's ``RequestStateBoundary``)."""


class McpCode(str, Enum):
    """The gateway's own stable codes (docs/MCP.md, "Codes"); callgate's codes pass through."""

    UPSTREAM_DEFINITION_CHANGED = "upstream_definition_changed"
    """The upstream's definition of the tool differs from its pin (or the upstream no longer
    lists it): refused until ``callgate mcp import`` re-pins it."""
    UPSTREAM_NOT_PINNED = "upstream_not_pinned"
    """The ToolSpec has no ``upstream`` pin (or names an unconfigured upstream)."""
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    """The upstream could not be reached; nothing was sent."""
    UPSTREAM_REFUSED = "upstream_refused"
    """The upstream answered with a protocol error; the tool did not run."""
    UPSTREAM_TOOL_ERROR = "upstream_tool_error"
    """The upstream tool answered ``isError``."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """Sent, then a timeout, crash or cancel: whether it took effect is unknown; never retried."""
    CONFIRMATION_DECLINED = "confirmation_declined"
    """The user declined (or dismissed) the confirmation question."""
    CONFIRMATION_TIMEOUT = "confirmation_timeout"
    """No answer to the confirmation question in time."""
    ELICITATION_UNSUPPORTED = "elicitation_unsupported"
    """The call needs a confirmation and the client cannot be asked (no elicitation)."""
    CONFIRMATION_INVALID = "confirmation_invalid"
    """A 2026-07-28 continuation (``requestState``) names no parked confirmation of this
    session, tool and arguments: unknown, already answered, or another session's. Nothing ran."""
    RESULT_WITHHELD = "result_withheld"
    """Cancelled after the commit boundary: the result is recorded, not shown."""
    UNKNOWN_TOOL = "unknown_tool_version"
    """No tool of that name is listed for this session (the code a gRPC Propose of a tool
    outside the shown set gets); nothing was proposed."""
    SIDECAR_ERROR = "sidecar_error"
    """The sidecar refused or failed a call (its code is in the message)."""


def _error_text(code: str, message: str, **extra: Any) -> str:
    return json.dumps(
        {"status": "error", "code": code, "message": message, **extra}, ensure_ascii=False, sort_keys=True
    )


def error_result(code: McpCode | str, message: str, **extra: Any) -> types.CallToolResult:
    value = code.value if isinstance(code, McpCode) else code
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_error_text(value, message, **extra))], is_error=True
    )


def model_text(message: str) -> str:
    """What an MCP client gets as text: the ``content`` of the sidecar's tool message.

    The sidecar (and callgate.client) speak in ``{"role": "tool", "tool_call_id": ..., "content":
    {...}}`` (docs/RESULT-ENCODING.md); MCP has no tool-call id and carries the role itself, so the
    gateway sends the inner object, flat like its own errors (``status``, ``message``, ``code``...).
    A message in any other shape is passed as it is."""
    try:
        msg = json.loads(message)
    except ValueError:
        return message
    if isinstance(msg, dict) and msg.get("role") == "tool" and isinstance(msg.get("content"), dict):
        return json.dumps(msg["content"], ensure_ascii=False, sort_keys=True)
    return message


def text_result(
    text: str, *, is_error: bool, structured: dict[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=model_text(text))],
        is_error=is_error,
        structured_content=structured,
    )


@dataclass(frozen=True)
class Identity:
    """Who is acting: from ``[mcp.identity]`` (stdio) or the validated bearer token (HTTP)."""

    tenant: str
    subject: str


@dataclass(frozen=True)
class _Parked:
    """A confirmation asked through ``InputRequiredResult``: the invocation waits in the sidecar
    (AWAITING_CONFIRMATION) until the client retries the call with the answer and the
    ``requestState`` naming this entry. The digest confirmed is this one, never the client's."""

    session_id: str
    invocation_id: str
    digest: str
    name: str
    """The tool name the client called (the retry must name the same)."""
    arguments_sha256: str
    """Of the arguments as received (the retry must send the same)."""
    pin: Pin
    deadline: float
    """``time.monotonic()`` after which the answer is too late (confirmation_timeout)."""


@dataclass
class _Session:
    """One callgate session per MCP connection and subject."""

    session_id: str
    identity: Identity
    retries: bool = True
    """Whether the MCP connection is a session a retried request can be recognised in (stdio,
    an HTTP ``Mcp-Session-Id``); false for stateless HTTP (callgate/mcp/callkey.py)."""
    listed: int = 0
    model_call_id: str = ""
    names: ToolNames = field(default_factory=ToolNames)
    tools: dict[tuple[str, str], Tool] = field(default_factory=dict)


class PinView:
    """The pinned tools in the policy folder, re-read when a file there changes, and the live
    digests the upstreams listed (refreshed at connect and on ``tools/list_changed``)."""

    def __init__(self, tools_dir: Path) -> None:
        self.tools_dir = tools_dir
        self._stamp: tuple[tuple[str, int], ...] = ()
        self._pins: dict[str, Pin] = {}
        self.live: dict[tuple[str, str], str] = {}
        self.listed_servers: set[str] = set()

    def _current_stamp(self) -> tuple[tuple[str, int], ...]:
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in self.tools_dir.glob("*.json")))
        except OSError:
            return ()

    def pins(self) -> dict[str, Pin]:
        stamp = self._current_stamp()
        if stamp != self._stamp:
            self._pins = {f"{p.spec_name}@{p.version}": p for p in read_pins(self.tools_dir)}
            self._stamp = stamp
        return self._pins

    def state(self, pin: Pin) -> PinState:
        if pin.server not in self.listed_servers:
            return PinState.MISSING
        live = self.live.get((pin.server, pin.tool))
        if live is None:
            return PinState.MISSING
        return PinState.MATCH if live == pin.definition_sha256 else PinState.CHANGED

    def set_listing(self, server: str, tools: list[dict[str, Any]]) -> None:
        for key in [k for k in self.live if k[0] == server]:
            del self.live[key]
        for t in tools:
            self.live[(server, str(t["name"]))] = definition_sha256(t)
        self.listed_servers.add(server)


class Gateway:
    """The MCP-facing half. ``start()`` connects the sidecar's listeners and the upstreams."""

    def __init__(self, cfg: Config, mcp: McpConfig) -> None:
        self.cfg = cfg
        self.mcp = mcp
        self.view = PinView(cfg.path(cfg.policy.dir) / "tools")
        self.upstreams = {
            u.name: Upstream(u, Path(cfg.base_dir), on_changed=self._list_changed) for u in mcp.upstreams
        }
        self._sessions: dict[tuple[str, str, str], _Session] = {}
        self._session_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._parked: dict[str, _Parked] = {}
        """2026-07-28 confirmations waiting for the client's retry, by an unguessable token
        (256 bits, single use) carried in the sealed ``requestState``."""
        self.refusals: dict[str, int] = {}
        """Counts of refused calls by code (read by tests and the log at exit)."""
        s = cfg.server
        self.agent = AsyncClient(_address(cfg, s.agent))
        assert self.agent.gate is not None  # an agent address was given
        self.gate: pb_grpc.GateStub = self.agent.gate
        self._channels: list[grpc.aio.Channel] = []
        self.executor = pb_grpc.ExecutorStub(self._open(_address(cfg, s.executor)))  # type: ignore[no-untyped-call]
        self.confirmer = pb_grpc.ConfirmationsStub(self._open(_address(cfg, s.confirmer)))  # type: ignore[no-untyped-call]
        self.timeout = 10.0

    def _open(self, address: str) -> grpc.aio.Channel:
        ch = grpc.aio.insecure_channel(target(address))
        self._channels.append(ch)
        return ch

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        for name in self.upstreams:
            await self._refresh(name)

    async def stop(self) -> None:
        while self._parked:  # nobody can answer these any more
            _, p = self._parked.popitem()
            await self._cancel_id(p.session_id, p.invocation_id, McpCode.CONFIRMATION_TIMEOUT.value)
        for up in self.upstreams.values():
            await up.close()
        await self.agent.close()
        for ch in self._channels:
            await ch.close()
        if self.refusals:
            log.info(
                "mcp gateway refusals: %s", ", ".join(f"{k}={v}" for k, v in sorted(self.refusals.items()))
            )

    async def _refresh(self, name: str, when: str = "connect") -> None:
        up = self.upstreams[name]
        try:
            tools = await up.list_tools()
        except Exception as exc:  # an unreachable upstream: its tools are not shown nor called
            log.warning(
                "upstream %s: cannot list tools (%s); its tools are unavailable", name, type(exc).__name__
            )
            self.view.listed_servers.discard(name)
            return
        self.view.set_listing(name, tools)
        for pin in self.view.pins().values():
            if pin.server == name and self.view.state(pin) is not PinState.MATCH:
                self._report_changed(pin, when)

    async def _list_changed(self, name: str) -> None:
        log.info("upstream %s: tools/list_changed", name)
        task = asyncio.get_running_loop().create_task(self._refresh(name, "tools/list_changed"))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    def _report_changed(self, pin: Pin, when: str) -> None:
        state = self.view.state(pin)
        log.warning(
            "upstream definition %s: %s@%s (upstream %s tool %s) at %s; refused until `callgate mcp "
            "import` re-pins it",
            state.value, pin.spec_name, pin.version, pin.server, pin.tool, when,
        )  # fmt: skip

    def _refused(self, code: str) -> None:
        self.refusals[code] = self.refusals.get(code, 0) + 1

    # ------------------------------------------------------------------ sessions
    async def session_for(self, identity: Identity, connection: str) -> _Session:
        key = (identity.tenant, identity.subject, connection)
        async with self._session_lock:
            s = self._sessions.get(key)
            if s is None:
                opened = await self.agent.session(identity.tenant, identity.subject)
                s = _Session(opened.session_id, identity, retries=bool(connection))
                self._sessions[key] = s
            return s

    def end_connection(self, connection: str) -> None:
        """Forget the callgate sessions of an ended MCP connection (an HTTP session deleted or
        closed when idle): what the gateway keeps is bounded by the open connections."""
        for key in [k for k in self._sessions if k[2] == connection]:
            del self._sessions[key]

    async def _list(self, s: _Session) -> list[Tool]:
        s.listed += 1
        model_call_id = f"mcp-list-{s.listed}"
        resp = await _call(
            self.gate.ListTools,
            pb.ListToolsRequest(session_id=s.session_id, model_call_id=model_call_id),
            self.timeout,
        )
        tools = parse_tools(resp)
        s.model_call_id = model_call_id
        s.names = ToolNames.build(tools)
        s.tools = {(t.name, t.version): t for t in tools}
        return tools

    async def list_tools(self, s: _Session) -> list[types.Tool]:
        """The session's ListTools view, only pinned tools whose upstream still matches."""
        tools = await self._list(s)
        pins = self.view.pins()
        shown = []
        for t in tools:
            pin = pins.get(f"{t.name}@{t.version}")
            if pin is None or pin.server not in self.upstreams or self.view.state(pin) is not PinState.MATCH:
                continue
            shown.append(t)
        out = []
        for t, d in zip(shown, render(shown, s.names, Dialect.MCP), strict=True):
            d["annotations"] = {"readOnlyHint": t.side_effect_class == "read_only"}
            out.append(types.Tool.model_validate(d))
        return out

    # ------------------------------------------------------------------ tools/call
    async def call_tool(self, ctx: Any, s: _Session, name: str, arguments: Mapping[str, Any] | None,
                        meta: Mapping[str, Any], request_state: str | None = None,
                        input_responses: Mapping[str, Any] | None = None,
                        ) -> types.CallToolResult | types.InputRequiredResult:  # fmt: skip
        if request_state is not None:
            return await self._resume(ctx, s, name, arguments, request_state, input_responses or {})
        stages = _Stages(ctx, self.mcp.progress_after_seconds)
        if not s.model_call_id:
            await self._list(s)
        resolved = s.names.resolve(name)
        if resolved is None:  # perhaps listed since this session last asked: ask once more
            await self._list(s)
            resolved = s.names.resolve(name)
        if resolved is None:
            self._refused(McpCode.UNKNOWN_TOOL.value)
            return error_result(McpCode.UNKNOWN_TOOL, _UNKNOWN_TOOL_MESSAGE, tool=name)
        spec, version = resolved
        pin = self.view.pins().get(f"{spec}@{version}")
        raw = wire_arguments(wire_call_of(ctx), arguments)
        req = propose_request(
            s.session_id, s.model_call_id, ToolCall(_call_id(), name, raw), s.names, s.tools
        )
        req.arguments = as_proposed(raw, req.arguments)
        req.idempotency_key = self._key(ctx, s, pin, meta)
        await stages.step("proposing")
        try:
            resp = await _call(self.gate.Propose, req, self.timeout)
            out = outcome_of(resp, req.proposal_id)
        except CallgateClientError as exc:
            self._refused(exc.code)
            return error_result(exc.code, "the gateway's call to callgate was refused; nothing ran")
        if isinstance(out, Rejected | Denied):
            return text_result(out.message, is_error=True)
        if isinstance(out, Replayed):
            return _replayed_result(out, pin)
        # Allowed or NeedsConfirmation: only a pinned, matching upstream tool may go on.
        refusal = await self._pin_refusal(pin)
        if refusal is not None:
            await self._cancel(s, out.invocation_id, refusal.value)
            self._refused(refusal.value)
            return error_result(refusal, _PIN_MESSAGES[refusal], tool=f"{spec}@{version}")
        assert pin is not None
        invocation_id = out.invocation_id
        try:
            if isinstance(out, NeedsConfirmation):
                await stages.step("waiting for the user's confirmation")
                answer: McpCode | None
                if _input_required(ctx):
                    asked = await self._park(ctx, s, out, name, spec, version, arguments, pin)
                    if isinstance(asked, types.InputRequiredResult):
                        return asked  # parked: the client retries with the answer
                    answer = asked
                else:
                    answer = await self._confirm(ctx, s, out, spec, version)
                if answer is not None:
                    await self._cancel(s, invocation_id, answer.value)
                    self._refused(answer.value)
                    return error_result(answer, _CONFIRM_MESSAGES[answer])
            return await self._execute(ctx, s, invocation_id, pin, stages)
        except BaseException:
            # a client cancel (or a failure of ours): before the boundary the invocation is
            # cancelled; after it, Cancel records cancel_requested and the result is withheld
            with anyio.CancelScope(shield=True):
                await self._cancel(s, invocation_id, "client_cancelled")
            raise

    async def _pin_refusal(self, pin: Pin | None) -> McpCode | None:
        if pin is None or pin.server not in self.upstreams:
            return McpCode.UPSTREAM_NOT_PINNED
        if pin.server not in self.view.listed_servers:
            # Not listed since it could not be reached: try again now. Still unreachable, the
            # call goes on to an attempt that never leaves (reported not reached, retry allowed).
            await self._refresh(pin.server)
            if pin.server not in self.view.listed_servers:
                return None
        if self.view.state(pin) is not PinState.MATCH:
            self._report_changed(pin, "call")
            return McpCode.UPSTREAM_DEFINITION_CHANGED
        return None

    def _key(self, ctx: Any, s: _Session, pin: Pin | None, meta: Mapping[str, Any]) -> str:
        """The client's ``_meta`` key, else one naming this request in this session (a retry of
        it replays; another request with equal arguments runs), only for writes that support
        idempotency (callgate/mcp/callkey.py)."""
        scope = RequestScope(
            s.identity.tenant, s.identity.subject, s.session_id, s.retries, getattr(ctx, "request_id", None)
        )
        derive = pin is not None and pin.idempotency_supported and not pin.read_only
        tool = f"{pin.spec_name}@{pin.version}" if pin is not None else ""
        return call_key(scope, tool, meta, derive=derive).key

    async def _cancel(self, s: _Session, invocation_id: str, reason: str) -> None:
        await self._cancel_id(s.session_id, invocation_id, reason)

    async def _cancel_id(self, session_id: str, invocation_id: str, reason: str) -> None:
        try:
            await _call(
                self.gate.Cancel,
                pb.CancelRequest(invocation_id=invocation_id, reason=reason, session_id=session_id),
                self.timeout,
            )
        except CallgateClientError as exc:
            log.warning("cancel of %s failed: %s", invocation_id, exc.code)

    async def _confirm(
        self, ctx: Any, s: _Session, out: NeedsConfirmation, spec: str, version: str
    ) -> McpCode | None:
        """Ask the user through elicitation; Confirm bound to the digest on accept. None = go on."""
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None:
            return McpCode.ELICITATION_UNSUPPORTED
        try:
            with anyio.fail_after(self.mcp.elicitation_timeout_seconds):
                res = await ctx.session.elicit_form(
                    _question(out, spec, version), CONFIRM_SCHEMA, related_request_id=ctx.request_id
                )
        except TimeoutError:
            return McpCode.CONFIRMATION_TIMEOUT
        except Exception as exc:  # no back-channel, protocol error: never run
            log.info("elicitation failed: %s", type(exc).__name__)
            return McpCode.ELICITATION_UNSUPPORTED
        if not _approved(res):
            return McpCode.CONFIRMATION_DECLINED
        return await self._confirm_digest(s, out.invocation_id, out.digest)

    async def _confirm_digest(self, s: _Session, invocation_id: str, digest: str) -> McpCode | None:
        """Confirm bound to the sidecar's digest of the invocation. None = confirmed."""
        try:
            await _call(
                self.confirmer.Confirm,
                pb.ConfirmRequest(
                    invocation_id=invocation_id, digest=digest,
                    confirmed_by=f"mcp-elicitation:{s.identity.tenant}/{s.identity.subject}",
                ),
                self.timeout,
            )  # fmt: skip
        except CallgateClientError as exc:
            log.info("confirm of %s refused: %s", invocation_id, exc.code)
            return (
                McpCode.CONFIRMATION_TIMEOUT
                if exc.code == "confirmation_expired"
                else McpCode.CONFIRMATION_DECLINED
            )
        return None

    # ------------------------------------------------------------------ 2026-07-28 confirmations
    async def _park(self, ctx: Any, s: _Session, out: NeedsConfirmation, name: str, spec: str,
                    version: str, arguments: Mapping[str, Any] | None,
                    pin: Pin) -> types.InputRequiredResult | McpCode:  # fmt: skip
        """Ask through ``InputRequiredResult``: the invocation stays parked in the sidecar and
        the question goes back as this call's result; the client asks the human and retries
        the call with the answer and the ``requestState`` (sealed by the SDK's
        ``RequestStateBoundary``, naming a single-use entry of :attr:`_parked`)."""
        caps = ctx.session.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            return McpCode.ELICITATION_UNSUPPORTED  # no form elicitation: nobody can be asked
        while len(self._parked) >= MAX_PARKED:
            oldest = next(iter(self._parked))
            self._expire(oldest)
        token = secrets.token_urlsafe(32)
        ttl = self.mcp.elicitation_timeout_seconds
        self._parked[token] = _Parked(
            session_id=s.session_id, invocation_id=out.invocation_id, digest=out.digest, name=name,
            arguments_sha256=arguments_sha256(arguments or {}), pin=pin, deadline=time.monotonic() + ttl,
        )  # fmt: skip
        asyncio.get_running_loop().call_later(ttl + 1.0, self._expire, token)
        question = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=_question(out, spec, version), requested_schema=CONFIRM_SCHEMA
            )
        )
        return types.InputRequiredResult(
            input_requests={CONFIRM_INPUT_KEY: question},
            request_state=json.dumps({"v": 1, "token": token}, separators=(",", ":")),
        )

    def _expire(self, token: str) -> None:
        """Drop a parked confirmation nobody answered (or the oldest past MAX_PARKED) and
        cancel its invocation."""
        p = self._parked.pop(token, None)
        if p is None:
            return
        self._refused(McpCode.CONFIRMATION_TIMEOUT.value)
        task = asyncio.get_running_loop().create_task(
            self._cancel_id(p.session_id, p.invocation_id, McpCode.CONFIRMATION_TIMEOUT.value)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resume(self, ctx: Any, s: _Session, name: str, arguments: Mapping[str, Any] | None,
                      request_state: str, responses: Mapping[str, Any]) -> types.CallToolResult:  # fmt: skip
        """The client's retry with the answer: only the parked entry its ``requestState`` names,
        of this session, this tool and these arguments, once; Confirm with the stored digest."""
        p = self._parked.pop(_state_token(request_state), None)
        invalid = McpCode.CONFIRMATION_INVALID
        if p is None:
            self._refused(invalid.value)
            return error_result(invalid, _CONFIRM_MESSAGES[invalid])
        same = (
            hmac.compare_digest(p.session_id, s.session_id)
            and p.name == name
            and hmac.compare_digest(p.arguments_sha256, arguments_sha256(arguments or {}))
        )
        code: McpCode | None = None
        if not same:  # a continuation used for another session, tool or arguments
            log.warning("confirmation continuation of %s used for another call; cancelled", p.invocation_id)
            code = invalid
        elif time.monotonic() > p.deadline:
            code = McpCode.CONFIRMATION_TIMEOUT
        elif not _approved(responses.get(CONFIRM_INPUT_KEY)):
            code = McpCode.CONFIRMATION_DECLINED
        stages = _Stages(ctx, self.mcp.progress_after_seconds)
        try:
            if code is None:
                code = await self._confirm_digest(s, p.invocation_id, p.digest)
            if code is not None:
                await self._cancel_id(p.session_id, p.invocation_id, code.value)
                self._refused(code.value)
                return error_result(code, _CONFIRM_MESSAGES[code])
            return await self._execute(ctx, s, p.invocation_id, p.pin, stages)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._cancel_id(p.session_id, p.invocation_id, "client_cancelled")
            raise

    async def _execute(
        self, ctx: Any, s: _Session, invocation_id: str, pin: Pin, stages: _Stages
    ) -> types.CallToolResult:
        """BeginAttempt -> secrets -> upstream tools/call -> ReportOutcome (again while the retry
        advice says so, only for calls that never left) -> EncodeResult."""
        up = self.upstreams[pin.server]
        wanted = redeem_names(up.cfg)
        attempts = 0
        while True:
            attempts += 1
            await stages.step("starting the attempt")
            att = await _call(
                self.executor.BeginAttempt,
                pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=self.mcp.executor_id),
                self.timeout,
            )
            try:
                arguments = as_numbers(json.loads(att.normalized_arguments), pin.number_fields)
            except ValueError:
                arguments = None
            end: CallEnd
            if attempts > 1 and pin.server not in self.view.listed_servers:
                await self._refresh(pin.server)
            if not isinstance(arguments, dict):
                end = NotSent("arguments_not_an_object")
            elif pin.server not in self.view.listed_servers:
                end = NotSent("unreachable")  # spawn/connect/initialize failed: nothing sent
            elif self.view.state(pin) is not PinState.MATCH:
                end = NotSent("definition_changed")  # changed while this call was confirmed
            else:
                secrets = await self._redeem(att.credential, wanted)
                if secrets is None:
                    end = NotSent("secret_unavailable")
                else:
                    await stages.step(f"calling upstream {pin.server}")
                    end = await self._send(ctx, s, invocation_id, up, pin, arguments, secrets, att.attempt_id)
            report = _report(end, att.attempt_id, f"mcp:{pin.server}.{pin.tool}:{att.attempt_id}")
            with anyio.CancelScope(shield=True):
                rep = await _call(self.executor.ReportOutcome, report, self.timeout)
            if isinstance(end, Lost):
                self._refused(McpCode.OUTCOME_UNKNOWN.value)
                return error_result(
                    McpCode.OUTCOME_UNKNOWN,
                    "The call was sent but no answer came back; it may or may not have taken effect. "
                    "Do not retry it blindly.",
                    reason=end.reason,
                )
            if isinstance(end, NotSent) and rep.retry.retry and attempts < 5:
                await asyncio.sleep(min(rep.retry.backoff_ms, 5000) / 1000)
                continue
            break
        await stages.step("encoding the result")
        structured: dict[str, Any] | None = None
        if isinstance(end, Answered) and not end.result.is_error:
            value: Any = _result_value(end.result)
            enc_req = pb.EncodeResultRequest(invocation_id=invocation_id, status="ok", value=_json(value))
        else:
            code, message = _failure(end)
            self._refused(code.value)
            enc_req = pb.EncodeResultRequest(
                invocation_id=invocation_id,
                status="error",
                value=_json({"code": code.value, "message": message, "retryable": _retryable(end)}),
            )
        enc = await _call(self.executor.EncodeResult, enc_req, self.timeout)
        if enc.withheld:
            return error_result(McpCode.RESULT_WITHHELD, "The call was cancelled; its result is withheld.")
        text = bytes(enc.message).decode("utf-8", "replace")
        # A result its output schema refused comes back as a refusal (result_schema_invalid).
        ok = enc_req.status == "ok" and not enc.error_code
        if ok and enc.structured_json:
            # Validated against the output schema and redacted by the sidecar, without the
            # untrusted-data marks (MCP clients check structuredContent against outputSchema);
            # the marked envelope is the text content beside it.
            structured = json.loads(enc.structured_json)
        return text_result(text, is_error=not ok, structured=structured)

    async def _redeem(self, credential: str, wanted: Mapping[str, str]) -> dict[str, str] | None:
        out: dict[str, str] = {}
        for key, secret in wanted.items():
            try:
                r = await _call(
                    self.executor.RedeemSecret,
                    pb.RedeemSecretRequest(credential=credential, secret_name=secret),
                    self.timeout,
                )
            except CallgateClientError as exc:
                log.warning("secret %s not redeemed for this call: %s", secret, exc.code)
                return None
            out[key] = bytes(r.value).decode("utf-8")
        return out

    async def _send(self, ctx: Any, s: _Session, invocation_id: str, up: Upstream, pin: Pin,
                    arguments: dict[str, Any], secrets: Mapping[str, str], attempt_id: str) -> CallEnd:  # fmt: skip
        async def progress(p: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(p, total, message)

        try:
            return await up.call(
                pin.tool, arguments, secrets=secrets, timeout=pin.timeout_ms / 1000, progress=progress,
                expected_sha256=pin.definition_sha256, digest=definition_sha256,
            )  # fmt: skip
        except BaseException:
            # Cancelled while the request was out (the SDK sends the upstream a courtesy
            # notifications/cancelled): past the commit boundary (EXECUTING), so Cancel first
            # records cancel_requested (no further attempt, result withheld, 6.7/6.12), then the
            # attempt is reported OUTCOME_UNKNOWN: MCP cancellation is unacknowledged, nobody
            # knows whether the upstream committed before it saw the cancel.
            with anyio.CancelScope(shield=True):
                await self._cancel(s, invocation_id, "client_cancelled")
                try:
                    await _call(
                        self.executor.ReportOutcome,
                        _report(Lost("cancelled"), attempt_id),
                        self.timeout,
                    )
                except CallgateClientError as exc:
                    log.warning("report after cancel failed: %s", exc.code)
            raise


_UNKNOWN_TOOL_MESSAGE = "No tool of this name is listed for this session (see tools/list); nothing ran."

_PIN_MESSAGES = {
    McpCode.UPSTREAM_NOT_PINNED: "This tool is not routed to a pinned upstream MCP tool; nothing ran.",
    McpCode.UPSTREAM_DEFINITION_CHANGED: (
        "The upstream server changed this tool's definition since it was approved; nothing ran. "
        "An operator must review it and re-pin it (callgate mcp import)."
    ),
}
_CONFIRM_MESSAGES = {
    McpCode.CONFIRMATION_DECLINED: "The user did not approve this call; nothing ran.",
    McpCode.CONFIRMATION_TIMEOUT: "The user did not answer the confirmation in time; nothing ran.",
    McpCode.ELICITATION_UNSUPPORTED: (
        "This call needs the user's confirmation and this client cannot ask for it; nothing ran."
    ),
    McpCode.CONFIRMATION_INVALID: (
        "This confirmation answer names no pending confirmation of this call (unknown, already "
        "answered, expired or another session's); nothing ran."
    ),
}

CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Run this call", "default": False}},
    "required": ["confirm"],
}
"""The confirmation form: one boolean, ``true`` only when the user means it."""


def _question(out: NeedsConfirmation, spec: str, version: str) -> str:
    """What the human reads: the tool, the normalized arguments, the digest, the expiry. Hidden
    characters, whitespace runs and mixed scripts in the arguments are shown as marks
    (``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``, :func:`callgate.core.unitext.visible_json`)."""
    try:
        args = json.dumps(json.loads(out.normalized_arguments), ensure_ascii=False, indent=2, sort_keys=True)
    except ValueError:
        args = out.normalized_arguments.decode("utf-8", "replace")
    args = unitext.visible_json(args)
    return (
        f"callgate: allow {spec}@{version} with these arguments?\n{args}\n"
        f"digest: {out.digest}\nexpires: {out.expires_at}"
    )


def _approved(answer: Any) -> bool:
    """An accepted form whose ``confirm`` is exactly ``true``; anything else is a no."""
    return (
        isinstance(answer, types.ElicitResult)
        and answer.action == "accept"
        and isinstance(answer.content, dict)
        and answer.content.get("confirm") is True
    )


def _input_required(ctx: Any) -> bool:
    """Whether this request's protocol asks through ``InputRequiredResult`` (>= 2026-07-28)."""
    version = getattr(ctx, "protocol_version", None)
    return isinstance(version, str) and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def _state_token(request_state: str) -> str:
    """The parked entry's token in an (already unsealed) ``requestState``; "" when absent."""
    try:
        doc = json.loads(request_state)
    except ValueError:
        return ""
    token = doc.get("token") if isinstance(doc, dict) and doc.get("v") == 1 else None
    return token if isinstance(token, str) else ""


def _failure(end: CallEnd) -> tuple[McpCode, str]:
    if isinstance(end, Answered):
        texts = [c.text for c in end.result.content if isinstance(c, types.TextContent)]
        return McpCode.UPSTREAM_TOOL_ERROR, "\n".join(texts)[:2000] or "the upstream tool failed"
    if isinstance(end, Refused):
        return McpCode.UPSTREAM_REFUSED, f"upstream error {end.code}: {end.message[:500]}"
    if isinstance(end, NotSent) and end.reason == "definition_changed":
        return McpCode.UPSTREAM_DEFINITION_CHANGED, _PIN_MESSAGES[McpCode.UPSTREAM_DEFINITION_CHANGED]
    return McpCode.UPSTREAM_UNAVAILABLE, "The upstream server could not be reached; nothing was sent."


_NOT_RETRYABLE = frozenset({"definition_changed", "secret_unavailable", "arguments_not_an_object"})


def _retryable(end: CallEnd) -> bool:
    """Whether the client may call again: only when nothing was sent because the upstream could
    not be reached (a changed pin, an unredeemable secret or bad arguments stay so)."""
    return isinstance(end, NotSent) and end.reason not in _NOT_RETRYABLE


def _report(end: CallEnd, attempt_id: str, external_id: str = "") -> pb.ReportOutcomeRequest:
    """The outcome of one attempt. MCP results carry no external id: a committed call is
    identified by ``mcp:<upstream>.<tool>:<attempt id>``."""
    if isinstance(end, Answered) and not end.result.is_error:
        return pb.ReportOutcomeRequest(
            attempt_id=attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id=external_id
        )
    if isinstance(end, Answered | Refused):
        return pb.ReportOutcomeRequest(
            attempt_id=attempt_id, outcome=pb.OUTCOME_FAILED_BEFORE_COMMIT,
            failure_class=pb.BUSINESS_REJECTION, message=type(end).__name__,
        )  # fmt: skip
    if isinstance(end, NotSent):
        return pb.ReportOutcomeRequest(
            attempt_id=attempt_id, outcome=pb.OUTCOME_FAILED_BEFORE_COMMIT,
            failure_class=pb.NOT_REACHED, message=f"not sent: {end.reason}",
        )  # fmt: skip
    return pb.ReportOutcomeRequest(
        attempt_id=attempt_id, outcome=pb.OUTCOME_UNKNOWN_COMMIT, failure_class=pb.TIMEOUT,
        message=f"sent, no answer: {end.reason}",
    )  # fmt: skip


def _result_value(result: types.CallToolResult) -> Any:
    """What goes to EncodeResult: the structured content when the upstream gave one, else the
    content (one text block: its text; else a list of texts and other blocks as their JSON)."""
    if result.structured_content is not None:
        return result.structured_content
    blocks: list[Any] = []
    for c in result.content:
        if isinstance(c, types.TextContent):
            blocks.append(c.text)
        else:
            blocks.append(c.model_dump(by_alias=True, mode="json", exclude_none=True))
    return blocks[0] if len(blocks) == 1 else blocks


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _replayed_result(out: Replayed, pin: Pin | None) -> types.CallToolResult:
    """A replayed call answered like the first one: the stored tool message, ``isError`` as it
    was, and for a tool with an output schema the same ``structuredContent`` (recovered from the
    stored message: its data without the boundary marks is the validated structured result;
    a result the schema refused was stored as an error message and stays one)."""
    try:
        msg = json.loads(out.message)
    except ValueError:
        msg = None
    content = msg.get("content") if isinstance(msg, dict) else None
    failed = _replay_failed(out.state) or (isinstance(content, dict) and content.get("status") == "error")
    structured: dict[str, Any] | None = None
    if not failed and pin is not None and pin.has_output_schema and isinstance(content, dict):
        found, data = unmarked_data(content)
        if found and isinstance(data, dict):
            structured = data
    return text_result(out.message, is_error=failed, structured=structured)


def _replay_failed(state: str) -> bool:
    return state not in ("OBSERVED", "COMMITTED", "PREPARED", "EXECUTING", "AUTHORIZED")


def _call_id() -> str:
    return (
        "mcp-"
        + hashlib.sha256(str(time.time_ns()).encode() + id(object()).to_bytes(8, "little")).hexdigest()[:16]
    )


def arguments_sha256(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the RFC 8785 form of arguments as received (sorted JSON if not JCS-able)."""
    try:
        return hashlib.sha256(rfc8785.dumps(dict(arguments))).hexdigest()
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return hashlib.sha256(json.dumps(dict(arguments), sort_keys=True, default=str).encode()).hexdigest()


class _Stages:
    """Gate-stage progress for a client that sent a progressToken (a no-op otherwise)."""

    def __init__(self, ctx: Any, after: float) -> None:
        self.ctx = ctx
        self.after = after
        self.started = time.monotonic()
        self.n = 0

    async def step(self, message: str) -> None:
        self.n += 1
        if time.monotonic() - self.started < self.after:
            return
        try:
            await self.ctx.session.report_progress(float(self.n), None, f"callgate: {message}")
        except Exception as exc:  # progress is best effort; never fails the call
            log.debug("progress not sent: %s", type(exc).__name__)


def _address(cfg: Config, listener: Any) -> str:
    if listener.socket:
        return "unix:" + str(cfg.path(listener.socket).resolve())
    return str(listener.tcp)


def _meta_of(params: types.CallToolRequestParams) -> dict[str, Any]:
    meta = params.meta
    if meta is None:
        return {}
    return dict(meta)


def build_server(gw: Gateway, identity_of: Any) -> Server[Any]:
    """The low-level MCP server; ``identity_of(ctx) -> (Identity, connection key) | None``."""

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        who = identity_of(ctx)
        if who is None:
            return types.ListToolsResult(tools=[])
        s = await gw.session_for(*who)
        return types.ListToolsResult(tools=await gw.list_tools(s))

    async def on_call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        who = identity_of(ctx)
        if who is None:
            return error_result("unauthenticated", "no authenticated subject")
        s = await gw.session_for(*who)
        return await gw.call_tool(
            ctx,
            s,
            params.name,
            params.arguments,
            _meta_of(params),
            params.request_state,
            params.input_responses,
        )

    def principal(ctx: Any) -> str | None:
        """The ``requestState`` is bound to who asked: tenant, subject and connection."""
        who = identity_of(ctx)
        if who is None:
            return None
        identity, connection = who
        return json.dumps([identity.tenant, identity.subject, connection])

    server = Server("callgate-mcp", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    # 2026-07-28 confirmations: the SDK seals every outgoing requestState (AES-256-GCM under a key
    # made now, held only by this process) bound to the method, tool name, arguments, subject and
    # audience, with a TTL, and refuses a tampered or re-targeted one before the handler runs.
    security = RequestStateSecurity(
        keys=[secrets.token_bytes(32)],
        ttl=gw.mcp.elicitation_timeout_seconds + 60.0,
        bind_principal=principal,
        audience=REQUEST_STATE_AUDIENCE,
    )
    server.middleware.append(RequestStateBoundary(security, default_audience=REQUEST_STATE_AUDIENCE))
    return server


def init_options(server: Server[Any]) -> Any:
    return server.create_initialization_options(NotificationOptions(tools_changed=False))


__all__ = [
    "CONFIRM_INPUT_KEY",
    "IDEMPOTENCY_META_KEY",
    "REQUEST_ID_META_KEY",
    "Gateway",
    "Identity",
    "McpCode",
    "arguments_sha256",
    "build_server",
]
