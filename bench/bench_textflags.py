"""What ``context.text`` (issue 33, callgate/policy/textflags.py) costs a Propose.

The compiled core's one-call decision is kept unless the proposal's canonical arguments hold a
string that hides something (:func:`callgate.propose.steps._hides_text`); that check runs on
every one-call decision of a tool whose actions declare ``context.text``. Measured here on
three canonical argument texts of the example calendar tool (plain ASCII, single-script text
outside ASCII, a title with a zero-width space), against the core's one call on the same
proposal in the same run (the baseline), and the whole Python-stage front plus
``policy_context`` that a flagged proposal falls back to. Prints p50 / p99 per call and the
ratio to the baseline; a benchmark prints, it is not a timed test.

    .venv/bin/python bench/bench_textflags.py [--seconds 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callgate.arguments.normalize import normalize  # noqa: E402
from callgate.arguments.parse import ParseLimits, parse_arguments  # noqa: E402
from callgate.base.model import NormalizationContext  # noqa: E402
from callgate.policy.snapshot import load_snapshot  # noqa: E402
from callgate.propose.authorize import policy_context  # noqa: E402
from callgate.propose.core import Core  # noqa: E402
from callgate.propose.steps import _hides_text  # noqa: E402

CLOCK = "2026-07-19T14:00:00+08:00"
BASE = {"calendar_id": "primary", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 30}
TITLES = {
    "ASCII": "Team sync with the platform group",
    "outside ASCII": "Équipe Müller: réunion à Zürich",
    "zero-width space": "Team\u200bsync with the platform group",
}


def timed(fn: Callable[[], object], seconds: float) -> tuple[float, float, float]:
    """p50 and p99 in µs per call (batches of 100), and calls per second."""
    per: list[float] = []
    end = time.perf_counter() + seconds
    calls = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter_ns()
        for _ in range(100):
            fn()
        per.append((time.perf_counter_ns() - t0) / 100 / 1000)
        calls += 100
    per.sort()
    return statistics.median(per), per[int(len(per) * 0.99)], calls / seconds


def row(snap: Any, core: Core, title: str, seconds: float) -> tuple[tuple[float, ...], ...]:
    """(one call, textflags check, Python front + context) timings for one title."""
    tool = snap.tools.get("calendar.create_event", "v1")
    limits = ParseLimits()
    raw = json.dumps({**BASE, "title": title}, ensure_ascii=False).encode()

    def one_call() -> object:
        return core.front(snap, tool, raw, "acme", "en", CLOCK, limits, "alice", "Asia/Shanghai")

    def python_front() -> tuple[Any, Any]:
        ctx = NormalizationContext(CLOCK, "Asia/Shanghai", "en")
        norm = normalize(tool.schema.validate(parse_arguments(raw, limits)), tool.normalizers, ctx,
                         tenant="acme", tool_name=tool.spec.name, tool_version=tool.spec.version)  # fmt: skip
        return norm, policy_context(tool, norm)

    canonical = python_front()[0].canonical
    check = timed(lambda: _hides_text(canonical), seconds)
    answer = one_call()
    assert answer is not None
    # a character outside the core's table: it defers, and the Python stages answer anyway
    one = timed(one_call, seconds) if getattr(answer, "code", "") is None else (float("nan"),) * 3
    return one, check, timed(python_front, seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    snap = load_snapshot(ROOT / "policies")
    core = Core("native")
    core.prepare(snap, eager=True)
    print(
        "| arguments | core one call p50 / p99 | textflags check p50 / p99 | ratio | Python front + context p50 |"
    )
    print("|---|---|---|---|---|")
    for name, title in TITLES.items():
        one, check, py = row(snap, core, title, args.seconds)
        print(
            f"| {name} | {one[0]:.1f} / {one[1]:.1f} µs | {check[0]:.2f} / {check[1]:.2f} µs | "
            f"{check[0] / one[0]:.3f} | {py[0]:.1f} µs |"
        )


if __name__ == "__main__":
    main()
