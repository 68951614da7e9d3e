"""A policy folder with a table of cases, decided on every engine: the set-up the context tables
share (tests/test_time_context.py, tests/test_text_context.py).

A fixture folder (ToolSpecs, ``principals.json``, Cedar rules and their Rego twin, ``cases.json``)
is copied with the project's Rego contract modules; each case (tool, principal, clock, zone,
arguments) is normalized by the Python stages and authorized on the engine under test.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from callgate.base.model import Decision, NormalizedArguments, Subject
from callgate.policy.engines.base import Engine
from callgate.policy.engines.opa import OpaEngine
from callgate.policy.snapshot import load_snapshot
from callgate.propose.authorize import authorize_invocation
from callgate.propose.core import Core
from tests.conftest import POLICIES, reference_front
from tests.opa_fixture import OpaServer

_SNAPS: dict[tuple[str, str], Any] = {}


def cases(fixture: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads((fixture / "cases.json").read_text(encoding="utf-8"))["cases"]
    return out


def copy_folder(tmp_path_factory: pytest.TempPathFactory, fixture: Path) -> Path:
    """The fixture folder with the project's Rego contract modules (decision, entities, schema)."""
    root = tmp_path_factory.mktemp(fixture.name) / "policies"
    shutil.copytree(fixture, root, ignore=shutil.ignore_patterns("cases.json"))
    for name in ("decision.rego", "entities.rego", "schema.rego"):
        shutil.copy(POLICIES / "rego" / name, root / "rego" / name)
    return root


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def python_snapshot(folder: Path) -> Any:
    """The folder's snapshot on the Python stages (loaded once per folder)."""
    key = (str(folder), "python")
    if key not in _SNAPS:
        _SNAPS[key] = load_snapshot(folder)
    return _SNAPS[key]


def native_snapshot(folder: Path) -> tuple[Any, Core]:
    """The folder's snapshot with the compiled core prepared on it (once per folder)."""
    key = (str(folder), "native")
    if key not in _SNAPS:
        snap = load_snapshot(folder)
        core = Core("native")
        core.prepare(snap, eager=True)
        assert core.cedar_core(snap) is not None
        _SNAPS[key] = (snap, core)
    out: tuple[Any, Core] = _SNAPS[key]
    return out


def summary(d: Decision) -> dict[str, Any]:
    return {"effect": d.effect.value, "policy_ids": sorted(d.policy_ids)}


def want(case: dict[str, Any]) -> dict[str, Any]:
    return {"effect": case["expect"]["effect"], "policy_ids": sorted(case["expect"]["policy_ids"])}


def normalized(snap: Any, case: dict[str, Any]) -> tuple[Any, NormalizedArguments]:
    name, version = case["tool"].split("@")
    tool = snap.tools.get(name, version)
    assert tool is not None
    raw = json.dumps(case["args"]).encode()
    return tool, reference_front(tool, raw, case["clock"], case["principal"]["tenant"], zone=case["zone"])


def decide(
    engine: Engine,
    snap: Any,
    case: dict[str, Any],
    loop: asyncio.AbstractEventLoop,
    check: Callable[[Any, Any], None] = lambda tool, value: None,
) -> dict[str, Any]:
    """The case's decision on ``engine`` (``check``: a stage between normalization and the
    decision, given the tool and the normalized value)."""
    tool, norm = normalized(snap, case)
    check(tool, norm.value)
    subject = Subject(case["principal"]["tenant"], case["principal"]["id"])
    result = loop.run_until_complete(authorize_invocation(engine, tool, norm, subject))
    assert not result.decision.error_code, (case["name"], result.decision)
    return summary(result.decision)


def opa_decisions(
    folder: Path,
    opa_factory: Callable[..., OpaServer],
    loop: asyncio.AbstractEventLoop,
    table: Sequence[dict[str, Any]],
    check: Callable[[Any, Any], None] = lambda tool, value: None,
) -> dict[str, dict[str, Any]]:
    """Every case of ``table`` decided by a real OPA server the engine uploads the folder to."""
    server = opa_factory(None)
    engine = OpaEngine.from_dir(folder / "rego", url=server.url, timeout=5.0)
    snap = python_snapshot(folder)
    try:
        loop.run_until_complete(engine.load_policies())
        ok, why = loop.run_until_complete(engine.readiness())
        assert ok, why
        return {c["name"]: decide(engine, snap, c, loop, check) for c in table}
    finally:
        loop.run_until_complete(engine.close())


def check_and_policy_test(folder: Path, tmp_path: Path, engine: str) -> str:
    """``callgate check`` and ``callgate policy test <folder>/tests`` on ``engine`` (both must
    pass); the policy test's output."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    cfg = tmp_path / "callgate.toml"
    cfg.write_text(
        f'[store]\npath = "{tmp_path / "db"}"\n\n[policy]\ndir = "{folder}"\nengine = "{engine}"\n'
    )
    for args in (["check", "-c", str(cfg)], ["policy", "test", str(folder / "tests"), "-c", str(cfg)]):
        done = subprocess.run(
            [sys.executable, "-m", "callgate", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout
