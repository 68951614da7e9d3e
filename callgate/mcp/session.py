"""Who is acting and their callgate session: one per MCP connection and subject, opened through
the public client (:class:`callgate.client.AsyncClient`, agent role) and forgotten when the
connection ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from callgate.client import AsyncClient, AsyncSession, CallgateClientError, Dialect, Tool, ToolNames
from callgate.config import Config
from callgate.mcp.callkey import RequestScope
from callgate.mcp.front import Identity

log = logging.getLogger("callgate.mcp")


@dataclass
class McpSession:
    """One callgate session per MCP connection and subject."""

    sidecar: AsyncSession
    identity: Identity
    retries: bool = True
    """Whether the MCP connection is a session a retried request can be recognised in (stdio,
    an HTTP ``Mcp-Session-Id``); false for stateless HTTP (callgate/mcp/callkey.py)."""
    listed: int = 0
    """ListTools calls so far (each is a model call ``mcp-list-<n>``)."""
    log_level: str = "debug"
    """The client's ``logging/setLevel``: upstream log messages below it are not forwarded."""

    @property
    def session_id(self) -> str:
        return self.sidecar.session_id

    @property
    def names(self) -> ToolNames:
        return self.sidecar.names

    @property
    def model_call_id(self) -> str:
        return self.sidecar.model_call_id

    async def relist(self) -> list[tuple[Tool, dict[str, Any]]]:
        """ListTools for a new model call: each tool with its ``tools/list`` entry (MCP dialect)."""
        self.listed += 1
        rendered = await self.sidecar.tools(f"mcp-list-{self.listed}", Dialect.MCP)
        out: list[tuple[Tool, dict[str, Any]]] = []
        for entry in rendered:
            resolved = self.names.resolve(str(entry["name"]))
            tool = self.sidecar.listed(*resolved) if resolved is not None else None
            if tool is not None:
                out.append((tool, entry))
        return out

    def scope(self, ctx: Any) -> RequestScope:
        """The request of ``ctx`` in this session (what a derived idempotency key names)."""
        return RequestScope(
            self.identity.tenant,
            self.identity.subject,
            self.session_id,
            self.retries,
            getattr(ctx, "request_id", None),
        )


class Sessions:
    """The open sessions by (tenant, subject, connection): bounded by the open connections."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._sessions: dict[tuple[str, str, str], McpSession] = {}
        self._lock = asyncio.Lock()

    async def session_for(self, identity: Identity, connection: str) -> McpSession:
        key = (identity.tenant, identity.subject, connection)
        async with self._lock:
            s = self._sessions.get(key)
            if s is None:
                opened = await self.client.session(identity.tenant, identity.subject)
                s = McpSession(opened, identity, retries=bool(connection))
                self._sessions[key] = s
            return s

    def end_connection(self, connection: str) -> None:
        """Forget the callgate sessions of an ended MCP connection (an HTTP session deleted or
        closed when idle): what the gateway keeps is bounded by the open connections."""
        for key in [k for k in self._sessions if k[2] == connection]:
            del self._sessions[key]


async def cancel(sidecar: AsyncSession, invocation_id: str, reason: str) -> None:
    """Cancel (idempotent on every state); a failure is logged, never raised."""
    try:
        await sidecar.cancel(invocation_id, reason=reason)
    except CallgateClientError as exc:
        log.warning("cancel of %s failed: %s", invocation_id, exc.code)


def sidecar_client(cfg: Config, bound: Mapping[str, Sequence[str]] | None = None) -> AsyncClient:
    """The sidecar's agent, executor and confirmer listeners: where the embedded sidecar of
    this process listens (``bound``, its ``Sidecar.addresses``: the ``[server]`` listeners, or
    private sockets when another gateway of this config serves those), else the ``[server]``
    listeners of the config (an external sidecar)."""
    s = cfg.server

    def at(role: str, listener: Any) -> str:
        mine = (bound or {}).get(role)
        return mine[0] if mine else _address(cfg, listener)

    return AsyncClient(
        at("agent", s.agent), executor=at("executor", s.executor), confirmer=at("confirmer", s.confirmer)
    )


def _address(cfg: Config, listener: Any) -> str:
    if listener.socket:
        return "unix:" + str(cfg.path(listener.socket).resolve())
    return str(listener.tcp)


__all__ = ["Identity", "McpSession", "Sessions", "cancel", "sidecar_client"]
