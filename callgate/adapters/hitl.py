"""LangChain's human-in-the-loop shapes, read and written without importing LangChain.

Interrupt payloads (what a person's UI is given):

- ``HITLFormat.LANGCHAIN``: ``HumanInTheLoopMiddleware``'s request, ``{"action_requests":
  [{"name", "args", "description"}], "review_configs": [{"action_name", "allowed_decisions"}]}``
  (plus a ``"callgate"`` member with the invocation, digest and expiry of each action);
- ``HITLFormat.AGENT_INBOX``: Agent Inbox's list of ``{"action_request": {"action", "args"},
  "config": {"allow_accept", "allow_edit", "allow_respond", "allow_ignore"}, "description"}``
  (each with its ``"callgate"`` member).

The ``args`` and the ``description`` are the sidecar's masked copy of the normalized arguments
(``masked_arguments``): each configured secret shown by name, each secret pattern's match with its
last four characters (docs/CONSOLE.md "Secrets are masked"); the ``digest`` is the exact
arguments', and what runs holds the real values.

Resume values (:func:`parse_decisions`, whichever payload was sent), one decision per action, in
order:

- LangChain: ``{"decisions": [{"type": "approve"}, {"type": "edit", "edited_action": {"name",
  "args"}}, {"type": "reject", "message": ...}, {"type": "respond", "message": ...}]}``;
- Agent Inbox: ``[{"type": "accept"}, {"type": "edit", "args": {"action", "args"}},
  {"type": "ignore"}, {"type": "response", "args": "text for the model"}]``;
- a bare decision (``{"type": "approve"}``) when one action is asked, and the adapter's earlier
  ``True`` / ``False`` / ``{"approve": bool, "by", "digest", "reason"}`` for every action.

Each decision may carry ``"by"`` (who decided, a callgate extension). Anything else, or a count
that does not match, raises :class:`InvalidResume` (code ``invalid_resume``): nothing runs and
nothing is decided (fail closed); the adapter asks again with the error in each action's
``callgate.error``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from callgate.client import CallgateClientError, MalformedAnswer
from callgate.client.visible import visible_json


class HITLFormat(Enum):
    """The interrupt payload's shape."""

    LANGCHAIN = "langchain"
    AGENT_INBOX = "agent_inbox"


class Kind(Enum):
    """What the person decided for one action."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    RESPOND = "respond"


class InvalidResume(CallgateClientError):
    """A resume value that is none of the shapes above: nothing runs, nothing is decided."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_resume")


@dataclass(frozen=True)
class Decision:
    """One decision: for ``EDIT`` the edited tool name ("" = the same) and arguments; for
    ``REJECT`` / ``RESPOND`` the message for the model; ``by`` and ``digest`` when sent."""

    kind: Kind
    tool: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    by: str = ""
    digest: str = ""


@dataclass(frozen=True)
class Ask:
    """One action a person is asked about."""

    name: str
    """The name the model called (the legal name)."""
    arguments: Any
    """The normalized arguments the digest covers, as a person may see them: each secret in
    them masked by the sidecar (:func:`shown_arguments`); the digest is the exact arguments'."""
    tool: str
    tool_call_id: str
    invocation_id: str
    digest: str
    expires_at: str


_LANGCHAIN = {"approve": Kind.APPROVE, "edit": Kind.EDIT, "reject": Kind.REJECT, "respond": Kind.RESPOND}
_INBOX = {"accept": Kind.APPROVE, "edit": Kind.EDIT, "ignore": Kind.REJECT, "response": Kind.RESPOND}
IGNORED = "The user chose to skip this call; it was not executed."


def _text(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidResume(f"{where} must be a string")
    return value


def _edit(action: object, name_key: str, where: str) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(action, Mapping) or not isinstance(action.get("args"), Mapping):
        raise InvalidResume(f"{where} must carry the edited arguments as an object")
    return _text(action.get(name_key), f"{where}.{name_key}"), dict(action["args"])


def _one(d: object, where: str) -> Decision:
    if not isinstance(d, Mapping) or not isinstance(d.get("type"), str):
        raise InvalidResume(f"{where} must be an object with a 'type'")
    t, by = d["type"], _text(d.get("by"), f"{where}.by")
    if t == "edit" and "edited_action" not in d:  # Agent Inbox's edit: {"args": {"action", "args"}}
        tool, args = _edit(d.get("args"), "action", f"{where}.args")
        return Decision(Kind.EDIT, tool, args, by=by)
    if t in _LANGCHAIN:  # HumanInTheLoopMiddleware's decisions
        kind = _LANGCHAIN[t]
        if kind is Kind.EDIT:
            tool, args = _edit(d.get("edited_action"), "name", f"{where}.edited_action")
            return Decision(kind, tool, args, by=by)
        return Decision(kind, message=_text(d.get("message"), f"{where}.message"), by=by)
    if t in _INBOX:  # Agent Inbox's HumanResponse
        kind = _INBOX[t]
        if kind is Kind.RESPOND:
            return Decision(kind, message=_text(d.get("args"), f"{where}.args"), by=by)
        return Decision(kind, message=IGNORED if t == "ignore" else "", by=by)
    raise InvalidResume(f"{where}.type {t!r} is none of approve/edit/reject/respond/accept/ignore/response")


def _legacy(value: object) -> Decision | None:
    if value is True or value == "approve":
        return Decision(Kind.APPROVE)
    if value is False or value == "reject":
        return Decision(Kind.REJECT)
    if isinstance(value, Mapping) and isinstance(value.get("approve"), bool):
        by = _text(value.get("by"), "by")
        if value["approve"]:
            return Decision(Kind.APPROVE, by=by, digest=_text(value.get("digest"), "digest"))
        return Decision(Kind.REJECT, message=_text(value.get("reason"), "reason"), by=by)
    return None


def parse_decisions(value: object, count: int) -> tuple[Decision, ...]:
    """The ``count`` decisions of a resume value, in the order of the actions asked."""
    if isinstance(value, Mapping) and "decisions" in value:
        items = value["decisions"]
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise InvalidResume("decisions must be a list")
    elif isinstance(value, list):
        items = value
    elif isinstance(value, Mapping) and "type" in value:
        items = [value]
    else:
        legacy = _legacy(value)
        if legacy is None:
            raise InvalidResume("the resume value is no decision shape callgate knows")
        return (legacy,) * count
    if len(items) != count:
        raise InvalidResume(f"{len(items)} decisions for {count} actions")
    return tuple(_one(d, f"decisions[{i}]") for i, d in enumerate(items))


def shown_arguments(masked: bytes, normalized: bytes) -> Any:
    """The arguments a person is shown: the sidecar's masked copy of the normalized arguments
    (``masked_arguments``: a configured secret as ``⟦masked <name>⟧``, a secret pattern's match as
    ``⟦masked <pattern> …<last 4>⟧``, docs/CONSOLE.md "Secrets are masked"), parsed. Fails closed
    (:class:`~callgate.client.MalformedAnswer`) when the sidecar sent none for arguments it has,
    or sent something that is not JSON: never the exact arguments in their place."""
    if not masked and normalized:
        raise MalformedAnswer("a parked invocation without its masked arguments")
    try:
        return json.loads(masked or b"{}")
    except ValueError:
        raise MalformedAnswer("masked arguments that are not JSON") from None


def describe(a: Ask, how: str) -> str:
    """What the person reads: the tool, the arguments the digest covers (secrets masked,
    :func:`shown_arguments`; hidden characters, whitespace runs and letters of another script as
    marks, :mod:`callgate.client.visible`), the digest and the expiry."""
    args = visible_json(json.dumps(a.arguments, ensure_ascii=False, indent=2, sort_keys=True))
    return (
        f"callgate: {a.tool} needs your confirmation ({how}); digest {a.digest}, until {a.expires_at}.\n"
        f"Arguments:\n{args}"
    )


def _callgate(a: Ask, how: str, error: str) -> dict[str, str]:
    out = {
        "tool": a.tool, "tool_call_id": a.tool_call_id, "invocation_id": a.invocation_id,
        "digest": a.digest, "expires_at": a.expires_at, "confirmation": how,
    }  # fmt: skip
    if error:
        out["error"] = error
    return out


def request(asks: Sequence[Ask], fmt: HITLFormat, how: str, error: str = "") -> object:
    """The interrupt payload for ``asks``. ``how`` says who confirms: ``"resume"`` (an approve
    confirms) or ``"console"`` (an approve waits for the console's decision); ``error``: why the
    previous resume value was refused (asked again)."""
    if fmt is HITLFormat.AGENT_INBOX:
        return [
            {
                "action_request": {"action": a.name, "args": a.arguments},
                "config": {
                    "allow_accept": True,
                    "allow_edit": True,
                    "allow_respond": True,
                    "allow_ignore": True,
                },
                "description": describe(a, how),
                "callgate": _callgate(a, how, error),
            }
            for a in asks
        ]
    return {
        "action_requests": [
            {"name": a.name, "args": a.arguments, "description": describe(a, how)} for a in asks
        ],
        "review_configs": [
            {"action_name": a.name, "allowed_decisions": ["approve", "edit", "reject", "respond"]}
            for a in asks
        ],
        "callgate": [_callgate(a, how, error) for a in asks],
    }


__all__ = [
    "IGNORED",
    "Ask",
    "Decision",
    "HITLFormat",
    "InvalidResume",
    "Kind",
    "describe",
    "parse_decisions",
    "request",
    "shown_arguments",
]
