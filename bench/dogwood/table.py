"""Side-by-side table of Dogwood's ``load`` output and bench_dogwood.py's JSON (bench/dogwood/run).

.venv/bin/python bench/dogwood/table.py DIR   # DIR: dogwood-<round>.txt, callgate-<d>-<round>.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

FLOOR = re.compile(r"durability floor \(one fsync'd append\): ([0-9.]+) ms")


def dogwood_rows(text: str) -> tuple[float | None, dict[tuple[str, int, int], dict[str, str]]]:
    """The fsync floor and the rows of one ``load`` run, keyed by (pinning, policies, offered)."""
    m = FLOOR.search(text)
    rows: dict[tuple[str, int, int], dict[str, str]] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] in ("unpinned", "pinned") and f[1].isdigit():
            rows[(f[0], int(f[1]), int(f[2]))] = {"achieved": f[3], "p50": f[4], "p99": f[6]}
    return (float(m.group(1)) if m else None), rows


def cell(p50: Any, p99: Any, achieved: Any) -> str:
    return f"{p50} / {p99} ms, {achieved}/s"


def main(where: Path) -> None:
    for run in sorted(where.glob("dogwood-*.txt")):
        rnd = run.stem.split("-")[-1]
        floor, rows = dogwood_rows(run.read_text())
        ours = {
            p.stem.split("-")[1]: json.loads(p.read_text())
            for p in sorted(where.glob(f"callgate-*-{rnd}.json"))
        }
        print(f"\nround {rnd}")
        names = ["Dogwood unpinned", "Dogwood pinned", *(f"callgate {d}" for d in ours)]
        print("| policies, offered/s | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        floors = [f"{floor} ms" if floor is not None else "?", "(same)"]
        floors += [f"{r.get('fsync_floor_ms', 0):.3f} ms" for r in ours.values()]
        print("| fsync floor | " + " | ".join(floors) + " |")
        keys = sorted({(n, rate) for (_, n, rate) in rows})
        for n, rate in keys:
            cells = []
            for pin in ("unpinned", "pinned"):
                d = rows.get((pin, n, rate))
                cells.append(cell(d["p50"], d["p99"], d["achieved"]) if d else "-")
            for r in ours.values():
                c = r.get(f"{n} policies @ {rate:g}/s")
                cells.append(
                    cell(f"{c['p50_ms']:.2f}", f"{c['p99_ms']:.2f}", f"{c['throughput_rps']:.0f}")
                    + f" (load {c['load1']:.1f})"
                    if c
                    else "-"
                )
            print(f"| {n}, {rate} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
