"""The expiry sweep, as its own asyncio task: an unconfirmed call ends as
``cancelled_before_commit`` (spec 6.11), and so does a call past its deadline that has not started
executing (6.2, 6.7: nothing stays AUTHORIZED or PREPARED forever).

Every ``confirmation.sweep_interval_ms`` the sweeper calls ``gate.expire_confirmations()``, which
cancels every parked invocation whose confirmation window has passed, then
``gate.expire_deadlines()``, which cancels every AUTHORIZED or PREPARED invocation whose deadline
has passed (event ``deadline_expired``); both release the idempotency key. Then, when it was given
the execution side, ``execution.expire_executing()`` ends every EXECUTING invocation past its
deadline that no attempt can finish any more (FAILED_BEFORE_COMMIT, key released, or
OUTCOME_UNKNOWN when an attempt never reported: callgate/execute/expiry.py). Last, when
``[store.retention]`` keeps records for a limited time, a retention pass runs every
``store.retention.interval_seconds`` (callgate/store/retention.py: records past their retention are
deleted in small batches; a failing pass fails the sweep like any other step). The first sweep runs as
soon as the task starts, so what expired while the sidecar was down ends at startup, not one
interval later. It is started and stopped by the composition root (:class:`callgate.server.app.Sidecar`),
independently of the policy watcher, and is visible in gRPC health as
:data:`SWEEPER_HEALTH_SERVICE` on every listener:

* ``SERVING`` while the task runs and its last sweep succeeded;
* ``NOT_SERVING`` while sweeps fail (e.g. the store is unavailable; the error is logged, the next
  sweep retries and a success turns it back to ``SERVING``) and for good if the task died.

A sweep that expired something is logged at INFO with its count and time (by the sidecar's
clock); an empty sweep at DEBUG. Log lines carry counts and times only, never arguments.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from callgate.base.clock import Clock, rfc3339

log = logging.getLogger("callgate.sweeper")

SWEEPER_HEALTH_SERVICE = "callgate.v1.ConfirmationSweeper"
"""gRPC health service name of the sweeper (``python -m callgate.server.healthcheck --service``)."""

STOP_GRACE_SECONDS = 5.0
"""How long :meth:`ConfirmationSweeper.stop` lets a sweep in progress finish."""

SweeperHealthSetter = Callable[[bool], Awaitable[None]]
"""``serving`` -> set :data:`SWEEPER_HEALTH_SERVICE` on every listener's health service."""


class Expirer(Protocol):
    """What the sweeper needs from the gate."""

    async def expire_confirmations(self) -> int:
        """Cancel every parked invocation whose confirmation expired; return how many."""
        ...

    async def expire_deadlines(self) -> int:
        """Cancel every AUTHORIZED or PREPARED invocation past its deadline; return how many."""
        ...


class Retention(Protocol):
    """What the sweeper needs from retention (:class:`callgate.store.retention.Purger`)."""

    async def maybe_run(self) -> object:
        """A retention pass if one is due."""
        ...


class ExecutingExpirer(Protocol):
    """What the sweeper needs from the execution side."""

    async def expire_executing(self) -> int:
        """End every EXECUTING invocation past its deadline that no attempt can finish; how many."""
        ...


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """One finished sweep."""

    at: str
    """When it ran (RFC 3339, by the sidecar's clock)."""
    expired: int
    """Invocations it cancelled because their confirmation expired."""
    deadlines: int = 0
    """Invocations it cancelled because their deadline passed."""
    executing: int = 0
    """EXECUTING invocations it ended because their deadline passed and no attempt could finish."""


class ConfirmationSweeper:
    """Runs :meth:`Expirer.expire_confirmations` every ``interval`` seconds on its own task."""

    def __init__(
        self,
        gate: Expirer,
        clock: Clock,
        *,
        interval: float,
        set_health: SweeperHealthSetter,
        execution: ExecutingExpirer | None = None,
        retention: Retention | None = None,
    ) -> None:
        """``interval``: seconds between sweeps (> 0); ``set_health``: reports the sweeper's
        status (see the module docstring); ``execution``: ends stuck EXECUTING invocations too.
        Raises ValueError on a non-positive interval."""
        if interval <= 0:
            raise ValueError("the sweep interval must be positive")
        self._gate = gate
        self._execution = execution
        self._retention = retention
        self._clock = clock
        self._interval = interval
        self._set_health = set_health
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stopping = False
        self._serving: bool | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.last: SweepRecord | None = None
        """The last successful sweep (``None`` before the first)."""
        self.total_expired = 0
        """Invocations cancelled by this sweeper since it started (confirmations and deadlines)."""
        self.total_deadlines = 0
        """Of those, invocations cancelled because their deadline passed."""
        self.failures = 0
        """Sweeps that raised in a row (0 after a success)."""

    @property
    def running(self) -> bool:
        """True while the sweep task is alive."""
        return self._task is not None and not self._task.done()

    async def sweep_once(self) -> int:
        """One sweep now; returns how many invocations it cancelled. Raises what the gate raises."""
        expired = await self._gate.expire_confirmations()
        deadlines = await self._gate.expire_deadlines()
        executing = await self._execution.expire_executing() if self._execution is not None else 0
        self.last = SweepRecord(
            at=rfc3339(self._clock.now()), expired=expired, deadlines=deadlines, executing=executing
        )
        self.total_expired += expired + deadlines + executing
        self.total_deadlines += deadlines + executing
        if expired:
            log.info("confirmation sweep at %s: %d expired confirmation(s) cancelled", self.last.at, expired)
        if deadlines:
            log.info(
                "deadline sweep at %s: %d invocation(s) past their deadline cancelled",
                self.last.at,
                deadlines,
            )
        if executing:
            log.info(
                "deadline sweep at %s: %d executing invocation(s) past their deadline ended",
                self.last.at,
                executing,
            )
        if not expired and not deadlines and not executing:
            log.debug("confirmation sweep at %s: nothing expired", self.last.at)
        if self._retention is not None:  # last: a failing pass does not hide what expired above
            await self._retention.maybe_run()
        return expired + deadlines + executing

    async def _report(self, serving: bool) -> None:
        if serving is not self._serving:
            self._serving = serving
            await self._set_health(serving)

    async def _run(self, stop: asyncio.Event) -> None:
        first = True  # the first sweep runs at once (startup), the next ones every interval
        while True:
            if not first:
                try:
                    await asyncio.wait_for(stop.wait(), self._interval)
                    return  # stop() asked: never in the middle of a sweep
                except TimeoutError:
                    pass
            first = False
            try:
                await self.sweep_once()
            except Exception as exc:
                self.failures += 1
                log.error(
                    "confirmation sweep failed (%d in a row; last good sweep %s): %s: %s",
                    self.failures,
                    self.last.at if self.last else "none",
                    type(exc).__name__,
                    exc,
                )
                await self._report(False)
                continue
            if self.failures:
                log.info("confirmation sweep recovered after %d failure(s)", self.failures)
            self.failures = 0
            await self._report(True)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if self._stopping:
            return
        exc = None if task.cancelled() else task.exception()
        log.error("the confirmation sweeper stopped unexpectedly: %r; expired confirmations now wait", exc)
        report = asyncio.ensure_future(self._report(False))
        self._pending.add(report)
        report.add_done_callback(self._pending.discard)

    async def start(self) -> None:
        """Start the task and report ``SERVING``. Idempotent while running."""
        if self.running:
            return
        self._stopping = False
        self._stop = asyncio.Event()
        await self._report(True)
        self._task = asyncio.ensure_future(self._run(self._stop))
        self._task.add_done_callback(self._on_done)

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop the task between sweeps: a sweep in progress may finish (so it never stops
        between cancelling an invocation and releasing its key) for up to ``grace`` seconds,
        then it is cancelled."""
        self._stopping = True
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                log.warning("the confirmation sweep did not finish within %.1f s; cancelled", grace)
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved (a death was reported by _on_done)
        for report in list(self._pending):
            await report
