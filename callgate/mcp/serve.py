"""``callgate mcp serve``: the sidecar (embedded, or an external one's sockets), the upstreams,
then the MCP server on stdio or streamable HTTP (``/mcp``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from callgate.base.errors import CallgateError
from callgate.config import Config, check_loopback
from callgate.mcp.auth import BearerVerifier
from callgate.mcp.config import McpConfig, SidecarMode
from callgate.mcp.gateway import Gateway, Identity, build_server, init_options
from callgate.mcp.wire import guard_endpoint, strict_stdio_server

log = logging.getLogger("callgate.mcp")


@asynccontextmanager
async def running_gateway(cfg: Config, mcp: McpConfig) -> AsyncIterator[Gateway]:
    """The embedded sidecar (unless ``sidecar = "external"``) and a started :class:`Gateway`."""
    sidecar: Any = None
    secrets_masker = None
    if mcp.sidecar is SidecarMode.EMBEDDED:
        from callgate.server.app import Sidecar, build_components

        components = await build_components(cfg, tolerate_bad_policies=True)
        secrets_masker = components.masker
        sidecar = Sidecar(components)
        await sidecar.start()
    gw = Gateway(cfg, mcp, secrets_masker)
    try:
        await gw.start()
        yield gw
    finally:
        await gw.stop()
        if sidecar is not None:
            await sidecar.stop()


def _http_identity(tenant: str) -> Any:
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


async def serve_stdio(cfg: Config, mcp: McpConfig) -> int:
    if not mcp.identity.tenant or not mcp.identity.user:
        log.error("cannot start: [mcp.identity] tenant and user are required for stdio")
        return 2
    who = (Identity(mcp.identity.tenant, mcp.identity.user), "stdio")
    async with running_gateway(cfg, mcp) as gw:
        server = build_server(gw, lambda ctx: who)
        async with strict_stdio_server() as (read, write):
            await server.run(read, write, init_options(server))
    return 0


async def serve_http(cfg: Config, mcp: McpConfig, listen: str) -> int:
    import uvicorn

    from callgate.mcp.http_app import build_http_app, resource_url

    host, port = check_loopback(listen or mcp.http.listen)
    resource = resource_url(mcp.http, host, port)
    verifier = BearerVerifier.load(mcp.http, cfg.path("."), resource)
    async with running_gateway(cfg, mcp) as gw:
        server = build_server(gw, _http_identity(mcp.http.tenant))
        http = build_http_app(
            server,
            mcp.http,
            verifier,
            host=host,
            port=port,
            resource=resource,
            on_session_end=gw.end_connection,
        )
        guard_endpoint(http.app, "/mcp")  # tools/call arguments reach the strict parser as bytes
        config = uvicorn.Config(http.app, host=host, port=port, log_level="warning", lifespan="on")
        web = uvicorn.Server(config)  # stops on SIGINT/SIGTERM (uvicorn captures them)
        log.info("callgate mcp listening on http://%s:%d/mcp", host, port)
        await web.serve()
        if http.gate.refused:
            log.info("mcp http: %d new sessions refused at the per-subject limit", http.gate.refused)
    return 0


def serve(cfg: Config, mcp: McpConfig, transport: str, listen: str) -> int:
    try:
        if transport == "http":
            return asyncio.run(serve_http(cfg, mcp, listen))
        return asyncio.run(serve_stdio(cfg, mcp))
    except CallgateError as exc:
        log.error("cannot start: %s", exc)
        return 2


__all__ = ["running_gateway", "serve", "serve_http", "serve_stdio"]
