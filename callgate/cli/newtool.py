"""``callgate new tool NAME[@VERSION]``: scaffold one tool (issue 12 item 2).

Writes, under the policy folder (``policy.dir`` of the config, or ``--dir``):

* ``tools/NAME@VERSION.json``: the ToolSpec, the one declaration of the tool's arguments (the
  Cedar action and the Rego schema data are derived from it: :mod:`callgate.policy.declare`);
* its rules in each engine folder the policy folder has, as the folder's registration writes
  them (:attr:`callgate.policy.engines.factory.PolicyFolder.scaffold`): Cedar appends to
  ``cedar/policies.cedar`` (the file the Cedar engine loads), Rego writes
  ``rego/<name with _>.rego``;
* test requests for ``callgate policy test``: ``tests/DENY/<name>-*.json``.

The rules it writes permit nobody but principals in the role named after the tool's first
segment (``payments`` for ``payments.refund``), in their own tenant: edit them. Nothing is
overwritten: a tool that exists, or a file in the way, is refused with what to do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from callgate.policy.declare import GROUP_OF_CLASS, GROUPS
from callgate.policy.engines.factory import NewTool
from callgate.policy.engines.registry import policy_folders

NAME: Final = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
VERSION: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
SIDE_EFFECTS: Final = tuple(GROUP_OF_CLASS)


class ScaffoldError(ValueError):
    """A refusal, with what to do (printed as is)."""


@dataclass(frozen=True, slots=True)
class Scaffold:
    """What ``callgate new tool`` wrote."""

    created: tuple[Path, ...]
    appended: tuple[Path, ...]


def parse_name(text: str) -> tuple[str, str]:
    """``NAME[@VERSION]`` -> (name, version); ScaffoldError naming the rule broken."""
    name, sep, version = text.partition("@")
    if not name:
        raise ScaffoldError("a tool needs a name, e.g. payments.refund@v1")
    if not NAME.fullmatch(name) or len(name) > 128:
        raise ScaffoldError(
            f"tool name {name[:64]!r} must be dotted lower_snake_case (letters, digits, '_', each "
            "segment starting with a letter), e.g. payments.refund"
        )
    if name in GROUPS:
        raise ScaffoldError(
            f"{name!r} is a capability class (read, create, modify, delete), not a tool name: "
            "give it a namespace, e.g. files.delete"
        )
    if sep and not VERSION.fullmatch(version):
        raise ScaffoldError(
            f"version {version[:40]!r} must be 1-32 characters of letters, digits, '.', '_', '-' "
            "starting with a letter or digit, e.g. v1"
        )
    return name, version if sep else "v1"


def _toolspec(name: str, version: str, side_effect: str) -> str:
    writes = side_effect != "read_only"
    doc = {
        "name": name,
        "version": version,
        "description": f"TODO: what {name} does, for the model.",
        "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 64}},
            "required": ["id"],
            "additionalProperties": False,
        },
        "side_effect_class": side_effect,
        "required_capabilities": [name],
        "resource_template": f"{name.split('.')[0]}:{{id}}",
        "timeout_policy": {"timeout_ms": 10000},
        "idempotency": {"supported": writes, "without_key": "reject" if writes else "allow"},
        "normalizers": [],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _policy_id(name: str) -> str:
    return name.replace(".", "-").replace("_", "-") + "-permit"


def _deny_case(name: str, version: str, description: str, principal: str) -> str:
    doc = {
        "description": description,
        "principal": {"tenant": "acme", "id": principal},
        "action": name,
        "resource": f"{name.split('.')[0]}:example",
        "context": {"tool": f"{name}@{version}", "args": {"id": "example"}},
        "expect_reasons": [],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def scaffold(policy_dir: Path, spec: str, side_effect: str = "read_only") -> Scaffold:
    """Write the tool's files under ``policy_dir``. Raises ScaffoldError (nothing written)."""
    name, version = parse_name(spec)
    if side_effect not in SIDE_EFFECTS:
        raise ScaffoldError(f"side effect {side_effect!r}: one of {', '.join(SIDE_EFFECTS)}")
    if not policy_dir.is_dir():
        raise ScaffoldError(f"{policy_dir}: no such policy folder (give --dir or the config's policy.dir)")
    tools = policy_dir / "tools"
    tool_path = tools / f"{name}@{version}.json"
    if tool_path.exists():
        raise ScaffoldError(
            f"{tool_path} exists: {name}@{version} is declared already (new version: {name}@v2)"
        )
    for other in sorted(tools.glob("*.json")) if tools.is_dir() else []:
        try:
            doc = json.loads(other.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("name") == name and doc.get("version") == version:
            raise ScaffoldError(f"{other} declares {name}@{version} already")
    stem = name.replace(".", "_")
    tool = NewTool(name=name, version=version, role=name.split(".")[0], stem=stem, policy_id=_policy_id(name))
    parts = [folder.scaffold(policy_dir, tool) for folder in policy_folders()]
    cases = [
        (
            policy_dir / "tests" / "DENY" / f"{stem}-unknown-user.json",
            _deny_case(name, version, f"a user in no role may not call {name}", "nobody"),
        )
    ]
    created: list[tuple[Path, str]] = [(tool_path, _toolspec(name, version, side_effect))]
    appended: list[tuple[Path, str]] = []
    for part in parts:
        created.extend(part.created)
        appended.extend(part.appended)
    if (policy_dir / "tests").is_dir():
        created.extend(cases)
    for path, _ in created:
        if path.exists():
            raise ScaffoldError(f"{path} exists: move it away or pick another tool name")
    for part in parts:
        if part.conflict:
            raise ScaffoldError(part.conflict)
    for path, text in created:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for path, text in appended:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)
    return Scaffold(tuple(p for p, _ in created), tuple(p for p, _ in appended))
