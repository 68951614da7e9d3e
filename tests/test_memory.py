"""What a serving sidecar keeps resident (issue 15, "sidecar RSS"): a real ``callgate serve``
process on the example policies answers Proposes, then reports the modules it imported, its
glibc malloc arenas (``malloc_info``) and whether a 256 KiB block gets its own mapping after a
4 MiB one was freed (glibc's sliding threshold would have risen to 4 MiB), from a signal handler
installed before the CLI runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.cli.main import MALLOC_ARENAS, Mallopt
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.store.sqlite_worker import CACHED_STATEMENTS, PAGE_CACHE_KIB, open_connection
from tests.conftest import ROOT, serve_toml, short_tmpdir

# Installed in the sidecar process before `callgate serve` runs: SIGUSR1 writes its modules, the
# mmap check and glibc's malloc_info (one <heap> element per arena) to the report files.
WRAPPER = """
import ctypes, gc, json, runpy, signal, sys
report, config = sys.argv[1], sys.argv[2]

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

def dump(*_):
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    libc.free(libc.malloc(4 << 20))
    before = libc.mallinfo2().hblks
    block = libc.malloc(256 << 10)
    mapped = libc.mallinfo2().hblks > before
    libc.free(block)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    f = libc.fopen((report + ".malloc").encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    with open(report, "w") as fh:
        json.dump({"modules": sorted(sys.modules), "mapped_256k": mapped, "frozen": gc.get_freeze_count()}, fh)

signal.signal(signal.SIGUSR1, dump)
sys.argv = ["callgate", "serve", "--config", config]
runpy.run_module("callgate", run_name="__main__", alter_sys=True)
"""

# Imported only when used: none of them serves the example policies without a metrics endpoint.
NOT_SERVING = (
    "prometheus_client",
    "http.server",
    "wsgiref",
    "aiohttp",
    "opentelemetry",
    "regopy",
    "starlette",
)


@contextmanager
def sidecar(extra_toml: str = "", env: dict[str, str] | None = None) -> Iterator[tuple[Path, Path]]:
    tmp = short_tmpdir()
    cfg = tmp / "callgate.toml"
    cfg.write_text(
        serve_toml(tmp)
        + f"""[store]
path = "{tmp}/callgate.db"
[idempotency]
path = "{tmp}/idempotency.db"
{extra_toml}
"""
    )
    report = tmp / "report.json"
    run_env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    run_env.update(env or {}, PYTHONPATH=str(ROOT))
    log = open(tmp / "sidecar.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, str(report), str(cfg)], cwd=ROOT, env=run_env, stderr=log
    )
    try:
        with grpc.insecure_channel(f"unix:{tmp}/agent.sock") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, (tmp / "sidecar.log").read_text()[-2000:]
                try:
                    if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == 1:
                        break
                except grpc.RpcError:
                    pass
                assert time.monotonic() < deadline, "never SERVING"
                time.sleep(0.05)
            gate = pb_grpc.GateStub(ch)
            sid = gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai")
            ).session_id
            gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="mc"))
            for i in range(20):
                answer = gate.Propose(
                    pb.ProposeRequest(
                        session_id=sid,
                        model_call_id="mc",
                        proposal_id=f"p{i}",
                        tool_name="weather.get",
                        tool_version="v1",
                        arguments=json.dumps({"city": "Paris", "date": "tomorrow"}).encode(),
                    )  # fmt: skip
                )
                assert answer.state == pb.PREPARED, answer
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 20
        while not report.exists() or not report.read_text().endswith("}"):
            assert time.monotonic() < deadline, "no report"
            time.sleep(0.05)
        yield report, Path(str(report) + ".malloc")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def heaps(malloc_info: Path) -> int:
    return len(re.findall(r"<heap nr=", malloc_info.read_text()))


def test_serving_sidecar_imports_nothing_it_does_not_use_and_tunes_malloc() -> None:
    with sidecar() as (report, malloc):
        found: dict[str, Any] = json.loads(report.read_text())
        loaded = [m for m in NOT_SERVING if m in found["modules"]]
        assert loaded == [], loaded
        assert "callgate._native" in found["modules"]  # the example policies run on the compiled core
        assert heaps(malloc) <= MALLOC_ARENAS, malloc.read_text()[:400]
        assert found["mapped_256k"] is True  # the fixed mmap threshold, not glibc's sliding one
        assert found["frozen"] > 20_000  # the modules' objects: out of every full collection


def test_a_metrics_endpoint_imports_prometheus_and_the_environment_overrides_a_malloc_setting() -> None:
    with sidecar('[observability]\nmetrics_address = "127.0.0.1:0"\n', env={"MALLOC_ARENA_MAX": "8"}) as (
        report,
        malloc,
    ):
        found = json.loads(report.read_text())
        assert "prometheus_client" in found["modules"]
        assert heaps(malloc) > MALLOC_ARENAS  # glibc applied MALLOC_ARENA_MAX=8, callgate left it
        assert found["mapped_256k"] is True  # the other setting still applies


def test_tune_malloc_leaves_what_the_environment_sets_alone() -> None:
    # in a fresh interpreter: mallopt would otherwise tune this test process
    code = (
        "from callgate.cli.main import tune_malloc as t; "
        "print([p.name for p in t({'MALLOC_ARENA_MAX': '4'})], "
        "[p.name for p in t({'MALLOC_ARENA_MAX': '4', 'MALLOC_MMAP_THRESHOLD_': '65536'})])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.split() == [f"['{Mallopt.M_MMAP_THRESHOLD.name}']", "[]"]


def test_writer_connections_keep_a_small_page_cache_and_statement_cache(tmp_path: Path) -> None:
    conn = open_connection(str(tmp_path / "w.db"), schema="", synchronous="NORMAL", busy_timeout_ms=1000)
    try:
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -PAGE_CACHE_KIB
        assert CACHED_STATEMENTS < 128  # below the sqlite3 module's default
    finally:
        conn.close()
