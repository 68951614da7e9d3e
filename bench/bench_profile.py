"""Where a Propose's CPU goes on the event loop: ``real`` against the ``lean`` floor sidecar
(bench/_floor_serve.py), each under cProfile (bench/_profile_serve.py), driven by the Go load
generator at 16 in flight; prints the functions whose cumulative time per Propose differs most.
Profiling slows both sides: compare the two, not the absolute figures.

    .venv/bin/python bench/bench_profile.py [--seconds 8] [--top 40] [--keep DIR]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import tempfile
from pathlib import Path
from typing import Any

from _harness import GoLoad, machine_line, sidecar
from bench_propose import PROPOSE, open_session, proposal

RUNNER = (str(Path(__file__).with_name("_profile_serve.py")),)


def profile(mode: str, seconds: float, out: Path) -> int:
    os.environ["CALLGATE_FLOOR"] = mode
    os.environ["CALLGATE_PROFILE_OUT"] = str(out)
    with sidecar(runner=RUNNER) as sc:
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-prof-")))
        reqs = go.requests("propose", [proposal(sid, i) for i in range(30000)])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=4, offset=27000)
        r = go.run(PROPOSE, reqs, seconds=seconds, inflight=16)
        if r["errors"]:
            raise RuntimeError(f"{mode}: {r['error_codes']}")
        return int(r["n"]) + 1


def per_call(path: Path, n: int) -> dict[str, tuple[float, float]]:
    st: Any = pstats.Stats(str(path))
    out: dict[str, tuple[float, float]] = {}
    for (file, line, fn), (_, _, tt, ct, _) in st.stats.items():
        key = f"{Path(file).name}:{line}:{fn}"
        out[key] = (tt * 1e6 / n, ct * 1e6 / n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--keep", type=Path, default=None, help="keep the .prof files here")
    a = ap.parse_args()
    tmp = a.keep or Path(tempfile.mkdtemp(prefix="cg-prof-"))
    tmp.mkdir(parents=True, exist_ok=True)
    print(machine_line() + ", client go, 16 in flight, cProfile of the event loop's thread")
    res = {m: per_call(tmp / f"{m}.prof", profile(m, a.seconds, tmp / f"{m}.prof")) for m in ("real", "lean")}
    real, lean = res["real"], res["lean"]
    print()
    print("| function | real: own µs / Propose | real: cumulative | lean: cumulative |")
    print("|---|---|---|---|")
    rows = sorted(real.items(), key=lambda kv: -(kv[1][1] - lean.get(kv[0], (0.0, 0.0))[1]))
    for key, (tt, ct) in rows[: a.top]:
        print(f"| `{key}` | {tt:.1f} | {ct:.1f} | {lean.get(key, (0.0, 0.0))[1]:.1f} |")
    print()
    print(f"profiles in {tmp}")


if __name__ == "__main__":
    main()
