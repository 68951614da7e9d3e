"""Pure helpers shared by the sync and asyncio clients: requests, keys, trace, answers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from callgate.client.errors import CallgateClientError, MalformedAnswer
from callgate.client.outcomes import (
    Allowed,
    Denied,
    NeedsConfirmation,
    Outcome,
    Pending,
    Rejected,
    Replayed,
    confirm_message,
    denied_message,
    rejected_message,
    replay_note,
)
from callgate.client.tools import Tool, ToolNames, parse_tool, strip_nulls_for_strict
from callgate.gen.v1 import callgate_pb2 as pb


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model produced it: its id, the (legal) name it used, the argument
    bytes exactly as generated."""

    id: str
    name: str
    arguments: bytes | str


def idempotency_key(session_id: str, model_call_id: str, tool_call_id: str, tool_name: str) -> str:
    """Derived, not random: the same (session, model call, tool call id, tool name) gives the same
    key after a runtime restart, so a re-sent proposal replays instead of running twice (6.8)."""
    material = "\x00".join((session_id, model_call_id, tool_call_id, tool_name)).encode()
    return "cgk1-" + hashlib.sha256(material).hexdigest()[:40]


def trace_metadata(traceparent: str | None = None) -> tuple[tuple[str, str], ...]:
    """``traceparent`` metadata: the explicit one, else the caller's OpenTelemetry context when
    opentelemetry is installed and a span is active; else none (the sidecar starts a trace)."""
    if traceparent:
        return (("traceparent", traceparent),)
    try:
        from opentelemetry import propagate
    except ImportError:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    value = carrier.get("traceparent")
    return (("traceparent", value),) if value else ()


def parse_tools(resp: pb.ListToolsResponse) -> list[Tool]:
    return [
        parse_tool(
            t.name,
            t.version,
            t.description,
            t.input_schema_json,
            t.side_effect_class,
            t.spec_digest,
            t.output_schema_json,
        )
        for t in resp.tools
    ]


def propose_request(
    session_id: str, model_call_id: str, call: ToolCall, names: ToolNames, tools: dict[tuple[str, str], Tool]
) -> pb.ProposeRequest:
    # a lone surrogate (JSON's "\ud800" decoded) stays in the bytes: the sidecar refuses them
    raw = (
        call.arguments.encode("utf-8", "surrogatepass") if isinstance(call.arguments, str) else call.arguments
    )
    resolved = names.resolve(call.name)
    name, version = resolved if resolved is not None else (call.name, "")
    tool = tools.get((name, version))
    if tool is not None:
        raw = strip_nulls_for_strict(raw, tool.input_schema)
    return pb.ProposeRequest(
        session_id=session_id,
        model_call_id=model_call_id,
        proposal_id=call.id,
        tool_name=name,
        tool_version=version,
        arguments=raw,
        idempotency_key=idempotency_key(session_id, model_call_id, call.id, name),
    )


def prepare(
    session_id: str, model_call_id: str, call: ToolCall, names: ToolNames, tools: dict[tuple[str, str], Tool]
) -> pb.ProposeRequest:
    """The ProposeRequest of ``call`` for the current model call (``Session.prepare``)."""
    if not model_call_id:
        raise CallgateClientError("call tools() for this model call first", code="tools_not_listed")
    return propose_request(session_id, model_call_id, call, names, tools)


def find_request(
    session_id: str, model_call_id: str, call_id: str, name: str, names: ToolNames
) -> pb.FindInvocationRequest:
    """The ``FindInvocation`` of the proposal :func:`prepare` made for tool call ``call_id`` of
    ``model_call_id`` (``name``: the legal name the model used or the callgate name): the same
    tool, version and derived idempotency key."""
    if not model_call_id:
        raise CallgateClientError("call tools() for this model call first", code="tools_not_listed")
    resolved = names.resolve(name) or next((r for r in names.by_legal.values() if r[0] == name), None)
    if resolved is None:
        raise CallgateClientError(f"{name}: the session does not list this tool", code="unknown_tool")
    tool, version = resolved
    return pb.FindInvocationRequest(
        session_id=session_id,
        tool_name=tool,
        tool_version=version,
        idempotency_key=idempotency_key(session_id, model_call_id, call_id, tool),
    )


def own(req: pb.ProposeRequest, session_id: str) -> pb.ProposeRequest:
    """``req`` if it is a proposal of this session (``Session.propose_prepared``)."""
    if req.session_id != session_id:
        raise CallgateClientError("a proposal of another session", code="invalid_request")
    return req


def outcome_of(resp: pb.ProposeResponse, tool_call_id: str) -> Outcome:
    """The typed outcome of an answer; anything inconsistent is :class:`MalformedAnswer`, never
    an :class:`Allowed`."""
    if not resp.invocation_id:
        raise MalformedAnswer("answer without an invocation id")
    state = pb.State.Name(resp.state) if resp.state in pb.State.values() else ""
    if resp.idempotent_replay:
        text = (
            resp.replayed_message.decode("utf-8", "replace")
            if resp.replayed_message
            else replay_note(tool_call_id, state)
        )
        return Replayed(resp.invocation_id, tool_call_id, state, text)
    if resp.HasField("rejection") and resp.rejection.code:
        r = resp.rejection
        violations = tuple((v.pointer, v.message) for v in r.violations)
        return Rejected(
            resp.invocation_id,
            tool_call_id,
            r.code,
            violations,
            rejected_message(tool_call_id, r.code, r.message, violations),
        )
    if not resp.HasField("decision"):
        raise MalformedAnswer("answer with neither a decision nor a rejection")
    effect = resp.decision.effect
    reasons = tuple(r.code for r in resp.decision.reasons)
    if effect == pb.DENY or state == "AUTHORIZATION_REJECTED":
        return Denied(
            resp.invocation_id,
            tool_call_id,
            reasons,
            denied_message(tool_call_id, reasons, resp.decision.error_code),
        )
    if effect == pb.CONFIRM and state == "AUTHORIZED":
        if not resp.digest:
            raise MalformedAnswer("confirmation without a digest")
        return NeedsConfirmation(
            resp.invocation_id,
            resp.digest,
            tool_call_id,
            resp.confirmation_expires_at,
            resp.normalized_arguments,
            confirm_message(tool_call_id, resp.confirmation_expires_at),
            resp.masked_arguments,
        )
    if effect == pb.ALLOW and state == "PREPARED" and resp.digest:
        return Allowed(resp.invocation_id, resp.digest, tool_call_id, resp.normalized_arguments)
    raise MalformedAnswer(
        f"decision {pb.Effect.Name(effect) if effect in pb.Effect.values() else effect} "
        f"with state {state or resp.state}"
    )


def pending_of(p: pb.PendingConfirmation) -> Pending:
    if not p.invocation_id or not p.digest:
        raise MalformedAnswer("a pending confirmation without an invocation id or digest")
    return Pending(
        p.invocation_id,
        p.digest,
        p.tool_name,
        p.tool_version,
        p.subject.tenant,
        p.subject.id,
        p.normalized_arguments,
        p.expires_at,
        tuple(r.code for r in p.reasons),
    )


def parked(inv: pb.Invocation, tool_call_id: str = "") -> NeedsConfirmation | None:
    """The :class:`NeedsConfirmation` of an invocation still waiting for a confirmer (AUTHORIZED
    with a confirmation window), else None."""
    if inv.state != pb.AUTHORIZED or not inv.confirmation_expires_at:
        return None
    if not inv.digest:
        raise MalformedAnswer("a parked invocation without a digest")
    return NeedsConfirmation(
        inv.invocation_id,
        inv.digest,
        tool_call_id,
        inv.confirmation_expires_at,
        inv.normalized_arguments,
        confirm_message(tool_call_id, inv.confirmation_expires_at),
        inv.masked_arguments,
    )


PENDING_PAGES_MAX = 1000
"""``list_pending`` reads at most this many pages (a token that never ends is malformed)."""


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True).encode()
