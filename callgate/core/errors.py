"""Stable error codes and the one exception base of callgate.

Every failure callgate reports carries an :class:`ErrorCode`. The code strings are part of the
public contract: they appear in gRPC error details, in structured rejections returned by
``Propose``, in events, and (later) as metric labels. Never rename one; add new ones instead.

The mapping from a code to a gRPC status lives in exactly one place,
:mod:`callgate.server.status`, and a test checks that every code here is mapped.
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

    # --- OPA / remote engines: fail-closed denies
    ENGINE_TIMEOUT = "engine_timeout"
    ENGINE_UNAVAILABLE = "engine_unavailable"
    ENGINE_UNDEFINED = "engine_undefined"
    ENGINE_MALFORMED = "engine_malformed"

    # --- idempotency (6.8)
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    IDEMPOTENCY_KEY_REQUIRED = "idempotency_key_required"
    IDEMPOTENCY_KEY_EXPIRED = "idempotency_key_expired"

    # --- execution, commit boundary, retries (6.7, 6.9)
    ATTEMPT_NOT_FOUND = "attempt_not_found"
    ATTEMPT_NOT_ALLOWED = "attempt_not_allowed"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    CREDENTIAL_INVALID = "credential_invalid"
    SECRET_NOT_FOUND = "secret_not_found"
    SECRET_NOT_BOUND = "secret_not_bound"
    SECRET_ALREADY_REDEEMED = "secret_already_redeemed"

    # --- results and loop (6.10, 6.11)
    RESULT_NOT_AVAILABLE = "result_not_available"
    OUTPUT_AFTER_CANCEL = "output_after_cancel"
    BUDGET_EXHAUSTED = "budget_exhausted"

    # --- lifecycle
    NOT_READY = "not_ready"

    # --- infrastructure
    STORE_UNAVAILABLE = "store_unavailable"
    INTERNAL = "internal"


DESCRIPTION: dict[ErrorCode, str] = {
    ErrorCode.INVALID_REQUEST: "A required request field is missing or malformed (ids, subject, time zone).",
    ErrorCode.SESSION_NOT_FOUND: "The session id is unknown.",
    ErrorCode.INVOCATION_NOT_FOUND: "The invocation id is unknown.",
    ErrorCode.TOOLS_NOT_LISTED: "No `ListTools` was recorded for this `model_call_id`: the model cannot have seen the tool.",
    ErrorCode.UNKNOWN_TOOL_VERSION: "`name@version` is not in the set shown for this model call (or changed since). No approximate matching (6.14 row 1).",
    ErrorCode.INVALID_JSON: "The argument bytes are not JSON.",
    ErrorCode.INVALID_UTF8: "The argument bytes are not valid UTF-8.",
    ErrorCode.DUPLICATE_KEY: "An object has the same key twice (after unescaping).",
    ErrorCode.NON_FINITE_NUMBER: "NaN or Infinity literal.",
    ErrorCode.NUMBER_OVERFLOW: "A number overflows (or a non-zero literal underflows) a double.",
    ErrorCode.LONE_SURROGATE: "A `\\uD800`-style escape without its pair.",
    ErrorCode.TRAILING_DATA: "Bytes after the JSON value.",
    ErrorCode.NOT_AN_OBJECT: "Arguments must be a JSON object.",
    ErrorCode.TOO_DEEP: "Nesting deeper than `limits.max_depth`.",
    ErrorCode.TOO_LARGE: "More bytes than `limits.max_argument_bytes`.",
    ErrorCode.SCHEMA_VIOLATION: "JSON Schema 2020-12 validation failed; `violations` carry JSON pointers (6.4 layer 2).",
    ErrorCode.NORMALIZATION_FAILED: "A normalizer could not resolve a value (unrecognized relative date, DST gap) (6.5).",
    ErrorCode.NOT_CANONICALIZABLE: "The value has no RFC 8785 form (integer beyond 2^53-1, lone surrogate).",
    ErrorCode.ENGINE_ERROR: "The policy engine raised or the context is not representable: fail-closed deny.",
    ErrorCode.ENGINE_NO_DECISION: "The engine returned no decision: fail-closed deny.",
    ErrorCode.POLICY_EVALUATION_ERROR: "A policy errored during evaluation, or the request does not conform to the policy schema: fail-closed deny (a skipped erroring `forbid` never yields allow).",
    ErrorCode.RESOURCE_UNRESOLVED: "The ToolSpec's resource template cannot be filled from the normalized arguments: deny.",
    ErrorCode.CONFIRMATION_NOT_PENDING: "Confirm on an invocation that has no pending confirmation (already confirmed, cancelled, never parked).",
    ErrorCode.CONFIRMATION_DIGEST_MISMATCH: "Confirm presented another digest than the parked invocation's; the invocation is cancelled (6.6, 6.11).",
    ErrorCode.CONFIRMATION_EXPIRED: "The confirmation window passed; the invocation is cancelled.",
    ErrorCode.ILLEGAL_TRANSITION: "The requested transition is not an edge of 6.2.",
    ErrorCode.TERMINAL_STATE: "The invocation is in a terminal state.",
    ErrorCode.CONFIG_INVALID: "The TOML config is invalid (load time).",
    ErrorCode.TOOLSPEC_INVALID: "A ToolSpec file is invalid (load time; `file:line`).",
    ErrorCode.UNSUPPORTED_FORMAT: "A ToolSpec schema uses a `format` the validator cannot assert (load time).",
    ErrorCode.POLICY_INVALID: "Policies, schema or entities are invalid (load time; `file:line`).",
    ErrorCode.ENGINE_TIMEOUT: "The remote policy engine (OPA) did not answer in time: fail-closed deny.",
    ErrorCode.ENGINE_UNAVAILABLE: "The remote policy engine could not be reached or answered with an HTTP error: fail-closed deny.",
    ErrorCode.ENGINE_UNDEFINED: "The decision document is undefined (no rule produced it): fail-closed deny.",
    ErrorCode.ENGINE_MALFORMED: "The decision document does not have the contract's shape: fail-closed deny.",
    ErrorCode.IDEMPOTENCY_KEY_REUSED: "The idempotency key was used before with other normalized arguments (6.8 rule 3).",
    ErrorCode.IDEMPOTENCY_KEY_REQUIRED: "A write tool proposed without an idempotency key whose ToolSpec says `without_key: reject` (the default for writes).",
    ErrorCode.IDEMPOTENCY_KEY_EXPIRED: "The key's record is past its retention window and the policy is to reject (6.8 rule 4).",
    ErrorCode.ATTEMPT_NOT_FOUND: "The attempt id is unknown.",
    ErrorCode.ATTEMPT_NOT_ALLOWED: "No attempt may start: wrong state, retry matrix says no, retry budget used, or an attempt is still running.",
    ErrorCode.DEADLINE_EXCEEDED: "The invocation's deadline has passed.",
    ErrorCode.CREDENTIAL_INVALID: "A presented credential failed verification (`metadata.reason` says which check).",
    ErrorCode.SECRET_NOT_FOUND: "No secret of that name is configured.",
    ErrorCode.SECRET_NOT_BOUND: "The secret is not bound to the credential's tool or resource.",
    ErrorCode.SECRET_ALREADY_REDEEMED: "The secret was already released for this attempt (once per attempt).",
    ErrorCode.RESULT_NOT_AVAILABLE: "The invocation has no encoded result (yet), or the page token is unknown.",
    ErrorCode.OUTPUT_AFTER_CANCEL: "Output after cancellation or a terminal state is refused (6.14 row 9).",
    ErrorCode.BUDGET_EXHAUSTED: "A session budget (model calls, tool calls, wall clock, result bytes, external cost) is used up; the loop ends (6.11).",
    ErrorCode.NOT_READY: "The sidecar has no usable policy snapshot yet (readiness).",
    ErrorCode.STORE_UNAVAILABLE: "The store could not durably write; the call fails and no decision is returned.",
    ErrorCode.INTERNAL: "Unexpected internal error (details only in the sidecar log).",
}


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
        super().__init__(code=code, message=message, violations=violations, metadata={"source": source})
        self.source = source

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.code.value}: {self.message}"
