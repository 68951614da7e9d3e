"""Issue 15 decomposition: how much of Propose's gap to a bare ``health.Check`` is the gate's own
work, and how much is gRPC, the interceptors, the Propose service, asyncio and the store.

Sidecars in turn, each measured the same way (Go load generator: 16 and 1 in flight, and an
open loop at 1,000 calls/s):

* ``real``: ``callgate serve`` as shipped;
* ``lean``: ``Gate.propose`` replaced after its first call (bench/_floor_serve.py) by the
  compiled core's whole decision on the call's arguments and the first call's rows written
  again under a new id by the real SQLite writer, then the first call's outcome: the common
  Propose with none of the gate's Python, the upper bound of doing it all in one compiled call;
* ``rows``: ``lean`` without the decision; ``decision``: ``lean`` without the rows (one writer
  round trip that writes nothing);
* ``writer``: that empty round trip alone, then the first call's outcome;
* ``cached``: the first call's outcome at once;
* ``base``: ``real`` from another checkout (``--baseline DIR``, with its own ``.venv``): the
  code before a change, interleaved with the code after it in the same run.

Each prints Propose and bare Check throughput at 16 in flight and p50 at 1 in flight, the ratios
the issue sets targets on (>= 0.60 at 16, <= 1.5x at 1), the open loop's p99 and refusals
(target p99 <= 5 ms, none refused) and the sidecar's CPU per call. The ``cached`` row is the
floor a Propose cannot go under while it is served by grpc.aio in Python; ``real`` minus
``lean`` is what the gate's Python costs; ``lean`` against the targets says whether removing it
all would meet them.

    .venv/bin/python bench/bench_floor.py [--seconds 4] [--rounds 1] [--modes real,lean,...]
        [--baseline DIR]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from _harness import ROOT, GoLoad, machine_line, sidecar
from bench_propose import CHECK, PROPOSE, open_session, proposal
from grpc_health.v1 import health_pb2

MODES = ("real", "lean", "rows", "decision", "writer", "cached", "base")


def measure(mode: str, seconds: float, baseline: Path | None = None) -> dict[str, Any]:
    os.environ["CALLGATE_FLOOR"] = mode
    real = mode in ("real", "base")
    runner = ("-m", "callgate") if real else (str(Path(__file__).with_name("_floor_serve.py")),)
    checkout = ROOT
    if mode == "base":
        if baseline is None:
            raise SystemExit("mode base needs --baseline DIR (another checkout with its own .venv)")
        checkout = baseline
    with sidecar(runner=runner, checkout=checkout) as sc:
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-floor-")))
        per = int(3000 * seconds * 1.5)
        reqs = go.requests("propose", [proposal(sid, i) for i in range(per * 3)])
        check = go.requests("check", [health_pb2.HealthCheckRequest()])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=4, offset=per * 3 - 3000)  # warm-up
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
        r = go.run(PROPOSE, reqs, seconds=seconds, rate=1000, offset=per * 2, timeout="5s")
        out["open1000"] = {"p99_ms": r["percentiles_ms"].get("99", 0.0), "refused": r["errors"]}
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES), help="sidecars to measure, comma-separated")
    ap.add_argument("--baseline", type=Path, default=None, help="the checkout mode base runs")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    print(machine_line() + ", client go")
    print()
    print("| sidecar | round | Propose/s @16 | Check/s @16 | **ratio @16** | p50 Propose / Check @1 | "
          "**ratio @1** | open loop 1,000/s p99, refused | CPU per Propose @16 | CPU per Check @16 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in range(1, a.rounds + 1):
        for mode in modes:
            m = measure(mode, a.seconds, a.baseline)
            p16, c16, p1, c1, ol = m["propose16"], m["check16"], m["propose1"], m["check1"], m["open1000"]
            print(f"| {mode} | {k} | {p16['rps']:,.0f} | {c16['rps']:,.0f} | **{p16['rps'] / c16['rps']:.2f}** | "
                  f"{p1['p50_ms']:.3f} / {c1['p50_ms']:.3f} ms | **{p1['p50_ms'] / c1['p50_ms']:.2f}x** | "
                  f"{ol['p99_ms']:.1f} ms, {ol['refused']} | {p16['cpu_us']:,.0f} µs | {c16['cpu_us']:,.0f} µs |",
                  flush=True)  # fmt: skip
    print()
    print(
        "targets (issue 15): ratio @16 >= 0.60, ratio @1 <= 1.5x, open loop 1,000/s p99 <= 5 ms with none refused"
    )


if __name__ == "__main__":
    main()
