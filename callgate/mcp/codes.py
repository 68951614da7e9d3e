"""The gateway's own stable codes and their messages (docs/MCP.md, "Codes"), and the count of
refused calls by code. callgate's codes pass through unchanged."""

from __future__ import annotations

from enum import Enum


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


UNKNOWN_TOOL_MESSAGE = "No tool of this name is listed for this session (see tools/list); nothing ran."

PIN_MESSAGES = {
    McpCode.UPSTREAM_NOT_PINNED: "This tool is not routed to a pinned upstream MCP tool; nothing ran.",
    McpCode.UPSTREAM_DEFINITION_CHANGED: (
        "The upstream server changed this tool's definition since it was approved; nothing ran. "
        "An operator must review it and re-pin it (callgate mcp import)."
    ),
}

CONFIRM_MESSAGES = {
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

OUTCOME_UNKNOWN_MESSAGE = (
    "The call was sent but no answer came back; it may or may not have taken effect. Do not retry it blindly."
)


class Refusals:
    """Counts of refused calls by code (read by tests and logged when the gateway stops)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def count(self, code: str | McpCode) -> None:
        key = code.value if isinstance(code, McpCode) else code
        self.counts[key] = self.counts.get(key, 0) + 1


__all__ = [
    "CONFIRM_MESSAGES",
    "OUTCOME_UNKNOWN_MESSAGE",
    "PIN_MESSAGES",
    "UNKNOWN_TOOL_MESSAGE",
    "McpCode",
    "Refusals",
]
