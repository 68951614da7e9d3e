"""Upstream tool arguments as policies type them (issue 27 item 3; docs/MCP.md, "Arguments as
policies see them").

**Closed objects.** A generated Cedar action types ``context.args`` as a record of the declared
properties, and a Cedar record has no room for others: a call with an undeclared argument could
never conform to the schema, and Cedar would answer it with an evaluation error (a deny that
names no argument). So the ``normalized_schema`` :func:`normalized_schema` writes closes every
object that declares ``properties`` (``additionalProperties: false``): such a call is refused
before the policy, as ``schema_violation`` with the argument's pointer.

**Numbers.**
A JSON number has no exact policy type (a float is not a Cedar value), so ``callgate mcp import``
declares one: every ``number`` field of an upstream's ``inputSchema`` (also inside objects and
array items) gets a ``decimal`` normalizer with scale :data:`SCALE` (Cedar's ``decimal`` has four
fractional digits) and the schema's ``minimum``/``maximum`` as its range, and the ToolSpec gets a
``normalized_schema`` in which those fields are decimal strings. Policies then see a Cedar
``decimal`` (``context.args.a.lessThan(decimal("100.0"))``) and the generated action types it so.
A value with more fractional digits than the scale, or outside Cedar's decimal range, is refused
(``decimal_invalid``), never rounded.

The upstream still expects numbers: :func:`as_numbers` turns the normalized decimal strings of a
call back into JSON numbers before the gateway sends it (the value the client sent, as the
upstream's own JSON parser would have read it).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final
from urllib.parse import unquote

from callgate.base import jsonpointer
from callgate.policy.declare import close_objects
from callgate.policy.timevalues import non_null

SCALE: Final = 4
"""Fractional digits kept for a ``number`` argument (Cedar ``decimal``'s maximum)."""

_DECIMAL: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_RANGE: Final = {"minimum": "minimum", "maximum": "maximum"}


def _types(node: Mapping[str, Any]) -> list[str]:
    raw = node.get("type")
    return (
        [raw]
        if isinstance(raw, str)
        else [t for t in raw if isinstance(t, str)]
        if isinstance(raw, list)
        else []
    )


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def number_fields(schema: Any, pointer: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(field pointer, schema node)`` of every ``number`` field (``*`` for array items) reached
    through ``properties``, ``items``, the one branch of a nullable union (``Optional[float]``:
    :func:`~callgate.policy.timevalues.non_null`; the node is that branch), a local ``$ref``
    (``#/$defs/Model``: the node is in the target, so every field that reaches it is a number
    field) and a one-schema ``allOf`` wrapper; other combinators are left to the policy typing,
    which leaves that one argument out of ``context.args``. A recursive ``$ref`` is not followed
    again (its fields have no policy type anyway)."""
    yield from _number_fields(schema, pointer, schema, frozenset())


def _number_fields(
    schema: Any, pointer: str, root: Any, refs: frozenset[str]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    schema = _deref(schema, root, refs)
    if schema is None:
        return
    node, refs = schema
    kinds = _types(node)
    if pointer and "number" in kinds:
        yield pointer, node
        return
    props = node.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            yield from _number_fields(sub, f"{pointer}/{_esc(str(name))}", root, refs)
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _number_fields(items, f"{pointer}/*", root, refs)


def _deref(node: Any, root: Any, refs: frozenset[str]) -> tuple[Mapping[str, Any], frozenset[str]] | None:
    """``node`` with nullable unions, one-schema ``allOf`` wrappers and local ``$ref`` s
    unwrapped (None: not a schema object, or a ``$ref`` already followed on this path)."""
    while isinstance(node, Mapping):
        inner = non_null(node)
        if inner is not node:
            node = inner
            continue
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and "type" not in node and "properties" not in node:
            node = all_of[0]
            continue
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#") or ref in refs:
                return None
            node, refs = _target(root, unquote(ref[1:])), refs | {ref}
            continue
        return node, refs
    return None


def _target(root: Any, pointer: str) -> Any:
    node = root
    try:
        tokens = jsonpointer.split(pointer)
    except ValueError:
        return None
    for token in tokens:
        if not isinstance(node, Mapping) or token not in node:
            return None
        node = node[token]
    return node


def decimal_normalizers(input_schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ``decimal`` normalizer per ``number`` field, its range from the schema."""
    out: list[dict[str, Any]] = []
    for field, node in number_fields(input_schema):
        spec: dict[str, Any] = {"kind": "decimal", "field": field, "scale": SCALE}
        for key, option in _RANGE.items():
            bound = node.get(key)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                spec[option] = bound
        out.append(spec)
    return out


def normalized_schema(input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``input_schema`` as the policy sees the arguments: objects closed, each ``number`` field a
    decimal string (what the normalizers make of it; validated again after normalization)."""
    out = copy.deepcopy(dict(input_schema))
    close_objects(out)
    for _, node in list(number_fields(out)):
        assert isinstance(node, dict)
        kinds = ["string" if k == "number" else k for k in _types(node) if k != "integer"]
        keep = {k: v for k, v in node.items() if k in ("description", "title")}
        node.clear()
        node.update(keep)
        node["type"] = kinds[0] if len(kinds) == 1 else sorted(set(kinds))
        node["pattern"] = r"^-?[0-9]+(\.[0-9]+)?$"
    return out


def upstream_number_fields(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """Fields of a ToolSpec whose ``decimal`` normalizer turns an upstream's number into a string
    the upstream would refuse (its ``input_schema`` allows no string there)."""
    numbers = dict(number_fields(doc.get("input_schema") or {}))
    out = []
    for n in doc.get("normalizers") or []:
        if isinstance(n, Mapping) and n.get("kind") == "decimal" and n.get("field") in numbers:
            if "string" not in _types(numbers[str(n["field"])]):
                out.append(str(n["field"]))
    return tuple(out)


def as_numbers(arguments: Any, fields: tuple[str, ...]) -> Any:
    """``arguments`` with the decimal strings at ``fields`` as JSON numbers again."""
    for field in fields:
        arguments = _convert(arguments, field.split("/")[1:])
    return arguments


def _convert(value: Any, segs: list[str]) -> Any:
    if not segs:
        return json.loads(value) if isinstance(value, str) and _DECIMAL.fullmatch(value) else value
    head, rest = segs[0], segs[1:]
    if head == "*":
        return [_convert(v, rest) for v in value] if isinstance(value, list) else value
    key = head.replace("~1", "/").replace("~0", "~")
    if isinstance(value, dict) and key in value:
        return {**value, key: _convert(value[key], rest)}
    return value


__all__ = [
    "SCALE",
    "as_numbers",
    "decimal_normalizers",
    "normalized_schema",
    "number_fields",
    "upstream_number_fields",
]
