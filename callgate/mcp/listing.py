"""``tools/list`` of the gateway: what an upstream tool shows beside callgate's view of it.

The name, description and schemas are the session's ``ListTools`` view (the ToolSpec, rendered
with :func:`callgate.client.tools.render`); from the upstream's live definition, which matches the
pin (its digest covers ``annotations``), come

* ``title`` (top level, else ``annotations.title``);
* the annotations ``destructiveHint``, ``idempotentHint``, ``openWorldHint`` and ``title``;
  ``readOnlyHint`` is callgate's: ``side_effect_class == "read_only"`` (the class the operator
  confirmed at import is what policy and idempotency act on, so it is what clients are told),
  and so is ``destructiveHint`` for a ``modify`` or ``delete`` tool: always true, whatever the
  upstream said (a client is never told a tool callgate classes as destructive is additive).

``execution`` (task support, MCP 2025-11-25) is never shown: the gateway runs no tasks (an
approval, the 6.7 commit boundary and the 6.10 encoding all need the call's result inside the
call). A tool whose upstream declares ``taskSupport: "required"`` cannot be called without a
task, so it is not listed at all, and ``callgate mcp check`` names it (:func:`unservable`);
``"optional"`` tools are listed and called without a task.

:func:`session_tools` is the whole answer: the session's ListTools view limited to pinned tools
whose upstream definition still matches, or whose upstream is still being listed for the first
time (hosting.py: shown from the pin, with the upstream's ``title`` and annotations as the pin
keeps them, pins.py; a pin written before they were kept shows callgate's annotations only), then
the paging tool (results.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from callgate.client import Tool
from callgate.mcp.results import page_tool

if TYPE_CHECKING:
    from callgate.mcp.hosting import Hosting
    from callgate.mcp.session import McpSession

PASSED_HINTS = ("title", "destructiveHint", "idempotentHint", "openWorldHint")
"""Upstream annotations shown as the upstream declared them."""

DESTRUCTIVE_CLASSES = frozenset({"modify", "delete"})
"""Side-effect classes shown with ``destructiveHint: true`` whatever the upstream declared
(``create`` is MCP's "additive updates": the upstream's hint is kept)."""

TASK_REQUIRED = "task_required"
"""Why a tool is not served: its upstream declares ``execution.taskSupport: "required"``."""


def unservable(definition: Mapping[str, Any]) -> str | None:
    """Why the gateway cannot serve this upstream tool (a stable reason), or None."""
    execution = definition.get("execution")
    if isinstance(execution, Mapping) and execution.get("taskSupport") == "required":
        return TASK_REQUIRED
    return None


UNSERVABLE_MESSAGES = {
    TASK_REQUIRED: (
        'the upstream declares execution.taskSupport = "required"; the gateway runs no tasks '
        "(an approval and the commit boundary need the result inside the call), so the tool is "
        "not listed and cannot be called"
    ),
}


def annotations_for(tool: Tool, definition: Mapping[str, Any] | None) -> dict[str, Any]:
    """The annotations shown: the upstream's hints, callgate's ``readOnlyHint`` (and
    ``destructiveHint`` for a destructive class)."""
    upstream = (definition or {}).get("annotations")
    out: dict[str, Any] = {}
    if isinstance(upstream, Mapping):
        out.update({k: upstream[k] for k in PASSED_HINTS if k in upstream and upstream[k] is not None})
    out["readOnlyHint"] = tool.side_effect_class == "read_only"
    if tool.side_effect_class in DESTRUCTIVE_CLASSES:
        out["destructiveHint"] = True
    return out


def mcp_tool(
    tool: Tool,
    rendered: Mapping[str, Any],
    definition: Mapping[str, Any] | None,
    *,
    output_schema: bool = True,
) -> types.Tool:
    """One ``tools/list`` entry: the rendered ToolSpec plus title and annotations (without
    ``outputSchema`` when ``output_schema`` is false: ``[mcp] structured_content = "omit"``)."""
    d = dict(rendered)
    if not output_schema:
        d.pop("outputSchema", None)
    annotations = annotations_for(tool, definition)
    title = (definition or {}).get("title") or annotations.get("title")
    if isinstance(title, str) and title:
        d["title"] = title
    d["annotations"] = annotations
    d.pop("execution", None)
    return types.Tool.model_validate(d)


def shown(
    tools: Sequence[Tool],
    rendered: Sequence[Mapping[str, Any]],
    definitions: Sequence[Mapping[str, Any] | None],
    *,
    output_schema: bool = True,
) -> list[types.Tool]:
    """The entries of tools that can be served (task-required ones left out)."""
    return [
        mcp_tool(t, r, d, output_schema=output_schema)
        for t, r, d in zip(tools, rendered, definitions, strict=True)
        if d is None or unservable(d) is None
    ]


UNKNOWN_CURSOR = (
    "tools/list: unknown cursor: callgate's gateway lists every tool in one page and never "
    'issues a nextCursor; list again without a cursor (docs/MCP.md, "Tool list paging")'
)


def check_cursor(params: types.PaginatedRequestParams | None) -> None:
    """A client ``tools/list`` cursor is refused with -32602 (MCP pagination: "Invalid cursors
    SHOULD result in an error with code -32602"): the gateway answers every tool in one page
    with no ``nextCursor``, so any cursor is one it never issued. Answering the full list again
    would hand a client that appends pages every tool twice."""
    if params is not None and params.cursor is not None:
        raise MCPError(types.INVALID_PARAMS, UNKNOWN_CURSOR)


async def session_tools(s: McpSession, hosting: Hosting) -> list[types.Tool]:
    """``tools/list``: the session's ListTools view (a new model call), only pinned tools whose
    upstream still matches (or is not listed yet) and that can be served, then the paging tool."""
    pins = hosting.view.pins()
    tools: list[Tool] = []
    rendered: list[dict[str, Any]] = []
    definitions: list[Mapping[str, Any] | None] = []
    for tool, entry in await s.relist():
        pin = pins.get(f"{tool.name}@{tool.version}")
        if pin is None or not hosting.listable(pin):
            continue
        definition: Mapping[str, Any] | None = hosting.view.definition(pin)
        if definition is None:  # shown from its pin: the title and annotations import kept
            definition = pin.shown
        if unservable(definition or {}) is not None:
            continue  # e.g. task-required: never listed, named by `callgate mcp check`
        tools.append(tool)
        rendered.append(entry)
        definitions.append(definition)
    return [*shown(tools, rendered, definitions, output_schema=hosting.structured), page_tool()]


__all__ = [
    "TASK_REQUIRED",
    "UNKNOWN_CURSOR",
    "UNSERVABLE_MESSAGES",
    "annotations_for",
    "check_cursor",
    "mcp_tool",
    "session_tools",
    "shown",
    "unservable",
]
