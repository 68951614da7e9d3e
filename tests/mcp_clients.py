"""Two real MCP clients driven by one JSON scenario, for the MCP tests.

* :func:`run_python`: the official Python SDK client (``mcp.Client``, stdio or streamable HTTP).
* :func:`run_ts`: the TypeScript SDK client (``@modelcontextprotocol/sdk``) through the harness
  ``tests/mcp_node/harness.mjs``, run with node from the packages ``scripts/mcp-node install`` put
  in ``tests/mcp_node/node_modules`` (tests using it carry the ``node`` marker).

Both take the scenario format documented at the top of the harness (``server``, ``elicitation``,
``steps`` of ``list_tools`` / ``call`` / ``sleep``) and return the same list of event dicts
(``connected``, ``tools``, ``elicitation``, ``progress``, ``notification``, ``result``,
``error``, ``done``), so one assertion helper checks either client. :class:`Run` wraps the list.

Upstream command lines for the published servers: :func:`git_server` (``mcp-server-git`` from the
venv) and :func:`filesystem_server` (the installed ``dist/index.js`` of server-filesystem, run with
node, never npx).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.markers import Needs, require

ROOT = Path(__file__).resolve().parents[1]
NODE_DIR = ROOT / "tests" / "mcp_node"
HARNESS = NODE_DIR / "harness.mjs"
FILESYSTEM_JS = (
    NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)
GIT_SERVER = Path(sys.executable).with_name("mcp-server-git")
DEFAULT_RUN_TIMEOUT_S = 90.0

Scenario = dict[str, Any]
Event = dict[str, Any]


def git_server(repo: Path) -> dict[str, Any]:
    """The ``server`` entry launching mcp-server-git (the venv's console script) on ``repo``."""
    return {"command": str(GIT_SERVER), "args": ["--repository", str(repo)]}


def filesystem_server(root: Path) -> dict[str, Any]:
    """The ``server`` entry launching the installed server-filesystem on ``root`` with node."""
    require(Needs.NODE)
    assert FILESYSTEM_JS.is_file(), f"{FILESYSTEM_JS} missing: run scripts/mcp-node install"
    return {"command": "node", "args": [str(FILESYSTEM_JS), str(root)]}


@dataclass(frozen=True)
class Run:
    """What one client saw: its event lines in order, and its stderr (diagnostics only)."""

    client: str
    events: tuple[Event, ...]
    stderr: str = ""
    seconds: float = 0.0

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("event") == kind]

    def step(self, index_or_id: int | str) -> list[Event]:
        key = "id" if isinstance(index_or_id, str) else "step"
        return [e for e in self.events if e.get(key) == index_or_id]

    def outcome(self, index_or_id: int | str) -> Event:
        """The ``result`` or ``error`` line of one call step (exactly one must exist)."""
        found = [e for e in self.step(index_or_id) if e.get("event") in ("result", "error")]
        assert len(found) == 1, f"{self.client}: step {index_or_id!r}: {found or list(self.events)}"
        return found[0]

    def tools(self) -> list[dict[str, Any]]:
        lists = self.of("tools")
        assert lists, f"{self.client}: no tools line: {list(self.events)}"
        tools: list[dict[str, Any]] = lists[-1]["tools"]
        return tools

    def text(self) -> str:
        """Everything the client saw, as one string (for needle-in-output checks)."""
        return "\n".join(json.dumps(e, sort_keys=True) for e in self.events)

    @property
    def finished(self) -> bool:
        return bool(self.of("done"))


def result_text(event: Event) -> str:
    """The text of a ``result`` line's content blocks (or an ``error`` line's message)."""
    if event.get("event") == "error":
        return str(event.get("message", ""))
    parts = [str(c.get("text", "")) for c in event.get("content") or [] if isinstance(c, dict)]
    return "\n".join(parts)


# --- the TypeScript SDK client (node harness) --------------------------------------------------


def run_ts(scenario: Scenario, *, timeout: float = DEFAULT_RUN_TIMEOUT_S, check: bool = True) -> Run:
    """Run ``scenario`` with the TS harness; ``check=False`` returns a failed connection's run
    (its ``connect_error`` line) instead of failing."""
    require(Needs.NODE)
    assert (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "tests/mcp_node is not installed: run scripts/mcp-node install"
    )
    started = time.monotonic()
    proc = subprocess.run(
        ["node", str(HARNESS), "--scenario", "-"],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    events = tuple(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    run = Run("ts", events, proc.stderr, time.monotonic() - started)
    assert proc.returncode == 0 or not check, (
        f"harness exit {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return run


# --- the Python SDK client -----------------------------------------------------------------------


@dataclass
class _PyState:
    step: int = -1
    id: str | None = None
    choice: str = "cancel"
    progress: bool = False
    events: list[Event] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        self.events.append({k: v for k, v in event.items() if v is not None})


def _fill_content(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for key, prop in ((schema or {}).get("properties") or {}).items():
        if "const" in prop:
            content[key] = prop["const"]
        elif prop.get("enum"):
            content[key] = prop["enum"][0]
        elif prop.get("oneOf") and "const" in prop["oneOf"][0]:
            content[key] = prop["oneOf"][0]["const"]
        elif prop.get("type") == "boolean":
            content[key] = True
        elif prop.get("type") in ("number", "integer"):
            content[key] = prop.get("default", 0)
        elif prop.get("type") == "string":
            content[key] = prop.get("default", "")
    return content


def _dump(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return obj


async def _run_python(scenario: Scenario, timeout: float) -> list[Event]:
    from mcp import Client, types
    from mcp.client.context import ClientRequestContext
    from mcp.client.session import IncomingMessage
    from mcp.client.stdio import StdioServerParameters

    state = _PyState(choice=str(scenario.get("elicitation", "cancel")))
    server = scenario.get("server") or {}
    target: Any
    if "url" in server:
        headers = server.get("headers") or {}
        if headers:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            target = streamable_http_client(server["url"], http_client=httpx2.AsyncClient(headers=headers))
        else:
            target = server["url"]
    else:
        target = StdioServerParameters(
            command=server["command"],
            args=list(server.get("args") or []),
            env={**os.environ, **(server.get("env") or {})},
            cwd=server.get("cwd"),
        )

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        schema = getattr(params, "requested_schema", None)
        line: Event = {
            "event": "elicitation",
            "step": state.step,
            "id": state.id,
            "message": params.message,
            "requestedSchema": _dump(schema),
            "mode": getattr(params, "mode", "form"),
            "action": state.choice,
        }
        if state.choice == "accept":
            content = scenario.get("elicitation_content") or _fill_content(line["requestedSchema"])
            line["content"] = content
            state.emit(line)
            return types.ElicitResult(action="accept", content=content)
        state.emit(line)
        return types.ElicitResult(action=state.choice)  # type: ignore[arg-type]

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            state.emit({"event": "transport_error", "step": state.step, "message": str(message)})
            return
        root = getattr(message, "root", message)
        method = getattr(root, "method", type(root).__name__)
        if method == "notifications/progress" and state.progress:
            return  # delivered to the call's progress callback (the TS SDK does the same)
        state.emit(
            {
                "event": "notification",
                "step": state.step,
                "method": method,
                "params": _dump(getattr(root, "params", None)) or {},
            }
        )

    per_call = float(scenario.get("timeout_ms", 30000)) / 1000.0
    kwargs: dict[str, Any] = {"message_handler": on_message, "read_timeout_seconds": per_call}
    if state.choice != "none":
        kwargs["elicitation_callback"] = on_elicit
    mode = scenario.get("python_mode", "auto")
    with anyio.fail_after(timeout):
        async with Client(target, mode=mode, **kwargs) as client:
            state.emit(
                {
                    "event": "connected",
                    "server": _dump(client.server_info),
                    "protocolVersion": client.protocol_version,
                    "mode": mode,
                }
            )
            for i, step in enumerate(scenario.get("steps") or []):
                state.step, state.id = i, step.get("id")
                state.choice = str(step.get("elicitation", scenario.get("elicitation", "cancel")))
                state.progress = bool(step.get("progress"))
                tag = {"step": i, "id": step.get("id")}
                started = time.monotonic()
                op = step.get("op")
                try:
                    if op == "list_tools":
                        listed = await client.list_tools()
                        state.emit(
                            {
                                "event": "tools",
                                **tag,
                                "tools": [
                                    {
                                        "name": t.name,
                                        "title": t.title,
                                        "description": t.description,
                                        "inputSchema": t.input_schema,
                                        "outputSchema": t.output_schema,
                                        "annotations": _dump(t.annotations),
                                    }
                                    for t in listed.tools
                                ],
                            }
                        )
                    elif op == "call":

                        async def progress(
                            p: float, total: float | None, message: str | None, tag: Event = tag
                        ) -> None:
                            state.emit(
                                {
                                    "event": "progress",
                                    **tag,
                                    "progress": p,
                                    "total": total,
                                    "message": message,
                                }
                            )

                        r = await client.call_tool(
                            step["name"],
                            step.get("arguments") or {},
                            read_timeout_seconds=float(step["timeout_ms"]) / 1000.0
                            if "timeout_ms" in step
                            else None,
                            progress_callback=progress if step.get("progress") else None,
                            meta=step.get("meta"),
                        )
                        state.emit(
                            {
                                "event": "result",
                                **tag,
                                "name": step["name"],
                                "isError": bool(r.is_error),
                                "content": [_dump(c) for c in r.content],
                                "structuredContent": r.structured_content,
                                "ms": int((time.monotonic() - started) * 1000),
                            }
                        )
                    elif op == "sleep":
                        await anyio.sleep(float(step.get("ms", 0)) / 1000.0)
                    else:
                        raise ValueError(f"unknown step op {op!r}")
                except Exception as exc:  # an MCP error is a line, like in the harness
                    error = getattr(exc, "error", None)
                    state.emit(
                        {
                            "event": "error",
                            **tag,
                            "name": step.get("name"),
                            "code": getattr(error, "code", None),
                            "message": getattr(error, "message", None) or str(exc),
                            "data": _dump(getattr(error, "data", None)),
                            "ms": int((time.monotonic() - started) * 1000),
                        }
                    )
            state.emit({"event": "done", "steps": len(scenario.get("steps") or [])})
    return state.events


def run_python(scenario: Scenario, *, timeout: float = DEFAULT_RUN_TIMEOUT_S) -> Run:
    started = time.monotonic()
    events = anyio.run(_run_python, scenario, timeout)
    return Run("python", tuple(events), "", time.monotonic() - started)


CLIENTS: dict[str, Callable[..., Run]] = {"python": run_python, "ts": run_ts}
"""The two client implementations by name (the ``client`` parameter of the tests)."""


def each_line(run: Run) -> Iterator[str]:
    for e in run.events:
        yield json.dumps(e, sort_keys=True)
