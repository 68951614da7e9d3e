"""The gate: sessions, tool views, proposals, confirmation and cancellation over one store.

``propose`` reads like the spec's chain (:mod:`callgate.propose.steps`)::

    lookup -> parse -> validate -> normalize (+ digest) -> claim the key -> authorize -> decide

Every transition is an event (spec 6.13); all events of one call are written in one transaction
and the call answers only after the store confirmed them durable. Stage failures of the
*proposal* are recorded and returned as a :class:`~callgate.propose.outcome.Rejection`; failures
of the *call* (unknown session, store down) raise :class:`~callgate.base.errors.CallgateError`.

Collaborators, each in its own module: :class:`~callgate.propose.sessions.Sessions` (sessions
and tool views), :class:`~callgate.execute.usage.UsageMeter` (budgets),
:class:`~callgate.propose.idempotency.IdempotencyFlow` (claim, replay, release),
:class:`~callgate.propose.confirmation.Confirmations` (confirm, expiry) and
:class:`~callgate.policy.serving.ServingSnapshot` (the policies every request reads).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from callgate.arguments.digest import canonicalize, canonicalize_plain
from callgate.arguments.parse import ParseLimits
from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import (
    CallgateError,
    RejectedError,
    illegal_transition,
    invalid_request,
    invocation_not_found,
    store_unavailable,
)
from callgate.base.events import EventKind
from callgate.base.fastinit import builder
from callgate.base.ids import new_id
from callgate.base.model import (
    AuthzRequest,
    Decision,
    Effect,
    NormalizedArguments,
    Proposal,
    ValidatedArguments,
)
from callgate.base.states import AFTER_BOUNDARY, CANCELLABLE, State
from callgate.base.trace import TraceContext, new_span_id
from callgate.config import Config
from callgate.execute.usage import UsageMeter
from callgate.policy.meters import usage_context
from callgate.policy.serving import ServingSnapshot
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.timevalues import now_instant
from callgate.policy.toolspecs import CompiledTool
from callgate.propose import steps
from callgate.propose.authorize import caller_context
from callgate.propose.confirmation import Confirmations, PendingPage
from callgate.propose.core import Core
from callgate.propose.idempotency import Claimed, IdempotencyFlow
from callgate.propose.metering import Metering
from callgate.propose.outcome import ProposeOutcome, Rejection, SessionSpec, ToolView, decision_to_dict
from callgate.propose.sessions import Sessions, check_id
from callgate.store.base import (
    DecisionRecord,
    EventRecord,
    FedResultRecord,
    InvocationRecord,
    SessionRecord,
    Store,
    Usage,
)
from callgate.store.idempotency.base import IdempotencyKey
from callgate.store.meters import MetersMoved
from callgate.store.ownership import owned_invocation
from callgate.store.trail import Trail, move, rewind

_ONE_TOOL_CALL = Usage(tool_calls=1)
_outcome = builder(ProposeOutcome)
MAX_FED_INVOCATIONS = 1024
"""Tool messages one ``ListTools`` may name as fed into its model call."""
_CANCEL_TRIES = 5
"""How often ``Cancel`` re-reads an invocation that another call changed under it."""
STORED_DECISIONS_MAX = 256
"""Distinct ``Authorize`` decisions whose stored form (``decision_to_dict``) the gate keeps built."""


class Gate:
    """The agent- and confirmer-facing half: sessions, ListTools, Propose, Confirm, Cancel."""

    def __init__(
        self,
        *,
        config: Config,
        serving: ServingSnapshot,
        store: Store,
        clock: Clock,
        keys: IdempotencyFlow,
        usage: UsageMeter,
    ) -> None:
        """``serving``, ``keys`` and ``usage`` are built by the composition root
        (:class:`callgate.server.app.Shared`) and shared with the executor half."""
        self._cfg = config
        self._store = store
        self._clock = clock
        self.serving = serving
        self.sessions = Sessions(config=config, store=store, clock=clock)
        self.usage = usage
        self.keys = keys
        self.metering = Metering(store, config.confirmation.ttl_seconds)
        self.confirmations = Confirmations(store=store, clock=clock, keys=self.keys, serving=self.serving)
        self._limits = ParseLimits(
            max_bytes=config.limits.max_argument_bytes, max_depth=config.limits.max_depth
        )
        self.core = Core(config.core.engine)
        """Which core runs the front stages of Propose (docs/NATIVE.md); it prepares each
        snapshot before it serves (a swap listener of :attr:`serving`)."""
        self._stored_decisions: dict[Decision, Mapping[str, Any]] = {}
        serving.subscribe(self.core.prepare)

    # ------------------------------------------------------------------ snapshot
    @property
    def snapshot(self) -> PolicySnapshot:
        """The serving snapshot; raises ``not_ready`` until a good one is loaded and ready."""
        return self.serving.current

    @property
    def snapshot_or_none(self) -> PolicySnapshot | None:
        return self.serving.current_or_none

    # ------------------------------------------------------------------ sessions & tools
    async def open_session(self, spec: SessionSpec) -> SessionRecord:
        return await self.sessions.open(spec)

    async def list_tools(
        self, session_id: str, model_call_id: str, fed_invocation_ids: Sequence[str] = ()
    ) -> ToolView:
        """Record and return the tools shown for one model call (counts a model call, 6.11).

        ``fed_invocation_ids`` are the invocations whose tool messages the runtime put into this
        model call's context (6.13 question 8): each must belong to the session and have a tool
        message that was handed out, else the call is refused with ``invalid_request`` before
        anything is recorded or counted. They are stored with the tool view, in one write."""
        check_id("model_call_id", model_call_id)
        session = await self.sessions.get(session_id)
        fed = await self._fed_results(session_id, model_call_id, fed_invocation_ids)
        snap = self.serving.current
        await self.usage.consume(session, Usage(model_calls=1))
        return await self.sessions.show(session, model_call_id, snap, fed)

    async def _fed_results(
        self, session_id: str, model_call_id: str, ids: Sequence[str]
    ) -> tuple[FedResultRecord, ...]:
        """The checked records of the tool messages fed into a model call (validation only)."""
        if len(ids) > MAX_FED_INVOCATIONS:
            raise invalid_request(f"fed_invocation_ids: at most {MAX_FED_INVOCATIONS} ids per model call")
        at = rfc3339(self._clock.now())
        out: list[FedResultRecord] = []
        for i, invocation_id in enumerate(dict.fromkeys(ids)):  # a repeated id counts once
            check_id(f"fed_invocation_ids[{i}]", invocation_id)
            inv = await self._store.get_invocation(invocation_id)
            if inv is None or inv.session_id != session_id:
                raise invalid_request(f"fed_invocation_ids[{i}]: no invocation of this session has that id")
            result = await self._store.get_result(invocation_id)
            if result is None or inv.cancel_requested_at:
                raise invalid_request(
                    f"fed_invocation_ids[{i}]: invocation {invocation_id} has no tool message handed out"
                )
            digest = hashlib.sha256(result.message).hexdigest()
            out.append(FedResultRecord(invocation_id, session_id, model_call_id, at, digest))
        return tuple(out)

    async def drain_usage(self) -> None:
        """Persist pending budget usage now (shutdown, tests)."""
        await self.usage.drain()

    # ------------------------------------------------------------------ propose
    async def propose(self, p: Proposal, trace: TraceContext) -> ProposeOutcome:
        """Run a proposal through the chain; the recorded outcome (decision or rejection)."""
        mc, pid, name, version = p.model_call_id, p.proposal_id, p.tool_name, p.tool_version
        if not (
            0 < len(mc) <= 256
            and 0 < len(pid) <= 256
            and 0 < len(name) <= 256
            and 0 < len(version) <= 256
            and "\x00" not in mc + pid + name + version
        ):  # one of them is refused: check them in order for its message
            for field_name, value in (
                ("model_call_id", mc),
                ("proposal_id", pid),
                ("tool_name", name),
                ("tool_version", version),
            ):
                check_id(field_name, value)
        if p.idempotency_key:
            check_id("idempotency_key", p.idempotency_key)
        session = self.sessions.cached(p.session_id) or await self.sessions.get(p.session_id)
        snap = self.serving.current
        # counted here, written by this call's own transaction (_finish takes it); settle()
        # queues a write for whatever a path without that write left pending
        try:
            await self.usage.consume(session, _ONE_TOOL_CALL, flush=False)
            return await self._propose(p, trace, session, snap)
        finally:
            self.usage.settle()

    async def _propose(
        self, p: Proposal, trace: TraceContext, session: SessionRecord, snap: PolicySnapshot
    ) -> ProposeOutcome:
        view = self.sessions.cached_view(p.session_id, p.model_call_id)
        if view is None:
            view = await self.sessions.view(p.session_id, p.model_call_id)
        call = steps.begin(p, session, snap, view, self._clock.now(), trace)

        tool = steps.lookup(call)
        if isinstance(tool, Rejection):
            return await self._finish(call, tool)
        front = steps.front(call, tool, self._limits, self.core)
        if isinstance(front, Rejection):
            return await self._finish(call, front)
        validated, normalized = front
        if isinstance(normalized, Rejection):
            return await self._finish(call, normalized, validated=validated)
        # SQLite: the meters are read in the key's look-up and reserved by the invocation's write
        async with self.metering.fold(tool):
            metered = steps.with_value(normalized) if tool.meters else normalized
            if tool.meters:
                self.metering.read_ahead(
                    snap, tool, metered, invocation_id=call.invocation_id, tenant=session.tenant,
                    subject=session.subject, session_id=session.session_id, now=call.now,
                )  # fmt: skip
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
            # PostgreSQL: the reservation, the claim and the invocation in one transaction (one commit)
            async with self.metering.transaction(tool):
                call.usage, call.labels = await self.metering.prepare(
                    snap, tool, metered, invocation_id=call.invocation_id, tenant=session.tenant,
                    subject=session.subject, session_id=session.session_id, now=call.now,
                )  # fmt: skip
                return await self._decide_and_write(call, tool, normalized, validated, claim)

    async def _decide_and_write(
        self,
        call: steps.ProposeCall,
        tool: CompiledTool,
        normalized: NormalizedArguments,
        validated: ValidatedArguments,
        claim: Claimed,
    ) -> ProposeOutcome:
        """Ask the policy, then write the invocation. On SQLite a metered call whose meters moved
        between its reading and its write (another call or process reserved meanwhile) is asked
        again on the reading taken under the write lock, at which it is then reserved
        (:class:`~callgate.store.meters.MetersMoved`; at most once)."""
        for again in (False, True):
            decision = await steps.authorize(call, tool, normalized, self.core)
            if isinstance(decision, Rejection):  # the engine's schema cannot hold the arguments
                outcome = await self._finish(call, decision, validated=validated)
                if claim.key is not None:
                    await self.keys.release_claim(claim.key, call.invocation_id, call.now)
                return outcome
            steps.decide(call, tool, decision, self._cfg.confirmation.ttl_seconds)
            try:
                outcome = await self._finish(call, decision=decision, validated=validated, claimed=claim)
            except MetersMoved as moved:  # nothing of the invocation written: decide again
                if again:  # the second write holds its reservation already: never here (fail closed)
                    await self.metering.release(call.invocation_id)
                    raise
                rewind(call.trail, EventKind.NORMALIZED)
                call.decision, call.deadline, call.confirmation_expires_at = None, "", ""
                call.usage = usage_context(moved.readings)
                continue
            except BaseException:  # a Propose that wrote no invocation of its own holds no reservation
                if tool.meters and not call.written:
                    await self.metering.release(call.invocation_id)
                raise
            if tool.meters and not call.written:
                await self.metering.release(call.invocation_id)
            if decision.effect is Effect.DENY and claim.key is not None:
                await self.keys.release_claim(claim.key, call.invocation_id, call.now)
            return outcome
        raise AssertionError("unreachable: the second pass returns or raises")

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
        call.written = False
        usage = self.usage.take()
        key_claim = self.keys.store_claim(claimed, call.now)
        try:
            lost = await self._store.create_invocation(record, call.trail.events, usage, key_claim)
        except MetersMoved:  # nothing written; the call is decided again and keeps its key
            self.usage.give_back(usage)
            raise
        except Exception:
            self.usage.give_back(usage)
            if claimed is not None and claimed.key is not None:  # nothing recorded: free the key
                await self.keys.release_claim(claimed.key, call.invocation_id, call.now)
            raise
        call.written = lost is None
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
        return _outcome(
            record=record,
            decision=decision,
            rejection=rejection,
            validator=f"{validated.validator} {validated.validator_version}",
            schema_dialect=validated.dialect,
        )

    # ------------------------------------------------------------------ confirmation
    async def _invocation(self, invocation_id: str) -> InvocationRecord:
        inv = await self._store.get_invocation(invocation_id)
        if inv is None:
            raise invocation_not_found("unknown invocation_id")
        return inv

    async def _tenant_invocation(self, invocation_id: str, tenant: str) -> InvocationRecord:
        """The invocation, if it belongs to ``tenant`` (empty: any tenant); another tenant's
        answers exactly like an unknown id (``invocation_not_found``)."""
        inv = await self._invocation(invocation_id)
        if tenant and not hmac.compare_digest(inv.tenant.encode(), tenant.encode()):
            raise invocation_not_found("unknown invocation_id")
        return inv

    async def confirm(
        self, invocation_id: str, digest: str, confirmed_by: str, trace: TraceContext, *, tenant: str = "",
        note: str = "",
    ) -> InvocationRecord:  # fmt: skip
        return await self.confirmations.confirm(
            await self._tenant_invocation(invocation_id, tenant), digest, confirmed_by, trace, note
        )

    async def deny(
        self, invocation_id: str, digest: str, denied_by: str, trace: TraceContext, *, tenant: str = "",
        note: str = "",
    ) -> InvocationRecord:  # fmt: skip
        """The confirmer refused the parked invocation (cancelled before commit, key released)."""
        inv = await self._tenant_invocation(invocation_id, tenant)
        return await self.confirmations.deny(inv, digest, denied_by, trace, note)

    async def tenant_invocation(
        self, invocation_id: str, tenant: str
    ) -> tuple[InvocationRecord, list[EventRecord]]:
        """An invocation of ``tenant`` and its events, for the confirmer listener (the tenant is
        required; another tenant's invocation answers ``invocation_not_found``)."""
        if not tenant:
            raise invalid_request("tenant is required")
        inv = await self._tenant_invocation(invocation_id, tenant)
        return inv, await self._store.list_events(invocation_id)

    async def expire_confirmations(self) -> int:
        """Cancel every parked invocation whose confirmation window has passed; how many."""
        return await self.confirmations.expire_all()

    async def expire_deadlines(self) -> int:
        """End every AUTHORIZED or PREPARED invocation past its deadline (``deadline_expired``,
        key released); how many."""
        return await self.confirmations.expire_deadlines()

    async def list_pending(self, tenant: str, page_size: int = 0, page_token: str = "") -> PendingPage:
        """One page of ``tenant``'s parked invocations (the tenant is required)."""
        return await self.confirmations.pending(tenant, page_size, page_token)

    # ------------------------------------------------------------------ cancel / read
    async def cancel(
        self, invocation_id: str, reason: str, trace: TraceContext, *, session_id: str
    ) -> InvocationRecord:
        """Cancel (6.7, 6.12), idempotent on every state: the answer is the invocation as it now is.

        * Before the commit boundary (PROPOSED .. PREPARED) the invocation becomes
          CANCELLED_BEFORE_COMMIT (event ``cancelled``) and its idempotency key is released.
        * From EXECUTING on (EXECUTING, COMMITTED, OUTCOME_UNKNOWN, FAILED_AFTER_COMMIT) a cancel
          cannot make the call "not happen": the state stays, ``cancel_requested`` is recorded
          once, no further attempt may start, and the tool message is withheld from the model (an
          executor may still record the result for the trail; ``GetResult`` answers
          ``output_after_cancel``) (6.12, 6.14 row 9).
        * A terminal invocation (OBSERVED, a rejection, CANCELLED_BEFORE_COMMIT,
          FAILED_BEFORE_COMMIT), or one whose cancel is already recorded: nothing changes.

        Only an unknown id, a store failure, or a record that keeps changing under it (lost the
        compare-and-set :data:`_CANCEL_TRIES` times) is an error. Only the invocation's own
        session may cancel it (another session's id answers ``invocation_not_found``)."""
        await self.owned(invocation_id, session_id)
        for _ in range(_CANCEL_TRIES):
            inv = await self._invocation(invocation_id)
            at = rfc3339(self._clock.now())
            if inv.state in CANCELLABLE:
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
            elif inv.state in AFTER_BOUNDARY and not inv.cancel_requested_at:
                trail = Trail.on(inv, trace, at)
                trail.add(
                    EventKind.CANCEL_REQUESTED,
                    inv.state,
                    {"reason": reason[:500], "effect": "stops_what_follows"},
                )
                new = replace(inv, cancel_requested_at=at, updated_at=at)
                if await self._store.transition(new, inv.state, trail.events):
                    return new
            else:
                return inv  # terminal, or the cancel is already recorded: nothing changes
        raise illegal_transition("invocation changed concurrently; cancel again")

    async def owned(self, invocation_id: str, session_id: str) -> InvocationRecord:
        """The invocation if it belongs to ``session_id``. A missing session id, an unknown
        invocation and another session's invocation all answer the same ``invocation_not_found``
        (same code, same message), so an agent cannot learn which ids exist elsewhere."""
        return await owned_invocation(self._store, invocation_id, session_id)

    async def get_invocation(
        self, invocation_id: str, *, session_id: str
    ) -> tuple[InvocationRecord, list[EventRecord]]:
        inv = await self.owned(invocation_id, session_id)
        return inv, await self._store.list_events(invocation_id)

    async def find_invocation(
        self, session_id: str, tool_name: str, tool_version: str, idempotency_key: str
    ) -> tuple[InvocationRecord, list[EventRecord]]:
        """The invocation a proposal of ``session_id`` made, found by the tool name, version and
        idempotency key it carried (``FindInvocation``). An unknown session, a key no proposal
        used and another session's proposal all answer ``invocation_not_found``."""
        for name, value in (
            ("session_id", session_id), ("tool_name", tool_name), ("tool_version", tool_version),
            ("idempotency_key", idempotency_key),
        ):  # fmt: skip
            check_id(name, value)
        session = self.sessions.cached(session_id) or await self._store.get_session(session_id)
        held = None
        if session is not None:
            key = IdempotencyKey(session.tenant, session.subject, tool_name, tool_version, idempotency_key)
            held = await self.keys.holder(key)
        if held is None:
            raise invocation_not_found("unknown invocation_id")
        return await self.get_invocation(held, session_id=session_id)

    async def list_parked(self, session_id: str) -> list[InvocationRecord]:
        """``session_id``'s invocations parked for a confirmation and still inside their window,
        oldest first (``ListParked``); an unknown session has none."""
        check_id("session_id", session_id)
        session = self.sessions.cached(session_id) or await self._store.get_session(session_id)
        if session is None:
            return []
        now = self._clock.now()
        return [
            inv
            for inv in await self._store.list_pending(session.tenant)
            if hmac.compare_digest(inv.session_id.encode(), session_id.encode())
            and now < datetime.fromisoformat(inv.confirmation_expires_at)
        ]

    # ------------------------------------------------------------------ generic decision point
    async def authorize(self, request: AuthzRequest, trace: TraceContext) -> tuple[Decision, DecisionRecord]:
        """Decide one request of another component and record it (a ``decisions`` row, then the
        decision log, metrics and a span) before answering. The context is kept as a digest and
        its key names, never its values. A store failure fails the call (``store_unavailable``):
        no decision is handed out without its record."""
        context_digest = ""
        if request.context:
            # the plain JSON text where it is the canonical one, else the reference (same bytes)
            canonical = canonicalize_plain(request.context)
            if canonical is None:
                try:
                    canonical = canonicalize(dict(request.context))
                except RejectedError as exc:
                    raise invalid_request(f"context has no canonical JSON form: {exc.message}") from None
            context_digest = "sha256:" + hashlib.sha256(canonical).hexdigest()
        # ``context.now`` is the sidecar's clock, read once: the record's ``at`` (a ``now`` the
        # caller sent is replaced, as ``tenant`` is; the digest and key names stay the caller's)
        at_time = self._clock.now()
        at = rfc3339(at_time)
        snap = self.serving.current
        now = now_instant(at, at_time)
        engine_request = replace(request, context=caller_context(request.context, snap.tools, now))
        decision = (await snap.engine.authorize_batch([engine_request]))[0]
        stored = self._stored_decisions.get(decision)
        if stored is None:
            if len(self._stored_decisions) >= STORED_DECISIONS_MAX:
                self._stored_decisions.clear()
            stored = self._stored_decisions[decision] = MappingProxyType(decision_to_dict(decision))
        record = DecisionRecord(
            decision_id="dec_" + new_id(),
            at=at,
            tenant=request.subject.tenant,
            subject=request.subject.id,
            capability=request.capability,
            resource=request.resource,
            context_digest=context_digest,
            context_keys=tuple(sorted(str(k) for k in request.context)),
            decision=stored,
            policy_revision=snap.revision,
            trace_id=trace.trace_id,
            span_id=new_span_id(),
            parent_span_id=trace.parent_span_id,
        )
        try:
            # An allow is something the caller may act on: its record is behind the barrier
            # (6.7) when it returns, in the same writer round trip as the record itself.
            await self._store.record_decision(record, durable=decision.effect is Effect.ALLOW)
        except CallgateError:
            raise
        except Exception as exc:  # any store: no record, no answer
            raise store_unavailable(f"the decision cannot be recorded: {type(exc).__name__}") from None
        return decision, record

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        return await self._store.get_decision(decision_id)


__all__ = [
    "MAX_FED_INVOCATIONS",
    "Gate",
    "ProposeOutcome",
    "Rejection",
    "SessionSpec",
    "ToolView",
    "decision_to_dict",
]
