"""What a proposal came to: one frozen type per outcome, each with the model-facing message.

``message`` is the JSON text to send back to the model as the tool call's result, except for
:class:`Allowed`, whose message is the tool's result once it ran (the executor's
``EncodeResult``, or :meth:`Session.result`). Only :class:`Allowed` may be executed; nothing else
carries what an executor needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


def _msg(status: str, **fields: object) -> str:
    return json.dumps({"status": status, **fields}, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Allowed:
    """Authorized and PREPARED: hand ``invocation_id`` to the executor."""

    invocation_id: str
    digest: str
    tool_call_id: str
    normalized_arguments: bytes


@dataclass(frozen=True)
class Denied:
    """The policy denied the call (a fail-closed engine fault is a deny too)."""

    invocation_id: str
    tool_call_id: str
    reasons: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class NeedsConfirmation:
    """Parked until a confirmer approves this exact digest (wait with ``wait_confirmed``)."""

    invocation_id: str
    digest: str
    tool_call_id: str
    expires_at: str
    normalized_arguments: bytes
    message: str


@dataclass(frozen=True)
class Rejected:
    """The proposal itself was refused (parse, schema, normalization, unknown tool): the model
    may correct it; ``violations`` are (JSON pointer, message) pairs, never values."""

    invocation_id: str
    tool_call_id: str
    code: str
    violations: tuple[tuple[str, str], ...]
    message: str


@dataclass(frozen=True)
class Replayed:
    """The idempotency key matched an earlier invocation with the same digest: nothing new ran.
    ``message`` is the original tool message when it was observed, else a status note."""

    invocation_id: str
    tool_call_id: str
    state: str
    message: str


@dataclass(frozen=True)
class Pending:
    """One parked invocation as a confirmer sees it (ListPending): what the user is asked to
    approve is ``arguments`` (the canonical normalized arguments), bound to ``digest``."""

    invocation_id: str
    digest: str
    tool_name: str
    tool_version: str
    tenant: str
    subject: str
    arguments: bytes
    expires_at: str
    reasons: tuple[str, ...]


Outcome = Allowed | Denied | NeedsConfirmation | Rejected | Replayed


def denied_message(reasons: tuple[str, ...]) -> str:
    return _msg("denied", reasons=list(reasons), note="The call was not executed; do not retry it unchanged.")


def confirm_message(expires_at: str) -> str:
    return _msg("pending_confirmation", expires_at=expires_at, note="Waiting for the user's confirmation.")


def rejected_message(code: str, text: str, violations: tuple[tuple[str, str], ...]) -> str:
    return _msg(
        "rejected",
        code=code,
        message=text,
        violations=[{"pointer": p, "message": m} for p, m in violations],
    )


def replay_note(state: str) -> str:
    return _msg("replayed", state=state, note="This call was already made; nothing new ran.")


__all__ = ["Allowed", "Denied", "NeedsConfirmation", "Outcome", "Pending", "Rejected", "Replayed"]
