"""Observability: every committed event fans out to sinks (metrics, decision logs, traces).

The event trail (spec 6.13) is the single source: a sink never sees anything the store has not
durably recorded, and nothing is measured twice in different places. :class:`PublishingStore`
wraps any :class:`~callgate.store.base.Store` and publishes the events of each successful write,
in order, before the call returns (so a lossless sink can fail the RPC, see decision logs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from callgate.base.states import State
from callgate.store.base import (
    AttemptRecord,
    DecisionRecord,
    EventRecord,
    FedResultRecord,
    InvocationRecord,
    KeyClaim,
    Move,
    ResultRecord,
    SessionRecord,
    Store,
    ToolViewRecord,
    Usage,
)
from callgate.store.idempotency.base import ClaimResult, IdempotencyStore


class EventSink(Protocol):
    async def publish(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        """Receive committed events (all of one invocation). ``invocation`` is the record as
        written, when the write carried one. Raising fails the RPC (lossless sinks only)."""
        ...

    async def close(self) -> None: ...

    async def publish_decision(self, record: DecisionRecord) -> None:
        """Receive one committed ``Authorize`` decision. Raising fails the RPC (lossless sinks)."""
        ...


class PublishingStore:
    """A Store that publishes committed events to sinks. Reads pass straight through."""

    def __init__(self, inner: Store, sinks: Sequence[EventSink] = ()) -> None:
        self.inner = inner
        self.sinks: list[EventSink] = list(sinks)

    async def _publish(self, events: Sequence[EventRecord], record: InvocationRecord | None) -> None:
        for sink in self.sinks:
            await sink.publish(events, record)

    # writes carrying events -------------------------------------------------------------
    async def create_invocation(
        self,
        record: InvocationRecord,
        events: Sequence[EventRecord],
        usage: Mapping[str, Usage] | None = None,
        claim: KeyClaim | None = None,
    ) -> ClaimResult | None:
        lost = await self.inner.create_invocation(record, events, usage, claim)
        if lost is None:
            await self._publish(events, record)
        return lost

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        ok = await self.inner.transition(record, expected, events)
        if ok:
            await self._publish(events, record)
        return ok

    async def transition_many(self, moves: Sequence[Move]) -> list[bool]:
        done = await self.inner.transition_many(moves)
        for m, ok in zip(moves, done, strict=True):
            if ok:
                await self._publish(m.events, m.record)
        return done

    async def begin_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        ok = await self.inner.begin_attempt(record, expected, attempt, events)
        if ok:
            await self._publish(events, record)
        return ok

    async def finish_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        ok = await self.inner.finish_attempt(record, expected, attempt, events)
        if ok:
            await self._publish(events, record)
        return ok

    async def put_result(
        self, record: InvocationRecord, expected: State, result: ResultRecord, events: Sequence[EventRecord]
    ) -> bool:
        ok = await self.inner.put_result(record, expected, result, events)
        if ok:
            await self._publish(events, record)
        return ok

    async def append_events(self, events: Sequence[EventRecord]) -> None:
        await self.inner.append_events(events)
        await self._publish(events, None)

    # pass-through ---------------------------------------------------------------------------
    def keys(self) -> IdempotencyStore:
        return self.inner.keys()

    async def barrier(self) -> None:
        await self.inner.barrier()

    async def put_session(self, session: SessionRecord) -> None:
        await self.inner.put_session(session)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self.inner.get_session(session_id)

    async def put_tool_view(self, view: ToolViewRecord) -> None:
        await self.inner.put_tool_view(view)

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        return await self.inner.get_tool_view(session_id, model_call_id)

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        return await self.inner.get_invocation(invocation_id)

    async def list_events(self, invocation_id: str) -> list[EventRecord]:
        return await self.inner.list_events(invocation_id)

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        return await self.inner.list_pending(tenant)

    async def list_pending_page(
        self, tenant: str, after: tuple[str, str] | None, limit: int
    ) -> list[InvocationRecord]:
        return await self.inner.list_pending_page(tenant, after, limit)

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        return await self.inner.get_attempt(attempt_id)

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]:
        return await self.inner.list_attempts(invocation_id)

    async def get_result(self, invocation_id: str) -> ResultRecord | None:
        return await self.inner.get_result(invocation_id)

    async def add_usage(self, session_id: str, delta: Usage) -> Usage:
        return await self.inner.add_usage(session_id, delta)

    async def redeem_once(self, attempt_id: str, secret_name: str, at: str) -> bool:
        return await self.inner.redeem_once(attempt_id, secret_name, at)

    async def record_snapshot(self, revision: str, at: str, detail: Mapping[str, Any]) -> None:
        await self.inner.record_snapshot(revision, at, detail)

    async def close(self) -> None:
        for sink in self.sinks:
            await sink.close()
        await self.inner.close()

    async def put_tool_view_fed(self, view: ToolViewRecord, fed: Sequence[FedResultRecord]) -> None:
        await self.inner.put_tool_view_fed(view, fed)

    async def list_fed(self, invocation_id: str) -> list[FedResultRecord]:
        return await self.inner.list_fed(invocation_id)

    async def record_decision(self, record: DecisionRecord, *, durable: bool = False) -> None:
        """Store the decision (behind a barrier with ``durable``), then publish it (the decision
        log first, see ``build_sinks``)."""
        await self.inner.record_decision(record, durable=durable)
        for sink in self.sinks:
            await sink.publish_decision(record)

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        return await self.inner.get_decision(decision_id)

    async def append_to_current(
        self, invocation_id: str, events_of: Callable[[InvocationRecord], Sequence[EventRecord]]
    ) -> InvocationRecord | None:
        written: list[EventRecord] = []

        def keep(inv: InvocationRecord) -> Sequence[EventRecord]:
            written[:] = events_of(inv)
            return written

        inv = await self.inner.append_to_current(invocation_id, keep)
        if inv is not None:
            await self._publish(written, None)
        return inv

    async def list_past_deadline(
        self, now: datetime, limit: int, *, executing: bool = False
    ) -> list[InvocationRecord]:
        return await self.inner.list_past_deadline(now, limit, executing=executing)


__all__ = ["EventSink", "PublishingStore"]
