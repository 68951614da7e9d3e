"""Admission under overload: an adaptive concurrency limit and the caller's deadline.

One :class:`Admission` per listener (gRPC server), consulted by
:class:`~callgate.server.interceptors.CallgateInterceptor` before a ``callgate.v1`` handler runs
(health and reflection never reach it). Every handler shares one event loop, so the latency of
an admitted call grows with the number of calls in flight; the rule keeps that number where the
measured latency stays near the target, and refuses the rest at once instead of queueing them:

* **limit (AIMD on measured latency).** Each finished call's time in the handler is measured. A
  call slower than ``server.admission_target_ms`` shrinks the limit by 10% (at most once per
  current latency, so one slow burst counts once). While the limit is in use (at least half of
  it in flight), a call within the target grows it: by 1 when it took less than half the target
  (headroom: the limit follows the bursts of a lightly loaded sidecar within one burst, like
  TCP's slow start), by ``1/limit`` when it took between half the target and the target (about
  +1 per limit's worth of calls, as the latency nears the target). The limit stays in
  ``[admission_min_in_flight, max_concurrent_rpcs]`` and starts at the minimum. A call arriving
  with ``limit`` calls in flight is refused: ``overloaded`` (gRPC ``RESOURCE_EXHAUSTED``).
* **deadline.** The expected service time is the moving average of recent calls' latency
  (weight 0.2). While calls are in flight, a call whose remaining gRPC deadline is shorter is
  refused: ``deadline_too_short`` (gRPC ``DEADLINE_EXCEEDED``); serving it would waste the work
  on an answer nobody reads. With nothing in flight the estimate may be stale (one slow call long
  ago) and the call is served, so short-deadline callers can never be locked out by an estimate
  that only admitted calls could correct; a call whose deadline has already passed (it waited
  in gRPC core or the event loop's queue) is refused the same way whatever is in flight, before
  its handler runs: nothing is recorded for it.
* **retry hint.** Both refusals carry the expected service time, rounded up to a millisecond and
  clamped to ``[MIN_RETRY_MS, MAX_RETRY_MS]``: as ``google.rpc.RetryInfo``, as
  ``grpc-retry-pushback-ms`` trailing metadata and as ``ErrorInfo.metadata.retry_after_ms``.

A call that finds the limit full is refused before anything is done for it: the interceptor
asks :meth:`Admission.full` when gRPC hands it the call, before the request is decoded and
before a handler runs, and answers with a status built once per retry hint (``overloaded``
costs a fraction of a served call, not about as much: issue 34 item 7, docs/BENCHMARKS.md).
Before that, the server itself asks :meth:`Admission.intake_open` before it takes the next
``callgate.v1`` call from gRPC core (``server/intake.py``): while the limit is full the excess
waits in gRPC core or is dropped there, and only what slips through (a call taken while the
limit filled, one let in after a stall of a latency target) reaches the early refusal.
Nothing is recorded for a refused call: it never reached the gate. The queue in front of Python
(calls gRPC core accepted that the event loop has not picked up yet) is bounded separately by
``server.max_pending_rpcs`` (``server/app.py``); beyond it gRPC core drops the call before any
Python runs, and the caller sees ``CANCELLED`` without a hint.
"""

from __future__ import annotations

import asyncio
import math
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from callgate.base.errors import CallgateError, deadline_too_short, overloaded

DECREASE = 0.9
"""Multiplicative decrease of the limit when a call took longer than the target."""
HEADROOM = 0.5
"""A call faster than this fraction of the target grows an in-use limit by one (not ``1/limit``):
measured on 2026-12-05, the ``1/limit`` step alone kept the limit at 16-20 through a 1,000/s open
loop whose calls took 1-6 ms against the 50 ms target, and refused the bursts above it."""
TAKEN_TTL_S = 0.5
"""How long a call taken from gRPC core counts against the intake before the interceptor sees it
(:meth:`Admission.taken`); one cancelled before its handler started is forgotten then."""
SMOOTHING = 0.2
"""Weight of the newest sample in the moving average of latency."""
MIN_RETRY_MS = 5
"""Smallest retry hint, in milliseconds."""
MAX_RETRY_MS = 1000
"""Largest retry hint, in milliseconds."""
SECONDS_BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0,
)  # fmt: skip
"""Upper bounds of the histogram of admitted calls' time in the handler, from acceptance (the
admission) to the answer (``AdmissionState.seconds_counts``; ``callgate_admission_seconds``)."""


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """The admission rule's parameters for one listener (from ``[server]``)."""

    target_s: float
    """Latency target of an admitted call in the handler, seconds (``admission_target_ms``)."""
    min_limit: int
    """Floor and starting value of the limit (``admission_min_in_flight``)."""
    max_limit: int
    """Ceiling of the limit (``max_concurrent_rpcs``; 0 = no ceiling)."""


@dataclass(frozen=True, slots=True)
class AdmissionState:
    """A snapshot of one listener's admission, for logs, metrics and tests."""

    limit: float
    in_flight: int
    expected_s: float
    """Moving average of recent calls' latency (0 before the first call ends)."""
    admitted: int
    refused_overloaded: int
    refused_deadline: int
    answered_late: int = 0
    """Admitted calls whose handler answered after the call's gRPC deadline had passed (the
    answer is dropped by gRPC: work nobody reads). The issue 34 target is 0."""
    seconds_counts: tuple[int, ...] = ()
    """Admitted calls by time from acceptance to the end of the handler: one count per bound of
    :data:`SECONDS_BUCKETS`, then one for longer (not cumulative)."""
    seconds_sum: float = 0.0
    """Total time of the admitted calls counted in :attr:`seconds_counts`, seconds."""


class Admission:
    """The admission rule of one listener (see the module docstring). Used only on the event
    loop of its server: no locks."""

    def __init__(self, settings: AdmissionSettings, timer: Callable[[], float] = time.monotonic) -> None:
        if settings.min_limit < 1 or settings.target_s <= 0:
            raise ValueError("admission needs min_limit >= 1 and a positive target")
        self._s = settings
        self._timer = timer
        self._ceiling = float(settings.max_limit) if settings.max_limit else math.inf
        self._limit = min(float(settings.min_limit), self._ceiling)
        self._in_flight = 0
        self._expected = 0.0
        self._decreased_at = -math.inf
        self._admitted = 0
        self._refused_overloaded = 0
        self._refused_deadline = 0
        self._answered_late = 0
        self._seconds = [0] * (len(SECONDS_BUCKETS) + 1)
        self._seconds_sum = 0.0
        self._taken: deque[float] = deque()
        """When each call taken from gRPC core and not seen by the interceptor yet was taken (:meth:`taken`)."""
        self._intake: asyncio.Event | None = None
        """Set when :meth:`intake_open` may have become true (:meth:`wait_intake`)."""

    def retry_after_ms(self) -> int:
        """The retry hint: the expected service time, in milliseconds, clamped."""
        return min(MAX_RETRY_MS, max(MIN_RETRY_MS, math.ceil(self._expected * 1000)))

    def full(self) -> bool:
        """Whether a call arriving now would be refused ``overloaded`` (:meth:`admit` without
        its deadline rule): the interceptor asks before a handler or the request's decoding."""
        return self._in_flight >= int(self._limit)

    def _too_short(self, time_remaining: float | None) -> bool:
        """The deadline rule: a deadline already past (nothing in flight or not: nobody reads
        the answer), or, while calls are in flight, shorter than the expected service time."""
        if time_remaining is None:
            return False
        return time_remaining <= 0 or (self._in_flight > 0 and time_remaining < self._expected)

    def taken(self) -> None:
        """The server took a ``callgate.v1`` call from gRPC core (``server/intake.py``): it
        counts against the intake until the interceptor sees it (:meth:`seen`), or for
        :data:`TAKEN_TTL_S` at most (a call cancelled before its handler started is never seen).
        Between the interceptor and :meth:`admit` (the request's receipt) a call counts nowhere:
        one more can be taken meanwhile and is refused ``overloaded`` if the limit is full then
        (counting it until :meth:`admit` leaked: under a flood many calls taken never reach it)."""
        self._taken.append(self._timer())

    def intake_open(self) -> bool:
        """Whether the server should take another ``callgate.v1`` call from gRPC core now: the
        calls in flight and those taken but not seen yet leave a slot free."""
        taken = self._taken
        if taken:
            expired = self._timer() - TAKEN_TTL_S
            while taken and taken[0] < expired:
                taken.popleft()
        return self._in_flight + len(taken) < int(self._limit)

    async def wait_intake(self) -> None:
        """Return once :meth:`intake_open` (woken when a call ends or a taken one is seen), or after
        the latency target at most: when nothing ended for that long the calls in flight are
        stalled (a held lock, a slow store), the calls waiting in gRPC core would not be served
        in time anyway, and one is let in to be refused ``overloaded`` with the retry hint, as
        before the intake waited (at most one per method per target: a trickle, not a flood)."""
        if self.intake_open():
            return
        if self._intake is None:
            self._intake = asyncio.Event()
        until = self._timer() + self._s.target_s
        while not self.intake_open():
            left = until - self._timer()
            if left <= 0:
                return
            self._intake.clear()
            try:
                await asyncio.wait_for(self._intake.wait(), min(left, TAKEN_TTL_S))
            except TimeoutError:
                pass

    def seen(self) -> None:
        """A call taken from gRPC core reached the interceptor (:meth:`taken`): it no longer
        counts against the intake; :meth:`admit` or the early refusal decides on it next."""
        if self._taken:
            self._taken.popleft()
            if self._intake is not None and self.intake_open():
                self._intake.set()

    def refuse_early(self, time_remaining: float | None) -> CallgateError:
        """The refusal of a call that found the limit :meth:`full` before its handler ran, by
        the same rules and counts as :meth:`admit` (the deadline rule first)."""
        if self._too_short(time_remaining):
            self._refused_deadline += 1
            return deadline_too_short(self.retry_after_ms())
        self._refused_overloaded += 1
        return overloaded(self.retry_after_ms())

    def admit(self, time_remaining: float | None) -> float:
        """Admit a call or raise its refusal (:func:`~callgate.base.errors.deadline_too_short`,
        :func:`~callgate.base.errors.overloaded`). ``time_remaining``: seconds left of the call's
        gRPC deadline (``None``: none). Returns the start time to hand to :meth:`release`."""
        if self._too_short(time_remaining):
            self._refused_deadline += 1
            raise deadline_too_short(self.retry_after_ms())
        if self._in_flight >= int(self._limit):
            self._refused_overloaded += 1
            raise overloaded(self.retry_after_ms())
        self._in_flight += 1
        self._admitted += 1
        return self._timer()

    def release(self, started: float, answered_late: bool = False) -> None:
        """An admitted call ended (answered, failed or cancelled): measure it, adapt the limit.
        ``answered_late``: it answered after its gRPC deadline (counted, see
        :attr:`AdmissionState.answered_late`)."""
        now = self._timer()
        took = max(0.0, now - started)
        self._seconds[bisect_left(SECONDS_BUCKETS, took)] += 1
        self._seconds_sum += took
        self._answered_late += answered_late
        in_use = self._in_flight >= self._limit / 2
        self._in_flight -= 1
        self._expected = (
            took if self._expected == 0.0 else self._expected + SMOOTHING * (took - self._expected)
        )
        if took > self._s.target_s:
            if now - self._decreased_at >= max(self._expected, self._s.target_s):
                self._limit = max(float(self._s.min_limit), self._limit * DECREASE)
                self._decreased_at = now
        elif in_use:
            step = 1.0 if took < self._s.target_s * HEADROOM else 1.0 / self._limit
            self._limit = min(self._ceiling, self._limit + step)
        if self._intake is not None and self.intake_open():
            self._intake.set()

    def state(self) -> AdmissionState:
        """The current limit, calls in flight, expected latency and counters."""
        return AdmissionState(
            limit=self._limit,
            in_flight=self._in_flight,
            expected_s=self._expected,
            admitted=self._admitted,
            refused_overloaded=self._refused_overloaded,
            refused_deadline=self._refused_deadline,
            answered_late=self._answered_late,
            seconds_counts=tuple(self._seconds),
            seconds_sum=self._seconds_sum,
        )


__all__ = ["SECONDS_BUCKETS", "Admission", "AdmissionSettings", "AdmissionState"]
