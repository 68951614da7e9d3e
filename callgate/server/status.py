"""The one table of error codes: who each code is for, its gRPC status, final or retryable.

**The rule.** A stable code is an *answer the model can act on* when the proposal itself is at
fault and the model can do something about it: propose other arguments, pick another tool it was
shown, or stop and tell the user (audience ``model``). Such a code never fails the ``Propose``
RPC: ``Propose`` answers OK, the invocation is recorded in its terminal state and the code is
``rejection.code`` (a refused proposal) or ``decision.error_code`` (a fail-closed deny), which
the runtime hands to the model in the tool message. Everything else is a *gRPC error*: the
status below with a ``google.rpc.ErrorInfo`` (reason = the code, domain ``callgate.dev``). Its
audience is the ``runtime`` (the code around the model: sessions, ids, idempotency keys and
deadlines all come from the runtime, spec 6.1; confirmations; the executor protocol; budgets;
availability) or the ``operator`` (configuration, policies, secret bindings, defects), because
the model cannot fix it by proposing differently. When ``Propose`` refuses a proposal for a
runtime reason (``tools_not_listed``, ``idempotency_key_*``), the refusal is still recorded
(events, state, usage) and the error's ``ErrorInfo.metadata`` names it (``invocation_id``,
``state``). The status of a ``model`` code is used only when another RPC raises that code for
its own caller (e.g. ``EncodeResult`` refusing an executor's result value as ``invalid_json``).

The code string is the same everywhere a code appears: ``Rejection.code``,
``Decision.error_code``, ``ErrorInfo.reason``, events and metric labels (all are
``ErrorCode.value``). ``docs/ERRORS.md`` is generated from this table (``scripts/gen-docs``);
``tests/test_codes.py`` checks it is exhaustive and that behaviour follows it. An admission
refusal (``overloaded``, ``deadline_too_short``) also carries a ``RetryInfo`` and the
``grpc-retry-pushback-ms`` trailer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from callgate.base.errors import RETRY_AFTER_MS, CallgateError, ErrorCode

DOMAIN = "callgate.dev"


class Audience(str, Enum):
    """Who acts on a code (see the module docstring for the rule)."""

    MODEL = "model"
    """An answer in ``Propose`` (``rejection.code`` / ``decision.error_code``), for the model."""
    RUNTIME = "runtime"
    """A gRPC error the runtime (agent loop, confirmer UI, executor) must handle."""
    OPERATOR = "operator"
    """A gRPC error or a load failure only an operator can fix (config, policies, defects)."""


class Retry(str, Enum):
    """Whether the same request may succeed later."""

    FINAL = "final"
    """The same request gets the same answer: change something first (arguments, key, state)."""
    RETRYABLE = "retryable"
    """The same request may succeed later: back off, within the invocation's deadline."""
    HINTED = "retry_after"
    """Retry only at ``metadata.retry_after`` when the error carries it; otherwise final."""


@dataclass(frozen=True, slots=True)
class CodeRule:
    """One row of the table: the audience, the gRPC status when raised, final or retryable."""

    audience: Audience
    status: grpc.StatusCode
    retry: Retry


RETRY_PUSHBACK = "grpc-retry-pushback-ms"
"""Trailing metadata of a refusal with a retry hint (gRPC's retry design A6: milliseconds)."""

C = grpc.StatusCode
E = ErrorCode
M, R, OP = Audience.MODEL, Audience.RUNTIME, Audience.OPERATOR
FINAL, RETRYABLE, HINTED = Retry.FINAL, Retry.RETRYABLE, Retry.HINTED

RULES: dict[ErrorCode, CodeRule] = {
    E.INVALID_REQUEST: CodeRule(R, C.INVALID_ARGUMENT, FINAL),
    E.SESSION_NOT_FOUND: CodeRule(R, C.NOT_FOUND, FINAL),
    E.INVOCATION_NOT_FOUND: CodeRule(R, C.NOT_FOUND, FINAL),
    E.TOOLS_NOT_LISTED: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.UNKNOWN_TOOL_VERSION: CodeRule(M, C.NOT_FOUND, FINAL),
    E.INVALID_JSON: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.INVALID_UTF8: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.DUPLICATE_KEY: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.NON_FINITE_NUMBER: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.NUMBER_OVERFLOW: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.LONE_SURROGATE: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.TRAILING_DATA: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.NOT_AN_OBJECT: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.TOO_DEEP: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.TOO_LARGE: CodeRule(M, C.RESOURCE_EXHAUSTED, FINAL),
    E.SCHEMA_VIOLATION: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.NORMALIZATION_FAILED: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.DECIMAL_INVALID: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.TEXT_REFUSED: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.NOT_CANONICALIZABLE: CodeRule(M, C.INVALID_ARGUMENT, FINAL),
    E.ENGINE_ERROR: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.ENGINE_NO_DECISION: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.POLICY_EVALUATION_ERROR: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.RESOURCE_UNRESOLVED: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.CONFIRMATION_NOT_PENDING: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.CONFIRMATION_DIGEST_MISMATCH: CodeRule(R, C.ABORTED, FINAL),
    E.CONFIRMATION_EXPIRED: CodeRule(R, C.DEADLINE_EXCEEDED, FINAL),
    E.ILLEGAL_TRANSITION: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.TERMINAL_STATE: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.CONFIG_INVALID: CodeRule(OP, C.FAILED_PRECONDITION, FINAL),
    E.TOOLSPEC_INVALID: CodeRule(OP, C.FAILED_PRECONDITION, FINAL),
    E.UNSUPPORTED_FORMAT: CodeRule(OP, C.FAILED_PRECONDITION, FINAL),
    E.POLICY_INVALID: CodeRule(OP, C.FAILED_PRECONDITION, FINAL),
    E.ENGINE_TIMEOUT: CodeRule(M, C.PERMISSION_DENIED, RETRYABLE),
    E.ENGINE_UNAVAILABLE: CodeRule(M, C.PERMISSION_DENIED, RETRYABLE),
    E.ENGINE_UNDEFINED: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.ENGINE_MALFORMED: CodeRule(M, C.PERMISSION_DENIED, FINAL),
    E.IDEMPOTENCY_KEY_REUSED: CodeRule(R, C.ALREADY_EXISTS, FINAL),
    E.IDEMPOTENCY_KEY_REQUIRED: CodeRule(R, C.INVALID_ARGUMENT, FINAL),
    E.IDEMPOTENCY_KEY_EXPIRED: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.ATTEMPT_NOT_FOUND: CodeRule(R, C.NOT_FOUND, FINAL),
    E.ATTEMPT_NOT_ALLOWED: CodeRule(R, C.FAILED_PRECONDITION, HINTED),
    E.DEADLINE_EXCEEDED: CodeRule(R, C.DEADLINE_EXCEEDED, FINAL),
    E.CREDENTIAL_INVALID: CodeRule(R, C.UNAUTHENTICATED, FINAL),
    E.SECRET_NOT_FOUND: CodeRule(OP, C.NOT_FOUND, FINAL),
    E.SECRET_NOT_BOUND: CodeRule(OP, C.PERMISSION_DENIED, FINAL),
    E.SECRET_ALREADY_REDEEMED: CodeRule(R, C.PERMISSION_DENIED, FINAL),
    E.RECONCILE_NOT_ALLOWED: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.RECONCILE_CONFLICT: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.RESULT_NOT_AVAILABLE: CodeRule(R, C.NOT_FOUND, RETRYABLE),
    E.OUTPUT_AFTER_CANCEL: CodeRule(R, C.FAILED_PRECONDITION, FINAL),
    E.BUDGET_EXHAUSTED: CodeRule(R, C.RESOURCE_EXHAUSTED, FINAL),
    E.RESULT_SCHEMA_INVALID: CodeRule(M, C.FAILED_PRECONDITION, FINAL),
    E.NOT_READY: CodeRule(R, C.UNAVAILABLE, RETRYABLE),
    E.OVERLOADED: CodeRule(R, C.RESOURCE_EXHAUSTED, RETRYABLE),
    E.DEADLINE_TOO_SHORT: CodeRule(R, C.DEADLINE_EXCEEDED, RETRYABLE),
    E.STORE_UNAVAILABLE: CodeRule(R, C.UNAVAILABLE, RETRYABLE),
    E.INTERNAL: CodeRule(OP, C.INTERNAL, FINAL),
}

STATUS: dict[ErrorCode, grpc.StatusCode] = {code: rule.status for code, rule in RULES.items()}
"""Each code's gRPC status (a view of :data:`RULES`)."""


def for_model(code: str) -> bool:
    """True if ``code`` is an answer for the model (audience ``model``) under :data:`RULES`."""
    try:
        return RULES[ErrorCode(code)].audience is Audience.MODEL
    except (ValueError, KeyError):
        return False


def to_status(err: CallgateError) -> grpc.Status:
    """Build the rich gRPC status for an error (safe: messages never carry argument values)."""
    code = STATUS.get(err.code, C.INTERNAL)
    info = error_details_pb2.ErrorInfo(reason=err.code.value, domain=DOMAIN, metadata=err.metadata)
    details = [info]
    st = status_pb2.Status(code=getattr(code_pb2, code.name), message=err.message)
    packed = st.details.add()
    packed.Pack(details[0])
    if err.violations:
        br = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.pointer, description=v.message, reason=v.keyword
                )
                for v in err.violations
            ]
        )
        st.details.add().Pack(br)
    retry_ms = err.metadata.get(RETRY_AFTER_MS)
    if retry_ms is None:
        return rpc_status.to_status(st)
    ms = int(retry_ms)
    delay = duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
    st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status = rpc_status.to_status(st)
    return _Status(status.code, status.details, (*status.trailing_metadata, (RETRY_PUSHBACK, str(ms))))


@dataclass(frozen=True, slots=True)
class _Status(grpc.Status):  # type: ignore[misc]
    """A ``grpc.Status`` with extra trailing metadata (``rpc_status.to_status`` has only the details)."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]
