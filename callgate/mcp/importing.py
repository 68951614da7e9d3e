"""What ``callgate mcp import`` writes, as a plan: names for new tools, and a re-import as a
reviewed three-way change (issue 27 items 1 and 2; docs/MCP.md "Re-import").

Names: each new tool gets :func:`callgate.client.names.import_name` and
:func:`~callgate.client.names.capability_of`; a name another tool of the upstream already has is
refused for both new tools (never the set), and a capability another tool has gets the distinct
form (sorted by upstream name: the first keeps the plain one; a pinned tool keeps its own).

Re-import: the import record (``.mcp-import.lock`` in the tools folder, JSON, commit it with the
ToolSpecs) holds, per upstream tool, the ToolSpec as import generated it and the definition it was
generated from. Against it, the ToolSpec on disk shows the operator's edits and the freshly
generated one shows what the upstream changed; per top-level member: unchanged upstream -> the
file's value (edits kept); edited by nobody -> the upstream's; both -> a conflict, refused unless
``--keep-edits``. ``name``, ``version``, ``side_effect_class``, ``required_capabilities`` and
``resource_template`` are the operator's once written. A file found by its ``upstream`` block is
updated where it is (renamed files stay renamed); a tool in the record whose file is gone was
removed by the operator and is not written again unless ``--restore`` names it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from callgate.client.names import capability_of, distinct_capability, import_name
from callgate.mcp.pins import definition_of, upstream_docs

RECORD_FILE = ".mcp-import.lock"
RECORD_VERSION = 1
OPERATOR_OWNED = ("name", "version", "side_effect_class", "required_capabilities", "resource_template")
"""Members import sets once; afterwards the file's value stands."""
FROM_DEFINITION = ("description", "input_schema", "output_schema")
"""Members generated from the upstream definition (taken from it when there is no record)."""


def tool_key(server: str, tool: str) -> str:
    return f"{server}/{tool}"


# ------------------------------------------------------------------ the import record
@dataclass(frozen=True)
class Recorded:
    """One upstream tool as import last generated it."""

    generated: Mapping[str, Any]
    definition: Mapping[str, Any]


def read_record(tools_dir: Path) -> dict[str, Recorded]:
    path = tools_dir / RECORD_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    tools = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(tools, dict):
        raise ValueError(f"{path}: no 'tools' object")
    return {
        k: Recorded(v["generated"], v["definition"])
        for k, v in tools.items()
        if isinstance(v, dict)
        and isinstance(v.get("generated"), dict)
        and isinstance(v.get("definition"), dict)
    }


def write_record(tools_dir: Path, record: Mapping[str, Recorded]) -> Path:
    path = tools_dir / RECORD_FILE
    doc = {
        "comment": "callgate mcp import: each tool as generated, to tell your edits from upstream changes "
        "on the next import (docs/MCP.md). Commit it with the ToolSpecs.",
        "version": RECORD_VERSION,
        "tools": {
            k: {"generated": r.generated, "definition": r.definition} for k, r in sorted(record.items())
        },
    }
    tools_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------ pinned files
@dataclass(frozen=True)
class Pinned:
    """A ToolSpec file on disk with an upstream block."""

    path: Path
    doc: Mapping[str, Any]


def pinned_files(tools_dir: Path) -> dict[str, Pinned]:
    """``server/tool`` -> its file (found by the upstream block, whatever the file is called)."""
    out: dict[str, Pinned] = {}
    for path, doc in upstream_docs(tools_dir):
        up = doc["upstream"]
        if isinstance(up.get("server"), str) and isinstance(up.get("tool"), str):
            out.setdefault(tool_key(up["server"], up["tool"]), Pinned(path, doc))
    return out


# ------------------------------------------------------------------ names
@dataclass(frozen=True)
class Naming:
    name: str
    capability: str


def assign_names(
    server: str, new_tools: Iterable[str], pinned: Mapping[str, Pinned]
) -> tuple[dict[str, Naming], dict[str, str]]:
    """Names and capabilities for ``server``'s new tools, and the refused ones (tool -> why)."""
    mine = [p.doc for k, p in pinned.items() if k.startswith(f"{server}/")]
    taken_names = {str(d.get("name")): str(d["upstream"]["tool"]) for d in mine}
    taken_caps = {c for d in mine for c in d.get("required_capabilities") or [] if isinstance(c, str)}
    tools = sorted(new_tools)
    wanted: dict[str, list[str]] = {}
    for tool in tools:
        wanted.setdefault(import_name(server, tool), []).append(tool)
    out: dict[str, Naming] = {}
    refused: dict[str, str] = {}
    for tool in tools:
        name = import_name(server, tool)
        others = [t for t in wanted[name] if t != tool]
        if name in taken_names:
            others.append(taken_names[name])
        if others:
            refused[tool] = (
                f"its name {name} is also the name of upstream tool(s) {', '.join(map(repr, others))}"
            )
            continue
        cap = capability_of(server, tool)
        if cap in taken_caps:
            cap = distinct_capability(server, tool)
        taken_caps.add(cap)
        out[tool] = Naming(name, cap)
    return out, refused


# ------------------------------------------------------------------ re-import merge
class Change(str, Enum):
    UNCHANGED = "unchanged"
    UPDATED = "updated"
    """Something import generates changed (not the definition): written."""
    CHANGED = "changed"
    """The upstream definition changed: a re-pin, written only with --accept-changes."""


@dataclass(frozen=True)
class Merge:
    """The re-import of one pinned tool."""

    key: str
    path: Path
    doc: dict[str, Any]
    """What would be written."""
    change: Change
    edits: tuple[str, ...] = ()
    """Members the operator changed since import (kept)."""
    conflicts: tuple[str, ...] = ()
    """Members both the operator and the upstream changed."""
    taken: tuple[str, ...] = ()
    """Members taken from the upstream."""
    no_record: bool = False
    lines: tuple[str, ...] = field(default=(), compare=False)
    """The review: the definition diff and each edit's diff."""


_ABSENT: Any = object()
"""A member a document does not have (``null`` is a value)."""


def _text(value: Any) -> list[str]:
    if value is _ABSENT:
        return []
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True).splitlines()


def diff(old: Any, new: Any, a: str, b: str) -> list[str]:
    return list(difflib.unified_diff(_text(old), _text(new), a, b, lineterm="", n=2))


def _indented(title: str, lines: list[str]) -> list[str]:
    return [f"  {title}:", *(f"    {x}" for x in lines)]


REORDERED_NOTE = (
    "  note: only the order of words or items changed, as in a server that builds the text from "
    "a set (a Python server does so differently in every process, under hash randomization): it will "
    "differ again at the next start, and the gateway refuse the tool; give the upstream a fixed "
    'seed, env = { PYTHONHASHSEED = "0" }, then import again'
)
"""Shown by a re-import whose definition change is :func:`reordered_only` (found with PyPI
``mcp-shell-server``, whose description lists its allowed commands from a set)."""

_WORD = re.compile(r"\w+|[^\w\s]")


def reordered_only(old: Any, new: Any) -> bool:
    """Whether two different definitions differ only in the order of the words (and
    punctuation) of some of their strings, or of the items of some arrays (``enum``,
    ``required``): the same JSON shape, every other value equal."""
    if old == new:
        return False

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                return False
            if all(same(x, y) for x, y in zip(a, b, strict=True)):
                return True
            key = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
            return sorted(map(key, a)) == sorted(map(key, b))  # the same items (an enum from a set)
        if isinstance(a, str) and isinstance(b, str):
            return a == b or sorted(_WORD.findall(a)) == sorted(_WORD.findall(b))
        return bool(a == b) and type(a) is type(b)

    return same(old, new)


def merge(
    key: str, pinned: Pinned, generated: Mapping[str, Any], definition: Mapping[str, Any],
    recorded: Recorded | None, *, keep_edits: bool,
) -> Merge:  # fmt: skip
    """The re-import of one pinned tool: ``generated`` is import's ToolSpec for the upstream's
    current ``definition``."""
    on_disk = dict(pinned.doc)
    new_sha = str(generated["upstream"]["definition_sha256"])
    old_sha = str((on_disk.get("upstream") or {}).get("definition_sha256", ""))
    base = recorded.generated if recorded is not None else None
    if base is None and new_sha == old_sha:
        base = generated  # the same definition: whatever differs on disk is the operator's
    out: dict[str, Any] = {}
    edits: list[str] = []
    conflicts: list[str] = []
    taken: list[str] = []
    review: list[str] = []
    for m in dict.fromkeys([*on_disk, *generated]):
        if m == "upstream":
            continue
        mine, theirs = on_disk.get(m, _ABSENT), generated.get(m, _ABSENT)
        if m in OPERATOR_OWNED:
            value = mine if mine is not _ABSENT else theirs
        elif base is None:  # no record: the definition's members from the upstream, others kept
            value = theirs if m in FROM_DEFINITION else (mine if mine is not _ABSENT else theirs)
        else:
            was = base.get(m, _ABSENT)
            edited, changed = mine != was, theirs != was
            value = theirs if changed and not edited else mine
            if edited:
                edits.append(m)
                review += _indented(f"your edit of {m} (kept)", diff(was, mine, "imported", "yours"))
            if edited and changed and mine != theirs:
                conflicts.append(m)
                review += _indented(f"upstream change of {m}", diff(was, theirs, "imported", "upstream"))
                value = mine if keep_edits else theirs
        if value != mine:
            taken.append(m)
        if value is not _ABSENT:
            out[m] = value
    out["upstream"] = dict(generated["upstream"])
    if new_sha != old_sha:
        change = Change.CHANGED
        old_def = recorded.definition if recorded is not None else _ABSENT
        head = [f"  definition sha256 {old_sha[:16]}… -> {new_sha[:16]}…"]
        if recorded is None:
            head.append("  no import record: the pinned definition is unknown; the upstream's now:")
        new_def = definition_of(definition)
        if old_def is not _ABSENT and reordered_only(old_def, new_def):
            head.append(REORDERED_NOTE)
        review = head + _indented("definition", diff(old_def, new_def, "pinned", "upstream")) + review
    elif out != on_disk:
        change = Change.UPDATED
    else:
        change = Change.UNCHANGED
    return Merge(
        key,
        pinned.path,
        out,
        change,
        tuple(edits),
        tuple(conflicts),
        tuple(taken),
        base is None,
        tuple(review),
    )


def restore_keys(given: Sequence[str], candidates: Mapping[str, str]) -> tuple[set[str], list[str]]:
    """``--restore`` values (``server.tool``, a callgate name, or ``server/tool``) -> record keys,
    and the values that name nothing removed. ``candidates``: key -> callgate name."""
    keys: set[str] = set()
    unknown: list[str] = []
    for g in given:
        hit = [
            k for k, name in candidates.items()
            if g in (k, name) or g == k.replace("/", ".", 1)
        ]  # fmt: skip
        if hit:
            keys.update(hit)
        else:
            unknown.append(g)
    return keys, unknown


__all__ = [
    "OPERATOR_OWNED",
    "RECORD_FILE",
    "Change",
    "Merge",
    "Naming",
    "Pinned",
    "Recorded",
    "assign_names",
    "diff",
    "merge",
    "pinned_files",
    "read_record",
    "restore_keys",
    "tool_key",
    "write_record",
]
