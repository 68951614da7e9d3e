"""Stable error codes, the one exception type and its named constructors.

Every failure callgate reports carries an :class:`ErrorCode`. The code strings are part of the
public contract: they appear in gRPC error details, in structured rejections returned by
``Propose``, in events, and (later) as metric labels. Never rename one; add new ones instead.

Who a code is for (the model, in an OK ``Propose`` answer, or the runtime / an operator, as a
gRPC error), its gRPC status and whether it is final or retryable live in exactly one table,
:data:`callgate.server.status.RULES` (the rule is in that module's docstring); tests check that
every code here is in it (``tests/test_codes.py``).

Errors are built with the named constructors below, one per raised code, grouped by family (the
model is OPA's ``topdown/errors.go``: one error type, named constructors), never inline as
``CallgateError(code=..., message=...)``. Each constructor returns the right class::

    CallgateError                      the one base: code, message, violations, metadata
    |
    +-- request / session              invalid_request, session_not_found,
    |                                  invocation_not_found, tools_not_listed,
    |                                  unknown_tool_version
    +-- RejectedError                  a pipeline stage refused the proposal (a structured
    |   |                              rejection, not an RPC failure)
    |   +-- parse (6.3, 6.4 layer 1)   invalid_json, invalid_utf8, duplicate_key,
    |   |                              non_finite_number, number_overflow, lone_surrogate,
    |   |                              trailing_data, not_an_object, too_deep, too_large
    |   +-- schema (6.4 layer 2)       schema_violation
    |   +-- normalization (6.5)        normalization_failed, not_canonicalizable,
    |                                  decimal_invalid, text_refused
    +-- engine faults (6.6)            resource_unresolved (the other engine codes are
    |                                  fail-closed Decision values, not exceptions)
    +-- confirmation (6.6)             confirmation_not_pending,
    |                                  confirmation_digest_mismatch, confirmation_expired
    +-- state machine (6.2)            illegal_transition, terminal_state
    +-- LoadError (load time)          config_invalid, toolspec_invalid,
    |                                  unsupported_format, policy_invalid
    +-- idempotency (6.8)              idempotency_key_reused, idempotency_key_required,
    |                                  idempotency_key_expired
    +-- execution (6.7, 6.9)           attempt_not_found, attempt_not_allowed,
    |                                  deadline_exceeded, credential_invalid,
    |                                  secret_not_found, secret_not_bound,
    |                                  secret_already_redeemed,
    |                                  reconcile_not_allowed, reconcile_conflict
    +-- results and loop (6.10, 6.11)  result_not_available, output_after_cancel,
    |                                  budget_exhausted, result_schema_invalid
    +-- lifecycle                      not_ready
    +-- admission (overload)           overloaded, deadline_too_short (with a retry hint)
    +-- infrastructure                 store_unavailable, internal

Messages are shown to callers: they say *where* and *what kind*, never the argument bytes or a
secret. A constructor with a default message is for the places that all say the same thing.
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
    DECIMAL_INVALID = "decimal_invalid"
    TEXT_REFUSED = "text_refused"

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
    RECONCILE_NOT_ALLOWED = "reconcile_not_allowed"
    RECONCILE_CONFLICT = "reconcile_conflict"

    # --- results and loop (6.10, 6.11)
    RESULT_NOT_AVAILABLE = "result_not_available"
    OUTPUT_AFTER_CANCEL = "output_after_cancel"
    BUDGET_EXHAUSTED = "budget_exhausted"
    RESULT_SCHEMA_INVALID = "result_schema_invalid"

    # --- lifecycle
    NOT_READY = "not_ready"

    # --- admission under overload (server)
    OVERLOADED = "overloaded"
    DEADLINE_TOO_SHORT = "deadline_too_short"

    # --- infrastructure
    STORE_UNAVAILABLE = "store_unavailable"
    INTERNAL = "internal"


DESCRIPTION: dict[ErrorCode, str] = {
    ErrorCode.INVALID_REQUEST: "A required request field is missing or malformed (ids, subject, time zone).",
    ErrorCode.SESSION_NOT_FOUND: "The session id is unknown.",
    ErrorCode.INVOCATION_NOT_FOUND: "The invocation id is unknown, or (GetInvocation, GetResult, Cancel) it is not the calling session's: both answer alike.",
    ErrorCode.TOOLS_NOT_LISTED: "No `ListTools` was recorded for this `model_call_id`: the model cannot have seen the tool. The refusal is recorded (PARSE_REJECTED) and `Propose` fails with it.",
    ErrorCode.UNKNOWN_TOOL_VERSION: "`name@version` is not in the set shown for this model call (or changed since). No approximate matching (6.14 row 1).",
    ErrorCode.INVALID_JSON: "The argument bytes are not JSON.",
    ErrorCode.INVALID_UTF8: "The argument bytes are not valid UTF-8.",
    ErrorCode.DUPLICATE_KEY: "An object has the same key twice (after unescaping).",
    ErrorCode.NON_FINITE_NUMBER: "NaN or Infinity literal.",
    ErrorCode.NUMBER_OVERFLOW: "A number overflows (or a non-zero literal underflows) a double, or a literal has more precision than a double holds (`100.0000000000000000001` would read as 100).",
    ErrorCode.LONE_SURROGATE: "A `\\uD800`-style escape without its pair.",
    ErrorCode.TRAILING_DATA: "Bytes after the JSON value.",
    ErrorCode.NOT_AN_OBJECT: "Arguments must be a JSON object.",
    ErrorCode.TOO_DEEP: "Nesting deeper than `limits.max_depth`.",
    ErrorCode.TOO_LARGE: "More bytes than `limits.max_argument_bytes`.",
    ErrorCode.SCHEMA_VIOLATION: "JSON Schema 2020-12 validation failed, or the arguments do not fit the Cedar schema's context of the tool's hand-declared action; `violations` carry JSON pointers (6.4 layer 2).",
    ErrorCode.NORMALIZATION_FAILED: "A normalizer could not resolve a value (unrecognized relative date, DST gap) (6.5).",
    ErrorCode.NOT_CANONICALIZABLE: "The value has no RFC 8785 form (integer beyond 2^53-1, lone surrogate).",
    ErrorCode.DECIMAL_INVALID: "An amount under a `decimal` normalizer is not a decimal, has more places than its declared scale (never rounded) or is out of range (docs/NORMALIZATION.md).",
    ErrorCode.TEXT_REFUSED: "An identifier argument (the ToolSpec's `text_policy`, by default ids, paths, e-mail addresses, URLs and resource-template names) holds hidden characters (default-ignorable, bidi controls) or mixes scripts (UTS #39); each violation names its pointer (docs/POLICIES.md).",
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
    ErrorCode.IDEMPOTENCY_KEY_REUSED: "The idempotency key was used before with other normalized arguments (6.8 rule 3). The refusal is recorded (VALIDATION_REJECTED) and `Propose` fails with it: use a new key.",
    ErrorCode.IDEMPOTENCY_KEY_REQUIRED: "A write tool proposed without an idempotency key whose ToolSpec says `without_key: reject` (the default for writes). The refusal is recorded (VALIDATION_REJECTED) and `Propose` fails with it: supply a key.",
    ErrorCode.IDEMPOTENCY_KEY_EXPIRED: "The key's record is past its retention window and the policy is to reject (6.8 rule 4). The refusal is recorded (VALIDATION_REJECTED) and `Propose` fails with it: use a new key.",
    ErrorCode.ATTEMPT_NOT_FOUND: "The attempt id is unknown.",
    ErrorCode.ATTEMPT_NOT_ALLOWED: "No attempt may start: wrong state, retry matrix says no, retry budget used, or an attempt is still running.",
    ErrorCode.DEADLINE_EXCEEDED: "The invocation's deadline has passed.",
    ErrorCode.CREDENTIAL_INVALID: "A presented credential failed verification (`metadata.reason` says which check).",
    ErrorCode.SECRET_NOT_FOUND: "No secret of that name is configured.",
    ErrorCode.SECRET_NOT_BOUND: "The secret is not bound to the credential's tool or resource.",
    ErrorCode.SECRET_ALREADY_REDEEMED: "The secret was already released for this attempt (once per attempt).",
    ErrorCode.RECONCILE_NOT_ALLOWED: "`Reconcile` on an invocation that is not OUTCOME_UNKNOWN and was never reconciled: only an unknown outcome is reconciled (6.7).",
    ErrorCode.RECONCILE_CONFLICT: "`Reconcile` with a finding (or external resource id) that contradicts the one already recorded; the first finding stands.",
    ErrorCode.RESULT_NOT_AVAILABLE: "The invocation has no encoded result yet (retry later), or the page token is unknown (final).",
    ErrorCode.OUTPUT_AFTER_CANCEL: "No tool message after a cancel (6.14 row 9): before the commit boundary nothing ran; after it the result is recorded but withheld from the model (6.12).",
    ErrorCode.BUDGET_EXHAUSTED: "A session budget (model calls, tool calls, wall clock, result bytes, external cost) is used up; the loop ends (6.11).",
    ErrorCode.RESULT_SCHEMA_INVALID: "The tool's result does not conform to its ToolSpec's `output_schema` (or is not JSON): the side effect is recorded as it happened, the result is withheld from the model, whose tool message is an error with this code (no values, no pointers); the event names the violated pointers (6.10).",
    ErrorCode.NOT_READY: "The sidecar has no usable policy snapshot yet (readiness).",
    ErrorCode.OVERLOADED: "Refused at admission: the listener's adaptive concurrency limit is reached, so the call could not be served within the latency target; nothing was recorded. Retry after the hint (`RetryInfo`, `grpc-retry-pushback-ms`, `metadata.retry_after_ms`), with backoff.",
    ErrorCode.DEADLINE_TOO_SHORT: "Refused at admission: the call's gRPC deadline is shorter than the current expected service time; nothing was recorded. Retry with a longer deadline or after the hint.",
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

    def restated(self, message: str) -> CallgateError:
        """The same code as a plain :class:`CallgateError` with another message (violations and
        metadata dropped), e.g. a parse error of a result value reported as ``result value: ...``."""
        return CallgateError(code=self.code, message=message)


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

    def located(self, source: str, violations: Sequence[Violation] | None = None) -> LoadError:
        """The same error at another ``source`` (``file:line``), optionally with other
        violations (e.g. pointers prefixed by the enclosing document's path)."""
        return LoadError(
            code=self.code,
            message=self.message,
            source=source,
            violations=self.violations if violations is None else violations,
        )


# =============================================================================================
# Named constructors, by family (see the module docstring). Each returns, never raises.
# =============================================================================================


# --- request / session errors of the calling runtime -----------------------------------------
def invalid_request(message: str) -> CallgateError:
    """A required request field is missing or malformed (``invalid_request``)."""
    return CallgateError(code=ErrorCode.INVALID_REQUEST, message=message)


def session_not_found(message: str = "unknown session_id") -> CallgateError:
    """The session id is unknown (``session_not_found``)."""
    return CallgateError(code=ErrorCode.SESSION_NOT_FOUND, message=message)


def invocation_not_found(message: str = "unknown invocation_id") -> CallgateError:
    """The invocation id is unknown (``invocation_not_found``)."""
    return CallgateError(code=ErrorCode.INVOCATION_NOT_FOUND, message=message)


def tools_not_listed(
    message: str = "no ListTools was recorded for this model_call_id; the model cannot have seen this tool",
) -> CallgateError:
    """No ``ListTools`` was recorded for the model call (``tools_not_listed``)."""
    return CallgateError(code=ErrorCode.TOOLS_NOT_LISTED, message=message)


def unknown_tool_version(message: str) -> CallgateError:
    """``name@version`` is not in the shown set, or changed (``unknown_tool_version``)."""
    return CallgateError(code=ErrorCode.UNKNOWN_TOOL_VERSION, message=message)


def refused_for_runtime(
    code: ErrorCode,
    message: str,
    *,
    invocation_id: str,
    state: str,
    violations: Sequence[Violation] = (),
) -> CallgateError:
    """A proposal refused for a reason only the runtime can fix (``tools_not_listed``,
    ``idempotency_key_*``: the rule in :mod:`callgate.server.status`). The refusal was recorded
    like any other; it is raised as a call error whose metadata names the recorded invocation
    (``invocation_id``, ``state``)."""
    return CallgateError(
        code=code,
        message=message,
        violations=violations,
        metadata={"invocation_id": invocation_id, "state": state},
    )


# --- strict parse (6.3, 6.4 layer 1): RejectedError --------------------------------------------
def _parse_rejection(
    code: ErrorCode, message: str, pointer: str, position: Mapping[str, str] | None
) -> RejectedError:
    """A parse rejection. ``position`` (``offset``/``line``/``column`` of the offending byte, or
    an empty mapping when there is none) goes to the metadata and, with a line, to the message;
    the violation is kept when there is a ``pointer`` or no position at all."""
    where = (
        f" at line {position['line']}, column {position['column']}" if position and "line" in position else ""
    )
    # Python's decoder ends some messages in " at" ("Unterminated string starting at"): the
    # position says where, once
    head = message.removesuffix(" at") if where else message
    return RejectedError(
        code=code,
        message=head + where,
        violations=[Violation(pointer=pointer, message=message, keyword=code.value)]
        if pointer or not position
        else [],
        metadata=position or {},
    )


def invalid_json(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """The bytes are not JSON (``invalid_json``)."""
    return _parse_rejection(ErrorCode.INVALID_JSON, message, pointer, position)


def invalid_utf8(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """The bytes are not valid UTF-8 (``invalid_utf8``)."""
    return _parse_rejection(ErrorCode.INVALID_UTF8, message, pointer, position)


def duplicate_key(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """An object has the same key twice (``duplicate_key``)."""
    return _parse_rejection(ErrorCode.DUPLICATE_KEY, message, pointer, position)


def non_finite_number(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """A NaN or Infinity literal (``non_finite_number``)."""
    return _parse_rejection(ErrorCode.NON_FINITE_NUMBER, message, pointer, position)


def number_overflow(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """A number overflows (or underflows) a double (``number_overflow``)."""
    return _parse_rejection(ErrorCode.NUMBER_OVERFLOW, message, pointer, position)


def lone_surrogate(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """A surrogate escape without its pair (``lone_surrogate``)."""
    return _parse_rejection(ErrorCode.LONE_SURROGATE, message, pointer, position)


def trailing_data(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """Bytes after the JSON value (``trailing_data``)."""
    return _parse_rejection(ErrorCode.TRAILING_DATA, message, pointer, position)


def not_an_object(
    message: str, *, pointer: str = "", position: Mapping[str, str] | None = None
) -> RejectedError:
    """The arguments are not a JSON object (``not_an_object``)."""
    return _parse_rejection(ErrorCode.NOT_AN_OBJECT, message, pointer, position)


def too_deep(message: str, *, pointer: str = "", position: Mapping[str, str] | None = None) -> RejectedError:
    """Nesting deeper than the limit (``too_deep``)."""
    return _parse_rejection(ErrorCode.TOO_DEEP, message, pointer, position)


def too_large(message: str, *, pointer: str = "", position: Mapping[str, str] | None = None) -> RejectedError:
    """More bytes than the limit (``too_large``)."""
    return _parse_rejection(ErrorCode.TOO_LARGE, message, pointer, position)


# --- schema validation (6.4 layer 2) and normalization (6.4 layer 3, 6.5): RejectedError -------
def schema_violation(message: str, violations: Sequence[Violation]) -> RejectedError:
    """JSON Schema validation failed; ``violations`` carry the pointers (``schema_violation``)."""
    return RejectedError(code=ErrorCode.SCHEMA_VIOLATION, message=message, violations=violations)


def normalization_failed(message: str, violations: Sequence[Violation]) -> RejectedError:
    """A normalizer could not resolve a value (``normalization_failed``)."""
    return RejectedError(code=ErrorCode.NORMALIZATION_FAILED, message=message, violations=violations)


def decimal_invalid(message: str, violations: Sequence[Violation]) -> RejectedError:
    """An amount is not a decimal, too precise for its scale or out of range (``decimal_invalid``)."""
    return RejectedError(code=ErrorCode.DECIMAL_INVALID, message=message, violations=violations)


def text_refused(message: str, violations: Sequence[Violation]) -> RejectedError:
    """An identifier hides characters or mixes scripts (``text_refused``, issue 33)."""
    return RejectedError(code=ErrorCode.TEXT_REFUSED, message=message, violations=violations)


def not_canonicalizable(message: str, violations: Sequence[Violation]) -> RejectedError:
    """The value has no RFC 8785 form (``not_canonicalizable``)."""
    return RejectedError(code=ErrorCode.NOT_CANONICALIZABLE, message=message, violations=violations)


# --- authorization (6.6): engine faults are Decision values; this one is raised ---------------
def resource_unresolved(message: str) -> CallgateError:
    """The resource template cannot be filled from the arguments (``resource_unresolved``)."""
    return CallgateError(code=ErrorCode.RESOURCE_UNRESOLVED, message=message)


# --- confirmation (6.6) -------------------------------------------------------------------------
def confirmation_not_pending(message: str = "invocation has no pending confirmation") -> CallgateError:
    """Confirm on an invocation with no pending confirmation (``confirmation_not_pending``)."""
    return CallgateError(code=ErrorCode.CONFIRMATION_NOT_PENDING, message=message)


def confirmation_digest_mismatch(
    message: str = "digest does not match the parked invocation; it was cancelled, propose again",
) -> CallgateError:
    """Confirm presented another digest; the invocation is cancelled (``confirmation_digest_mismatch``)."""
    return CallgateError(code=ErrorCode.CONFIRMATION_DIGEST_MISMATCH, message=message)


def confirmation_expired(message: str = "the confirmation window has passed") -> CallgateError:
    """The confirmation window passed (``confirmation_expired``)."""
    return CallgateError(code=ErrorCode.CONFIRMATION_EXPIRED, message=message)


# --- state machine (6.2) ------------------------------------------------------------------------
def illegal_transition(
    message: str, *, from_state: str | None = None, to_state: str | None = None
) -> CallgateError:
    """The transition is not an edge of 6.2 (``illegal_transition``); the states, when given,
    go to the metadata as ``from`` and ``to``."""
    metadata = {}
    if from_state is not None:
        metadata["from"] = from_state
    if to_state is not None:
        metadata["to"] = to_state
    return CallgateError(code=ErrorCode.ILLEGAL_TRANSITION, message=message, metadata=metadata)


def terminal_state(message: str, *, state: str | None = None) -> CallgateError:
    """The invocation is in a terminal state (``terminal_state``); ``state`` goes to the metadata."""
    metadata = {"state": state} if state is not None else {}
    return CallgateError(code=ErrorCode.TERMINAL_STATE, message=message, metadata=metadata)


# --- load time (config, ToolSpecs, policies): LoadError ----------------------------------------
def config_invalid(message: str, *, source: str = "", violations: Sequence[Violation] = ()) -> LoadError:
    """The TOML config (or what it points at) is invalid (``config_invalid``)."""
    return LoadError(code=ErrorCode.CONFIG_INVALID, message=message, source=source, violations=violations)


def toolspec_invalid(message: str, *, source: str = "", violations: Sequence[Violation] = ()) -> LoadError:
    """A ToolSpec file is invalid (``toolspec_invalid``)."""
    return LoadError(code=ErrorCode.TOOLSPEC_INVALID, message=message, source=source, violations=violations)


def unsupported_format(message: str, *, source: str = "", violations: Sequence[Violation] = ()) -> LoadError:
    """A ToolSpec schema uses a ``format`` that cannot be asserted (``unsupported_format``)."""
    return LoadError(code=ErrorCode.UNSUPPORTED_FORMAT, message=message, source=source, violations=violations)


def policy_invalid(message: str, *, source: str = "", violations: Sequence[Violation] = ()) -> LoadError:
    """Policies, schema or entities are invalid (``policy_invalid``)."""
    return LoadError(code=ErrorCode.POLICY_INVALID, message=message, source=source, violations=violations)


# --- idempotency (6.8) --------------------------------------------------------------------------
def idempotency_key_reused(
    message: str = "idempotency key already used with other arguments; use a new key",
) -> CallgateError:
    """The key was used with other normalized arguments (``idempotency_key_reused``)."""
    return CallgateError(code=ErrorCode.IDEMPOTENCY_KEY_REUSED, message=message)


def idempotency_key_required(message: str) -> CallgateError:
    """A write tool proposed without the key its ToolSpec requires (``idempotency_key_required``)."""
    return CallgateError(code=ErrorCode.IDEMPOTENCY_KEY_REQUIRED, message=message)


def idempotency_key_expired(
    message: str = "idempotency key is past its retention window; use a new key",
) -> CallgateError:
    """The key's record is past its retention window (``idempotency_key_expired``)."""
    return CallgateError(code=ErrorCode.IDEMPOTENCY_KEY_EXPIRED, message=message)


# --- execution, commit boundary, retries (6.7, 6.9) ---------------------------------------------
def attempt_not_found(message: str = "unknown attempt_id") -> CallgateError:
    """The attempt id is unknown (``attempt_not_found``)."""
    return CallgateError(code=ErrorCode.ATTEMPT_NOT_FOUND, message=message)


def attempt_not_allowed(message: str, *, retry_after: str | None = None) -> CallgateError:
    """No attempt may start (``attempt_not_allowed``); ``retry_after`` (RFC 3339), when given,
    goes to the metadata."""
    metadata = {"retry_after": retry_after} if retry_after is not None else {}
    return CallgateError(code=ErrorCode.ATTEMPT_NOT_ALLOWED, message=message, metadata=metadata)


def deadline_exceeded(message: str = "the invocation deadline has passed") -> CallgateError:
    """The invocation's deadline has passed (``deadline_exceeded``)."""
    return CallgateError(code=ErrorCode.DEADLINE_EXCEEDED, message=message)


def credential_invalid(reason: str, message: str | None = None) -> CallgateError:
    """A presented credential failed verification (``credential_invalid``). ``reason`` is the
    failed check (``metadata.reason``); the message defaults to ``credential refused: <reason>``."""
    return CallgateError(
        code=ErrorCode.CREDENTIAL_INVALID,
        message=f"credential refused: {reason}" if message is None else message,
        metadata={"reason": reason},
    )


def secret_not_found(message: str) -> CallgateError:
    """No secret of that name is configured (``secret_not_found``)."""
    return CallgateError(code=ErrorCode.SECRET_NOT_FOUND, message=message)


def secret_not_bound(message: str) -> CallgateError:
    """The secret is not bound to the credential's tool or resource (``secret_not_bound``)."""
    return CallgateError(code=ErrorCode.SECRET_NOT_BOUND, message=message)


def secret_already_redeemed(message: str = "secret already released for this attempt") -> CallgateError:
    """The secret was already released for this attempt (``secret_already_redeemed``)."""
    return CallgateError(code=ErrorCode.SECRET_ALREADY_REDEEMED, message=message)


def reconcile_not_allowed(message: str) -> CallgateError:
    """Reconcile on an invocation whose outcome is not unknown (``reconcile_not_allowed``)."""
    return CallgateError(code=ErrorCode.RECONCILE_NOT_ALLOWED, message=message)


def reconcile_conflict(message: str) -> CallgateError:
    """A finding that contradicts the recorded reconciliation (``reconcile_conflict``)."""
    return CallgateError(code=ErrorCode.RECONCILE_CONFLICT, message=message)


# --- results and loop (6.10, 6.11) --------------------------------------------------------------
def result_not_available(message: str) -> CallgateError:
    """No encoded result (yet), or an unknown page token (``result_not_available``)."""
    return CallgateError(code=ErrorCode.RESULT_NOT_AVAILABLE, message=message)


def output_after_cancel(message: str) -> CallgateError:
    """Output after cancellation or a terminal state (``output_after_cancel``)."""
    return CallgateError(code=ErrorCode.OUTPUT_AFTER_CANCEL, message=message)


def budget_exhausted(budgets: Sequence[str]) -> CallgateError:
    """Session budgets are used up (``budget_exhausted``); ``budgets`` names them (in the
    message and, comma-separated, in ``metadata.budgets``)."""
    return CallgateError(
        code=ErrorCode.BUDGET_EXHAUSTED,
        message=f"session budget exhausted: {', '.join(budgets)}; the tool loop ends here",
        metadata={"budgets": ",".join(budgets)},
    )


def result_schema_invalid(
    message: str = "callgate withheld this result: it does not match the tool's output schema",
    violations: Sequence[Violation] = (),
) -> CallgateError:
    """A tool result that does not conform to the ToolSpec's ``output_schema``, or is not JSON
    (``result_schema_invalid``). Not raised to the executor: its message becomes the model's
    tool message in place of the result; ``violations`` (pointers and keywords) go to the event."""
    return CallgateError(code=ErrorCode.RESULT_SCHEMA_INVALID, message=message, violations=violations)


# --- lifecycle ----------------------------------------------------------------------------------
def not_ready(
    message: str = "no usable policy snapshot yet (see the health service and the sidecar log)",
) -> CallgateError:
    """No usable policy snapshot yet (``not_ready``)."""
    return CallgateError(code=ErrorCode.NOT_READY, message=message)


# --- admission under overload (server/admission.py) --------------------------------------------
RETRY_AFTER_MS = "retry_after_ms"
"""Metadata key of an admission refusal's retry hint in milliseconds; :mod:`callgate.server.status`
also sends it as ``google.rpc.RetryInfo`` and ``grpc-retry-pushback-ms``."""


def overloaded(retry_after_ms: int) -> CallgateError:
    """The listener's concurrency limit is reached (``overloaded``); retry after the hint."""
    return CallgateError(
        code=ErrorCode.OVERLOADED,
        message="overloaded: the call cannot be served within the latency target; retry after the hint",
        metadata={RETRY_AFTER_MS: str(retry_after_ms)},
    )


def deadline_too_short(retry_after_ms: int) -> CallgateError:
    """The call's deadline is shorter than the expected service time (``deadline_too_short``)."""
    return CallgateError(
        code=ErrorCode.DEADLINE_TOO_SHORT,
        message="the call's deadline is shorter than the current expected service time",
        metadata={RETRY_AFTER_MS: str(retry_after_ms)},
    )


# --- infrastructure -----------------------------------------------------------------------------
def store_unavailable(message: str) -> CallgateError:
    """The store could not durably write (``store_unavailable``)."""
    return CallgateError(code=ErrorCode.STORE_UNAVAILABLE, message=message)


def internal(message: str = "internal error (details in the sidecar log)") -> CallgateError:
    """Unexpected internal error (``internal``); the details belong in the log, not here."""
    return CallgateError(code=ErrorCode.INTERNAL, message=message)
