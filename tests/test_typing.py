"""`mypy --strict` over the package (generated code excluded by pyproject's config)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_mypy_strict_clean() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "callgate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
