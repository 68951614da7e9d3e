"""What the example folder's label costs a ``weather.get`` Propose, before and after the policies'
session reading (issue 30, branch ``labelcost``: callgate/policy/sessionuse.py).

``policies/`` labels ``weather.get@v1``'s results ``untrusted``; only the delete policies read
``context.session``. Before, every Propose of the folder read the session's labels after the
claim and the compiled core no longer decided in one call; after, a tool whose actions' policies
never read the session is decided as before the label existed (its own label still reserved).

Closed loop (``--inflight`` calls) of Propose ``weather.get@v1`` against a real ``callgate
serve`` (SQLite ``synchronous = FULL``, durability ``barrier``), sidecars alternated in rounds
(every configuration once per round, ``--rounds`` rounds): the example folder on the code before
(``--before``: another checkout of callgate, e.g. ``git archive main``, with a ``.venv``) and on
this one, a copy whose only label is on ``calendar.create_event`` (no weather read writes a label:
what reading the labels costs alone) before and after, and a copy of the folder without its meter
and label (this code), each with the compiled
core (``core.engine = "auto"``) and the Python stages (``"python"``). Sidecar CPU per answered call
(the median over rounds), the ratio to the label-free folder of the same core, p50; the load
average is printed beside each figure (the box is shared).

    .venv/bin/python bench/bench_sessionuse.py --before /tmp/main-checkout [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _harness import ROOT, GoLoad, dump, machine_line, report_go, sidecar
from bench_dogwood import PROPOSE, load1, sessions, variant
from bench_propose import proposal as weather


async def one(
    name: str, folder: Path, checkout: Path, core: str, root: Path, args: argparse.Namespace
) -> dict[str, Any]:
    with sidecar(policy_dir=folder, checkout=checkout, extra_toml=f'[core]\nengine = "{core}"\n') as sc:
        go = GoLoad(target=sc.agent, tmp=root)
        (sid,) = await sessions(sc.agent, 1, "alice")
        reqs = go.requests(
            name.replace(" ", "_"), [weather(sid, i) for i in range(int(3000 * args.seconds) + 2000)]
        )
        go.run(PROPOSE, reqs, seconds=1.0, inflight=args.inflight, offset=int(3000 * args.seconds))
        cpu0, la = sc.cpu_seconds(), load1()
        r = go.run(PROPOSE, reqs, seconds=args.seconds, inflight=args.inflight)
        cpu = (sc.cpu_seconds() - cpu0) / max(1, r["n"])
        got = report_go(name, r, f"  CPU/call={cpu * 1e6:.0f} us  load1={la:.2f}")
        got.update(cpu_us_per_call=cpu * 1e6, load1=la)
        return got


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the code before, with .venv")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    print(machine_line(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="cg-sessionuse-"))
    plain = variant(root, "plain", {})
    calendar = variant(root, "calendar", {"calendar.create_event@v1.json": ["untrusted"]})
    configs = [
        (f"{core} {label}", folder, checkout, core)
        for core in ("auto", "python")
        for label, folder, checkout in (
            ("label-free folder", plain, ROOT),
            ("example folder, before", ROOT / "policies", args.before.resolve()),
            ("example folder, after", ROOT / "policies", ROOT),
            ("label on calendar only, before", calendar, args.before.resolve()),
            ("label on calendar only, after", calendar, ROOT),
        )
    ]
    out: dict[str, Any] = {}
    for rnd in range(args.rounds):
        for name, folder, checkout, core in configs:
            out.setdefault(name, []).append(
                await one(f"{name} ({rnd + 1})", folder, checkout, core, root, args)
            )
    for core in ("auto", "python"):
        base = statistics.median(x["cpu_us_per_call"] for x in out[f"{core} label-free folder"])
        for name, *_ in configs:
            if name.startswith(core + " "):
                cpu = statistics.median(x["cpu_us_per_call"] for x in out[name])
                rps = statistics.median(x["throughput_rps"] for x in out[name])
                print(f"{name}: CPU per Propose {cpu:.0f} us = {cpu / base:.2f}x label-free; {rps:.0f}/s")
                out[f"cpu_ratio {name}"] = cpu / base
    dump(args.json, out)


if __name__ == "__main__":
    asyncio.run(main())
