"""Issue 31 item 4: ListTools by policy vs today's ListTools, 1,000 tools x 1,000 principals.

One generated policy directory: the example policies plus 100 actions, 1,000 tools (tool ``i``
requires ``bench.a{i % 100}``), 100 roles (role ``j`` may use action ``j``, a conditional permit)
and 1,000 users (user ``k`` in role ``k % 100``): each user could use 10 of the 1,000 tools plus
the weather tool, except the users of every 10th role, whose permit a forbid on the same condition
always cancels (only the solver pass sees that: their 10 tools are hidden with it, shown without).

Snapshot load: the Cedar set loaded with the solver pass (``policy.list_by_policy_solver_ms``) and
without, alternating, the pass's counts and its time. Then three real sidecars (in this process,
the test harness's) serve it at once: ``off`` (today's ListTools), ``reading`` (by policy, no
solver pass) and ``solver`` (by policy with the pass, the default); each opens 1,000 sessions (one
per user) and lists the tools of each twice, the three interleaved call by call: the first pass
computes each principal's answer, the second reads the cache. Printed per pass: p50 / p99 wall
time and the process CPU per ListTools (client and sidecar share this process), throughput, and
the ratio to ``off`` in the same run.

    .venv/bin/python bench/bench_list_by_policy.py [--users 1000] [--tools 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _harness import ROOT, machine_line, pct

sys.path.insert(0, str(ROOT))

from callgate.config import PolicyConfig
from callgate.policy import reach_solve
from callgate.policy.engines.cedar import load_cedar_dir
from tests.conftest import start_sidecar, stop_sidecar

ACTIONS = 100


def policy_dir(tmp: Path, tools: int, users: int) -> Path:
    d = tmp / "policies"
    shutil.copytree(ROOT / "policies", d, ignore=shutil.ignore_patterns("tests", "rego", "properties.toml"))
    cedar = d / "cedar"
    with open(cedar / "schema.cedarschema", "a") as fh:
        for a in range(ACTIONS):
            fh.write(
                f'\naction "bench.a{a}" in [read] appliesTo {{ principal: User, resource: Resource, '
                "context: { tenant: String, tool: String, args: { city: String, date: String } } };"
            )
    with open(cedar / "policies.cedar", "a") as fh:
        for a in range(ACTIONS):
            fh.write(
                f'\n@id("bench-{a}")\npermit (principal in Role::"r{a}", action == Action::"bench.a{a}", resource)\n'
                "when { principal.tenant == context.tenant };\n"
            )
            if a % 10 == 0:  # cancelled whenever the permit applies: never allowed
                fh.write(
                    f'\n@id("bench-{a}-off")\nforbid (principal, action == Action::"bench.a{a}", resource)\n'
                    "when { principal.tenant == context.tenant };\n"
                )
    ents = json.loads((cedar / "entities.json").read_text())
    ents += [{"uid": {"type": "Role", "id": f"r{a}"}, "attrs": {}, "parents": []} for a in range(ACTIONS)]
    ents += [
        {
            "uid": {"type": "User", "id": f"u{k}"},
            "attrs": {"tenant": "acme"},
            "parents": [{"type": "Role", "id": f"r{k % ACTIONS}"}],
        }
        for k in range(users)
    ]
    (cedar / "entities.json").write_text(json.dumps(ents))
    base = json.loads((d / "tools" / "weather.get@v1.json").read_text())
    for i in range(tools - 3):
        (d / "tools" / f"bench.t{i:04d}@v1.json").write_text(
            json.dumps(
                {**base, "name": f"bench.t{i:04d}", "required_capabilities": [f"bench.a{i % ACTIONS}"]}
            )
        )
    return d


CONFIGS = {
    "off": replace(PolicyConfig(), list_by_policy=False),
    "reading": replace(PolicyConfig(), list_by_policy=True, list_by_policy_solver_ms=0),
    "solver": replace(PolicyConfig(), list_by_policy=True),
}


def load_times(pdir: Path, rounds: int) -> None:
    """The Cedar set's load with and without the solver pass, alternating (the pass's memo cleared):
    wall time and CPU time (this process and its children: the prover and the solver)."""
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    last = None
    for _ in range(rounds):
        for solver in (False, True):
            reach_solve._memo.clear()
            c0 = _cpu()
            w0 = time.perf_counter()
            c = load_cedar_dir(pdir / "cedar", reach_solver_ms=600_000 if solver else 0)
            wall[solver].append(time.perf_counter() - w0)
            cpu[solver].append(_cpu() - c0)
            if solver:
                last = c.reach.solver if c.reach is not None else None
    wo, wi = statistics.median(wall[False]), statistics.median(wall[True])
    co, ci = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(
        f"snapshot load (median of {rounds}): without the solver pass {wo:.2f} s wall / {co:.2f} s CPU,"
        f" with it {wi:.2f} s / {ci:.2f} s (+{wi - wo:.2f} s wall, +{ci - co:.2f} s CPU); pass: {last}",
        flush=True,
    )


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--tools", type=int, default=1000)
    ap.add_argument("--load-rounds", type=int, default=3)
    ap.add_argument("--load-only", action="store_true", help="only the snapshot load times")
    a = ap.parse_args()
    print(machine_line(), "| load", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="cg-lbp-"))
    sidecars = {}
    try:
        pdir = policy_dir(tmp, a.tools, a.users)
        load_times(pdir, a.load_rounds)
        if a.load_only:
            return
        for name, cfg in CONFIGS.items():
            sidecars[name] = start_sidecar(pdir, policy=cfg)
        sids = {
            name: [r.open_session(subject=f"u{k}") for k in range(a.users)]
            for name, (r, _) in sidecars.items()
        }
        for p, label in enumerate(("first pass (computes)", "second pass (cached)")):
            wall: dict[str, list[float]] = {n: [] for n in CONFIGS}
            cpu: dict[str, list[float]] = {n: [] for n in CONFIGS}
            shown: dict[str, int] = {}
            for k in range(a.users):
                for name, (running, _) in sidecars.items():
                    c0, w0 = time.process_time(), time.perf_counter()
                    r = running.list_tools(sids[name][k], model_call_id=f"mc{p}")
                    wall[name].append(time.perf_counter() - w0)
                    cpu[name].append(time.process_time() - c0)
                    if k == 0:
                        shown[name] = len(r.tools)
            base_w, base_c = pct(wall["off"], 50), statistics.fmean(cpu["off"])
            for name in CONFIGS:
                w, c = wall[name], cpu[name]
                print(
                    f"ListTools {label:<22} {name:<8} p50={pct(w, 50) * 1e3:.2f} ms p99={pct(w, 99) * 1e3:.2f} ms"
                    f" cpu/call={statistics.fmean(c) * 1e3:.2f} ms {len(w) / sum(w):.0f}/s"
                    f" | /off: p50 {pct(w, 50) / base_w:.2f} cpu {statistics.fmean(c) / base_c:.2f}",
                    flush=True,
                )
        # user u0 is in role r0, whose permit the forbid cancels; u1's role r1 has none
        for k in (0, 1):
            counts = {
                n: len(r.list_tools(sids[n][k], model_call_id="mc-x").tools) for n, (r, _) in sidecars.items()
            }
            print(f"tools shown to u{k}: {counts}", flush=True)
        print("load", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    finally:
        for running, stmp in sidecars.values():
            stop_sidecar(running, stmp)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
