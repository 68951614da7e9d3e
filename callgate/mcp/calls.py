"""The call path of ``tools/call``: resolve the name in the session's listing, Propose the
arguments as received (bytes, strict parse), answer a refusal or a replay, check the pin, ask for
a confirmation (confirm.py), then run the attempt (attempts.py). All through the public client
(:mod:`callgate.client`); nothing unknown is ever run. The paging tool is read here too."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types

from callgate.client import (
    AsyncClient,
    CallgateClientError,
    Denied,
    NeedsConfirmation,
    Rejected,
    Replayed,
    ToolCall,
)
from callgate.mcp.attempts import execute
from callgate.mcp.callkey import call_key
from callgate.mcp.codes import PIN_MESSAGES, UNKNOWN_TOOL_MESSAGE, McpCode, Refusals
from callgate.mcp.config import McpConfig
from callgate.mcp.confirm import Confirmations, input_required
from callgate.mcp.hosting import Hosting
from callgate.mcp.pins import Pin
from callgate.mcp.progress import CallProgress
from callgate.mcp.results import error_result, page_answer, page_arguments, replayed_result, text_result
from callgate.mcp.session import McpSession, cancel
from callgate.mcp.wire import wire_arguments, wire_call_of

Answer = types.CallToolResult | types.InputRequiredResult


class Calls:
    """``tools/call`` for one gateway: the sidecar client, the upstreams, the confirmations."""

    def __init__(self, mcp: McpConfig, client: AsyncClient, hosting: Hosting, confirmations: Confirmations,
                 refusals: Refusals) -> None:  # fmt: skip
        self.mcp = mcp
        self.client = client
        self.hosting = hosting
        self.confirmations = confirmations
        self.refusals = refusals

    async def call_tool(self, ctx: Any, s: McpSession, name: str, arguments: Mapping[str, Any] | None,
                        meta: Mapping[str, Any], request_state: str | None = None,
                        input_responses: Mapping[str, Any] | None = None) -> Answer:  # fmt: skip
        if request_state is not None:
            return await self._resume(ctx, s, name, arguments, request_state, input_responses or {})
        stages = CallProgress(ctx, self.mcp.progress_after_seconds)
        if not s.model_call_id:
            await s.relist()
        resolved = s.names.resolve(name)
        if resolved is None:  # perhaps listed since this session last asked: ask once more
            await s.relist()
            resolved = s.names.resolve(name)
        if resolved is None:
            self.refusals.count(McpCode.UNKNOWN_TOOL)
            return error_result(McpCode.UNKNOWN_TOOL, UNKNOWN_TOOL_MESSAGE, tool=name)
        spec, version = resolved
        pin = self.hosting.view.pins().get(f"{spec}@{version}")
        raw = wire_arguments(wire_call_of(ctx), arguments)
        req = s.sidecar.prepare(ToolCall(_call_id(), name, raw))
        # the arguments exactly as the client sent them: the client library's prepare drops a
        # top-level null of an optional member (OpenAI strict mode has to send one), but an MCP
        # client sends null only when it means null (a tool's "null = no limit" against a default)
        req.arguments = raw
        req.idempotency_key = self._key(ctx, s, pin, meta)
        await stages.step("proposing")
        try:
            out = await s.sidecar.propose_prepared(req)
        except CallgateClientError as exc:
            self.refusals.count(exc.code)
            return error_result(exc.code, "the gateway's call to callgate was refused; nothing ran")
        if isinstance(out, Rejected | Denied):
            return text_result(out.message, is_error=True)
        if isinstance(out, Replayed):
            # the first answer's structuredContent again, unless none is sent (structured_content)
            return replayed_result(out, pin is not None and pin.has_output_schema and self.hosting.structured)
        invocation_id = out.invocation_id
        try:
            # Allowed or NeedsConfirmation: only a pinned, matching upstream tool may go on (an
            # upstream still being listed for the first time is waited for: hosting.py).
            refusal = await self.hosting.pin_refusal(pin)
            if refusal is not None:
                await cancel(s.sidecar, invocation_id, refusal.value)
                self.refusals.count(refusal)
                return error_result(refusal, PIN_MESSAGES[refusal], tool=f"{spec}@{version}")
            assert pin is not None
            if isinstance(out, NeedsConfirmation):
                await stages.step("waiting for the user's confirmation")
                answer: McpCode | None
                if not self.confirmations.can_ask(ctx):  # refused, or decided in the console
                    answer = await self.confirmations.wait_elsewhere(s, out, spec, version, stages)
                elif input_required(ctx):
                    asked = self.confirmations.park(ctx, s, out, name, spec, version, arguments, pin)
                    if isinstance(asked, types.InputRequiredResult):
                        return asked  # parked: the client retries with the answer
                    answer = asked
                else:
                    answer = await self.confirmations.ask(ctx, s, out, spec, version)
                if answer is not None:
                    await cancel(s.sidecar, invocation_id, answer.value)
                    return self.confirmations.refused(answer)
            return await self._execute(ctx, s, invocation_id, pin, stages)
        except BaseException:
            # a client cancel (or a failure of ours; also while the upstream's first listing is
            # waited for): before the boundary the invocation is cancelled; after it, Cancel
            # records cancel_requested and the result is withheld
            with anyio.CancelScope(shield=True):
                await cancel(s.sidecar, invocation_id, "client_cancelled")
            raise

    async def _resume(self, ctx: Any, s: McpSession, name: str, arguments: Mapping[str, Any] | None,
                      request_state: str, responses: Mapping[str, Any]) -> types.CallToolResult:  # fmt: skip
        """The client's retry with the answer (confirm.py); Confirm with the stored digest."""
        resumed = self.confirmations.resume(s, name, arguments, request_state, responses)
        p, code = resumed.parked, resumed.code
        if p is None:
            return self.confirmations.refused(McpCode.CONFIRMATION_INVALID)
        stages = CallProgress(ctx, self.mcp.progress_after_seconds)
        try:
            if code is None:
                code = await self.confirmations.confirm_digest(s, p.invocation_id, p.digest)
            if code is not None:
                await cancel(p.sidecar, p.invocation_id, code.value)
                return self.confirmations.refused(code)
            return await self._execute(ctx, s, p.invocation_id, p.pin, stages)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await cancel(p.sidecar, p.invocation_id, "client_cancelled")
            raise

    async def _execute(
        self, ctx: Any, s: McpSession, invocation_id: str, pin: Pin, stages: CallProgress
    ) -> types.CallToolResult:
        return await execute(
            ctx, s, invocation_id, pin, client=self.client, hosting=self.hosting,
            executor_id=self.mcp.executor_id, stages=stages, refusals=self.refusals,
        )  # fmt: skip

    def _key(self, ctx: Any, s: McpSession, pin: Pin | None, meta: Mapping[str, Any]) -> str:
        """The client's ``_meta`` key, else one naming this request in this session (a retry of
        it replays; another request with equal arguments runs), only for writes that support
        idempotency (callgate/mcp/callkey.py)."""
        derive = pin is not None and pin.idempotency_supported and not pin.read_only
        tool = f"{pin.spec_name}@{pin.version}" if pin is not None else ""
        return call_key(s.scope(ctx), tool, meta, derive=derive).key

    async def read_page(self, s: McpSession, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        """The paging tool (:data:`~callgate.mcp.results.PAGE_TOOL`): ``GetResult`` on this
        session only (another session's invocation answers ``invocation_not_found``)."""
        asked = page_arguments(arguments)
        if asked is None:
            return error_result(
                "invalid_arguments",
                "callgate_result_page takes exactly invocation_id and page_token (strings)",
            )
        invocation_id, token = asked
        try:
            page = await s.sidecar.result_page(invocation_id, token)
        except CallgateClientError as exc:
            self.refusals.count(exc.code)
            return error_result(exc.code, "no page of that result can be read in this session")
        return page_answer(page.message, page.truncated, page.next_page_token)


def _call_id() -> str:
    return (
        "mcp-"
        + hashlib.sha256(str(time.time_ns()).encode() + id(object()).to_bytes(8, "little")).hexdigest()[:16]
    )


__all__ = ["Answer", "Calls"]
