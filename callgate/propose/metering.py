"""Propose's side of the declared meters (issue 30 items 2-3): reserve, then let the policy read.

After the idempotency claim found the key free (a replay never reaches here: it never counts
twice) and before the policy is asked, the call's contribution to every meter its ToolSpec
declares is reserved in the store, atomically with the reading of the meter
(:mod:`callgate.store.meters`). The readings become ``context.usage`` of the policy request and
are recorded in the deciding event. The reservation then follows the invocation in the store:
final at COMMITTED / OUTCOME_UNKNOWN, released when it ends before the commit boundary (a deny
included); :meth:`Metering.release` drops it when the Propose wrote nothing of its own (it lost
the key to another invocation, or the write failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from callgate.core.errors import store_unavailable
from callgate.core.model import NormalizedArguments
from callgate.policy.meters import MeterError, Reading, contributions, usage_context
from callgate.policy.toolspecs import CompiledTool
from callgate.store.meters import MeterStore, meters_of

__all__ = ["Metering", "usage_record"]


def usage_record(usage: Mapping[str, Any]) -> dict[str, Any]:
    """``context.usage`` as the event records it (decimals as their exact text)."""
    return {
        m: {w: {k: str(v) if isinstance(v, Decimal) else v for k, v in ba.items()} for w, ba in ws.items()}
        for m, ws in usage.items()
    }


class Metering:
    """Reserves a Propose's meter contributions (None store: meters refused at use)."""

    def __init__(self, store: object, confirmation_ttl_seconds: int) -> None:
        self._store: MeterStore | None = meters_of(store)
        self._ttl = timedelta(seconds=confirmation_ttl_seconds)

    async def reserve(
        self,
        tool: CompiledTool,
        normalized: NormalizedArguments,
        *,
        invocation_id: str,
        tenant: str,
        subject: str,
        session_id: str,
        now: Any,
    ) -> dict[str, Any] | None:
        """``context.usage`` for this call, its contributions reserved; None when the tool
        declares no meters. Raises ``store_unavailable`` (fail closed) when the store keeps no
        meters or an argument cannot be counted."""
        if not tool.meters:
            return None
        if self._store is None:
            raise store_unavailable("the store keeps no meters; a ToolSpec declares meters")
        args = normalized.value if isinstance(normalized.value, Mapping) else {}
        try:
            resource = tool.resource.render(args) if any(m.scope == "resource" for m in tool.meters) else ""
            parts = contributions(
                tool.meters, args, tenant=tenant, subject=subject, session_id=session_id, resource=resource
            )
        except MeterError as exc:
            raise store_unavailable(f"{tool.spec.key}: {exc}") from None
        timeout = timedelta(milliseconds=tool.spec.timeout_ms)
        readings: Sequence[Reading] = await self._store.reserve(
            invocation_id, session_id, parts, now, now + max(timeout, self._ttl)
        )
        return usage_context(readings)

    async def release(self, invocation_id: str) -> None:
        if self._store is not None:
            await self._store.release(invocation_id)
