"""What the user's tool function gets and how its exceptions map to outcomes (6.7, 6.9).

The function receives a :class:`ToolContext` and returns a :class:`Committed` (the side effect
happened). Raising :class:`NotReached`, :class:`Transient` or :class:`BusinessRejection` means it
demonstrably did not commit (FAILED_BEFORE_COMMIT with that failure class); any other exception,
including a timeout, means nobody knows (OUTCOME_UNKNOWN, failure class TIMEOUT): the helper
never guesses "not committed". :class:`OutcomeUnknown` says so explicitly and is never retried.

A caller that maps its own ends (the MCP gateway, callgate/mcp/attempts.py) gives a failure the
message recorded with the outcome (``recorded``, no argument text) and the error the model reads
(``error``); the helpers take every decision from the pure functions below.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from callgate.client.errors import ExecutionError, MalformedAnswer
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
    attempt_id: str = ""
    """The sidecar's id of this attempt (e.g. part of an external id the function makes up)."""


@dataclass(frozen=True)
class Committed:
    """The side effect happened: the tool's result (JSON-able) and the external id."""

    result: Any
    external_resource_id: str = ""
    commit_time: str = ""
    cost_micros: int = 0
    parts: tuple[tuple[int, bytes], ...] = ()
    """A result in parts (:mod:`callgate.adapters.parts` builds it): ``(descriptor index, the
    part's canonical JSON)`` of each non-text part, sent with ``EncodeResult`` for the sidecar's
    secret check and never stored; the verdicts are :attr:`ToolResult.part_verdicts`."""


class ToolFailure(Exception):
    """The tool did not commit; the subclass names the 6.9 failure class.

    ``recorded``: the message recorded with the outcome (default: the class name; never the
    exception's text, which may carry arguments). ``error``: the JSON error the model reads
    (default ``{"code": <class name>, "message": "the tool failed", "retryable": <advice>}``)."""

    failure_class: int = pb.FAILURE_CLASS_UNSPECIFIED

    def __init__(self, *args: object, recorded: str = "", error: Mapping[str, Any] | None = None) -> None:
        super().__init__(*args)
        self.recorded = recorded
        self.error = error


class NotReached(ToolFailure):
    """The request never reached the external system."""

    failure_class = pb.NOT_REACHED


class Transient(ToolFailure):
    """429 or a transient 5xx: nothing committed; a retry may succeed."""

    failure_class = pb.TRANSIENT


class BusinessRejection(ToolFailure):
    """The external system refused for a business reason (a new proposal is needed)."""

    failure_class = pb.BUSINESS_REJECTION


class OutcomeUnknown(Exception):
    """The call went out and no answer came back (a timeout, a crash): reported OUTCOME_UNKNOWN
    like any other exception, with ``recorded`` as its message, and never retried even when the
    advice allows it: the helper stops with ``ExecutionError(code="outcome_unknown")``."""

    def __init__(self, *args: object, recorded: str = "") -> None:
        super().__init__(*args)
        self.recorded = recorded


class Stage(Enum):
    """A step of the asyncio helper, told to its ``on_stage`` (e.g. progress to a client)."""

    ATTEMPT = "starting the attempt"
    """Before each BeginAttempt."""
    ENCODE = "encoding the result"
    """Before EncodeResult."""


@dataclass(frozen=True)
class ToolResult:
    """What the helper ends with: the model-facing tool message and the final state."""

    invocation_id: str
    message: str
    state: str
    attempts: int
    truncated: bool = False
    withheld: bool = False
    error_code: str = ""
    """``result_schema_invalid`` when the tool's output schema refused the result."""
    next_page_token: str = ""
    """For a truncated message: the GetResult token of the next page."""
    structured_json: str = ""
    """The result validated against the output schema, redacted, without the untrusted-data marks
    ("" without an output schema)."""
    part_verdicts: tuple[tuple[int, int], ...] = ()
    """``(descriptor index, PartVerdict number)`` of each part in :attr:`Committed.parts` the
    sidecar answered for; a part without ``PART_CLEAN`` here must not reach the model."""

    @property
    def clean_parts(self) -> frozenset[int]:
        """The descriptor indexes the sidecar answered ``PART_CLEAN`` for: the only parts that may
        reach the model (a part not here was withheld, not sent or not answered)."""
        return frozenset(i for i, v in self.part_verdicts if v == pb.PART_CLEAN)


def dumps(value: Any) -> bytes:
    """The helpers' default JSON form of a result or an error."""
    return json.dumps(value).encode()


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
            message=exc.recorded or type(exc).__name__,
        )
    recorded = exc.recorded if isinstance(exc, OutcomeUnknown) else ""
    return pb.ReportOutcomeRequest(
        attempt_id=attempt_id,
        outcome=pb.OUTCOME_UNKNOWN_COMMIT,
        failure_class=pb.TIMEOUT,
        message=recorded or type(exc).__name__,  # the class only: an exception's text may carry arguments
    )


# ---------------------------------------------------------------- the helper's decisions
# One pure state machine for both helpers (Client.run and AsyncClient.run): they do the I/O
# (BeginAttempt, the user's function, ReportOutcome, the backoff, EncodeResult) and ask these
# functions what comes next, so the sync and asyncio helpers cannot drift apart.


def state_name(value: int) -> str:
    """The 6.2 state's name, or "" for a value this client does not know."""
    return pb.State.Name(value) if value in pb.State.values() else ""


def attempt_context(
    invocation_id: str, att: pb.BeginAttemptResponse, redeem: Callable[[str], Any]
) -> ToolContext:
    """The :class:`ToolContext` of a BeginAttempt answer; an answer without an attempt, a
    credential or JSON arguments is :class:`MalformedAnswer` (nothing runs)."""
    if not att.attempt_id or not att.credential:
        raise MalformedAnswer("BeginAttempt answered without an attempt or credential")
    try:
        arguments = json.loads(att.normalized_arguments)
    except ValueError:
        raise MalformedAnswer("BeginAttempt answered arguments that are not JSON") from None
    return ToolContext(
        invocation_id,
        att.attempt_number,
        att.credential,
        arguments,
        att.idempotency_key,
        att.deadline,
        redeem,
        att.attempt_id,
    )


def checked(done: object) -> Committed:
    """The function's return value, which must be :class:`Committed` (anything else is a bug in
    the function, reported as an unknown outcome: it may have committed)."""
    if not isinstance(done, Committed):
        raise TypeError("the tool function must return Committed")
    return done


@dataclass(frozen=True)
class RetryAfter:
    """Begin another attempt after ``backoff_s`` seconds (the sidecar's retry advice)."""

    backoff_s: float


@dataclass(frozen=True)
class Encode:
    """Finish: EncodeResult with ``request``; ``state`` as ReportOutcome left it."""

    request: pb.EncodeResultRequest
    state: str


@dataclass(frozen=True)
class Stop:
    """Stop with ``error``: nobody knows whether the call committed."""

    error: ExecutionError


Step = RetryAfter | Encode | Stop


def after_report(
    invocation_id: str,
    attempts: int,
    max_attempts: int,
    done: Committed | None,
    exc: BaseException | None,
    rep: pb.ReportOutcomeResponse,
    encode: Callable[[Any], bytes] = dumps,
) -> Step:
    """What follows a reported attempt (6.9): a commit is encoded; a failure that did not commit
    is retried while the advice says so (and ``max_attempts`` allows), else encoded as an error
    for the model; an unknown outcome that may not be retried (or an :class:`OutcomeUnknown`)
    stops with ``outcome_unknown`` (never an error message that would tell the model it did not
    happen). ``encode`` gives the JSON bytes of the result or the error."""
    state = state_name(rep.state)
    if done is not None:
        value = encode(done.result)
        parts = [pb.ResultPart(index=i, data=d) for i, d in done.parts]  # checked, never stored
        request = pb.EncodeResultRequest(invocation_id=invocation_id, status="ok", value=value, parts=parts)
        return Encode(request, state)
    retry = rep.retry.retry and attempts < max_attempts and not isinstance(exc, OutcomeUnknown)
    if retry:
        return RetryAfter(rep.retry.backoff_ms / 1000)
    if not isinstance(exc, ToolFailure):
        return Stop(
            ExecutionError(
                "outcome unknown: reconcile with a status query (docs/IDEMPOTENCY.md)",
                code="outcome_unknown",
                state=state,
            )
        )
    error = (
        dict(exc.error)
        if exc.error is not None
        else {"code": type(exc).__name__, "message": "the tool failed", "retryable": rep.retry.retry}
    )
    value = encode(error)
    return Encode(pb.EncodeResultRequest(invocation_id=invocation_id, status="error", value=value), state)


def tool_result(
    invocation_id: str,
    enc: pb.EncodeResultResponse,
    state: str,
    attempts: int,
    sent: Sequence[pb.ResultPart] = (),
) -> ToolResult:
    """The helper's result from EncodeResult's answer (``sent``: the request's parts, paired
    with the answer's verdicts in order; an answer with fewer verdicts leaves parts out)."""
    verdicts = tuple((p.index, int(v)) for p, v in zip(sent, enc.part_verdicts, strict=False))
    return ToolResult(
        invocation_id,
        enc.message.decode("utf-8", "replace"),
        state_name(enc.state) or state,
        attempts,
        enc.truncated,
        enc.withheld,
        enc.error_code,
        enc.next_page_token,
        enc.structured_json,
        verdicts,
    )


__all__ = [
    "BusinessRejection",
    "Committed",
    "NotReached",
    "OutcomeUnknown",
    "Stage",
    "ToolContext",
    "ToolFailure",
    "ToolResult",
    "Transient",
]
