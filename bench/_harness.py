"""Shared pieces of the load benchmarks: start a real sidecar process, drive it, report.

The sidecar runs as its own process (``python -m callgate serve``) with a temporary config; the
load generator is the calling process (grpc.aio). Latencies are wall-clock per call; throughput
is completed calls per second over the measured window.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

Call = Callable[[int], Awaitable[object]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int, field: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def report(name: str, lat: list[float], elapsed: float, extra: str = "") -> dict[str, float]:
    r = {
        "n": len(lat),
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3,
        "throughput_rps": len(lat) / elapsed,
    }
    print(
        f"{name:<44} n={r['n']:>6}  p50={r['p50_ms']:7.3f} ms  p99={r['p99_ms']:7.3f} ms  "
        f"throughput={r['throughput_rps']:6.0f}/s{extra}",
        flush=True,
    )
    return r


async def closed_loop(call: Call, seconds: float, inflight: int) -> tuple[list[float], float]:
    lat: list[float] = []
    deadline = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        while time.perf_counter() < deadline:
            i = next(counter)
            t0 = time.perf_counter()
            await call(i)
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return lat, time.perf_counter() - t0


async def open_loop(call: Call, seconds: float, rate: float) -> tuple[list[float], float, int, int]:
    """Fire on a fixed schedule regardless of completions; latency counts from the scheduled
    time (no coordinated omission). Returns (latencies, elapsed, late sends, errors); error
    codes are printed."""
    lat: list[float] = []
    errors = 0
    codes: dict[str, int] = {}
    n = int(seconds * rate)
    start = time.perf_counter() + 0.05
    late = 0

    async def one(i: int, at: float) -> None:
        nonlocal errors
        try:
            await call(i)
        except grpc.RpcError as exc:
            errors += 1
            code = str(exc.code()) if hasattr(exc, "code") else type(exc).__name__
            codes[code] = codes.get(code, 0) + 1
            return
        lat.append(time.perf_counter() - at)

    tasks = []
    for i in range(n):
        at = start + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            late += 1
        tasks.append(asyncio.ensure_future(one(i, at)))
    await asyncio.gather(*tasks)
    if codes:
        print(f"  open loop errors by code: {codes}", flush=True)
    return lat, time.perf_counter() - start, late, errors


@dataclass
class SidecarProcess:
    proc: subprocess.Popen[bytes]
    tmp: Path
    agent: str
    executor: str
    authorizer: str

    @property
    def peak_rss_mib(self) -> float:
        return rss_kib(self.proc.pid) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time of the sidecar process so far (all threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def sidecar(
    extra_toml: str = "",
    synchronous: str = "full",
    policy: str = "",
    server_toml: str = "",
    durability: str = "barrier",
    runner: Sequence[str] = ("-m", "callgate"),
    store_toml: str = "",
    checkout: Path = ROOT,
    policy_dir: Path | None = None,
) -> Iterator[SidecarProcess]:
    """A ``callgate serve`` in its own process (``runner``: what the interpreter runs instead of
    ``-m callgate``, e.g. a script that patches the server first; bench_floor.py). ``store_toml``
    replaces the SQLite ``[store]`` section (a PostgreSQL store); ``checkout``: another checkout
    of callgate to run, with its own ``.venv`` (a baseline in the same run; bench_rows.py);
    ``policy_dir``: another policy folder than the example one (bench_dogwood.py)."""
    tmp = Path(tempfile.mkdtemp(prefix="cg-bench-"))
    port = free_port()
    cfg = tmp / "callgate.toml"
    cfg.write_text(
        f"""
[server]
agent = {{ socket = "{tmp}/agent.sock", tcp = "127.0.0.1:{port}" }}
confirmer = {{ socket = "{tmp}/confirmer.sock" }}
authorizer = {{ socket = "{tmp}/authorizer.sock" }}
executor = {{ socket = "{tmp}/executor.sock" }}
{server_toml}
[policy]
dir = "{policy_dir or ROOT / "policies"}"
watch = false
{policy}
{store_toml or f'[store]{chr(10)}path = "{tmp}/callgate.db"{chr(10)}synchronous = "{synchronous}"{chr(10)}durability = "{durability}"'}
[idempotency]
path = "{tmp}/idempotency.db"
[budgets]
max_model_calls = 100000000
max_tool_calls = 100000000
max_wall_clock_seconds = 100000000
max_result_bytes = 100000000000
{extra_toml}
"""
    )
    env = dict(os.environ)
    python = sys.executable if checkout == ROOT else str(checkout / ".venv" / "bin" / "python")
    proc = subprocess.Popen(
        [python, *runner, "serve", "--config", str(cfg)],
        cwd=checkout,
        stderr=open(tmp / "sidecar.log", "wb"),
        env=env,
    )
    try:
        yield SidecarProcess(
            proc, tmp, f"127.0.0.1:{port}", f"unix:{tmp}/executor.sock", f"unix:{tmp}/authorizer.sock"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def ready(channel: grpc.aio.Channel) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    await asyncio.wait_for(channel.channel_ready(), 30)
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (
            await stub.Check(health_pb2.HealthCheckRequest())
        ).status == health_pb2.HealthCheckResponse.SERVING:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("sidecar never became SERVING")


def machine_line() -> str:
    return f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, grpcio {grpc.__version__}"


def dump(path: str | None, results: dict[str, object]) -> None:
    if path:
        Path(path).write_text(json.dumps(results, indent=2))


# --- the Go load generator (bench/loadgen, built by scripts/loadgen) ---------------------------
@dataclass
class GoLoad:
    """Drive one gRPC method with ``bench/loadgen`` (a separate Go process, one HTTP/2 connection).

    A Python client spends about as much CPU per call as the Python server does, and on two cores
    that CPU is taken from the sidecar; the Go client costs a fraction of it, so the figures are
    the sidecar's. Requests are serialized here (protobuf) and replayed by index."""

    target: str
    tmp: Path
    binary: str = ""

    def __post_init__(self) -> None:
        if not self.binary:
            self.binary = subprocess.check_output(
                ["bash", str(ROOT / "scripts" / "loadgen"), "path"], text=True
            ).strip()

    def requests(self, name: str, messages: list[Any]) -> Path:
        path = self.tmp / f"{name}.bin"
        with open(path, "wb") as fh:
            for m in messages:
                b = m.SerializeToString()
                fh.write(len(b).to_bytes(4, "big"))
                fh.write(b)
        return path

    def run(
        self,
        method: str,
        requests: Path,
        *,
        seconds: float,
        inflight: int = 0,
        rate: float = 0.0,
        offset: int = 0,
        last: Path | None = None,
        timeout: str = "",
        trace: Path | None = None,
    ) -> dict[str, Any]:
        args = [
            self.binary,
            "-target",
            self.target,
            "-method",
            method,
            "-requests",
            str(requests),
            "-duration",
            f"{seconds}s",
            "-offset",
            str(offset),
        ]
        args += (
            ["-mode", "open", "-rate", str(rate)]
            if rate
            else ["-mode", "closed", "-concurrency", str(inflight or 1)]
        )
        if last is not None:
            args += ["-last", str(last)]
        if timeout:
            args += ["-timeout", timeout]
        if trace is not None:  # open loop: one line per call (start us, latency us, ok)
            args += ["-trace", str(trace)]
        proc = subprocess.run(args, capture_output=True, text=True)
        if not proc.stdout:
            raise RuntimeError(f"loadgen failed: {proc.stderr.strip()}")
        out: dict[str, Any] = json.loads(proc.stdout)
        return out


def report_go(name: str, r: dict[str, Any], extra: str = "") -> dict[str, Any]:
    p = r["percentiles_ms"]
    out = {
        "n": r["n"],
        "p50_ms": p.get("50", 0.0),
        "p99_ms": p.get("99", 0.0),
        "p999_ms": p.get("99.9", 0.0),
        "max_ms": r["max_ms"],
        "throughput_rps": r["throughput_rps"],
        "errors": r["error_codes"],
    }
    errs = f"  refused/failed={r['errors']} {r['error_codes']}" if r["errors"] else ""
    print(
        f"{name:<44} n={r['n']:>6}  p50={out['p50_ms']:7.3f} ms  p99={out['p99_ms']:7.3f} ms  "
        f"throughput={r['throughput_rps']:6.0f}/s{extra}{errs}",
        flush=True,
    )
    return out
