"""Issue 34 item 2: where a real Propose's time goes, stage by stage, in CPU microseconds.

A real ``callgate serve`` whose trail clock (``callgate/store/trail.py``: each stage event's
``duration_us`` is the time since the stage before) reads the thread's CPU time instead of the
wall clock, driven at 1 in flight by the Go load generator with allowed ``weather.get``
Proposes. At 1 in flight the event loop runs one call at a time, so each stage's
``duration_us`` is the CPU the gate's Python spent in that stage. Printed per stage: the median
and mean over the stored trails; beside them the sidecar process's whole CPU per Propose
(``/proc/PID/stat`` over the load): what the stages do not cover is gRPC, the interceptors, the
Propose service, the store's write (rows, commit) and asyncio.

    .venv/bin/python bench/bench_stage_cpu.py [--seconds 10]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from _harness import GoLoad, machine_line, sidecar
from bench_propose import PROPOSE, open_session, proposal
from bench_rows import SLOW_SWEEP

from callgate.store.sqlite import read_events

_CPU_CLOCK = (
    "import time, types, sys\n"
    "import callgate.store.trail as trail\n"
    "trail.time = types.SimpleNamespace(perf_counter=time.thread_time)\n"
    "from callgate.cli.main import main\n"
    "sys.argv[0] = 'callgate'\n"
    "raise SystemExit(main())\n"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    with sidecar(extra_toml=SLOW_SWEEP, runner=("-c", _CPU_CLOCK)) as sc:
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-stages-")))
        reqs = go.requests("propose", [proposal(sid, i) for i in range(20000)])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=1)  # warm-up
        db = sqlite3.connect(f"file:{sc.tmp}/callgate.db?mode=ro", uri=True)
        (before,) = db.execute("SELECT count(*) FROM invocations").fetchone()
        cpu0 = sc.cpu_seconds()
        r = go.run(PROPOSE, reqs, seconds=a.seconds, inflight=1, offset=5000)
        cpu1 = sc.cpu_seconds()
        ids = [i for (i,) in db.execute("SELECT invocation_id FROM invocations ORDER BY rowid")][before:]
        per: dict[str, list[int]] = defaultdict(list)
        for inv in ids:
            for e in read_events(db, inv):
                per[e.kind].append(int(e.data.get("duration_us", 0)))
        db.close()
    n = len(ids)
    print(machine_line() + ", client go, 1 in flight, allowed weather.get")
    print()
    print(f"{n:,} Proposes, p50 {r['percentiles_ms']['50']:.3f} ms; sidecar CPU per Propose "
          f"{(cpu1 - cpu0) / n * 1e6:,.0f} us")  # fmt: skip
    print()
    print("| stage | CPU us, median | mean |")
    print("|---|---|---|")
    total = 0.0
    for kind, xs in per.items():
        total += statistics.mean(xs)
        print(f"| {kind} | {statistics.median(xs):,.0f} | {statistics.mean(xs):,.0f} |")
    print(f"| **stages together** | | **{total:,.0f}** |")
    print(f"| the rest (gRPC, service, store write, asyncio) | | {(cpu1 - cpu0) / n * 1e6 - total:,.0f} |")


if __name__ == "__main__":
    main()
