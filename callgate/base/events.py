"""The kinds of event on an invocation's trail (spec 6.13), one enum for every reader.

The gate and the executor half write them (:class:`callgate.store.trail.Trail`); metrics, traces,
the decision log and ``callgate explain`` read them. The values are stored strings and part of
the public record (decision-log lines, explain output): never rename one; add new ones.

    kind                     from -> to                                    written by
    proposed                 - -> PROPOSED                                  propose
    parse_rejected           PROPOSED -> PARSE_REJECTED (unknown tool too)  propose: lookup, parse
    parsed                   PROPOSED -> PARSED                             propose: parse
    validated                PARSED -> VALIDATED                            propose: validate
    validation_rejected      PARSED|VALIDATED -> VALIDATION_REJECTED        propose: validate, normalize, key
    normalized               VALIDATED -> VALIDATED                         propose: normalize + digest
    authorized               VALIDATED -> AUTHORIZED                        propose: authorize
    authorization_rejected   VALIDATED -> AUTHORIZATION_REJECTED            propose: authorize (deny)
    prepared                 AUTHORIZED -> PREPARED                         propose: allow
    confirmation_requested   AUTHORIZED -> AUTHORIZED                       propose: confirm
    confirmed                AUTHORIZED -> PREPARED                         Confirm
    confirmation_rejected    AUTHORIZED -> CANCELLED_BEFORE_COMMIT          Confirm (other digest), Deny
    confirmation_expired     AUTHORIZED -> CANCELLED_BEFORE_COMMIT          Confirm, sweep
    cancelled                * -> CANCELLED_BEFORE_COMMIT                   Cancel
    cancel_requested         unchanged (after the boundary)                 Cancel
    idempotent_replay        unchanged                                      propose: same key, same digest
    attempt_started          PREPARED -> EXECUTING (or unchanged)           BeginAttempt
    attempt_failed           EXECUTING -> EXECUTING                         ReportOutcome (retry advised)
    committed                EXECUTING|OUTCOME_UNKNOWN -> COMMITTED         ReportOutcome
    failed_after_commit      EXECUTING|OUTCOME_UNKNOWN -> FAILED_AFTER_COMMIT
    outcome_unknown          EXECUTING -> OUTCOME_UNKNOWN                   ReportOutcome
    failed_before_commit     EXECUTING -> FAILED_BEFORE_COMMIT              ReportOutcome (no retry)
    observed                 COMMITTED -> OBSERVED                          EncodeResult (ok)
    result_encoded           unchanged                                      EncodeResult (error; or withheld
                                                                            after a cancel past the boundary)
    deadline_expired         AUTHORIZED|PREPARED -> CANCELLED_BEFORE_COMMIT  sweep (deadline passed), Confirm
    authorize_decided        (no invocation: a ``decisions`` record)        Authorizer.Authorize
    reconciled               OUTCOME_UNKNOWN -> COMMITTED | FAILED_BEFORE_COMMIT | FAILED_AFTER_COMMIT
                                                                            Reconcile (status query)
"""

from __future__ import annotations

from enum import Enum


class EventKind(str, Enum):
    """What happened to an invocation; compares equal to its stored string."""

    PROPOSED = "proposed"
    PARSE_REJECTED = "parse_rejected"
    PARSED = "parsed"
    VALIDATED = "validated"
    VALIDATION_REJECTED = "validation_rejected"
    NORMALIZED = "normalized"
    AUTHORIZED = "authorized"
    AUTHORIZATION_REJECTED = "authorization_rejected"
    PREPARED = "prepared"
    CONFIRMATION_REQUESTED = "confirmation_requested"
    CONFIRMED = "confirmed"
    CONFIRMATION_REJECTED = "confirmation_rejected"
    CONFIRMATION_EXPIRED = "confirmation_expired"
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    IDEMPOTENT_REPLAY = "idempotent_replay"
    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_FAILED = "attempt_failed"
    COMMITTED = "committed"
    FAILED_AFTER_COMMIT = "failed_after_commit"
    OUTCOME_UNKNOWN = "outcome_unknown"
    FAILED_BEFORE_COMMIT = "failed_before_commit"
    OBSERVED = "observed"
    RESULT_ENCODED = "result_encoded"
    AUTHORIZE_DECIDED = "authorize_decided"
    """An answer of the generic decision point: a ``decisions`` record, not an invocation's."""
    DEADLINE_EXPIRED = "deadline_expired"
    RECONCILED = "reconciled"


REJECTIONS = frozenset({EventKind.PARSE_REJECTED, EventKind.VALIDATION_REJECTED})
"""Kinds that carry a ``rejection`` (code, message, violations) in their data."""

OUTCOMES = frozenset(
    {
        EventKind.ATTEMPT_FAILED,
        EventKind.COMMITTED,
        EventKind.FAILED_BEFORE_COMMIT,
        EventKind.FAILED_AFTER_COMMIT,
        EventKind.OUTCOME_UNKNOWN,
    }
)
"""Kinds written by ``ReportOutcome``: the end of one attempt."""

CONFIRMATION_ANSWERS = {
    EventKind.CONFIRMED: "confirmed",
    EventKind.CONFIRMATION_REJECTED: "rejected",
    EventKind.CONFIRMATION_EXPIRED: "expired",
}
"""How a parked confirmation ended, by the event that ended it."""


class Stage(str, Enum):
    """The stage an event closes: its ``duration_us`` is the time that stage took."""

    PROPOSE = "propose"
    LOOKUP = "lookup"
    PARSE = "parse"
    VALIDATE = "validate"
    NORMALIZE = "normalize"
    IDEMPOTENCY = "idempotency"
    AUTHORIZE = "authorize"
    PREPARE = "prepare"
    CONFIRM = "confirm"
    CANCEL = "cancel"
    ATTEMPT = "attempt"
    OUTCOME = "outcome"
    ENCODE = "encode"


_STAGE_OF_KIND = {
    EventKind.PROPOSED: Stage.PROPOSE,
    EventKind.PARSED: Stage.PARSE,
    EventKind.VALIDATED: Stage.VALIDATE,
    EventKind.NORMALIZED: Stage.NORMALIZE,
    EventKind.AUTHORIZED: Stage.AUTHORIZE,
    EventKind.AUTHORIZATION_REJECTED: Stage.AUTHORIZE,
    EventKind.PREPARED: Stage.PREPARE,
    EventKind.CONFIRMATION_REQUESTED: Stage.PREPARE,
    EventKind.CONFIRMED: Stage.CONFIRM,
    EventKind.CONFIRMATION_REJECTED: Stage.CONFIRM,
    EventKind.CONFIRMATION_EXPIRED: Stage.CONFIRM,
    EventKind.CANCELLED: Stage.CANCEL,
    EventKind.CANCEL_REQUESTED: Stage.CANCEL,
    EventKind.IDEMPOTENT_REPLAY: Stage.IDEMPOTENCY,
    EventKind.ATTEMPT_STARTED: Stage.ATTEMPT,
    EventKind.ATTEMPT_FAILED: Stage.OUTCOME,
    EventKind.COMMITTED: Stage.OUTCOME,
    EventKind.FAILED_BEFORE_COMMIT: Stage.OUTCOME,
    EventKind.FAILED_AFTER_COMMIT: Stage.OUTCOME,
    EventKind.OUTCOME_UNKNOWN: Stage.OUTCOME,
    EventKind.OBSERVED: Stage.ENCODE,
    EventKind.RESULT_ENCODED: Stage.ENCODE,
    EventKind.AUTHORIZE_DECIDED: Stage.AUTHORIZE,
    EventKind.DEADLINE_EXPIRED: Stage.CANCEL,
    EventKind.RECONCILED: Stage.OUTCOME,
}
_VALIDATION_REJECTED_AFTER: dict[str, Stage] = {
    EventKind.VALIDATED.value: Stage.NORMALIZE,
    EventKind.NORMALIZED.value: Stage.IDEMPOTENCY,
}
_LOOKUP_CODES = frozenset({"tools_not_listed", "unknown_tool_version"})


def stage_of(kind: str, previous: str, rejection_code: str = "") -> Stage | None:
    """The stage an event of ``kind`` closes, given the kind of the event before it on the same
    call and, for a rejection, its code: ``parse_rejected`` of an unknown tool closes ``lookup``;
    ``validation_rejected`` after ``normalized`` closes ``idempotency`` (a key refused). None for
    a kind this version does not know (an event written by a newer one)."""
    if kind == EventKind.PARSE_REJECTED:
        return Stage.LOOKUP if rejection_code in _LOOKUP_CODES else Stage.PARSE
    if kind == EventKind.VALIDATION_REJECTED:
        return _VALIDATION_REJECTED_AFTER.get(previous, Stage.VALIDATE)
    try:
        return _STAGE_OF_KIND.get(EventKind(kind))
    except ValueError:
        return None


__all__ = ["CONFIRMATION_ANSWERS", "OUTCOMES", "REJECTIONS", "EventKind", "Stage", "stage_of"]
