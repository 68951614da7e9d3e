"""Connections to upstream MCP servers (stdio child processes or streamable HTTP).

An upstream without secrets keeps one connection, opened at start and reopened after it died.
An upstream whose env or headers name secrets gets a fresh connection per call, built with the
values the gateway redeemed for that call's credential (so a secret exists only while an
authorized call runs); its listing connection (tools/list at start, ``import``, ``check``) gets
the non-secret values only.

A call ends in one of four ways, which decide the ReportOutcome (6.7, 6.9):
:class:`Answered` (the upstream answered, ``isError`` or not), :class:`Refused` (a JSON-RPC
error: the tool did not run), :class:`NotSent` (no connection: the request never left) and
:class:`Lost` (sent, then a timeout, a crash or a cancel: nobody knows whether it committed).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from callgate.mcp.config import McpUpstreamConfig, SecretRef, UpstreamTransport

log = logging.getLogger("callgate.mcp")

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
ListChanged = Callable[[str], Awaitable[None]]

# JSON-RPC codes the SDK client raises locally (no answer from the upstream).
_LOCAL_CODES = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})


@dataclass(frozen=True)
class Answered:
    result: types.CallToolResult


@dataclass(frozen=True)
class Refused:
    """The upstream answered the request with a JSON-RPC error (the tool did not run)."""

    code: int
    message: str


@dataclass(frozen=True)
class NotSent:
    """The request never left the gateway (spawn/connect/initialize failed)."""

    reason: str


@dataclass(frozen=True)
class Lost:
    """Sent, then no answer: timeout, connection lost or cancelled. Commit status unknown."""

    reason: str


CallEnd = Answered | Refused | NotSent | Lost


class _Connection:
    """One initialized ClientSession, owned by its own task (anyio scopes are task-bound)."""

    def __init__(
        self,
        cfg: McpUpstreamConfig,
        base_dir: Path,
        values: Mapping[str, str],
        on_changed: ListChanged | None,
    ) -> None:
        self.cfg = cfg
        self.base_dir = base_dir
        self.values = values
        self.on_changed = on_changed
        self.session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self.dead = False

    def _transport(self) -> Any:
        c = self.cfg
        if c.transport is UpstreamTransport.STDIO:
            env: dict[str, str] = {}
            for k, v in c.env:
                value = self.values.get(k) if isinstance(v, SecretRef) else v
                if value is not None:
                    env[k] = value
            cwd = str(self.base_dir / c.cwd) if c.cwd else None
            return stdio_client(
                StdioServerParameters(command=c.command, args=list(c.args), env=env or None, cwd=cwd),
                errlog=sys.stderr,
            )
        clean: dict[str, str] = {}
        for k, v in c.headers:
            value = self.values.get(k) if isinstance(v, SecretRef) else v
            if value is not None:
                clean[k] = value
        timeout = httpx2.Timeout(c.timeout_seconds, read=max(c.timeout_seconds, 300.0))
        return _HttpTransport(c.url, clean, timeout)

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                self.session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            if not isinstance(exc, asyncio.CancelledError | Exception):
                raise
        finally:
            self.dead = True
            self._ready.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self.on_changed is not None:
            await self.on_changed(self.cfg.name)
        elif isinstance(message, Exception):
            log.info("upstream %s: transport error %s", self.cfg.name, type(message).__name__)
        await anyio.lowlevel.checkpoint()

    async def open(self) -> ClientSession:
        self._task = asyncio.create_task(self._run(), name=f"mcp-upstream-{self.cfg.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), self.cfg.timeout_seconds)
        except TimeoutError:
            await self.close()
            raise ConnectionError(f"upstream {self.cfg.name}: no answer to initialize") from None
        if self.session is None or self.dead:
            err = self._error
            await self.close()
            raise ConnectionError(
                f"upstream {self.cfg.name}: cannot connect ({type(err).__name__ if err else 'closed'})"
            )
        return self.session

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except (TimeoutError, Exception):
                self._task.cancel()
        self.dead = True


class _HttpTransport:
    """``streamable_http_client`` over an httpx2 client carrying the upstream's headers."""

    def __init__(self, url: str, headers: dict[str, str], timeout: httpx2.Timeout) -> None:
        self.url, self.headers, self.timeout = url, headers, timeout
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        client = await self._stack.enter_async_context(
            httpx2.AsyncClient(headers=self.headers, timeout=self.timeout)
        )
        return await self._stack.enter_async_context(streamable_http_client(self.url, http_client=client))

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


def _dump(tool: types.Tool) -> dict[str, Any]:
    d: dict[str, Any] = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    return d


class Upstream:
    """One configured upstream: its listing connection and its calls."""

    def __init__(self, cfg: McpUpstreamConfig, base_dir: Path, on_changed: ListChanged | None = None) -> None:
        self.cfg = cfg
        self.base_dir = base_dir
        self.on_changed = on_changed
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()

    async def _listing(self) -> ClientSession:
        async with self._lock:
            if self._conn is None or self._conn.dead:
                self._conn = _Connection(self.cfg, self.base_dir, {}, self.on_changed)
                await self._conn.open()
            assert self._conn.session is not None
            return self._conn.session

    async def list_tools(self) -> list[dict[str, Any]]:
        """``tools/list`` (every page) on the listing connection, as wire dicts."""
        session = await self._listing()
        return await _list_all(session, self.cfg.timeout_seconds)

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, secrets: Mapping[str, str], timeout: float,
        progress: ProgressFn | None, expected_sha256: str, digest: Callable[[Mapping[str, Any]], str],
    ) -> CallEnd:  # fmt: skip
        """Run one ``tools/call``. With secrets: a fresh connection built with them, whose
        ``tools/list`` must still match ``expected_sha256`` (else :class:`NotSent`)."""
        conn: _Connection | None = None
        try:
            if self.cfg.has_secrets:
                conn = _Connection(self.cfg, self.base_dir, secrets, None)
                session = await conn.open()
                listed = {t["name"]: t for t in await _list_all(session, self.cfg.timeout_seconds)}
                if tool not in listed or digest(listed[tool]) != expected_sha256:
                    return NotSent("definition_changed")
            else:
                session = await self._listing()
        except (ConnectionError, OSError, MCPError, TimeoutError) as exc:
            if conn is not None:
                await conn.close()
            return NotSent(type(exc).__name__)
        try:
            return await self._send(session, tool, arguments, timeout, progress)
        finally:
            if conn is not None:
                await conn.close()

    async def _send(
        self, session: ClientSession, tool: str, arguments: Mapping[str, Any], timeout: float,
        forward: ProgressFn | None,
    ) -> CallEnd:  # fmt: skip
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if forward is not None:
                await forward(progress, total, message)

        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, dict(arguments), progress_callback=on_progress)
        except TimeoutError:
            return Lost("timeout")
        except MCPError as exc:
            if exc.code in _LOCAL_CODES:
                self._drop()
                return Lost("connection_lost" if exc.code == types.CONNECTION_CLOSED else "timeout")
            return Refused(exc.code, exc.message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            self._drop()
            return Lost("connection_lost")
        return Answered(result)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.dead = True

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


async def _list_all(session: ClientSession, timeout: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    with anyio.fail_after(timeout):
        for _ in range(1000):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            res = await session.list_tools(params=params)
            out.extend(_dump(t) for t in res.tools)
            cursor = res.next_cursor
            if not cursor:
                break
    return out


def redeem_names(cfg: McpUpstreamConfig) -> dict[str, str]:
    """env/header key -> secret name, for the values a call must redeem."""
    return {k: v.secret for k, v in (*cfg.env, *cfg.headers) if isinstance(v, SecretRef)}


__all__ = [
    "Answered",
    "CallEnd",
    "Lost",
    "NotSent",
    "Refused",
    "Upstream",
    "redeem_names",
]
