"""The gate: composes the pipeline stages and the state machine, transport-agnostic.

    Proposal --lookup--> CompiledTool --parse--> ParsedArguments --validate--> ValidatedArguments
      --normalize--> NormalizedArguments --re-validate--> --authorize--> Decision
      --allow--> PREPARED | --confirm--> AUTHORIZED (parked, digest-bound) | --deny--> AUTHORIZATION_REJECTED

Every transition is an event (spec 6.13); all events of one call are written in one transaction
and the call answers only after the store confirmed them durable. Stage failures of the
*proposal* are recorded and returned as a :class:`Rejection`; failures of the *call* (unknown
session, store down) raise :class:`~callgate.core.errors.CallgateError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from callgate.config import Config
from callgate.core.clock import Clock, rfc3339
from callgate.core.errors import CallgateError, ErrorCode, RejectedError, Violation
from callgate.core.ids import new_id
from callgate.core.model import (
    AuthzRequest,
    Decision,
    Effect,
    NormalizationContext,
    NormalizedArguments,
    Proposal,
    Subject,
)
from callgate.core.states import AFTER_BOUNDARY, CANCELLABLE, State, check_transition
from callgate.core.trace import TraceContext, new_span_id
from callgate.execute import budgets
from callgate.execute.budgets import effective_limits
from callgate.policy.engines.base import decision_from_dict
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.toolspecs import CompiledTool
from callgate.propose.authorize import authorize_invocation
from callgate.propose.normalize import load_zone, normalize
from callgate.propose.parse import ParseLimits, parse_arguments
from callgate.store.base import EventRecord, InvocationRecord, SessionRecord, Store, ToolViewRecord, Usage
from callgate.store.idempotency.base import (
    ClaimKind,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    IdempotencyStore,
)

log = logging.getLogger("callgate.gate")

VIEW_CACHE_MAX = 1024
"""Tool views (one per model call, each naming every tool shown) kept in memory: a Propose names
its own turn's model call, so the recent ones are enough; older ones are read from the store.
(Bounded apart from ``limits.max_sessions``: a long-lived agent makes a model call per turn, and
100,000 views of 50 tools would be about a gigabyte.)"""


@dataclass(frozen=True, slots=True)
class Rejection:
    code: str
    message: str
    violations: tuple[Violation, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "violations": [
                {"pointer": v.pointer, "message": v.message, "keyword": v.keyword} for v in self.violations
            ],
        }


@dataclass(frozen=True, slots=True)
class SessionSpec:
    subject: Subject
    timezone: str
    locale: str = "en"
    budgets: Mapping[str, int] = field(default_factory=dict)
    tool_allowlist: tuple[str, ...] = ()
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolView:
    tools: tuple[CompiledTool, ...]
    tool_set_digest: str


@dataclass(frozen=True, slots=True)
class ProposeOutcome:
    record: InvocationRecord
    decision: Decision | None
    rejection: Rejection | None
    validator: str = ""
    schema_dialect: str = ""
    idempotent_replay: bool = False
    """The key matched an earlier invocation with the same digest: ``record`` is that one."""
    replayed_message: bytes = b""


def decision_to_dict(d: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "effect": d.effect.value,
        "reasons": [{"code": r.code, "policy_id": r.policy_id, "message": r.message} for r in d.reasons],
        "policy_ids": list(d.policy_ids),
        "engine": d.engine,
        "error_code": d.error_code,
    }
    if d.shadow_effect:
        out["shadow"] = {"effect": d.shadow_effect, "policy_ids": list(d.shadow_policy_ids)}
    return out


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        model_calls=a.model_calls + b.model_calls,
        tool_calls=a.tool_calls + b.tool_calls,
        result_bytes=a.result_bytes + b.result_bytes,
        cost_micros=a.cost_micros + b.cost_micros,
    )


def _check_id(name: str, value: str, max_len: int = 256) -> None:
    if not value or len(value) > max_len or "\x00" in value:
        raise CallgateError(
            code=ErrorCode.INVALID_REQUEST, message=f"{name} must be 1..{max_len} characters without NUL"
        )


class _Trail:
    """Accumulates the events of one call, enforcing the 6.2 edges."""

    def __init__(
        self, gate: Gate, invocation_id: str, state: State | None, seq: int, trace: TraceContext, at: str
    ) -> None:
        self._gate = gate
        self.invocation_id = invocation_id
        self.state = state
        self.seq = seq
        self.trace = trace
        self.at = at
        self.events: list[EventRecord] = []
        self._mark = time.perf_counter()
        self.auto_seq = state is not None
        """Appending to an existing invocation: sequence numbers come from the store."""

    def add(self, kind: str, to: State, data: Mapping[str, Any] | None = None) -> None:
        if self.state is not None and to is not self.state:
            check_transition(self.state, to)
        now = time.perf_counter()
        payload = dict(data or {})
        payload["duration_us"] = int((now - self._mark) * 1e6)  # time spent in this stage
        self._mark = now
        if self.auto_seq:
            self.seq = 0  # the store assigns the next sequence number in the same transaction
        else:
            self.seq += 1
        self.events.append(
            EventRecord(
                event_id=f"{self.invocation_id}.{self.seq}" if not self.auto_seq else new_id(),
                invocation_id=self.invocation_id,
                seq=self.seq,
                at=self.at,
                kind=kind,
                from_state=self.state,
                to_state=to,
                trace_id=self.trace.trace_id,
                span_id=new_span_id(),
                data=payload,
            )
        )
        self.state = to


class Gate:
    """Sessions, tool views, proposals, confirmation and cancellation over one store."""

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
        self._snap = snapshot
        self._ready = snapshot is not None
        self._store = store
        self._clock = clock
        self._idem = idempotency
        self._limits = ParseLimits(
            max_bytes=config.limits.max_argument_bytes, max_depth=config.limits.max_depth
        )
        self._sessions: OrderedDict[str, SessionRecord] = OrderedDict()
        self._usage: OrderedDict[str, Usage] = OrderedDict()
        self._pending: set[asyncio.Future[Usage]] = set()
        self._usage_pending: dict[str, Usage] = {}
        """Increments counted in memory but not yet handed to a store write."""
        self._usage_flush_queued = False
        self._session_limits: OrderedDict[str, tuple[SessionRecord, budgets.Limits, datetime]] = OrderedDict()
        self._views: OrderedDict[tuple[str, str], ToolViewRecord] = OrderedDict()
        self._cache_max = config.limits.max_sessions

    # ------------------------------------------------------------------ snapshot
    @property
    def snapshot(self) -> PolicySnapshot:
        """The serving snapshot; raises ``not_ready`` until a good one is loaded and its engine
        is ready (fail closed: no decision on half-loaded policies)."""
        snap = self._snap
        if snap is None or not self._ready:
            raise CallgateError(
                code=ErrorCode.NOT_READY,
                message="no usable policy snapshot yet (see the health service and the sidecar log)",
            )
        return snap

    @property
    def snapshot_or_none(self) -> PolicySnapshot | None:
        return self._snap

    def set_ready(self, ready: bool) -> None:
        self._ready = ready and self._snap is not None

    def swap_snapshot(self, snapshot: PolicySnapshot) -> None:
        """Atomically replace ToolSpecs + policies (one reference assignment)."""
        self._snap = snapshot

    # ------------------------------------------------------------------ helpers
    def _remember(self, cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int = 0) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > (limit or self._cache_max):
            cache.popitem(last=False)

    async def _session(self, session_id: str) -> SessionRecord:
        s = self._sessions.get(session_id)
        if s is None:
            s = await self._store.get_session(session_id)
            if s is None:
                raise CallgateError(code=ErrorCode.SESSION_NOT_FOUND, message="unknown session_id")
            self._remember(self._sessions, session_id, s)
        return s

    async def _view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        key = (session_id, model_call_id)
        v = self._views.get(key)
        if v is None:
            v = await self._store.get_tool_view(session_id, model_call_id)
            if v is not None:
                self._remember(self._views, key, v, VIEW_CACHE_MAX)
        return v

    async def _invocation(self, invocation_id: str) -> InvocationRecord:
        inv = await self._store.get_invocation(invocation_id)
        if inv is None:
            raise CallgateError(code=ErrorCode.INVOCATION_NOT_FOUND, message="unknown invocation_id")
        return inv

    # ------------------------------------------------------------------ sessions & tools
    async def open_session(self, spec: SessionSpec) -> SessionRecord:
        _check_id("subject.tenant", spec.subject.tenant)
        _check_id("subject.id", spec.subject.id)
        if load_zone(spec.timezone) is None:
            raise CallgateError(
                code=ErrorCode.INVALID_REQUEST,
                message="timezone must be an IANA zone name, e.g. Europe/Paris",
            )
        session_id = spec.session_id or "ses_" + uuid.uuid4().hex
        _check_id("session_id", session_id)
        record = SessionRecord(
            session_id=session_id,
            tenant=spec.subject.tenant,
            subject=spec.subject.id,
            timezone=spec.timezone,
            locale=spec.locale or "en",
            budgets=effective_limits(spec.budgets, self._cfg.budgets).as_dict(),
            tool_allowlist=tuple(spec.tool_allowlist),
            opened_at=rfc3339(self._clock.now()),
        )
        if await self._store.get_session(session_id) is not None:
            raise CallgateError(code=ErrorCode.INVALID_REQUEST, message="session_id already exists")
        await self._store.put_session(record)
        self._remember(self._sessions, session_id, record)
        return record

    def _visible(self, session: SessionRecord, snap: PolicySnapshot) -> tuple[CompiledTool, ...]:
        allow = set(session.tool_allowlist)
        return tuple(t for t in snap.tools if not allow or t.spec.key in allow or t.spec.name in allow)

    async def consume(self, session: SessionRecord, delta: Usage, *, check: bool = True) -> None:
        """Count against the session budgets (6.11); raises ``budget_exhausted`` when ``check``
        and a limit is exceeded (result bytes and cost are counted after the fact and stop the
        *next* model or tool call).

        Counting happens in memory (one event loop: atomic). ``Propose`` persists the pending
        increments in the same transaction as its own events (``create_invocation`` takes
        them), so a tool call is never answered before it is counted on disk. Other callers
        (``ListTools``, result bytes, cost) leave them to a write queued at the next turn of the
        loop, one group commit behind their own: a crash in that window can lose those
        increments, so a budget may count low after a crash, never high."""
        sid = session.session_id
        usage = self._usage.get(sid)
        if usage is None:
            usage = await self._store.add_usage(sid, Usage())  # load (a zero increment)
        usage = _add(usage, delta)
        self._remember(self._usage, sid, usage)
        pending = self._usage_pending.get(sid)
        self._usage_pending[sid] = delta if pending is None else _add(pending, delta)
        if not self._usage_flush_queued:
            self._usage_flush_queued = True
            asyncio.get_running_loop().call_soon(self._flush_usage)
        if check:
            limits, opened_at = self._budget_of(session)
            budgets.check(limits, usage, opened_at, self._clock.now())

    def _budget_of(self, session: SessionRecord) -> tuple[budgets.Limits, datetime]:
        """The session's effective limits and opening time, computed once per session record."""
        hit = self._session_limits.get(session.session_id)
        if hit is None or hit[0] is not session:
            hit = (
                session,
                effective_limits(session.budgets, self._cfg.budgets),
                datetime.fromisoformat(session.opened_at),
            )
            self._remember(self._session_limits, session.session_id, hit)
        return hit[1], hit[2]

    def _take_usage(self) -> dict[str, Usage]:
        """Hand every pending usage increment to the caller's write (see :meth:`consume`)."""
        pending, self._usage_pending = self._usage_pending, {}
        return pending

    def _return_usage(self, taken: Mapping[str, Usage]) -> None:
        """The write that took these increments failed: queue them again."""
        for sid, delta in taken.items():
            pending = self._usage_pending.get(sid)
            self._usage_pending[sid] = delta if pending is None else _add(pending, delta)
        if taken and not self._usage_flush_queued:
            self._usage_flush_queued = True
            asyncio.get_running_loop().call_soon(self._flush_usage)

    def _flush_usage(self) -> None:
        self._usage_flush_queued = False
        for sid, delta in self._take_usage().items():
            task = asyncio.ensure_future(self._store.add_usage(sid, delta))
            self._pending.add(task)
            task.add_done_callback(self._usage_written)

    async def drain_usage(self) -> None:
        """Persist pending usage increments now and wait for every usage write (shutdown, tests)."""
        self._flush_usage()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _usage_written(self, task: asyncio.Future[Usage]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("persisting budget usage failed: %s", task.exception())

    async def list_tools(self, session_id: str, model_call_id: str) -> ToolView:
        _check_id("model_call_id", model_call_id)
        session = await self._session(session_id)
        snap = self.snapshot
        await self.consume(session, Usage(model_calls=1))
        tools = self._visible(session, snap)
        digests = {t.spec.key: t.spec.spec_digest for t in tools}
        h = hashlib.sha256("".join(f"{k}={v}\n" for k, v in sorted(digests.items())).encode())
        view = ToolViewRecord(
            session_id=session_id,
            model_call_id=model_call_id,
            tools=tuple(sorted(digests)),
            spec_digests=digests,
            tool_set_digest="sha256:" + h.hexdigest(),
            created_at=rfc3339(self._clock.now()),
        )
        await self._store.put_tool_view(view)
        self._remember(self._views, (session_id, model_call_id), view, VIEW_CACHE_MAX)
        return ToolView(tools=tools, tool_set_digest=view.tool_set_digest)

    # ------------------------------------------------------------------ propose
    async def propose(self, p: Proposal, trace: TraceContext) -> ProposeOutcome:
        for name, value in (
            ("model_call_id", p.model_call_id),
            ("proposal_id", p.proposal_id),
            ("tool_name", p.tool_name),
            ("tool_version", p.tool_version),
        ):
            _check_id(name, value)
        if p.idempotency_key is not None and p.idempotency_key:
            _check_id("idempotency_key", p.idempotency_key)
        session = await self._session(p.session_id)
        snap = self.snapshot
        await self.consume(session, Usage(tool_calls=1))
        view = await self._view(p.session_id, p.model_call_id)
        now = self._clock.now()
        at = rfc3339(now)
        inv_id = "inv_" + new_id()
        trail = _Trail(self, inv_id, None, 0, trace, at)
        subject = Subject(tenant=session.tenant, id=session.subject)
        # The record is built once, when the call ends (finish); stages fill these in.
        later: dict[str, Any] = {}
        trail.add(
            "proposed",
            State.PROPOSED,
            {
                "proposal_id": p.proposal_id,
                "model_call_id": p.model_call_id,
                "tool": f"{p.tool_name}@{p.tool_version}",
                "raw_sha256": hashlib.sha256(p.arguments_bytes).hexdigest(),
                "raw_len": len(p.arguments_bytes),
                "tool_set_digest": view.tool_set_digest if view else "",
                "policy_revision": snap.revision,
                "parent_span_id": trace.parent_span_id,
            },
        )

        claimed: IdempotencyKey | None = None

        async def finish(
            decision: Decision | None = None,
            rejection: Rejection | None = None,
            validator: str = "",
            dialect: str = "",
            decision_dict: dict[str, Any] | None = None,
        ) -> ProposeOutcome:
            if decision is not None and decision_dict is None:
                decision_dict = decision_to_dict(decision)
            final = InvocationRecord(
                invocation_id=inv_id,
                session_id=p.session_id,
                model_call_id=p.model_call_id,
                proposal_id=p.proposal_id,
                tool_name=p.tool_name,
                tool_version=p.tool_version,
                tenant=session.tenant,
                subject=session.subject,
                state=trail.state or State.PROPOSED,
                raw_arguments=p.arguments_bytes,
                idempotency_key=p.idempotency_key or "",
                policy_revision=snap.revision,
                created_at=at,
                updated_at=at,
                decision=decision_dict,
                rejection=rejection.as_dict() if rejection else None,
                **later,
            )
            usage = self._take_usage()
            try:
                await self._store.create_invocation(final, trail.events, usage)
            except Exception:
                self._return_usage(usage)
                if claimed is not None:  # nothing was recorded: do not leave the key held
                    await self._idem.release(claimed, inv_id, now=now)
                raise
            return ProposeOutcome(final, decision, rejection, validator, dialect)

        def reject(exc: CallgateError, to: State, kind: str) -> Rejection:
            rej = Rejection(exc.code.value, exc.message, exc.violations)
            trail.add(kind, to, {"rejection": rej.as_dict()})
            return rej

        # --- lookup (6.2 invariant 2; 6.14 row 1: no approximate matching)
        tool = snap.tools.get(p.tool_name, p.tool_version)
        key = f"{p.tool_name}@{p.tool_version}"
        lookup_error: CallgateError | None = None
        if view is None:
            lookup_error = CallgateError(
                code=ErrorCode.TOOLS_NOT_LISTED,
                message="no ListTools was recorded for this model_call_id; the model cannot have seen this tool",
            )
        elif key not in view.tools or tool is None:
            lookup_error = CallgateError(
                code=ErrorCode.UNKNOWN_TOOL_VERSION,
                message=f"tool {key} is not in the set shown for this model call",
            )
        elif view.spec_digests.get(key) != tool.spec.spec_digest:
            lookup_error = CallgateError(
                code=ErrorCode.UNKNOWN_TOOL_VERSION,
                message=f"tool {key} changed since it was shown to the model; list tools again",
            )
        if lookup_error is not None or tool is None:
            assert lookup_error is not None
            return await finish(rejection=reject(lookup_error, State.PARSE_REJECTED, "parse_rejected"))

        # --- strict parse (6.3, 6.4 layer 1)
        try:
            parsed = parse_arguments(p.arguments_bytes, self._limits)
        except RejectedError as exc:
            return await finish(rejection=reject(exc, State.PARSE_REJECTED, "parse_rejected"))
        trail.add("parsed", State.PARSED, {"top_level_keys": len(parsed.value)})

        # --- schema validation (6.4 layer 2)
        try:
            validated = tool.schema.validate(parsed)
        except RejectedError as exc:
            return await finish(rejection=reject(exc, State.VALIDATION_REJECTED, "validation_rejected"))
        vinfo = {
            "dialect": validated.dialect,
            "validator": validated.validator,
            "validator_version": validated.validator_version,
            "format_assertion": validated.format_assertion,
            "tool_spec_digest": tool.spec.spec_digest,
        }
        trail.add("validated", State.VALIDATED, vinfo)
        validator = f"{validated.validator} {validated.validator_version}"

        # --- normalization + canonical digest (6.4 layer 3, 6.5)
        zone = load_zone(session.timezone)
        if zone is None:  # the zone was valid at OpenSession; tzdata changed under us
            raise CallgateError(code=ErrorCode.INTERNAL, message="session time zone is no longer known")
        ctx = NormalizationContext(
            reference_clock=now.astimezone(zone).isoformat(), timezone=session.timezone, locale=session.locale
        )
        try:
            normalized: NormalizedArguments = normalize(
                validated,
                tool.normalizers,
                ctx,
                tenant=session.tenant,
                tool_name=tool.spec.name,
                tool_version=tool.spec.version,
            )
            post = tool.normalized_schema.validate_value(normalized.value)
            if post:
                raise RejectedError(
                    code=ErrorCode.SCHEMA_VIOLATION,
                    message="normalized arguments do not satisfy the tool's normalized schema",
                    violations=post,
                )
        except RejectedError as exc:
            return await finish(
                rejection=reject(exc, State.VALIDATION_REJECTED, "validation_rejected"),
                validator=validator,
                dialect=validated.dialect,
            )
        later["digest"] = normalized.digest
        later["normalized_arguments"] = normalized.canonical
        trail.add(
            "normalized",
            State.VALIDATED,
            {
                "reference_clock": ctx.reference_clock,
                "timezone": ctx.timezone,
                "locale": ctx.locale,
                "applied": list(normalized.applied),
                "normalized_arguments": normalized.canonical.decode("utf-8"),
                "digest": normalized.digest,
            },
        )

        # --- idempotency key contract (6.8), before anything can run
        key = p.idempotency_key or ""
        if not key and not tool.spec.keyless_allowed:
            problem = CallgateError(
                code=ErrorCode.IDEMPOTENCY_KEY_REQUIRED,
                message=f"{tool.spec.key} writes and needs an idempotency key",
            )
            return await finish(rejection=reject(problem, State.VALIDATION_REJECTED, "validation_rejected"))
        idem_key = (
            IdempotencyKey(session.tenant, session.subject, p.tool_name, p.tool_version, key) if key else None
        )
        if idem_key is not None:
            retention = timedelta(
                seconds=tool.spec.retention_seconds(self._cfg.idempotency.retention_seconds)
            )
            policy = ExpiredPolicy(self._cfg.idempotency.expired_policy)
            claim = await self._idem.claim(
                idem_key, normalized.digest, inv_id, now=now, retention=retention, expired_policy=policy
            )
            if (
                claim.kind is ClaimKind.IN_PROGRESS
                and claim.record is not None
                and await self._expire_if_stale(claim.record.invocation_id, trace)
            ):  # the holder was a confirmation that expired unanswered: the key is free again
                claim = await self._idem.claim(
                    idem_key, normalized.digest, inv_id, now=now, retention=retention, expired_policy=policy
                )
            if claim.kind in (ClaimKind.IN_PROGRESS, ClaimKind.COMPLETED) and claim.record is not None:
                return await self._replay(claim.record, p, normalized.digest, trace)
            if claim.kind is ClaimKind.MISMATCH:
                problem = CallgateError(
                    code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
                    message="idempotency key already used with other arguments; use a new key",
                )
                return await finish(
                    rejection=reject(problem, State.VALIDATION_REJECTED, "validation_rejected")
                )
            if claim.kind is ClaimKind.NEW:
                claimed = idem_key
            else:
                problem = CallgateError(
                    code=ErrorCode.IDEMPOTENCY_KEY_EXPIRED,
                    message="idempotency key is past its retention window; use a new key",
                )
                return await finish(
                    rejection=reject(problem, State.VALIDATION_REJECTED, "validation_rejected")
                )

        # --- authorization (6.6)
        result = await authorize_invocation(snap.engine, tool, normalized, subject)
        decision = result.decision
        decision_dict = decision_to_dict(decision)
        auth_data = {
            "subject": {"tenant": subject.tenant, "id": subject.id},
            "capabilities": list(tool.spec.required_capabilities),
            "resource": result.resource,
            "decision": decision_dict,
            "policy_revision": snap.revision,
        }
        if decision.effect is Effect.DENY:
            trail.add("authorization_rejected", State.AUTHORIZATION_REJECTED, auth_data)
            out = await finish(decision, None, validator, validated.dialect, decision_dict)
            if idem_key is not None:
                await self._idem.release(idem_key, inv_id, now=now)
            return out
        trail.add("authorized", State.AUTHORIZED, auth_data)
        later["deadline"] = rfc3339(now + timedelta(milliseconds=tool.spec.timeout_ms))
        if decision.effect is Effect.CONFIRM:
            expires = rfc3339(now + timedelta(seconds=self._cfg.confirmation.ttl_seconds))
            later["confirmation_expires_at"] = expires
            trail.add(
                "confirmation_requested",
                State.AUTHORIZED,
                {"digest": normalized.digest, "expires_at": expires},
            )
        else:
            trail.add(
                "prepared", State.PREPARED, {"digest": normalized.digest, "confirmation": "not_required"}
            )
        return await finish(decision, None, validator, validated.dialect, decision_dict)

    # ------------------------------------------------------------------ idempotency
    @staticmethod
    def idempotency_key(inv: InvocationRecord) -> IdempotencyKey:
        """The 6.8 lookup key: scope (tenant + subject), tool name, version, key."""
        return IdempotencyKey(inv.tenant, inv.subject, inv.tool_name, inv.tool_version, inv.idempotency_key)

    async def release_key(self, inv: InvocationRecord) -> None:
        """Give the key back: the invocation ended before the commit boundary."""
        if inv.idempotency_key:
            await self._idem.release(self.idempotency_key(inv), inv.invocation_id, now=self._clock.now())

    async def _replay(
        self, held: IdempotencyRecord, p: Proposal, digest: str, trace: TraceContext
    ) -> ProposeOutcome:
        """A repeated key with the same digest: answer with the original invocation; nothing new
        runs (6.8 rules 1-2). The repeat is recorded on the original's trail.

        With a shared (PostgreSQL) idempotency store the original may belong to another sidecar
        (another pod): its events are there, so the answer is built from the shared record alone
        (state known only once completed; the tool message once encoded)."""
        result = held.result or b""
        original = await self._store.get_invocation(held.invocation_id)
        if original is None:
            log.info("idempotent replay of %s held by another sidecar", held.invocation_id)
            state = State.PROPOSED
            if held.state == "completed":
                state = (
                    State.OBSERVED
                    if result
                    else State(held.outcome)
                    if held.outcome in State.__members__
                    else State.COMMITTED
                )
            remote = InvocationRecord(
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
            return ProposeOutcome(remote, None, None, idempotent_replay=True, replayed_message=result)
        trail = _Trail(self, original.invocation_id, original.state, 0, trace, rfc3339(self._clock.now()))
        trail.add(
            "idempotent_replay",
            original.state,
            {"proposal_id": p.proposal_id, "model_call_id": p.model_call_id, "digest": digest},
        )
        await self._store.append_events(trail.events)
        decision = None
        if original.decision:
            decision = decision_from_dict(original.decision)
        return ProposeOutcome(original, decision, None, idempotent_replay=True, replayed_message=result)

    # ------------------------------------------------------------------ confirmation
    async def _move(
        self, inv: InvocationRecord, to: State, kind: str, data: Mapping[str, Any], trace: TraceContext
    ) -> InvocationRecord | None:
        at = rfc3339(self._clock.now())
        trail = _Trail(self, inv.invocation_id, inv.state, 0, trace, at)
        trail.add(kind, to, data)
        new = replace(inv, state=to, updated_at=at)
        ok = await self._store.transition(new, inv.state, trail.events)
        return new if ok else None

    async def confirm(
        self, invocation_id: str, digest: str, confirmed_by: str, trace: TraceContext
    ) -> InvocationRecord:
        inv = await self._invocation(invocation_id)
        if inv.state is not State.AUTHORIZED or not inv.confirmation_expires_at:
            raise CallgateError(
                code=ErrorCode.CONFIRMATION_NOT_PENDING,
                message=f"invocation has no pending confirmation (state {inv.state.value})",
            )
        now = self._clock.now()
        if now >= datetime.fromisoformat(inv.confirmation_expires_at):
            if await self._move(
                inv,
                State.CANCELLED_BEFORE_COMMIT,
                "confirmation_expired",
                {"expired_at": inv.confirmation_expires_at},
                trace,
            ):
                await self.release_key(inv)
            raise CallgateError(
                code=ErrorCode.CONFIRMATION_EXPIRED, message="the confirmation window has passed"
            )
        if not hmac.compare_digest(digest.encode(), inv.digest.encode()):
            # 6.6 / 6.11: a confirmation of anything else than the parked digest cancels it.
            moved = await self._move(
                inv,
                State.CANCELLED_BEFORE_COMMIT,
                "confirmation_rejected",
                {"reason": ErrorCode.CONFIRMATION_DIGEST_MISMATCH.value, "confirmed_by": confirmed_by},
                trace,
            )
            if moved is None:
                raise CallgateError(
                    code=ErrorCode.CONFIRMATION_NOT_PENDING, message="invocation has no pending confirmation"
                )
            await self.release_key(inv)
            raise CallgateError(
                code=ErrorCode.CONFIRMATION_DIGEST_MISMATCH,
                message="digest does not match the parked invocation; it was cancelled, propose again",
            )
        moved = await self._move(
            inv,
            State.PREPARED,
            "confirmed",
            {"digest": inv.digest, "confirmed_by": confirmed_by},
            trace,
        )
        if moved is None:
            raise CallgateError(
                code=ErrorCode.CONFIRMATION_NOT_PENDING, message="invocation has no pending confirmation"
            )
        return moved

    async def _expire_if_stale(self, invocation_id: str, trace: TraceContext) -> bool:
        """Cancel a parked invocation whose confirmation window has passed (releasing its
        idempotency key). True if it was (or already is) expired and cancelled."""
        inv = await self._store.get_invocation(invocation_id)
        if inv is None or inv.state is not State.AUTHORIZED or not inv.confirmation_expires_at:
            return False
        if self._clock.now() < datetime.fromisoformat(inv.confirmation_expires_at):
            return False
        moved = await self._move(
            inv,
            State.CANCELLED_BEFORE_COMMIT,
            "confirmation_expired",
            {"expired_at": inv.confirmation_expires_at},
            trace,
        )
        if moved is not None:
            await self.release_key(inv)
        return True

    async def expire_confirmations(self) -> int:
        """Sweep: cancel every parked invocation whose confirmation expired (6.11: an unconfirmed
        call ends as cancelled_before_commit). Returns how many were cancelled."""
        now = self._clock.now()
        expired = [
            inv
            for inv in await self._store.list_pending("")
            if now >= datetime.fromisoformat(inv.confirmation_expires_at)
        ]
        trace = TraceContext.from_traceparent(None)
        return sum([await self._expire_if_stale(inv.invocation_id, trace) for inv in expired])

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        now = self._clock.now()
        return [
            inv
            for inv in await self._store.list_pending(tenant)
            if now < datetime.fromisoformat(inv.confirmation_expires_at)
        ]

    # ------------------------------------------------------------------ cancel / read
    async def cancel(self, invocation_id: str, reason: str, trace: TraceContext) -> InvocationRecord:
        """Cancel (6.7): before the commit boundary the invocation becomes CANCELLED_BEFORE_COMMIT
        and its idempotency key is released. From EXECUTING on, a cancel cannot make the call
        "not happen": the record keeps its state, no further attempt may start and no tool
        message is produced for it (6.12, 6.14 row 9)."""
        inv = await self._invocation(invocation_id)
        if inv.state in CANCELLABLE:
            moved = await self._move(
                inv, State.CANCELLED_BEFORE_COMMIT, "cancelled", {"reason": reason[:500]}, trace
            )
            if moved is not None:
                await self.release_key(inv)
                return moved
            inv = await self._invocation(invocation_id)  # lost a race; fall through with the winner
        if inv.state in AFTER_BOUNDARY and not inv.cancel_requested_at:
            at = rfc3339(self._clock.now())
            trail = _Trail(self, inv.invocation_id, inv.state, 0, trace, at)
            trail.add("cancel_requested", inv.state, {"reason": reason[:500], "effect": "stops_what_follows"})
            new = replace(inv, cancel_requested_at=at, updated_at=at)
            if await self._store.transition(new, inv.state, trail.events):
                return new
            inv = await self._invocation(invocation_id)
        if inv.cancel_requested_at:
            return inv
        check_transition(inv.state, State.CANCELLED_BEFORE_COMMIT)  # raises the precise error
        raise CallgateError(code=ErrorCode.ILLEGAL_TRANSITION, message="invocation changed concurrently")

    async def get_invocation(self, invocation_id: str) -> tuple[InvocationRecord, list[EventRecord]]:
        inv = await self._invocation(invocation_id)
        return inv, await self._store.list_events(invocation_id)

    # ------------------------------------------------------------------ generic decision point
    async def authorize(self, request: AuthzRequest) -> Decision:
        decisions = await self.snapshot.engine.authorize_batch([request])
        return decisions[0]


__all__ = [
    "Gate",
    "ProposeOutcome",
    "Rejection",
    "SessionSpec",
    "ToolView",
    "decision_to_dict",
]
