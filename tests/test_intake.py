"""The server's intake follows the admission (issue 34 item 7, ``callgate/server/intake.py``):
while the limit is full the event loop takes no ``callgate.v1`` call from gRPC core, so the
excess waits there (or is dropped there) instead of costing a refusal in Python; health is never
held; a call whose deadline has passed before its handler runs is refused and nothing is
recorded for it. Through a real sidecar (grpc.aio server, SQLite store)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from concurrent.futures import Future

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.base.errors import CallgateError, ErrorCode
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.server.admission import TAKEN_TTL_S, Admission, AdmissionSettings
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_admission import Timer, in_flight, propose_request


def test_the_intake_counts_calls_taken_until_the_interceptor_sees_them() -> None:
    timer = Timer()
    adm = Admission(AdmissionSettings(target_s=1.0, min_limit=2, max_limit=2), timer)
    assert adm.intake_open()
    adm.taken()  # taken from gRPC core, not yet at the interceptor
    assert adm.intake_open()
    adm.taken()
    assert not adm.intake_open() and not adm.full()  # both places promised, none in flight yet
    adm.seen()
    first = adm.admit(None)
    assert not adm.intake_open()
    adm.seen()  # the second reached the interceptor: the admission decides on it from here
    assert adm.intake_open()
    adm.taken()
    assert not adm.intake_open()
    timer.t += TAKEN_TTL_S + 0.01  # never reached the interceptor (cancelled first): forgotten
    assert adm.intake_open()
    adm.release(first)
    assert adm.state().in_flight == 0


def test_a_waiting_intake_wakes_when_a_call_in_flight_ends() -> None:
    async def run() -> None:
        adm = Admission(AdmissionSettings(target_s=1.0, min_limit=2, max_limit=2))
        started = adm.admit(None)
        adm.taken()
        waiter = asyncio.ensure_future(adm.wait_intake())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        adm.release(started)
        await asyncio.wait_for(waiter, 5)
        adm.taken()
        adm.taken()
        waiter = asyncio.ensure_future(adm.wait_intake())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        adm.seen()  # a taken call reaching the interceptor frees its place too
        await asyncio.wait_for(waiter, 5)
        stalled = Admission(AdmissionSettings(target_s=0.05, min_limit=1, max_limit=1))
        held = stalled.admit(None)
        await asyncio.wait_for(stalled.wait_intake(), 5)  # nothing ends: let in after the target
        assert not stalled.intake_open()
        stalled.release(held)

    asyncio.run(run())


def test_a_deadline_already_past_is_refused_even_with_nothing_in_flight() -> None:
    adm = Admission(AdmissionSettings(target_s=1.0, min_limit=2, max_limit=2))
    with pytest.raises(CallgateError) as past:
        adm.admit(0.0)
    assert past.value.code is ErrorCode.DEADLINE_TOO_SHORT
    assert adm.refuse_early(0.0).code is ErrorCode.DEADLINE_TOO_SHORT
    st = adm.state()
    assert (st.admitted, st.refused_deadline, st.in_flight) == (0, 2, 0)
    adm.release(adm.admit(0.001))  # time left, nothing in flight: served


@pytest.fixture
def one_slot() -> Running:  # type: ignore[misc]
    running, tmp = start_sidecar(
        server_kw={"max_concurrent_rpcs": 1, "admission_min_in_flight": 1, "admission_target_ms": 5000}
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def test_with_the_limit_full_the_excess_waits_in_grpc_core_and_is_served_when_a_slot_frees(
    one_slot: Running,
) -> None:
    """One slot, held by a Propose waiting on SQLite's write lock for less than the latency
    target (5 s here): a burst of 12 Proposes is not taken into Python (at most one slips
    through and is refused ``overloaded``; before the intake followed the admission all 12
    were), health answers meanwhile, and once the slot frees most of the waiting calls are
    served in turn. (A hold longer than the target lets one call per target in to be refused with the
    hint: ``tests/test_admission.py``.)"""
    sid = one_slot.open_session()
    one_slot.list_tools(sid)
    one_slot.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id="warm")
    admission = one_slot.sidecar.admission["agent"]
    health = health_pb2_grpc.HealthStub(one_slot.channels["agent"])
    lock = sqlite3.connect(one_slot.db_path, isolation_level=None, timeout=5)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        slow: Future[pb.ProposeResponse] = one_slot.gate.Propose.future(propose_request(sid, 1), timeout=30)
        in_flight(one_slot, 1)
        burst = [one_slot.gate.Propose.future(propose_request(sid, 10 + i), timeout=30) for i in range(12)]
        for _ in range(5):  # health is taken and answered while the burst waits
            assert (
                health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        time.sleep(0.3)
        assert admission.state().refused_overloaded <= 1
        assert sum(f.done() for f in burst) <= 1
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert slow.result(timeout=30).state == pb.PREPARED
    refused = 0
    for f in burst:  # served in turn; one can slip in while the one before it is being decoded
        exc = f.exception(timeout=30)
        if exc is None:
            assert f.result().state == pb.PREPARED
        else:
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc  # type: ignore[attr-defined]
            refused += 1
    assert refused < len(burst) // 2
    assert admission.state().refused_overloaded == refused


def test_a_call_whose_deadline_passed_before_its_handler_is_refused_and_not_recorded() -> None:
    """The event loop is blocked for 0.8 s while a Propose with a 0.2 s deadline arrives: when
    Python gets to it, nobody waits for its answer; it ends ``DEADLINE_EXCEEDED`` at the caller,
    the admission never admits it and no invocation is written (a call with time left after
    it is served)."""
    running, tmp = start_sidecar()
    try:
        sid = running.open_session()
        running.list_tools(sid)
        admission = running.sidecar.admission["agent"]
        admitted = admission.state().admitted
        blocked = threading.Event()

        def block() -> None:
            blocked.set()
            time.sleep(0.8)

        running.loop.call_soon_threadsafe(block)
        assert blocked.wait(5)
        with pytest.raises(grpc.RpcError) as late:
            running.gate.Propose(propose_request(sid, 1), timeout=0.2)
        assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert running.gate.Propose(propose_request(sid, 2), timeout=10).state == pb.PREPARED
        st = admission.state()
        assert st.admitted == admitted + 1 and st.in_flight == 0
        with sqlite3.connect(running.db_path) as db:
            ids = {r[0] for r in db.execute("SELECT proposal_id FROM invocations")}
        assert "p1" not in ids and "p2" in ids
    finally:
        stop_sidecar(running, tmp)
