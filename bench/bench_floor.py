"""Issue 15 decomposition: how much of Propose's gap to a bare ``health.Check`` is the gate's own
work, and how much is gRPC, the interceptors, the Propose service and asyncio.

Three sidecars in turn, each measured the same way (Go load generator, 16 and 1 in flight):

* ``real``: ``callgate serve`` as shipped;
* ``writer``: ``Gate.propose`` replaced after its first call (bench/_floor_serve.py) by one
  round trip through the SQLite writer that writes nothing, then the first call's outcome;
* ``cached``: the first call's outcome at once.

Each prints Propose and bare Check throughput at 16 in flight and p50 at 1 in flight, the ratios
the issue sets targets on (>= 0.60 at 16, <= 1.5x at 1), and the sidecar's CPU per call. The
``cached`` row is the floor a Propose cannot go under while it is served by grpc.aio in Python;
``real`` minus ``writer`` is what the gate's stages, records and commit cost.

    .venv/bin/python bench/bench_floor.py [--seconds 4] [--rounds 1]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from _harness import GoLoad, machine_line, sidecar
from bench_propose import CHECK, PROPOSE, open_session, proposal
from grpc_health.v1 import health_pb2

MODES = ("real", "writer", "cached")


def measure(mode: str, seconds: float) -> dict[str, Any]:
    os.environ["CALLGATE_FLOOR"] = mode
    runner = ("-m", "callgate") if mode == "real" else (str(Path(__file__).with_name("_floor_serve.py")),)
    with sidecar(runner=runner) as sc:
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-floor-")))
        per = int(3000 * seconds * 1.5)
        reqs = go.requests("propose", [proposal(sid, i) for i in range(per * 3)])
        check = go.requests("check", [health_pb2.HealthCheckRequest()])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=4, offset=per * 2)  # warm-up
        out: dict[str, Any] = {}
        for key, method, path, inflight, offset in (
            ("check16", CHECK, check, 16, 0),
            ("propose16", PROPOSE, reqs, 16, 0),
            ("check1", CHECK, check, 1, 0),
            ("propose1", PROPOSE, reqs, 1, per),
        ):
            cpu0 = sc.cpu_seconds()
            r = go.run(method, path, seconds=seconds, inflight=inflight, offset=offset)
            if r["errors"]:
                raise RuntimeError(f"{mode} {key}: {r['error_codes']}")
            out[key] = {
                "rps": r["throughput_rps"],
                "p50_ms": r["percentiles_ms"]["50"],
                "cpu_us": (sc.cpu_seconds() - cpu0) * 1e6 / max(1, r["n"]),
            }
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    print(machine_line() + ", client go")
    print()
    print("| sidecar | round | Propose/s @16 | Check/s @16 | **ratio @16** | p50 Propose / Check @1 | "
          "**ratio @1** | CPU per Propose @16 | CPU per Check @16 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for k in range(1, a.rounds + 1):
        for mode in MODES:
            m = measure(mode, a.seconds)
            p16, c16, p1, c1 = m["propose16"], m["check16"], m["propose1"], m["check1"]
            print(f"| {mode} | {k} | {p16['rps']:,.0f} | {c16['rps']:,.0f} | **{p16['rps'] / c16['rps']:.2f}** | "
                  f"{p1['p50_ms']:.3f} / {c1['p50_ms']:.3f} ms | **{p1['p50_ms'] / c1['p50_ms']:.2f}x** | "
                  f"{p16['cpu_us']:,.0f} µs | {c16['cpu_us']:,.0f} µs |", flush=True)  # fmt: skip
    print()
    print("targets (issue 15): ratio @16 >= 0.60, ratio @1 <= 1.5x")


if __name__ == "__main__":
    main()
