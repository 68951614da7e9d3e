"""Stable error codes and the one exception base of callgate.

Every failure callgate reports carries an :class:`ErrorCode`. The code strings are part of the
public contract: they appear in gRPC error details, in structured rejections returned by
``Propose``, in events, and (later) as metric labels. Never rename one; add new ones instead.

The mapping from a code to a gRPC status lives in exactly one place,
:mod:`sidecar.server.status`, and a test checks that every code here is mapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class ErrorCode(str, Enum):
    """Stable, machine-readable error codes (``snake_case`` strings)."""

    # --- request / session errors of the calling runtime
    INVALID_REQUEST = "invalid_request"
    SESSION_NOT_FOUND = "session_not_found"
    INVOCATION_NOT_FOUND = "invocation_not_found"
    TOOLS_NOT_LISTED = "tools_not_listed"
    UNKNOWN_TOOL_VERSION = "unknown_tool_version"

    # --- strict parse (spec 6.3, 6.4 layer 1)
    INVALID_JSON = "invalid_json"
    INVALID_UTF8 = "invalid_utf8"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE_NUMBER = "non_finite_number"
    NUMBER_OVERFLOW = "number_overflow"
    LONE_SURROGATE = "lone_surrogate"
    TRAILING_DATA = "trailing_data"
    NOT_AN_OBJECT = "not_an_object"
    TOO_DEEP = "too_deep"
    TOO_LARGE = "too_large"

    # --- schema validation (6.4 layer 2)
    SCHEMA_VIOLATION = "schema_violation"

    # --- normalization (6.4 layer 3, 6.5)
    NORMALIZATION_FAILED = "normalization_failed"
    NOT_CANONICALIZABLE = "not_canonicalizable"

    # --- authorization (6.6); a deny is a Decision value, these are engine faults
    ENGINE_ERROR = "engine_error"
    ENGINE_NO_DECISION = "engine_no_decision"
    POLICY_EVALUATION_ERROR = "policy_evaluation_error"
    RESOURCE_UNRESOLVED = "resource_unresolved"

    # --- confirmation (6.6)
    CONFIRMATION_NOT_PENDING = "confirmation_not_pending"
    CONFIRMATION_DIGEST_MISMATCH = "confirmation_digest_mismatch"
    CONFIRMATION_EXPIRED = "confirmation_expired"

    # --- state machine (6.2)
    ILLEGAL_TRANSITION = "illegal_transition"
    TERMINAL_STATE = "terminal_state"

    # --- load-time problems (config, ToolSpecs, policies)
    CONFIG_INVALID = "config_invalid"
    TOOLSPEC_INVALID = "toolspec_invalid"
    UNSUPPORTED_FORMAT = "unsupported_format"
    POLICY_INVALID = "policy_invalid"

    # --- infrastructure
    STORE_UNAVAILABLE = "store_unavailable"
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class Violation:
    """One located problem: a JSON pointer into the offending document and a message."""

    pointer: str
    message: str
    keyword: str = ""


class CallgateError(Exception):
    """The one exception base. All data is keyword-only and safe to show to a caller.

    Messages must never contain raw argument values or secrets: they describe *where* and
    *what kind*, not the bytes themselves.
    """

    def __init__(
        self,
        *,
        code: ErrorCode,
        message: str,
        violations: Sequence[Violation] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.violations = tuple(violations)
        self.metadata: dict[str, str] = dict(metadata or {})


class RejectedError(CallgateError):
    """The proposal itself was rejected by a pipeline stage (parse, schema, normalization,
    unknown tool). Recorded on the invocation and returned to the runtime as a structured
    rejection, not as an RPC failure."""


class LoadError(CallgateError):
    """Config, ToolSpec or policy files could not be loaded. ``source`` is ``file:line``
    where known."""

    def __init__(
        self,
        *,
        code: ErrorCode,
        message: str,
        source: str = "",
        violations: Sequence[Violation] = (),
    ) -> None:
        super().__init__(
            code=code, message=message, violations=violations, metadata={"source": source}
        )
        self.source = source

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.code.value}: {self.message}"
