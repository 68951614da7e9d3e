"""Usage metering for the session budgets of spec 6.11: count in memory, persist with the call.

``ListTools`` counts a model call, ``Propose`` a tool call, ``EncodeResult`` result bytes and
``ReportOutcome`` external cost. Counting happens on the one event loop (so it is atomic) and the
limits are checked right after (:func:`callgate.execute.budgets.check`). ``Propose`` takes the
pending increments into its own transaction (:meth:`UsageMeter.take`), so a tool call is never
answered before it is counted on disk; other callers leave theirs to a write queued at the next
turn of the loop, one group commit behind their own: a crash in that window can lose those
increments, so a budget may count low after a crash, never high.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime

from callgate.base.clock import Clock
from callgate.base.fastinit import builder
from callgate.base.lru import remember
from callgate.config import BudgetsConfig
from callgate.execute import budgets
from callgate.execute.budgets import effective_limits
from callgate.store.base import SessionRecord, Store, Usage

log = logging.getLogger("callgate.usage")
_usage = builder(Usage)


def add_usage(a: Usage, b: Usage) -> Usage:
    """The sum of two usage records, field by field."""
    return _usage(
        model_calls=a.model_calls + b.model_calls,
        tool_calls=a.tool_calls + b.tool_calls,
        result_bytes=a.result_bytes + b.result_bytes,
        cost_micros=a.cost_micros + b.cost_micros,
    )


LIMITS_CACHE_MAX = 4096


class UsageMeter:
    """Counts each session's usage against its budgets and hands the increments to store writes."""

    def __init__(self, *, store: Store, clock: Clock, defaults: BudgetsConfig, cache_max: int) -> None:
        self._store = store
        self._clock = clock
        self._defaults = defaults
        self._cache_max = cache_max
        self._usage: OrderedDict[str, Usage] = OrderedDict()
        self._limits: dict[tuple[tuple[str, int], ...], budgets.Limits] = {}
        """Effective limits by requested budgets (few distinct ones: not one entry per session)."""
        self._by_budgets: dict[int, tuple[Mapping[str, int], budgets.Limits]] = {}
        """The same, by identity of a budgets mapping (kept alive here, so its id stays its own)."""
        self._opened: dict[str, datetime] = {}
        """Sessions' opening times, parsed."""
        self._pending: dict[str, Usage] = {}
        """Increments counted in memory but not yet handed to a store write."""
        self._writes: set[asyncio.Future[Usage]] = set()
        self._flush_queued = False

    async def consume(
        self, session: SessionRecord, delta: Usage, *, check: bool = True, flush: bool = True
    ) -> None:
        """Count ``delta`` against the session budgets; raises ``budget_exhausted`` when
        ``check`` and a limit is exceeded (result bytes and cost are counted after the fact and
        stop the *next* model or tool call). ``flush=False``: the caller hands the increment to
        its own write (:meth:`take`) and calls :meth:`settle` when it is done, so no write is
        queued for it (``Propose``)."""
        sid = session.session_id
        usage = self._usage.get(sid)
        if usage is None:
            usage = await self._store.add_usage(sid, Usage())  # load (a zero increment)
        usage = add_usage(usage, delta)
        remember(self._usage, sid, usage, self._cache_max)
        pending = self._pending.get(sid)
        self._pending[sid] = delta if pending is None else add_usage(pending, delta)
        if flush:
            self._queue_flush()
        if check:
            limits, opened_at = self._limits_of(session)
            budgets.check(limits, usage, opened_at, self._clock.now())

    def take(self) -> dict[str, Usage]:
        """Hand every pending increment to the caller's write (``Propose``'s transaction)."""
        pending, self._pending = self._pending, {}
        return pending

    def settle(self) -> None:
        """Queue the write of whatever is still pending (after a ``consume(flush=False)``
        whose caller's write did not take it: a replay, a failure)."""
        if self._pending:
            self._queue_flush()

    def give_back(self, taken: Mapping[str, Usage]) -> None:
        """The write that took these increments failed: queue them again."""
        for sid, delta in taken.items():
            pending = self._pending.get(sid)
            self._pending[sid] = delta if pending is None else add_usage(pending, delta)
        if taken:
            self._queue_flush()

    async def drain(self) -> None:
        """Persist pending increments now and wait for every usage write (shutdown, tests)."""
        self._flush()
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def _limits_of(self, session: SessionRecord) -> tuple[budgets.Limits, datetime]:
        """The session's effective limits (computed once per distinct budgets) and opening time."""
        budgets_of = session.budgets
        hit = self._by_budgets.get(id(budgets_of))
        if hit is not None and hit[0] is budgets_of:
            limits = hit[1]  # the mapping shared by sessions of the same budgets (sessions.compact)
        else:
            key = tuple(budgets_of.items())
            known = self._limits.get(key)
            if known is None:
                limits = effective_limits(budgets_of, self._defaults)
                if len(self._limits) < LIMITS_CACHE_MAX:
                    self._limits[key] = limits
            else:
                limits = known
            if len(self._by_budgets) < LIMITS_CACHE_MAX:
                self._by_budgets[id(budgets_of)] = (budgets_of, limits)
        opened = self._opened.get(session.opened_at)
        if opened is None:
            opened = datetime.fromisoformat(session.opened_at)
            if len(self._opened) >= LIMITS_CACHE_MAX:
                self._opened.clear()
            self._opened[session.opened_at] = opened
        return limits, opened

    def _queue_flush(self) -> None:
        if not self._flush_queued:
            self._flush_queued = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_queued = False
        for sid, delta in self.take().items():
            task = asyncio.ensure_future(self._store.add_usage(sid, delta))
            self._writes.add(task)
            task.add_done_callback(self._written)

    def _written(self, task: asyncio.Future[Usage]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("persisting budget usage failed: %s", task.exception())


__all__ = ["UsageMeter", "add_usage"]
