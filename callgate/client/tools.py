"""Tool lists in a provider's dialect, with a reversible mapping of names.

callgate's tool names (``weather.get``) contain dots, which OpenAI-style function calling and
several MCP clients refuse (``^[a-zA-Z0-9_-]{1,64}$``). :class:`ToolNames` maps each tool to its
model-facing name by the one rule of :mod:`callgate.client.names` (docs/MCP.md "Tool names"; the
TypeScript client and the MCP gateway use the same): ``.`` becomes ``__``, a name longer than 64
is cut and given ``___`` and a digest, and a second version of one name shown in the same list gets
the digest of ``name@version``. The model answers with that name; :meth:`ToolNames.resolve`
gives back the tool (name and version) to propose, and an unknown name resolves to nothing (the
client then proposes it as is and the sidecar rejects it as an unknown tool: fail closed).

Schemas: ``openai`` uses strict mode (no ``$schema``, every property required with optional ones
made nullable, ``additionalProperties: false`` on every object); ``anthropic`` and ``mcp`` keep
the schema but drop ``$schema``. Descriptions are kept everywhere. ``mcp`` also shows a tool's
``output_schema`` as ``outputSchema`` (without ``$schema``): the sidecar refuses to hand the
model a result that does not conform to it (``result_schema_invalid``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from callgate.client.errors import MalformedAnswer
from callgate.client.names import WIRE_NAME, wire_name

LEGAL_NAME = WIRE_NAME
"""What OpenAI function calling and several MCP clients accept as a tool name."""


class Dialect(Enum):
    """The providers' tool formats :meth:`Session.tools` can produce."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    MCP = "mcp"


@dataclass(frozen=True)
class Tool:
    """One tool as the sidecar listed it (``input_schema`` parsed)."""

    name: str
    version: str
    description: str
    input_schema: Mapping[str, Any]
    side_effect_class: str
    spec_digest: str
    output_schema: Mapping[str, Any] | None = None
    """The ToolSpec's ``output_schema`` (parsed), None when it declares none."""


@dataclass(frozen=True)
class ToolNames:
    """Legal name <-> (tool name, version) for one tool list."""

    by_legal: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    by_tool: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def build(tools: Sequence[Tool]) -> ToolNames:
        by_legal: dict[str, tuple[str, str]] = {}
        by_tool: dict[str, str] = {}
        for t in sorted(tools, key=lambda t: (t.name, t.version)):
            legal = wire_name(t.name)
            if legal in by_legal:  # a second version of one name shown
                legal = wire_name(t.name, t.version)
            if legal in by_legal:  # two digests equal: show neither twice (never seen; fail closed)
                raise MalformedAnswer(f"tool {t.name}@{t.version}: model-facing name {legal} is taken")
            by_legal[legal] = (t.name, t.version)
            by_tool[f"{t.name}@{t.version}"] = legal
        return ToolNames(by_legal=by_legal, by_tool=by_tool)

    def legal(self, name: str, version: str) -> str:
        return self.by_tool[f"{name}@{version}"]

    def resolve(self, legal: str) -> tuple[str, str] | None:
        """The (tool name, version) behind a legal name; None when this list has no such name."""
        return self.by_legal.get(legal)


legal_name = wire_name
"""The model-facing name of a tool name (:func:`callgate.client.names.wire_name`)."""


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI strict mode: no ``$schema``; on every object all properties required (optional
    ones made nullable) and ``additionalProperties: false``; everything else kept."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if k != "$schema"}
        props = out.get("properties")
        if isinstance(props, dict) and (out.get("type") == "object" or "properties" in out):
            required = set(node.get("required", []))
            for key, sub in props.items():
                if key not in required and isinstance(sub, dict):
                    props[key] = _nullable(sub)
            out["required"] = list(props)
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = walk(copy.deepcopy(dict(schema)))
    return result


def _nullable(sub: dict[str, Any]) -> dict[str, Any]:
    t = sub.get("type")
    if isinstance(t, str):
        return {**sub, "type": [t, "null"]} if t != "null" else sub
    if isinstance(t, list):
        return sub if "null" in t else {**sub, "type": [*t, "null"]}
    return {"anyOf": [sub, {"type": "null"}]}


def plain_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema without ``$schema`` (Anthropic and MCP)."""
    return {k: copy.deepcopy(v) for k, v in schema.items() if k != "$schema"}


def render(tools: Sequence[Tool], names: ToolNames, dialect: Dialect) -> list[dict[str, Any]]:
    """The tool list in ``dialect``'s own shape."""
    out: list[dict[str, Any]] = []
    for t in tools:
        name = names.legal(t.name, t.version)
        if dialect is Dialect.OPENAI:
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": t.description,
                        "parameters": strict_schema(t.input_schema),
                        "strict": True,
                    },
                }
            )
        elif dialect is Dialect.ANTHROPIC:
            out.append(
                {"name": name, "description": t.description, "input_schema": plain_schema(t.input_schema)}
            )
        else:
            tool = {"name": name, "description": t.description, "inputSchema": plain_schema(t.input_schema)}
            if t.output_schema is not None:
                tool["outputSchema"] = plain_schema(t.output_schema)
            out.append(tool)
    return out


def strip_nulls_for_strict(arguments: bytes, schema: Mapping[str, Any]) -> bytes:
    """Undo strict mode's nullable optionals: a top-level ``null`` for a property the tool does
    not require is dropped (the model had to send it). Anything else is passed through untouched
    (the sidecar's strict parser and validator judge the bytes): bytes that are not JSON, not an
    object, or that repeat a key anywhere are sent as they are, so the sidecar's strict parse
    refuses them (re-serializing would keep one of the duplicates silently)."""
    try:
        value = json.loads(arguments, object_pairs_hook=_unique_object)
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments
    required = set(schema.get("required", []))
    drop = [k for k, v in value.items() if v is None and k not in required]
    if not drop:
        return arguments
    return json.dumps({k: v for k, v in value.items() if k not in drop}, ensure_ascii=False).encode()


def repeats_a_key(arguments: bytes | str) -> bool:
    """Whether ``arguments`` are JSON that repeats a key in some object (a parse that keeps one
    of them, as ``json.loads`` or an SDK does, silently changes what was sent)."""
    try:
        json.loads(arguments, object_pairs_hook=_unique_object)
    except ValueError as err:
        return str(err) == _REPEATED
    return False


_REPEATED = "duplicate key"


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a repeated key is a ``ValueError``, never last-one-wins."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError(_REPEATED)
    return out


def _schema(name: str, version: str, label: str, text: str) -> dict[str, Any]:
    try:
        schema = json.loads(text)
    except ValueError:
        raise MalformedAnswer(f"tool {name}@{version}: {label}_schema_json is not JSON") from None
    if not isinstance(schema, dict):
        raise MalformedAnswer(f"tool {name}@{version}: {label} schema is not an object")
    return schema


def parse_tool(
    name: str,
    version: str,
    description: str,
    schema_json: str,
    effect: str,
    digest: str,
    output_schema_json: str = "",
) -> Tool:
    schema = _schema(name, version, "input", schema_json)
    output = _schema(name, version, "output", output_schema_json) if output_schema_json else None
    return Tool(name, version, description, schema, effect, digest, output)


__all__ = [
    "LEGAL_NAME",
    "Dialect",
    "Tool",
    "ToolNames",
    "legal_name",
    "plain_schema",
    "render",
    "strict_schema",
]
