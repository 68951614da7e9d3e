"""``callgate policy prove``: seconds to decide the example properties (policies/properties.toml)
on the example policies and on 1,000 generated policies (bench_scale.py's generator: 100 more
actions, ten permits each), docs/PROVE.md.

The prover binary and the solver come from scripts/prove and scripts/solver (built or installed
on first use). Each case runs ``--rounds`` times in one process; prints the median and the range,
and the per-request-environment cost (one symbolic compilation and one solver query per property,
action). A benchmark prints, it is not a timed test.

    .venv/bin/python bench/bench_prove.py [--rounds 3] [--policies 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import policy_dir  # noqa: E402

from callgate.policy.prove.properties import load_properties  # noqa: E402
from callgate.policy.prove.runner import BIN_ENV, CedarSource, Status, run_checks  # noqa: E402


def tool(name: str) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / name), "path"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def case(name: str, pdir: Path, rounds: int) -> None:
    props = load_properties(ROOT / "policies" / "properties.toml")
    source = CedarSource.load(pdir / "cedar")
    actions = source.schema.count("appliesTo")
    took: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        results = run_checks(props, source, wall_seconds=3600)
        took.append(time.perf_counter() - start)
        bad = [r.prop.name for r in results if r.status is not Status.PROVED]
        if bad:
            print(f"  {name}: not proved: {bad}")
    med = statistics.median(took)
    envs = actions * len(props)
    print(
        f"{name:<34} {len(props)} properties, {actions:>4} actions: median {med:6.2f} s "
        f"(min {min(took):.2f}, max {max(took):.2f}); {1000 * med / envs:.1f} ms per property x action"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policies", type=int, default=1000)
    args = ap.parse_args()
    os.environ[BIN_ENV], os.environ["CVC5"] = tool("prove"), tool("solver")
    print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    case("example policies", ROOT / "policies", args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        case(
            f"{args.policies} generated policies", policy_dir(Path(tmp), policies=args.policies), args.rounds
        )


if __name__ == "__main__":
    main()
