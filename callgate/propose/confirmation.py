"""Confirmation (spec 6.6, 6.11): a parked invocation waits for a person, bound to its digest;
and the deadline of every invocation that has not started executing (6.2, 6.7).

``Propose`` parks an invocation whose decision is *confirm* in AUTHORIZED with an expiry. A
``Confirm`` with exactly its digest moves it to PREPARED; any other digest cancels it (6.11:
``if not confirmation.matches(invocation.digest): return cancelled_before_commit``); after the
expiry it is cancelled, by ``Confirm`` itself, by a proposal that reuses its key, or by the sweep.
Every cancellation gives the idempotency key back.

**Deadlines.** The invocation deadline is the tool's execution budget (ToolSpec
``timeout_policy.timeout_ms``: retries, 6.9, and credentials live inside it); it counts from the
moment the call may execute, i.e. from PREPARED:

* allowed at once: ``deadline = proposed_at + timeout_ms``;
* parked for a confirmation: while parked, the deadline *is* the end of the confirmation window
  (``deadline = confirmation_expires_at``), so no confirmation can ever be accepted after the
  deadline; an accepted ``Confirm`` starts the execution budget: ``deadline = confirmed_at +
  timeout_ms`` (recorded on the ``confirmed`` event).

The alternative, capping the confirmation window by a deadline counted from the proposal, would
leave a person ten seconds to confirm a calendar write (and hand the executor what the person left
of its budget). An AUTHORIZED or PREPARED invocation past its deadline is ended by
:meth:`Confirmations.expire_deadlines` (the sweep, also at startup) or by ``Confirm``:
CANCELLED_BEFORE_COMMIT, event ``deadline_expired``, idempotency key released. From EXECUTING on
the deadline ends nothing: the commit boundary may have been passed (6.7).
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import (
    ErrorCode,
    confirmation_digest_mismatch,
    confirmation_expired,
    confirmation_not_pending,
    deadline_exceeded,
    invalid_request,
    unknown_tool_version,
)
from callgate.base.events import EventKind
from callgate.base.states import State
from callgate.base.trace import TraceContext
from callgate.policy.serving import ServingSnapshot
from callgate.propose.idempotency import IdempotencyFlow
from callgate.store.base import InvocationRecord, Store
from callgate.store.trail import move, planned

DEADLINE_SWEEP_BATCH = 500
"""Invocations one deadline sweep ends at most (the next sweep takes the rest)."""
SWEEP_SLICE = 32
"""Invocations a sweep reads and ends per store transaction (:meth:`Store.transition_many`).
Between two slices the event loop serves other calls: a sweep of hundreds of expired invocations
costs one write per slice, not one per invocation, and neither the loop nor the writer thread
holds the GIL for more than one slice's records at a time (docs/BENCHMARKS.md, "the sweeper")."""


class Confirmations:
    """Confirm, expire and list parked invocations; end invocations past their deadline."""

    def __init__(
        self, *, store: Store, clock: Clock, keys: IdempotencyFlow, serving: ServingSnapshot
    ) -> None:
        self._store = store
        self._clock = clock
        self._keys = keys
        self._serving = serving

    async def _cancel(
        self, inv: InvocationRecord, kind: EventKind, data: dict[str, str], trace: TraceContext
    ) -> InvocationRecord | None:
        moved = await move(
            self._store, inv, State.CANCELLED_BEFORE_COMMIT, kind, data, trace, rfc3339(self._clock.now())
        )
        if moved is not None:
            await self._keys.release(inv)
        return moved

    async def _cancel_many(
        self, ends: Sequence[tuple[InvocationRecord, EventKind, dict[str, str]]], trace: TraceContext
    ) -> int:
        """:meth:`_cancel` for many invocations, :data:`SWEEP_SLICE` per transaction; how many
        were cancelled (one that another call moved first is skipped, as in :meth:`_cancel`)."""
        ended = 0
        for k in range(0, len(ends), SWEEP_SLICE):
            at = rfc3339(self._clock.now())
            cancel = State.CANCELLED_BEFORE_COMMIT
            moves = [
                planned(inv, cancel, kind, data, trace, at) for inv, kind, data in ends[k : k + SWEEP_SLICE]
            ]
            for move_, done in zip(moves, await self._store.transition_many(moves), strict=True):
                if done:
                    ended += 1
                    await self._keys.release(move_.record)
        return ended

    async def confirm(
        self, inv: InvocationRecord, digest: str, confirmed_by: str, trace: TraceContext, note: str = ""
    ) -> InvocationRecord:
        """Confirm the parked ``inv`` with ``digest``; the PREPARED record, or an error."""
        if inv.state is not State.AUTHORIZED or not inv.confirmation_expires_at:
            raise confirmation_not_pending(
                f"invocation has no pending confirmation (state {inv.state.value})"
            )
        now = self._clock.now()
        if now >= datetime.fromisoformat(inv.confirmation_expires_at):
            await self._cancel(
                inv, EventKind.CONFIRMATION_EXPIRED, {"expired_at": inv.confirmation_expires_at}, trace
            )
            raise confirmation_expired("the confirmation window has passed")
        if inv.deadline and now >= datetime.fromisoformat(inv.deadline):
            # Not reached for records written by this version (their deadline is the window's
            # end while parked); a record with an earlier deadline is never confirmed past it.
            await self._cancel(inv, EventKind.DEADLINE_EXPIRED, {"deadline": inv.deadline}, trace)
            raise deadline_exceeded("the invocation deadline has passed; it was cancelled, propose again")
        if not hmac.compare_digest(digest.encode(), inv.digest.encode()):
            # 6.6 / 6.11: a confirmation of anything else than the parked digest cancels it.
            data = {"reason": ErrorCode.CONFIRMATION_DIGEST_MISMATCH.value, "confirmed_by": confirmed_by}
            if await self._cancel(inv, EventKind.CONFIRMATION_REJECTED, data, trace) is None:
                raise confirmation_not_pending("invocation has no pending confirmation")
            raise confirmation_digest_mismatch(
                "digest does not match the parked invocation; it was cancelled, propose again"
            )
        tool = self._serving.current.tools.get(inv.tool_name, inv.tool_version)
        if tool is None:
            raise unknown_tool_version(
                f"{inv.tool_name}@{inv.tool_version} is no longer in the policy snapshot"
            )
        # The execution budget starts now (module docstring: the deadline counts from PREPARED).
        deadline = rfc3339(now + timedelta(milliseconds=tool.spec.timeout_ms))
        moved = await move(
            self._store,
            replace(inv, deadline=deadline),
            State.PREPARED,
            EventKind.CONFIRMED,
            {"digest": inv.digest, "confirmed_by": confirmed_by, "deadline": deadline, **_note(note)},
            trace,
            rfc3339(now),
        )
        if moved is None:
            raise confirmation_not_pending("invocation has no pending confirmation")
        # The barrier (spec 6.7, docs/RELIABILITY.md): the proposal and its confirmation are on
        # disk before the confirmation is accepted; if not, Confirm fails and nothing runs.
        await self._store.barrier()
        return moved

    async def deny(
        self, inv: InvocationRecord, digest: str, denied_by: str, trace: TraceContext, note: str = ""
    ) -> InvocationRecord:
        """The confirmer refused the parked ``inv``: CANCELLED_BEFORE_COMMIT (event
        ``confirmation_rejected``, reason ``denied``), key released. Another digest cancels it
        too and answers ``confirmation_digest_mismatch``, like :meth:`confirm`."""
        if inv.state is not State.AUTHORIZED or not inv.confirmation_expires_at:
            raise confirmation_not_pending(
                f"invocation has no pending confirmation (state {inv.state.value})"
            )
        matches = hmac.compare_digest(digest.encode(), inv.digest.encode())
        reason = "denied" if matches else ErrorCode.CONFIRMATION_DIGEST_MISMATCH.value
        data = {"reason": reason, "denied_by": denied_by, **_note(note)}
        moved = await self._cancel(inv, EventKind.CONFIRMATION_REJECTED, data, trace)
        if moved is None:
            raise confirmation_not_pending("invocation has no pending confirmation")
        if not matches:
            raise confirmation_digest_mismatch(
                "digest does not match the parked invocation; it was cancelled, propose again"
            )
        return moved

    async def expire_if_stale(self, invocation_id: str, trace: TraceContext) -> bool:
        """Cancel a parked invocation whose confirmation window has passed (releasing its
        idempotency key). True if it was (or already is) expired and cancelled."""
        inv = await self._store.get_invocation(invocation_id)
        if inv is None or inv.state is not State.AUTHORIZED or not inv.confirmation_expires_at:
            return False
        if self._clock.now() < datetime.fromisoformat(inv.confirmation_expires_at):
            return False
        await self._cancel(
            inv, EventKind.CONFIRMATION_EXPIRED, {"expired_at": inv.confirmation_expires_at}, trace
        )
        return True

    async def expire_all(self) -> int:
        """Sweep: cancel every parked invocation whose confirmation expired (6.11: an unconfirmed
        call ends as cancelled_before_commit). Returns how many were cancelled."""
        now = self._clock.now()
        expired = [
            inv
            for inv in await self._store.list_pending("")
            if now >= datetime.fromisoformat(inv.confirmation_expires_at)
        ]
        trace = TraceContext.from_traceparent(None)
        ends = [
            (inv, EventKind.CONFIRMATION_EXPIRED, {"expired_at": inv.confirmation_expires_at})
            for inv in expired
        ]
        return await self._cancel_many(ends, trace)

    async def expire_deadlines(self) -> int:
        """Sweep: end every AUTHORIZED or PREPARED invocation whose deadline has passed
        (CANCELLED_BEFORE_COMMIT, event ``deadline_expired``, idempotency key released); at most
        :data:`DEADLINE_SWEEP_BATCH` per call. Returns how many were ended (an invocation that
        another call moved first is skipped)."""
        now = self._clock.now()
        trace = TraceContext.from_traceparent(None)
        ended = listed = 0
        while listed < DEADLINE_SWEEP_BATCH:  # read a slice, end it, read the next (by deadline)
            past = await self._store.list_past_deadline(now, min(SWEEP_SLICE, DEADLINE_SWEEP_BATCH - listed))
            listed += len(past)
            ends = [(inv, EventKind.DEADLINE_EXPIRED, {"deadline": inv.deadline}) for inv in past]
            ended += await self._cancel_many(ends, trace)
            if len(past) < SWEEP_SLICE:
                break
        return ended

    async def pending(self, tenant: str, page_size: int = 0, page_token: str = "") -> PendingPage:
        """One page of the parked invocations of ``tenant`` still inside their confirmation window
        (``ListPending``): oldest first, ``page_size`` of them (0: the default; above the maximum:
        the maximum; negative: ``invalid_request``), after ``page_token``. The tenant is required:
        there is no listing across tenants."""
        if not tenant:
            raise invalid_request("tenant is required")
        if page_size < 0:
            raise invalid_request("page_size must not be negative")
        size = min(page_size or PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX)
        cursor = _cursor_of(tenant, page_token) if page_token else None
        now = self._clock.now()
        live: list[InvocationRecord] = []
        while True:  # expired ones (not yet swept) are skipped; fill the page from later rows
            want = size + 1 - len(live)
            rows = await self._store.list_pending_page(tenant, cursor, want)
            live += [r for r in rows if now < datetime.fromisoformat(r.confirmation_expires_at)]
            if len(live) > size:
                return PendingPage(tuple(live[:size]), _token_of(tenant, live[size - 1]))
            if len(rows) < want:
                return PendingPage(tuple(live), "")
            cursor = (rows[-1].created_at, rows[-1].invocation_id)


NOTE_MAX = 500
"""Characters of a confirmer's note (``Confirm``/``Deny``) kept on the event."""


def _note(note: str) -> dict[str, str]:
    """The event data of a confirmer's optional note (none when empty)."""
    return {"note": note[:NOTE_MAX]} if note else {}


PAGE_SIZE_DEFAULT = 50
"""``ListPending`` page size when the request gives none."""
PAGE_SIZE_MAX = 500
"""The largest ``ListPending`` page; a larger ``page_size`` is served as this (AIP-158)."""


@dataclass(frozen=True, slots=True)
class PendingPage:
    """A page of parked invocations and the token of the next page (empty: the last page)."""

    pending: tuple[InvocationRecord, ...]
    next_page_token: str


def _token_of(tenant: str, last: InvocationRecord) -> str:
    """The opaque token of the page after ``last``: the keyset position, bound to the tenant."""
    raw = json.dumps(["p1", tenant, last.created_at, last.invocation_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _cursor_of(tenant: str, token: str) -> tuple[str, str]:
    """The keyset position in ``token``; ``invalid_request`` if it is not a token of this
    tenant's listing."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        version, owner, created_at, invocation_id = json.loads(raw)
    except (ValueError, TypeError):
        raise invalid_request("page_token is not a ListPending token") from None
    if (
        version != "p1"
        or owner != tenant
        or not isinstance(created_at, str)
        or not isinstance(invocation_id, str)
    ):
        raise invalid_request("page_token is not a ListPending token for this tenant")
    return created_at, invocation_id


__all__ = ["PAGE_SIZE_DEFAULT", "PAGE_SIZE_MAX", "Confirmations", "PendingPage"]
