"""The TypeScript client (clients/ts, docs/CLIENTS-TS.md): its locked npm dependencies install
with ``npm ci``, its generated protobuf code is fresh, and its ``node --test`` suite passes
against real sidecars that the Node tests start (``python -m callgate serve`` with this Python).
Marked ``node``: the fast local loop leaves it out with ``-m "not node"``."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markers import Needs, require

ROOT = Path(__file__).resolve().parents[1]
TS = ROOT / "clients" / "ts"
SCRIPT = ROOT / "scripts" / "node-client"

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "CALLGATE_PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _install() -> None:
    require(Needs.NODE)
    proc = _run("install", "--force", timeout=400)  # npm ci from the lock, cache or not
    assert proc.returncode == 0, f"npm ci failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"


def test_generated_ts_code_is_fresh(tmp_path: Path) -> None:
    _install()
    out = tmp_path / "gen"
    proc = _run("gen", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    committed = TS / "src" / "gen"
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*.ts"))
    assert names == sorted(str(p.relative_to(committed)) for p in committed.rglob("*.ts"))
    _, mismatch, errors = filecmp.cmpfiles(committed, out, names, shallow=False)
    assert not mismatch and not errors, f"stale TS code: {mismatch or errors}; run scripts/node-client gen"


def test_node_client_suite_passes() -> None:
    _install()
    proc = _run("test", timeout=400)
    summary = "\n".join(
        line
        for line in proc.stdout.splitlines()
        if re.match(r"^# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) ", line)
    )
    print(summary)
    assert proc.returncode == 0, (
        f"node --test failed (exit {proc.returncode}):\n{summary}\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    )
    assert re.search(r"^# fail 0$", proc.stdout, re.M), summary
    assert re.search(r"^# skipped 0$", proc.stdout, re.M), summary
