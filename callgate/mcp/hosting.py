"""Upstream hosting: the upstream connections (upstreams.py), the pins in the policy folder and
whether each pinned tool's live definition still matches its pin. The live definitions are
listed at connect, on an upstream's ``tools/list_changed`` and before a call to an upstream
that could not be listed; a change is logged and refused until ``callgate mcp import`` re-pins.

At start every upstream is connected and listed in the background, all at once
(:meth:`Hosting.begin`), so the gateway answers before the slowest upstream is up. Until an
upstream's first listing is done its pinned tools are shown from their pins (what ``callgate mcp
import`` wrote; ``tools/list`` waits up to ``list_wait_seconds`` for it first), and a call to one
of them waits for that listing: nothing is sent to an upstream whose live definition was not
compared with the pin, and a changed one is refused (``upstream_definition_changed``) as before.
Clients that were shown tools from the pins are told ``tools/list_changed`` once it is done."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from callgate.config import Config
from callgate.mcp.codes import McpCode
from callgate.mcp.config import McpConfig, StructuredContent
from callgate.mcp.front import Listeners
from callgate.mcp.pins import Pin, PinState, definition_sha256, read_pins
from callgate.mcp.upstreams import Upstream, listing_failure

log = logging.getLogger("callgate.mcp")


class PinView:
    """The pinned tools in the policy folder, re-read when a file there changes, and the live
    digests the upstreams listed (refreshed at connect and on ``tools/list_changed``)."""

    def __init__(self, tools_dir: Path) -> None:
        self.tools_dir = tools_dir
        self._stamp: tuple[tuple[str, int], ...] = ()
        self._pins: dict[str, Pin] = {}
        self.live: dict[tuple[str, str], str] = {}
        self.definitions: dict[tuple[str, str], dict[str, Any]] = {}
        self.listed_servers: set[str] = set()

    def _current_stamp(self) -> tuple[tuple[str, int], ...]:
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in self.tools_dir.glob("*.json")))
        except OSError:
            return ()

    def pins(self) -> dict[str, Pin]:
        stamp = self._current_stamp()
        if stamp != self._stamp:
            self._pins = {f"{p.spec_name}@{p.version}": p for p in read_pins(self.tools_dir)}
            self._stamp = stamp
        return self._pins

    def state(self, pin: Pin) -> PinState:
        if pin.server not in self.listed_servers:
            return PinState.MISSING
        live = self.live.get((pin.server, pin.tool))
        if live is None:
            return PinState.MISSING
        return PinState.MATCH if live == pin.definition_sha256 else PinState.CHANGED

    def set_listing(self, server: str, tools: list[dict[str, Any]]) -> None:
        for key in [k for k in self.live if k[0] == server]:
            del self.live[key]
            self.definitions.pop(key, None)
        for t in tools:
            self.live[(server, str(t["name"]))] = definition_sha256(t)
            self.definitions[(server, str(t["name"]))] = t
        self.listed_servers.add(server)

    def definition(self, pin: Pin) -> dict[str, Any] | None:
        """The upstream's live ``tools/list`` entry of a pinned tool (title, annotations...)."""
        return self.definitions.get((pin.server, pin.tool))


class Hosting:
    """The configured upstreams and the :class:`PinView` of their pinned tools."""

    def __init__(self, cfg: Config, mcp: McpConfig, listeners: Listeners) -> None:
        self.view = PinView(cfg.path(cfg.policy.dir) / "tools")
        self.structured = mcp.structured_content is StructuredContent.PASS
        """``[mcp] structured_content``: whether ``outputSchema`` and ``structuredContent``
        are sent to clients."""
        self.upstreams = {
            u.name: Upstream(u, Path(cfg.base_dir), on_changed=self._list_changed) for u in mcp.upstreams
        }
        self.listeners = listeners
        self._tasks: set[asyncio.Task[None]] = set()
        self._first: dict[str, asyncio.Task[None]] = {}
        """Each upstream's first connect and listing (:meth:`begin`)."""
        self._from_pins: set[str] = set()
        """Upstreams whose tools a ``tools/list`` showed from their pins before their first
        listing was done: clients are told ``tools/list_changed`` when it is."""

    def begin(self) -> None:
        """Connect to and list every upstream in the background, all at once (idempotent)."""
        loop = asyncio.get_running_loop()
        for name in self.upstreams:
            if name not in self._first:
                self._first[name] = loop.create_task(self._first_listing(name), name=f"mcp-list-{name}")

    async def _first_listing(self, name: str) -> None:
        began = time.monotonic()
        await self.refresh(name)
        log.info(
            "upstream %s: %s in %.2f s", name,
            "listed" if self.reachable(name) else "not listed", time.monotonic() - began,
        )  # fmt: skip
        if name in self._from_pins:
            await self.listeners.tools_changed(
                f"upstream {name} listed (its tools were shown from their pins until now)"
            )

    def pending(self, server: str) -> bool:
        """Whether the upstream's first connect and listing is still running."""
        task = self._first.get(server)
        return task is not None and not task.done()

    async def settled(self, deadline: float | None = None) -> None:
        """Until every upstream's first listing is done, or ``deadline`` (``time.monotonic()``)
        has passed. Cancelling the wait does not cancel the listings."""
        waiting = [t for t in self._first.values() if not t.done()]
        timeout = None if deadline is None else deadline - time.monotonic()
        if waiting and (timeout is None or timeout > 0):
            await asyncio.wait(waiting, timeout=timeout)

    async def close(self) -> None:
        """All at once: each stdio upstream gets its grace period after its stdin is closed
        (the SDK's), and the client that stops the gateway waits only about that long."""
        for task in self._first.values():
            task.cancel()
        await asyncio.gather(*(up.close() for up in self.upstreams.values()))
        if self._first:
            await asyncio.wait(self._first.values())

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background, holding a reference until it is done."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def reachable(self, server: str) -> bool:
        """Whether the upstream answered its last ``tools/list``."""
        return server in self.view.listed_servers

    def matches(self, pin: Pin | None) -> bool:
        """A pin of a configured upstream whose live definition is the pinned one."""
        return pin is not None and pin.server in self.upstreams and self.view.state(pin) is PinState.MATCH

    def listable(self, pin: Pin | None) -> bool:
        """Whether ``tools/list`` shows the pinned tool: its live definition is the pinned one
        (:meth:`matches`), or its upstream's first listing is still running (shown from the pin;
        a call waits for the listing, :meth:`pin_refusal`)."""
        if pin is not None and pin.server in self.upstreams and self.pending(pin.server):
            self._from_pins.add(pin.server)
            return True
        return self.matches(pin)

    async def refresh(self, name: str, when: str = "connect") -> None:
        up = self.upstreams[name]
        try:
            tools = await up.list_tools()
        except Exception as exc:  # an unreachable upstream: its tools are not shown nor called
            log.warning(
                "upstream %s: cannot list tools (%s); its tools are unavailable", name, listing_failure(exc)
            )
            if name in self.view.listed_servers:  # its tools leave tools/list: clients are told
                self.view.listed_servers.discard(name)
                await self.listeners.tools_changed(f"upstream {name} can no longer be listed")
            return
        self.view.set_listing(name, tools)
        for pin in self.view.pins().values():
            if pin.server == name and self.view.state(pin) is not PinState.MATCH:
                self.report_changed(pin, when)
        if when == "tools/list_changed":
            await self.listeners.tools_changed(f"upstream {name} changed its tools")

    async def _list_changed(self, name: str) -> None:
        log.info("upstream %s: tools/list_changed", name)
        self.spawn(self.refresh(name, "tools/list_changed"))

    def report_changed(self, pin: Pin, when: str) -> None:
        state = self.view.state(pin)
        log.warning(
            "upstream definition %s: %s@%s (upstream %s tool %s) at %s; refused until `callgate mcp "
            "import` re-pins it",
            state.value, pin.spec_name, pin.version, pin.server, pin.tool, when,
        )  # fmt: skip

    async def pin_refusal(self, pin: Pin | None) -> McpCode | None:
        """Why a proposed call may not go on to its upstream, None when it may."""
        if pin is None or pin.server not in self.upstreams:
            return McpCode.UPSTREAM_NOT_PINNED
        first = self._first.get(pin.server)
        if first is not None and not first.done():
            # Still being connected and listed for the first time: wait for it (bounded by the
            # upstream's timeout_seconds; a cancelled call does not cancel it), never send before.
            await asyncio.wait([first])
        elif not self.reachable(pin.server):
            # Not listed since it could not be reached: try again now.
            await self.refresh(pin.server)
        if not self.reachable(pin.server):
            # Still unreachable: the call goes on to an attempt that never leaves (reported not
            # reached, retry allowed; nothing is sent to an upstream that was not listed).
            return None
        if self.view.state(pin) is not PinState.MATCH:
            self.report_changed(pin, "call")
            return McpCode.UPSTREAM_DEFINITION_CHANGED
        return None


__all__ = ["Hosting", "PinView"]
