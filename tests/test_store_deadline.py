"""Issue 34: store waits follow the call's deadline. During a PostgreSQL outage a call with a
deadline of 5 s or less got ``DEADLINE_EXCEEDED``, never ``store_unavailable``: the pool waited a
fixed 5 s for a connection. Now the wait ends shortly before the caller's deadline
(``callgate/base/deadline.py``, set by the gRPC interceptor) and the refusal is the stable code.

The pool is exhausted here (one connection, held) rather than the server stopped: the wait is the
same pool wait, and the shared test server keeps serving the other tests.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from callgate.base import deadline
from callgate.base.errors import CallgateError, ErrorCode
from callgate.store.idempotency.base import IdempotencyKey
from callgate.store.idempotency.postgres import PostgresIdempotencyStore
from callgate.store.postgres import PostgresStore
from tests.test_store_contract import fresh_pg_database


def test_wait_budget_ends_before_the_callers_deadline() -> None:
    assert deadline.wait_budget(5.0) == 5.0  # no call: the configured wait
    token = deadline.enter(1.0)
    try:
        assert 0.8 < deadline.wait_budget(5.0) <= 1.0 - deadline.ANSWER_MARGIN_S
        assert deadline.wait_budget(0.2) == 0.2
    finally:
        deadline.leave(token)
    token = deadline.enter(0.0)
    try:
        assert deadline.wait_budget(5.0) == pytest.approx(0.01)
    finally:
        deadline.leave(token)
    assert deadline.remaining() is None


async def _refused_within(store_call: object, hold: object, budget: float) -> float:
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with hold() as _conn:  # type: ignore[operator]
            held.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await held.wait()
    token = deadline.enter(budget)
    t0 = time.monotonic()
    try:
        with pytest.raises(CallgateError) as err:
            await store_call()  # type: ignore[operator]
        assert err.value.code is ErrorCode.STORE_UNAVAILABLE
        return time.monotonic() - t0
    finally:
        deadline.leave(token)
        release.set()
        await task


def test_the_event_store_refuses_before_the_deadline_when_no_connection_comes(postgres_dsn: str) -> None:
    async def go() -> float:
        store = PostgresStore(fresh_pg_database(postgres_dsn), min_size=1, max_size=1, pool_timeout=5.0)
        await store.start()
        try:
            return await _refused_within(lambda: store.get_invocation("inv-x"), store._tx, 0.6)
        finally:
            await store.close()

    took = asyncio.run(go())
    assert took < 0.6, f"waited {took:.2f} s: past the caller's deadline"


def test_the_key_store_refuses_before_the_deadline_when_no_connection_comes(postgres_dsn: str) -> None:
    key = IdempotencyKey("acme", "alice", "t", "v1", "k")

    async def go() -> float:
        store = PostgresIdempotencyStore(fresh_pg_database(postgres_dsn), min_size=1, max_size=1)
        await store.start()
        try:
            return await _refused_within(lambda: store.get(key), store._pool.connection, 0.6)
        finally:
            await store.close()

    took = asyncio.run(go())
    assert took < 0.6, f"waited {took:.2f} s: past the caller's deadline"


def test_the_interceptor_hands_the_callers_deadline_to_the_store() -> None:
    """The gRPC interceptor sets the call's deadline for the handler (and so for the store)."""
    from callgate.gen.v1 import callgate_pb2 as pb
    from tests.conftest import start_sidecar, stop_sidecar

    running, tmp = start_sidecar()
    try:
        sid = running.open_session(subject="bob")
        running.list_tools(sid)
        resp = running.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})
        store = running.sidecar.components.store
        seen: list[float | None] = []
        real = store.get_invocation

        async def spy(invocation_id: str):  # type: ignore[no-untyped-def]
            seen.append(deadline.remaining())
            return await real(invocation_id)

        store.get_invocation = spy  # type: ignore[method-assign]
        request = pb.GetInvocationRequest(session_id=sid, invocation_id=resp.invocation_id)
        running.gate.GetInvocation(request, timeout=3.0)
        running.gate.GetInvocation(request)  # no deadline: none handed on
        assert seen and seen[0] is not None and 2.0 < seen[0] <= 3.1, seen
        assert seen[-1] is None
    finally:
        stop_sidecar(running, tmp)
