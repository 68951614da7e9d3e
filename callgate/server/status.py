"""The one place where callgate errors become gRPC statuses.

Each :class:`~callgate.core.errors.ErrorCode` maps to exactly one gRPC status code. The wire error
carries a ``google.rpc.Status`` with an ``ErrorInfo`` (reason = the stable code, domain =
``callgate.dev``, metadata) and, for located problems, a ``BadRequest`` with one field violation
per JSON pointer; an admission refusal (``overloaded``, ``deadline_too_short``) also carries a
``RetryInfo`` and the ``grpc-retry-pushback-ms`` trailer.
``tests/test_service_plumbing.py::test_every_error_code_is_mapped_once`` checks that every code is
mapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from callgate.core.errors import RETRY_AFTER_MS, CallgateError, ErrorCode

DOMAIN = "callgate.dev"

RETRY_PUSHBACK = "grpc-retry-pushback-ms"
"""Trailing metadata of a refusal with a retry hint (gRPC's retry design A6: milliseconds)."""

C = grpc.StatusCode
E = ErrorCode

STATUS: dict[ErrorCode, grpc.StatusCode] = {
    E.INVALID_REQUEST: C.INVALID_ARGUMENT,
    E.SESSION_NOT_FOUND: C.NOT_FOUND,
    E.INVOCATION_NOT_FOUND: C.NOT_FOUND,
    E.TOOLS_NOT_LISTED: C.FAILED_PRECONDITION,
    E.UNKNOWN_TOOL_VERSION: C.NOT_FOUND,
    E.INVALID_JSON: C.INVALID_ARGUMENT,
    E.INVALID_UTF8: C.INVALID_ARGUMENT,
    E.DUPLICATE_KEY: C.INVALID_ARGUMENT,
    E.NON_FINITE_NUMBER: C.INVALID_ARGUMENT,
    E.NUMBER_OVERFLOW: C.INVALID_ARGUMENT,
    E.LONE_SURROGATE: C.INVALID_ARGUMENT,
    E.TRAILING_DATA: C.INVALID_ARGUMENT,
    E.NOT_AN_OBJECT: C.INVALID_ARGUMENT,
    E.TOO_DEEP: C.INVALID_ARGUMENT,
    E.TOO_LARGE: C.RESOURCE_EXHAUSTED,
    E.SCHEMA_VIOLATION: C.INVALID_ARGUMENT,
    E.NORMALIZATION_FAILED: C.INVALID_ARGUMENT,
    E.NOT_CANONICALIZABLE: C.INVALID_ARGUMENT,
    E.ENGINE_ERROR: C.PERMISSION_DENIED,
    E.ENGINE_NO_DECISION: C.PERMISSION_DENIED,
    E.POLICY_EVALUATION_ERROR: C.PERMISSION_DENIED,
    E.RESOURCE_UNRESOLVED: C.PERMISSION_DENIED,
    E.CONFIRMATION_NOT_PENDING: C.FAILED_PRECONDITION,
    E.CONFIRMATION_DIGEST_MISMATCH: C.ABORTED,
    E.CONFIRMATION_EXPIRED: C.DEADLINE_EXCEEDED,
    E.ILLEGAL_TRANSITION: C.FAILED_PRECONDITION,
    E.TERMINAL_STATE: C.FAILED_PRECONDITION,
    E.CONFIG_INVALID: C.FAILED_PRECONDITION,
    E.TOOLSPEC_INVALID: C.FAILED_PRECONDITION,
    E.UNSUPPORTED_FORMAT: C.FAILED_PRECONDITION,
    E.POLICY_INVALID: C.FAILED_PRECONDITION,
    E.ENGINE_TIMEOUT: C.PERMISSION_DENIED,
    E.ENGINE_UNAVAILABLE: C.PERMISSION_DENIED,
    E.ENGINE_UNDEFINED: C.PERMISSION_DENIED,
    E.ENGINE_MALFORMED: C.PERMISSION_DENIED,
    E.IDEMPOTENCY_KEY_REUSED: C.ALREADY_EXISTS,
    E.IDEMPOTENCY_KEY_REQUIRED: C.INVALID_ARGUMENT,
    E.IDEMPOTENCY_KEY_EXPIRED: C.FAILED_PRECONDITION,
    E.ATTEMPT_NOT_FOUND: C.NOT_FOUND,
    E.ATTEMPT_NOT_ALLOWED: C.FAILED_PRECONDITION,
    E.DEADLINE_EXCEEDED: C.DEADLINE_EXCEEDED,
    E.CREDENTIAL_INVALID: C.UNAUTHENTICATED,
    E.SECRET_NOT_FOUND: C.NOT_FOUND,
    E.SECRET_NOT_BOUND: C.PERMISSION_DENIED,
    E.SECRET_ALREADY_REDEEMED: C.PERMISSION_DENIED,
    E.RESULT_NOT_AVAILABLE: C.NOT_FOUND,
    E.OUTPUT_AFTER_CANCEL: C.FAILED_PRECONDITION,
    E.BUDGET_EXHAUSTED: C.RESOURCE_EXHAUSTED,
    E.NOT_READY: C.UNAVAILABLE,
    E.OVERLOADED: C.RESOURCE_EXHAUSTED,
    E.DEADLINE_TOO_SHORT: C.DEADLINE_EXCEEDED,
    E.STORE_UNAVAILABLE: C.UNAVAILABLE,
    E.INTERNAL: C.INTERNAL,
}


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
