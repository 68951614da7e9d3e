"""The client's exceptions: one hierarchy, every one carrying a stable ``code``.

Drawn in :mod:`callgate.client`'s docstring. A transport failure, a deadline, a malformed answer
and a refusal of the sidecar are all exceptions: none of them is ever an outcome a runtime could
mistake for permission to execute.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

DOMAIN = "callgate.dev"
"""The ``ErrorInfo.domain`` of callgate's errors."""


class CallgateClientError(Exception):
    """Base of every error raised by :mod:`callgate.client`; ``code`` is a stable string."""

    code: str = "client_error"

    def __init__(
        self, message: str, *, code: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.metadata: dict[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class TransportError(CallgateClientError):
    """The sidecar could not be reached or the connection was lost (nothing was decided)."""

    code = "unavailable"


class DeadlineExceeded(TransportError):
    """The call's deadline passed before the sidecar answered (its outcome is unknown to us)."""

    code = "deadline_exceeded"


class MalformedAnswer(CallgateClientError):
    """The sidecar's answer is not one this client can trust (missing or contradicting fields)."""

    code = "malformed_answer"


class CallRefused(CallgateClientError):
    """The sidecar refused the call; ``code`` is its stable error code (docs/ERRORS.md) from the
    ``google.rpc.ErrorInfo`` detail, ``grpc_code`` the gRPC status."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        grpc_code: grpc.StatusCode,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, code=code, metadata=metadata)
        self.grpc_code = grpc_code


class ExecutionError(CallgateClientError):
    """The executor helper stopped: the invocation may not (or no longer) run; ``state`` is the
    invocation's state as last reported (empty when unknown)."""

    code = "execution_stopped"

    def __init__(self, message: str, *, code: str | None = None, state: str = "") -> None:
        super().__init__(message, code=code)
        self.state = state


def from_rpc_error(err: grpc.RpcError) -> CallgateClientError:
    """The typed exception for a failed call: ``ErrorInfo`` decoded from
    ``grpc-status-details-bin`` when present; transport failures by their gRPC status."""
    # grpc.aio's AioRpcError is not a grpc.Call, but has the same code/details/trailing_metadata
    # accessors: without it every async client error read as UNKNOWN without its ErrorInfo.
    call = isinstance(err, grpc.Call | grpc.aio.AioRpcError)
    code = err.code() if call else grpc.StatusCode.UNKNOWN
    details = (err.details() if call else None) or str(code)
    try:
        status = rpc_status.from_call(err) if call else None
    except ValueError:  # details present but inconsistent with the status: not trustworthy
        return MalformedAnswer("status details do not match the status")
    if status is not None:
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
                return CallRefused(details, code=info.reason, grpc_code=code, metadata=dict(info.metadata))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return TransportError(details)
    return CallRefused(details, code=code.name.lower(), grpc_code=code)


__all__ = [
    "CallRefused",
    "CallgateClientError",
    "DeadlineExceeded",
    "ExecutionError",
    "MalformedAnswer",
    "TransportError",
    "from_rpc_error",
]
