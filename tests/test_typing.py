"""`mypy --strict` over the package (generated code excluded by pyproject's config)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.timeout(660)  # the subprocess's own 600 s limit reports first (21 s with a cold cache)
def test_mypy_strict_clean() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "callgate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
