"""The Rego rendering of what the ToolSpecs and ``principals.json`` declare once
(:mod:`callgate.policy.declare`): ``data.callgate.schema.actions[<capability>]``, which
``schema.rego`` checks requests against (``{"member_of": [...], "args": {name: {"type": ...,
"optional": ...}}}``), and ``data.callgate.entities``, merged with ``rego/data.json``.

:func:`render` is the Rego folder's
:attr:`~callgate.policy.engines.factory.PolicyFolder.render_declarations` (shared by the ``rego``
and ``opa`` engines); the Rego contract's load (:mod:`callgate.policy.engines.rego_contract`) and
the factory call :func:`rego_data`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from callgate.base.errors import policy_invalid
from callgate.base.model import JSONValue
from callgate.policy.declare import (
    GROUPS,
    TIME_TYPES,
    ArgType,
    Declared,
    Principals,
    ToolDecl,
    actions_of,
    read_json,
)
from callgate.policy.engines.rego_factory import DATA_FILE, FOLDER
from callgate.policy.textflags import TEXT_KEY
from callgate.policy.timevalues import MILLIS_KEY, NOW_KEY

__all__ = ["REGO_OPTIONAL_CONTEXT", "principal_entities", "rego_action", "rego_data", "rego_type", "render"]


REGO_OPTIONAL_CONTEXT: Final = "optional_context"
"""``data.callgate.schema.optional_context``: context attributes a request may lack (schema.rego)."""


def rego_type(t: ArgType) -> str:
    """The type name ``schema.rego`` checks (``Decimal`` for ``decimal``; a ``datetime`` or
    ``duration`` argument is its RFC 3339 / ISO 8601 ``String`` in Rego)."""
    if t.kind in TIME_TYPES:
        return "String"
    return "Decimal" if t.kind == "decimal" else t.kind


def rego_action(decl: ToolDecl) -> dict[str, JSONValue]:
    """``data.callgate.schema.actions[<capability>]`` as ``decl`` types it."""
    assert decl.args is not None
    args: dict[str, JSONValue] = {}
    for name, t, required in decl.args.fields:
        entry: dict[str, JSONValue] = {"type": rego_type(t)}
        if not required:
            entry["optional"] = True
        args[name] = entry
    return {"member_of": [decl.group], "args": args}


def principal_entities(principals: Principals) -> dict[str, JSONValue]:
    """``data.callgate.entities`` of ``principals.json``: roles, users, static resources."""
    return {
        "roles": {r: {"parents": list(p)} for r, p in principals.roles.items()},
        "users": {u: {"tenant": t, "roles": list(rs)} for u, (t, rs) in principals.users.items()},
        "resources": {
            rid: {"kind": rid.partition(":")[0], "name": rid.partition(":")[2], "tenant": t}
            for rid, t in principals.resources.items()
        },
    }


def rego_data(declared: Declared, legacy: Mapping[str, Any], legacy_source: str) -> dict[str, Any]:
    """``data.json``'s document plus what is declared once: ``callgate.schema`` actions the
    file does not declare, and ``callgate.entities`` from the principals file."""
    root = dict(legacy.get("callgate", {}))
    schema = dict(root.get("schema", {}))
    if "context" not in schema:  # a data.json that declares its context keeps it exactly
        schema["context"] = {
            "tenant": "String",
            "tool": "String",
            NOW_KEY: "String",
            MILLIS_KEY: "Record",
        }
        schema.setdefault(REGO_OPTIONAL_CONTEXT, {TEXT_KEY: "Record"})
    schema.setdefault("groups", list(GROUPS))
    actions = dict(schema.get("actions", {}))
    strict = "actions" not in schema
    for cap, decl in sorted(actions_of(declared.tools, actions, strict=strict).items()):
        actions[cap] = rego_action(decl)
    schema["actions"] = actions
    root["schema"] = schema
    if declared.principals is not None:
        if "entities" in root:
            raise policy_invalid(
                f"users and roles are declared twice: in {declared.principals.source} and in "
                "callgate.entities here; keep principals.json (data.json's entities are the legacy form)",
                source=legacy_source,
            )
        root["entities"] = principal_entities(declared.principals)
    root.setdefault("entities", {"roles": {}, "users": {}, "resources": {}})
    return {"callgate": root}


def render(policy_dir: Path, declared: Declared) -> Mapping[Path, str]:
    """``<policy_dir>/rego/data.json`` as the engine loads it: the file's document (where
    present) merged with what ``declared`` declares, as the Rego contract serializes it. Raises
    LoadError."""
    path = policy_dir / FOLDER / DATA_FILE
    legacy = read_json(path) if path.exists() else {}
    if not isinstance(legacy, Mapping):
        raise policy_invalid("data.json must be a JSON object", source=str(path))
    return {path: json.dumps(rego_data(declared, legacy, str(path)), ensure_ascii=False, sort_keys=True)}
