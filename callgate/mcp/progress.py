"""One increasing progress sequence per call (MCP: "the progress value MUST increase with each
notification").

A call's progress interleaves the gateway's own stages (proposing, confirmation, attempt, upstream
call, encoding) with the upstream's notifications. Stage ``n`` is reported as the integer ``n``;
the upstream's progress during stage ``n`` is mapped into the open interval ``(n, n + 1)``:
``n + p / total`` (capped below ``n + 1``) when the upstream gives a total, else
``n + p / (p + 1)``. Both are increasing in ``p``, so an upstream that counts 1/3, 2/3, 3/3 is
reported as 4.33, 4.67, 4.99 and the next stage is 5. An upstream value that does not increase
(a buggy or replayed notification) is dropped rather than sent backwards. ``total`` is never sent:
how many stages remain is not known in advance.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from callgate.execute.encode import neutralize

log = logging.getLogger("callgate.mcp")

_CAP = 0.999
"""Upstream progress stays below the next stage by this much."""


class CallProgress:
    """Progress of one ``tools/call`` for a client that sent a ``progressToken`` (else a no-op:
    the SDK's ``report_progress`` sends nothing without a token)."""

    def __init__(self, ctx: Any, after: float) -> None:
        self.ctx = ctx
        self.after = after
        self.started = time.monotonic()
        self.stage_n = 0
        self.sent = 0.0
        """The last value sent (every later one is greater)."""
        self._upstream_last: float | None = None

    async def _send(self, value: float, message: str | None) -> None:
        if not value > self.sent:
            return
        self.sent = value
        try:
            await self.ctx.session.report_progress(value, None, message)
        except Exception as exc:  # progress is best effort; never fails the call
            log.debug("progress not sent: %s", type(exc).__name__)

    async def step(self, message: str) -> None:
        """The next gateway stage (sent only once the call has run ``after`` seconds)."""
        self.stage_n += 1
        self._upstream_last = None
        if time.monotonic() - self.started < self.after:
            return
        await self._send(float(self.stage_n), f"callgate: {message}")

    async def waiting(self, fraction: float, message: str) -> None:
        """A heartbeat of the current stage while it waits (``fraction`` of its wait elapsed,
        0 <= fraction < 1): sent at once, whatever ``after``, inside ``(n, n + 1)``."""
        await self._send(self.stage_n + min(max(fraction, 0.0), 1.0) * _CAP + 1e-6, f"callgate: {message}")

    async def upstream(self, server: str, progress: float, total: float | None, message: str | None) -> None:
        """An upstream ``notifications/progress`` during the current stage."""
        if not math.isfinite(progress) or progress < 0:
            return
        if self._upstream_last is not None and not progress > self._upstream_last:
            return  # not increasing upstream: dropped, never sent backwards
        self._upstream_last = progress
        if total is not None and math.isfinite(total) and total > 0:
            fraction = min(progress / total, 1.0)
        else:
            fraction = progress / (progress + 1.0)
        value = self.stage_n + min(fraction, 1.0) * _CAP
        text = f"upstream {server}"
        if total is not None:
            text += f": {progress:g}/{total:g}"
        if message:
            text += f" ({neutralize(message)[0][:200]})"
        await self._send(value, text)


__all__ = ["CallProgress"]
