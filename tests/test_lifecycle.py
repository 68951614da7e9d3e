"""Policy lifecycle over a real sidecar: readiness gating, atomic reload, broken files, OPA
revision readiness (issue 4: never serve on half-loaded or broken policies)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.config import PolicyConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.lifecycle import SNAPSHOT_HEALTH_SERVICE
from tests.conftest import POLICIES, Running, start_sidecar, stop_sidecar
from tests.opa_fixture import OpaServer
from tests.test_confirmation import error_reason

FAST = PolicyConfig(watch=True, watch_interval_ms=50)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(sc: Running, service: str = "") -> int:
    return int(
        health_pb2_grpc.HealthStub(sc.channels["agent"])
        .Check(health_pb2.HealthCheckRequest(service=service))
        .status
    )


def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def policy_copy(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    shutil.copytree(POLICIES, d, ignore=shutil.ignore_patterns("tests"))
    return d


def weather(sc: Running) -> pb.ProposeResponse:
    sid = sc.open_session(subject="bob")
    sc.list_tools(sid)
    return sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})


def test_broken_reload_keeps_the_last_good_snapshot(tmp_path: Path) -> None:
    pdir = policy_copy(tmp_path)
    sc, tmp = start_sidecar(pdir, policy=FAST)
    try:
        first = sc.sidecar.components.gate.snapshot.revision
        assert health(sc) == SERVING and health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING
        pol = pdir / "cedar" / "policies.cedar"
        good = pol.read_text()
        pol.write_text(
            good + '\n@id("broken")\npermit (principal, action, resource) when { context.nope ==  };\n'
        )
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING)
        assert health(sc) == SERVING  # the old snapshot keeps serving
        assert sc.sidecar.components.gate.snapshot.revision == first
        assert "policies.cedar" in (sc.sidecar.lifecycle.last_error if sc.sidecar.lifecycle else "")
        assert pb.State.Name(weather(sc).state) == "PREPARED"
        # A valid change is picked up atomically: tools and policies together.
        pol.write_text(
            good.replace(
                "principal.tenant == context.tenant };", "principal.tenant == context.tenant && false };", 1
            )
        )
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING)
        second = sc.sidecar.components.gate.snapshot.revision
        assert second != first
        resp = weather(sc)
        assert pb.State.Name(resp.state) == "AUTHORIZATION_REJECTED"
        conn = sqlite3.connect(sc.db_path)
        revisions = [r[0] for r in conn.execute("SELECT revision FROM snapshots ORDER BY seq")]
        conn.close()
        assert revisions == [first, second]  # every snapshot that served is on record
    finally:
        stop_sidecar(sc, tmp)


def test_not_ready_until_the_first_good_snapshot(tmp_path: Path) -> None:
    pdir = policy_copy(tmp_path)
    spec = pdir / "tools" / "weather.get@v1.json"
    good = spec.read_text()
    spec.write_text(good.replace('"format": "date"', '"format": "no-such-format"'))
    sc, tmp = start_sidecar(pdir, policy=FAST, tolerate_bad_policies=True)
    try:
        assert health(sc) == NOT_SERVING
        with pytest.raises(grpc.RpcError) as err:
            weather(sc)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and error_reason(err.value) == "not_ready"
        with pytest.raises(grpc.RpcError) as err:
            sc.authorizer.Authorize(
                pb.AuthorizeRequest(subject=pb.Subject(tenant="acme", id="bob"), capability="weather.read")
            )
        assert error_reason(err.value) == "not_ready"
        spec.write_text(good)
        wait_for(lambda: health(sc) == SERVING)
        assert pb.State.Name(weather(sc).state) == "PREPARED"
    finally:
        stop_sidecar(sc, tmp)


def test_opa_readiness_waits_for_the_expected_revision(opa_factory: Callable[..., OpaServer]) -> None:
    empty = opa_factory(None)  # a real OPA server that has not loaded our policies
    cfg = PolicyConfig(engine="opa", opa_url=empty.url, watch=True, watch_interval_ms=50)
    sc, tmp = start_sidecar(POLICIES, policy=cfg)
    try:
        assert health(sc) == NOT_SERVING
        with pytest.raises(grpc.RpcError) as err:
            weather(sc)
        assert error_reason(err.value) == "not_ready"
        engine = sc.sidecar.components.gate.snapshot_or_none.engine  # type: ignore[union-attr]
        sc.call(engine.load_policies())  # now OPA serves exactly our revision
        wait_for(lambda: health(sc) == SERVING)
        resp = weather(sc)
        assert pb.State.Name(resp.state) == "PREPARED" and resp.decision.engine == "opa"
    finally:
        stop_sidecar(sc, tmp)


def test_opa_upload_mode_becomes_ready_by_itself(opa_factory: Callable[..., OpaServer]) -> None:
    empty = opa_factory(None)
    cfg = PolicyConfig(engine="opa", opa_url=empty.url, opa_upload_policies=True, watch_interval_ms=50)
    sc, tmp = start_sidecar(POLICIES, policy=cfg)
    try:
        # Generous bounds: OPA's first upload and compile take seconds on a loaded 2-core box; the
        # waits end as soon as the condition holds.
        wait_for(lambda: health(sc) == SERVING, timeout=60)
        assert pb.State.Name(weather(sc).state) == "PREPARED"
        empty.stop()  # OPA goes away: decisions fail closed, readiness drops
        # Two fail-closed answers, depending on whether the 50 ms watcher has already noticed:
        # a decision refused by the engine, or no usable snapshot at all (UNAVAILABLE).
        try:
            resp = weather(sc)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
        else:
            assert pb.State.Name(resp.state) == "AUTHORIZATION_REJECTED"
            assert resp.decision.error_code in ("engine_unavailable", "engine_timeout")
        wait_for(lambda: health(sc) == NOT_SERVING, timeout=60)
    finally:
        stop_sidecar(sc, tmp)


def test_health_answers_while_a_reload_is_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 A3: a reload parses and validates in a worker thread, so serving (health here)
    goes on while it runs. The load is held open by a gate the test releases, so the test does
    not depend on how slow a load is: health is asked while the load is provably still running."""
    import asyncio
    import threading

    from callgate.policy import lifecycle

    loading, release = threading.Event(), threading.Event()
    real = lifecycle.load_snapshot_from_config

    def held(cfg: Any) -> Any:
        loading.set()
        assert release.wait(20)
        return real(cfg)

    pdir = policy_copy(tmp_path)
    sc, tmp = start_sidecar(pdir)
    try:
        first = sc.sidecar.components.gate.snapshot.revision
        monkeypatch.setattr(lifecycle, "load_snapshot_from_config", held)
        assert sc.sidecar.lifecycle is not None
        pol = pdir / "cedar" / "policies.cedar"
        pol.write_text(pol.read_text().replace('resource.kind == "file"', 'resource.kind == "doc"'))
        reload = asyncio.run_coroutine_threadsafe(sc.sidecar.lifecycle.reload("test"), sc.loop)
        assert loading.wait(10)
        stub = health_pb2_grpc.HealthStub(sc.channels["agent"])
        for _ in range(5):  # each answered while the load is blocked in its thread
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING
            assert pb.State.Name(weather(sc).state) == "PREPARED"  # the old snapshot serves
        assert not reload.done() and sc.sidecar.components.gate.snapshot.revision == first
        release.set()
        assert reload.result(timeout=20) is True
        assert sc.sidecar.components.gate.snapshot.revision != first
    finally:
        release.set()
        stop_sidecar(sc, tmp)
