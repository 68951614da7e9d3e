"""Issue 31 item 4: ListTools by policy vs today's ListTools, 1,000 tools x 1,000 principals.

One generated policy directory: the example policies plus 100 actions, 1,000 tools (tool ``i``
requires ``bench.a{i % 100}``), 100 roles (role ``j`` may use action ``j``, a conditional permit)
and 1,000 users (user ``k`` in role ``k % 100``): each user could use 10 of the 1,000 tools plus
the weather tool. A real sidecar (in this process, the test harness's) serves it twice, with
``policy.list_by_policy`` off (today) and on; each run opens 1,000 sessions (one per user) and
lists the tools of each twice: the first pass computes each principal's answer, the second reads
the cache. Printed: p50 / p99 per ListTools and the ratio on/off of each pass, in the same run.

    .venv/bin/python bench/bench_list_by_policy.py [--users 1000] [--tools 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _harness import ROOT, machine_line, pct

sys.path.insert(0, str(ROOT))

from callgate.config import PolicyConfig
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


def run(pdir: Path, users: int, on: bool) -> tuple[list[float], list[float], int]:
    running, tmp = start_sidecar(pdir, policy=replace(PolicyConfig(), list_by_policy=on))
    try:
        sids = [running.open_session(subject=f"u{k}") for k in range(users)]
        passes: list[list[float]] = []
        shown = 0
        for p in range(2):
            lat = []
            for sid in sids:
                t0 = time.perf_counter()
                r = running.list_tools(sid, model_call_id=f"mc{p}")
                lat.append(time.perf_counter() - t0)
                shown = len(r.tools)
            passes.append(lat)
        return passes[0], passes[1], shown
    finally:
        stop_sidecar(running, tmp)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--tools", type=int, default=1000)
    a = ap.parse_args()
    print(machine_line(), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="cg-lbp-"))
    try:
        pdir = policy_dir(tmp, a.tools, a.users)
        got = {on: run(pdir, a.users, on) for on in (False, True)}
        for i, name in enumerate(("first pass (computes)", "second pass (cached)")):
            off_l, on_l = got[False][i], got[True][i]
            p50_off, p50_on = pct(off_l, 50) * 1e3, pct(on_l, 50) * 1e3
            print(
                f"ListTools {name:<22} off p50={p50_off:.2f} ms p99={pct(off_l, 99) * 1e3:.2f} ms"
                f" | on p50={p50_on:.2f} ms p99={pct(on_l, 99) * 1e3:.2f} ms"
                f" | ratio on/off p50={p50_on / p50_off:.2f}",
                flush=True,
            )
        print(f"tools shown per user: off={got[False][2]} on={got[True][2]}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
