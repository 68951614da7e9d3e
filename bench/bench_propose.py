"""Issue 2 load benchmark: Propose through a running sidecar vs a bare RPC on the same server.

`callgate serve` runs as a separate process (Cedar + SQLite, synchronous=FULL: every event on
disk before the answer, loopback TCP); this process drives it with grpc.aio and prints
p50/p99/throughput for: one call in flight, an open loop at a fixed rate (default 1,000/s), and
N calls in flight (default 16). The baseline is the standard gRPC health Check on the same
server and listener (a trivial unary RPC through the same process and transport). Also prints
the sidecar's peak RSS (VmHWM).

    .venv/bin/python bench/bench_propose.py [--seconds 10] [--rate 1000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
from _harness import closed_loop, dump, machine_line, open_loop, ready, report, sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sidecar.gen.callgate.v1 import callgate_pb2 as pb
from sidecar.gen.callgate.v1 import callgate_pb2_grpc as pb_grpc


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--synchronous", default="full", choices=["full", "normal"])
    ap.add_argument("--json")
    args = ap.parse_args()
    with sidecar(synchronous=args.synchronous) as sc:
        async with grpc.aio.insecure_channel(sc.agent) as ch:
            await ready(ch)
            gate = pb_grpc.GateStub(ch)
            health = health_pb2_grpc.HealthStub(ch)
            sid = (await gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai")
            )).session_id  # fmt: skip
            await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="bench"))
            cities = ["Paris", "Lyon", "上海", "Berlin", "Oslo", "Lima", "Quito", "Rome"]

            async def propose(i: int) -> object:
                r = await gate.Propose(pb.ProposeRequest(
                    session_id=sid, model_call_id="bench", proposal_id=f"p{i}", tool_name="weather.get",
                    tool_version="v1",
                    arguments=json.dumps({"city": cities[i % len(cities)], "date": "tomorrow"}).encode(),
                ))  # fmt: skip
                assert r.state == pb.PREPARED, r
                return r

            hc = health_pb2.HealthCheckRequest(service="")

            async def bare(i: int) -> object:
                return await health.Check(hc)

            await closed_loop(propose, 1.0, 4)  # warm-up
            await closed_loop(bare, 1.0, 4)
            s, c = args.seconds, args.concurrency
            res: dict[str, object] = {}
            lat, el = await closed_loop(bare, s, 1)
            res["baseline_sequential"] = report("baseline health.Check, 1 in flight", lat, el)
            lat, el = await closed_loop(propose, s, 1)
            res["propose_sequential"] = report("Propose, 1 in flight", lat, el)
            lat, el, late, errors = await open_loop(propose, s, args.rate)
            res["propose_paced"] = report(f"Propose, open loop {args.rate:.0f}/s", lat, el, f"  late={late} errors={errors}")
            cpu0 = sc.cpu_seconds()
            lat, el = await closed_loop(bare, s, c)
            cpu = (sc.cpu_seconds() - cpu0) / max(1, len(lat))
            res["baseline_saturated"] = report(f"baseline health.Check, {c} in flight", lat, el, f"  sidecar CPU/call={cpu * 1e6:.0f} us")
            cpu0 = sc.cpu_seconds()
            lat, el = await closed_loop(propose, s, c)
            cpu = (sc.cpu_seconds() - cpu0) / max(1, len(lat))
            res["propose_saturated"] = report(f"Propose, {c} in flight", lat, el, f"  sidecar CPU/call={cpu * 1e6:.0f} us")
        seq = res["propose_sequential"]["throughput_rps"] / res["baseline_sequential"]["throughput_rps"]  # type: ignore[index]
        sat = res["propose_saturated"]["throughput_rps"] / res["baseline_saturated"]["throughput_rps"]  # type: ignore[index]
        res["summary"] = {"ratio_sequential": seq, "ratio_saturated": sat, "sidecar_peak_rss_mib": sc.peak_rss_mib}
        print(f"throughput ratio to baseline: sequential {seq:.2f}, saturated {sat:.2f}")
        print(f"sidecar peak RSS (VmHWM): {sc.peak_rss_mib:.1f} MiB")
        print(machine_line())
        dump(args.json, res)


if __name__ == "__main__":
    asyncio.run(main())
