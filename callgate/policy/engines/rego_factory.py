"""The embedded Rego engine's registration, and the Rego policy folder it shares with OPA
(:mod:`callgate.policy.engines.opa_factory`).

``<policy dir>/rego/``: ``*.rego`` modules (any depth) and ``data.json`` (optional: the
ToolSpecs and ``principals.json`` declare the rest, :mod:`callgate.policy.declare`). The engine
itself is :mod:`callgate.policy.engines.rego`, imported only when it is loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from callgate.base.errors import LoadError
from callgate.base.model import Subject
from callgate.policy.engines.base import Engine
from callgate.policy.engines.factory import EngineFactory, NewTool, PolicyFolder, Scaffolded, SchemaActions

if TYPE_CHECKING:
    from callgate.config import PolicyConfig
    from callgate.policy.declare import ArgType, Declared, Problem, ToolDecl

ENGINE: Final = "rego"
FOLDER: Final = "rego"
DATA_FILE: Final = "data.json"


def _load(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.rego import RegoEngine

    return RegoEngine.from_dir(policy_dir / FOLDER, shadow=policy.shadow)


# -- the folder's files -------------------------------------------------------------------------


def _reads(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1].endswith(".rego") or rel == DATA_FILE


def _declared_actions(doc: Any) -> Any:
    """``callgate.schema.actions`` of a ``data.json`` document (whatever it holds)."""
    return doc.get("callgate", {}).get("schema", {}).get("actions", {}) if isinstance(doc, dict) else {}


def _hand_declared(policy_dir: Path) -> frozenset[str]:
    from callgate.policy.declare import read_json

    path = policy_dir / FOLDER / DATA_FILE
    try:
        actions = _declared_actions(read_json(path) if path.is_file() else {})
        return frozenset(actions) if isinstance(actions, Mapping) else frozenset()
    except (OSError, LoadError, AttributeError):
        return frozenset()


def _data(policy_dir: Path) -> dict[str, Any]:
    """``callgate`` of ``data.json`` as written ({} when it does not read)."""
    try:
        doc = json.loads((policy_dir / FOLDER / DATA_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    root = doc.get("callgate") if isinstance(doc, dict) else None
    return root if isinstance(root, dict) else {}


def _schema_actions(policy_dir: Path) -> SchemaActions:
    """The actions of ``data.callgate.schema``: ``data.json``'s plus what the ToolSpecs declare."""
    from callgate.policy.declare import declared
    from callgate.policy.engines.rego_declare import rego_data

    path = policy_dir / FOLDER / DATA_FILE
    try:
        data = rego_data(declared(policy_dir), {"callgate": _data(policy_dir)}, str(path))
    except LoadError:
        return SchemaActions(None, path)  # the engine's load reports it
    actions = data["callgate"].get("schema", {}).get("actions")
    return SchemaActions(frozenset(actions) if isinstance(actions, dict) else None, path)


def _principals(policy_dir: Path, most: int) -> list[Subject]:
    """``data.callgate.entities.users`` with their ``tenant``, at most ``most``."""
    out: list[Subject] = []
    users = _data(policy_dir).get("entities", {}).get("users", {})
    for uid, attrs in users.items() if isinstance(users, dict) else []:
        tenant = attrs.get("tenant", "example") if isinstance(attrs, dict) else "example"
        out.append(Subject(tenant=str(tenant), id=str(uid)))
    return out[:most]


def _record(args: Mapping[str, Any]) -> ArgType:
    """A ``data.json`` action's ``args`` as a record type."""
    from callgate.policy.declare import ArgType

    fields = []
    for name, attr in sorted(args.items()):
        kind = str(attr.get("type", "")) if isinstance(attr, Mapping) else ""
        kind = "decimal" if kind == "Decimal" else kind
        optional = bool(attr.get("optional", False)) if isinstance(attr, Mapping) else False
        fields.append((name, ArgType(kind), not optional))
    return ArgType("Record", fields=tuple(fields))


def _shallow(t: ArgType) -> ArgType:
    """Nested types as ``schema.rego`` checks them (Set and Record, not their insides)."""
    from callgate.policy.declare import ArgType

    return ArgType("Record", fields=tuple((n, ArgType(ft.kind), r) for n, ft, r in t.fields))


def _type_rules(policy_dir: Path, decls: Sequence[ToolDecl], texts: Mapping[str, str]) -> list[Problem]:
    """Each capability a ToolSpec requires that ``data.json`` declares by hand must type
    ``args`` as the ToolSpec does (at the top level, as ``schema.rego`` checks)."""
    from callgate.policy.declare import Problem, arg_place, read_json, type_diff

    data_path = policy_dir / FOLDER / DATA_FILE
    if not data_path.is_file():
        return []
    try:
        data = read_json(data_path)
    except LoadError as exc:
        return [Problem(str(data_path), "", exc.message)]
    actions = _declared_actions(data)
    problems: list[Problem] = []
    for d in decls:
        for cap in d.capabilities:
            entry = actions.get(cap) if isinstance(actions, Mapping) else None
            if not isinstance(entry, Mapping) or not isinstance(entry.get("args"), Mapping) or d.args is None:
                continue
            for msg in type_diff("", _shallow(d.args), _record(entry["args"]), {u.path for u in d.unseen}):
                arg = msg.split(":", 1)[0]
                problems.append(
                    Problem(d.source, arg_place(texts[d.source], arg), f"{cap} in {data_path}: args.{msg}")
                )
    return problems


def _value_places(policy_dir: Path, value_json: str) -> list[str]:
    """``file:line:column`` of every place a Rego module writes the value (its JSON text)."""
    out = []
    for path in sorted((policy_dir / FOLDER).rglob("*.rego")):
        if path.name.endswith("_test.rego"):
            continue
        try:
            text = path.read_text("utf-8")
        except OSError:
            continue
        for m in re.finditer(re.escape(value_json), text):
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            out.append(f"{path}:{line}:{col}")
    return out


def _rules(tool: NewTool) -> str:
    return (
        f"# {tool.name}@{tool.version} (callgate new tool): the twin of its Cedar rules, same policy ids.\n"
        f'# Helpers (entities.rego): principal, principal_in_role(r), resource; confirm[id] := "why"\n'
        f"# makes a permit need the user's confirmation.\n"
        f"package callgate.authz\n\n"
        f'permit contains "{tool.policy_id}" if {{\n'
        f'\tinput.capability == "{tool.name}"\n'
        f'\tprincipal_in_role("{tool.role}")\n'
        f"\tprincipal.tenant == input.context.tenant\n"
        f"}}\n"
    )


def _scaffold(policy_dir: Path, tool: NewTool) -> Scaffolded:
    """The tool's rules in their own module, ``rego/<name with _>.rego``."""
    if not (policy_dir / FOLDER).is_dir():
        return Scaffolded()
    return Scaffolded(created=((policy_dir / FOLDER / f"{tool.stem}.rego", _rules(tool)),))


def _render(policy_dir: Path, declared: Declared, /) -> Mapping[Path, str]:
    """The declarations in Rego (:func:`callgate.policy.engines.rego_declare.render`)."""
    from callgate.policy.engines.rego_declare import render

    return render(policy_dir, declared)


REGO_FOLDER: Final = PolicyFolder(
    name=FOLDER,
    reads=_reads,
    reads_text="it reads *.rego files and data.json",
    hand_declared=_hand_declared,
    schema_actions=_schema_actions,
    principals=_principals,
    type_rules=_type_rules,
    scaffold=_scaffold,
    render_declarations=_render,
    value_places=_value_places,
)
"""The Rego policy folder: read by embedded Rego and by OPA."""

REGO: Final = EngineFactory(
    name=ENGINE,
    doc="embedded Rego (regopy, rego-cpp); files in <policy dir>/rego/",
    load=_load,
    folder=REGO_FOLDER,
)
"""Registered in :mod:`callgate.policy.engines.registry`."""

__all__ = ["REGO", "REGO_FOLDER"]
