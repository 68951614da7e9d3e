"""Propose's side of the declared meters (issue 30 items 2-3): reserve, then let the policy read.

After the idempotency claim found the key free (a replay never reaches here: it never counts
twice) and before the policy is asked, the call's contribution to every meter its ToolSpec
declares is reserved in the store, atomically with the reading of the meter
(:mod:`callgate.store.meters`). The readings become ``context.usage`` of the policy request and
are recorded in the deciding event. The reservation then follows the invocation in the store:
final at COMMITTED / OUTCOME_UNKNOWN, released when it ends before the commit boundary (a deny
included); :meth:`Metering.release` drops it when the Propose wrote nothing of its own (it lost
the key to another invocation, or the write failed). A tool's result labels are not reserved:
they are written with the outcome that makes the result exist (:mod:`callgate.store.labels`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import timedelta
from typing import Any

from callgate.base.errors import store_unavailable
from callgate.base.model import NormalizedArguments
from callgate.policy.meters import (
    Contribution,
    MeterError,
    Reading,
    contributions,
    usage_context,
)
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.toolspecs import CompiledTool
from callgate.store.meters import MeterStore, PostgresMeters, SQLiteMeters, meters_of

__all__ = ["Metering"]


class Metering:
    """Reserves a Propose's meter contributions (None store: meters refused at use)."""

    def __init__(self, store: object, confirmation_ttl_seconds: int) -> None:
        self._store: MeterStore | None = meters_of(store)
        self._ttl = timedelta(seconds=confirmation_ttl_seconds)

    async def prepare(
        self,
        snapshot: PolicySnapshot,
        tool: CompiledTool,
        normalized: NormalizedArguments,
        *,
        invocation_id: str,
        tenant: str,
        subject: str,
        session_id: str,
        now: Any,
    ) -> tuple[dict[str, Any] | None, tuple[str, ...] | None]:
        """``context.usage`` (None: the tool declares no meters) with this call's contributions
        reserved, and ``context.session.labels`` (None: no ToolSpec declares labels, or no policy
        that could decide the tool's actions reads them: :meth:`PolicySnapshot.reads_labels`).
        The tool's own result labels are not written here: the store records them with the
        outcome that makes the result exist (:mod:`callgate.store.labels`), so a tool whose only
        stateful part is its result labels costs no store write at Propose. Raises
        ``store_unavailable`` (fail closed) when the store keeps no meters (nor so labels) or an
        argument cannot be counted."""
        uses_labels = snapshot.reads_labels(tool)
        if not tool.meters and not tool.labels and not uses_labels:
            return None, None
        if self._store is None:
            raise store_unavailable("the store keeps no meters; a ToolSpec declares meters or labels")
        labels = await self._store.labels(tenant, session_id) if uses_labels else None
        if not tool.meters:  # the tool's own result labels are written with its outcome
            return None, labels
        parts = self._store.planned(invocation_id) if isinstance(self._store, SQLiteMeters) else None
        if parts is None:
            try:
                parts = self._parts(snapshot, tool, normalized, tenant, subject, session_id)
            except MeterError as exc:
                raise store_unavailable(f"{tool.spec.key}: {exc}") from None
        readings: Sequence[Reading] = await self._store.reserve(
            invocation_id, session_id, parts, now, self._expires(tool, now)
        )
        return usage_context(readings), labels

    def _expires(self, tool: CompiledTool, now: Any) -> Any:
        return now + timedelta(milliseconds=tool.spec.timeout_ms) + self._ttl

    @staticmethod
    def _parts(
        snapshot: PolicySnapshot,
        tool: CompiledTool,
        normalized: NormalizedArguments,
        tenant: str,
        subject: str,
        session_id: str,
    ) -> tuple[Contribution, ...]:
        args = normalized.value if isinstance(normalized.value, Mapping) else {}
        resource = tool.resource.render(args) if any(m.scope == "resource" for m in tool.meters) else ""
        return tuple(
            contributions(
                tool.meters,
                args,
                tenant=tenant,
                subject=subject,
                session_id=session_id,
                resource=resource,
                keeps=snapshot.meter_keeps(),
            )
        )

    def fold(self, tool: CompiledTool) -> AbstractAsyncContextManager[None]:
        """SQLite: a metered Propose's reservation is written by its invocation's transaction
        (:meth:`SQLiteMeters.fold`; one commit): entered before the idempotency key's look-up,
        which :meth:`read_ahead` lets carry the meters' reading. Elsewhere nothing."""
        if tool.meters and isinstance(self._store, SQLiteMeters):
            return self._store.fold()
        return nullcontext()

    def read_ahead(
        self,
        snapshot: PolicySnapshot,
        tool: CompiledTool,
        normalized: NormalizedArguments,
        *,
        invocation_id: str,
        tenant: str,
        subject: str,
        session_id: str,
        now: Any,
    ) -> None:
        """Inside :meth:`fold`: have the task's next writer transaction (the key's look-up) read
        this call's meters too. An argument that cannot be counted reads nothing here
        (:meth:`prepare` refuses it, after the key's look-up, as before)."""
        if not tool.meters or not isinstance(self._store, SQLiteMeters):
            return
        try:
            parts = self._parts(snapshot, tool, normalized, tenant, subject, session_id)
        except MeterError:
            return
        self._store.read_ahead(invocation_id, session_id, parts, now, self._expires(tool, now))

    def transaction(self, tool: CompiledTool) -> AbstractAsyncContextManager[None]:
        """Where the store keeps its meters in a database shared by sidecars (PostgreSQL), one
        transaction from the reservation to the invocation's write, so the two are committed
        together or not at all (the meters' locks are held across the decision). Elsewhere (no
        meters; SQLite, whose reservation is a writer transaction of its own) nothing."""
        if tool.meters and isinstance(self._store, PostgresMeters):
            return self._store.transaction()
        return nullcontext()

    async def release(self, invocation_id: str) -> None:
        if self._store is not None:
            await self._store.release(invocation_id)
