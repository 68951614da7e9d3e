"""The caller's deadline, for the waits a call makes on its behalf (issue 34: store waits follow
the call's deadline).

The gRPC interceptor sets it for the duration of each call from ``context.time_remaining()``
(a ``ContextVar``: no global state; tasks the call starts inherit it). A wait that could outlast
it, such as a PostgreSQL pool waiting for a connection during an outage, waits at most
:func:`wait_budget` and then refuses with ``store_unavailable`` *before* the deadline, so the
caller gets the stable code rather than ``DEADLINE_EXCEEDED`` with nothing said. Work outside a
call (the sweeper, startup) has no deadline and waits its configured time.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from typing import Final

ANSWER_MARGIN_S: Final = 0.1
"""Seconds kept back from the caller's deadline for the refusal itself to travel back."""
MIN_WAIT_S: Final = 0.01
"""The shortest wait handed out (a call already past its margin still gets one quick try)."""

_DEADLINE: ContextVar[float | None] = ContextVar("callgate_call_deadline", default=None)


def enter(time_remaining: float | None) -> Token[float | None]:
    """The current call has ``time_remaining`` seconds (None: no deadline); reset with :func:`leave`."""
    return _DEADLINE.set(None if time_remaining is None else time.monotonic() + time_remaining)


def leave(token: Token[float | None]) -> None:
    """End what :func:`enter` set."""
    _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left of the current call's deadline, or None outside a call with a deadline."""
    at = _DEADLINE.get()
    return None if at is None else at - time.monotonic()


def wait_budget(configured: float) -> float:
    """How long a wait on the current call's behalf may take: ``configured``, cut to end
    :data:`ANSWER_MARGIN_S` before the call's deadline (at least :data:`MIN_WAIT_S`)."""
    left = remaining()
    if left is None:
        return configured
    return max(MIN_WAIT_S, min(configured, left - ANSWER_MARGIN_S))


__all__ = ["ANSWER_MARGIN_S", "enter", "leave", "remaining", "wait_budget"]
