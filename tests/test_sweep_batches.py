"""The sweeps end many invocations in few transactions (callgate/propose/confirmation.py,
``SWEEP_SLICE``): a deadline sweep or a confirmation sweep of N expired invocations writes
ceil(N / SWEEP_SLICE) times through :meth:`Store.transition_many`, never once per invocation;
every one ends CANCELLED_BEFORE_COMMIT with its event and its key released; one that another
call moved between the listing and the write is skipped and not counted."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from callgate.base.clock import FixedClock, rfc3339
from callgate.base.states import State
from callgate.config import IdempotencyConfig
from callgate.policy.serving import ServingSnapshot
from callgate.propose.confirmation import SWEEP_SLICE, Confirmations
from callgate.propose.idempotency import IdempotencyFlow
from callgate.store.base import EventRecord, InvocationRecord, KeyClaim, Move
from callgate.store.idempotency.base import ExpiredPolicy, IdempotencyKey
from callgate.store.sqlite import SQLiteStore

NOW = datetime(2026, 7, 20, 9, 0, tzinfo=UTC)
N = 2 * SWEEP_SLICE + 9


class CountingStore(SQLiteStore):
    """The SQLite store, counting its writes; ``interloper`` moves one invocation on after the
    sweep listed it (as a ``Confirm`` or a ``BeginAttempt`` racing the sweep would)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.many: list[int] = []
        self.single = 0
        self.interloper: InvocationRecord | None = None
        self.interloper_to = State.PREPARED

    async def transition_many(self, moves: Sequence[Move]) -> list[bool]:
        if self.interloper is not None:
            raced, self.interloper = self.interloper, None
            assert await super().transition(replace(raced, state=self.interloper_to), raced.state, [])
        self.many.append(len(moves))
        return await super().transition_many(moves)

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        self.single += 1
        return await super().transition(record, expected, events)


def _invocation(i: int, *, parked: bool) -> InvocationRecord:
    at = rfc3339(NOW - timedelta(minutes=10))
    end = rfc3339(NOW - timedelta(seconds=1))
    return InvocationRecord(
        invocation_id=f"inv_{i:04d}", session_id="s1", model_call_id="m", proposal_id=f"p{i}",
        tool_name="t", tool_version="v1", tenant="acme", subject="alice",
        state=State.AUTHORIZED if parked else State.PREPARED, raw_arguments=b"{}", digest="sha256:d",
        idempotency_key=f"k{i}" if i % 10 == 0 else "", deadline=end,
        confirmation_expires_at=end if parked else "", created_at=at, updated_at=at,
    )  # fmt: skip


def _sweep(tmp_path: Path, *, parked: bool) -> tuple[int, CountingStore, list[InvocationRecord]]:
    async def go() -> tuple[int, CountingStore, list[InvocationRecord]]:
        store = CountingStore(tmp_path / "callgate.db")
        clock = FixedClock(NOW)
        keys = IdempotencyFlow(backend=store.keys(), store=store, clock=clock, config=IdempotencyConfig())
        invs = [_invocation(i, parked=parked) for i in range(N)]
        for inv in invs:
            claim = None
            if inv.idempotency_key:
                key = IdempotencyKey("acme", "alice", "t", "v1", inv.idempotency_key)
                claim = KeyClaim(key, "sha256:d", timedelta(hours=1), ExpiredPolicy.REJECT, NOW)
            first = EventRecord(f"e{inv.invocation_id}", inv.invocation_id, 1, inv.created_at, "proposed",
                                None, inv.state, "t" * 32, "s" * 16)  # fmt: skip
            assert await store.create_invocation(inv, [first], None, claim) is None
        store.interloper = invs[5]
        store.interloper_to = State.PREPARED if parked else State.EXECUTING  # Confirm / BeginAttempt
        sweep = Confirmations(store=store, clock=clock, keys=keys, serving=ServingSnapshot(None))
        ended = await (sweep.expire_all() if parked else sweep.expire_deadlines())
        after = [await store.get_invocation(inv.invocation_id) for inv in invs]
        for inv in invs:
            if inv.idempotency_key:
                rec = await store.keys().get(IdempotencyKey("acme", "alice", "t", "v1", inv.idempotency_key))
                assert rec is not None and rec.state == "released"
        events = await store.list_events(invs[7].invocation_id)
        assert [e.kind for e in events] == [
            "proposed",
            "confirmation_expired" if parked else "deadline_expired",
        ]
        assert events[-1].seq == 2 and events[-1].from_state is inv.state
        await store.close()
        return ended, store, [a for a in after if a is not None]

    return asyncio.run(go())


def test_a_deadline_sweep_writes_once_per_slice(tmp_path: Path) -> None:
    ended, store, after = _sweep(tmp_path, parked=False)
    assert store.many == [SWEEP_SLICE] * (N // SWEEP_SLICE) + [N % SWEEP_SLICE]
    assert len(store.many) == math.ceil(N / SWEEP_SLICE) and store.single == 0
    assert ended == N - 1  # the one moved meanwhile is skipped
    states = [a.state for a in after]
    assert states.count(State.CANCELLED_BEFORE_COMMIT) == N - 1 and states[5] is State.EXECUTING


def test_a_confirmation_sweep_writes_once_per_slice(tmp_path: Path) -> None:
    ended, store, after = _sweep(tmp_path, parked=True)
    assert len(store.many) == math.ceil(N / SWEEP_SLICE) and store.single == 0
    assert ended == N - 1
    assert [a.state for a in after].count(State.CANCELLED_BEFORE_COMMIT) == N - 1
