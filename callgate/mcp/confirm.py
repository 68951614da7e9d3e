"""Confirmations asked of the MCP client's user: by ``elicitation/create`` mid-call, or (protocol
2026-07-28 and later) by the declarative ``InputRequiredResult`` round trip, where the invocation
stays parked in the sidecar until the client retries the call with the answer and the sealed
``requestState``. An accepted answer is a Confirm bound to the sidecar's digest through the public
client's confirmer role, recorded as ``mcp-elicitation:<tenant>/<subject>``.

A client that cannot be asked (no form elicitation) is refused, or, with ``[mcp]
confirm_without_elicitation = "wait"``, its call waits while a person decides in the confirmation
console (:meth:`Confirmations.wait_elsewhere`: the sidecar's ``WatchInvocation``)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import rfc8785
from mcp_types.version import is_version_at_least

from callgate.arguments import unitext
from callgate.client import (
    AsyncConfirmer,
    AsyncSession,
    CallgateClientError,
    DeadlineExceeded,
    NeedsConfirmation,
)
from callgate.execute.redaction import PATTERNS_ONLY, Redactor
from callgate.mcp.codes import CONFIRM_MESSAGES, McpCode, Refusals
from callgate.mcp.config import NoElicitation
from callgate.mcp.front import REQUEST_STATE_AUDIENCE
from callgate.mcp.pins import Pin
from callgate.mcp.progress import CallProgress
from callgate.mcp.results import error_result
from callgate.mcp.session import McpSession, cancel

log = logging.getLogger("callgate.mcp")

CONFIRM_INPUT_KEY = "callgate_confirm"
"""Key of the confirmation question in a 2026-07-28 ``InputRequiredResult`` (and its answer)."""

INPUT_REQUIRED_VERSION = "2026-07-28"
"""First protocol revision without server-initiated requests mid-call: a confirmation is asked
with the declarative ``InputRequiredResult`` round trip instead of ``elicitation/create``."""

MAX_PARKED = 1024
"""Confirmations parked at once (2026-07-28 mode); past it the oldest is cancelled."""

CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Run this call", "default": False}},
    "required": ["confirm"],
}
"""The confirmation form: one boolean, ``true`` only when the user means it."""

HEARTBEAT_S = 10.0
"""While a call waits for a decision in the console, a progress notification every this often
(clients that reset their request timeout on progress keep waiting)."""


@dataclass(frozen=True)
class Parked:
    """A confirmation asked through ``InputRequiredResult``: the invocation waits in the sidecar
    (AWAITING_CONFIRMATION) until the client retries the call with the answer and the
    ``requestState`` naming this entry. The digest confirmed is this one, never the client's."""

    sidecar: AsyncSession
    """The callgate session that proposed it (the retry must come from the same)."""
    invocation_id: str
    digest: str
    name: str
    """The tool name the client called (the retry must name the same)."""
    arguments_sha256: str
    """Of the arguments as received (the retry must send the same)."""
    pin: Pin
    deadline: float
    """``time.monotonic()`` after which the answer is too late (confirmation_timeout)."""


@dataclass(frozen=True)
class Resumed:
    """A continuation checked: ``parked`` (None when it names no parked entry) and why it may
    not run (None: confirm it and run)."""

    parked: Parked | None
    code: McpCode | None


class Confirmations:
    """Asks the user, confirms the digest, keeps the 2026-07-28 parked confirmations."""

    def __init__(
        self, confirmer: AsyncConfirmer, timeout_s: float, refusals: Refusals,
        spawn: Callable[[Any], None], masker: Redactor | None = None,
        without_elicitation: NoElicitation = NoElicitation.REFUSE,
    ) -> None:  # fmt: skip
        self.confirmer = confirmer
        self.without_elicitation = without_elicitation
        """``[mcp] confirm_without_elicitation``: refuse, or wait for the console."""
        self.masker = masker
        """The configured secrets by name and the secret patterns: masked in the question."""
        self.timeout_s = timeout_s
        """``elicitation_timeout_seconds``: how long an answer is waited for."""
        self.refusals = refusals
        self._spawn = spawn
        self._parked: dict[str, Parked] = {}
        """Confirmations waiting for the client's retry, by an unguessable token (256 bits,
        single use) carried in the sealed ``requestState``."""

    @staticmethod
    def can_ask(ctx: Any) -> bool:
        """Whether this client declared form elicitation (it can be asked mid-call or through
        ``InputRequiredResult``). A client that declared only URL elicitation cannot be."""
        caps = ctx.session.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        return elicitation is not None and not (elicitation.form is None and elicitation.url is not None)

    async def wait_elsewhere(
        self, s: McpSession, out: NeedsConfirmation, spec: str, version: str, stages: CallProgress
    ) -> McpCode | None:
        """For a client that cannot be asked: refuse (``elicitation_unsupported``), or, with
        ``confirm_without_elicitation = "wait"``, wait up to ``elicitation_timeout_seconds``
        for a person's decision in the console (the invocation is parked in the sidecar,
        AWAITING_CONFIRMATION; the console's Confirm binds the digest it showed). None = it was
        confirmed with this digest: go on. The caller cancels the invocation on any code."""
        if self.without_elicitation is NoElicitation.REFUSE:
            return McpCode.ELICITATION_UNSUPPORTED
        log.info(
            "%s@%s waits for a confirmation in the console: invocation %s (client cannot be asked)",
            spec, version, out.invocation_id,
        )  # fmt: skip
        waited = 0.0
        while waited < self.timeout_s:
            chunk = min(HEARTBEAT_S, self.timeout_s - waited)
            await stages.waiting(
                waited / self.timeout_s,
                f"waiting for a person to confirm in the callgate console: invocation "
                f"{out.invocation_id}, digest {out.digest}, expires {out.expires_at}",
            )
            try:
                confirmed = await s.sidecar.wait_confirmed(out, timeout=chunk)
            except DeadlineExceeded:
                waited += chunk
                continue
            except CallgateClientError as exc:
                log.info("watch of %s failed: %s", out.invocation_id, exc.code)
                return McpCode.CONFIRMATION_TIMEOUT
            return None if confirmed else await self._why_not(s, out.invocation_id)
        return McpCode.CONFIRMATION_TIMEOUT

    @staticmethod
    async def _why_not(s: McpSession, invocation_id: str) -> McpCode:
        """A parked invocation that ended without a confirmation: expired (timeout) or not."""
        try:
            kinds = {e.kind for e in await s.sidecar.events(invocation_id)}
        except CallgateClientError:
            return McpCode.CONFIRMATION_DECLINED
        return (
            McpCode.CONFIRMATION_TIMEOUT if "confirmation_expired" in kinds else McpCode.CONFIRMATION_DECLINED
        )

    async def ask(
        self, ctx: Any, s: McpSession, out: NeedsConfirmation, spec: str, version: str
    ) -> McpCode | None:
        """Ask the user through elicitation; Confirm bound to the digest on accept. None = go on."""
        caps = ctx.session.client_capabilities
        if caps is None or caps.elicitation is None:
            return McpCode.ELICITATION_UNSUPPORTED
        try:
            with anyio.fail_after(self.timeout_s):
                res = await ctx.session.elicit_form(
                    question(out, spec, version, self.masker),
                    CONFIRM_SCHEMA,
                    related_request_id=ctx.request_id,
                )
        except TimeoutError:
            return McpCode.CONFIRMATION_TIMEOUT
        except Exception as exc:  # no back-channel, protocol error: never run
            log.info("elicitation failed: %s", type(exc).__name__)
            return McpCode.ELICITATION_UNSUPPORTED
        if not approved(res):
            return McpCode.CONFIRMATION_DECLINED
        return await self.confirm_digest(s, out.invocation_id, out.digest)

    async def confirm_digest(self, s: McpSession, invocation_id: str, digest: str) -> McpCode | None:
        """Confirm bound to the sidecar's digest of the invocation. None = confirmed."""
        try:
            await self.confirmer.confirm(
                invocation_id,
                digest,
                confirmed_by=f"mcp-elicitation:{s.identity.tenant}/{s.identity.subject}",
            )
        except CallgateClientError as exc:
            log.info("confirm of %s refused: %s", invocation_id, exc.code)
            return (
                McpCode.CONFIRMATION_TIMEOUT
                if exc.code == "confirmation_expired"
                else McpCode.CONFIRMATION_DECLINED
            )
        return None

    def park(self, ctx: Any, s: McpSession, out: NeedsConfirmation, name: str, spec: str, version: str,
             arguments: Mapping[str, Any] | None, pin: Pin) -> types.InputRequiredResult | McpCode:  # fmt: skip
        """Ask through ``InputRequiredResult``: the invocation stays parked in the sidecar and
        the question goes back as this call's result; the client asks the human and retries
        the call with the answer and the ``requestState`` (sealed by the SDK's
        ``RequestStateBoundary``, naming a single-use entry of :attr:`_parked`)."""
        if not self.can_ask(ctx):
            return McpCode.ELICITATION_UNSUPPORTED  # no form elicitation: nobody can be asked
        while len(self._parked) >= MAX_PARKED:
            oldest = next(iter(self._parked))
            self.expire(oldest)
        token = secrets.token_urlsafe(32)
        ttl = self.timeout_s
        self._parked[token] = Parked(
            sidecar=s.sidecar, invocation_id=out.invocation_id, digest=out.digest, name=name,
            arguments_sha256=arguments_sha256(arguments or {}), pin=pin, deadline=time.monotonic() + ttl,
        )  # fmt: skip
        asyncio.get_running_loop().call_later(ttl + 1.0, self.expire, token)
        ask = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=question(out, spec, version, self.masker), requested_schema=CONFIRM_SCHEMA
            )
        )
        return types.InputRequiredResult(
            input_requests={CONFIRM_INPUT_KEY: ask},
            request_state=json.dumps({"v": 1, "token": token}, separators=(",", ":")),
        )

    def expire(self, token: str) -> None:
        """Drop a parked confirmation nobody answered (or the oldest past MAX_PARKED) and
        cancel its invocation."""
        p = self._parked.pop(token, None)
        if p is None:
            return
        self.refusals.count(McpCode.CONFIRMATION_TIMEOUT)
        self._spawn(cancel(p.sidecar, p.invocation_id, McpCode.CONFIRMATION_TIMEOUT.value))

    def resume(self, s: McpSession, name: str, arguments: Mapping[str, Any] | None, request_state: str,
               responses: Mapping[str, Any]) -> Resumed:  # fmt: skip
        """The client's retry with the answer: only the parked entry its ``requestState`` names,
        of this session, this tool and these arguments, once."""
        p = self._parked.pop(_state_token(request_state), None)
        if p is None:
            return Resumed(None, McpCode.CONFIRMATION_INVALID)
        same = (
            hmac.compare_digest(p.sidecar.session_id, s.session_id)
            and p.name == name
            and hmac.compare_digest(p.arguments_sha256, arguments_sha256(arguments or {}))
        )
        if not same:  # a continuation used for another session, tool or arguments
            log.warning("confirmation continuation of %s used for another call; cancelled", p.invocation_id)
            return Resumed(p, McpCode.CONFIRMATION_INVALID)
        if time.monotonic() > p.deadline:
            return Resumed(p, McpCode.CONFIRMATION_TIMEOUT)
        if not approved(responses.get(CONFIRM_INPUT_KEY)):
            return Resumed(p, McpCode.CONFIRMATION_DECLINED)
        return Resumed(p, None)

    async def cancel_all(self) -> None:
        """At stop: nobody can answer the parked confirmations any more."""
        while self._parked:
            _, p = self._parked.popitem()
            await cancel(p.sidecar, p.invocation_id, McpCode.CONFIRMATION_TIMEOUT.value)

    def refused(self, code: McpCode) -> types.CallToolResult:
        """The answer to a call whose confirmation did not go through (counted)."""
        self.refusals.count(code)
        return error_result(code, CONFIRM_MESSAGES[code])


def question(out: NeedsConfirmation, spec: str, version: str, masker: Redactor | None = None) -> str:
    """What the human reads: the tool, the normalized arguments, the digest, the expiry. Hidden
    characters, whitespace runs and mixed scripts in the arguments are shown as marks
    (``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``, :func:`callgate.arguments.unitext.visible_json`), each
    secret as the console masks it (``⟦masked <name>⟧``, docs/CONSOLE.md "Secrets are masked";
    ``masker`` None: the secret patterns only). The digest confirmed is the exact arguments'."""
    try:
        args = json.dumps(json.loads(out.normalized_arguments), ensure_ascii=False, indent=2, sort_keys=True)
    except ValueError:
        args = out.normalized_arguments.decode("utf-8", "replace")
    args = (masker or PATTERNS_ONLY).mask(args)[0]
    args = unitext.visible_json(args)
    return (
        f"callgate: allow {spec}@{version} with these arguments?\n{args}\n"
        f"digest: {out.digest}\nexpires: {out.expires_at}"
    )


def approved(answer: Any) -> bool:
    """An accepted form whose ``confirm`` is exactly ``true``; anything else is a no."""
    return (
        isinstance(answer, types.ElicitResult)
        and answer.action == "accept"
        and isinstance(answer.content, dict)
        and answer.content.get("confirm") is True
    )


def input_required(ctx: Any) -> bool:
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


def arguments_sha256(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the RFC 8785 form of arguments as received (sorted JSON if not JCS-able)."""
    try:
        return hashlib.sha256(rfc8785.dumps(dict(arguments))).hexdigest()
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return hashlib.sha256(json.dumps(dict(arguments), sort_keys=True, default=str).encode()).hexdigest()


__all__ = [
    "CONFIRM_INPUT_KEY",
    "CONFIRM_SCHEMA",
    "HEARTBEAT_S",
    "INPUT_REQUIRED_VERSION",
    "MAX_PARKED",
    "REQUEST_STATE_AUDIENCE",
    "Confirmations",
    "Parked",
    "Resumed",
    "approved",
    "arguments_sha256",
    "input_required",
    "question",
]
