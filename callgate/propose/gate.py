"""The gate: sessions, tool views, proposals, confirmation and cancellation over one store.

``propose`` reads like the spec's chain (:mod:`callgate.propose.steps`)::

    lookup -> parse -> validate -> normalize (+ digest) -> claim the key -> authorize -> decide

Every transition is an event (spec 6.13); all events of one call are written in one transaction
and the call answers only after the store confirmed them durable. Stage failures of the
*proposal* are recorded and returned as a :class:`~callgate.propose.outcome.Rejection`; failures
of the *call* (unknown session, store down) raise :class:`~callgate.core.errors.CallgateError`.

Collaborators, each in its own module: :class:`~callgate.propose.sessions.Sessions` (sessions
and tool views), :class:`~callgate.execute.usage.UsageMeter` (budgets),
:class:`~callgate.propose.idempotency.IdempotencyFlow` (claim, replay, release),
:class:`~callgate.propose.confirmation.Confirmations` (confirm, expiry) and
:class:`~callgate.policy.serving.ServingSnapshot` (the policies every request reads).
"""

from __future__ import annotations

from dataclasses import replace

from callgate.config import Config
from callgate.core.clock import Clock, rfc3339
from callgate.core.errors import illegal_transition, invocation_not_found
from callgate.core.events import EventKind
from callgate.core.model import AuthzRequest, Decision, Effect, Proposal, ValidatedArguments
from callgate.core.states import AFTER_BOUNDARY, CANCELLABLE, State, check_transition
from callgate.core.trace import TraceContext
from callgate.execute.usage import UsageMeter
from callgate.policy.serving import ServingSnapshot
from callgate.policy.snapshot import PolicySnapshot
from callgate.propose import steps
from callgate.propose.confirmation import Confirmations
from callgate.propose.idempotency import Claimed, IdempotencyFlow
from callgate.propose.outcome import ProposeOutcome, Rejection, SessionSpec, ToolView, decision_to_dict
from callgate.propose.parse import ParseLimits
from callgate.propose.sessions import Sessions, check_id
from callgate.store.base import EventRecord, InvocationRecord, SessionRecord, Store, Usage
from callgate.store.idempotency.base import IdempotencyStore
from callgate.store.trail import Trail, move, rewind


class Gate:
    """The agent- and confirmer-facing half: sessions, ListTools, Propose, Confirm, Cancel."""

    def __init__(
        self,
        *,
        config: Config,
        snapshot: PolicySnapshot | None,
        store: Store,
        clock: Clock,
        idempotency: IdempotencyStore,
    ) -> None:
        self._cfg = config
        self._store = store
        self._clock = clock
        self.serving = ServingSnapshot(snapshot)
        self.sessions = Sessions(config=config, store=store, clock=clock)
        self.usage = UsageMeter(
            store=store, clock=clock, defaults=config.budgets, cache_max=config.limits.max_sessions
        )
        self.keys = IdempotencyFlow(backend=idempotency, store=store, clock=clock, config=config.idempotency)
        self.confirmations = Confirmations(store=store, clock=clock, keys=self.keys)
        self._limits = ParseLimits(
            max_bytes=config.limits.max_argument_bytes, max_depth=config.limits.max_depth
        )

    # ------------------------------------------------------------------ snapshot
    @property
    def snapshot(self) -> PolicySnapshot:
        """The serving snapshot; raises ``not_ready`` until a good one is loaded and ready."""
        return self.serving.current

    @property
    def snapshot_or_none(self) -> PolicySnapshot | None:
        return self.serving.current_or_none

    def set_ready(self, ready: bool) -> None:
        self.serving.set_ready(ready)

    def swap_snapshot(self, snapshot: PolicySnapshot) -> None:
        """Atomically replace ToolSpecs + policies (one reference assignment)."""
        self.serving.swap(snapshot)

    # ------------------------------------------------------------------ sessions & tools
    async def open_session(self, spec: SessionSpec) -> SessionRecord:
        return await self.sessions.open(spec)

    async def list_tools(self, session_id: str, model_call_id: str) -> ToolView:
        """Record and return the tools shown for one model call (counts a model call, 6.11)."""
        check_id("model_call_id", model_call_id)
        session = await self.sessions.get(session_id)
        snap = self.serving.current
        await self.usage.consume(session, Usage(model_calls=1))
        return await self.sessions.show(session, model_call_id, snap)

    async def drain_usage(self) -> None:
        """Persist pending budget usage now (shutdown, tests)."""
        await self.usage.drain()

    # ------------------------------------------------------------------ propose
    async def propose(self, p: Proposal, trace: TraceContext) -> ProposeOutcome:
        """Run a proposal through the chain; the recorded outcome (decision or rejection)."""
        for name, value in (
            ("model_call_id", p.model_call_id),
            ("proposal_id", p.proposal_id),
            ("tool_name", p.tool_name),
            ("tool_version", p.tool_version),
        ):
            check_id(name, value)
        if p.idempotency_key:
            check_id("idempotency_key", p.idempotency_key)
        session = await self.sessions.get(p.session_id)
        snap = self.serving.current
        await self.usage.consume(session, Usage(tool_calls=1))
        view = await self.sessions.view(p.session_id, p.model_call_id)
        call = steps.begin(p, session, snap, view, self._clock.now(), trace)

        tool = steps.lookup(call)
        if isinstance(tool, Rejection):
            return await self._finish(call, tool)
        parsed = steps.parse(call, self._limits)
        if isinstance(parsed, Rejection):
            return await self._finish(call, parsed)
        validated = steps.validate(call, tool, parsed)
        if isinstance(validated, Rejection):
            return await self._finish(call, validated)
        normalized = steps.normalize_arguments(call, tool, validated)
        if isinstance(normalized, Rejection):
            return await self._finish(call, normalized, validated=validated)
        claim = await self.keys.claim(
            p,
            tool,
            session,
            normalized.digest,
            call.invocation_id,
            now=call.now,
            trace=trace,
            expire_stale=self.confirmations.expire_if_stale,
        )
        if isinstance(claim, ProposeOutcome):  # the same key and digest: the original answers
            return claim
        if isinstance(claim, Rejection):
            return await self._finish(
                call, call.refuse(claim, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)
            )
        decision = await steps.authorize(call, tool, normalized)
        steps.decide(call, tool, decision, self._cfg.confirmation.ttl_seconds)
        outcome = await self._finish(call, decision=decision, validated=validated, claimed=claim)
        if decision.effect is Effect.DENY and claim.key is not None:
            await self.keys.release_claim(claim.key, call.invocation_id, call.now)
        return outcome

    async def _finish(
        self,
        call: steps.ProposeCall,
        rejection: Rejection | None = None,
        *,
        decision: Decision | None = None,
        validated: ValidatedArguments | None = None,
        claimed: Claimed | None = None,
    ) -> ProposeOutcome:
        """Write the invocation, its events, the pending usage and (keys in the store) the
        idempotency claim in one transaction. A claim that lost the key to another invocation
        between the look-up and this write writes nothing and is answered as if it had lost at
        the look-up: the original's replay, or the refusal (recorded without the later stages)."""
        record = call.record(rejection)
        usage = self.usage.take()
        key_claim = self.keys.store_claim(claimed, call.now)
        try:
            lost = await self._store.create_invocation(record, call.trail.events, usage, key_claim)
        except Exception:
            self.usage.give_back(usage)
            if claimed is not None and claimed.key is not None:  # nothing recorded: free the key
                await self.keys.release_claim(claimed.key, call.invocation_id, call.now)
            raise
        if lost is not None:
            self.usage.give_back(usage)
            answer = await self.keys.answer_taken(lost, call.proposal, call.digest, call.trail.trace)
            if isinstance(answer, ProposeOutcome):
                return answer
            rewind(call.trail, EventKind.NORMALIZED)
            call.decision, call.deadline, call.confirmation_expires_at = None, "", ""
            refused = call.refuse(answer, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)
            return await self._finish(call, refused, validated=validated)
        if validated is None:
            return ProposeOutcome(record, decision, rejection)
        validator = f"{validated.validator} {validated.validator_version}"
        return ProposeOutcome(record, decision, rejection, validator, validated.dialect)

    # ------------------------------------------------------------------ confirmation
    async def _invocation(self, invocation_id: str) -> InvocationRecord:
        inv = await self._store.get_invocation(invocation_id)
        if inv is None:
            raise invocation_not_found("unknown invocation_id")
        return inv

    async def confirm(
        self, invocation_id: str, digest: str, confirmed_by: str, trace: TraceContext
    ) -> InvocationRecord:
        return await self.confirmations.confirm(
            await self._invocation(invocation_id), digest, confirmed_by, trace
        )

    async def expire_confirmations(self) -> int:
        """Cancel every parked invocation whose confirmation window has passed; how many."""
        return await self.confirmations.expire_all()

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        return await self.confirmations.pending(tenant)

    # ------------------------------------------------------------------ cancel / read
    async def cancel(self, invocation_id: str, reason: str, trace: TraceContext) -> InvocationRecord:
        """Cancel (6.7): before the commit boundary the invocation becomes CANCELLED_BEFORE_COMMIT
        and its idempotency key is released. From EXECUTING on, a cancel cannot make the call
        "not happen": the record keeps its state, no further attempt may start and no tool
        message is produced for it (6.12, 6.14 row 9)."""
        inv = await self._invocation(invocation_id)
        if inv.state in CANCELLABLE:
            at = rfc3339(self._clock.now())
            moved = await move(
                self._store,
                inv,
                State.CANCELLED_BEFORE_COMMIT,
                EventKind.CANCELLED,
                {"reason": reason[:500]},
                trace,
                at,
            )
            if moved is not None:
                await self.keys.release(inv)
                return moved
            inv = await self._invocation(invocation_id)  # lost a race; fall through with the winner
        if inv.state in AFTER_BOUNDARY and not inv.cancel_requested_at:
            at = rfc3339(self._clock.now())
            trail = Trail.on(inv, trace, at)
            trail.add(
                EventKind.CANCEL_REQUESTED,
                inv.state,
                {"reason": reason[:500], "effect": "stops_what_follows"},
            )
            new = replace(inv, cancel_requested_at=at, updated_at=at)
            if await self._store.transition(new, inv.state, trail.events):
                return new
            inv = await self._invocation(invocation_id)
        if inv.cancel_requested_at:
            return inv
        check_transition(inv.state, State.CANCELLED_BEFORE_COMMIT)  # raises the precise error
        raise illegal_transition("invocation changed concurrently")

    async def get_invocation(self, invocation_id: str) -> tuple[InvocationRecord, list[EventRecord]]:
        inv = await self._invocation(invocation_id)
        return inv, await self._store.list_events(invocation_id)

    # ------------------------------------------------------------------ generic decision point
    async def authorize(self, request: AuthzRequest) -> Decision:
        decisions = await self.serving.current.engine.authorize_batch([request])
        return decisions[0]


__all__ = [
    "Gate",
    "ProposeOutcome",
    "Rejection",
    "SessionSpec",
    "ToolView",
    "decision_to_dict",
]
