"""The vocabulary of meters that both the policy side (:mod:`callgate.policy.meters`: declarations,
contributions, ``context.usage``) and the store (:mod:`callgate.store.meters`: reservations and
exact running totals) speak (issue 30). Plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Final

SESSION_WINDOW: Final = "session"
"""The window that lasts as long as the session."""
LABEL_PREFIX: Final = "label:"
"""Labels are kept as session-window meters named ``label:<label>`` (:mod:`callgate.store.meters`)."""
RESULT_LABELS_KEY: Final = "result_labels"
"""The member of the event that makes a labelled call's result exist (COMMITTED, OUTCOME_UNKNOWN,
FAILED_AFTER_COMMIT) naming the labels the result carries into its session; the store records
them in the same transaction (:mod:`callgate.store.labels`)."""


@dataclass(frozen=True, slots=True)
class Window:
    """One window of a meter: its name as written and its length (0: the session)."""

    name: str
    ms: int


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one call adds to one meter: ``amount`` units of 10^-scale at ``scope``."""

    meter: str
    scope: str
    amount: int
    windows: tuple[Window, ...]
    scale: int
    keep_ms: int = 0
    """The longest timed window any ToolSpec of the serving snapshot declares for this meter
    (0: this call's own): its entries are kept twice that long, so a tool that shares the meter
    over a longer window than this one still reads its whole history."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The value of one meter window as the call sees it, in units of 10^-scale."""

    meter: str
    window: str
    before: int
    amount: int
    scale: int

    def value(self, units: int) -> int | Decimal:
        return units if self.scale == 0 else Decimal(units).scaleb(-self.scale)

    def as_dict(self) -> dict[str, int | Decimal]:
        return {"before": self.value(self.before), "after": self.value(self.before + self.amount)}


def label_scope(tenant: str, session_id: str) -> str:
    """The scope of a session's labels."""
    return f"{tenant}\x1fx:{session_id}"
