"""Issue 28 lookups for a process resuming a run elsewhere, against a ``callgate serve`` process:
``FindInvocation`` (by tool and idempotency key) and ``ListParked`` (a session's parked calls,
read from its tenant's pending list) next to ``GetInvocation`` (by id) as the baseline, one call
in flight, with ``--parked`` calls of other sessions of the same tenant waiting.

    .venv/bin/python bench/bench_find.py [--seconds 5] [--parked 0,1000]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable

from _harness import dump, machine_line, report, sidecar

from callgate.client import Client, NeedsConfirmation, ToolCall, TransportError

EVENT = {"title": "x", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}


def timed(fn: Callable[[], object], seconds: float) -> tuple[list[float], float]:
    lat: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return lat, time.perf_counter() - start


def park(cg: Client, session_id: str, n: int) -> NeedsConfirmation:
    s = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id=session_id)
    s.tools("mc-1")
    out = None
    for i in range(n):
        out = s.propose(ToolCall(f"c{i}", "calendar__create_event", json.dumps({**EVENT, "title": f"t{i}"})))
    assert isinstance(out, NeedsConfirmation)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--parked", default="0,1000")
    ap.add_argument("--json")
    args = ap.parse_args()
    print(machine_line())
    results: dict[str, object] = {}
    for others in (int(x) for x in args.parked.split(",")):
        with sidecar() as sc, Client(f"unix:{sc.tmp}/agent.sock") as cg:
            up_by = time.monotonic() + 60
            while True:  # serving once a session opens
                try:
                    cg.session("acme", "alice", session_id="bench-up")
                    break
                except TransportError:
                    if time.monotonic() > up_by:
                        raise
                    time.sleep(0.2)
            if others:
                park(cg, "bench-others", others)
            mine = park(cg, "bench-mine", 1)
            s = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id="bench-mine")
            s.tools("mc-1")
            calls: tuple[tuple[str, Callable[[], object]], ...] = (
                ("GetInvocation (baseline)", functools.partial(s.invocation, mine.invocation_id)),
                ("FindInvocation", functools.partial(s.find, "c0", "calendar__create_event")),
                ("ListParked", s.list_parked),
            )
            for name, fn in calls:
                fn()  # warm
                lat, elapsed = timed(fn, args.seconds)
                results[f"{name} / {others} others parked"] = report(
                    f"{name}, {others} others parked", lat, elapsed
                )
    dump(args.json, results)


if __name__ == "__main__":
    main()
