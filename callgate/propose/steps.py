"""The steps of ``Propose``, one per stage of the spec's chain (6.1 - 6.6).

    lookup     name@version in this model call's tool view          6.1, 6.2 inv. 2, 6.14 row 1
    parse      strict JSON of the raw bytes -> ParsedArguments        6.3, 6.4 layer 1
    validate   JSON Schema 2020-12 -> ValidatedArguments             6.4 layer 2, 6.14 rows 2-3
    normalize  normalizers, RFC 8785 bytes, digest, re-validation    6.4 layer 3, 6.5, 6.14 row 3
    (the idempotency claim: callgate.propose.idempotency)            6.8
    authorize  one request per capability on the engine -> Decision  6.6, 6.14 row 4
    decide     deny | confirm (parked, digest-bound) | allow         6.6, 6.11, 6.14 row 5

Each step takes the previous step's frozen type and returns the next one or a
:class:`~callgate.propose.outcome.Rejection`; each records its event on the call's trail. A
:class:`ProposeCall` holds what one call has learned so far (the trail, and the fields of the
invocation record written once at the end).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from callgate.arguments.normalize import load_zone, normalize
from callgate.arguments.parse import ParseLimits, parse_arguments
from callgate.base.clock import rfc3339
from callgate.base.errors import (
    CallgateError,
    ErrorCode,
    RejectedError,
    Violation,
    internal,
    schema_violation,
    tools_not_listed,
    unknown_tool_version,
)
from callgate.base.events import EventKind
from callgate.base.fastinit import builder
from callgate.base.ids import new_id
from callgate.base.model import (
    Decision,
    Effect,
    NormalizationContext,
    NormalizedArguments,
    ParsedArguments,
    Proposal,
    Subject,
    ValidatedArguments,
    values_of,
)
from callgate.base.states import State
from callgate.base.trace import TraceContext
from callgate.native import HandBack
from callgate.policy.engines.base import fault
from callgate.policy.meters import SESSION_KEY, USAGE_KEY, usage_record
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.textflags import may_flag, text_context
from callgate.policy.timevalues import TimeValueError, time_values
from callgate.policy.toolspecs import CompiledTool
from callgate.propose.authorize import AuthorizationResult, authorize_invocation
from callgate.propose.core import Core, CoreKind
from callgate.propose.outcome import Rejection, decision_to_dict
from callgate.store.base import InvocationRecord, SessionRecord, ToolViewRecord
from callgate.store.trail import Trail

_invocation = builder(InvocationRecord)
_normalization_context = builder(NormalizationContext)


@dataclass(slots=True)
class ProposeCall:
    """One ``Propose`` in progress: its inputs, its trail, and the record fields found so far."""

    proposal: Proposal
    session: SessionRecord
    snapshot: PolicySnapshot
    view: ToolViewRecord | None
    now: datetime
    trail: Trail
    invocation_id: str
    digest: str = ""
    normalized_arguments: bytes = b""
    deadline: str = ""
    confirmation_expires_at: str = ""
    validator: str = ""
    """``name version`` of the validator, once the arguments validated."""
    dialect: str = ""
    decision: dict[str, object] | None = field(default=None)
    authorization: AuthorizationResult | None = None
    """The decision the compiled core made in the same call as the front stages (one call,
    docs/NATIVE.md); :func:`authorize` records it instead of asking the engine."""
    authorization_dict: dict[str, object] | None = None
    """The stored form of :attr:`authorization`'s decision, shared like the decision."""
    usage: dict[str, Any] | None = None
    """``context.usage`` when the tool declares meters (reserved: :mod:`callgate.propose.metering`)."""
    labels: tuple[str, ...] | None = None
    """``context.session.labels`` when a ToolSpec of the snapshot declares result labels."""
    written: bool = False
    """Whether the invocation was written as this call's own (else its reservations are dropped)."""
    hidden: bool = False
    """The tool was left out of the view by policy (ListTools by policy): the engine must deny it."""

    @property
    def at(self) -> str:
        return self.trail.at

    @property
    def subject(self) -> Subject:
        return Subject(tenant=self.session.tenant, id=self.session.subject)

    def reject(self, error: CallgateError, to: State, kind: EventKind) -> Rejection:
        """Record ``error`` as the call's refusal (its last event) and return it."""
        return self.refuse(Rejection.of(error), to, kind)

    def refuse(self, rejection: Rejection, to: State, kind: EventKind) -> Rejection:
        """Record ``rejection`` as the call's last event and return it."""
        self.trail.add(kind, to, {"rejection": rejection.as_dict()})
        return rejection

    def record(self, rejection: Rejection | None) -> InvocationRecord:
        """The invocation record as the call leaves it."""
        p = self.proposal
        at = self.trail.at
        return _invocation(
            invocation_id=self.invocation_id,
            session_id=p.session_id,
            model_call_id=p.model_call_id,
            proposal_id=p.proposal_id,
            tool_name=p.tool_name,
            tool_version=p.tool_version,
            tenant=self.session.tenant,
            subject=self.session.subject,
            state=self.trail.state or State.PROPOSED,
            raw_arguments=p.arguments_bytes,
            digest=self.digest,
            normalized_arguments=self.normalized_arguments,
            decision=self.decision,
            rejection=rejection.as_dict() if rejection else None,
            idempotency_key=p.idempotency_key or "",
            deadline=self.deadline,
            confirmation_expires_at=self.confirmation_expires_at,
            policy_revision=self.snapshot.revision,
            created_at=at,
            updated_at=at,
        )


def begin(
    p: Proposal,
    session: SessionRecord,
    snapshot: PolicySnapshot,
    view: ToolViewRecord | None,
    now: datetime,
    trace: TraceContext,
) -> ProposeCall:
    """A new invocation for ``p``, with its ``proposed`` event."""
    invocation_id = "inv_" + new_id()
    trail = Trail.new(invocation_id, trace, rfc3339(now))
    call = ProposeCall(p, session, snapshot, view, now, trail, invocation_id)
    trail.add(
        EventKind.PROPOSED,
        State.PROPOSED,
        {
            "proposal_id": p.proposal_id,
            "model_call_id": p.model_call_id,
            "tool": f"{p.tool_name}@{p.tool_version}",
            "raw_sha256": hashlib.sha256(p.arguments_bytes).hexdigest(),
            "raw_len": len(p.arguments_bytes),
            "tool_set_digest": view.tool_set_digest if view else "",
            "policy_revision": snapshot.revision,
            "parent_span_id": trace.parent_span_id,
        },
    )
    return call


def lookup(call: ProposeCall) -> CompiledTool | Rejection:
    """The exact ``name@version`` shown to the model in this model call (no approximate matching)."""
    p, view = call.proposal, call.view
    tool = call.snapshot.tools.get(p.tool_name, p.tool_version)
    key = f"{p.tool_name}@{p.tool_version}"
    if view is None:
        problem = tools_not_listed(
            "no ListTools was recorded for this model_call_id; the model cannot have seen this tool"
        )
    elif tool is None or key not in view.tools and not _still_hidden(call, tool):
        problem = unknown_tool_version(f"tool {key} is not in the set shown for this model call")
    elif not call.hidden and view.spec_digests.get(key) != tool.spec.spec_digest:
        problem = unknown_tool_version(
            f"tool {key} changed since it was shown to the model; list tools again"
        )
    else:
        return tool
    return call.reject(problem, State.PARSE_REJECTED, EventKind.PARSE_REJECTED)


def _still_hidden(call: ProposeCall, tool: CompiledTool) -> bool:
    """An allowlisted tool the view hid by policy goes on through the chain, for the engine's deny
    to answer it (docs/POLICIES.md, "ListTools by policy"), while the serving snapshot still hides
    it from this subject; anything else not shown is refused as not shown."""
    assert call.view is not None
    spec, session = tool.spec, call.session
    call.hidden = (
        call.view.hid_by_policy
        and session.allows(spec.key, spec.name)
        and spec.key in call.snapshot.hidden_for(session.subject)
    )
    return call.hidden


def parse(call: ProposeCall, limits: ParseLimits) -> ParsedArguments | Rejection:
    """Strict parse of the raw bytes (duplicate keys, NaN, overflow, lone surrogates, depth, size)."""
    try:
        parsed = parse_arguments(call.proposal.arguments_bytes, limits)
    except RejectedError as exc:
        return call.reject(exc, State.PARSE_REJECTED, EventKind.PARSE_REJECTED)
    _parsed_event(call, len(parsed.value))
    return parsed


def _parsed_event(call: ProposeCall, top_level_keys: int) -> None:
    call.trail.add(EventKind.PARSED, State.PARSED, {"top_level_keys": top_level_keys})


def validate(
    call: ProposeCall, tool: CompiledTool, parsed: ParsedArguments
) -> ValidatedArguments | Rejection:
    """JSON Schema 2020-12 with format assertion, compiled once per ToolSpec."""
    try:
        validated = tool.schema.validate(parsed)
    except RejectedError as exc:
        return call.reject(exc, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)
    _validated_event(call, tool, validated)
    return validated


def _validated_event(call: ProposeCall, tool: CompiledTool, validated: ValidatedArguments) -> None:
    call.trail.add(EventKind.VALIDATED, State.VALIDATED, _validated_data(tool, validated))


def _validated_data(tool: CompiledTool, validated: ValidatedArguments) -> dict[str, object]:
    return {
        "dialect": validated.dialect,
        "validator": validated.validator,
        "validator_version": validated.validator_version,
        "format_assertion": validated.format_assertion,
        "tool_spec_digest": tool.spec.spec_digest,
    }


def _native_validated_data(
    call: ProposeCall, tool: CompiledTool, validated: ValidatedArguments
) -> dict[str, object]:
    """:func:`_validated_data` of a validation the compiled core answered, built once per tool
    of the snapshot (:class:`~callgate.policy.snapshot.SnapshotMemo`)."""
    facts = call.snapshot.memo.facts(tool)
    if facts.native_validated is None:
        facts.native_validated = _validated_data(tool, validated)
    return facts.native_validated


def _compiled_decision(
    snapshot: PolicySnapshot, authz: tuple[tuple[Any, Any], ...]
) -> tuple[Decision, dict[str, object]]:
    """The engine's combined decision of the compiled core's answers and its stored dict, one
    pair per distinct answer of the snapshot (they are few: effect, reasons and error per
    capability): the same frozen value the engine builds, without building it for every call.
    The dict is shared by the records and events of those calls, which only read it (stores
    serialize it, sinks copy before masking)."""
    decider = snapshot.engine.compiled
    if decider is None:  # the core decided, so the engine has a compiled side: never here
        raise internal("the compiled core decided for an engine without a compiled side")

    def build() -> tuple[Decision, dict[str, object]]:
        decision = decider.decide_answers(authz)
        return decision, decision_to_dict(decision)

    try:
        key = tuple(
            (m[0], tuple(m[1]), m[2], None if sh is None else (sh[0], tuple(sh[1]), sh[2])) for m, sh in authz
        )
        hash(key)
    except TypeError:  # an answer of another shape: decided as is, not remembered
        return build()
    return snapshot.memo.shared_decision(key, build)


def normalize_arguments(
    call: ProposeCall, tool: CompiledTool, validated: ValidatedArguments
) -> NormalizedArguments | Rejection:
    """Normalizers in the session's clock, zone and locale; canonical bytes and digest (6.5);
    the normalized value checked against the normalized schema (6.14 row 3)."""
    session = call.session
    ctx = _context(call)
    try:
        cleaned, text_applied = tool.text_policy.apply(values_of(validated))  # issue 33, first
        if text_applied:
            validated = dataclasses.replace(validated, value=cleaned)
        normalized = normalize(
            validated,
            tool.normalizers,
            ctx,
            tenant=session.tenant,
            tool_name=tool.spec.name,
            tool_version=tool.spec.version,
        )
        if text_applied:
            normalized = dataclasses.replace(normalized, applied=text_applied + normalized.applied)
        post = tool.normalized_schema.validate_value(values_of(normalized))
        if post:
            raise schema_violation("normalized arguments do not satisfy the tool's normalized schema", post)
        check_times(tool, normalized.value)
    except RejectedError as exc:
        return call.reject(exc, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)
    _normalized_event(call, normalized)
    return normalized


def check_times(tool: CompiledTool, value: object) -> None:
    """Fail closed (issue 30): a date, date-time or duration argument that has no exact policy
    time value (a digit below the millisecond, a leap second, a duration in months) is a
    validation error, never a value the policies cannot compare. Raises ``schema_violation``."""
    if not tool.times or not isinstance(value, dict):
        return
    try:
        time_values(value, tool.times)
    except TimeValueError as exc:
        pointer, _, message = str(exc).partition(": ")
        raise schema_violation(
            "an argument has no exact time value for the policies",
            [Violation(pointer=pointer, message=message, keyword="format")],
        ) from None


def _context(call: ProposeCall) -> NormalizationContext:
    """The session's normalization context (6.5) at the call's clock."""
    session = call.session
    zone = load_zone(session.timezone)
    if zone is None:  # the zone was valid at OpenSession; tzdata changed under us
        raise internal("session time zone is no longer known")
    local_now = call.now.astimezone(zone)
    return _normalization_context(
        reference_clock=local_now.isoformat(),
        timezone=session.timezone,
        locale=session.locale,
        reference_time=local_now,
    )


def _normalized_event(call: ProposeCall, normalized: NormalizedArguments) -> None:
    ctx = normalized.context
    call.digest = normalized.digest
    call.normalized_arguments = normalized.canonical
    call.trail.add(
        EventKind.NORMALIZED,
        State.VALIDATED,
        {
            "reference_clock": ctx.reference_clock,
            "timezone": ctx.timezone,
            "locale": ctx.locale,
            "applied": list(normalized.applied),
            "digest": normalized.digest,
        },  # the arguments themselves are stored once, in the invocation (store/base.py ARGUMENTS_KEY)
    )


def front(
    call: ProposeCall, tool: CompiledTool, limits: ParseLimits, core: Core
) -> tuple[ValidatedArguments, NormalizedArguments | Rejection] | Rejection:
    """parse -> validate -> normalize, on the compiled core when it runs this tool (one call, the
    GIL released; docs/NATIVE.md), else on the Python stages. The core's refusals and deferrals
    are answered by the Python stages, which the core matches (tests/test_native_parity.py):
    they record the same refusal with its message and violations. A refusal after validation
    comes with the validated arguments (the answer names the validator)."""
    p, session = call.proposal, call.session
    try:
        ctx = _context(call)
    except CallgateError:  # the Python stages raise it where they always did
        ctx = None
    answer = None
    if ctx is not None:
        answer = core.front(
            call.snapshot,
            tool,
            p.arguments_bytes,
            session.tenant,
            session.locale,
            ctx.reference_clock,
            limits,
            None if stateful(call.snapshot, tool) else session.subject,  # decided after the claim
            session.timezone,
        )
    if (
        answer is not None
        and answer.code is None
        and tool.text_policy.rules
        and tool.text_policy.needs_python(p.arguments_bytes, answer.parsed)
    ):
        answer = None  # the text policy refuses or changes an identifier: the Python stages answer
    if (
        answer is not None
        and answer.authz is not None
        and _declares_text(call.snapshot, tool)
        and _hides_text(answer.canonical)
    ):
        answer = None  # context.text (policy/textflags.py): the core does not build it
    if answer is not None and answer.code is None and ctx is not None:
        validated = core.validated(tool, answer)
        normalized = core.normalized(answer, ctx)
        _parsed_event(call, answer.top_level_keys)
        call.trail.add(EventKind.VALIDATED, State.VALIDATED, _native_validated_data(call, tool, validated))
        try:
            check_times(tool, normalized.value)
        except RejectedError as exc:
            return validated, call.reject(exc, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)
        _normalized_event(call, normalized)
        if answer.authz is not None:
            decision, call.authorization_dict = _compiled_decision(call.snapshot, answer.authz)
            call.authorization = AuthorizationResult(decision, answer.resource, ())
        return validated, normalized
    parsed = parse(call, limits)
    if isinstance(parsed, Rejection):
        return parsed
    checked = validate(call, tool, parsed)
    if isinstance(checked, Rejection):
        return checked
    normalized_or = normalize_arguments(call, tool, checked)
    if answer is not None and answer.code != "defer" and not isinstance(normalized_or, Rejection):
        core.note(HandBack.MISMATCH)  # the core refused what the reference accepts: the reference wins
    return checked, normalized_or


def _declares_text(snapshot: PolicySnapshot, tool: CompiledTool) -> bool:
    """Whether one of the tool's actions declares ``context.text`` (issue 33)."""
    compiled = snapshot.engine.compiled
    if compiled is None:  # not decided by the compiled core: the Python stages build context.text
        return True
    return any(c in compiled.text_actions for c in tool.spec.required_capabilities)


def _hides_text(canonical: bytes) -> bool:
    """Whether these canonical arguments have a ``context.text`` (the compiled core's one-call
    decision lacks it)."""
    return may_flag(canonical) and text_context(json.loads(canonical)) is not None


async def authorize(
    call: ProposeCall, tool: CompiledTool, normalized: NormalizedArguments, core: Core | None = None
) -> Decision | Rejection:
    """``authorize(subject, capability, resource, context)`` per capability; faults are denies.
    A request the engine's schema cannot hold is a refusal naming the argument (below)."""
    session = call.session
    stateful = call.usage is not None or call.labels is not None
    result = None if stateful else call.authorization  # the core decided without usage and labels
    if stateful and core is not None:
        result = call.authorization = _metered_on_core(call, tool, normalized, core)
    if stateful:
        normalized = with_value(normalized)
    if result is None:
        result = await authorize_invocation(
            call.snapshot.engine, tool, normalized, call.subject, call.usage, call.labels
        )
    refused = _not_conforming(call, tool, normalized, result.decision)
    if refused is not None:
        return refused
    decision = result.decision
    if call.hidden and decision.effect is not Effect.DENY:  # the reading proves it never: fail closed
        decision = fault(
            decision.engine, ErrorCode.UNKNOWN_TOOL_VERSION, "the tool was not shown for this model call"
        )
        call.decision = decision_to_dict(decision)
    elif result is not call.authorization:
        call.decision = decision_to_dict(result.decision)
    else:  # a decision of the compiled core is a shared value (_compiled_decision): so is its dict
        call.decision = call.authorization_dict
    data: dict[str, object] = {
        "subject": {"tenant": session.tenant, "id": session.subject},
        "capabilities": list(tool.spec.required_capabilities),
        "resource": result.resource,
        "decision": call.decision,
        "policy_revision": call.snapshot.revision,
    }
    if call.usage is not None:
        data["usage"] = usage_record(call.usage)
    if call.labels is not None:
        data["session_labels"] = list(call.labels)
    if call.hidden:
        data["hidden_by_policy"] = True
    if decision.effect is Effect.DENY:
        call.trail.add(EventKind.AUTHORIZATION_REJECTED, State.AUTHORIZATION_REJECTED, data)
    else:
        call.trail.add(EventKind.AUTHORIZED, State.AUTHORIZED, data)
    return decision


def _metered_on_core(
    call: ProposeCall, tool: CompiledTool, normalized: NormalizedArguments, core: Core
) -> AuthorizationResult | None:
    """The compiled core's decision with ``context.usage`` and ``context.session`` (no JSON
    context built in Python), when it can take them: integer meters, no ``context.text`` left
    out. None: the engine decides."""
    if core.cedar_core(call.snapshot) is not CoreKind.NATIVE:
        return None
    # handed over as Python values (no JSON text): the core refuses a decimal sum (None), which
    # the engine's JSON path writes as a Cedar decimal
    members: dict[str, Any] = {}
    if call.usage is not None:
        members[USAGE_KEY] = call.usage
    if call.labels is not None:
        members[SESSION_KEY] = {"labels": list(call.labels)}
    if _declares_text(call.snapshot, tool) and _hides_text(normalized.canonical):
        return None
    got = core.decide_metered(
        call.snapshot, tool, normalized.canonical, call.session.tenant, call.session.subject,
        normalized.context.reference_clock, members,
    )  # fmt: skip
    if got is None:
        return None
    decision, call.authorization_dict = _compiled_decision(call.snapshot, got[1])
    return AuthorizationResult(decision, got[0], ())


def stateful(snapshot: PolicySnapshot, tool: CompiledTool) -> bool:
    """Whether the policy reads meters or session labels for ``tool`` (then it is asked after the
    idempotency claim, and the compiled core runs only the front stages: no one-call decision).
    A tool's own result labels are not read by its own decision (later calls read them)."""
    return bool(tool.meters) or snapshot.reads_labels(tool)


def with_value(normalized: NormalizedArguments) -> NormalizedArguments:
    """``normalized`` with its Python value, read back from the canonical bytes when the compiled
    core did not build it (a metered or labelled tool: the policy is asked after the claim)."""
    if normalized.value is not None:
        return normalized
    value = json.loads(normalized.canonical)
    return dataclasses.replace(normalized, value=value if isinstance(value, dict) else {})


def _not_conforming(
    call: ProposeCall, tool: CompiledTool, normalized: NormalizedArguments, decision: Decision
) -> Rejection | None:
    """A deny because the request does not conform to the engine's schema (an argument a
    hand-written action's context has no room for, or types otherwise) as the validation error
    it is: ``schema_violation`` naming the argument and the action, never a policy deny
    (:mod:`callgate.policy.conformance`)."""
    if decision.effect is not Effect.DENY:
        return None
    value = normalized.value if normalized.value is not None else json.loads(normalized.canonical)
    violations = call.snapshot.engine.conformance_violations(decision, tool.spec.required_capabilities, value)
    if violations is None:
        return None
    error = schema_violation(
        "the arguments do not conform to the Cedar schema of the tool's action", violations
    )
    return call.reject(error, State.VALIDATION_REJECTED, EventKind.VALIDATION_REJECTED)


def decide(call: ProposeCall, tool: CompiledTool, decision: Decision, confirmation_ttl_seconds: int) -> None:
    """After an allow or confirm: the deadline, then PREPARED, or parked for a confirmation of
    exactly this digest until its expiry. The deadline counts from PREPARED: while parked it is the
    end of the confirmation window, and ``Confirm`` starts the tool's execution budget
    (:mod:`callgate.propose.confirmation`)."""
    if decision.effect is Effect.DENY:
        return
    if decision.effect is Effect.CONFIRM:
        call.confirmation_expires_at = rfc3339(call.now + timedelta(seconds=confirmation_ttl_seconds))
        call.deadline = call.confirmation_expires_at
        call.trail.add(
            EventKind.CONFIRMATION_REQUESTED,
            State.AUTHORIZED,
            {"digest": call.digest, "expires_at": call.confirmation_expires_at},
        )
    else:
        call.deadline = rfc3339(call.now + call.snapshot.memo.facts(tool).timeout)
        call.trail.add(
            EventKind.PREPARED, State.PREPARED, {"digest": call.digest, "confirmation": "not_required"}
        )


__all__ = [
    "ProposeCall",
    "authorize",
    "begin",
    "decide",
    "front",
    "lookup",
    "normalize_arguments",
    "parse",
    "validate",
]
