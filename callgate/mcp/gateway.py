"""The MCP gateway: behind an MCP server (official SDK, low-level ``Server``: front.py) whose
``tools/list`` is the session's ListTools view and whose ``tools/call`` runs callgate's whole
chain before an upstream MCP server is called (docs/MCP.md has the sequence diagram).

This module only composes the parts, each with one job:

* front.py: the MCP server itself, answering ``initialize`` before the gateway is started
  (serve.py starts it in the background);
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

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types

from callgate.config import Config
from callgate.execute.redaction import Redactor
from callgate.execute.secrets import configured_masker
from callgate.mcp import listing
from callgate.mcp.callkey import IDEMPOTENCY_META_KEY, REQUEST_ID_META_KEY
from callgate.mcp.calls import Answer, Calls
from callgate.mcp.codes import McpCode, Refusals
from callgate.mcp.config import McpConfig
from callgate.mcp.confirm import CONFIRM_INPUT_KEY, Confirmations, arguments_sha256
from callgate.mcp.confirm import question as _question
from callgate.mcp.front import FolderWatch, Identity, Listeners, policy_watch
from callgate.mcp.hosting import Hosting
from callgate.mcp.results import PAGE_TOOL, error_result
from callgate.mcp.session import McpSession, Sessions, sidecar_client

log = logging.getLogger("callgate.mcp")


def masker(cfg: Config) -> Redactor:
    """The configured secrets by name and the secret patterns, masked in the question a person is
    asked (as the console masks them). Raises CallgateError (``config_invalid``) when a secret
    cannot be read: the sidecar would refuse to start on it too."""
    return configured_masker(cfg.secrets, Path(cfg.base_dir))


class Gateway:
    """The MCP-facing half, behind the server of front.py. ``start()`` begins listing the
    upstreams (in the background) and watching the policy folder."""

    def __init__(self, cfg: Config, mcp: McpConfig, secrets_masker: Redactor | None = None, *,
                 listeners: Listeners | None = None, hosting: Hosting | None = None,
                 watch: FolderWatch | None = None,
                 sidecar_addresses: Mapping[str, Sequence[str]] | None = None) -> None:  # fmt: skip
        """``secrets_masker``: the embedded sidecar's (:attr:`Components.masker`); else the
        configured secrets are read here (:func:`masker`). ``listeners``, ``hosting`` and
        ``watch``: those the start made before the gateway (serve.py), else new ones.
        ``sidecar_addresses``: where the embedded sidecar listens (``Sidecar.addresses``),
        else the ``[server]`` listeners of ``cfg``."""
        self.cfg = cfg
        self.mcp = mcp
        self.client = sidecar_client(cfg, sidecar_addresses)
        """The public client on the sidecar's agent, executor and confirmer listeners."""
        assert self.client.executor is not None
        self.executor = self.client.executor
        self.listeners = listeners if listeners is not None else Listeners()
        """Connected clients, told ``tools/list_changed`` (front.py)."""
        self.hosting = hosting if hosting is not None else Hosting(cfg, mcp, self.listeners)
        """The upstreams and the pins of their tools (hosting.py)."""
        self.tally = Refusals()
        self.refusals = self.tally.counts
        """Counts of refused calls by code (read by tests and the log at exit)."""
        self.sessions = Sessions(self.client)
        self.confirmations = Confirmations(
            self.client.confirmer(), mcp.elicitation_timeout_seconds, self.tally, self.hosting.spawn,
            secrets_masker if secrets_masker is not None else masker(cfg), mcp.confirm_without_elicitation,
        )  # fmt: skip
        self.calls = Calls(mcp, self.client, self.hosting, self.confirmations, self.tally)
        self.watch = watch if watch is not None else policy_watch(cfg.path(cfg.policy.dir), self.listeners)

    async def start(self) -> None:
        """Begin every upstream's first listing (all at once, not awaited: hosting.py) and the
        policy folder's watch."""
        self.hosting.begin()
        self.watch.start()

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

    async def on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None,
                            who: tuple[Identity, str] | None, asked: float) -> types.ListToolsResult:  # fmt: skip
        """``tools/list`` asked at ``asked`` (monotonic): upstreams still being listed for the
        first time are waited for until ``list_wait_seconds`` after it, then their tools are shown
        from their pins (hosting.py)."""
        listing.check_cursor(params)
        if who is None:
            return types.ListToolsResult(tools=[])
        s = await self.session_for(*who)
        self.listeners.add(who, ctx.session)
        await self.hosting.settled(asked + self.mcp.list_wait_seconds)
        return types.ListToolsResult(tools=await self.list_tools(s))

    async def on_call_tool(self, ctx: Any, params: types.CallToolRequestParams,
                           who: tuple[Identity, str] | None) -> Answer:  # fmt: skip
        if who is None:
            return error_result("unauthenticated", "no authenticated subject")
        s = await self.session_for(*who)
        self.listeners.add(who, ctx.session)
        if params.name == PAGE_TOOL:
            return await self.read_page(s, params.arguments)
        meta = dict(params.meta) if params.meta is not None else {}
        return await self.call_tool(
            ctx, s, params.name, params.arguments, meta, params.request_state, params.input_responses
        )

    async def on_set_level(self, who: tuple[Identity, str] | None, level: str) -> None:
        if who is not None:
            (await self.session_for(*who)).log_level = level

    async def read_page(self, s: McpSession, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        return await self.calls.read_page(s, arguments)

    async def call_tool(self, ctx: Any, s: McpSession, name: str, arguments: Mapping[str, Any] | None,
                        meta: Mapping[str, Any], request_state: str | None = None,
                        input_responses: Mapping[str, Any] | None = None) -> Answer:  # fmt: skip
        return await self.calls.call_tool(ctx, s, name, arguments, meta, request_state, input_responses)


__all__ = [
    "CONFIRM_INPUT_KEY",
    "IDEMPOTENCY_META_KEY",
    "REQUEST_ID_META_KEY",
    "Gateway",
    "Identity",
    "McpCode",
    "_question",
    "arguments_sha256",
]
