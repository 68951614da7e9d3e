"""The HTTP gateway's ASGI app: Host/Origin allowlists, bearer authentication, the protected-
resource metadata (RFC 9728) naming the configured authorization server, and ``/mcp`` served by
the SDK's session manager under per-subject limits (:mod:`callgate.mcp.http_sessions`).

Built from the SDK's parts rather than ``Server.streamable_http_app`` because that one enables
DNS-rebinding protection only when bound to 127.0.0.1, localhost or ::1 (then accepting any
``localhost:*`` origin), names the gateway itself as the authorization server when none is given,
and has no per-subject session limit.

The gateway keeps no event store (no stream resumability): a GET that reconnects its stream
with ``Last-Event-ID`` names an event the gateway never issued and gets a fresh stream
(:class:`NoReplay`; the SDK would end such a request without any response, an HTTP 500).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from callgate.mcp.auth import BearerVerifier
from callgate.mcp.config import McpHttpConfig
from callgate.mcp.http_sessions import LimitedSessionManager, SubjectGate, SubjectSessions, send_jsonrpc_error

_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))
"""URLs as written (RFC 8414 issuers compare as strings: no trailing slash added)."""


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resource_url(cfg: McpHttpConfig, host: str, port: int) -> str:
    """This gateway's resource URL (RFC 8707/9728): ``resource_url``, or ``http://<listen>/mcp``."""
    return cfg.resource_url or f"http://{_authority(host, port)}/mcp"


@dataclass(frozen=True)
class Allowlist:
    """``Host`` and ``Origin`` values accepted (lower case)."""

    hosts: frozenset[str]
    origins: frozenset[str]

    @staticmethod
    def of(cfg: McpHttpConfig, host: str, port: int, resource: str) -> Allowlist:
        """The configured lists, or by default the listen address and ``resource``'s origin."""
        listen = _authority(host, port)
        public = urlsplit(resource)
        hosts = cfg.allowed_hosts or (listen, public.netloc)
        origins = cfg.allowed_origins or (f"http://{listen}", f"{public.scheme}://{public.netloc}")
        return Allowlist(
            frozenset(h.lower() for h in hosts), frozenset(o.lower().rstrip("/") for o in origins)
        )


class HostOriginGuard:
    """Outermost ASGI middleware: every request (every route, every bind address) must name an
    allowed ``Host``; a request with an ``Origin`` (a browser's) must come from an allowed one.
    DNS rebinding and cross-site pages are refused before authentication."""

    def __init__(self, app: ASGIApp, allow: Allowlist) -> None:
        self.app = app
        self.allow = allow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k: v.decode("latin-1") for k, v in scope["headers"] if k in (b"host", b"origin")}
            if headers.get(b"host", "").lower() not in self.allow.hosts:
                await send_jsonrpc_error(
                    send, 421, "host_not_allowed", "callgate: Host not allowed (mcp.http.allowed_hosts)"
                )
                return
            origin = headers.get(b"origin")
            if origin is not None and origin.lower().rstrip("/") not in self.allow.origins:
                await send_jsonrpc_error(
                    send, 403, "origin_not_allowed", "callgate: Origin not allowed (mcp.http.allowed_origins)"
                )
                return
        await self.app(scope, receive, send)


class RequireScopes(RequireAuthMiddleware):
    """The SDK's bearer check of ``/mcp`` (401 without a valid token, 403 without a required
    scope), whose challenges also carry ``scope``: RFC 6750 3 and the MCP authorization spec's
    scope challenge (a 403 ``insufficient_scope`` names the scopes the client must ask for, so a
    client can step up without guessing)."""

    async def _send_auth_error(self, send: Send, status_code: int, error: str, description: str) -> None:
        parts = [f'error="{error}"', f'error_description="{description}"']
        if self.required_scopes:
            parts.append(f'scope="{" ".join(self.required_scopes)}"')
        if self.resource_metadata_url:
            parts.append(f'resource_metadata="{self.resource_metadata_url}"')
        body = json.dumps({"error": error, "error_description": description}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status_code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", f"Bearer {', '.join(parts)}".encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class HttpGateway:
    """The app and the parts tests and the log look at."""

    app: Starlette
    subjects: SubjectSessions
    gate: SubjectGate


LAST_EVENT_ID = b"last-event-id"


class NoReplay:
    """Drops ``Last-Event-ID`` from a GET: with no event store nothing can be replayed (the
    gateway sends no event ids), so the reconnecting client gets a new stream for the session,
    as from a server that does not offer resumability (MCP streamable HTTP, "Resumability and
    Redelivery": the server MAY replay). The SDK's transport, handed the header without an
    event store, returns without starting a response (HTTP 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != LAST_EVENT_ID]
            if len(headers) != len(scope["headers"]):
                scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)


def build_http_app(
    server: Server[Any],
    cfg: McpHttpConfig,
    verifier: BearerVerifier,
    *,
    host: str,
    port: int,
    resource: str,
    on_session_end: Any,
) -> HttpGateway:
    subjects = SubjectSessions(cfg.max_sessions_per_subject)
    manager = LimitedSessionManager(
        app=server,
        session_idle_timeout=cfg.session_idle_minutes * 60.0,
        max_sessions=cfg.max_sessions,
        subjects=subjects,
        on_end=on_session_end,
    )
    gate = SubjectGate(NoReplay(StreamableHTTPASGIApp(manager)), subjects)
    authorization_server = cfg.authorization_server or cfg.issuer
    metadata_url = (
        build_resource_metadata_url(_URL.validate_python(resource)) if authorization_server else None
    )
    routes = [Route("/mcp", endpoint=RequireScopes(gate, list(cfg.required_scopes), metadata_url))]
    if authorization_server:
        routes += create_protected_resource_routes(
            resource_url=_URL.validate_python(resource),
            authorization_servers=[_URL.validate_python(authorization_server)],
            scopes_supported=list(cfg.required_scopes) or None,
            resource_name="callgate MCP gateway",
        )
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(HostOriginGuard, allow=Allowlist.of(cfg, host, port, resource)),
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda app: manager.run(),
    )
    return HttpGateway(app, subjects, gate)


__all__ = [
    "Allowlist",
    "HostOriginGuard",
    "HttpGateway",
    "NoReplay",
    "RequireScopes",
    "build_http_app",
    "resource_url",
]
