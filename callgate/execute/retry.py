"""The retry matrix of spec 6.9: may a failed attempt be retried, and how.

| failure                    | read-only                 | write, reliable idem. key   | write, no idempotency       |
|----------------------------|---------------------------|-----------------------------|-----------------------------|
| parse/schema failure       | never (new proposal)      | never                       | never                       |
| authorization deny         | never                       | never                     | never                       |
| never reached executor     | retry within budget       | retry within budget         | retry once, cautiously      |
| 429 / transient 5xx        | backoff, within deadline  | same-key backoff retry      | 429: retry; 5xx: may have committed -> no retry, UNKNOWN |
| timeout, commit unknown    | retry or re-read          | same-key query / retry      | OUTCOME_UNKNOWN, check status first, no retry |
| business rejection         | only a new proposal       | new proposal, new key       | new proposal                |

Parse/schema failures and denies never reach an executor in callgate (they end the invocation
earlier), so they appear here only for completeness. A model's corrected arguments are a *new
proposal*, never a retry of the old invocation.

Backoff is exponential with jitter from the ToolSpec's ``retry_policy``, capped so that the next
attempt can still start before the invocation deadline; the random source is injected.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from callgate.base.model import SideEffectClass


class FailureClass(str, Enum):
    NOT_REACHED = "not_reached"
    TRANSIENT = "transient"
    TIMEOUT = "timeout"
    BUSINESS_REJECTION = "business_rejection"
    PARSE_OR_SCHEMA = "parse_or_schema"
    AUTHORIZATION = "authorization"


class Reliability(str, Enum):
    READ_ONLY = "read_only"
    WRITE_IDEMPOTENT = "write_idempotent"
    """A write whose ToolSpec declares idempotency support and whose invocation has a key."""
    WRITE_UNSAFE = "write_unsafe"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 1
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 2000
    jitter: float = 0.2


@dataclass(frozen=True, slots=True)
class Advice:
    retry: bool
    reason: str
    backoff_ms: int = 0
    attempts_left: int = 0
    same_key: bool = False
    commit_unknown: bool = False
    """The failure leaves the commit status unknown: the invocation is OUTCOME_UNKNOWN."""


def reliability(side_effect: SideEffectClass, idempotency_supported: bool, has_key: bool) -> Reliability:
    if side_effect is SideEffectClass.READ_ONLY:
        return Reliability.READ_ONLY
    if idempotency_supported and has_key:
        return Reliability.WRITE_IDEMPOTENT
    return Reliability.WRITE_UNSAFE


def _matrix(failure: FailureClass, rel: Reliability, http_status: int) -> tuple[bool, str, bool, bool]:
    """(retry?, reason, same_key, commit_unknown) straight from 6.9."""
    R, W, U = Reliability.READ_ONLY, Reliability.WRITE_IDEMPOTENT, Reliability.WRITE_UNSAFE
    if failure in (FailureClass.PARSE_OR_SCHEMA, FailureClass.AUTHORIZATION):
        return False, f"{failure.value}_never_retried", False, False
    if failure is FailureClass.BUSINESS_REJECTION:
        return False, "business_rejection_needs_new_proposal", False, False
    if failure is FailureClass.NOT_REACHED:
        return (
            True,
            {R: "not_reached_retry", W: "not_reached_retry_same_key", U: "not_reached_retry_cautiously"}[rel],
            rel is W,
            False,
        )
    if failure is FailureClass.TRANSIENT:
        if rel is R:
            return True, "transient_backoff", False, False
        if rel is W:
            return True, "transient_same_key_backoff", True, False
        if http_status == 429:  # refused before processing: nothing was committed
            return True, "rate_limited_not_processed", False, False
        return False, "transient_may_have_committed_check_status", False, True
    # TIMEOUT: the commit status is unknown.
    if rel is R:
        return True, "timeout_read_retry", False, False
    if rel is W:
        return True, "timeout_same_key_query_or_retry", True, True
    return False, "timeout_outcome_unknown_check_status", False, True


def advise(
    failure: FailureClass,
    rel: Reliability,
    policy: RetryPolicy,
    *,
    attempts_made: int,
    now: datetime,
    deadline: datetime,
    rng: random.Random,
    http_status: int = 0,
) -> Advice:
    """Decide on a retry after attempt number ``attempts_made`` failed."""
    retry, reason, same_key, unknown = _matrix(failure, rel, http_status)
    limit = policy.max_attempts
    if rel is Reliability.WRITE_UNSAFE and failure is FailureClass.NOT_REACHED:
        limit = min(limit, attempts_made + 1)  # "cautiously": one more try at most
    left = max(0, limit - attempts_made)
    if not retry:
        return Advice(False, reason, 0, left, same_key, unknown)
    if left <= 0:
        return Advice(False, "retry_budget_exhausted", 0, 0, same_key, unknown)
    base = min(policy.max_backoff_ms, policy.initial_backoff_ms * (2 ** max(0, attempts_made - 1)))
    spread = base * policy.jitter
    backoff = max(0, int(base + rng.uniform(-spread, spread)))
    if now + timedelta(milliseconds=backoff) >= deadline:
        return Advice(False, "deadline_too_close", 0, left, same_key, unknown)
    return Advice(True, reason, backoff, left, same_key, unknown)
