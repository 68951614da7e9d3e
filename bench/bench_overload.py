"""Issue 9 overload benchmark: admitted latency and goodput beyond capacity.

`callgate serve` runs as a separate process (Cedar + SQLite, synchronous=FULL) and
``bench/loadgen`` (Go, one HTTP/2 connection) drives Propose of ``weather.get@v1``:

1. capacity: ``--concurrency`` calls in flight, closed loop (completed calls per second), on
   a sidecar with that many calls as a fixed limit (a closed loop re-sends a refused call at
   once, so against the adaptive limit it would measure refusals, not capacity);
2. unloaded: an open loop at a quarter of capacity (admitted p50/p99 of a calm sidecar), on a
   second sidecar with the admission under test (defaults, or ``--before``: the rule before
   issue 9, or ``--server-toml`` lines);
3. open loops at 2x and 5x that capacity (``--factors``): admitted p50/p99, goodput (answers
   per second) and the refusal rate by gRPC code, each against the unloaded run and the
   capacity measured in the same run.

Target (issue 9): admitted p99 within 5x of the unloaded p99 and goodput at least 80% of
capacity. Every call carries a deadline (``--timeout``, default 1 s, like an agent's), so the
sidecar can refuse a call whose deadline it cannot meet.

    .venv/bin/python bench/bench_overload.py [--seconds 10] [--factors 2,5] [--concurrency 16]
                                             [--timeout 1s] [--server-toml '...'] [--before]
                                             [--checkout /work/main]

``--checkout``: run the sidecars of another checkout (its own ``.venv``), e.g. main before a
change, to compare in one session.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _harness import GoLoad, dump, machine_line, report_go, sidecar
from bench_propose import PROPOSE, open_session, proposal

from callgate.gen.v1 import callgate_pb2 as pb

FIXED_LIMIT = "max_concurrent_rpcs = {c}\nadmission_min_in_flight = {c}\nadmission_target_ms = 1000000\nmax_pending_rpcs = 0\n"
"""``[server]`` lines of the capacity sidecar: a fixed limit of ``--concurrency`` calls, no
adaptation (a closed loop re-sends a refused call at once, which measures the refusals)."""
BEFORE = "max_concurrent_rpcs = 128\nadmission_target_ms = 0\nmax_pending_rpcs = 0\n"
"""``[server]`` lines of the admission before issue 9 (``--before``): gRPC's fixed limit of 128
calls, gRPC core's default pending queue, deadlines not consulted."""


class Phases:
    """The benchmark's phases against one sidecar, with one request file and a running offset
    (every Propose gets its own proposal id)."""

    def __init__(self, args: argparse.Namespace, sc: Any, sid: str, count: int) -> None:
        self.args, self.sc = args, sc
        self.go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-overload-")))
        self.reqs = self.go.requests("propose", [proposal(sid, i) for i in range(count)])
        self.last = self.go.tmp / "last.bin"
        self.offset = 0
        self.go.run(PROPOSE, self.reqs, seconds=1.0, inflight=4, offset=count - 5000)  # warm-up

    def measured(self, name: str, **kw: Any) -> dict[str, Any]:
        s = self.args.seconds
        cpu0 = self.sc.cpu_seconds()
        r = self.go.run(
            PROPOSE, self.reqs, seconds=s, offset=self.offset, last=self.last, timeout=self.args.timeout, **kw
        )
        offered = kw.get("rate", 0.0) * s or r["n"] + r["errors"]
        self.offset += int(offered) + 100
        refused = r["errors"] / max(1, offered)
        cpu = (self.sc.cpu_seconds() - cpu0) / max(1, r["n"])
        out = report_go(name, r, f"  refused={refused:.1%}  CPU/answer={cpu * 1e6:.0f} us")
        out["refused_fraction"] = refused
        if r["n"]:
            answer = pb.ProposeResponse.FromString(self.last.read_bytes())
            assert answer.state == pb.PREPARED and answer.decision.effect == pb.ALLOW, answer
        return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--factors", default="2,5", help="open-loop rates as multiples of capacity")
    ap.add_argument("--concurrency", type=int, default=16, help="closed loop measuring capacity")
    ap.add_argument("--timeout", default="1s", help="per-call gRPC deadline (Go duration)")
    ap.add_argument("--server-toml", default="", help="[server] lines of the measured sidecar")
    ap.add_argument("--before", action="store_true", help="measure the admission before issue 9")
    ap.add_argument("--checkout", type=Path, default=None, help="another checkout (with .venv) to measure")
    ap.add_argument("--json")
    args = ap.parse_args()
    where = {"checkout": args.checkout.resolve()} if args.checkout else {}
    s = args.seconds
    factors = [float(f) for f in args.factors.split(",") if f]
    res: dict[str, Any] = {}
    # 1. capacity, on a sidecar with a fixed limit of --concurrency
    with sidecar(server_toml=FIXED_LIMIT.format(c=args.concurrency), **where) as sc:
        sid = await open_session(sc.agent)
        ph = Phases(args, sc, sid, int(4000 * s) + 6000)
        res["capacity"] = ph.measured(f"capacity: {args.concurrency} in flight", inflight=args.concurrency)
    capacity = res["capacity"]["throughput_rps"]
    # 2. unloaded and overload, on a sidecar with the admission under test
    server_toml = (BEFORE if args.before else "") + args.server_toml
    with sidecar(server_toml=server_toml, **where) as sc:
        sid = await open_session(sc.agent)
        ph = Phases(args, sc, sid, int(capacity * s * (0.3 + sum(factors))) + 6000)
        unloaded = res["unloaded"] = ph.measured(
            f"unloaded: open loop {capacity / 4:.0f}/s", rate=capacity / 4
        )
        for f in factors:
            rate = capacity * f
            r = res[f"overload_{f:g}x"] = ph.measured(f"overload {f:g}x: open loop {rate:.0f}/s", rate=rate)
            p99_ratio = r["p99_ms"] / max(1e-9, unloaded["p99_ms"])
            goodput = r["throughput_rps"] / max(1e-9, capacity)
            r["p99_ratio_to_unloaded"] = p99_ratio
            r["goodput_fraction_of_capacity"] = goodput
            print(
                f"  {f:g}x: admitted p99 {p99_ratio:.2f}x unloaded (target <= 5: "
                f"{'met' if p99_ratio <= 5 else 'NOT met'}), goodput {goodput:.0%} of capacity "
                f"(target >= 80%: {'met' if goodput >= 0.8 else 'NOT met'})",
                flush=True,
            )
        res["summary"] = {
            "timeout": args.timeout, "before": args.before, "server_toml": server_toml,
            "sidecar_peak_rss_mib": sc.peak_rss_mib,
        }  # fmt: skip
        print(f"sidecar peak RSS (VmHWM): {sc.peak_rss_mib:.1f} MiB")
    for line in (sc.tmp / "sidecar.log").read_text().splitlines():
        if "admission agent:" in line:  # logged by the sidecar when it stops
            print("sidecar " + line[line.index("admission agent:") :])
    print(f"{machine_line()}, client go, listener tcp, synchronous=full, deadline {args.timeout}")
    dump(args.json, res)


if __name__ == "__main__":
    asyncio.run(main())
