"""Pinning upstream tool definitions (issue 11 item 2): the digest of one upstream definition,
the ToolSpec ``callgate mcp import`` writes for it, and the comparison ``callgate mcp check`` and
the gateway make against the live upstream.

The pin is ``"upstream": {"server", "tool", "definition_sha256"}`` in the ToolSpec, where
``definition_sha256`` is the hex sha256 of the RFC 8785 bytes of the definition's ``name``,
``description``, ``inputSchema``, ``outputSchema`` and ``annotations`` (members that are absent
stay absent). Anything else an upstream may send (icons, ``_meta``, title) is not pinned.

Beside the digest the block keeps what the gateway shows of the upstream's own definition
besides the ToolSpec: its top-level ``title`` and its ``annotations`` as listed (members
absent when the upstream sent none), so a tool shown from its pin before its upstream is listed
(docs/MCP.md, "Start-up") looks as it does once listed. They are not part of the digest (the
annotations are, as listed; the copy is for display and never compared). A pin written before
they were kept has neither: such a tool is shown from its pin with callgate's annotations only
until its upstream is listed (``callgate mcp import`` adds them, as an update, when run again).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import rfc8785

from callgate.client.names import capability_of, import_name
from callgate.mcp.argtypes import decimal_normalizers, normalized_schema, upstream_number_fields

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
PINNED_MEMBERS = ("name", "description", "inputSchema", "outputSchema", "annotations")
SHOWN_MEMBERS = ("title", "annotations")
"""What the pin keeps of the listed definition for ``tools/list`` (not digested there)."""


class SideEffect(str, Enum):
    """The ToolSpec ``side_effect_class`` values (spec 6.1)."""

    READ_ONLY = "read_only"
    CREATE = "create"
    MODIFY = "modify"
    DELETE = "delete"


class PinState(str, Enum):
    """How a live upstream tool compares with its pin."""

    MATCH = "match"
    CHANGED = "changed"
    MISSING = "missing"
    """Pinned, but the upstream no longer lists it."""
    NEW = "new"
    """Listed by the upstream, but not pinned (never shown nor called)."""


def definition_of(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The pinned members of one ``tools/list`` entry (camelCase wire form)."""
    return {k: tool[k] for k in PINNED_MEMBERS if k in tool and tool[k] is not None}


def shown_of(tool: Mapping[str, Any]) -> dict[str, Any]:
    """What the pin keeps for display: the upstream's ``title`` (a non-empty string) and
    ``annotations`` (an object) as listed, each only when the upstream sent it."""
    out: dict[str, Any] = {}
    if isinstance(tool.get("title"), str) and tool["title"]:
        out["title"] = tool["title"]
    if isinstance(tool.get("annotations"), Mapping):
        out["annotations"] = dict(tool["annotations"])
    return out


def definition_sha256(tool: Mapping[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(definition_of(tool))).hexdigest()


def spec_name(upstream: str, tool: str) -> str:
    """The ToolSpec name ``callgate mcp import`` gives an upstream tool (the one rule,
    :func:`callgate.client.names.import_name`: ``<upstream>.<tool>`` when that is a callgate
    name)."""
    return import_name(upstream, tool)


def proposed_side_effect(tool: Mapping[str, Any]) -> SideEffect:
    """A proposal from the annotations (MCP defaults: not read-only, destructive): read-only
    hinted -> ``read_only``; ``destructiveHint: false`` -> ``create``; otherwise ``modify``."""
    ann = tool.get("annotations") or {}
    if ann.get("readOnlyHint") is True:
        return SideEffect.READ_ONLY
    if ann.get("destructiveHint") is False:
        return SideEffect.CREATE
    return SideEffect.MODIFY


def read_only_hinted(tool: Mapping[str, Any]) -> bool:
    return bool((tool.get("annotations") or {}).get("readOnlyHint") is True)


def toolspec_for(
    upstream: str, tool: Mapping[str, Any], side_effect: SideEffect, *, version: str = "v1",
    timeout_seconds: float = 30.0, capability: str | None = None, name: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The ToolSpec document for one upstream tool (input schema as the upstream declared it);
    ``name`` and ``capability`` default to the rule's (:mod:`callgate.client.names`)."""
    name = name or spec_name(upstream, str(tool["name"]))
    doc: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": str(tool.get("description") or ""),
        "schema_dialect": SCHEMA_DIALECT,
        "input_schema": {k: v for k, v in dict(tool.get("inputSchema") or {}).items() if k != "$schema"},
    }
    normalizers = decimal_normalizers(doc["input_schema"])
    if normalizers:  # JSON numbers: Cedar decimals (callgate/mcp/argtypes.py)
        doc["normalizers"] = normalizers
    doc["normalized_schema"] = normalized_schema(doc["input_schema"])  # closed, as Cedar records
    if tool.get("outputSchema") is not None:
        doc["output_schema"] = {k: v for k, v in dict(tool["outputSchema"]).items() if k != "$schema"}
    doc.update(
        {
            "side_effect_class": side_effect.value,
            "required_capabilities": [capability or capability_of(upstream, str(tool["name"]))],
            "resource_template": f"mcp:{name}",
            "timeout_policy": {"timeout_ms": max(1, int(timeout_seconds * 1000))},
            "retry_policy": {"max_attempts": 2, "initial_backoff_ms": 100, "max_backoff_ms": 1000},
            "idempotency": {"supported": True, "without_key": "allow"},
            "upstream": {
                "server": upstream,
                "tool": str(tool["name"]),
                "definition_sha256": definition_sha256(tool),
                **shown_of(tool),
            },
        }
    )
    return doc


@dataclass(frozen=True)
class Pin:
    """One pinned tool as read from the tools folder."""

    spec_name: str
    version: str
    server: str
    tool: str
    definition_sha256: str
    path: Path
    timeout_ms: int = 30000
    """The ToolSpec's ``timeout_policy.timeout_ms``: how long the upstream call may take."""
    has_output_schema: bool = False
    """The ToolSpec declares ``output_schema`` (then results also go out as structuredContent)."""
    idempotency_supported: bool = False
    """The ToolSpec's ``idempotency.supported``: writes without a client key get a derived one."""
    read_only: bool = False
    """The ToolSpec's ``side_effect_class`` is ``read_only``: no derived key (an identical read
    runs again instead of replaying an old, possibly stale, answer)."""
    number_fields: tuple[str, ...] = ()
    """Fields the ToolSpec normalizes to decimal strings that the upstream takes as JSON numbers
    (sent to it as numbers again: callgate/mcp/argtypes.py)."""
    shown: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    """The upstream's ``title`` and ``annotations`` as listed at import (:func:`shown_of`; the
    pin's ``upstream`` block), or None: a pin written before they were kept."""


def upstream_docs(tools_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each ToolSpec file in ``tools_dir`` that carries an ``upstream`` block, parsed (files
    that do not parse are skipped: the sidecar's loader reports them)."""
    if not tools_dir.is_dir():
        return
    for path in sorted(tools_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("upstream"), dict):
            yield path, doc


def _shown_in(upstream: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``title`` and ``annotations`` an ``upstream`` block keeps (None when it keeps
    neither: written before they were kept)."""
    if not any(k in upstream for k in SHOWN_MEMBERS):
        return None
    return shown_of(upstream)


def read_pins(tools_dir: Path) -> list[Pin]:
    """Every ToolSpec in ``tools_dir`` that carries an ``upstream`` block (others are ignored:
    the gateway never shows a tool it cannot route)."""
    pins: list[Pin] = []
    for path, doc in upstream_docs(tools_dir):
        up = doc["upstream"]
        timeout = (doc.get("timeout_policy") or {}).get("timeout_ms", 30000)
        try:
            pins.append(
                Pin(
                    str(doc["name"]), str(doc["version"]), str(up["server"]), str(up["tool"]),
                    str(up["definition_sha256"]), path,
                    timeout_ms=timeout if isinstance(timeout, int) and timeout > 0 else 30000,
                    has_output_schema=isinstance(doc.get("output_schema"), dict),
                    idempotency_supported=(doc.get("idempotency") or {}).get("supported") is True,
                    read_only=doc.get("side_effect_class") == "read_only",
                    number_fields=upstream_number_fields(doc),
                    shown=_shown_in(up),
                )
            )  # fmt: skip
        except KeyError:
            continue
    return pins


@dataclass(frozen=True)
class Comparison:
    """A pinned or listed tool and how it compares."""

    server: str
    tool: str
    state: PinState
    spec_name: str


def compare(server: str, pins: Sequence[Pin], listed: Sequence[Mapping[str, Any]]) -> list[Comparison]:
    """Pins of ``server`` against what it lists now."""
    live = {str(t["name"]): definition_sha256(t) for t in listed}
    mine = [p for p in pins if p.server == server]
    out: list[Comparison] = []
    for p in mine:
        if p.tool not in live:
            out.append(Comparison(server, p.tool, PinState.MISSING, p.spec_name))
        elif live[p.tool] != p.definition_sha256:
            out.append(Comparison(server, p.tool, PinState.CHANGED, p.spec_name))
        else:
            out.append(Comparison(server, p.tool, PinState.MATCH, p.spec_name))
    pinned = {p.tool for p in mine}
    for name in sorted(live):
        if name not in pinned:
            out.append(Comparison(server, name, PinState.NEW, spec_name(server, name)))
    return out


def write_toolspec(tools_dir: Path, doc: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write ``doc`` to ``path`` (default ``<name>@<version>.json`` in ``tools_dir``)."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    path = path or tools_dir / f"{doc['name']}@{doc['version']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


__all__ = [
    "Comparison",
    "Pin",
    "PinState",
    "SideEffect",
    "capability_of",
    "compare",
    "definition_of",
    "definition_sha256",
    "proposed_side_effect",
    "read_only_hinted",
    "read_pins",
    "shown_of",
    "spec_name",
    "toolspec_for",
    "upstream_docs",
    "write_toolspec",
]
