"""How an EXECUTING invocation ends when its executor never finishes it (spec 6.2, 6.7, 6.9).

An invocation stays EXECUTING while an attempt may still run or a retry was advised. Once its
deadline has passed no attempt may start (``BeginAttempt`` answers ``deadline_exceeded``), so the
deadline sweep ends it, by what its attempts say::

    every attempt reported, none committed (e.g. FAILED_BEFORE_COMMIT / NOT_REACHED, retry advised)
        --> FAILED_BEFORE_COMMIT   (nothing ran past the boundary; the idempotency key is released)
    an attempt never reported, its credential expired
        write tool (or a tool no longer served) --> OUTCOME_UNKNOWN (it may have committed, 6.7:
                                                   resolved by Reconcile or a same-key retry)
        read-only tool                          --> FAILED_BEFORE_COMMIT (a read changed nothing)
    an attempt never reported, its credential still valid
        --> stays EXECUTING until the credential expires (the executor may still be running it)

The event is ``failed_before_commit`` or ``outcome_unknown`` with ``{"reason": "deadline_expired",
"deadline", "attempts", "open_attempt"}``. A late ``ReportOutcome`` of the open attempt still
resolves an OUTCOME_UNKNOWN invocation (``OUTCOME_UNKNOWN -> COMMITTED`` is an edge of 6.2).
Every move is a compare-and-set on the state: an executor's report that lands first wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from callgate.base.events import EventKind
from callgate.base.states import State
from callgate.store.base import AttemptRecord, InvocationRecord


class StuckEnd(str, Enum):
    """What the deadline sweep does with one EXECUTING invocation past its deadline."""

    FAILED_BEFORE_COMMIT = "FAILED_BEFORE_COMMIT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    WAIT = "WAIT"
    """An attempt is open and its credential still valid: look again at the next sweep."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The end of one stuck invocation: the state, its event kind and the event's data."""

    end: StuckEnd
    kind: EventKind | None
    data: dict[str, Any]

    @property
    def state(self) -> State | None:
        return None if self.end is StuckEnd.WAIT else State(self.end.value)


def judge(
    inv: InvocationRecord, attempts: Sequence[AttemptRecord], *, is_write: bool, now: datetime
) -> Verdict:
    """The end of ``inv`` (EXECUTING, past its deadline) given its attempts; see the module
    docstring. ``is_write``: the tool may change state (True also when the tool is no longer
    served: the safe reading)."""
    open_ = [a for a in attempts if not a.outcome]
    data: dict[str, Any] = {
        "reason": "deadline_expired",
        "deadline": inv.deadline,
        "attempts": len(attempts),
        "open_attempt": open_[-1].attempt_id if open_ else "",
    }
    if not open_:
        return Verdict(StuckEnd.FAILED_BEFORE_COMMIT, EventKind.FAILED_BEFORE_COMMIT, data)
    if any(now < datetime.fromisoformat(a.credential_expires_at) for a in open_):
        return Verdict(StuckEnd.WAIT, None, data)
    if is_write:
        return Verdict(StuckEnd.OUTCOME_UNKNOWN, EventKind.OUTCOME_UNKNOWN, data)
    return Verdict(StuckEnd.FAILED_BEFORE_COMMIT, EventKind.FAILED_BEFORE_COMMIT, data)


__all__ = ["StuckEnd", "Verdict", "judge"]
