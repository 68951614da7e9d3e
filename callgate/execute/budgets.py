"""Per-session budgets (spec 6.11): the runtime, not the model, ends the tool loop.

Limits: model calls (counted at ``ListTools``: one tool listing per model call), tool calls
(counted at ``Propose``), wall-clock time since ``OpenSession``, cumulative result bytes (counted
at ``EncodeResult``) and external cost (reported with each attempt outcome). A session asks for
its limits at ``OpenSession``; it gets at most the configured defaults (0 = "use the default").
Counters are incremented atomically in the store first and checked after, so concurrent calls
cannot overspend together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from callgate.base.errors import budget_exhausted
from callgate.config import BudgetsConfig
from callgate.store.base import Usage


@dataclass(frozen=True, slots=True)
class Limits:
    model_calls: int
    tool_calls: int
    wall_clock_seconds: int
    result_bytes: int
    cost_micros: int
    """0 = unlimited (only for external cost)."""

    def as_dict(self) -> dict[str, int]:
        return {
            "max_model_calls": self.model_calls,
            "max_tool_calls": self.tool_calls,
            "max_wall_clock_seconds": self.wall_clock_seconds,
            "max_result_bytes": self.result_bytes,
            "max_external_cost_micros": self.cost_micros,
        }


def effective_limits(requested: Mapping[str, int], defaults: BudgetsConfig) -> Limits:
    """The session's limits: what it asked for, capped by the configured defaults."""

    def pick(key: str, default: int) -> int:
        asked = int(requested.get(key, 0) or 0)
        if default == 0:
            return asked
        return min(asked, default) if asked else default

    return Limits(
        model_calls=pick("max_model_calls", defaults.max_model_calls),
        tool_calls=pick("max_tool_calls", defaults.max_tool_calls),
        wall_clock_seconds=pick("max_wall_clock_seconds", defaults.max_wall_clock_seconds),
        result_bytes=pick("max_result_bytes", defaults.max_result_bytes),
        cost_micros=pick("max_external_cost_micros", defaults.max_external_cost_micros),
    )


def check(limits: Limits, usage: Usage, opened_at: datetime, now: datetime) -> None:
    """Raise ``budget_exhausted`` (naming the budget) when any limit is exceeded."""
    over: list[str] = []
    if limits.model_calls and usage.model_calls > limits.model_calls:
        over.append("model_calls")
    if limits.tool_calls and usage.tool_calls > limits.tool_calls:
        over.append("tool_calls")
    if limits.result_bytes and usage.result_bytes > limits.result_bytes:
        over.append("result_bytes")
    if limits.cost_micros and usage.cost_micros > limits.cost_micros:
        over.append("external_cost")
    if limits.wall_clock_seconds and (now - opened_at).total_seconds() > limits.wall_clock_seconds:
        over.append("wall_clock")
    if over:
        raise budget_exhausted(over)
