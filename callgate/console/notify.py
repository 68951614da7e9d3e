"""The optional webhook for new pending items: Slack-compatible JSON ``{"text": ...}`` with a link
to the item. The text names the tool, the subject, the tenant and the expiry, never the arguments
(they stay behind the console's login). Each POST runs in its own task with a timeout; a failure
is logged (without the URL, which is a secret for Slack) and blocks nothing."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote

import aiohttp

from callgate.console.sidecar import PendingItem

log = logging.getLogger("callgate.console.notify")


class Notifier:
    """POSTs one message per new pending item to ``url`` (nothing when the url is empty)."""

    def __init__(self, url: str, timeout_s: float, link_base: str) -> None:
        self._url = url
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._base = link_base.rstrip("/")
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.failed = 0

    @property
    def enabled(self) -> bool:
        return bool(self._url)

    def link(self, item: PendingItem) -> str:
        return f"{self._base}/t/{quote(item.tenant, safe='')}/i/{quote(item.invocation_id, safe='')}"

    def text(self, item: PendingItem) -> str:
        return (
            f"callgate: {item.tool_name}@{item.tool_version} proposed for {item.subject} "
            f"(tenant {item.tenant}) waits for a confirmation until {item.expires_at}: {self.link(item)}"
        )

    def new_items(self, items: list[PendingItem]) -> None:
        if not self._url:
            return
        for item in items:
            task = asyncio.get_running_loop().create_task(self._post(item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _post(self, item: PendingItem) -> None:
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as http:
                async with http.post(self._url, json={"text": self.text(item)}) as resp:
                    if resp.status >= 300:
                        raise aiohttp.ClientResponseError(
                            resp.request_info, (), status=resp.status, message=resp.reason or ""
                        )
            self.sent += 1
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.failed += 1
            log.warning(
                "console: the notification webhook failed for %s (%s)",
                item.invocation_id,
                getattr(exc, "status", None) or type(exc).__name__,
            )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["Notifier"]
