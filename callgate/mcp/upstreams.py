"""Connections to upstream MCP servers (stdio child processes, streamable HTTP or legacy SSE).

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
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
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
    if isinstance(err, httpx2.HTTPStatusError):
        return f"cannot connect (GET {shown_url(cfg.url)} answered HTTP {err.response.status_code})"
    if stdio:
        return f"cannot connect ({type(err).__name__})"
    return f"cannot connect to {shown_url(cfg.url)} ({type(err).__name__})"


def shown_url(url: str) -> str:
    """``url`` as a message may show it: scheme, host, port and path; no user, password, query
    or fragment (they may carry a credential)."""
    u = urlsplit(url)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{u.port}" if u.port else ""
    except ValueError:  # not a number: not shown
        port = ""
    return f"{u.scheme}://{host}{port}{u.path}"


def _wrong_transport(cfg: McpUpstreamConfig, err: BaseException | None) -> bool:
    """Whether an HTTP upstream's failure before ``initialize`` may be the other HTTP transport:
    the server answered at the HTTP level (an error status, which the SDK's streamable client
    spells as a JSON-RPC error of its own), not a refused connection or a timeout."""
    if cfg.transport is UpstreamTransport.HTTP:
        return isinstance(err, MCPError) and err.error.code in (types.METHOD_NOT_FOUND, types.INTERNAL_ERROR)
    if cfg.transport is UpstreamTransport.SSE:
        return isinstance(err, httpx2.HTTPStatusError | ValueError | MCPError)
    return False


async def _speaks_sse(url: str, headers: Mapping[str, str], timeout: float) -> bool:
    """Whether a ``GET`` of ``url`` opens a legacy SSE stream whose first event is ``endpoint``
    (read at most 4 KiB or ``timeout`` seconds; never raises)."""
    try:
        async with httpx2.AsyncClient(
            headers=dict(headers), timeout=timeout, follow_redirects=False
        ) as client:
            async with client.stream("GET", url, headers={"accept": "text/event-stream"}) as response:
                if response.status_code != 200:
                    return False
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    return False
                seen = b""
                with anyio.fail_after(timeout):
                    async for chunk in response.aiter_bytes():
                        seen += chunk
                        if b"\n\n" in seen.replace(b"\r\n", b"\n") or len(seen) > 4096:
                            break
                return any(line.strip() == b"event: endpoint" for line in seen.splitlines())
    except Exception:
        return False


async def transport_hint(
    cfg: McpUpstreamConfig, err: BaseException | None, headers: Mapping[str, str]
) -> str:
    """For an HTTP upstream that failed before ``initialize`` was answered: what to change when
    the URL speaks the other HTTP transport (``http`` against a legacy SSE server answers 404 or
    405 to the ``POST``, ``sse`` against a streamable HTTP server a ``GET`` error), naming the
    config's ``[[mcp.upstreams]]`` table; "" otherwise."""
    err = _leaf(err)
    if not _wrong_transport(cfg, err):
        return ""
    table = f'[[mcp.upstreams]] name = "{cfg.name}"'
    if cfg.transport is UpstreamTransport.HTTP:
        if await _speaks_sse(cfg.url, headers, min(cfg.timeout_seconds, 5.0)):
            return (
                f"; {shown_url(cfg.url)} speaks the legacy HTTP+SSE transport (a GET opens an event stream naming "
                f'its endpoint), not streamable HTTP: set transport = "sse" in {table}'
            )
        return (
            f"; is {shown_url(cfg.url)} the server's streamable HTTP endpoint? (a server that speaks only the "
            f'legacy HTTP+SSE transport needs transport = "sse" and the URL of its event stream in {table})'
        )
    return (
        f"; {shown_url(cfg.url)} opened no legacy SSE event stream: for a streamable HTTP server set "
        f'transport = "http" in {table}'
    )


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
        self.gone = False
        """The server no longer has this session (an HTTP refusal naming it, a broken SSE
        stream): nothing more can come back on it, so the connection is closed when replaced
        (a connection dropped for another reason may still carry other calls)."""
        self.reopened: dict[str, dict[str, Any]] | None = None
        """A listing connection that replaced a dead one: its ``tools/list`` when it was opened,
        by tool name (each call on it is checked against the pin)."""

    def _headers(self) -> dict[str, str]:
        """An HTTP upstream's headers, with this connection's redeemed secrets."""
        clean: dict[str, str] = {}
        for k, v in self.cfg.headers:
            value = self.values.get(k) if isinstance(v, SecretRef) else v
            if value is not None:
                clean[k] = value
        return clean

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
        clean = self._headers()
        if c.transport is UpstreamTransport.SSE:
            return sse_client(
                c.url,
                headers=clean,
                timeout=c.timeout_seconds,
                sse_read_timeout=max(c.timeout_seconds, 300.0),
            )
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
        if self.stderr is not None:
            return await self.stderr.tail()
        return await transport_hint(self.cfg, self._error, self._headers())

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
            if self.cfg.transport is UpstreamTransport.SSE and not isinstance(message, ValueError):
                # the legacy SSE session is its event stream: once that broke (the server
                # restarted or dropped it), no answer can come back on it; the next call opens a
                # new one (and checks its tools/list against the pin) instead of sending into it;
                # an event that is no JSON-RPC message (a ValueError) leaves the stream usable
                self.dead = self.gone = True
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


_HTTP_ERRORS: ContextVar[list[int] | None] = ContextVar("callgate_mcp_http_errors", default=None)
"""The HTTP error statuses of the ``POST``s of one call (set by :meth:`Upstream._send`; the SDK
runs each POST in the context of the task that sent the request). The SDK's streamable HTTP
client turns an error status without a JSON-RPC error body into an error of its own (-32603
``Server returned an error response``), which tells a 400 from a 502 no more."""

_SDK_HTTP_ERROR = "Server returned an error response"


async def _note_http_error(response: httpx2.Response) -> None:
    errors = _HTTP_ERRORS.get()
    if errors is not None and response.status_code >= 400 and response.request.method == "POST":
        errors.append(response.status_code)


class _HttpTransport:
    """``streamable_http_client`` over an httpx2 client carrying the upstream's headers."""

    def __init__(self, url: str, headers: dict[str, str], timeout: httpx2.Timeout) -> None:
        self.url, self.headers, self.timeout = url, headers, timeout
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        client = await self._stack.enter_async_context(
            httpx2.AsyncClient(
                headers=self.headers, timeout=self.timeout, event_hooks={"response": [_note_http_error]}
            )
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
        session, _ = await self._listing_checked()
        return session

    async def _listing_checked(self) -> tuple[ClientSession, dict[str, dict[str, Any]] | None]:
        """The listing connection, and, when it replaced one that died (a new process or a new
        HTTP session), the ``tools/list`` it answered when it was opened again: every call sent
        on it is checked against the pin first (taken under the lock, so no call goes out on
        the new connection before it was listed)."""
        async with self._lock:
            if self._conn is None or self._conn.dead:
                again = self._conn is not None
                if self._conn is not None and self._conn.gone:  # a session the server forgot: close ours
                    task = asyncio.get_running_loop().create_task(self._conn.close())
                    self._closing.add(task)
                    task.add_done_callback(self._closing.discard)
                conn = _Connection(self.cfg, self.base_dir, {}, self.on_changed)
                await conn.open()
                if again:
                    assert conn.session is not None
                    try:
                        tools = await _list_all(conn.session, self.cfg.timeout_seconds)
                    except BaseException:
                        await conn.close()
                        raise
                    conn.reopened = {str(t["name"]): t for t in tools}
                self._conn = conn
            assert self._conn.session is not None
            return self._conn.session, self._conn.reopened

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
        ``tools/list`` must still match ``expected_sha256`` (else :class:`NotSent`); so must a
        listing connection opened again after the last one died.

        An HTTP upstream that answers "session not found" (it restarted, or expired the session:
        streamable HTTP's 404 for a session id it does not know) did not run the tool: the
        connection is dropped and the call is sent once more on a new session (the client MUST
        start a new session then, says the MCP transport spec), after the new session's
        ``tools/list`` is checked against the pin. Before, the dead session was kept and every
        later call was refused ``upstream_refused`` until the gateway restarted."""
        end = await self._call_once(
            tool, arguments, secrets, timeout, progress, expected_sha256, digest, on_log
        )
        if isinstance(end, Refused) and session_gone(self.cfg, end.code, end.message):
            log.warning(
                "upstream %s: its HTTP session is gone (%s); %s is sent again on a new session",
                self.cfg.name, end.message[:100], tool,
            )  # fmt: skip
            end = await self._call_once(
                tool, arguments, secrets, timeout, progress, expected_sha256, digest, on_log
            )
        return end

    async def _call_once(
        self, tool: str, arguments: Mapping[str, Any], secrets: Mapping[str, str], timeout: float,
        progress: ProgressFn | None, expected_sha256: str, digest: Callable[[Mapping[str, Any]], str],
        on_log: LogFn | None,
    ) -> CallEnd:  # fmt: skip
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
                session, checked = await self._listing_checked()
                if checked is not None and (tool not in checked or digest(checked[tool]) != expected_sha256):
                    if self.on_changed is not None:  # the gateway lists it again, and says so
                        await self.on_changed(self.cfg.name)
                    return NotSent("definition_changed")
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

        errors: list[int] = []
        token = _HTTP_ERRORS.set(errors)
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, dict(arguments), progress_callback=on_progress)
        except TimeoutError:
            return Lost("timeout")
        except MCPError as exc:
            if exc.code in _LOCAL_CODES:
                _drop(owner)
                return Lost("connection_lost" if exc.code == types.CONNECTION_CLOSED else "timeout")
            if exc.code == types.INTERNAL_ERROR and exc.message == _SDK_HTTP_ERROR and errors:
                status = errors[-1]
                if status >= 500:
                    # a 5xx without a JSON-RPC answer (a crash mid-call, a proxy's 502/504):
                    # nobody knows whether the tool ran, so never "not committed"
                    return Lost(f"http_{status}")
                if status in (400, 404):  # a session the server no longer knows (a 4xx: not run)
                    _drop(owner, gone=True)
                    return Refused(
                        types.INVALID_REQUEST, f"HTTP {status} with no JSON-RPC answer: session not accepted?"
                    )
                return Refused(exc.code, f"HTTP {status}: {exc.message}")
            if session_gone(self.cfg, exc.code, exc.message):
                _drop(owner, gone=True)
            return Refused(exc.code, exc.message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            _drop(owner)
            return Lost("connection_lost")
        finally:
            _HTTP_ERRORS.reset(token)
        return Answered(result)

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        await asyncio.gather(*(c.close() for c in (self._conn, self._warm) if c is not None))
        self._conn = self._warm = None


_SESSION_CODES = frozenset({types.INVALID_REQUEST, -32001})
"""The codes of a streamable HTTP session the server does not know: -32600 (the SDK client's
``Session terminated`` for a 404, the Python SDK server's ``Session not found``) and -32001 (the
TypeScript SDK server's ``Session not found``)."""


def session_gone(cfg: McpUpstreamConfig, code: int, message: str) -> bool:
    """Whether an HTTP upstream refused a request because it no longer knows the session (the
    request was not processed; a new session may send it again)."""
    return cfg.transport is UpstreamTransport.HTTP and code in _SESSION_CODES and "session" in message.lower()


def _drop(conn: _Connection | None, *, gone: bool = False) -> None:
    """A lost connection is never reused (the listing one is reopened by the next call);
    ``gone``: the server no longer has its session (closed when replaced)."""
    if conn is not None:
        conn.dead = True
        conn.gone = conn.gone or gone


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
