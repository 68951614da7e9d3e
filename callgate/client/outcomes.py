"""What a proposal came to: one frozen type per outcome, each with the model-facing message.

``message`` is the JSON text to send back to the model as the tool call's result, except for
:class:`Allowed`, whose message is the tool's result once it ran (the executor's
``EncodeResult``, or :meth:`Session.result`). Only :class:`Allowed` may be executed; nothing else
carries what an executor needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass


def tool_message(tool_call_id: str, content: dict[str, object]) -> str:
    """A tool message in the sidecar's own shape (docs/RESULT-ENCODING.md): role ``tool``, the
    model's tool call id, the content. Compact JSON in insertion order, byte for byte what the
    TypeScript client writes (``JSON.stringify``); ``tests/data/client-messages.json`` pins both."""
    return json.dumps(
        {"role": "tool", "tool_call_id": tool_call_id, "content": content},
        ensure_ascii=False,
        separators=(",", ":"),
    )


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
    """Parked until a confirmer approves this exact digest (wait with ``wait_confirmed``).
    ``normalized_arguments`` are the exact arguments the digest covers (for a program);
    ``masked_arguments`` the same as a person may be shown them, each secret masked by the sidecar
    (``⟦masked <name>⟧``, a pattern's match as ``⟦masked <pattern> …<last 4>⟧``; docs/CLIENTS.md):
    show a person these, never ``normalized_arguments``. Empty when the answer carried no
    arguments (``omit_normalized_arguments``)."""

    invocation_id: str
    digest: str
    tool_call_id: str
    expires_at: str
    normalized_arguments: bytes
    message: str
    masked_arguments: bytes = b""


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


def denied_message(tool_call_id: str, reasons: tuple[str, ...], error_code: str = "") -> str:
    content: dict[str, object] = {
        "status": "denied",
        "message": "The policy does not allow this call; do not retry it unchanged.",
        "reasons": list(reasons),
    }
    if error_code:
        content["error_code"] = error_code
    return tool_message(tool_call_id, content)


def confirm_message(tool_call_id: str, expires_at: str) -> str:
    return tool_message(
        tool_call_id,
        {
            "status": "needs_confirmation",
            "message": "This call waits for the user's confirmation; it has not run.",
            "expires_at": expires_at,
        },
    )


def rejected_message(tool_call_id: str, code: str, text: str, violations: tuple[tuple[str, str], ...]) -> str:
    return tool_message(
        tool_call_id,
        {
            "status": "rejected",
            "code": code,
            "message": text,
            "violations": [{"pointer": p, "message": m} for p, m in violations],
        },
    )


NOT_LISTED = "unknown_tool_version"
"""The code of a call naming a tool the model was not shown: the sidecar's own code for a
``name@version`` outside the shown set (docs/ERRORS.md), and the MCP gateway's."""

AVAILABLE_MAX = 32
"""At most this many names are offered to the model in a :func:`not_listed` answer."""

NAME_MAX = 100
"""The model's unknown name is echoed back cut to this many characters."""


def not_listed_text(name: str, available: Iterable[str]) -> str:
    """What the model reads when it named a tool it was not shown: the name, the names it may
    use (sorted, at most :data:`AVAILABLE_MAX`), and that nothing ran. The TypeScript client
    writes the same text (``tests/data/client-messages.json``)."""
    shown = sorted(set(available))
    head = ", ".join(shown[:AVAILABLE_MAX]) or "none"
    more = f" and {len(shown) - AVAILABLE_MAX} more" if len(shown) > AVAILABLE_MAX else ""
    cut = name[:NAME_MAX] + ("..." if len(name) > NAME_MAX else "")
    return f'No tool named "{cut}" is listed for this call; available: {head}{more}. Nothing ran.'


def not_listed(tool_call_id: str, name: str, available: Iterable[str]) -> Rejected:
    """The answer to a call of a tool the model was not shown (a hallucinated or stale name),
    made without asking the sidecar: a :class:`Rejected` with the sidecar's code
    ``unknown_tool_version``, no invocation (``invocation_id`` ""), nothing ran."""
    text = not_listed_text(name, available)
    return Rejected("", tool_call_id, NOT_LISTED, (), rejected_message(tool_call_id, NOT_LISTED, text, ()))


def replay_note(tool_call_id: str, state: str) -> str:
    return tool_message(
        tool_call_id,
        {"status": "replayed", "message": "This call was already made; nothing new ran.", "state": state},
    )


__all__ = ["Allowed", "Denied", "NeedsConfirmation", "Outcome", "Pending", "Rejected", "Replayed"]
