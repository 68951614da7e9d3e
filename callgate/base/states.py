"""The invocation state machine of spec 6.2, and nothing else.

Allowed edges (invariant 6.1.1: only along these edges; terminal states are final):

    PROPOSED -> PARSED -> VALIDATED -> AUTHORIZED -> PREPARED -> EXECUTING -> COMMITTED -> OBSERVED
    PROPOSED -> PARSE_REJECTED                  (strict parse failed, or unknown tool version)
    PARSED -> VALIDATION_REJECTED               (schema violation)
    VALIDATED -> VALIDATION_REJECTED            (normalization / semantic precondition failed, 6.4 layer 3)
    VALIDATED -> AUTHORIZATION_REJECTED         (deny)
    AUTHORIZED -> CANCELLED_BEFORE_COMMIT       (confirmation refused, expired or digest mismatch, 6.11)
    PROPOSED..PREPARED -> CANCELLED_BEFORE_COMMIT (Cancel before execution, 6.7)
    EXECUTING -> FAILED_BEFORE_COMMIT | OUTCOME_UNKNOWN | COMMITTED | FAILED_AFTER_COMMIT
    OUTCOME_UNKNOWN -> COMMITTED | FAILED_BEFORE_COMMIT | FAILED_AFTER_COMMIT
                                                (resolved by a status query or same-key retry, 6.7)
    COMMITTED -> FAILED_AFTER_COMMIT            (e.g. partial workflow failed after the boundary)

There is no edge from PROPOSED straight to EXECUTING, and no edge back from OUTCOME_UNKNOWN to
PREPARED: a write whose commit is unknown is never silently "not executed" (6.7).

OUTCOME_UNKNOWN is a side terminal of 6.2 for the *attempt*; it only moves on through an explicit
status answer from the tool protocol, recorded as an event (``Reconcile``, or the outcome of a
same-key retry). ``OUTCOME_UNKNOWN -> FAILED_AFTER_COMMIT`` is the status answer "it committed,
but the rest of a non-atomic workflow failed" (6.7 case 4); it reaches no state that
``OUTCOME_UNKNOWN -> COMMITTED -> FAILED_AFTER_COMMIT`` did not already reach.
"""

from __future__ import annotations

from enum import Enum

from callgate.base.errors import illegal_transition, terminal_state


class State(str, Enum):
    PROPOSED = "PROPOSED"
    PARSED = "PARSED"
    VALIDATED = "VALIDATED"
    AUTHORIZED = "AUTHORIZED"
    PREPARED = "PREPARED"
    EXECUTING = "EXECUTING"
    COMMITTED = "COMMITTED"
    OBSERVED = "OBSERVED"
    PARSE_REJECTED = "PARSE_REJECTED"
    VALIDATION_REJECTED = "VALIDATION_REJECTED"
    AUTHORIZATION_REJECTED = "AUTHORIZATION_REJECTED"
    CANCELLED_BEFORE_COMMIT = "CANCELLED_BEFORE_COMMIT"
    FAILED_BEFORE_COMMIT = "FAILED_BEFORE_COMMIT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    FAILED_AFTER_COMMIT = "FAILED_AFTER_COMMIT"


S = State

EDGES: dict[State, frozenset[State]] = {
    S.PROPOSED: frozenset({S.PARSED, S.PARSE_REJECTED, S.CANCELLED_BEFORE_COMMIT}),
    S.PARSED: frozenset({S.VALIDATED, S.VALIDATION_REJECTED, S.CANCELLED_BEFORE_COMMIT}),
    S.VALIDATED: frozenset(
        {S.AUTHORIZED, S.VALIDATION_REJECTED, S.AUTHORIZATION_REJECTED, S.CANCELLED_BEFORE_COMMIT}
    ),
    S.AUTHORIZED: frozenset({S.PREPARED, S.CANCELLED_BEFORE_COMMIT}),
    S.PREPARED: frozenset({S.EXECUTING, S.CANCELLED_BEFORE_COMMIT}),
    S.EXECUTING: frozenset({S.COMMITTED, S.FAILED_BEFORE_COMMIT, S.OUTCOME_UNKNOWN, S.FAILED_AFTER_COMMIT}),
    S.COMMITTED: frozenset({S.OBSERVED, S.FAILED_AFTER_COMMIT}),
    S.OUTCOME_UNKNOWN: frozenset({S.COMMITTED, S.FAILED_BEFORE_COMMIT, S.FAILED_AFTER_COMMIT}),
    S.OBSERVED: frozenset(),
    S.PARSE_REJECTED: frozenset(),
    S.VALIDATION_REJECTED: frozenset(),
    S.AUTHORIZATION_REJECTED: frozenset(),
    S.CANCELLED_BEFORE_COMMIT: frozenset(),
    S.FAILED_BEFORE_COMMIT: frozenset(),
    S.FAILED_AFTER_COMMIT: frozenset(),
}

TERMINAL: frozenset[State] = frozenset(s for s, nxt in EDGES.items() if not nxt)
"""States with no way out (OUTCOME_UNKNOWN is not here: a status answer may still resolve it)."""

CANCELLABLE: frozenset[State] = frozenset(s for s, nxt in EDGES.items() if S.CANCELLED_BEFORE_COMMIT in nxt)


AFTER_BOUNDARY: frozenset[State] = frozenset(
    {S.EXECUTING, S.COMMITTED, S.OUTCOME_UNKNOWN, S.FAILED_AFTER_COMMIT}
)
"""States where a commit may have happened: cancel stops only what follows (6.7)."""


def check_transition(current: State, target: State) -> None:
    """Raise unless ``current -> target`` is an edge of 6.2."""
    if current in TERMINAL:
        raise terminal_state(
            f"invocation is in terminal state {current.value}; no further transition", state=current.value
        )
    if target not in EDGES[current]:
        raise illegal_transition(
            f"transition {current.value} -> {target.value} is not an edge of the state machine",
            from_state=current.value,
            to_state=target.value,
        )
