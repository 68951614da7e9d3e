"""One Cedar decision: the Python engine (cedarpy over its action slice) vs the compiled core's
``CedarSnapshot`` (the ``cedar-policy`` crate, the same slices and entity index), docs/NATIVE.md.

In process, no server: ``CedarEngine.authorize_batch_sync`` of one request, cached entity slice
(the steady state), per case and per engine, in alternating rounds (the box is shared: the two
sides see the same load). Prints p50 / p99 µs and the ratio; a benchmark prints, it is not a
timed test. Cases: the example policies (allow, confirm, forbid), 10 and 10,000 policies about
other actions (bench_scale.py's generator), 100,000 entities, and the 60 KB records context.

    .venv/bin/python bench/bench_cedar.py [--seconds 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import policy_dir  # noqa: E402

from callgate.base.model import AuthzRequest, Subject  # noqa: E402
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir  # noqa: E402

WEATHER = {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}}


def sample(engine: CedarEngine, req: AuthzRequest, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = time.perf_counter()
        engine.authorize_batch_sync([req])
        out.append(time.perf_counter() - a)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0, help="per case, engine and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    records = [{"id": i, "name": f"record-{i:05d}", "ok": i % 2 == 0} for i in range(1000)]
    dirs = {
        "examples": policy_dir(tmp / "ex"),
        "10 policies (other actions)": policy_dir(tmp / "p10", policies=10),
        "10,000 policies (other actions)": policy_dir(tmp / "p10k", policies=10000),
        "100,000 entities": policy_dir(tmp / "e100k", entities=100000),
        "records (60 KB context)": policy_dir(tmp / "rec", records=True),
    }
    cases: list[tuple[str, str, AuthzRequest]] = [
        ("examples", "allow weather.read", AuthzRequest(Subject("acme", "bob"), "weather.read", "weather:Paris", WEATHER)),
        ("examples", "confirm calendar.create", AuthzRequest(Subject("acme", "alice"), "calendar.create", "calendar:primary",
         {"tool": "calendar.create_event@v1", "args": {"calendar_id": "primary", "title": "x", "start": "s", "duration_minutes": 30}})),
        ("examples", "forbid files.delete", AuthzRequest(Subject("acme", "alice"), "files.delete", "file:/etc/passwd",
         {"tool": "files.delete@v1", "args": {"path": "/etc/passwd"}})),
        ("10 policies (other actions)", "allow weather.read", AuthzRequest(Subject("acme", "bob"), "weather.read", "weather:Paris", WEATHER)),
        ("10,000 policies (other actions)", "allow weather.read", AuthzRequest(Subject("acme", "bob"), "weather.read", "weather:Paris", WEATHER)),
        ("100,000 entities", "allow weather.read", AuthzRequest(Subject("t7", "user7"), "weather.read", "weather:Paris", WEATHER)),
        ("records (60 KB context)", "allow records.put", AuthzRequest(Subject("acme", "bob"), "records.put", "records:t",
         {"tool": "records.put@v1", "args": {"table": "t", "records": records}})),
    ]  # fmt: skip
    engines: dict[str, tuple[CedarEngine, CedarEngine]] = {}
    loads: dict[str, float] = {}
    for name, d in dirs.items():
        t0 = time.perf_counter()
        p = load_cedar_dir(d / "cedar")
        loads[name] = time.perf_counter() - t0
        if p.native is None:
            raise SystemExit("callgate._native with CedarSnapshot is not built (scripts/native build)")
        nat = CedarEngine(p)
        nat.use_native(True)
        engines[name] = (CedarEngine(p), nat)
    samples: dict[tuple[str, str, str], list[float]] = {}
    for dname, label, req in cases:
        py, nat = engines[dname]
        (dp,), (dn,) = py.authorize_batch_sync([req]), nat.authorize_batch_sync([req])
        assert dp == dn, (label, dp, dn)
    for _ in range(a.rounds):
        for dname, label, req in cases:
            py, nat = engines[dname]
            for side, engine in (("python", py), ("native", nat)):
                samples.setdefault((dname, label, side), []).extend(sample(engine, req, a.seconds))
    rows: list[dict[str, Any]] = []
    print(
        "| policies / entities | request | Python (cedarpy, sliced) p50 / p99 µs | native p50 / p99 µs | ratio (p50) |"
    )
    print("|---|---|---|---|---|")
    for dname, label, _ in cases:
        figs: dict[str, tuple[float, float]] = {}
        for side in ("python", "native"):
            s = sorted(samples[(dname, label, side)])
            figs[side] = (statistics.median(s) * 1e6, s[int(len(s) * 0.99)] * 1e6)
        (pp50, pp99), (np50, np99) = figs["python"], figs["native"]
        rows.append({"set": dname, "request": label, "python_p50_us": round(pp50, 1), "python_p99_us": round(pp99, 1),
                     "native_p50_us": round(np50, 1), "native_p99_us": round(np99, 1)})  # fmt: skip
        print(
            f"| {dname} | {label} | {pp50:,.1f} / {pp99:,.1f} | {np50:,.1f} / {np99:,.1f} | {pp50 / np50:.1f}× |"
        )
    print("load (Python + native snapshot) s: " + ", ".join(f"{k} {v:.2f}" for k, v in loads.items()))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "load_s": loads}, indent=2))


if __name__ == "__main__":
    main()
