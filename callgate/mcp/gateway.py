"""The MCP gateway: an MCP server (official SDK, low-level ``Server``) whose ``tools/list`` is
the session's ListTools view and whose ``tools/call`` runs callgate's whole chain before an
upstream MCP server is called (docs/MCP.md has the sequence diagram).

This module only composes the parts, each with one job:

* session.py: who is acting, their callgate session (agent role of :mod:`callgate.client`);
* listing.py: ``tools/list`` (pinned, matching, servable tools and the paging tool);
* calls.py: ``tools/call`` (Propose, refusals and replays, the pin check, the paging tool);
* confirm.py: confirmations by elicitation or ``InputRequiredResult`` (confirmer role);
* attempts.py: the executor role through :meth:`callgate.client.AsyncClient.run`;
* results.py: results and refusals as MCP answers; codes.py: :class:`McpCode`;
* hosting.py: the upstreams and their pins; notify.py: logging and ``list_changed``.

It talks to the sidecar only through the public client API (``tests/test_mcp_imports.py``). Every
refusal is an ``isError`` result with a stable code (callgate's, or :class:`McpCode` for what only
the gateway can see); nothing unknown is ever run.
"""

from __future__ import annotations

import json
import logging
import secrets
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning

from callgate.config import Config
from callgate.execute.redaction import Redactor
from callgate.execute.secrets import configured_masker
from callgate.mcp import listing
from callgate.mcp.callkey import IDEMPOTENCY_META_KEY, REQUEST_ID_META_KEY
from callgate.mcp.calls import Answer, Calls
from callgate.mcp.codes import McpCode, Refusals
from callgate.mcp.config import McpConfig
from callgate.mcp.confirm import CONFIRM_INPUT_KEY, REQUEST_STATE_AUDIENCE, Confirmations, arguments_sha256
from callgate.mcp.confirm import question as _question
from callgate.mcp.hosting import Hosting
from callgate.mcp.notify import FolderWatch, GatewayServer, Listeners
from callgate.mcp.results import PAGE_TOOL, error_result
from callgate.mcp.session import Identity, McpSession, Sessions, sidecar_client

log = logging.getLogger("callgate.mcp")


def masker(cfg: Config) -> Redactor:
    """The configured secrets by name and the secret patterns, masked in the question a person is
    asked (as the console masks them). Raises CallgateError (``config_invalid``) when a secret
    cannot be read: the sidecar would refuse to start on it too."""
    return configured_masker(cfg.secrets, Path(cfg.base_dir))


class Gateway:
    """The MCP-facing half. ``start()`` connects the sidecar's listeners and the upstreams."""

    def __init__(self, cfg: Config, mcp: McpConfig, secrets_masker: Redactor | None = None) -> None:
        """``secrets_masker``: the embedded sidecar's (:attr:`Components.masker`); else the
        configured secrets are read here (:func:`masker`)."""
        self.cfg = cfg
        self.mcp = mcp
        self.client = sidecar_client(cfg)
        """The public client on the sidecar's agent, executor and confirmer listeners."""
        assert self.client.executor is not None
        self.executor = self.client.executor
        self.listeners = Listeners()
        """Connected clients, told ``tools/list_changed`` (notify.py)."""
        self.hosting = Hosting(cfg, mcp, self.listeners)
        """The upstreams and the pins of their tools (hosting.py)."""
        self.tally = Refusals()
        self.refusals = self.tally.counts
        """Counts of refused calls by code (read by tests and the log at exit)."""
        self.sessions = Sessions(self.client)
        self.confirmations = Confirmations(
            self.client.confirmer(), mcp.elicitation_timeout_seconds, self.tally, self.hosting.spawn,
            secrets_masker if secrets_masker is not None else masker(cfg),
        )  # fmt: skip
        self.calls = Calls(mcp, self.client, self.hosting, self.confirmations, self.tally)
        self.watch = FolderWatch(cfg.path(cfg.policy.dir), self._policy_changed)

    async def start(self) -> None:
        await self.hosting.start()
        self.watch.start()

    async def _policy_changed(self) -> None:
        await self.listeners.tools_changed("the policy folder changed (pins or policies)")

    async def stop(self) -> None:
        await self.watch.stop()
        await self.confirmations.cancel_all()
        await self.hosting.close()
        await self.client.close()
        if self.refusals:
            log.info(
                "mcp gateway refusals: %s", ", ".join(f"{k}={v}" for k, v in sorted(self.refusals.items()))
            )

    async def session_for(self, identity: Identity, connection: str) -> McpSession:
        return await self.sessions.session_for(identity, connection)

    def end_connection(self, connection: str) -> None:
        self.sessions.end_connection(connection)

    async def list_tools(self, s: McpSession) -> list[types.Tool]:
        return await listing.session_tools(s, self.hosting)

    async def read_page(self, s: McpSession, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        return await self.calls.read_page(s, arguments)

    async def call_tool(self, ctx: Any, s: McpSession, name: str, arguments: Mapping[str, Any] | None,
                        meta: Mapping[str, Any], request_state: str | None = None,
                        input_responses: Mapping[str, Any] | None = None) -> Answer:  # fmt: skip
        return await self.calls.call_tool(ctx, s, name, arguments, meta, request_state, input_responses)


def build_server(gw: Gateway, identity_of: Any) -> Server[Any]:
    """The low-level MCP server; ``identity_of(ctx) -> (Identity, connection key) | None``."""

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        listing.check_cursor(params)
        who = identity_of(ctx)
        if who is None:
            return types.ListToolsResult(tools=[])
        s = await gw.session_for(*who)
        gw.listeners.add(who, ctx.session)
        return types.ListToolsResult(tools=await gw.list_tools(s))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Answer:
        who = identity_of(ctx)
        if who is None:
            return error_result("unauthenticated", "no authenticated subject")
        s = await gw.session_for(*who)
        gw.listeners.add(who, ctx.session)
        if params.name == PAGE_TOOL:
            return await gw.read_page(s, params.arguments)
        meta = dict(params.meta) if params.meta is not None else {}
        return await gw.call_tool(
            ctx, s, params.name, params.arguments, meta, params.request_state, params.input_responses
        )

    def principal(ctx: Any) -> str | None:
        """The ``requestState`` is bound to who asked: tenant, subject and connection."""
        who = identity_of(ctx)
        if who is None:
            return None
        identity, connection = who
        return json.dumps([identity.tenant, identity.subject, connection])

    async def on_set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        who = identity_of(ctx)
        if who is not None:
            (await gw.session_for(*who)).log_level = params.level
        return types.EmptyResult()

    with warnings.catch_warnings():  # logging/setLevel: deprecated by 2026-07-28, used before it
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = GatewayServer(
            "callgate-mcp", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool,
            on_set_logging_level=on_set_level, on_subscriptions_listen=gw.listeners.listen,
        )  # fmt: skip
    # 2026-07-28 confirmations: the SDK seals every outgoing requestState (AES-256-GCM under a key
    # made now, held only by this process) bound to the method, tool name, arguments, subject and
    # audience, with a TTL, and refuses a tampered or re-targeted one before the handler runs.
    security = RequestStateSecurity(
        keys=[secrets.token_bytes(32)],
        ttl=gw.mcp.elicitation_timeout_seconds + 60.0,
        bind_principal=principal,
        audience=REQUEST_STATE_AUDIENCE,
    )
    server.middleware.append(RequestStateBoundary(security, default_audience=REQUEST_STATE_AUDIENCE))
    return server


def init_options(server: Server[Any]) -> Any:
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


__all__ = [
    "CONFIRM_INPUT_KEY",
    "IDEMPOTENCY_META_KEY",
    "REQUEST_ID_META_KEY",
    "Gateway",
    "Identity",
    "McpCode",
    "_question",
    "arguments_sha256",
    "build_server",
]
