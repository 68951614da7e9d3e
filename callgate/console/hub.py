"""``PendingHub``: one ``WatchPending`` stream per configured tenant, kept open (reconnected with
backoff when the sidecar goes away), holding each tenant's current list. Server-sent-event
streams wait on it for changes; items never seen before go to the notifier."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from callgate.console.notify import Notifier
from callgate.console.sidecar import ConsoleCallError, PendingItem, SidecarLink

log = logging.getLogger("callgate.console.hub")

BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between reconnects of a tenant's stream (the last one repeats)."""


class PendingHub:
    def __init__(self, link: SidecarLink, tenants: Sequence[str], notifier: Notifier) -> None:
        self._link = link
        self._tenants = tuple(tenants)
        self._notifier = notifier
        self._items: dict[str, tuple[PendingItem, ...]] = {t: () for t in self._tenants}
        self._known: dict[str, frozenset[str]] = {t: frozenset() for t in self._tenants}
        self._changed = asyncio.Condition()
        self.version = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(t)) for t in self._tenants]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow(self, tenant: str) -> None:
        failures = 0
        while True:
            try:
                async for items in self._link.watch(tenant):
                    failures = 0
                    await self._update(tenant, items)
            except ConsoleCallError as exc:
                log.warning("console: WatchPending for a tenant ended (%s); reconnecting", exc.code)
            except Exception:  # never let one tenant's stream die for good
                log.exception("console: WatchPending for a tenant failed; reconnecting")
            await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
            failures += 1

    async def _update(self, tenant: str, items: list[PendingItem]) -> None:
        ids = frozenset(i.invocation_id for i in items)
        new = [i for i in items if i.invocation_id not in self._known[tenant]]
        self._known[tenant] = ids  # an item that left never comes back (its state is terminal)
        self._items[tenant] = tuple(items)
        self._notifier.new_items(new)
        async with self._changed:
            self.version += 1
            self._changed.notify_all()

    def items(self, tenants: Sequence[str]) -> list[PendingItem]:
        """The pending items of ``tenants``, newest first."""
        out = [i for t in tenants for i in self._items.get(t, ())]
        return sorted(out, key=lambda i: (i.created_at, i.invocation_id), reverse=True)

    async def wait(self, seen: int, timeout_s: float) -> int:
        """The version after ``seen`` (at once if already newer), or ``seen`` after the timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.version != seen), timeout_s)
            except TimeoutError:
                pass
            return self.version


__all__ = ["PendingHub"]
