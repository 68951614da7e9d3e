"""Load benchmark: Propose through a running callgate sidecar vs a bare RPC on the same server.

Starts `callgate serve` as a separate process (Cedar + SQLite, synchronous=FULL, loopback TCP),
drives it from this process with grpc.aio, and prints p50/p99/throughput for:

  1. sequential: one call in flight            (Propose and the baseline)
  2. paced: open-loop at a fixed rate (default 1,000 req/s)
  3. saturated: N calls in flight (default 16)  (Propose and the baseline)

The baseline is the standard gRPC health Check RPC on the same server and listener: the cost of
a trivial unary RPC through the same process, transport and event loop. Also prints the
sidecar's peak RSS (VmHWM). Usage:

    .venv/bin/python bench/bench_propose.py [--seconds 10] [--rate 1000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sidecar.gen.callgate.v1 import callgate_pb2 as pb  # noqa: E402
from sidecar.gen.callgate.v1 import callgate_pb2_grpc as pb_grpc  # noqa: E402


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


def report(name: str, lat: list[float], elapsed: float) -> dict[str, float]:
    r = {
        "n": len(lat),
        "p50_ms": pct(lat, 50) * 1e3,
        "p99_ms": pct(lat, 99) * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3,
        "throughput_rps": len(lat) / elapsed,
    }
    print(
        f"{name:<34} n={r['n']:>6}  p50={r['p50_ms']:.3f} ms  p99={r['p99_ms']:.3f} ms  "
        f"throughput={r['throughput_rps']:.0f} req/s",
        flush=True,
    )
    return r


async def closed_loop(call: Callable[[int], Awaitable[object]], seconds: float, inflight: int) -> tuple[list[float], float]:
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


async def open_loop(call: Callable[[int], Awaitable[object]], seconds: float, rate: float) -> tuple[list[float], float, int]:
    """Fire at a fixed schedule regardless of completions; latency counts from the scheduled time."""
    lat: list[float] = []
    errors: list[str] = []
    n = int(seconds * rate)
    start = time.perf_counter() + 0.05
    late = 0

    async def one(i: int, at: float) -> None:
        try:
            await call(i)
        except grpc.RpcError as exc:
            errors.append(str(exc.code()))
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
    if errors:
        print(f"  open loop: {len(errors)} errors: {sorted(set(errors))}", flush=True)
    return lat, time.perf_counter() - start, late


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", help="write results to this file")
    ap.add_argument("--synchronous", default="full", choices=["full", "normal"], help="SQLite synchronous pragma")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cg-bench-"))
    port = free_port()
    cfg = tmp / "callgate.toml"
    cfg.write_text(
        f"""
[server]
agent = {{ socket = "{tmp}/agent.sock", tcp = "127.0.0.1:{port}" }}
confirmer = {{ socket = "{tmp}/confirmer.sock" }}
authorizer = {{ socket = "{tmp}/authorizer.sock" }}
[policy]
dir = "{ROOT}/policies"
[store]
path = "{tmp}/callgate.db"
synchronous = "{args.synchronous}"
"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(cfg)],
        cwd=ROOT,
        stderr=open(tmp / "sidecar.log", "w"),
    )
    try:
        target = f"127.0.0.1:{port}"
        async with grpc.aio.insecure_channel(target) as ch:
            await asyncio.wait_for(ch.channel_ready(), 30)
            gate = pb_grpc.GateStub(ch)
            health = health_pb2_grpc.HealthStub(ch)
            sess = await gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai")
            )
            sid = sess.session_id
            await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="bench"))
            cities = ["Paris", "Lyon", "上海", "Berlin", "Oslo", "Lima", "Quito", "Rome"]

            async def propose(i: int) -> object:
                r = await gate.Propose(
                    pb.ProposeRequest(
                        session_id=sid,
                        model_call_id="bench",
                        proposal_id=f"p{i}",
                        tool_name="weather.get",
                        tool_version="v1",
                        arguments=json.dumps({"city": cities[i % len(cities)], "date": "tomorrow"}).encode(),
                    )
                )
                assert r.state == pb.PREPARED, r
                return r

            hc = health_pb2.HealthCheckRequest(service="")

            async def bare(i: int) -> object:
                return await health.Check(hc)

            # warm-up
            await closed_loop(propose, 1.0, 4)
            await closed_loop(bare, 1.0, 4)
            results: dict[str, dict[str, float]] = {}
            s = args.seconds
            lat, el = await closed_loop(bare, s, 1)
            results["baseline_sequential"] = report("baseline health.Check, 1 in flight", lat, el)
            lat, el = await closed_loop(propose, s, 1)
            results["propose_sequential"] = report("Propose, 1 in flight", lat, el)
            lat, el, late = await open_loop(propose, s, args.rate)
            results["propose_paced"] = report(f"Propose, open loop {args.rate:.0f} req/s", lat, el)
            results["propose_paced"]["late_sends"] = late
            c = args.concurrency
            lat, el = await closed_loop(bare, s, c)
            results["baseline_saturated"] = report(f"baseline health.Check, {c} in flight", lat, el)
            lat, el = await closed_loop(propose, s, c)
            results["propose_saturated"] = report(f"Propose, {c} in flight", lat, el)
        ratio_seq = results["propose_sequential"]["throughput_rps"] / results["baseline_sequential"]["throughput_rps"]
        ratio_sat = results["propose_saturated"]["throughput_rps"] / results["baseline_saturated"]["throughput_rps"]
        peak = rss_kib(proc.pid) / 1024
        results["summary"] = {"ratio_sequential": ratio_seq, "ratio_saturated": ratio_sat, "sidecar_peak_rss_mib": peak}
        print(f"ratio to baseline: sequential {ratio_seq:.2f}, saturated {ratio_sat:.2f}")
        print(f"sidecar peak RSS (VmHWM): {peak:.1f} MiB")
        print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, grpcio {grpc.__version__}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    asyncio.run(main())
