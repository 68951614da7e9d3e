"""Admission under overload (issue 9 item 7): the adaptive limit, the deadline rule, the retry
hint, and health that is never refused, through a real grpc.aio server."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from callgate.base.errors import CallgateError, ErrorCode
from callgate.config import ObservabilityConfig, load_config
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.server.admission import (
    MAX_RETRY_MS,
    MIN_RETRY_MS,
    SECONDS_BUCKETS,
    Admission,
    AdmissionSettings,
)
from callgate.server.status import RETRY_PUSHBACK
from tests.conftest import Running, start_sidecar, stop_sidecar


class Timer:
    """A hand-moved monotonic clock for the pure rule."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def rule(target_ms: int = 20, lo: int = 2, hi: int = 8) -> tuple[Admission, Timer]:
    timer = Timer()
    return Admission(AdmissionSettings(target_s=target_ms / 1000, min_limit=lo, max_limit=hi), timer), timer


def refusal(fn: object, *args: object) -> CallgateError:
    with pytest.raises(CallgateError) as err:
        fn(*args)  # type: ignore[operator]
    return err.value


def test_the_limit_starts_at_the_floor_and_refuses_beyond_it() -> None:
    adm, _ = rule(lo=2)
    adm.admit(None)
    adm.admit(None)
    err = refusal(adm.admit, None)
    assert err.code is ErrorCode.OVERLOADED
    assert err.metadata["retry_after_ms"] == str(MIN_RETRY_MS)  # nothing measured yet
    assert adm.state().refused_overloaded == 1 and adm.state().in_flight == 2


def test_the_limit_grows_while_calls_meet_the_target_and_stops_at_the_ceiling() -> None:
    adm, timer = rule(target_ms=20, lo=2, hi=4)
    for _ in range(200):
        starts = [adm.admit(None) for _ in range(int(adm.state().limit))]
        timer.t += 0.005
        for s in starts:
            adm.release(s)
    assert adm.state().limit == 4  # the ceiling (max_concurrent_rpcs)
    assert adm.state().expected_s == pytest.approx(0.005)


def test_with_headroom_the_limit_follows_the_bursts_of_a_light_load() -> None:
    """Calls well under the target (1 ms against 20) grow an in-use limit by one each: a light
    load's bursts open it within one burst (the ``1/limit`` step alone kept it at 16-20 through
    a 1,000/s open loop and refused the bursts above it)."""
    adm, timer = rule(target_ms=20, lo=16, hi=128)
    for expected in (22, 30, 41, 55):
        starts = [adm.admit(None) for _ in range(int(adm.state().limit))]  # a burst fills it
        timer.t += 0.001
        for s in starts:
            adm.release(s)
        # one per call answered while at least half the limit was in flight
        assert adm.state().limit == expected
    s = adm.admit(None)  # one call at a time does not use the limit: it stays
    timer.t += 0.001
    adm.release(s)
    assert adm.state().limit == 55
    assert adm.state().refused_overloaded == 0


def test_near_the_target_the_limit_grows_by_one_per_limits_worth_of_calls() -> None:
    adm, timer = rule(target_ms=20, lo=4, hi=64)
    starts = [adm.admit(None) for _ in range(4)]
    timer.t += 0.015  # 15 ms: within the 20 ms target, above half of it
    for s in starts:
        adm.release(s)
    # 1/limit for each of the two answered while at least half the limit was in flight
    assert adm.state().limit == pytest.approx(4 + 1 / 4 + 1 / 4.25)


def test_slow_calls_shrink_the_limit_once_per_round_trip_never_below_the_floor() -> None:
    adm, timer = rule(target_ms=20, lo=2, hi=64)
    adm._limit = 40.0  # as if grown under an earlier, lighter load
    starts = [adm.admit(None) for _ in range(10)]
    timer.t += 0.1  # 100 ms: above the 20 ms target
    for s in starts:
        adm.release(s)
    assert adm.state().limit == pytest.approx(36.0)  # ten slow answers at once: one decrease
    for _ in range(100):
        s = adm.admit(None)
        timer.t += 0.1
        adm.release(s)
    assert adm.state().limit == 2  # the floor
    assert adm.retry_after_ms() == 100


def test_a_deadline_shorter_than_the_expected_service_time_is_refused_while_busy() -> None:
    adm, timer = rule(lo=4)
    s = adm.admit(None)
    timer.t += 0.3
    adm.release(s)
    busy = adm.admit(None)
    err = refusal(adm.admit, 0.2)
    assert err.code is ErrorCode.DEADLINE_TOO_SHORT
    assert err.metadata["retry_after_ms"] == "300"
    adm.admit(0.5)  # enough time left: admitted
    adm._expected = 60.0
    assert adm.retry_after_ms() == MAX_RETRY_MS
    del busy


def test_with_nothing_in_flight_a_short_deadline_is_served_so_a_stale_estimate_heals() -> None:
    adm, timer = rule()
    s = adm.admit(None)
    timer.t += 2.0  # one very slow call
    adm.release(s)
    for _ in range(20):  # callers with 50 ms deadlines are not locked out
        s = adm.admit(0.05)
        timer.t += 0.004
        adm.release(s)
    assert adm.state().expected_s < 0.05
    assert adm.state().refused_deadline == 0


@pytest.fixture
def one_slot() -> Iterator[Running]:
    """A sidecar whose agent listener admits one call at a time (floor = ceiling = 1)."""
    running, tmp = start_sidecar(server_kw={"max_concurrent_rpcs": 1, "admission_min_in_flight": 1})
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def propose_request(sid: str, i: int) -> pb.ProposeRequest:
    return pb.ProposeRequest(
        session_id=sid, model_call_id="mc-1", proposal_id=f"p{i}", tool_name="weather.get",
        tool_version="v1", arguments=json.dumps({"city": "Paris", "date": "tomorrow"}).encode(),
    )  # fmt: skip


def hint_of(exc: grpc.RpcError, reason: str) -> int:
    """The refusal's retry hint, checked to be the same in all three places."""
    st = rpc_status.from_call(exc)  # type: ignore[arg-type]
    assert st is not None
    info = error_details_pb2.ErrorInfo()
    retry = error_details_pb2.RetryInfo()
    kinds = set()
    for detail in st.details:
        if detail.Unpack(info):
            kinds.add("info")
        elif detail.Unpack(retry):
            kinds.add("retry")
    assert kinds == {"info", "retry"}
    assert info.reason == reason
    ms = int(info.metadata["retry_after_ms"])
    assert retry.retry_delay.seconds * 1000 + retry.retry_delay.nanos // 1_000_000 == ms
    trailers = dict(exc.trailing_metadata())  # type: ignore[attr-defined]
    assert trailers[RETRY_PUSHBACK] == str(ms)
    assert MIN_RETRY_MS <= ms <= MAX_RETRY_MS
    return ms


def in_flight(running: Running, n: int) -> None:
    deadline = time.monotonic() + 10
    while running.sidecar.admission["agent"].state().in_flight < n:
        assert time.monotonic() < deadline, "the Propose never started"
        time.sleep(0.01)


def test_a_call_that_cannot_be_served_in_time_is_refused_with_a_hint_and_health_answers(
    one_slot: Running,
) -> None:
    sid = one_slot.open_session()
    one_slot.list_tools(sid)
    one_slot.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id="warm")
    admission = one_slot.sidecar.admission["agent"]
    health = health_pb2_grpc.HealthStub(one_slot.channels["agent"])

    # 1. Hold SQLite's write lock from outside for 1.5 s: a Propose stays in flight that long
    # (its events wait for the lock), which the expected service time then reflects.
    lock = sqlite3.connect(one_slot.db_path, isolation_level=None, timeout=5)
    lock.execute("BEGIN EXCLUSIVE")
    held_at = time.monotonic()
    try:
        slow: Future[pb.ProposeResponse] = one_slot.gate.Propose.future(propose_request(sid, 1), timeout=20)
        in_flight(one_slot, 1)

        # the one slot is taken: the next call is refused at once, with the hint
        with pytest.raises(grpc.RpcError) as full:
            one_slot.gate.Propose(propose_request(sid, 2), timeout=10)
        assert full.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        hint_of(full.value, "overloaded")

        # health (and its Watch) is never counted nor refused
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        for _ in range(5):
            assert (
                health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        watch.cancel()
        while time.monotonic() - held_at < 1.5:
            time.sleep(0.05)
    finally:
        lock.execute("ROLLBACK")
    assert slow.result(timeout=20).state == pb.PREPARED
    expected = admission.state().expected_s  # moving average: 0.2 x 1.5 s + 0.8 x a few ms
    assert expected >= 0.3

    # 2. While a call is in flight, a call with half the expected service time left cannot be
    # served in time: refused at once with DEADLINE_EXCEEDED and the hint.
    lock.execute("BEGIN EXCLUSIVE")
    try:
        busy: Future[pb.ProposeResponse] = one_slot.gate.Propose.future(propose_request(sid, 3), timeout=20)
        in_flight(one_slot, 1)
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as short:
            one_slot.gate.Propose(propose_request(sid, 4), timeout=expected / 2)
        assert short.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert hint_of(short.value, "deadline_too_short") == pytest.approx(expected * 1000, abs=1)
        assert time.monotonic() - t0 < expected / 2  # refused at once, not timed out
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert busy.result(timeout=20).state == pb.PREPARED

    # nothing was recorded for the refused calls
    with sqlite3.connect(one_slot.db_path) as db:
        ids = {r[0] for r in db.execute("SELECT proposal_id FROM invocations")}
    assert {"p2", "p4"}.isdisjoint(ids) and {"warm", "p1", "p3"} <= ids

    # a call with time to spare is admitted and served
    assert one_slot.gate.Propose(propose_request(sid, 5), timeout=10).state == pb.PREPARED
    st = admission.state()
    assert (st.refused_overloaded, st.refused_deadline, st.in_flight) == (1, 1, 0)


def test_target_zero_restores_the_previous_rule() -> None:
    """``admission_target_ms = 0``: no admission object, gRPC's own fixed limit (the A/B baseline
    of ``bench/bench_overload.py --before``); calls are served as before."""
    running, tmp = start_sidecar(server_kw={"admission_target_ms": 0, "max_pending_rpcs": 0})
    try:
        assert running.sidecar.admission == {}
        sid = running.open_session()
        running.list_tools(sid)
        assert running.gate.Propose(propose_request(sid, 1), timeout=10).state == pb.PREPARED
    finally:
        stop_sidecar(running, tmp)


def test_a_burst_of_parallel_calls_on_an_idle_sidecar_is_served_not_dropped() -> None:
    """The event loop takes arriving calls one at a time, so a burst waits in gRPC core's pending
    queue for a moment; with the defaults none is dropped (``max_pending_rpcs = 4`` dropped one in
    ten of a burst of 8 and 40% of a burst of 16 as ``CANCELLED``)."""
    running, tmp = start_sidecar()
    try:
        sid = running.open_session()
        running.list_tools(sid)
        health = health_pb2_grpc.HealthStub(running.channels["agent"])
        for rnd in range(3):
            checks = [health.Check.future(health_pb2.HealthCheckRequest(), timeout=30) for _ in range(48)]
            proposes = [
                running.gate.Propose.future(propose_request(sid, 100 * rnd + i), timeout=30)
                for i in range(16)
            ]
            assert all(f.result().status == health_pb2.HealthCheckResponse.SERVING for f in checks)
            assert all(f.result().state == pb.PREPARED for f in proposes)
    finally:
        stop_sidecar(running, tmp)


def test_a_full_limit_refuses_before_the_request_is_decoded(one_slot: Running) -> None:
    """Issue 34 item 7: with the one slot taken, a Propose is refused ``overloaded`` before gRPC
    decodes it: bytes that are no ProposeRequest get the overload refusal (with its hint), not
    a decoding error; once the slot is free the same bytes reach the decoder."""
    sid = one_slot.open_session()
    one_slot.list_tools(sid)
    one_slot.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id="warm")
    raw = one_slot.channels["agent"].unary_unary("/callgate.v1.Gate/Propose")  # bytes in, bytes out
    garbage = b"\xff\xff\xff\xff"
    lock = sqlite3.connect(one_slot.db_path, isolation_level=None, timeout=5)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        slow: Future[pb.ProposeResponse] = one_slot.gate.Propose.future(propose_request(sid, 1), timeout=20)
        in_flight(one_slot, 1)
        with pytest.raises(grpc.RpcError) as full:
            raw(garbage, timeout=10)
        assert full.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        hint_of(full.value, "overloaded")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert slow.result(timeout=20).state == pb.PREPARED
    assert one_slot.sidecar.admission["agent"].state().refused_overloaded == 1
    with pytest.raises(grpc.RpcError) as decoded:  # a free slot: the bytes are decoded, and fail
        raw(garbage, timeout=10)
    assert decoded.value.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED


def test_full_says_what_admit_would_refuse_and_early_refusals_are_counted() -> None:
    a, _ = rule(lo=2, hi=2)
    started = [a.admit(None), a.admit(None)]
    assert a.full()
    assert a.refuse_early(None).code is ErrorCode.OVERLOADED
    assert a.state().refused_overloaded == 1
    a.release(started[0])
    assert not a.full()


def test_calls_beyond_the_pending_bound_are_dropped_in_grpc_core_without_a_hint_and_health_is_not() -> None:
    """Issue 34 item 7: with the event loop busy (blocked here for 1 s), calls wait in gRPC core's
    queue of their method; beyond ``max_pending_rpcs`` (hard limit twice it) gRPC core drops them
    before any Python runs: ``CANCELLED`` with no status details (no ``RetryInfo``), as
    docs/ERRORS.md says. Health has its own queue (a registered method of its own), so the probes
    sent meanwhile wait and answer SERVING; the admission never saw the dropped calls."""
    running, tmp = start_sidecar(server_kw={"max_pending_rpcs": 2})
    try:
        sid = running.open_session()
        running.list_tools(sid)
        health = health_pb2_grpc.HealthStub(running.channels["agent"])
        assert (
            health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        blocked = threading.Event()

        def block() -> None:
            blocked.set()
            time.sleep(1.0)

        running.loop.call_soon_threadsafe(block)
        assert blocked.wait(5)
        proposes = [running.gate.Propose.future(propose_request(sid, i), timeout=20) for i in range(16)]
        checks = [health.Check.future(health_pb2.HealthCheckRequest(), timeout=20) for _ in range(2)]
        assert all(f.result().status == health_pb2.HealthCheckResponse.SERVING for f in checks)
        dropped = served = 0
        for f in proposes:
            exc = f.exception()
            if exc is None:
                assert f.result().state == pb.PREPARED
                served += 1
                continue
            assert exc.code() is grpc.StatusCode.CANCELLED, exc  # type: ignore[attr-defined]
            assert rpc_status.from_call(exc) is None  # type: ignore[arg-type]  # no details, no hint
            dropped += 1
        assert dropped >= 8 and served >= 2, (dropped, served)  # at most 4 wait (hard limit)
        st = running.sidecar.admission["agent"].state()
        assert (st.refused_overloaded, st.refused_deadline) == (0, 0)
        assert st.admitted == served + 2  # OpenSession and ListTools are admitted too
    finally:
        stop_sidecar(running, tmp)


def test_a_call_whose_deadline_passes_while_it_waits_on_the_store_is_not_answered_late(
    server: Running,
) -> None:
    """Issue 34 item 7, "no call answered after its deadline": a Propose whose deadline ends
    while the store's write lock is held elsewhere ends before its deadline (the store's wait
    follows it), so the admission counts no answer after the deadline; its histogram holds
    every admitted call."""
    sid = server.open_session()
    server.list_tools(sid)
    lock = sqlite3.connect(server.db_path, isolation_level=None, timeout=5)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(grpc.RpcError) as late:
            server.gate.Propose(propose_request(sid, 1), timeout=0.5)
        assert late.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        time.sleep(1.0)  # past the deadline, with the lock still held
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    deadline = time.monotonic() + 10
    admission = server.sidecar.admission["agent"]
    while admission.state().in_flight:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert server.gate.Propose(propose_request(sid, 2), timeout=10).state == pb.PREPARED
    st = admission.state()
    assert st.answered_late == 0
    assert sum(st.seconds_counts) == st.admitted >= 3


def test_release_counts_late_answers_and_buckets_the_time_from_acceptance() -> None:
    a, timer = rule(target_ms=20, lo=2, hi=8)
    s = a.admit(0.5)
    timer.t += 0.004
    a.release(s)
    s = a.admit(0.001)
    timer.t += 0.003
    a.release(s, answered_late=True)
    st = a.state()
    assert st.answered_late == 1
    assert st.seconds_counts[SECONDS_BUCKETS.index(0.005)] == 2 and sum(st.seconds_counts) == 2
    assert st.seconds_sum == pytest.approx(0.007)


def test_the_metrics_endpoint_serves_each_listeners_admission() -> None:
    """``callgate_admission_*``: the limit, admitted calls, refusals by code, late answers and the
    histogram of admitted calls' time from acceptance, read from the admission at scrape time."""
    running, tmp = start_sidecar(observability=ObservabilityConfig(metrics_address="127.0.0.1:0"))
    try:
        sid = running.open_session()
        running.list_tools(sid)
        assert running.gate.Propose(propose_request(sid, 1), timeout=10).state == pb.PREPARED
        server = running.sidecar.metrics_server
        assert server is not None
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            text = resp.read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        agent = (("listener", "agent"),)
        st = running.sidecar.admission["agent"].state()
        assert samples[("callgate_admission_limit", agent)] == st.limit == 16
        assert samples[("callgate_admission_admitted_total", agent)] == st.admitted == 3
        assert samples[("callgate_admission_seconds_count", agent)] == 3
        assert samples[("callgate_admission_seconds_bucket", (("le", "+Inf"), ("listener", "agent")))] == 3
        assert samples[("callgate_admission_late_answers_total", agent)] == 0
        assert (
            samples[("callgate_admission_refused_total", (("code", "overloaded"), ("listener", "agent")))]
            == 0
        )
        assert ("callgate_admission_limit", (("listener", "executor"),)) in samples
    finally:
        stop_sidecar(running, tmp)


def test_a_stream_limit_per_connection_holds_the_excess_in_the_client() -> None:
    """``max_streams_per_connection`` (HTTP/2 ``MAX_CONCURRENT_STREAMS``): with one stream per
    connection and that stream taken, a second call on the same connection waits in the client
    and ends there at its deadline; the sidecar never sees it (neither admitted nor refused).
    Another connection (a probe) is not held."""
    running, tmp = start_sidecar(server_kw={"max_streams_per_connection": 1})
    try:
        sid = running.open_session()
        running.list_tools(sid)
        admission = running.sidecar.admission["agent"]
        lock = sqlite3.connect(running.db_path, isolation_level=None, timeout=5)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            slow: Future[pb.ProposeResponse] = running.gate.Propose.future(
                propose_request(sid, 1), timeout=20
            )
            in_flight(running, 1)
            before = admission.state()
            with pytest.raises(grpc.RpcError) as held:
                running.gate.Propose(propose_request(sid, 2), timeout=0.5)
            assert held.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            after = admission.state()
            assert (after.admitted, after.refused_overloaded, after.refused_deadline) == (
                before.admitted, before.refused_overloaded, before.refused_deadline,
            )  # fmt: skip
            probe_channel = grpc.insecure_channel(  # its own connection (no shared subchannel)
                running.sidecar.addresses["agent"][0], options=[("grpc.use_local_subchannel_pool", 1)]
            )
            probe = health_pb2_grpc.HealthStub(probe_channel)
            assert (
                probe.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
            probe_channel.close()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert slow.result(timeout=20).state == pb.PREPARED
        assert running.gate.Propose(propose_request(sid, 3), timeout=10).state == pb.PREPARED
    finally:
        stop_sidecar(running, tmp)


def test_the_transport_bounds_are_checked_at_load(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[server]\nmax_streams_per_connection = 16\nmax_pending_rpcs = 8\n")
    cfg = load_config(toml)
    assert (cfg.server.max_streams_per_connection, cfg.server.max_pending_rpcs) == (16, 8)
    for bad in ("max_streams_per_connection = -1", "max_pending_rpcs = -1"):
        toml.write_text(f"[server]\n{bad}\n")
        with pytest.raises(CallgateError, match=f"server.{bad.split()[0]} must be >= 0"):
            load_config(toml)
