"""Connections to upstream MCP servers (stdio child processes or streamable HTTP).

An upstream without secrets keeps one connection, opened at start and reopened after it died.
An upstream whose env or headers name secrets gets a fresh connection per call, built with the
values the gateway redeemed for that call's credential (so a secret exists only while an
authorized call runs); its listing connection (tools/list at start, ``import``, ``check``) gets
the non-secret values only. With ``keep_warm_seconds`` such a connection is kept after its call
and reused by later calls that redeemed the same values (each call still redeems them with its
own credential), until it has been idle that long (docs/MCP.md, "Secrets and warm
connections").

A stdio upstream never outlives the gateway: on Linux it is started through a launcher that asks
the kernel to kill it when the gateway's process ends (``PR_SET_PDEATHSIG``), since a server
stuck in a computation reads neither its stdin nor a cancel and would otherwise be left running
for good when the gateway is stopped or killed in the middle of its call (docs/MCP.md,
"Upstream processes").

A stdio upstream's stderr is read by the gateway, not passed through bare: each line is logged as
``upstream NAME (stderr): ...`` and the last lines are kept, so an upstream that cannot start (a
command that does not exist, a server that dies on import) is named with why: ``upstream NAME:
the process ended before answering initialize; its stderr ended with: ...`` (docs/MCP.md,
"Upstream processes").

A call ends in one of four ways, which decide the ReportOutcome (6.7, 6.9):
:class:`Answered` (the upstream answered, ``isError`` or not), :class:`Refused` (a JSON-RPC
error: the tool did not run), :class:`NotSent` (no connection: the request never left) and
:class:`Lost` (sent, then a timeout, a crash or a cancel: nobody knows whether it committed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

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
LogFn = Callable[[str, Any, str | None], Awaitable[None]]
"""``(level, data, logger)`` of an upstream ``notifications/message`` (callgate/mcp/notify.py)."""
ListChanged = Callable[[str], Awaitable[None]]

_LAUNCHER = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the gateway ended before the line above took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"callgate mcp: cannot start {sys.argv[2]!r}: {exc.strerror}", file=sys.stderr)
    sys.exit(127)
"""
"""Run by the gateway's own interpreter (``-I -S``: no site, no environment), it makes the kernel
kill the upstream when the gateway's process ends, then becomes the upstream (same pid)."""


def launch(command: str, args: list[str]) -> tuple[str, list[str]]:
    """``(command, args)`` that start ``command args`` as a child that dies with this process
    (Linux); elsewhere unchanged."""
    if not sys.platform.startswith("linux"):
        return command, args
    return sys.executable, ["-I", "-S", "-c", _LAUNCHER, str(os.getpid()), command, *args]


STDERR_TAIL_LINES = 3
"""How many of an upstream's last stderr lines a start failure quotes."""
STDERR_LINE_CHARS = 500
"""Longer stderr lines are cut (logged and quoted)."""


class _Stderr:
    """A stdio upstream's stderr: a pipe whose lines a thread logs, naming the upstream, keeping
    the last :data:`STDERR_TAIL_LINES` for :meth:`tail`."""

    def __init__(self, name: str) -> None:
        self.name = name
        r, w = os.pipe()
        self.writer: TextIO | None = os.fdopen(w, "w")
        self._reader = os.fdopen(r, "rb")
        self.lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.ended = threading.Event()
        threading.Thread(target=self._pump, name=f"mcp-stderr-{name}", daemon=True).start()

    def _pump(self) -> None:
        try:
            for raw in self._reader:
                line = raw.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS]
                if line.strip():
                    self.lines.append(line.strip())
                    log.info("upstream %s (stderr): %s", self.name, line)
        except (OSError, ValueError):
            pass
        finally:
            self._reader.close()
            self.ended.set()

    def spawned(self) -> None:
        """The child holds its own copy of the write end: close the gateway's, so the reader
        sees the end of the stream when the child's ends."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def tail(self, wait: float = 1.0) -> str:
        """``; its stderr ended with: a | b`` (the last lines, once the stream ended or after
        ``wait`` seconds), or ``""`` when it wrote nothing."""
        self.spawned()
        await asyncio.to_thread(self.ended.wait, wait)
        lines = list(self.lines)
        return f"; its stderr ended with: {' | '.join(lines)}" if lines else ""


class UpstreamStartFailed(ConnectionError):
    """An upstream could not be started, connected or initialized; ``reason`` says why (with the
    last lines of a stdio upstream's stderr)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"upstream {name}: {reason}")
        self.name = name
        self.reason = reason


def _leaf(exc: BaseException | None) -> BaseException | None:
    """The first exception inside (nested) exception groups (anyio's task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def start_failure(cfg: McpUpstreamConfig, exc: BaseException | None) -> str:
    """Why a connection ended before ``initialize`` was answered, in words."""
    err = _leaf(exc)
    stdio = cfg.transport is UpstreamTransport.STDIO
    if isinstance(err, MCPError) and err.error.code == types.CONNECTION_CLOSED:
        return (
            "the process ended before answering initialize" if stdio
            else "the connection closed before initialize was answered"
        )  # fmt: skip
    if isinstance(err, OSError) and stdio:  # the spawn itself (a cwd that does not exist...)
        return f"cannot start {cfg.command!r}: {err}"
    if isinstance(err, MCPError):
        return f"initialize was answered with an error ({err.error.code}: {err.error.message[:200]})"
    if err is None:
        return "the connection closed before initialize was answered"
    if stdio:
        return f"cannot connect ({type(err).__name__})"
    return f"cannot connect to {where(cfg.url)} ({type(err).__name__})"


def where(url: str) -> str:
    """An upstream URL as logs may show it: scheme, host, port and path (no credentials, query or
    fragment, which may carry a token)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


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
        self.users = 0
        """Calls running on this connection (a warm one is closed only when none is)."""
        self.last_used = 0.0
        self.listed: dict[str, str] = {}
        """A warm connection's tools/list: tool name -> definition sha256, checked per call."""
        self.log_sinks: set[LogFn] = set()
        """The log sinks of the calls running on this connection (a message is forwarded only
        when exactly one runs: MCP logging names no request)."""
        self.stderr: _Stderr | None = None
        """A stdio upstream's stderr (its lines logged, the last ones kept)."""

    def _transport(self) -> Any:
        c = self.cfg
        if c.transport is UpstreamTransport.STDIO:
            env: dict[str, str] = {}
            for k, v in c.env:
                value = self.values.get(k) if isinstance(v, SecretRef) else v
                if value is not None:
                    env[k] = value
            cwd = str(self.base_dir / c.cwd) if c.cwd else None
            command, args = launch(c.command, list(c.args))
            self.stderr = _Stderr(c.name)
            assert self.stderr.writer is not None
            return stdio_client(
                StdioServerParameters(command=command, args=args, env=env or None, cwd=cwd),
                errlog=self.stderr.writer,
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
                if self.stderr is not None:
                    self.stderr.spawned()
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
            if self.stderr is not None:
                self.stderr.spawned()
            self.dead = True
            self._ready.set()

    async def _tail(self) -> str:
        return await self.stderr.tail() if self.stderr is not None else ""

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self.on_changed is not None:
            await self.on_changed(self.cfg.name)
        elif isinstance(message, types.LoggingMessageNotification):
            sinks = list(self.log_sinks)
            if len(sinks) == 1:
                p = message.params
                await sinks[0](p.level, p.data, p.logger)
            else:
                log.debug(
                    "upstream %s: log message not forwarded (%d calls running)", self.cfg.name, len(sinks)
                )
        elif isinstance(message, Exception):
            log.info("upstream %s: transport error %s", self.cfg.name, type(message).__name__)
        await anyio.lowlevel.checkpoint()

    async def open(self) -> ClientSession:
        self._task = asyncio.create_task(self._run(), name=f"mcp-upstream-{self.cfg.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), self.cfg.timeout_seconds)
        except TimeoutError:
            await self.close()
            raise UpstreamStartFailed(
                self.cfg.name,
                f"no answer to initialize within {self.cfg.timeout_seconds:g} s{await self._tail()}",
            ) from None
        if self.session is None or self.dead:
            err = self._error
            await self.close()
            raise UpstreamStartFailed(self.cfg.name, start_failure(self.cfg, err) + await self._tail())
        return self.session

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done() and not self._ready.is_set():
            # still connecting (a gateway stopped while it starts): nothing waits on the stop
            # event yet, so cancel the connect (the SDK's transport ends the child process)
            self._task.cancel()
            await asyncio.wait([self._task], timeout=10)
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
        self._warm: _Connection | None = None
        self._warm_key = ""
        self._warm_lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()

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
        on_log: LogFn | None = None,
    ) -> CallEnd:  # fmt: skip
        """Run one ``tools/call``. With secrets: a fresh connection built with them, whose
        ``tools/list`` must still match ``expected_sha256`` (else :class:`NotSent`)."""
        conn: _Connection | None = None
        warm: _Connection | None = None
        try:
            if self.cfg.has_secrets and self.cfg.keep_warm_seconds > 0:
                warm = await self._warm_for(secrets, digest)
                session = warm.session
                if warm.listed.get(tool) != expected_sha256:
                    self._release(warm)
                    return NotSent("definition_changed")
            elif self.cfg.has_secrets:
                conn = _Connection(self.cfg, self.base_dir, secrets, None)
                session = await conn.open()
                listed = {t["name"]: t for t in await _list_all(session, self.cfg.timeout_seconds)}
                if tool not in listed or digest(listed[tool]) != expected_sha256:
                    await conn.close()
                    return NotSent("definition_changed")
            else:
                session = await self._listing()
                conn = None
        except (ConnectionError, OSError, MCPError, TimeoutError, ListingInvalid) as exc:
            if conn is not None:
                await conn.close()
            if isinstance(exc, UpstreamStartFailed):
                log.warning(
                    "upstream %s: cannot call %s: %s; nothing was sent", self.cfg.name, tool, exc.reason
                )
            return NotSent(type(exc).__name__)
        assert session is not None
        owner = warm if warm is not None else conn if conn is not None else self._conn
        try:
            if owner is not None and on_log is not None:
                owner.log_sinks.add(on_log)
            return await self._send(session, owner, tool, arguments, timeout, progress)
        finally:
            if owner is not None and on_log is not None:
                owner.log_sinks.discard(on_log)
            if conn is not None:
                await conn.close()
            if warm is not None:
                self._release(warm)

    async def _warm_for(
        self, secrets: Mapping[str, str], digest: Callable[[Mapping[str, Any]], str]
    ) -> _Connection:
        """The warm connection built with exactly these secret values (a new one when there is
        none, it died, or the values changed: a rotated secret never reaches an old process)."""
        key = hashlib.sha256(json.dumps(sorted(secrets.items())).encode()).hexdigest()
        async with self._warm_lock:
            w = self._warm
            if w is None or w.dead or self._warm_key != key:
                if w is not None:
                    self._warm = None
                    if w.users == 0:
                        await w.close()  # else its last call closes it (_release)
                w = _Connection(self.cfg, self.base_dir, secrets, self._warm_changed)
                try:
                    session = await w.open()
                    w.listed = {
                        str(t["name"]): digest(t) for t in await _list_all(session, self.cfg.timeout_seconds)
                    }
                except BaseException:
                    await w.close()
                    raise
                self._warm, self._warm_key = w, key
                log.info("upstream %s: warm connection opened", self.cfg.name)
            w.users += 1
            w.last_used = time.monotonic()
            if self._reaper is None or self._reaper.done():
                self._reaper = asyncio.create_task(self._reap(), name=f"mcp-warm-{self.cfg.name}")
            return w

    def _release(self, w: _Connection) -> None:
        w.users -= 1
        w.last_used = time.monotonic()
        if w.users == 0 and (w is not self._warm or w.dead):
            task = asyncio.get_running_loop().create_task(w.close())
            self._closing.add(task)  # keep a reference until it is done
            task.add_done_callback(self._closing.discard)

    async def _warm_changed(self, name: str) -> None:
        """The warm connection's tools changed: never reuse it (the next call re-lists)."""
        if self._warm is not None:
            self._warm.dead = True
        if self.on_changed is not None:
            await self.on_changed(name)

    async def _reap(self) -> None:
        """Close the warm connection once it has been idle ``keep_warm_seconds``."""
        ttl = self.cfg.keep_warm_seconds
        while self._warm is not None:
            w = self._warm
            idle = time.monotonic() - w.last_used
            if w.users == 0 and (idle >= ttl or w.dead):
                async with self._warm_lock:
                    if self._warm is w and w.users == 0:
                        self._warm = None
                        log.info("upstream %s: warm connection closed (idle)", self.cfg.name)
                        await w.close()
                continue
            await asyncio.sleep(max(0.05, min(ttl - idle, 1.0)) if w.users == 0 else 0.5)

    async def _send(
        self, session: ClientSession, owner: _Connection | None, tool: str, arguments: Mapping[str, Any],
        timeout: float, forward: ProgressFn | None,
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
                _drop(owner)
                return Lost("connection_lost" if exc.code == types.CONNECTION_CLOSED else "timeout")
            return Refused(exc.code, exc.message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            _drop(owner)
            return Lost("connection_lost")
        return Answered(result)

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        await asyncio.gather(*(c.close() for c in (self._conn, self._warm) if c is not None))
        self._conn = self._warm = None


def _drop(conn: _Connection | None) -> None:
    """A lost connection is never reused (the listing one is reopened by the next call)."""
    if conn is not None:
        conn.dead = True


MAX_LIST_PAGES = 1000
"""At most this many ``tools/list`` pages are read from one upstream; a longer listing is refused."""


class ListingInvalid(Exception):
    """An upstream's ``tools/list`` that cannot be taken as its complete set of tools: a cursor it
    answered before (a listing that never ends), more than :data:`MAX_LIST_PAGES` pages, or a tool
    name listed twice (two definitions: which one would be pinned and called?). Fail closed: the
    upstream is treated as unreachable (import and check name it; the gateway serves none of its
    tools) instead of pinning or serving a part of its listing."""


async def _list_all(session: ClientSession, timeout: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    seen: set[str] = set()
    cursor: str | None = None
    with anyio.fail_after(timeout):
        for page in range(1, MAX_LIST_PAGES + 1):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            res = await session.list_tools(params=params)
            for t in res.tools:
                if t.name in names:
                    raise ListingInvalid(f"tools/list names the tool {t.name!r} twice (page {page})")
                names.add(t.name)
                out.append(_dump(t))
            cursor = res.next_cursor
            if not cursor:
                return out
            if cursor in seen:
                raise ListingInvalid(f"tools/list answered the cursor of an earlier page again (page {page}): "
                                     "its listing never ends")  # fmt: skip
            seen.add(cursor)
    raise ListingInvalid(f"tools/list has more than {MAX_LIST_PAGES} pages")


def listing_failure(exc: BaseException) -> str:
    """Why an upstream's ``tools/list`` failed, for the log and ``callgate mcp import|check``:
    the start failure's reason (:class:`UpstreamStartFailed`), the unusable listing's problem
    (:class:`ListingInvalid`), else the exception's type (an HTTP error's text may carry a URL
    with credentials: not quoted)."""
    if isinstance(exc, UpstreamStartFailed):
        return exc.reason
    if isinstance(exc, ListingInvalid):
        return f"{type(exc).__name__}: {exc}"
    return type(exc).__name__


def redeem_names(cfg: McpUpstreamConfig) -> dict[str, str]:
    """env/header key -> secret name, for the values a call must redeem."""
    return {k: v.secret for k, v in (*cfg.env, *cfg.headers) if isinstance(v, SecretRef)}


__all__ = [
    "Answered",
    "CallEnd",
    "ListingInvalid",
    "Lost",
    "NotSent",
    "Refused",
    "Upstream",
    "UpstreamStartFailed",
    "listing_failure",
    "redeem_names",
]
