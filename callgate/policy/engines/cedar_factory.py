"""The Cedar engine's registration: how it loads, and what it owns in a policy folder.

``<policy dir>/cedar/``: every ``*.cedar`` file, ``schema.cedarschema`` and ``entities.json``
(both optional: the ToolSpecs and ``principals.json`` declare the rest, :mod:`callgate.policy.declare`).
The engine itself is :mod:`callgate.policy.engines.cedar`, imported only when it is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from callgate.base.errors import LoadError
from callgate.base.model import Subject
from callgate.policy.engines.base import Engine
from callgate.policy.engines.factory import EngineFactory, NewTool, PolicyFolder, Scaffolded, SchemaActions

if TYPE_CHECKING:
    from callgate.config import PolicyConfig
    from callgate.policy.declare import Declared, Problem, ToolDecl

ENGINE: Final = "cedar"
FOLDER: Final = "cedar"
SCHEMA_FILE: Final = "schema.cedarschema"
ENTITIES_FILE: Final = "entities.json"
POLICIES_FILE: Final = "policies.cedar"
"""The file ``callgate new tool`` appends a tool's rules to."""


def _load(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir

    return CedarEngine(
        load_cedar_dir(
            policy_dir / FOLDER,
            shadow=policy.shadow,
            reach=policy.list_by_policy,
            reach_solver_ms=policy.list_by_policy_solver_ms,
        )
    )


def _load_for_core(policy_dir: Path, policy: PolicyConfig, compiled: bool) -> Engine:
    from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir

    cores = SnapshotCores.NATIVE if compiled else SnapshotCores.PYTHON
    return CedarEngine(
        load_cedar_dir(
            policy_dir / FOLDER,
            shadow=policy.shadow,
            cores=cores,
            reach=policy.list_by_policy,
            reach_solver_ms=policy.list_by_policy_solver_ms,
        )
    )


def _warnings(policy_dir: Path) -> list[str]:
    from callgate.policy.engines.cedar import entities_size_warning

    entities = policy_dir / FOLDER / ENTITIES_FILE
    if not entities.is_file():
        return []
    warning = entities_size_warning(entities.stat().st_size, str(entities))
    return [warning] if warning else []


# -- the folder's files -------------------------------------------------------------------------


def _reads(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return "/" not in rel and (name.endswith(".cedar") or name in {SCHEMA_FILE, ENTITIES_FILE})


def _hand_declared(policy_dir: Path) -> frozenset[str]:
    from callgate.policy.engines.cedar_declare import cedar_declared_actions

    path = policy_dir / FOLDER / SCHEMA_FILE
    try:
        return frozenset(cedar_declared_actions(path.read_text("utf-8"))) if path.is_file() else frozenset()
    except (OSError, LoadError, AttributeError):
        return frozenset()


def _schema_actions(policy_dir: Path) -> SchemaActions:
    """The actions of the schema the engine loads: the hand-written one (if any) plus what the
    ToolSpecs declare (:mod:`callgate.policy.declare`)."""
    import cedarpy

    from callgate.policy.declare import declared
    from callgate.policy.engines.cedar import _parsed_schema
    from callgate.policy.engines.cedar_declare import cedar_schema

    path = policy_dir / FOLDER / SCHEMA_FILE
    try:
        hand_written = path.read_text("utf-8") if path.exists() else None
        text = cedar_schema(declared(policy_dir), hand_written)
        # the load's own parse of the same text: no second parse, and no drop of one that holds
        # the GIL for ~100 ms at 1,000 actions (cedar._parsed_schema)
        schema = _parsed_schema(text)
        entities = json.loads(str(cedarpy.Entities.from_json_str("[]", schema)))
    except (OSError, ValueError, LoadError):
        return SchemaActions(None, path)  # the engine's load reports it
    return SchemaActions(
        frozenset(e["uid"]["id"] for e in entities if str(e["uid"]["type"]).endswith("Action")), path
    )


def _principals(policy_dir: Path, most: int) -> list[Subject]:
    """``User`` entities of ``entities.json`` with their ``tenant``, at most ``most``."""
    from callgate.policy.engines.cedar_slices import each_element

    out: list[Subject] = []
    try:
        text = (policy_dir / FOLDER / ENTITIES_FILE).read_text("utf-8")
    except OSError:
        return out
    try:
        # one entity at a time (100,000 entities would otherwise be ~100 MiB of Python objects
        # at once, and RSS that stays after they are freed)
        for e in each_element(text):
            uid = e.get("uid", {}) if isinstance(e, dict) else {}
            if isinstance(uid, dict) and uid.get("type") == "User":
                tenant = (e.get("attrs") or {}).get("tenant", "example")
                out.append(Subject(tenant=str(tenant), id=str(uid.get("id", ""))))
                if len(out) >= most:
                    break
    except ValueError:
        pass  # not an array, or an entity that does not decode: the engine's load reports it
    return out


def _type_rules(policy_dir: Path, decls: Sequence[ToolDecl], texts: Mapping[str, str]) -> list[Problem]:
    """Each capability a ToolSpec requires that ``schema.cedarschema`` declares by hand must type
    ``context.args`` as the ToolSpec does, and have a context a request can carry."""
    from callgate.policy.declare import (
        GROUPS,
        Problem,
        admits_more,
        arg_place,
        type_diff,
    )
    from callgate.policy.engines.cedar_declare import cedar_declared_contexts

    schema_path = policy_dir / FOLDER / SCHEMA_FILE
    if not schema_path.is_file():
        return []
    problems: list[Problem] = []
    contexts = cedar_declared_contexts(schema_path.read_text(encoding="utf-8", errors="replace"))
    for d in decls:
        for cap in d.capabilities:
            if cap not in contexts or cap in GROUPS:
                continue
            never = contexts[cap].never_matches()
            if never is not None:
                problems.append(
                    Problem(
                        d.source,
                        f"tool {d.key}",
                        f"no request can ever be allowed: action {cap} in {schema_path} {never}; "
                        "every request carries context { tenant: String, tool: String, args: { ... } } "
                        "(delete the declaration to have it generated from the ToolSpec, "
                        "docs/POLICIES.md)",
                        warning=True,
                    )
                )
                continue
            cedar_args = contexts[cap].args
            if cedar_args is not None:
                problems.extend(admits_more(d, cap, schema_path, cedar_args, texts[d.source]))
            if cedar_args is None or d.args is None:
                continue  # not a literal record (Cedar validates requests at evaluation)
            for msg in type_diff("", d.args, cedar_args, {u.path for u in d.unseen}):
                arg = msg.split(":", 1)[0]
                problems.append(
                    Problem(d.source, arg_place(texts[d.source], arg), f"{cap} in {schema_path}: args.{msg}")
                )
    return problems


def _rules(tool: NewTool) -> str:
    return (
        f'\n// {tool.name}@{tool.version} (callgate new tool): principals in Role::"{tool.role}", in their own tenant.\n'
        f'// Edit: who may call it, and @confirm("why") on a permit that needs the user\'s confirmation.\n'
        f'@id("{tool.policy_id}")\n'
        f'permit (principal in Role::"{tool.role}", action == Action::"{tool.name}", resource)\n'
        f"when {{ principal.tenant == context.tenant }};\n"
    )


def _scaffold(policy_dir: Path, tool: NewTool) -> Scaffolded:
    """The tool's rules appended to ``cedar/policies.cedar`` (refused when a policy there has
    the same id)."""
    if not (policy_dir / FOLDER).is_dir():
        return Scaffolded()
    path = policy_dir / FOLDER / POLICIES_FILE
    conflict = ""
    if path.exists() and f'@id("{tool.policy_id}")' in path.read_text(encoding="utf-8"):
        conflict = f'{path} has a policy @id("{tool.policy_id}") already'
    return Scaffolded(appended=((path, _rules(tool)),), conflict=conflict)


def _render(policy_dir: Path, declared: Declared, /) -> Mapping[Path, str]:
    """The declarations in Cedar (:func:`callgate.policy.engines.cedar_declare.render`)."""
    from callgate.policy.engines.cedar_declare import render

    return render(policy_dir, declared)


CEDAR_FOLDER: Final = PolicyFolder(
    name=FOLDER,
    reads=_reads,
    reads_text="it reads every *.cedar file, schema.cedarschema and entities.json",
    hand_declared=_hand_declared,
    schema_actions=_schema_actions,
    principals=_principals,
    type_rules=_type_rules,
    scaffold=_scaffold,
    render_declarations=_render,
    closes_nested=True,
)

CEDAR: Final = EngineFactory(
    name=ENGINE,
    doc="embedded Cedar (cedarpy), the default; files in <policy dir>/cedar/",
    load=_load,
    folder=CEDAR_FOLDER,
    warnings=_warnings,
    load_for_core=_load_for_core,
)
"""Registered in :mod:`callgate.policy.engines.registry`."""

__all__ = ["CEDAR", "CEDAR_FOLDER"]
