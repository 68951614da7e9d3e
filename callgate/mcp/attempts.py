"""The executor role of the gateway: the upstream ``tools/call`` as the tool function of the public
client's executor helper (:meth:`callgate.client.AsyncClient.run`, decisions from
:mod:`callgate.client.executor` like every other executor): BeginAttempt -> RedeemSecret -> the
upstream's ``tools/call`` -> ReportOutcome (again while the retry advice says so, only for calls
that never left) -> EncodeResult.

How an upstream call ends (upstreams.py) maps to the outcome reported and the error the model reads:

=====================  =================================  ===========================  =========
end                    reported                           error code                   retried
=====================  =================================  ===========================  =========
answered               COMMITTED, ``mcp:<up>.<tool>:<a>``  (the result)                 no
answered ``isError``   FAILED_BEFORE_COMMIT, business     ``upstream_tool_error``      no
JSON-RPC error         FAILED_BEFORE_COMMIT, business     ``upstream_refused``         no
not sent               FAILED_BEFORE_COMMIT, not reached  ``upstream_unavailable`` /   advice
                                                          ``upstream_definition_changed``
sent, no answer        OUTCOME_UNKNOWN (timeout)          ``outcome_unknown``          never
=====================  =================================  ===========================  =========
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types

from callgate.client import (
    AsyncClient,
    BusinessRejection,
    CallgateClientError,
    Committed,
    ExecutionError,
    NotReached,
    OutcomeUnknown,
    Stage,
    ToolContext,
)
from callgate.mcp.argtypes import as_numbers
from callgate.mcp.codes import OUTCOME_UNKNOWN_MESSAGE, PIN_MESSAGES, McpCode, Refusals
from callgate.mcp.hosting import Hosting
from callgate.mcp.notify import call_log, progress_text
from callgate.mcp.pins import Pin, PinState, definition_sha256
from callgate.mcp.progress import CallProgress
from callgate.mcp.results import answer_of, checked_parts, encode_value, error_result, json_bytes
from callgate.mcp.session import McpSession, cancel
from callgate.mcp.upstreams import Answered, CallEnd, Lost, NotSent, Refused, redeem_names

log = logging.getLogger("callgate.mcp")

MAX_ATTEMPTS = 5
"""Attempts of one call (only calls that never left are tried again, as the advice says)."""

MAX_BACKOFF_S = 5.0
"""The longest wait between two attempts, whatever the advice."""


class UpstreamCall:
    """The tool function of one invocation: each attempt calls the pinned upstream tool, unless
    the upstream is unreachable, its definition changed or a secret cannot be redeemed (then
    nothing is sent). Keeps how the last attempt ended and the secrets it redeemed."""

    def __init__(self, ctx: Any, s: McpSession, invocation_id: str, pin: Pin, hosting: Hosting,
                 stages: CallProgress) -> None:  # fmt: skip
        self.ctx = ctx
        self.s = s
        self.invocation_id = invocation_id
        self.pin = pin
        self.hosting = hosting
        self.stages = stages
        self.up = hosting.upstreams[pin.server]
        self.wanted = redeem_names(self.up.cfg)
        self.attempts = 0
        self.end: CallEnd = NotSent("not_started")
        self.redeemed: list[str] = []

    async def __call__(self, att: ToolContext) -> Committed:
        self.attempts += 1
        self.end = await self._attempt(att)
        return outcome(self.end, self.pin, att.attempt_id)

    async def _attempt(self, att: ToolContext) -> CallEnd:
        pin, hosting = self.pin, self.hosting
        try:
            arguments = as_numbers(att.arguments, pin.number_fields)
        except ValueError:
            arguments = None
        if self.attempts > 1 and not hosting.reachable(pin.server):
            await hosting.refresh(pin.server)
        if not isinstance(arguments, dict):
            return NotSent("arguments_not_an_object")
        if not hosting.reachable(pin.server):
            return NotSent("unreachable")  # spawn/connect/initialize failed: nothing sent
        if hosting.view.state(pin) is not PinState.MATCH:
            return NotSent("definition_changed")  # changed while this call was confirmed
        secrets = await self._redeem(att)
        if secrets is None:
            return NotSent("secret_unavailable")
        self.redeemed = list(secrets.values())
        await self.stages.step(f"calling upstream {pin.server}")
        return await self._send(arguments, secrets)

    async def _redeem(self, att: ToolContext) -> dict[str, str] | None:
        out: dict[str, str] = {}
        for key, secret in self.wanted.items():
            try:
                value = await att.redeem(secret)
            except CallgateClientError as exc:
                log.warning("secret %s not redeemed for this call: %s", secret, exc.code)
                return None
            out[key] = bytes(value).decode("utf-8")
        return out

    async def _send(self, arguments: dict[str, Any], secrets: Mapping[str, str]) -> CallEnd:
        pin, s = self.pin, self.s

        text = progress_text(pin.server, list(secrets.values()))

        async def progress(p: float, total: float | None, message: str | None) -> None:
            await self.stages.upstream(pin.server, p, total, text(message))

        try:
            return await self.up.call(
                pin.tool, arguments, secrets=secrets, timeout=pin.timeout_ms / 1000, progress=progress,
                expected_sha256=pin.definition_sha256, digest=definition_sha256,
                on_log=call_log(self.ctx, pin.server, list(secrets.values()), lambda: s.log_level),
            )  # fmt: skip
        except BaseException as exc:
            # Cancelled while the request was out (the SDK sends the upstream a courtesy
            # notifications/cancelled): past the commit boundary (EXECUTING), so Cancel first
            # records cancel_requested (no further attempt, result withheld, 6.7/6.12), then the
            # executor helper reports the attempt OUTCOME_UNKNOWN: MCP cancellation is
            # unacknowledged, nobody knows whether the upstream committed before it saw the cancel.
            with anyio.CancelScope(shield=True):
                await cancel(s.sidecar, self.invocation_id, "client_cancelled")
            if isinstance(exc, Exception):
                raise OutcomeUnknown(recorded="sent, no answer: cancelled") from exc
            raise


def outcome(end: CallEnd, pin: Pin, attempt_id: str) -> Committed:
    """The executor helper's view of an end: a commit, or the failure it raises (see the table)."""
    if isinstance(end, Answered) and not end.result.is_error:
        value = encode_value(end.result, has_output_schema=pin.has_output_schema)
        # MCP results carry no external id: a committed call is named by its attempt
        # the binary blocks' bytes go to the sidecar's secret check (never stored)
        parts = checked_parts(end.result, value)
        return Committed(value, external_resource_id=f"mcp:{pin.server}.{pin.tool}:{attempt_id}", parts=parts)
    if isinstance(end, Lost):
        raise OutcomeUnknown(recorded=f"sent, no answer: {end.reason}")
    code, message = failure(end)
    error = {"code": code.value, "message": message, "retryable": retryable(end)}
    if isinstance(end, NotSent):
        raise NotReached(recorded=f"not sent: {end.reason}", error=error)
    raise BusinessRejection(recorded=type(end).__name__, error=error)


def failure(end: CallEnd) -> tuple[McpCode, str]:
    """The gateway's code and message for an end that is not a commit."""
    if isinstance(end, Answered):
        texts = [c.text for c in end.result.content if isinstance(c, types.TextContent)]
        return McpCode.UPSTREAM_TOOL_ERROR, "\n".join(texts)[:2000] or "the upstream tool failed"
    if isinstance(end, Refused):
        return McpCode.UPSTREAM_REFUSED, f"upstream error {end.code}: {end.message[:500]}"
    if isinstance(end, NotSent) and end.reason == "definition_changed":
        return McpCode.UPSTREAM_DEFINITION_CHANGED, PIN_MESSAGES[McpCode.UPSTREAM_DEFINITION_CHANGED]
    return McpCode.UPSTREAM_UNAVAILABLE, "The upstream server could not be reached; nothing was sent."


_NOT_RETRYABLE = frozenset({"definition_changed", "secret_unavailable", "arguments_not_an_object"})


def retryable(end: CallEnd) -> bool:
    """Whether the client may call again: only when nothing was sent because the upstream could
    not be reached (a changed pin, an unredeemable secret or bad arguments stay so)."""
    return isinstance(end, NotSent) and end.reason not in _NOT_RETRYABLE


async def _backoff(seconds: float) -> None:
    await asyncio.sleep(min(seconds, MAX_BACKOFF_S))


async def execute(ctx: Any, s: McpSession, invocation_id: str, pin: Pin, *, client: AsyncClient,
                  hosting: Hosting, executor_id: str, stages: CallProgress,
                  refusals: Refusals) -> types.CallToolResult:  # fmt: skip
    """Run a PREPARED invocation on its upstream through the executor helper; the answer."""
    call = UpstreamCall(ctx, s, invocation_id, pin, hosting, stages)

    async def on_stage(stage: Stage) -> None:
        await stages.step(stage.value)

    try:
        res = await client.run(
            invocation_id, call, executor_id=executor_id, max_attempts=MAX_ATTEMPTS, sleep=_backoff,
            encode=json_bytes, shield=lambda: anyio.CancelScope(shield=True), on_stage=on_stage,
        )  # fmt: skip
    except ExecutionError as exc:
        if exc.code != McpCode.OUTCOME_UNKNOWN.value:
            raise
        refusals.count(McpCode.OUTCOME_UNKNOWN)
        reason = call.end.reason if isinstance(call.end, Lost) else "cancelled"
        return error_result(McpCode.OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_MESSAGE, reason=reason)
    end = call.end
    answered = end.result if isinstance(end, Answered) and not end.result.is_error else None
    if answered is None:
        refusals.count(failure(end)[0])
    return answer_of(
        res, answered, has_output_schema=pin.has_output_schema, secrets=call.redeemed,
        structured_out=hosting.structured,
    )  # fmt: skip


__all__ = ["MAX_ATTEMPTS", "UpstreamCall", "execute", "failure", "outcome", "retryable"]
