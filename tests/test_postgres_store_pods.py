"""Two sidecar processes (two pods) on one PostgreSQL store (``store.backend = postgres``): a
session opened on one pod is served by the other, a repeat of a key on the other pod is answered
from the shared record (the original invocation, its state and decision), racing pods make one
invocation per key, and ``callgate explain`` reads the invocation from outside any pod (issue 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import ROOT, serve_toml
from tests.test_shared_idempotency import wait_serving
from tests.test_store_contract import fresh_pg_database

pytestmark = pytest.mark.postgres


def pod_config(tmp: Path) -> Path:
    toml = tmp / "callgate.toml"
    toml.write_text(
        serve_toml(tmp)
        + """[store]
backend = "postgres"
dsn_env = "CALLGATE_TEST_STORE_DSN"
"""
    )
    return toml


def start(dsn: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-pgpod-", dir="/tmp"))
    toml = pod_config(tmp)
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "serve", "--config", str(toml)],
        cwd=ROOT, env={**os.environ, "CALLGATE_TEST_STORE_DSN": dsn}, stderr=open(tmp / "log", "wb"),
    )  # fmt: skip
    return proc, f"unix:{tmp}/agent.sock", tmp


def propose(stub: pb_grpc.GateStub, sid: str, key: str, title: str, pid: str = "p") -> pb.ProposeResponse:
    args = json.dumps({"title": title, "start": "2026-07-20T09:00:00+00:00"}).encode()
    return stub.Propose(
        pb.ProposeRequest(
            session_id=sid, model_call_id="m", proposal_id=pid, tool_name="calendar.create_event",
            tool_version="v1", arguments=args, idempotency_key=key,
        )
    )  # fmt: skip


def test_two_pods_share_one_postgres_store(postgres_dsn: str) -> None:
    dsn = fresh_pg_database(postgres_dsn)
    pods = [start(dsn) for _ in range(2)]
    try:
        channels = [wait_serving(target, proc, tmp / "log") for proc, target, tmp in pods]
        a, b = (pb_grpc.GateStub(ch) for ch in channels)
        sid = a.OpenSession(
            pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="UTC")
        ).session_id
        a.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))

        first = propose(a, sid, "shared-1", "dentist")
        assert first.decision.effect == pb.CONFIRM and not first.idempotent_replay
        again = propose(b, sid, "shared-1", "dentist")  # the other pod: the session and the key are shared
        assert again.idempotent_replay and again.invocation_id == first.invocation_id
        assert again.decision.effect == pb.CONFIRM  # the original's record, not a reconstruction
        assert again.state == first.state

        run = f"{time.time_ns()}"
        for k in range(8):
            answers: list[pb.ProposeResponse] = [pb.ProposeResponse(), pb.ProposeResponse()]
            barrier = threading.Barrier(2)

            def go(
                i: int,
                k: int = k,
                barrier: threading.Barrier = barrier,
                answers: list[pb.ProposeResponse] = answers,
            ) -> None:
                barrier.wait()
                answers[i] = propose((a, b)[i], sid, f"race-{run}-{k}", f"race {k}", f"p{i}")

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(x.idempotent_replay for x in answers) == [False, True], answers
            assert answers[0].invocation_id == answers[1].invocation_id

        # explain from outside any pod: a config naming the PostgreSQL store, nothing else running
        out = subprocess.run(
            [sys.executable, "-m", "callgate", "explain", first.invocation_id, "--json",
             "--config", str(pods[0][2] / "callgate.toml")],
            cwd=ROOT, env={**os.environ, "CALLGATE_TEST_STORE_DSN": dsn}, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert first.invocation_id in out.stdout and "idempotent_replay" in out.stdout
    finally:
        for proc, _, _ in pods:
            proc.terminate()
            proc.wait(10)
