"""Memory over time: a long open-loop Propose load across many sessions and model calls.

Issue 2 asks for a sidecar RSS of at most 150 MiB. A one-minute benchmark cannot show growth, so
this runs for minutes (default 300 s) at a steady rate (default 400/s) over many sessions, each
with many model calls (a ListTools per model call, as an agent does every turn: more tool views
than the view cache holds), and prints the sidecar's RSS (VmRSS) and peak (VmHWM) every interval.

    .venv/bin/python bench/bench_soak.py [--seconds 300] [--rate 400] [--sessions 200] [--model-calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from _harness import GoLoad, dump, machine_line, ready, rss_kib, sidecar

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

LIMIT_MIB = 150.0


async def setup(target: str, sessions: int, model_calls: int) -> list[tuple[str, str]]:
    """Open the sessions and list tools once per model call; returns (session, model call) pairs."""
    pairs = []
    async with grpc.aio.insecure_channel(target) as ch:
        await ready(ch)
        gate = pb_grpc.GateStub(ch)
        for s in range(sessions):
            sid = (await gate.OpenSession(pb.OpenSessionRequest(
                subject=pb.Subject(tenant="acme", id=f"user{s}"), timezone="Europe/Paris"))).session_id  # fmt: skip
            for m in range(model_calls):
                await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id=f"mc{m}"))
                pairs.append((sid, f"mc{m}"))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--rate", type=float, default=400.0)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--model-calls", type=int, default=50)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    with sidecar() as sc:
        t0 = time.monotonic()
        pairs = asyncio.run(setup(sc.agent, args.sessions, args.model_calls))
        print(f"setup: {args.sessions} sessions x {args.model_calls} model calls listed in "
              f"{time.monotonic() - t0:.0f} s; RSS {rss_kib(sc.proc.pid, 'VmRSS') / 1024:.1f} MiB", flush=True)  # fmt: skip
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-soak-")))
        n = int(args.seconds * args.rate * 1.05)
        cities = ["Paris", "Lyon", "Oslo", "Lima", "Rome", "Quito", "Berlin", "上海"]
        reqs = go.requests("propose", [
            pb.ProposeRequest(session_id=sid, model_call_id=mc, proposal_id=f"p{i}", tool_name="weather.get",
                              tool_version="v1",
                              arguments=json.dumps({"city": cities[i % len(cities)], "date": "tomorrow"}).encode())
            for i, (sid, mc) in ((i, pairs[(i * 7919) % len(pairs)]) for i in range(n))
        ])  # fmt: skip
        samples: list[dict[str, float]] = []
        done = threading.Event()

        def sample() -> None:
            start = time.monotonic()
            while not done.wait(args.interval):
                s = {"t_s": time.monotonic() - start, "rss_mib": rss_kib(sc.proc.pid, "VmRSS") / 1024,
                     "peak_mib": sc.peak_rss_mib}  # fmt: skip
                samples.append(s)
                print(
                    f"  t={s['t_s']:5.0f} s  RSS {s['rss_mib']:6.1f} MiB  peak {s['peak_mib']:6.1f} MiB",
                    flush=True,
                )

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        r = go.run("/callgate.v1.Gate/Propose", reqs, seconds=args.seconds, rate=args.rate)
        done.set()
        th.join()
        p = r["percentiles_ms"]
        peak = sc.peak_rss_mib
        print(f"Propose open loop {args.rate:.0f}/s for {args.seconds:.0f} s: n={r['n']} errors={r['error_codes']} "
              f"p50={p.get('50', 0):.2f} ms p99={p.get('99', 0):.2f} ms")  # fmt: skip
        verdict = "within" if peak <= LIMIT_MIB else "OVER"
        print(f"sidecar peak RSS (VmHWM) {peak:.1f} MiB: {verdict} the {LIMIT_MIB:.0f} MiB target")
        print(machine_line())
        res: dict[str, Any] = {"load": r, "samples": samples, "peak_rss_mib": peak}
        dump(args.json, res)


if __name__ == "__main__":
    main()
