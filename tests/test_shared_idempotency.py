"""Two sidecar processes (two pods) sharing one real PostgreSQL idempotency store race on the same
keys: for each key exactly one proposal becomes an invocation; the other is answered as a replay
of it (spec 6.8; issue 3: "including two sidecar processes racing on one key")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import ROOT, serve_toml


def start(dsn: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-pod-", dir="/tmp"))
    (tmp / "callgate.toml").write_text(
        serve_toml(tmp)
        + f"""[store]
path = "{tmp}/events.db"
[idempotency]
backend = "postgres"
dsn_env = "CALLGATE_POSTGRES_DSN"
"""
    )
    env = {**os.environ, "CALLGATE_POSTGRES_DSN": dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "serve", "--config", str(tmp / "callgate.toml")],
        cwd=ROOT, env=env, stderr=open(tmp / "log", "wb"),
    )  # fmt: skip
    return proc, f"unix:{tmp}/agent.sock", tmp


def wait_serving(target: str, proc: subprocess.Popen[bytes], log: Path) -> grpc.Channel:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ch = grpc.insecure_channel(target)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            st = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1).status
            if st == health_pb2.HealthCheckResponse.SERVING:
                return ch
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise AssertionError("sidecar did not become SERVING:\n" + log.read_text())


def test_two_sidecars_race_on_one_key(postgres_dsn: str) -> None:
    pods = [start(postgres_dsn) for _ in range(2)]
    try:
        channels = [wait_serving(target, proc, tmp / "log") for proc, target, tmp in pods]
        stubs = [pb_grpc.GateStub(ch) for ch in channels]
        sessions = []
        for g in stubs:
            sid = g.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="UTC")
            ).session_id
            g.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))
            sessions.append(sid)
        run = f"{time.time_ns()}"
        for k in range(12):
            args = json.dumps({"title": f"race {k}", "start": "2026-07-20T09:00:00+00:00"}).encode()
            barrier = threading.Barrier(2)
            answers: list[pb.ProposeResponse] = [pb.ProposeResponse(), pb.ProposeResponse()]

            def go(i: int) -> None:
                barrier.wait()
                answers[i] = stubs[i].Propose(pb.ProposeRequest(
                    session_id=sessions[i], model_call_id="m", proposal_id=f"p{i}", tool_name="calendar.create_event",
                    tool_version="v1", arguments=args, idempotency_key=f"race-{run}-{k}",
                ))  # fmt: skip

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fresh = [a for a in answers if not a.idempotent_replay]
            replays = [a for a in answers if a.idempotent_replay]
            assert len(fresh) == 1 and len(replays) == 1, answers
            assert fresh[0].decision.effect == pb.CONFIRM
            assert replays[0].invocation_id == fresh[0].invocation_id  # answered by the winner's invocation
    finally:
        for proc, _, _ in pods:
            proc.terminate()
            proc.wait(10)
