"""The one tool-name rule (docs/MCP.md "Tool names"; the same rule in clients/ts/src/names.ts).
Pure and dependency-free: the client, the ToolSpec loader and the MCP importer all use it.

Three forms of a name, each a function of the one before:

* **upstream name**: what an MCP server lists. The MCP specification allows 1-128 characters of
  ``[A-Za-z0-9_.-]``, case-sensitive (kebab-case and camelCase are common).
* **callgate name**: a ToolSpec's ``name``. Dot-separated segments of letters, digits and ``-``,
  with single ``_`` between them (no ``__``, no segment starting or ending with ``_``), at most
  128 characters, case-sensitive. ``callgate mcp import`` writes ``<upstream>.<tool>`` when that
  is a callgate name (``everything.get-tiny-image``, ``srv.getTinyImage``, ``srv.2fa``); any other
  upstream name (``__``, a ``_`` next to a ``.``, an empty segment, too long) is cleaned the same
  documented way and given ``-<8 hex of sha256(upstream name)>``, so it cannot take another
  tool's name. The ToolSpec's ``upstream.tool`` keeps the upstream name: the gateway routes by it.
* **model-facing (wire) name**: what a model and an MCP client see, within what OpenAI function
  calling and most MCP clients accept (``^[a-zA-Z0-9_-]{1,64}$``). Each ``.`` becomes ``__``
  (``weather.get`` -> ``weather__get``). A callgate name never contains ``__`` nor a ``_`` next to a
  ``.``, so this is reversible by replacing ``__`` with ``.``. A wire name longer than 64 is cut
  to 49 characters and given ``___<12 hex of sha256(callgate name)>``; ``___`` never occurs in
  the plain form, so these resolve only through the listed tool set (an unknown name is refused).

The capability ``import`` writes is ``mcp.<upstream>.<tool>`` in the capability alphabet
(lower_snake_case, camelCase split at its humps, other characters as ``_``): policies name it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MAX_NAME: Final = 128
"""Characters in an upstream name (MCP) and in a callgate name."""
MAX_WIRE: Final = 64
"""Characters in a model-facing name."""
MCP_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""A tool name the MCP specification allows."""
_SEGMENT = r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*"
TOOL_NAME: Final = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
"""A callgate tool name (ToolSpec ``name``), at most :data:`MAX_NAME` characters."""
UPSTREAM_NAME: Final = re.compile(_SEGMENT)
"""An MCP upstream's configured name: one segment of a callgate name."""
WIRE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A model-facing name (OpenAI function calling, most MCP clients)."""
HASHED: Final = "___"
"""Marks a shortened model-facing name (never in the plain form of a callgate name)."""
_DIGEST_HEX: Final = 12
_IMPORT_HEX: Final = 8
NAME_RULE: Final = (
    "dot-separated segments of letters, digits and '-' with single '_' between them "
    "(no '__', no '_' at a segment's start or end), at most 128 characters, e.g. weather.get or "
    "everything.get-tiny-image"
)


def tool_name_problem(name: str) -> str | None:
    """Why ``name`` is not a callgate tool name, or None when it is one."""
    if not name or len(name) > MAX_NAME:
        return f"must be 1-{MAX_NAME} characters"
    if not TOOL_NAME.fullmatch(name):
        return f"must be {NAME_RULE}"
    return None


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def wire_name(name: str, version: str | None = None) -> str:
    """The model-facing name of callgate tool ``name``. With ``version`` (a second version of one
    name shown in the same list), the shortened form keyed by ``name@version``."""
    plain = name.replace(".", "__")
    if version is None and len(plain) <= MAX_WIRE:
        return plain
    key = name if version is None else f"{name}@{version}"
    return plain[: MAX_WIRE - len(HASHED) - _DIGEST_HEX] + HASHED + _hex(key, _DIGEST_HEX)


def name_of_wire(wire: str) -> str | None:
    """The callgate name a plain wire name stands for; None for a shortened one (those resolve
    only through the listed tools)."""
    return None if HASHED in wire else wire.replace("__", ".")


def import_name(upstream: str, tool: str) -> str:
    """The callgate name ``callgate mcp import`` gives upstream ``upstream``'s tool ``tool``."""
    plain = f"{upstream}.{tool}"
    if len(plain) <= MAX_NAME and TOOL_NAME.fullmatch(plain):
        return plain
    segments = (re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_-]", "", s)).strip("_") for s in tool.split("."))
    cleaned = ".".join(s for s in segments if s) or "tool"
    suffix = f"-{_hex(tool, _IMPORT_HEX)}"
    head = f"{upstream}.{cleaned}"[: MAX_NAME - len(suffix)].rstrip("_.")
    return head + suffix


def _capability_part(text: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", text).lower()
    part = re.sub(r"[^a-z0-9_]", "_", snake)
    return part if part[:1].isalpha() else "t" + part


def capability_of(upstream: str, tool: str) -> str:
    """``mcp.<upstream>.<tool>`` in the capability alphabet (``getTinyImage`` -> ``get_tiny_image``,
    ``get-env`` -> ``get_env``, ``2fa`` -> ``t2fa``)."""
    return f"mcp.{_capability_part(upstream)}.{_capability_part(tool)}"


def distinct_capability(upstream: str, tool: str) -> str:
    """The capability of a tool whose :func:`capability_of` another tool of the same upstream
    already has (``get-x`` and ``get_x``): suffixed with 8 hex of sha256(upstream name)."""
    return f"{capability_of(upstream, tool)}_{_hex(tool, _IMPORT_HEX)}"


__all__ = [
    "HASHED",
    "MAX_NAME",
    "MAX_WIRE",
    "MCP_NAME",
    "NAME_RULE",
    "TOOL_NAME",
    "UPSTREAM_NAME",
    "WIRE_NAME",
    "capability_of",
    "distinct_capability",
    "import_name",
    "name_of_wire",
    "tool_name_problem",
    "wire_name",
]
