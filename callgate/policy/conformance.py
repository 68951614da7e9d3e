"""Which argument a request that Cedar found not conforming to the schema is about (issue 27).

The Cedar engines (cedarpy and the compiled core) validate every request against the schema and
answer one that does not conform with a deny marked :data:`NOT_CONFORMING`, whose diagnostics
name no argument (or name a leaf without its path, and echo values). Cedar decides; this module
only *locates* the first argument that the action's hand-written ``context.args`` record (as
:func:`callgate.policy.declare.cedar_declared_contexts` reads it) has no room for: an undeclared
member, a missing required one, or a value of another kind. The Propose stage turns it into a
``schema_violation`` naming the pointer and the action, before any policy effect is reported.
Messages name kinds and places, never values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from callgate.base.errors import Violation
from callgate.policy.declare import TIME_TYPES, ActionContext, ArgType

NOT_CONFORMING: Final = "request does not conform to the Cedar schema"
"""The message of the deny reason both Cedar engines give a request that does not conform."""


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Long"
    if isinstance(value, (float, Decimal)):
        return "decimal"
    if isinstance(value, str):
        return "String"
    if isinstance(value, list):
        return "Set"
    if isinstance(value, dict):
        return "Record"
    return "value"


def misfit(value: Any, declared: ArgType, pointer: str = "") -> tuple[str, str] | None:
    """The first place (pointer, what) where ``value`` does not fit ``declared``, or None."""
    if value is None:
        return None  # dropped on the way to Cedar (it has no null)
    kind = _kind(value)
    if declared.kind == "Record":
        if kind != "Record":
            return pointer, f"a {kind} where the schema declares a record"
        have = {n: (t, r) for n, t, r in declared.fields}
        for name, sub in value.items():
            if name not in have and sub is not None:
                return f"{pointer}/{_esc(name)}", "not declared in the record"
        for name, (t, required) in have.items():
            if value.get(name) is None:
                if required:
                    return f"{pointer}/{_esc(name)}", "required by the record, missing"
                continue
            found = misfit(value[name], t, f"{pointer}/{_esc(name)}")
            if found is not None:
                return found
        return None
    if declared.kind == "Set":
        if kind != "Set":
            return pointer, f"a {kind} where the schema declares {declared.cedar()}"
        assert declared.element is not None
        for i, item in enumerate(value):
            found = misfit(item, declared.element, f"{pointer}/{i}")
            if found is not None:
                return found
        return None
    if declared.kind in TIME_TYPES or kind == declared.kind:
        return None  # time values are built from the schema (callgate/policy/timevalues.py)
    if declared.kind == "decimal" and kind in ("String", "Long"):
        return None  # a decimal normalizer's value (a decimal string until the engine's)
    if declared.kind == "Long" and isinstance(value, float) and value.is_integer():
        return None  # an integral JSON number reaches Cedar as a Long
    return pointer, f"a {kind} where the schema declares {declared.cedar()}"


def conformance_violations(
    contexts: Mapping[str, ActionContext], capabilities: Sequence[str], args: Any
) -> list[Violation]:
    """One violation naming the argument (pointer into the arguments) and the action whose
    declared ``context.args`` cannot hold ``args``; when none of ``capabilities`` has a literal
    record that shows it, one violation at the root naming the actions (Cedar still decided)."""
    for cap in capabilities:
        ctx = contexts.get(cap)
        declared = ctx.args if ctx is not None else None
        if declared is None:
            continue
        found = misfit(args, declared)
        if found is not None:
            pointer, what = found
            return [
                Violation(
                    pointer=pointer,
                    message=f"{what} (context.args of action '{cap}' in the Cedar schema)",
                    keyword="cedar_schema",
                )
            ]
    names = ", ".join(f"'{c}'" for c in capabilities)
    return [
        Violation(
            pointer="",
            message=f"the request does not conform to the context of action {names} in the Cedar schema",
            keyword="cedar_schema",
        )
    ]


__all__ = ["NOT_CONFORMING", "conformance_violations", "misfit"]
