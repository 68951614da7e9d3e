"""The event trail of one call: events checked against the 6.2 edges as they are added.

A call (``Propose``, ``Confirm``, ``BeginAttempt`` ...) collects its events in a :class:`Trail`
and hands ``trail.events`` to one store write, so all of a call's events are durable together
or not at all (spec 6.13). Each event records how long its stage took (``duration_us``), which
metrics and traces read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from callgate.base.events import EventKind
from callgate.base.fastinit import builder
from callgate.base.ids import new_id
from callgate.base.states import EDGES, TERMINAL, State, check_transition
from callgate.base.trace import TraceContext, new_span_id
from callgate.store.base import EventRecord, InvocationRecord, Move, Store

_event = builder(EventRecord)
_EDGE_IDS: frozenset[tuple[int, int]] = frozenset(
    (id(a), id(b)) for a, nxt in EDGES.items() if a not in TERMINAL for b in nxt
)
"""The 6.2 edges by identity (an enum member hashes in Python code): a legal edge is one set
look-up, an illegal one goes to :func:`check_transition` for its error."""


class Trail:
    """Accumulates the events of one call on one invocation, enforcing the 6.2 edges."""

    __slots__ = ("_mark", "_numbered", "at", "events", "invocation_id", "seq", "state", "trace")

    def __init__(self, invocation_id: str, state: State | None, trace: TraceContext, at: str) -> None:
        self.invocation_id = invocation_id
        self.state = state
        self.trace = trace
        self.at = at
        self.seq = 0
        self.events: list[EventRecord] = []
        self._mark = time.perf_counter()
        self._numbered = state is None
        """A new invocation numbers its own events from 1; on an existing one the store assigns
        the next sequence numbers in the same transaction."""

    @classmethod
    def new(cls, invocation_id: str, trace: TraceContext, at: str) -> Trail:
        """The trail of an invocation this call creates (its first event is ``proposed``)."""
        return cls(invocation_id, None, trace, at)

    @classmethod
    def on(cls, invocation: InvocationRecord, trace: TraceContext, at: str) -> Trail:
        """The trail of a call on an existing invocation, starting from its stored state."""
        return cls(invocation.invocation_id, invocation.state, trace, at)

    def add(self, kind: EventKind, to: State, data: Mapping[str, Any] | None = None) -> None:
        """Append one event moving the invocation to ``to`` (raises on an illegal 6.2 edge)."""
        state = self.state
        if state is not None and to is not state and (id(state), id(to)) not in _EDGE_IDS:
            check_transition(state, to)
        now = time.perf_counter()
        payload = {**data} if data else {}
        payload["duration_us"] = int((now - self._mark) * 1e6)  # time spent in this stage
        self._mark = now
        if self._numbered:
            self.seq += 1
            event_id = f"{self.invocation_id}.{self.seq}"
        else:
            self.seq = 0  # the store assigns the next sequence number in the same transaction
            event_id = new_id()
        self.events.append(
            _event(
                event_id=event_id,
                invocation_id=self.invocation_id,
                seq=self.seq,
                at=self.at,
                kind=kind._value_,
                from_state=state,
                to_state=to,
                trace_id=self.trace.trace_id,
                span_id=new_span_id(),
                data=payload,
            )
        )
        self.state = to


def rewind(trail: Trail, after: EventKind) -> None:
    """Drop the events of a new invocation's trail after the last one of kind ``after`` (a call
    that must be answered otherwise than its later stages said, e.g. a claim lost at commit)."""
    kinds = [e.kind for e in trail.events]
    n = len(kinds) - kinds[::-1].index(after.value)
    del trail.events[n:]
    last = trail.events[-1]
    trail.state, trail.seq = last.to_state, last.seq


async def move(
    store: Store,
    inv: InvocationRecord,
    to: State,
    kind: EventKind,
    data: Mapping[str, Any],
    trace: TraceContext,
    at: str,
) -> InvocationRecord | None:
    """Move ``inv`` to ``to`` with one event, compare-and-set on its current state: the new
    record, or None when another call changed the invocation first."""
    m = planned(inv, to, kind, data, trace, at)
    return m.record if await store.transition(m.record, m.expected, m.events) else None


def planned(
    inv: InvocationRecord, to: State, kind: EventKind, data: Mapping[str, Any], trace: TraceContext, at: str
) -> Move:
    """The move of :func:`move`, not yet written (a sweep writes many in one transaction:
    :meth:`Store.transition_many`)."""
    trail = Trail.on(inv, trace, at)
    trail.add(kind, to, data)
    return Move(replace(inv, state=to, updated_at=at), inv.state, trail.events)


__all__ = ["Trail", "move", "planned", "rewind"]
