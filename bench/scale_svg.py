"""Draw the issue 15 A scale curves (before/after) as an SVG from bench_scale.py's JSON results.

    python bench/scale_svg.py before.json after.json docs/scale-issue15.svg
    python bench/scale_svg.py --sessions run.json [more.json ...] docs/scale-sessions.svg

(``--sessions``: the sidecar's RSS growth against open sessions, from the ``sessions N`` result's
``curve_rss_growth_mib``, one line per JSON file.) ``bench/svg_png.py`` renders either to PNG.

No plotting library (none in the venv): four small line charts, written by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PANELS = [
    ("Cedar decision (µs) vs policies about other actions", "decision_us",
     [("10", "policies     10 (other actions)"), ("1,000", "policies   1000 (other actions)"),
      ("10,000", "policies  10000 (other actions)")]),
    ("Propose p50 (ms) vs entities", "propose_p50_ms", None),
    ("ListTools p50 (ms) vs tools", "p50_ms", [("10", "ListTools    10 tools"), ("1,000", "ListTools  1000 tools")]),
    ("Load time (s) vs policies", "load_s",
     [("10", "policies     10 (other actions)"), ("1,000", "policies   1000 (other actions)"),
      ("10,000", "policies  10000 (other actions)")]),
]  # fmt: skip


def entity_points(results: dict[str, Any]) -> list[tuple[str, str]]:
    keys = sorted((k for k in results if k.startswith("entities")), key=lambda k: int(k.split()[1]))
    return [(f"{int(k.split()[1]):,}", k) for k in keys]


def panel(x0: int, y0: int, title: str, field: str, points: list[tuple[str, str]], runs: list[tuple[str, str, dict[str, Any]]]) -> str:  # fmt: skip
    w, h = 420, 220
    parts = [f'<g transform="translate({x0},{y0})">', f'<text x="0" y="14" font-size="13">{title}</text>']
    values = [r.get(k, {}).get(field) for _, _, r in runs for _, k in points]
    top = max([v for v in values if isinstance(v, (int, float))] or [1]) * 1.1
    left, bottom, pw, ph = 50, h - 30, w - 70, h - 60
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{left + pw}" y2="{bottom}" stroke="#333"/>')
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{left}" y2="{bottom - ph}" stroke="#333"/>')
    for i in range(5):
        v = top * i / 4
        y = bottom - ph * i / 4
        parts.append(f'<text x="{left - 6}" y="{y + 4:.0f}" font-size="10" text-anchor="end">{v:.3g}</text>')
    xs = [left + pw * (i + 0.5) / len(points) for i in range(len(points))]
    for x, (label, _) in zip(xs, points, strict=True):
        parts.append(
            f'<text x="{x:.0f}" y="{bottom + 16}" font-size="10" text-anchor="middle">{label}</text>'
        )
    for j, (name, colour, res) in enumerate(runs):
        pts = []
        for x, (_, key) in zip(xs, points, strict=True):
            v = res.get(key, {}).get(field)
            if isinstance(v, (int, float)):
                pts.append((x, bottom - ph * v / top, v))
        if pts:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                + " ".join(f"{x:.0f},{y:.0f}" for x, y, _ in pts)
                + '"/>'
            )
            for x, y, v in pts:
                parts.append(f'<circle cx="{x:.0f}" cy="{y:.0f}" r="3" fill="{colour}"/>')
                parts.append(
                    f'<text x="{x + 5:.0f}" y="{y - 5:.0f}" font-size="9" fill="{colour}">{v:g}</text>'
                )
        parts.append(
            f'<text x="{left + pw - 60}" y="{30 + 12 * j}" font-size="10" fill="{colour}">{name}</text>'
        )
    parts.append("</g>")
    return "\n".join(parts)


def sessions_svg(paths: list[str], out: str) -> None:
    colours = ["#2471a3", "#c0392b", "#27ae60"]
    runs = []
    counts: list[int] = []
    for j, p in enumerate(paths):
        res = json.loads(Path(p).read_text())
        key = next(k for k in res if k.startswith("sessions "))
        curve = res[key]["curve_rss_growth_mib"]
        counts = counts or [int(k) for k, _ in curve]
        runs.append((Path(p).stem, colours[j % len(colours)], {f"s{k}": {"rss": v} for k, v in curve}))
    points = [(f"{k // 1000}k" if k >= 1000 else str(k), f"s{k}") for k in counts]
    body = panel(10, 10, "Sidecar RSS growth (MiB) vs open sessions", "rss", points, runs)
    Path(out).write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="450" height="250" font-family="sans-serif">\n'
        '<rect width="100%" height="100%" fill="white"/>\n' + body + "\n</svg>\n"
    )


def main() -> None:
    if sys.argv[1] == "--sessions":
        sessions_svg(sys.argv[2:-1], sys.argv[-1])
        return
    before, after = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    runs = [("before (main)", "#c0392b", before), ("after", "#2471a3", after)]
    body = []
    for i, (title, field, points) in enumerate(PANELS):
        pts = points if points is not None else entity_points(after)
        body.append(panel(10 + 440 * (i % 2), 10 + 240 * (i // 2), title, field, pts, runs))
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="890" height="500" font-family="sans-serif">\n'
        '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )
    Path(sys.argv[3]).write_text(svg)


if __name__ == "__main__":
    main()
