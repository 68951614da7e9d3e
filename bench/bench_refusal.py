"""Issue 34 item 7: what one ``overloaded`` refusal costs the sidecar, before and after, in one run.

Each side is a real ``callgate serve`` (``--baseline``: another checkout with its own ``.venv``,
e.g. main; then this checkout; alternating for ``--rounds``) whose agent listener admits one call
(``max_concurrent_rpcs = admission_min_in_flight = 1``). One Propose is held in flight by
holding SQLite's write lock from outside (4 s, under the writer's 5 s busy timeout), and the Go
load generator sends Proposes at 16 in flight meanwhile: every one of them is refused
``overloaded``. Prints, per side, refusals per second, the sidecar's CPU per refusal (all its
threads), a bare ``health.Check`` at 16 in flight on the same sidecar for scale, and the ratio
new / baseline.

    .venv/bin/python bench/bench_refusal.py --baseline /work/main [--seconds 3] [--rounds 2]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from _harness import ROOT, GoLoad, machine_line, sidecar
from bench_propose import CHECK, PROPOSE, open_session, proposal
from grpc_health.v1 import health_pb2

from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

ONE_SLOT = "max_concurrent_rpcs = 1\nadmission_min_in_flight = 1\n"
HOLD_S = 4.0


def measure(checkout: Path, seconds: float) -> dict[str, Any]:
    with sidecar(server_toml=ONE_SLOT, checkout=checkout) as sc:
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-refusal-")))
        reqs = go.requests("propose", [proposal(sid, i) for i in range(2000)])
        check = go.requests("check", [health_pb2.HealthCheckRequest()])
        go.run(PROPOSE, reqs, seconds=0.5, inflight=1)  # warm-up: the Propose path and its wrapper
        cpu0 = sc.cpu_seconds()
        c = go.run(CHECK, check, seconds=seconds, inflight=16)
        check_cpu = (sc.cpu_seconds() - cpu0) / max(1, c["n"])
        lock = sqlite3.connect(sc.tmp / "callgate.db", isolation_level=None, timeout=5)
        lock.execute("BEGIN EXCLUSIVE")
        held = threading.Event()

        def hold() -> None:  # the one admitted call, waiting for the lock
            with grpc.insecure_channel(sc.agent) as ch:
                fut = pb_grpc.GateStub(ch).Propose.future(proposal(sid, 99999), timeout=30)
                held.set()
                fut.exception()

        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        time.sleep(0.3)
        try:
            cpu0 = sc.cpu_seconds()
            r = go.run(PROPOSE, reqs, seconds=seconds, inflight=16, offset=100)
            cpu = sc.cpu_seconds() - cpu0
        finally:
            lock.execute("ROLLBACK")
            lock.close()
            t.join()
        refused = r["errors"]
        if r["n"] or set(r["error_codes"]) != {"ResourceExhausted"}:
            raise RuntimeError(f"expected only overloaded refusals, got {r['n']} answers, {r['error_codes']}")
        return {
            "rps": refused / seconds, "cpu_us": cpu * 1e6 / max(1, refused), "check_rps": c["throughput_rps"],
            "check_cpu_us": check_cpu * 1e6,
        }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout (with .venv) to compare")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.seconds + 0.5 >= HOLD_S + 1:
        raise SystemExit("--seconds must stay under the writer's busy timeout (5 s) with the warm-up")
    print(machine_line() + ", client go, 16 in flight, every call refused overloaded")
    print()
    print(
        "| side | round | refusals/s | CPU per refusal | Check/s @16 | CPU per Check | refusal / Check CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    for k in range(1, a.rounds + 1):
        pair = []
        for label, checkout in (("baseline", a.baseline.resolve()), ("new", ROOT)):
            m = measure(checkout, a.seconds)
            pair.append(m)
            print(f"| {label} | {k} | {m['rps']:,.0f} | {m['cpu_us']:,.0f} µs | {m['check_rps']:,.0f} | "
                  f"{m['check_cpu_us']:,.0f} µs | {m['cpu_us'] / m['check_cpu_us']:.2f} |", flush=True)  # fmt: skip
        b, n = pair
        print(f"| **new / baseline** | {k} | {n['rps'] / b['rps']:.2f} | **{n['cpu_us'] / b['cpu_us']:.2f}** | | | |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
