"""The MCP server a client talks to, built before the rest of the gateway exists: it needs only
the MCP SDK, so ``callgate mcp serve`` answers ``initialize`` (and ``ping``) as soon as the SDK is
loaded, while the gateway starts in the background (callgate/mcp/serve.py: the heavy imports,
the embedded sidecar and every upstream's verification, all at once). Every other request waits
for the started gateway (:class:`Started`) and is then handled by it (gateway.py); nothing is
answered from a gateway that is not started, and a start that fails ends the server.

Also here, because the server needs them before the gateway: who is acting (:class:`Identity`),
the connected clients told ``tools/list_changed`` (:class:`Listeners`), the policy folder's watch
that tells them (:class:`FolderWatch`, started with the server: a change right after
``initialize`` is announced) and the low-level server class declaring it (:class:`GatewayServer`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ToolsListChanged

if TYPE_CHECKING:
    from callgate.mcp.gateway import Gateway

log = logging.getLogger("callgate.mcp")

REQUEST_STATE_AUDIENCE = "callgate-mcp"
"""Audience claim of the sealed ``requestState`` (the SDK's ``RequestStateBoundary``)."""


NOT_STARTED = "callgate mcp serve could not start (its log says why); nothing ran"
"""The JSON-RPC error (-32603) of a request that waited for a start that failed."""


@dataclass(frozen=True)
class Identity:
    """Who is acting: from ``[mcp.identity]`` (stdio) or the validated bearer token (HTTP)."""

    tenant: str
    subject: str


IdentityOf = Callable[[Any], "tuple[Identity, str] | None"]
"""``identity_of(ctx) -> (Identity, connection key) | None`` (None: no authenticated subject)."""


class Started(Protocol):
    """The gateway being started: :meth:`gateway` waits for it (and raises when its start
    failed); :attr:`listeners` exist from the beginning."""

    listeners: Listeners

    async def gateway(self) -> Gateway: ...


class Listeners:
    """Connected clients, for ``notifications/tools/list_changed``: the sessions of handshake-era
    clients (2025-11-25), and the ``subscriptions/listen`` streams of 2026-07-28 clients (the
    SDK's bus and :attr:`listen` handler)."""

    def __init__(self) -> None:
        self._sessions: dict[Any, Any] = {}
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)

    def add(self, key: Any, session: Any) -> None:
        self._sessions[key] = session

    async def tools_changed(self, why: str) -> None:
        await self.bus.publish(ToolsListChanged())
        if not self._sessions:
            return
        log.info("tools/list_changed sent to %d client(s): %s", len(self._sessions), why)
        for key, session in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a gone client: forget it
                log.debug("tools/list_changed not sent: %s", type(exc).__name__)
                self._sessions.pop(key, None)


class FolderWatch:
    """Polls the policy folder's files (name, mtime, size) and calls ``changed`` when they differ."""

    def __init__(self, root: Path, changed: Callable[[], Awaitable[None]], interval: float = 0.5) -> None:
        self.root, self.changed, self.interval = root, changed, interval
        self._task: asyncio.Task[None] | None = None

    def stamp(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        try:
            for p in sorted(self.root.rglob("*")):
                if p.is_file():
                    st = p.stat()
                    out.append((str(p.relative_to(self.root)), st.st_mtime_ns, st.st_size))
        except OSError:
            pass
        return tuple(out)

    def start(self) -> None:
        """Watch from now on (the first stamp is taken here, so a change right after is seen)."""
        if self._task is None:
            first = self.stamp()
            self._task = asyncio.get_running_loop().create_task(self._run(first), name="mcp-policy-watch")

    async def _run(self, last: tuple[tuple[str, int, int], ...]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            now = self.stamp()
            if now != last:
                last = now
                try:
                    await self.changed()
                except Exception as exc:
                    log.warning("policy folder change not announced: %s", type(exc).__name__)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


def policy_watch(policy_dir: Path, listeners: Listeners) -> FolderWatch:
    """The policy folder's watch, telling ``listeners`` when a pin or policy file changes."""

    async def changed() -> None:
        await listeners.tools_changed("the policy folder changed (pins or policies)")

    return FolderWatch(policy_dir, changed)


class GatewayServer(Server[Any]):
    """The low-level server, declaring ``tools.listChanged`` on every transport (the HTTP session
    manager builds its initialization options without arguments)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def build_server(started: Started, identity_of: IdentityOf, *, request_state_ttl: float) -> Server[Any]:
    """The low-level MCP server. ``initialize``, ``ping`` and ``subscriptions/listen`` are the
    SDK's and need no gateway; ``tools/list``, ``tools/call`` and ``logging/setLevel`` wait for
    the started gateway (``started.gateway()``), then it handles them."""

    async def gateway() -> Gateway:
        try:
            return await started.gateway()
        except Exception as exc:  # the server ends too (serve.py); the log has the cause
            raise MCPError(types.INTERNAL_ERROR, NOT_STARTED) from exc

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        asked = time.monotonic()
        gw = await gateway()
        return await gw.on_list_tools(ctx, params, identity_of(ctx), asked)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        gw = await gateway()
        return await gw.on_call_tool(ctx, params, identity_of(ctx))

    def principal(ctx: Any) -> str | None:
        """The ``requestState`` is bound to who asked: tenant, subject and connection."""
        who = identity_of(ctx)
        if who is None:
            return None
        identity, connection = who
        return json.dumps([identity.tenant, identity.subject, connection])

    async def on_set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        gw = await gateway()
        await gw.on_set_level(identity_of(ctx), params.level)
        return types.EmptyResult()

    with warnings.catch_warnings():  # logging/setLevel: deprecated by 2026-07-28, used before it
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = GatewayServer(
            "callgate-mcp", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool,
            on_set_logging_level=on_set_level, on_subscriptions_listen=started.listeners.listen,
        )  # fmt: skip
    # 2026-07-28 confirmations: the SDK seals every outgoing requestState (AES-256-GCM under a key
    # made now, held only by this process) bound to the method, tool name, arguments, subject and
    # audience, with a TTL, and refuses a tampered or re-targeted one before the handler runs.
    security = RequestStateSecurity(
        keys=[secrets.token_bytes(32)],
        ttl=request_state_ttl,
        bind_principal=principal,
        audience=REQUEST_STATE_AUDIENCE,
    )
    server.middleware.append(RequestStateBoundary(security, default_audience=REQUEST_STATE_AUDIENCE))
    return server


def init_options(server: Server[Any]) -> Any:
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


__all__ = [
    "NOT_STARTED",
    "REQUEST_STATE_AUDIENCE",
    "FolderWatch",
    "GatewayServer",
    "Identity",
    "IdentityOf",
    "Listeners",
    "Started",
    "build_server",
    "init_options",
    "policy_watch",
]
