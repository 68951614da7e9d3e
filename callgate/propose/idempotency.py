"""The idempotency flow of spec 6.8 around one invocation: claim, replay, complete, release.

``Propose`` claims the runtime's key with the digest of the normalized arguments before anything
can run. A repeat with the same digest is answered from the original invocation (a replay: no
second side effect, recorded on the original's trail); another digest, or a key past its
retention under the ``reject`` policy, is a rejection. The executor half completes the key at
the commit boundary or releases it when the invocation ends before it; cancels and expired
confirmations release it too. The atomic read-modify-write itself lives in the backends
(:mod:`callgate.store.idempotency`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import (
    idempotency_key_expired,
    idempotency_key_required,
    idempotency_key_reused,
)
from callgate.base.events import EventKind
from callgate.base.model import Proposal
from callgate.base.states import State
from callgate.base.trace import TraceContext
from callgate.config import IdempotencyConfig
from callgate.policy.engines.base import decision_from_dict
from callgate.policy.toolspecs import CompiledTool
from callgate.propose.outcome import ProposeOutcome, Rejection
from callgate.store.base import EventRecord, InvocationRecord, KeyClaim, SessionRecord, Store
from callgate.store.idempotency.base import (
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    IdempotencyStore,
    check_claim,
)
from callgate.store.trail import Trail

log = logging.getLogger("callgate.gate")

ExpireStale = Callable[[str, TraceContext], Awaitable[bool]]
"""Cancels the invocation holding a key if its confirmation window has passed (True if so)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """The proposal may go on: ``key`` is now held by it (None: no key was given, keyless allowed).

    With the keys in the event store (``in_store``) the key was found free and is claimed with
    the invocation's write (:meth:`IdempotencyFlow.store_claim`), in one transaction."""

    key: IdempotencyKey | None
    digest: str = ""
    retention: timedelta = timedelta(0)


def key_of(inv: InvocationRecord) -> IdempotencyKey:
    """The 6.8 lookup key of an invocation: scope (tenant + subject), tool name, version, key."""
    return IdempotencyKey(inv.tenant, inv.subject, inv.tool_name, inv.tool_version, inv.idempotency_key)


class IdempotencyFlow:
    """Claims, replays, completes and releases idempotency keys for the gate and the executor half."""

    def __init__(
        self, *, backend: IdempotencyStore, store: Store, clock: Clock, config: IdempotencyConfig
    ) -> None:
        self._backend = backend
        self._in_store = backend.in_store
        """The keys follow the store's transactions: nothing to call after a store write."""
        self._store = store
        self._clock = clock
        self._retention_default = config.retention_seconds
        self._expired_policy = ExpiredPolicy(config.expired_policy)

    async def claim(
        self,
        p: Proposal,
        tool: CompiledTool,
        session: SessionRecord,
        digest: str,
        invocation_id: str,
        *,
        now: datetime,
        trace: TraceContext,
        expire_stale: ExpireStale,
    ) -> Claimed | Rejection | ProposeOutcome:
        """Claim the proposal's key for ``invocation_id``: go on, a rejection, or the replay."""
        key = p.idempotency_key or ""
        if not key:
            if tool.spec.keyless_allowed:
                return Claimed(None)
            return Rejection.of(
                idempotency_key_required(f"{tool.spec.key} writes and needs an idempotency key")
            )
        idem_key = IdempotencyKey(session.tenant, session.subject, p.tool_name, p.tool_version, key)
        retention = timedelta(seconds=tool.spec.retention_seconds(self._retention_default))

        async def attempt() -> ClaimResult:
            claim = check_claim if self._in_store else _claim
            return await claim(
                self._backend,
                idem_key,
                digest,
                invocation_id,
                now=now,
                retention=retention,
                expired_policy=self._expired_policy,
            )

        claim = await attempt()
        if (
            claim.kind is ClaimKind.IN_PROGRESS
            and claim.record is not None
            and await expire_stale(claim.record.invocation_id, trace)
        ):  # the holder was a confirmation that expired unanswered: the key is free again
            claim = await attempt()
        if claim.kind is ClaimKind.NEW:
            return Claimed(idem_key, digest, retention)
        return await self.answer_taken(claim, p, digest, trace)

    def store_claim(self, claimed: Claimed | None, now: datetime) -> KeyClaim | None:
        """The claim to write with the invocation (keys in the event store), else None."""
        if not self._in_store or claimed is None or claimed.key is None:
            return None
        return KeyClaim(claimed.key, claimed.digest, claimed.retention, self._expired_policy, now)

    async def answer_taken(
        self, claim: ClaimResult, p: Proposal, digest: str, trace: TraceContext
    ) -> Rejection | ProposeOutcome:
        """The answer when the key is not free: the original's replay, or a rejection. Also the
        answer of a claim that lost the race at commit time (nothing of it was written)."""
        if claim.kind in (ClaimKind.IN_PROGRESS, ClaimKind.COMPLETED) and claim.record is not None:
            return await self._replay(claim.record, p, digest, trace)
        if claim.kind is ClaimKind.MISMATCH:
            return Rejection.of(
                idempotency_key_reused("idempotency key already used with other arguments; use a new key")
            )
        return Rejection.of(
            idempotency_key_expired("idempotency key is past its retention window; use a new key")
        )

    async def _replay(
        self, held: IdempotencyRecord, p: Proposal, digest: str, trace: TraceContext
    ) -> ProposeOutcome:
        """A repeated key with the same digest: answer with the original invocation; nothing new
        runs (6.8 rules 1-2). The repeat is recorded on the original's trail.

        With a shared (PostgreSQL) idempotency store the original may belong to another sidecar
        (another pod): its events are there, so the answer is built from the shared record alone
        (state known only once completed; the tool message once encoded)."""
        result = held.result or b""
        at = rfc3339(self._clock.now())

        def replay_event(original: InvocationRecord) -> list[EventRecord]:
            trail = Trail.on(original, trace, at)
            trail.add(
                EventKind.IDEMPOTENT_REPLAY,
                original.state,
                {"proposal_id": p.proposal_id, "model_call_id": p.model_call_id, "digest": digest},
            )
            return trail.events

        # The state reported is the one read in the transaction that records the replay.
        original = await self._store.append_to_current(held.invocation_id, replay_event)
        if original is None:
            log.info("idempotent replay of %s held by another sidecar", held.invocation_id)
            return ProposeOutcome(
                _remote_record(held, p), None, None, idempotent_replay=True, replayed_message=result
            )
        decision = decision_from_dict(original.decision) if original.decision else None
        return ProposeOutcome(original, decision, None, idempotent_replay=True, replayed_message=result)

    async def holder(self, key: IdempotencyKey) -> str | None:
        """The invocation id the key's record names (the proposal that claimed it last), else
        None. A released record still names its invocation (``FindInvocation``)."""
        record = await self._backend.get(key)
        return record.invocation_id if record is not None else None

    async def release_claim(self, key: IdempotencyKey, invocation_id: str, now: datetime) -> None:
        """Give back a key this call claimed (a deny, or a failed write of the proposal)."""
        if self._in_store:  # the claim was never written, or was released in the same commit
            return
        await self._backend.release(key, invocation_id, now=now)

    async def release(self, inv: InvocationRecord, now: datetime | None = None) -> None:
        """Give the key back: the invocation ended before the commit boundary."""
        if inv.idempotency_key and not self._in_store:  # else released by the store's write
            await self._backend.release(key_of(inv), inv.invocation_id, now=now or self._clock.now())

    async def complete(
        self, inv: InvocationRecord, outcome: State, external_resource_id: str, now: datetime
    ) -> None:
        """The invocation passed the commit boundary: repeats replay it from now on."""
        if inv.idempotency_key and not self._in_store:  # else completed by the store's write
            await self._backend.complete(
                key_of(inv),
                inv.invocation_id,
                outcome=outcome.value,
                external_resource_id=external_resource_id,
                now=now,
            )

    async def set_result(self, inv: InvocationRecord, message: bytes, now: datetime) -> None:
        """Keep the encoded tool message, so a repeat replays exactly these bytes."""
        if inv.idempotency_key and not self._in_store:  # else stored by put_result
            await self._backend.set_result(key_of(inv), inv.invocation_id, message, now=now)


async def _claim(
    backend: IdempotencyStore,
    key: IdempotencyKey,
    digest: str,
    invocation_id: str,
    *,
    now: datetime,
    retention: timedelta,
    expired_policy: ExpiredPolicy,
) -> ClaimResult:
    """A backend of its own: the claim is written at once."""
    return await backend.claim(
        key, digest, invocation_id, now=now, retention=retention, expired_policy=expired_policy
    )


def _remote_record(held: IdempotencyRecord, p: Proposal) -> InvocationRecord:
    """The answer for a key held by another sidecar, from the shared record alone."""
    result = held.result or b""
    state = State.PROPOSED
    if held.state == "completed":
        if result:
            state = State.OBSERVED
        else:
            state = State(held.outcome) if held.outcome in State.__members__ else State.COMMITTED
    return InvocationRecord(
        invocation_id=held.invocation_id,
        session_id=p.session_id,
        model_call_id=p.model_call_id,
        proposal_id=p.proposal_id,
        tool_name=p.tool_name,
        tool_version=p.tool_version,
        tenant=held.key.tenant,
        subject=held.key.subject,
        state=state,
        raw_arguments=p.arguments_bytes,
        digest=held.digest,
        idempotency_key=held.key.key,
        external_resource_id=held.external_resource_id,
    )


__all__ = ["Claimed", "ExpireStale", "IdempotencyFlow", "key_of"]
