"""The confirmation-expiry sweep runs as its own task (not in the policy watcher), started and
stopped by the composition root, visible as the gRPC health service
``callgate.v1.ConfirmationSweeper``: SERVING while it runs, NOT_SERVING while its sweeps fail or
once it died."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from callgate.base.clock import FixedClock
from callgate.base.errors import LoadError
from callgate.config import ConfirmationConfig, PolicyConfig, load_config
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.server.healthcheck import check
from callgate.server.sweeper import SWEEPER_HEALTH_SERVICE, ConfirmationSweeper
from tests.conftest import start_sidecar, stop_sidecar
from tests.test_execution import prepared_event_unconfirmed, state_of
from tests.test_lifecycle import wait_for

FAST = ConfirmationConfig(sweep_interval_ms=50)


def test_sweeper_cancels_expired_confirmations() -> None:
    # moved from tests/test_execution.py; the policy watcher no longer sweeps (it is slow here)
    running, tmp = start_sidecar(
        confirmation=FAST, policy=PolicyConfig(watch=False, watch_interval_ms=60_000)
    )
    try:
        sid, parked = prepared_event_unconfirmed(running, "k-sweep")
        running.clock.advance(running.config.confirmation.ttl_seconds + 1)
        t0 = time.monotonic()
        wait_for(lambda: state_of(running, sid, parked.invocation_id) == "CANCELLED_BEFORE_COMMIT", timeout=5)
        assert time.monotonic() - t0 < 5  # bounded: a few sweep intervals, not the watcher's minute
        kinds = [
            e.kind
            for e in running.gate.GetInvocation(
                pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=sid)
            ).events
        ]
        assert kinds[-1] == "confirmation_expired"
        sweeper = running.sidecar.sweeper
        assert sweeper is not None
        wait_for(lambda: sweeper.total_expired == 1, timeout=5)  # counted once its sweep returns
        assert sweeper.last is not None and sweeper.total_deadlines == 0
    finally:
        stop_sidecar(running, tmp)


def test_sweeper_health_serving_while_running_not_serving_once_dead() -> None:
    running, tmp = start_sidecar(confirmation=FAST)
    try:
        for role in ("agent", "confirmer", "executor", "authorizer"):
            addr = running.sidecar.addresses[role][0]
            assert check(addr, service=SWEEPER_HEALTH_SERVICE) == "SERVING"
        sweeper = running.sidecar.sweeper
        assert sweeper is not None and sweeper.running
        task = sweeper._task
        assert task is not None
        running.loop.call_soon_threadsafe(task.cancel)  # the task dies (not a stop())
        agent = running.sidecar.addresses["agent"][0]
        wait_for(lambda: check(agent, service=SWEEPER_HEALTH_SERVICE) == "NOT_SERVING", timeout=5)
        assert not sweeper.running
        assert check(agent) == "SERVING"  # the policy side is unaffected
    finally:
        stop_sidecar(running, tmp)


class FlakyGate:
    """An expirer whose sweeps fail while ``broken``."""

    def __init__(self) -> None:
        self.broken = False
        self.calls = 0

    async def expire_confirmations(self) -> int:
        self.calls += 1
        if self.broken:
            raise OSError("store unavailable")
        return 2

    async def expire_deadlines(self) -> int:
        return 0


def test_failing_sweeps_report_not_serving_and_recover(caplog: pytest.LogCaptureFixture) -> None:
    statuses: list[bool] = []

    async def set_health(serving: bool) -> None:
        statuses.append(serving)

    async def go() -> ConfirmationSweeper:
        gate = FlakyGate()
        clock = FixedClock(datetime(2026, 7, 20, 1, 0, tzinfo=UTC))
        sweeper = ConfirmationSweeper(gate, clock, interval=0.01, set_health=set_health)
        await sweeper.start()
        await _until(lambda: gate.calls >= 2)
        gate.broken = True
        await _until(lambda: sweeper.failures >= 2)
        assert statuses[-1] is False and sweeper.running  # failing, not dead
        gate.broken = False
        await _until(lambda: sweeper.failures == 0)
        await sweeper.stop()
        assert not sweeper.running
        return sweeper

    with caplog.at_level(logging.INFO, logger="callgate.sweeper"):
        sweeper = asyncio.run(go())
    assert statuses == [True, False, True]  # changes only; stop() leaves health to the server
    assert (
        sweeper.last is not None and sweeper.last.at == "2026-07-20T01:00:00Z" and sweeper.last.expired == 2
    )
    text = caplog.text
    assert "2026-07-20T01:00:00Z: 2 expired" in text and "sweep failed" in text and "recovered" in text


async def _until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_stop_lets_a_sweep_in_progress_finish() -> None:
    class SlowGate:
        finished = 0

        async def expire_confirmations(self) -> int:
            await asyncio.sleep(0.2)
            self.finished += 1
            return 0

        async def expire_deadlines(self) -> int:
            return 0

    async def set_health(serving: bool) -> None:
        return None

    async def go() -> int:
        gate = SlowGate()
        sweeper = ConfirmationSweeper(
            gate, FixedClock(datetime(2026, 7, 20, tzinfo=UTC)), interval=0.01, set_health=set_health
        )
        await sweeper.start()
        await asyncio.sleep(0.05)  # inside the first sweep
        await sweeper.stop()
        return gate.finished

    assert asyncio.run(go()) == 1


def test_sweep_interval_must_be_positive(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[confirmation]\nsweep_interval_ms = 0\n")
    with pytest.raises(LoadError, match="sweep_interval_ms must be positive"):
        load_config(p)
