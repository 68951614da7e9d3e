"""Render the benchmark SVG plots to PNG with headless Chromium (no plotting library in the venv).

    .venv/bin/python bench/svg_png.py docs/scale-issue15.svg [more.svg ...]   # writes the .png beside each

Playwright (the dev extra) drives Debian's Chromium (``scripts/chromium path``; never a downloaded
browser). The page is sized to the SVG's own width and height, at twice the pixel density so the
text stays legible when the PNG is scaled down in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size(svg: str) -> tuple[int, int]:
    head = svg[: svg.index(">")]
    w = re.search(r'\bwidth="(\d+)"', head)
    h = re.search(r'\bheight="(\d+)"', head)
    if not (w and h):
        raise ValueError("the SVG's root element needs a width and a height in pixels")
    return int(w.group(1)), int(h.group(1))


def render(paths: list[Path]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    browser_path = subprocess.check_output(
        ["bash", str(ROOT / "scripts" / "chromium"), "path"], text=True
    ).strip()
    written = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            for path in paths:
                w, h = size(path.read_text())
                page = browser.new_page(viewport={"width": w, "height": h}, device_scale_factor=2)
                page.goto(path.resolve().as_uri())
                out = path.with_suffix(".png")
                page.screenshot(path=str(out), clip={"x": 0, "y": 0, "width": w, "height": h})
                page.close()
                print(f"{path} -> {out} ({w}x{h} CSS px, {out.stat().st_size:,} bytes)")
                written.append(out)
        finally:
            browser.close()
    return written


if __name__ == "__main__":
    render([Path(p) for p in sys.argv[1:]] or [ROOT / "docs" / "scale-issue15.svg"])
