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
    confirmation_rejected    AUTHORIZED -> CANCELLED_BEFORE_COMMIT          Confirm (other digest)
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
    result_encoded           unchanged                                      EncodeResult (error)
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

__all__ = ["OUTCOMES", "REJECTIONS", "EventKind"]
