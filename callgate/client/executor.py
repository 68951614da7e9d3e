"""What the user's tool function gets and how its exceptions map to outcomes (6.7, 6.9).

The function receives a :class:`ToolContext` and returns a :class:`Committed` (the side effect
happened). Raising :class:`NotReached`, :class:`Transient` or :class:`BusinessRejection` means it
demonstrably did not commit (FAILED_BEFORE_COMMIT with that failure class); any other exception,
including a timeout, means nobody knows (OUTCOME_UNKNOWN, failure class TIMEOUT): the helper
never guesses "not committed".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate.gen.v1 import callgate_pb2 as pb


@dataclass(frozen=True)
class ToolContext:
    """One attempt: the scoped credential, the canonical arguments, the invocation's key."""

    invocation_id: str
    attempt_number: int
    credential: str
    arguments: Mapping[str, Any]
    idempotency_key: str
    deadline: str
    redeem: Callable[[str], Any] = field(repr=False)
    """``redeem(secret_name)``: the upstream secret bound to this tool (bytes; awaitable in the
    asyncio helper)."""


@dataclass(frozen=True)
class Committed:
    """The side effect happened: the tool's result (JSON-able) and the external id."""

    result: Any
    external_resource_id: str = ""
    commit_time: str = ""
    cost_micros: int = 0


class ToolFailure(Exception):
    """The tool did not commit; the subclass names the 6.9 failure class."""

    failure_class: int = pb.FAILURE_CLASS_UNSPECIFIED


class NotReached(ToolFailure):
    """The request never reached the external system."""

    failure_class = pb.NOT_REACHED


class Transient(ToolFailure):
    """429 or a transient 5xx: nothing committed; a retry may succeed."""

    failure_class = pb.TRANSIENT


class BusinessRejection(ToolFailure):
    """The external system refused for a business reason (a new proposal is needed)."""

    failure_class = pb.BUSINESS_REJECTION


@dataclass(frozen=True)
class ToolResult:
    """What the helper ends with: the model-facing tool message and the final state."""

    invocation_id: str
    message: str
    state: str
    attempts: int
    truncated: bool = False
    withheld: bool = False


def report_for(exc: BaseException | None, done: Committed | None, attempt_id: str) -> pb.ReportOutcomeRequest:
    if done is not None:
        return pb.ReportOutcomeRequest(
            attempt_id=attempt_id,
            outcome=pb.OUTCOME_COMMITTED,
            external_resource_id=done.external_resource_id,
            commit_time=done.commit_time,
            cost_micros=done.cost_micros,
        )
    if isinstance(exc, ToolFailure):
        return pb.ReportOutcomeRequest(
            attempt_id=attempt_id,
            outcome=pb.OUTCOME_FAILED_BEFORE_COMMIT,
            failure_class=exc.failure_class,  # type: ignore[arg-type]
            message=type(exc).__name__,
        )
    return pb.ReportOutcomeRequest(
        attempt_id=attempt_id,
        outcome=pb.OUTCOME_UNKNOWN_COMMIT,
        failure_class=pb.TIMEOUT,
        message=type(exc).__name__,  # the class only: an exception's text may carry arguments
    )


__all__ = [
    "BusinessRejection",
    "Committed",
    "NotReached",
    "ToolContext",
    "ToolFailure",
    "ToolResult",
    "Transient",
]
