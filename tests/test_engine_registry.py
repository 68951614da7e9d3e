"""An engine is one module and one registration (issue 29 item 2, docs/ENGINES.md "Adding an
engine").

* ``callgate check`` (policy/check.py), the declarations (policy/declare.py) and ``callgate new
  tool`` (cli/newtool.py) name no engine: no string in their code is a registered engine's name or
  policy folder (docstrings aside). Main's versions of the three files, where the engines were
  named about 25 times, fail it (:func:`test_the_detector_finds_main_s_engine_names`).
* A toy engine registered in a test, with its own folder, check rules and scaffold, is picked up
  by ``callgate check`` (inventory, consistency, ToolSpec type rules, sample requests), by the
  declarations (which actions its schema declares by hand) and by ``callgate new tool``, with no
  other edit.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from callgate.base.model import AuthzRequest, Decision, Effect, Reason, Subject
from callgate.cli.main import cmd_check
from callgate.cli.newtool import scaffold
from callgate.policy.declare import Problem, ToolDecl, arg_place, check_tools, tool_typing
from callgate.policy.engines.base import NotCompiled, Readiness
from callgate.policy.engines.factory import EngineFactory, NewTool, PolicyFolder, Scaffolded, SchemaActions
from callgate.policy.engines.registry import ENGINES, policy_folders
from tests.conftest import POLICIES

ROOT = Path(__file__).resolve().parents[1]
ENGINE_NEUTRAL = ("callgate/policy/check.py", "callgate/policy/declare.py", "callgate/cli/newtool.py")
"""The callers that must know engines only through the registry."""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions (and of attribute
    docstrings: a string statement right after an assignment)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                out.add(id(stmt.value))
    return out


def engine_names_in(source: str, names: Sequence[str]) -> list[str]:
    """``line: text`` of every string in the code (not a docstring) that is one of ``names`` or a
    path starting with one (``"cedar"``, ``"rego/data.json"``); f-string parts count."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            value = node.value.strip("/")
            if any(value == n or value.startswith(n + "/") for n in names):
                out.append(f"{node.lineno}: {node.value!r}")
    return out


def _registered_names() -> tuple[str, ...]:
    return tuple(sorted({*ENGINES.names(), *(f.name for f in policy_folders())}))


@pytest.mark.parametrize("path", ENGINE_NEUTRAL)
def test_engine_neutral_callers_name_no_engine(path: str) -> None:
    found = engine_names_in((ROOT / path).read_text(encoding="utf-8"), _registered_names())
    assert not found, (
        f"{path} names an engine: ask the registry (policy/engines/factory.py) instead: " + "; ".join(found)
    )


def test_the_detector_finds_main_s_engine_names() -> None:
    """The check bites: the lines main had before the factories owned their folders."""
    before = (
        'ENGINE_FOLDERS = {"cedar": "cedar", "rego": "rego", "opa": "rego"}\n'
        'path = policy_dir / "rego" / "data.json"\n'
        'if cfg.policy.engine != "opa":\n'
        '    """a docstring naming "cedar" is prose"""\n'
        'x = f"{d}/cedar/schema.cedarschema"\n'
    )
    found = engine_names_in(before, _registered_names())
    assert sorted(int(f.split(":")[0]) for f in found) == [1] * 6 + [2, 3, 5], found
    try:
        main_check = subprocess.run(
            ["git", "show", "main:callgate/policy/check.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return  # not a git checkout with main (a packaged tree): the snippet above holds
    if "ENGINE_FOLDERS" in main_check:  # main before the factories owned their folders
        assert len(engine_names_in(main_check, _registered_names())) >= 10


# -- a toy engine, registered here only -------------------------------------------------------

TOY = "toy"
RULES = "rules.toy"


def _toy_rules(policy_dir: Path) -> dict[str, Any]:
    """``toy/rules.toy``: ``{"allow": {capability: {arg: type}}, "users": {id: tenant}}``."""
    try:
        doc = json.loads((policy_dir / TOY / RULES).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@dataclass
class ToyEngine(NotCompiled):
    allow: frozenset[str]
    seen: list[AuthzRequest] = field(default_factory=list)

    @property
    def name(self) -> str:
        return TOY

    @property
    def revision(self) -> str:
        return "toy:" + ",".join(sorted(self.allow))

    async def authorize_batch(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        self.seen.extend(requests)
        return [
            Decision(Effect.ALLOW, (Reason("", "toy-permit", ""),), TOY)
            if r.capability in self.allow
            else Decision(Effect.DENY, (), TOY)
            for r in requests
        ]

    async def ready(self) -> bool:
        return True

    async def readiness(self) -> Readiness:
        return Readiness(True, "toy")

    async def load_policies(self) -> None:
        return None

    async def close(self) -> None:
        return None


LOADED: list[ToyEngine] = []


def _load(policy_dir: Path, policy: object) -> ToyEngine:
    engine = ToyEngine(frozenset(_toy_rules(policy_dir).get("allow", {})))
    LOADED.append(engine)
    return engine


def _type_rules(policy_dir: Path, decls: Sequence[ToolDecl], texts: Mapping[str, str]) -> list[Problem]:
    """An argument the ToolSpec declares that the toy rules do not type."""
    allow = _toy_rules(policy_dir).get("allow", {})
    out = []
    for d in decls:
        for cap in d.capabilities:
            typed = allow.get(cap)
            for name, _, _ in d.args.fields if d.args is not None and isinstance(typed, dict) else ():
                if name not in typed:
                    out.append(
                        Problem(
                            d.source, arg_place(texts[d.source], name), f"{cap}: args.{name} untyped in toy"
                        )
                    )
    return out


def _scaffold(policy_dir: Path, tool: NewTool) -> Scaffolded:
    if not (policy_dir / TOY).is_dir():
        return Scaffolded()
    return Scaffolded(
        created=((policy_dir / TOY / f"{tool.stem}.toy", f"allow {tool.name} {tool.policy_id}\n"),)
    )


TOY_FOLDER = PolicyFolder(
    name=TOY,
    reads=lambda rel: rel.endswith(".toy"),
    reads_text="it reads *.toy files",
    hand_declared=lambda d: frozenset(_toy_rules(d).get("allow", {})),
    schema_actions=lambda d: SchemaActions(frozenset(_toy_rules(d).get("allow", {})), d / TOY / RULES),
    principals=lambda d, most: [Subject(tenant=t, id=u) for u, t in _toy_rules(d).get("users", {}).items()][
        :most
    ],
    type_rules=_type_rules,
    scaffold=_scaffold,
)
TOY_FACTORY = EngineFactory(name=TOY, doc="a toy engine of the test", load=_load, folder=TOY_FOLDER)


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> EngineFactory:
    """The toy engine in :data:`ENGINES` for one test (the registry as it was afterwards)."""
    monkeypatch.setattr(ENGINES, "_entries", dict(ENGINES._entries))
    ENGINES.register(TOY_FACTORY)
    LOADED.clear()
    return TOY_FACTORY


def _toy_policies(tmp_path: Path) -> Path:
    policies = tmp_path / "policies"
    (policies / "tools").mkdir(parents=True)
    shutil.copy(POLICIES / "tools" / "weather.get@v1.json", policies / "tools")
    shutil.copytree(POLICIES / "cedar", policies / "cedar")  # another engine's folder
    (policies / TOY).mkdir()
    rules = {"allow": {"weather.read": {"city": "String"}}, "users": {"tia": "acme", "tom": "globex"}}
    (policies / TOY / RULES).write_text(json.dumps(rules))
    (policies / TOY / "notes.txt").write_text("not a toy file\n")
    return policies


def check(toml: Path) -> tuple[int, str]:
    """``callgate check --offline --config toml`` in this process (the registry as the test has it)."""
    out = io.StringIO()
    rc = cmd_check(argparse.Namespace(config=str(toml), offline=True, against=None), out)
    return rc, out.getvalue()


def test_a_registered_toy_engine_is_checked_with_no_other_edit(
    toy_registered: EngineFactory, tmp_path: Path
) -> None:
    policies = _toy_policies(tmp_path)
    spec = json.loads((policies / "tools" / "weather.get@v1.json").read_text())
    assert spec["required_capabilities"] == ["weather.read"]
    toml = tmp_path / "callgate.toml"
    toml.write_text(f'[policy]\ndir = "{policies}"\nengine = "{TOY}"\n[store]\npath = "{tmp_path}/db"\n')

    rc, out = check(toml)
    assert rc == 1, out
    # inventory: the toy folder's own rule refuses a file it does not read; cedar/ is a note
    assert (
        f"error: {policies / TOY / 'notes.txt'}: file refused: not read by the toy engine (it reads *.toy files)"
        in out
    )
    assert f"note: {policies / 'cedar'}: not loaded: the engine is toy" in out
    # the toy's check rules: an argument its rules do not type, at the ToolSpec's file:line
    line = next(
        i
        for i, text in enumerate((policies / "tools" / "weather.get@v1.json").read_text().splitlines(), 1)
        if '"date"' in text
    )
    assert (
        f"error: {policies / 'tools' / 'weather.get@v1.json'}:{line}: weather.read: args.date untyped in toy"
        in out
    )
    # sample requests ran on the toy engine as the principals of its own entity data
    assert {(r.subject.tenant, r.subject.id) for r in LOADED[-1].seen} == {("acme", "tia"), ("globex", "tom")}

    # the rules fixed (and the stray file gone): check passes on the toy engine
    (policies / TOY / "notes.txt").unlink()
    (policies / TOY / RULES).write_text(
        json.dumps({"allow": {"weather.read": {"city": "String", "date": "String"}}})
    )
    rc, out = check(toml)
    assert rc == 0, out
    assert "ok: 1 tools, engine toy" in out

    # a capability its schema lacks: the consistency check names the toy's schema file
    (policies / TOY / RULES).write_text(json.dumps({"allow": {}}))
    rc, out = check(toml)
    assert rc == 1, out
    assert f"capability 'weather.read' is not an action in {policies / TOY / RULES}" in out


def test_the_declarations_and_new_tool_pick_up_a_registered_toy_engine(
    toy_registered: EngineFactory, tmp_path: Path
) -> None:
    policies = _toy_policies(tmp_path)
    assert TOY_FOLDER in policy_folders()
    # declarations: what the toy folder declares by hand is not generated, and its type rules run
    weather = str(policies / "tools" / "weather.get@v1.json")
    assert tool_typing(policies, TOY_FOLDER).own_record == frozenset()  # typed by toy/rules.toy
    (policies / TOY / RULES).write_text(json.dumps({"allow": {}}))
    assert tool_typing(policies, TOY_FOLDER).own_record == {weather}  # generated from the ToolSpec
    (policies / TOY / RULES).write_text(json.dumps({"allow": {"weather.read": {}}}))
    assert any("untyped in toy" in p.message for p in check_tools(policies, policy_folders()))
    # callgate new tool writes the toy folder's rules beside the others
    made = scaffold(policies, "toys.spin@v1")
    assert policies / TOY / "toys_spin.toy" in made.created
    assert (policies / TOY / "toys_spin.toy").read_text() == "allow toys.spin toys-spin-permit\n"
    assert policies / "cedar" / "policies.cedar" in made.appended
