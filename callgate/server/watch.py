"""``WatchInvocation``: an invocation's changes as a stream, woken by committed events.

:class:`InvocationWatch` is an :class:`~callgate.observability.EventSink` on the sidecar's
:class:`~callgate.observability.PublishingStore`: every committed write of an invocation wakes the
streams watching it, which re-read the invocation and its events from the store (the store stays
the single source; a wake-up carries no data). A change committed by another pod sharing a
PostgreSQL store raises no local event, so a stream also re-reads every ``recheck_s`` seconds.
A stream ends after the message showing a terminal state (6.2), or when the caller's deadline
passes or it goes away (the RPC is cancelled; nothing is left registered).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from callgate.base.events import EventKind
from callgate.base.states import TERMINAL
from callgate.propose.confirmation import PAGE_SIZE_MAX
from callgate.propose.gate import Gate
from callgate.store.base import DecisionRecord, EventRecord, InvocationRecord

RECHECK_S = 1.0
"""Re-read period of a stream without local events (changes made by other pods)."""

PENDING_KINDS = frozenset(
    k.value
    for k in (
        EventKind.CONFIRMATION_REQUESTED,
        EventKind.CONFIRMED,
        EventKind.CONFIRMATION_REJECTED,
        EventKind.CONFIRMATION_EXPIRED,
        EventKind.CANCELLED,
        EventKind.DEADLINE_EXPIRED,
    )
)
"""The event kinds that can change a pending list (they wake ``WatchPending`` streams)."""


class InvocationWatch:
    """Wakes the streams watching an invocation when its events are committed (an event sink)."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._any: set[asyncio.Event] = set()  # WatchPending streams: woken by every commit

    async def publish(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        if not self._waiting and not self._any:
            return  # nobody watches (the common case): nothing to wake
        ids = {e.invocation_id for e in events}
        if invocation is not None:
            ids.add(invocation.invocation_id)
        for invocation_id in ids:
            for woken in self._waiting.get(invocation_id, ()):
                woken.set()
        if self._any and any(e.kind in PENDING_KINDS for e in events):
            for woken in self._any:
                woken.set()

    async def publish_decision(self, record: DecisionRecord) -> None:
        return None

    async def close(self) -> None:
        for waiters in (*self._waiting.values(), self._any):
            for woken in waiters:
                woken.set()

    def watching(self, invocation_id: str) -> int:
        """How many streams watch ``invocation_id`` now (tests: nothing leaks after a stream)."""
        return len(self._waiting.get(invocation_id, ()))

    async def changes(
        self, gate: Gate, invocation_id: str, session_id: str, *, recheck_s: float = RECHECK_S
    ) -> AsyncIterator[tuple[InvocationRecord, list[EventRecord], bool]]:
        """(invocation, events since the previous item, terminal) for each change, starting with
        the invocation as it is. ``invocation_not_found`` (raised by the gate) for an unknown id
        or another session's invocation."""
        woken = asyncio.Event()
        self._waiting.setdefault(invocation_id, set()).add(woken)
        try:
            last_seq = -1
            last_state = None
            first = True
            while True:
                woken.clear()  # cleared before the read: a commit after it wakes the next wait
                inv, events = await gate.get_invocation(invocation_id, session_id=session_id)
                new = [e for e in events if e.seq > last_seq]
                terminal = inv.state in TERMINAL
                if first or new or inv.state != last_state or terminal:
                    yield inv, new, terminal
                    first = False
                if terminal:
                    return
                if new:
                    last_seq = max(e.seq for e in new)
                last_state = inv.state
                try:
                    await asyncio.wait_for(woken.wait(), timeout=recheck_s)
                except TimeoutError:
                    pass
        finally:
            waiters = self._waiting.get(invocation_id)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiting[invocation_id]

    def pending_watchers(self) -> int:
        """How many ``WatchPending`` streams are open now (tests: nothing leaks)."""
        return len(self._any)

    async def pending_changes(
        self, gate: Gate, tenant: str, *, recheck_s: float = RECHECK_S
    ) -> AsyncIterator[tuple[InvocationRecord, ...]]:
        """``tenant``'s pending confirmations (one page of the largest size, oldest first), first
        as they are, then after each change of the listed ids, digests or expiries. Woken by every
        local commit and re-read every ``recheck_s`` (other pods; a window that passed unswept
        leaves the list then). ``invalid_request`` (raised by the gate) for an empty tenant."""
        woken = asyncio.Event()
        self._any.add(woken)
        try:
            last: tuple[tuple[str, str, str], ...] | None = None
            while True:
                woken.clear()
                page = await gate.list_pending(tenant, PAGE_SIZE_MAX)
                shown = tuple((p.invocation_id, p.digest, p.confirmation_expires_at) for p in page.pending)
                if shown != last:
                    yield page.pending
                    last = shown
                try:
                    await asyncio.wait_for(woken.wait(), timeout=recheck_s)
                except TimeoutError:
                    pass
        finally:
            self._any.discard(woken)


__all__ = ["RECHECK_S", "InvocationWatch"]
