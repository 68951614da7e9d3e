"""The core seam (callgate/propose/core.py): choosing the core, what runs where, fail-closed start.

Parity of the answers is tests/test_native_parity.py; these tests hold on any machine, with or
without the compiled core built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.arguments.parse import ParseLimits
from callgate.base.errors import CallgateError, ErrorCode
from callgate.config import load_config
from callgate.policy.snapshot import load_snapshot
from callgate.policy.toolspecs import CompiledTool, compile_tool
from callgate.propose.core import Core, CoreEngine, CoreKind, load_native
from tests.conftest import ROOT

BUILT = load_native() is not None
CLOCK = "2026-07-19T14:00:00+08:00"


def _config(tmp_path: Path, engine: str) -> Path:
    p = tmp_path / "callgate.toml"
    p.write_text(f'[core]\nengine = "{engine}"\n', encoding="utf-8")
    return p


@pytest.mark.parametrize("engine", ["auto", "python", "native"])
def test_config_names_the_core(tmp_path: Path, engine: str) -> None:
    assert load_config(_config(tmp_path, engine)).core.engine == engine


def test_unknown_core_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CallgateError) as exc:
        load_config(_config(tmp_path, "rust"))
    assert exc.value.code is ErrorCode.CONFIG_INVALID


def test_python_core_never_answers_natively() -> None:
    snap = load_snapshot(ROOT / "policies")
    core = Core(CoreEngine.PYTHON)
    assert core.kind is CoreKind.PYTHON and core.native is None
    tool = snap.tools.get("weather.get", "v1")
    assert tool is not None
    assert (
        core.front(snap, tool, b'{"city": "Paris", "date": "tomorrow"}', "acme", "en", CLOCK, ParseLimits())
        is None
    )
    assert core.prepare(snap, eager=True) == {}


def test_auto_uses_the_compiled_core_when_built() -> None:
    assert Core(CoreEngine.AUTO).kind is (CoreKind.NATIVE if BUILT else CoreKind.PYTHON)
    if os.environ.get("CI"):
        assert BUILT, "CI builds the compiled core (scripts/bootstrap -> scripts/native build)"


def test_native_core_refuses_to_start_without_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    import callgate.propose.core as core_mod

    monkeypatch.setattr(core_mod, "load_native", lambda: None)  # a machine without the build
    with pytest.raises(CallgateError) as exc:
        Core(CoreEngine.NATIVE)
    assert exc.value.code is ErrorCode.CONFIG_INVALID
    assert Core(CoreEngine.AUTO).kind is CoreKind.PYTHON


@pytest.fixture
def broken_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A compiled core that is there but does not load (what the dynamic loader says of a module
    built against a newer libsqlite3, seen on this machine); the real one comes back after."""
    import callgate.native.loader as nativemod

    said = f"{ROOT}/callgate/_native.abi3.so: undefined symbol: sqlite3_set_clientdata"

    def refuse(name: str) -> object:
        raise ImportError(said, name=name)

    nativemod._imported.cache_clear()
    monkeypatch.setattr(nativemod.importlib, "import_module", refuse)
    yield said
    monkeypatch.undo()
    nativemod._imported.cache_clear()


def test_a_build_that_does_not_load_is_named_with_the_loaders_message(broken_build: str) -> None:
    core = Core(CoreEngine.AUTO)
    assert core.kind is CoreKind.PYTHON
    assert "does not load" in core.native_unavailable and broken_build in core.native_unavailable
    with pytest.raises(CallgateError) as exc:
        Core(CoreEngine.NATIVE)
    assert exc.value.code is ErrorCode.CONFIG_INVALID
    assert broken_build in exc.value.message and "scripts/native build" in exc.value.message
    assert Core(CoreEngine.PYTHON).native_unavailable == ""  # not wanted: nothing to say


def test_serve_warns_when_the_build_does_not_load(tmp_path: Path) -> None:
    """``callgate serve`` on a machine where the module is there but does not load: it serves on
    the Python core and says why, as a warning, with the loader's message."""
    runner = tmp_path / "run.py"
    runner.write_text(
        "import importlib.abc, runpy, sys\n"
        "class Refuse(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'callgate._native':\n"
        "            raise ImportError('_native.abi3.so: undefined symbol: sqlite3_set_clientdata', name=name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "sys.argv[0] = 'callgate'\n"
        "runpy.run_module('callgate', run_name='__main__', alter_sys=True)\n",
        encoding="utf-8",
    )
    toml = tmp_path / "callgate.toml"
    toml.write_text(
        f'[server]\nagent = {{ socket = "{tmp_path}/agent.sock" }}\n'
        f'confirmer = {{ socket = "{tmp_path}/confirmer.sock" }}\n'
        f'authorizer = {{ socket = "{tmp_path}/authorizer.sock" }}\n'
        f'executor = {{ socket = "{tmp_path}/executor.sock" }}\n'
        f'[policy]\ndir = "{ROOT}/policies"\nwatch = false\n'
        f'[store]\npath = "{tmp_path}/callgate.db"\n[idempotency]\npath = "{tmp_path}/idempotency.db"\n',
        encoding="utf-8",
    )
    log = tmp_path / "log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(runner), "serve", "--config", str(toml)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=err, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "core: " not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text()
    finally:
        proc.terminate()
        proc.wait(15)
    assert "core: python (the compiled core callgate._native is present but it does not load" in text, text
    warning = [line for line in text.splitlines() if "WARNING" in line and "does not load" in line]
    assert warning and "undefined symbol: sqlite3_set_clientdata" in warning[0], text
    assert "the Python core runs" in warning[0], text


def _finer_bound_tool(tmp_path: Path) -> CompiledTool:
    """A tool the compiled core cannot run: a decimal bound finer than 10^-18."""
    spec = json.loads((ROOT / "policies" / "tools" / "weather.get@v1.json").read_text())
    spec.update(
        name="fine.bound", normalizers=[{"kind": "decimal", "field": "/city", "scale": 2, "minimum": 1e-30}]
    )
    path = tmp_path / "fine.bound@v1.json"
    path.write_text(json.dumps(spec))
    return compile_tool(path)


def test_unsupported_tools_run_python_and_are_counted(tmp_path: Path) -> None:
    assert BUILT, "the compiled core is not built (scripts/native build; needs a Rust toolchain)"
    snap = load_snapshot(ROOT / "policies")
    core = Core(CoreEngine.NATIVE)
    seen: list[str] = []
    core.observer = seen.append
    assert core.prepare(snap, eager=True) == {}  # every example tool runs on the compiled core
    cal = snap.tools.get("calendar.create_event", "v1")
    weather = snap.tools.get("weather.get", "v1")
    assert cal is not None and weather is not None
    fine = _finer_bound_tool(tmp_path)
    assert core.front(snap, fine, b"{}", "acme", "en", CLOCK, ParseLimits()) is None
    assert core.unsupported() == {
        "fine.bound@v1": "normalizer decimal (minimum has more than 18 decimal places)"
    }
    # a datetime normalizer needs the session's zone rules: none known, the reference answers
    assert core.front(snap, cal, b"{}", "acme", "en", CLOCK, ParseLimits(), timezone="Mars/Olympus") is None
    answered = core.front(snap, cal, b"{}", "acme", "en", CLOCK, ParseLimits(), timezone="Asia/Shanghai")
    assert answered is not None and answered.code == "schema_violation"
    deferred = core.front(
        snap, weather, '{"city": "x", "date": "明天"}'.encode(), "acme", "zh", CLOCK, ParseLimits()
    )
    assert deferred is not None and deferred.code == "defer"
    refused = core.front(
        snap, weather, b'{"city": "x", "date": "tomorrow", "x": 1}', "acme", "en", CLOCK, ParseLimits()
    )
    assert refused is not None and refused.code == "schema_violation"
    assert seen == ["unsupported_tool", "zone", "deferred"]
    assert dict(core.python_path) == {"unsupported_tool": 1, "zone": 1, "deferred": 1}
