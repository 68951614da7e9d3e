"""``callgate mcp serve``: the MCP server on stdio or streamable HTTP (``/mcp``) at once, and the
gateway behind it started in the background (:class:`GatewayStart`): the heavy imports, the
embedded sidecar (unless ``sidecar = "external"``) and every upstream's first connect and
``tools/list``, the upstreams all at once and beside the sidecar. ``initialize`` is answered as
soon as the MCP SDK is loaded; ``tools/list`` and ``tools/call`` wait for the sidecar, a call
also for its upstream's listing (hosting.py); a start that fails ends the server (exit 2)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from callgate.base.errors import CallgateError
from callgate.config import Config, check_loopback
from callgate.mcp.config import McpConfig, SidecarMode

if TYPE_CHECKING:
    from callgate.mcp.front import Identity, Listeners
    from callgate.mcp.gateway import Gateway
    from callgate.mcp.hosting import Hosting

log = logging.getLogger("callgate.mcp")


IMPORT_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while the gateway's modules load in a worker thread
(as :data:`callgate.policy.lifecycle.RELOAD_SWITCH_INTERVAL_S` while a policy load runs): at the
default 5 ms the event loop waits up to that long for the GIL after every await."""


NOT_STARTED_GRACE_S = 0.5
"""After a failed start, how long the server goes on so the requests that waited for the start
are answered with their error before it ends."""


async def _imported(name: str) -> Any:
    """``import name`` in a worker thread: the event loop keeps answering (``initialize``) while
    the modules load."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(min(saved, IMPORT_SWITCH_INTERVAL_S))
    try:
        return await asyncio.to_thread(importlib.import_module, name)
    finally:
        sys.setswitchinterval(saved)


class GatewayStart:
    """The gateway, started in the background: :meth:`begin`, then :meth:`gateway` waits for it.

    In order: the hosting modules load and every upstream's first connect and ``tools/list``
    begins (all at once, in the background: :meth:`Hosting.begin`); the sidecar modules load and
    the embedded sidecar starts; the gateway is built. ``tools/list`` needs only the sidecar (the
    tools of an upstream not listed yet are shown from their pins); a call waits for its
    upstream's listing and is sent only when its pin matches (hosting.py)."""

    def __init__(self, cfg: Config, mcp: McpConfig, listeners: Listeners | None = None) -> None:
        from callgate.mcp.front import Listeners, policy_watch

        self.cfg = cfg
        self.mcp = mcp
        self.listeners = listeners if listeners is not None else Listeners()
        self.watch = policy_watch(cfg.path(cfg.policy.dir), self.listeners)
        """Started with the server (a change right after ``initialize`` is announced)."""
        self._task: asyncio.Task[Gateway] | None = None
        self._began = 0.0
        self._hosting: Hosting | None = None
        self._components: Any = None
        self._sidecar: Any = None
        self._gateway: Gateway | None = None

    def begin(self) -> None:
        """Start in the background (idempotent); the policy folder is watched from now on."""
        if self._task is None:
            self._began = time.monotonic()
            self.watch.start()
            self._task = asyncio.get_running_loop().create_task(self._start(), name="mcp-gateway-start")

    @property
    def task(self) -> asyncio.Task[Gateway]:
        self.begin()
        assert self._task is not None
        return self._task

    async def gateway(self) -> Gateway:
        """The started gateway; raises what its start raised. A request cancelled while it waits
        does not cancel the start."""
        task = self.task
        if not task.done():
            await asyncio.wait([task])
        return task.result()

    def end_connection(self, connection: str) -> None:
        if self._gateway is not None:
            self._gateway.end_connection(connection)

    async def _start(self) -> Gateway:
        hosting = (await _imported("callgate.mcp.hosting")).Hosting(self.cfg, self.mcp, self.listeners)
        self._hosting = hosting
        hosting.begin()
        masker = None
        if self.mcp.sidecar is SidecarMode.EMBEDDED:
            app = await _imported("callgate.server.app")
            self._components = await app.build_components(
                self.cfg, tolerate_bad_policies=True, load_in_thread=True
            )
            masker = self._components.masker
            # one process per MCP client: another gateway of this config may serve the sockets
            self._sidecar = app.Sidecar(self._components, private_when_taken=True)
            await self._sidecar.start()
        gateway = await _imported("callgate.mcp.gateway")
        gw: Gateway = gateway.Gateway(
            self.cfg, self.mcp, masker, listeners=self.listeners, hosting=hosting, watch=self.watch,
            sidecar_addresses=self._sidecar.addresses if self._sidecar is not None else None,
        )  # fmt: skip
        self._gateway = gw
        await gw.start()
        log.info(
            "mcp gateway ready in %.2f s (%s sidecar); upstreams listed so far: %s",
            time.monotonic() - self._began, self.mcp.sidecar.value,
            ", ".join(sorted(hosting.view.listed_servers)) or "none",
        )  # fmt: skip
        return gw

    async def stop(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved (logged by the caller)
        if self._gateway is not None:
            await self._gateway.stop()
        else:
            await self.watch.stop()
            if self._hosting is not None:
                await self._hosting.close()
        if self._sidecar is not None:
            await self._sidecar.stop()
        elif self._components is not None:
            await self._components.close()

    async def serve(
        self, server: Coroutine[Any, Any, Any], halt: Callable[[], None] | None = None
    ) -> BaseException | None:
        """Run ``server`` (the MCP server's loop) until it ends, or until the start fails: then
        the requests that waited for it are answered (front.py ``NOT_STARTED``), the server is
        ended (``halt``, else cancelled) and the start's error returned."""
        serving = asyncio.get_running_loop().create_task(server, name="mcp-serve")
        self.begin()
        try:
            await asyncio.wait([serving, self.task], return_when=asyncio.FIRST_COMPLETED)
            error = self.task.exception() if self.task.done() and not self.task.cancelled() else None
            if error is None:
                await serving
                return None
            await asyncio.wait([serving], timeout=NOT_STARTED_GRACE_S)
            if halt is not None:
                halt()
            else:
                serving.cancel()
            await asyncio.wait([serving], timeout=10)
            return error
        finally:
            if not serving.done():
                serving.cancel()
                await asyncio.wait([serving])


@asynccontextmanager
async def running_gateway(cfg: Config, mcp: McpConfig) -> AsyncIterator[Gateway]:
    """A started :class:`Gateway` (its sidecar started; its upstreams listed or being listed)."""
    start = GatewayStart(cfg, mcp)
    try:
        yield await start.gateway()
    finally:
        await start.stop()


def _http_identity(tenant: str) -> Any:
    from callgate.mcp.front import Identity

    def identity_of(ctx: Any) -> tuple[Identity, str] | None:
        request = getattr(ctx, "request", None)
        user = request.scope.get("user") if request is not None else None
        token = getattr(user, "access_token", None)
        subject = getattr(token, "subject", None)
        if not subject:
            return None
        connection = request.headers.get("mcp-session-id", "") if request is not None else ""
        return Identity(tenant, subject), connection

    return identity_of


def _ttl(mcp: McpConfig) -> float:
    """How long a sealed ``requestState`` is good for (a parked confirmation's wait, and a minute)."""
    return mcp.elicitation_timeout_seconds + 60.0


async def serve_stdio(cfg: Config, mcp: McpConfig) -> int:
    from callgate.mcp.front import Identity, build_server, init_options
    from callgate.mcp.wire import strict_stdio_server

    if not mcp.identity.tenant or not mcp.identity.user:
        log.error("cannot start: [mcp.identity] tenant and user are required for stdio")
        return 2
    who = (Identity(mcp.identity.tenant, mcp.identity.user), "stdio")
    start = GatewayStart(cfg, mcp)
    server = build_server(start, lambda ctx: who, request_state_ttl=_ttl(mcp))
    try:
        async with strict_stdio_server() as (read, write):
            failed = await start.serve(server.run(read, write, init_options(server)))
    finally:
        await start.stop()
    if failed is not None:
        raise failed
    return 0


async def serve_http(cfg: Config, mcp: McpConfig, listen: str) -> int:
    import uvicorn

    from callgate.mcp.auth import BearerVerifier
    from callgate.mcp.front import build_server
    from callgate.mcp.http_app import build_http_app, resource_url
    from callgate.mcp.wire import guard_endpoint

    host, port = check_loopback(listen or mcp.http.listen)
    resource = resource_url(mcp.http, host, port)
    verifier = BearerVerifier.load(mcp.http, cfg.path("."), resource)
    start = GatewayStart(cfg, mcp)
    server = build_server(start, _http_identity(mcp.http.tenant), request_state_ttl=_ttl(mcp))
    http = build_http_app(
        server,
        mcp.http,
        verifier,
        host=host,
        port=port,
        resource=resource,
        on_session_end=start.end_connection,
    )
    guard_endpoint(http.app, "/mcp")  # tools/call arguments reach the strict parser as bytes
    config = uvicorn.Config(http.app, host=host, port=port, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)  # stops on SIGINT/SIGTERM (uvicorn captures them)
    log.info("callgate mcp listening on http://%s:%d/mcp", host, port)
    try:

        def halt() -> None:
            web.should_exit = True

        failed = await start.serve(web.serve(), halt)
    finally:
        await start.stop()
    if failed is not None:
        raise failed
    if http.gate.refused:
        log.info("mcp http: %d new sessions refused at the per-subject limit", http.gate.refused)
    return 0


def serve(cfg: Config, mcp: McpConfig, transport: str, listen: str) -> int:
    try:
        if transport == "http":
            return asyncio.run(serve_http(cfg, mcp, listen))
        return asyncio.run(serve_stdio(cfg, mcp))
    except (CallgateError, OSError) as exc:  # OSError: a store folder or socket path not made
        log.error("cannot start: %s", exc)
        if transport != "http":
            _end_now(2)
        return 2


def _end_now(code: int) -> None:
    """End the process at once: the stdio reader thread may be blocked in a read of stdin that
    only the client ends, and the interpreter would wait for it at exit."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


__all__ = ["GatewayStart", "running_gateway", "serve", "serve_http", "serve_stdio"]
