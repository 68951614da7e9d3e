"""Issue 2 load benchmark: Propose through a running sidecar vs a bare RPC on the same server.

`callgate serve` runs as a separate process (Cedar + SQLite, synchronous=FULL with
``--durability barrier``, the default: each answer committed, an fsync at the barriers before
anything runs; ``per_answer``: an fsync before every answer; a list runs one sidecar per mode in
turn, in the same run) and a load generator in another process drives it; the baseline is the
standard gRPC health Check on the same server and listener (a trivial unary RPC through the same
process and transport). Printed: p50/p99/throughput with one call in flight, open loops at fixed
rates (latency from the scheduled send: no coordinated omission), N calls in flight, the
sidecar's CPU per call and its peak RSS (VmHWM). With the Go client each open loop also prints
where its calls over 5 ms fall (in a few 100-ms windows: stalls; in most: queueing) and the
bare Check's open loop at the same rate (the p99 the serving layer itself reaches there).

The load generator is ``bench/loadgen`` (Go, built by ``scripts/loadgen``) unless
``--client python`` (grpc.aio in this process, the figures recorded before 2026-11-30): a Python
client burns about as much CPU per call as the sidecar and shares its two cores.

    .venv/bin/python bench/bench_propose.py [--seconds 10] [--rates 500,1000] [--concurrency 16]
                                            [--listener tcp|unix] [--client go|python]
                                            [--core auto|python|native]
                                            [--durability barrier,per_answer]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import grpc
from _harness import GoLoad, closed_loop, dump, machine_line, open_loop, ready, report, report_go, sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

CITIES = ["Paris", "Lyon", "上海", "Berlin", "Oslo", "Lima", "Quito", "Rome"]
PROPOSE = "/callgate.v1.Gate/Propose"
CHECK = "/grpc.health.v1.Health/Check"


def proposal(sid: str, i: int) -> pb.ProposeRequest:
    return pb.ProposeRequest(
        session_id=sid, model_call_id="bench", proposal_id=f"p{i}", tool_name="weather.get", tool_version="v1",
        arguments=json.dumps({"city": CITIES[i % len(CITIES)], "date": "tomorrow"}).encode(),
    )  # fmt: skip


async def open_session(target: str) -> str:
    async with grpc.aio.insecure_channel(target) as ch:
        await ready(ch)
        gate = pb_grpc.GateStub(ch)
        sid = (await gate.OpenSession(
            pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai")
        )).session_id  # fmt: skip
        await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="bench"))
        return str(sid)


def run_go(args: argparse.Namespace, sc: Any, target: str, sid: str) -> dict[str, Any]:
    s, c = args.seconds, args.concurrency
    rates = [float(r) for r in args.rates.split(",") if r]
    go = GoLoad(target=target, tmp=Path(tempfile.mkdtemp(prefix="cg-loadgen-")))
    # every Propose gets its own proposal id: enough records for every phase at ~3,000/s
    per_phase = int(max(3000, *rates) * s * 1.2)
    phases = 3 + len(rates)
    reqs = go.requests("propose", [proposal(sid, i) for i in range(per_phase * phases)])
    check = go.requests("check", [health_pb2.HealthCheckRequest(service="")])
    last = go.tmp / "last.bin"
    res: dict[str, Any] = {}

    def measured(name: str, key: str, method: str, path: Path, offset: int = 0, **kw: Any) -> dict[str, Any]:
        cpu0 = sc.cpu_seconds()
        r = go.run(method, path, seconds=s, offset=offset, last=last if method == PROPOSE else None, **kw)
        cpu = (sc.cpu_seconds() - cpu0) / max(1, r["n"])
        res[key] = report_go(name, r, f"  sidecar CPU/call={cpu * 1e6:.0f} us")
        res[key]["sidecar_cpu_us_per_call"] = cpu * 1e6
        if method == PROPOSE and r["n"]:
            answer = pb.ProposeResponse.FromString(last.read_bytes())
            assert answer.state == pb.PREPARED and answer.decision.effect == pb.ALLOW, answer
        return r

    go.run(PROPOSE, reqs, seconds=1.0, inflight=4, offset=per_phase * phases - 5000)  # warm-up
    go.run(CHECK, check, seconds=1.0, inflight=4)
    measured("baseline health.Check, 1 in flight", "baseline_sequential", CHECK, check, inflight=1)
    measured("Propose, 1 in flight", "propose_sequential", PROPOSE, reqs, inflight=1)
    for k, rate in enumerate(rates):
        trace = go.tmp / f"open-{rate:.0f}.txt"
        measured(f"Propose, open loop {rate:.0f}/s", f"propose_open_{rate:.0f}", PROPOSE, reqs,
                 offset=per_phase * (1 + k), rate=rate, trace=trace)  # fmt: skip
        res[f"propose_open_{rate:.0f}"]["spread"] = spread(trace)
        measured(f"baseline health.Check, open loop {rate:.0f}/s", f"baseline_open_{rate:.0f}", CHECK, check,
                 rate=rate)  # fmt: skip
    measured(f"baseline health.Check, {c} in flight", "baseline_saturated", CHECK, check, inflight=c)
    measured(
        f"Propose, {c} in flight",
        "propose_saturated",
        PROPOSE,
        reqs,
        offset=per_phase * (1 + len(rates)),
        inflight=c,
    )
    return res


def spread(trace: Path, over_ms: float = 5.0, window_ms: int = 100) -> dict[str, Any]:
    """Where an open loop's slow calls fall (the loadgen's ``-trace``): the calls over
    ``over_ms`` and how many of the run's ``window_ms`` windows hold one. Slow calls in a few
    windows are stalls (a pause of the sidecar); in most windows, queueing (too little headroom
    at that rate)."""
    windows: dict[int, int] = {}
    slow = 0
    for line in trace.read_text().splitlines():
        start_us, latency_us, _ok = (int(x) for x in line.split())
        w = start_us // (window_ms * 1000)
        windows.setdefault(w, 0)
        if latency_us > over_ms * 1000:
            slow += 1
            windows[w] += 1
    hit = sum(1 for n in windows.values() if n)
    print(f"{'':44} calls over {over_ms:g} ms: {slow}, in {hit} of {len(windows)} {window_ms}-ms windows")
    return {"over_ms": over_ms, "slow_calls": slow, "windows_with_slow": hit, "windows": len(windows)}


async def run_python(args: argparse.Namespace, sc: Any, target: str, sid: str) -> dict[str, Any]:
    s, c = args.seconds, args.concurrency
    res: dict[str, Any] = {}
    async with grpc.aio.insecure_channel(target) as ch:
        gate = pb_grpc.GateStub(ch)
        health = health_pb2_grpc.HealthStub(ch)

        async def propose(i: int) -> object:
            r = await gate.Propose(proposal(sid, i))
            assert r.state == pb.PREPARED, r
            return r

        hc = health_pb2.HealthCheckRequest(service="")

        async def bare(i: int) -> object:
            return await health.Check(hc)

        await closed_loop(propose, 1.0, 4)  # warm-up
        await closed_loop(bare, 1.0, 4)
        lat, el = await closed_loop(bare, s, 1)
        res["baseline_sequential"] = report("baseline health.Check, 1 in flight", lat, el)
        lat, el = await closed_loop(propose, s, 1)
        res["propose_sequential"] = report("Propose, 1 in flight", lat, el)
        for rate in [float(r) for r in args.rates.split(",") if r]:
            lat, el, late, errors = await open_loop(propose, s, rate)
            res[f"propose_open_{rate:.0f}"] = report(
                f"Propose, open loop {rate:.0f}/s", lat, el, f"  late={late} errors={errors}"
            )
        for key, name, call in (
            ("baseline_saturated", "baseline health.Check", bare),
            ("propose_saturated", "Propose", propose),
        ):
            cpu0 = sc.cpu_seconds()
            lat, el = await closed_loop(call, s, c)
            cpu = (sc.cpu_seconds() - cpu0) / max(1, len(lat))
            res[key] = report(f"{name}, {c} in flight", lat, el, f"  sidecar CPU/call={cpu * 1e6:.0f} us")
    return res


def stage_times(db: Path) -> dict[str, dict[str, float]]:
    """Median and p99 of each Propose stage over the whole run, from the events' ``duration_us``
    (wall time the gate spent between two events; gRPC and the durable write are not in it)."""
    import sqlite3
    import statistics

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        rows = c.execute(
            "SELECT kind, json_extract(data, '$.duration_us') FROM events WHERE kind IN "
            "('proposed','parsed','validated','normalized','authorized','prepared')"
        ).fetchall()
    by: dict[str, list[int]] = {}
    for kind, us in rows:
        by.setdefault(kind, []).append(int(us))
    out = {}
    line = []
    for kind in ("proposed", "parsed", "validated", "normalized", "authorized", "prepared"):
        xs = sorted(by.get(kind, [0]))
        out[kind] = {"p50": statistics.median(xs), "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))]}
        line.append(f"{kind} {out[kind]['p50']:.0f}/{out[kind]['p99']:.0f}")
    print("gate stage time, us p50/p99 (from events): " + ", ".join(line))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rates", default="500,1000", help="open-loop rates, comma-separated")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--synchronous", default="full", choices=["full", "normal"])
    ap.add_argument("--listener", default="tcp", choices=["tcp", "unix"])
    ap.add_argument("--client", default="go", choices=["go", "python"])
    ap.add_argument("--core", default="auto", choices=["auto", "python", "native"], help="[core] engine")
    ap.add_argument("--durability", default="barrier", help="store.durability modes, comma-separated")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = [m for m in args.durability.split(",") if m]
    runs: dict[str, Any] = {}
    for mode in modes:
        print(f"== store.durability = {mode}")
        runs[mode] = await run_mode(args, mode)
    if len(modes) > 1:
        print("durability            Propose/Check @16   p50 1 in flight (Propose / Check)")
        for mode, res in runs.items():
            print(
                f"{mode:<21} {res['summary']['ratio_saturated']:>18.2f}   "
                f"{res['propose_sequential']['p50_ms']:.3f} / {res['baseline_sequential']['p50_ms']:.3f} ms"
                f" ({res['summary']['p50_ratio_sequential']:.2f}x)"
            )
    dump(args.json, runs if len(modes) > 1 else runs[modes[0]])


async def run_mode(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    with sidecar(
        synchronous=args.synchronous, durability=mode, extra_toml=f'[core]\nengine = "{args.core}"\n'
    ) as sc:
        target = sc.agent if args.listener == "tcp" else f"unix:{sc.tmp}/agent.sock"
        sid = await open_session(target)
        if args.client == "go":
            res = run_go(
                args, sc, target.replace("unix:", "unix://", 1) if args.listener == "unix" else target, sid
            )
        else:
            res = await run_python(args, sc, target, sid)
        seq = res["propose_sequential"]["throughput_rps"] / res["baseline_sequential"]["throughput_rps"]
        sat = res["propose_saturated"]["throughput_rps"] / res["baseline_saturated"]["throughput_rps"]
        res["summary"] = {
            "client": args.client, "listener": args.listener, "synchronous": args.synchronous,
            "ratio_sequential": seq, "ratio_saturated": sat, "sidecar_peak_rss_mib": sc.peak_rss_mib,
            "durability": mode,
            "p50_ratio_sequential": res["propose_sequential"]["p50_ms"] / res["baseline_sequential"]["p50_ms"],
        }  # fmt: skip
        res["stages_us"] = stage_times(sc.tmp / "callgate.db")
        print(f"throughput ratio to baseline: sequential {seq:.2f}, saturated {sat:.2f}")
        print(f"sidecar peak RSS (VmHWM): {sc.peak_rss_mib:.1f} MiB")
        print(
            f"{machine_line()}, client {args.client}, listener {args.listener}, synchronous={args.synchronous}, "
            f"core {args.core}, durability={mode}"
        )
        return res


if __name__ == "__main__":
    asyncio.run(main())
