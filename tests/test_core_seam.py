"""The core seam (callgate/propose/core.py): choosing the core, what runs where, fail-closed start.

Parity of the answers is tests/test_native_parity.py; these tests hold on any machine, with or
without the compiled core built.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from callgate.config import load_config
from callgate.core.errors import CallgateError, ErrorCode
from callgate.policy.snapshot import load_snapshot
from callgate.propose.core import Core, CoreEngine, CoreKind, load_native
from callgate.propose.parse import ParseLimits
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


def test_unsupported_tools_run_python_and_are_counted() -> None:
    assert BUILT, "the compiled core is not built (scripts/native build; needs a Rust toolchain)"
    snap = load_snapshot(ROOT / "policies")
    core = Core(CoreEngine.NATIVE)
    seen: list[str] = []
    core.observer = seen.append
    assert core.prepare(snap, eager=True) == {"calendar.create_event@v1": "normalizer datetime"}
    cal = snap.tools.get("calendar.create_event", "v1")
    weather = snap.tools.get("weather.get", "v1")
    assert cal is not None and weather is not None
    assert core.front(snap, cal, b"{}", "acme", "en", CLOCK, ParseLimits()) is None
    deferred = core.front(
        snap, weather, '{"city": "x", "date": "明天"}'.encode(), "acme", "zh", CLOCK, ParseLimits()
    )
    assert deferred is not None and deferred.code == "defer"
    refused = core.front(
        snap, weather, b'{"city": "x", "date": "tomorrow", "x": 1}', "acme", "en", CLOCK, ParseLimits()
    )
    assert refused is not None and refused.code == "schema_violation"
    assert seen == ["unsupported_tool", "deferred"]
    assert dict(core.python_path) == {"unsupported_tool": 1, "deferred": 1}
