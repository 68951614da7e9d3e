"""Thin gRPC servicers: convert wire messages to pipeline types and back, nothing else.

Trace extraction, RPC metrics and error mapping are not here: the one server interceptor
(:class:`callgate.server.interceptors.CallgateInterceptor`) does them for every method, mapping
errors in exactly one place (:mod:`callgate.server.status`). A handler reads the caller's trace
context with :func:`~callgate.server.interceptors.current_trace`.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import struct_pb2

from callgate.base.errors import ErrorCode, invalid_request, refused_for_runtime
from callgate.base.fastinit import builder
from callgate.base.lru import remember
from callgate.base.model import AuthzRequest, Decision, Effect, Proposal, Subject
from callgate.base.states import State
from callgate.execute.execution import Execution, Finding
from callgate.execute.partcheck import PartData
from callgate.execute.redaction import PATTERNS_ONLY, Redactor
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.propose.gate import Gate, ProposeOutcome, Rejection, SessionSpec
from callgate.server.interceptors import current_trace
from callgate.server.status import for_model
from callgate.server.watch import InvocationWatch
from callgate.store.base import EventRecord, InvocationRecord

if TYPE_CHECKING:
    from callgate.policy.lifecycle import PolicyLifecycle
    from callgate.policy.snapshot import SnapshotMemo

_EFFECT = {Effect.ALLOW: pb.ALLOW, Effect.DENY: pb.DENY, Effect.CONFIRM: pb.CONFIRM}


_STATE_PB: dict[State, int] = {s: pb.State.Value(s.value) for s in State}


def state_pb(s: State | None) -> int:
    return _STATE_PB[s] if s is not None else pb.STATE_UNSPECIFIED


_proposal = builder(Proposal)


def decision_pb(d: Decision) -> pb.Decision:
    return pb.Decision(
        effect=_EFFECT[d.effect],
        reasons=[pb.Reason(code=r.code, policy_id=r.policy_id, message=r.message) for r in d.reasons],
        policy_ids=list(d.policy_ids),
        error_code=d.error_code,
        engine=d.engine,
    )


def decision_dict_pb(d: Mapping[str, Any] | None) -> pb.Decision | None:
    if not d:
        return None
    return pb.Decision(
        effect=pb.Effect.Value(str(d["effect"]).upper()),
        reasons=[pb.Reason(**r) for r in d.get("reasons", [])],
        policy_ids=list(d.get("policy_ids", [])),
        error_code=d.get("error_code", ""),
        engine=d.get("engine", ""),
    )


def rejection_pb(r: Rejection | Mapping[str, Any] | None) -> pb.Rejection | None:
    if r is None:
        return None
    if isinstance(r, Rejection):
        r = r.as_dict()
    return pb.Rejection(
        code=r["code"], message=r["message"], violations=[pb.Violation(**v) for v in r.get("violations", [])]
    )


def invocation_pb(inv: InvocationRecord, masker: Redactor = PATTERNS_ONLY) -> pb.Invocation:
    """``masker``: what ``masked_arguments`` of an invocation that waits or waited for a
    confirmation is masked with (the arguments a runtime's approval prompt shows)."""
    asked = inv.confirmation_expires_at
    return pb.Invocation(
        invocation_id=inv.invocation_id,
        session_id=inv.session_id,
        model_call_id=inv.model_call_id,
        proposal_id=inv.proposal_id,
        tool_name=inv.tool_name,
        tool_version=inv.tool_version,
        subject=pb.Subject(tenant=inv.tenant, id=inv.subject),
        state=state_pb(inv.state),  # type: ignore[arg-type]
        digest=inv.digest,
        normalized_arguments=inv.normalized_arguments,
        raw_arguments=inv.raw_arguments,
        decision=decision_dict_pb(inv.decision),
        idempotency_key=inv.idempotency_key,
        created_at=inv.created_at,
        updated_at=inv.updated_at,
        confirmation_expires_at=inv.confirmation_expires_at,
        rejection=rejection_pb(inv.rejection),
        attempts=inv.attempts,
        external_resource_id=inv.external_resource_id,
        commit_time=inv.commit_time,
        cancel_requested_at=inv.cancel_requested_at,
        deadline=inv.deadline,
        masked_arguments=masked_json(inv.normalized_arguments, masker) if asked else b"",
    )


def event_pb(e: EventRecord, masker: Redactor | None = None) -> pb.Event:
    """``masker``: the confirmer's answer, every string of the data masked."""
    data = struct_pb2.Struct()
    data.update(dict(e.data) if masker is None else masker.mask_json(dict(e.data))[0])
    return pb.Event(
        event_id=e.event_id,
        invocation_id=e.invocation_id,
        seq=e.seq,
        at=e.at,
        kind=e.kind,
        from_state=state_pb(e.from_state),  # type: ignore[arg-type]
        to_state=state_pb(e.to_state),  # type: ignore[arg-type]
        trace_id=e.trace_id,
        span_id=e.span_id,
        data=data,
    )


def propose_pb(
    o: ProposeOutcome,
    *,
    echo_arguments: bool = True,
    memo: SnapshotMemo | None = None,
    masker: Redactor = PATTERNS_ONLY,
) -> pb.ProposeResponse:
    """``echo_arguments=False`` (the request's ``omit_normalized_arguments``): digest only.
    ``memo``: the serving snapshot's, where the decision's message is built once per distinct
    decision (:meth:`~callgate.policy.snapshot.SnapshotMemo.decision_form`: the compiled core's
    decisions are shared values, :func:`callgate.propose.steps._compiled_decision`). ``masker``:
    the arguments of a parked invocation as a person may see them (``masked_arguments``)."""
    r = o.record
    d = o.decision
    parked = echo_arguments and r.state is State.AUTHORIZED and bool(r.confirmation_expires_at)
    return pb.ProposeResponse(
        invocation_id=r.invocation_id,
        state=_STATE_PB[r.state],  # type: ignore[arg-type]
        decision=None if not d else decision_pb(d) if memo is None else memo.decision_form(d, decision_pb),
        digest=r.digest,
        normalized_arguments=r.normalized_arguments if echo_arguments else b"",
        rejection=rejection_pb(o.rejection),
        confirmation_expires_at=r.confirmation_expires_at,
        schema_dialect=o.schema_dialect,
        validator=o.validator,
        idempotent_replay=o.idempotent_replay,
        replayed_message=o.replayed_message,
        masked_arguments=masked_json(r.normalized_arguments, masker) if parked else b"",
    )


LISTINGS_CACHE_MAX = 16
"""ListTools answers kept per servicer, by tool set digest (a shown set is sent as is; a reload
or another allowlist makes another set)."""


def _listing_bytes(answer: bytes | pb.ListToolsResponse) -> bytes:
    """ListTools' response serializer: a listing kept as its wire bytes goes out as is."""
    return answer if isinstance(answer, bytes) else answer.SerializeToString()


class _Handlers:
    """Stands in for the server while the generated code registers a service: keeps its
    method handlers (the generated module stays the one place that names them)."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.service, self.handlers = service, dict(handlers)


def add_gate_service(servicer: GateService, server: grpc.aio.Server) -> None:
    """Register the Gate service as the generated code does, except that ListTools answers its
    listing's kept wire bytes: at 1,000 tools serializing the 569 KB listing again for every call
    cost ~1 ms of the call's CPU (docs/BENCHMARKS.md, "ListTools")."""
    got = _Handlers()
    pb_grpc.add_GateServicer_to_server(servicer, got)  # type: ignore[no-untyped-call]
    plain = got.handlers["ListTools"]
    got.handlers["ListTools"] = grpc.unary_unary_rpc_method_handler(
        plain.unary_unary, request_deserializer=plain.request_deserializer, response_serializer=_listing_bytes
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(got.service, got.handlers),))
    server.add_registered_method_handlers(got.service, got.handlers)


class GateService(pb_grpc.GateServicer):
    """The agent role. ``masker``: the configured secrets by name and the secret patterns, for
    the ``masked_arguments`` of a parked invocation (what a runtime's approval prompt shows:
    docs/CLIENTS.md); the exact arguments are answered as they are."""

    def __init__(
        self,
        gate: Gate,
        execution: Execution,
        watch: InvocationWatch | None = None,
        masker: Redactor | None = None,
    ) -> None:
        self._gate = gate
        self._masker = masker or PATTERNS_ONLY
        self._x = execution
        self._watch = watch if watch is not None else InvocationWatch()
        self._listings: OrderedDict[str, bytes] = OrderedDict()
        """ListTools answers by tool set digest, as wire bytes (:func:`add_gate_service`)."""

    async def GetResult(
        self, request: pb.GetResultRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetResultResponse:
        page = await self._x.get_result(
            request.invocation_id, request.page_token, request.tool_call_id, session_id=request.session_id
        )
        return pb.GetResultResponse(
            message=page.message, truncated=page.truncated, next_page_token=page.next_page_token
        )

    async def OpenSession(
        self, request: pb.OpenSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.OpenSessionResponse:
        b = request.budgets
        s = await self._gate.open_session(
            SessionSpec(
                subject=Subject(tenant=request.subject.tenant, id=request.subject.id),
                timezone=request.timezone or "UTC",
                locale=request.locale or "en",
                budgets={
                    "max_model_calls": b.max_model_calls,
                    "max_tool_calls": b.max_tool_calls,
                    "max_wall_clock_seconds": b.max_wall_clock_seconds,
                    "max_result_bytes": b.max_result_bytes,
                    "max_external_cost_micros": b.max_external_cost_micros,
                },
                tool_allowlist=tuple(request.tool_allowlist),
                session_id=request.session_id,
            )
        )
        return pb.OpenSessionResponse(session_id=s.session_id, opened_at=s.opened_at)

    async def ListTools(self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext) -> bytes:
        """The listing as its wire bytes, serialized once per tool set (:func:`add_gate_service`
        sends them as is)."""
        view = await self._gate.list_tools(
            request.session_id, request.model_call_id, tuple(request.fed_invocation_ids)
        )
        # One message per tool set, built once (issue 15 A4): the set digest covers every spec
        # digest shown, so equal digests are equal listings, whatever the snapshot.
        hit = self._listings.get(view.tool_set_digest)
        if hit is not None:
            self._listings.move_to_end(view.tool_set_digest)
            return hit
        listing = pb.ListToolsResponse(
            tools=[
                pb.ToolSpec(
                    name=t.spec.name,
                    version=t.spec.version,
                    description=t.spec.description,
                    input_schema_json=t.input_schema_json,
                    schema_dialect=t.spec.schema_dialect,
                    side_effect_class=t.spec.side_effect_class.value,
                    required_capabilities=list(t.spec.required_capabilities),
                    resource_template=t.spec.resource_template,
                    spec_digest=t.spec.spec_digest,
                    output_schema_json=t.output_schema_json,
                )
                for t in view.tools
            ],
            tool_set_digest=view.tool_set_digest,
        )
        wire: bytes = listing.SerializeToString()
        remember(self._listings, view.tool_set_digest, wire, LISTINGS_CACHE_MAX)
        return wire

    async def Propose(
        self, request: pb.ProposeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProposeResponse:
        outcome = await self._gate.propose(
            _proposal(
                session_id=request.session_id,
                model_call_id=request.model_call_id,
                proposal_id=request.proposal_id,
                tool_name=request.tool_name,
                tool_version=request.tool_version,
                arguments_bytes=request.arguments,
                idempotency_key=request.idempotency_key or None,
            ),
            current_trace(),
        )
        rejection = outcome.rejection
        if rejection is not None and not for_model(rejection.code):
            # Recorded, but not the model's to act on (the rule in server/status.py): a call error.
            raise refused_for_runtime(
                ErrorCode(rejection.code),
                rejection.message,
                invocation_id=outcome.record.invocation_id,
                state=outcome.record.state.value,
                violations=rejection.violations,
            )
        snapshot = self._gate.snapshot_or_none
        return propose_pb(
            outcome,
            echo_arguments=not request.omit_normalized_arguments,
            memo=None if snapshot is None else snapshot.memo,
            masker=self._masker,
        )

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        inv = await self._gate.cancel(
            request.invocation_id, request.reason, current_trace(), session_id=request.session_id
        )
        return pb.CancelResponse(state=state_pb(inv.state))  # type: ignore[arg-type]

    async def GetInvocation(
        self, request: pb.GetInvocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetInvocationResponse:
        inv, events = await self._gate.get_invocation(request.invocation_id, session_id=request.session_id)
        return pb.GetInvocationResponse(
            invocation=invocation_pb(inv, self._masker), events=[event_pb(e) for e in events]
        )

    async def FindInvocation(
        self, request: pb.FindInvocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetInvocationResponse:
        inv, events = await self._gate.find_invocation(
            request.session_id, request.tool_name, request.tool_version, request.idempotency_key
        )
        return pb.GetInvocationResponse(
            invocation=invocation_pb(inv, self._masker), events=[event_pb(e) for e in events]
        )

    async def ListParked(
        self, request: pb.ListParkedRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListParkedResponse:
        parked = await self._gate.list_parked(request.session_id)
        return pb.ListParkedResponse(invocations=[invocation_pb(inv, self._masker) for inv in parked])

    async def WatchInvocation(
        self, request: pb.WatchInvocationRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchInvocationResponse]:
        changes = self._watch.changes(self._gate, request.invocation_id, request.session_id)
        parked = False
        try:
            async for inv, events, terminal in changes:
                parked = inv.state is State.AUTHORIZED and not terminal
                yield pb.WatchInvocationResponse(
                    invocation=invocation_pb(inv, self._masker),
                    events=[event_pb(e) for e in events],
                    terminal=terminal,
                )
        except (asyncio.CancelledError, GeneratorExit):
            remaining = context.time_remaining()
            if request.cancel_on_close and parked and (remaining is None or remaining > 0):
                # the caller went away before its deadline: it gave the call up (issue 28 item 3)
                await asyncio.shield(self._closed_watch(request.invocation_id, request.session_id))
            raise

    async def _closed_watch(self, invocation_id: str, session_id: str) -> None:
        inv, _ = await self._gate.get_invocation(invocation_id, session_id=session_id)
        if inv.state is State.AUTHORIZED:
            await self._gate.cancel(
                invocation_id, "the agent closed its watch", current_trace(), session_id=session_id
            )


def masked_bytes(data: bytes, masker: Redactor) -> bytes:
    """Arguments (JSON text) as a person may see them: each secret masked
    (:meth:`Redactor.mask`), every other byte as it is (bytes that are not UTF-8 kept by
    ``surrogateescape``)."""
    if not data:
        return data
    text = data.decode("utf-8", "surrogateescape")
    if not masker.might_contain(text):
        return data
    return masker.mask(text)[0].encode("utf-8", "surrogateescape")


def masked_json(data: bytes, masker: Redactor) -> bytes:
    """JSON arguments as a person may see them and a program can still read: every string of
    the document (keys too) masked (:meth:`Redactor.mask_json`), so a mask never runs across a
    string's end and the answer stays JSON (``masked_arguments``, an adapter's approval prompt);
    the bytes as they are when nothing is found. Text that is not JSON: :func:`masked_bytes`."""
    if not data:
        return data
    text = data.decode("utf-8", "surrogateescape")
    if not masker.might_contain(text):
        return data
    try:
        value = json.loads(text)
    except ValueError:
        return masked_bytes(data, masker)
    shown = masker.mask_json(value)[0]
    return json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def pending_pb(inv: InvocationRecord, masker: Redactor = PATTERNS_ONLY) -> pb.PendingConfirmation:
    """A parked invocation for the confirmer: its arguments with each secret masked (the digest
    is the digest of the exact arguments; approving binds them, not the masked text)."""
    d = decision_dict_pb(inv.decision)
    return pb.PendingConfirmation(
        invocation_id=inv.invocation_id,
        digest=inv.digest,
        tool_name=inv.tool_name,
        tool_version=inv.tool_version,
        subject=pb.Subject(tenant=inv.tenant, id=inv.subject),
        normalized_arguments=masked_bytes(inv.normalized_arguments, masker),
        expires_at=inv.confirmation_expires_at,
        reasons=list(d.reasons) if d else [],
        raw_arguments=masked_bytes(inv.raw_arguments, masker),
        created_at=inv.created_at,
    )


class ConfirmationsService(pb_grpc.ConfirmationsServicer):
    """The confirmer role. Every argument it answers (pending items, the trail of
    GetTenantInvocation) has its secrets masked by ``masker`` (docs/CONSOLE.md, "Secrets are
    masked"): a person approves what runs, but never reads a credential."""

    def __init__(
        self, gate: Gate, watch: InvocationWatch | None = None, masker: Redactor | None = None
    ) -> None:
        self._gate = gate
        self._watch = watch or InvocationWatch()
        self._masker = masker or PATTERNS_ONLY

    async def Confirm(
        self, request: pb.ConfirmRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConfirmResponse:
        inv = await self._gate.confirm(
            request.invocation_id, request.digest, request.confirmed_by, current_trace(),
            tenant=request.tenant, note=request.note,
        )  # fmt: skip
        return pb.ConfirmResponse(state=state_pb(inv.state))  # type: ignore[arg-type]

    async def Deny(self, request: pb.DenyRequest, context: grpc.aio.ServicerContext) -> pb.DenyResponse:
        inv = await self._gate.deny(
            request.invocation_id, request.digest, request.denied_by, current_trace(),
            tenant=request.tenant, note=request.note,
        )  # fmt: skip
        return pb.DenyResponse(state=state_pb(inv.state))  # type: ignore[arg-type]

    async def ListPending(
        self, request: pb.ListPendingRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPendingResponse:
        page = await self._gate.list_pending(request.tenant, request.page_size, request.page_token)
        out = [pending_pb(inv, self._masker) for inv in page.pending]
        return pb.ListPendingResponse(pending=out, next_page_token=page.next_page_token)

    async def WatchPending(
        self, request: pb.WatchPendingRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchPendingResponse]:
        async for pending in self._watch.pending_changes(self._gate, request.tenant):
            yield pb.WatchPendingResponse(pending=[pending_pb(inv, self._masker) for inv in pending])

    async def GetTenantInvocation(
        self, request: pb.GetTenantInvocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetInvocationResponse:
        inv, events = await self._gate.tenant_invocation(request.invocation_id, request.tenant)
        shown = invocation_pb(inv, self._masker)
        shown.normalized_arguments = masked_bytes(inv.normalized_arguments, self._masker)
        shown.raw_arguments = masked_bytes(inv.raw_arguments, self._masker)
        return pb.GetInvocationResponse(invocation=shown, events=[event_pb(e, self._masker) for e in events])


def _value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        n = v.number_value
        if n - n != 0.0:  # NaN or an infinity: no JSON form (MessageToDict raised ValueError)
            raise invalid_request("context: a number is NaN or infinite (no JSON form)")
        return n
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return {k: _value(x) for k, x in v.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    return None  # null_value, or no kind set (MessageToDict reads both as null)


def struct_dict(s: struct_pb2.Struct) -> dict[str, Any]:
    """``json_format.MessageToDict`` of a ``Struct`` (the same values in the same order: numbers
    as floats, a null or unset value as None), without its per-field descriptor look-ups (~5x
    faster); a NaN or infinite number is ``invalid_request`` (MessageToDict raised ValueError)."""
    return {k: _value(x) for k, x in s.fields.items()}


DECISION_PB_CACHE_MAX = 256
"""Distinct decisions whose ``pb.Decision`` an :class:`AuthorizerService` keeps built (a
decision is its effect and the policies behind it: a handful per policy set)."""


class AuthorizerService(pb_grpc.AuthorizerServicer):
    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._built: dict[Decision, pb.Decision] = {}

    def _decision_pb(self, d: Decision) -> pb.Decision:
        built = self._built.get(d)
        if built is None:
            if len(self._built) >= DECISION_PB_CACHE_MAX:
                self._built.clear()
            built = self._built[d] = decision_pb(d)
        return built

    async def Authorize(
        self, request: pb.AuthorizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.AuthorizeResponse:
        if not request.subject.tenant or not request.subject.id or not request.capability:
            raise invalid_request("subject.tenant, subject.id and capability are required")
        ctx = struct_dict(request.context) if request.HasField("context") else {}
        decision, record = await self._gate.authorize(
            AuthzRequest(
                subject=Subject(tenant=request.subject.tenant, id=request.subject.id),
                capability=request.capability,
                resource=request.resource,
                context=ctx,
            ),
            current_trace(),
        )
        # the cached message is copied into the response (never shared, never changed)
        return pb.AuthorizeResponse(decision=self._decision_pb(decision), decision_id=record.decision_id)


_OUTCOME_NAMES = {
    pb.OUTCOME_COMMITTED: "COMMITTED",
    pb.OUTCOME_FAILED_BEFORE_COMMIT: "FAILED_BEFORE_COMMIT",
    pb.OUTCOME_UNKNOWN_COMMIT: "OUTCOME_UNKNOWN",
    pb.OUTCOME_FAILED_AFTER_COMMIT: "FAILED_AFTER_COMMIT",
}
_FINDINGS = {
    pb.RECONCILE_COMMITTED: Finding.COMMITTED,
    pb.RECONCILE_NOT_COMMITTED: Finding.NOT_COMMITTED,
    pb.RECONCILE_FAILED_AFTER_COMMIT: Finding.FAILED_AFTER_COMMIT,
}
_FAILURE_NAMES = {
    pb.FAILURE_CLASS_UNSPECIFIED: "",
    pb.NOT_REACHED: "not_reached",
    pb.TRANSIENT: "transient",
    pb.TIMEOUT: "timeout",
    pb.BUSINESS_REJECTION: "business_rejection",
}


class ExecutorService(pb_grpc.ExecutorServicer):
    def __init__(self, execution: Execution) -> None:
        self._x = execution

    async def BeginAttempt(
        self, request: pb.BeginAttemptRequest, context: grpc.aio.ServicerContext
    ) -> pb.BeginAttemptResponse:
        started = await self._x.begin_attempt(request.invocation_id, request.executor_id, current_trace())
        inv = started.invocation
        return pb.BeginAttemptResponse(
            attempt_id=started.attempt.attempt_id,
            attempt_number=started.attempt.number,
            credential=started.credential.token,
            credential_expires_at=started.attempt.credential_expires_at,
            tool_name=inv.tool_name,
            tool_version=inv.tool_version,
            normalized_arguments=inv.normalized_arguments,
            idempotency_key=inv.idempotency_key,
            deadline=inv.deadline,
            state=state_pb(inv.state),  # type: ignore[arg-type]
        )

    async def ReportOutcome(
        self, request: pb.ReportOutcomeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportOutcomeResponse:
        outcome = _OUTCOME_NAMES.get(request.outcome)
        if outcome is None:
            raise invalid_request("outcome is required")
        reported = await self._x.report_outcome(
            request.attempt_id,
            outcome,
            failure_class=_FAILURE_NAMES.get(request.failure_class, ""),
            external_resource_id=request.external_resource_id,
            commit_time=request.commit_time,
            http_status=request.http_status,
            cost_micros=request.cost_micros,
            message=request.message,
            trace=current_trace(),
        )
        a = reported.advice
        return pb.ReportOutcomeResponse(
            state=state_pb(reported.invocation.state),  # type: ignore[arg-type]
            retry=pb.RetryAdvice(
                retry=a.retry,
                reason=a.reason,
                backoff_ms=a.backoff_ms,
                attempts_left=a.attempts_left,
                same_key=a.same_key,
            ),
        )

    async def EncodeResult(
        self, request: pb.EncodeResultRequest, context: grpc.aio.ServicerContext
    ) -> pb.EncodeResultResponse:
        parts = [PartData(p.index, p.data) for p in request.parts]  # checked, never stored
        encoded = await self._x.encode(
            request.invocation_id, request.status, request.value, current_trace(), parts
        )
        result = encoded.result
        verdicts = [v.value for v in encoded.part_verdicts]
        if encoded.withheld:  # recorded for the trail, never handed out (6.7, 6.12)
            return pb.EncodeResultResponse(
                state=state_pb(encoded.invocation.state),  # type: ignore[arg-type]
                redactions=result.redactions,
                withheld=True,
                part_verdicts=verdicts,  # type: ignore[arg-type]
            )
        return pb.EncodeResultResponse(
            message=result.message,
            truncated=result.truncated,
            next_page_token=result.page_token,
            state=state_pb(encoded.invocation.state),  # type: ignore[arg-type]
            redactions=result.redactions,
            structured_json=encoded.structured.decode("utf-8"),
            error_code=ErrorCode.RESULT_SCHEMA_INVALID.value if encoded.output.refused else "",
            part_verdicts=verdicts,  # type: ignore[arg-type]
        )

    async def GetJwks(
        self, request: pb.GetJwksRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetJwksResponse:
        return pb.GetJwksResponse(jwks_json=json.dumps(self._x.jwks(), sort_keys=True))

    async def RedeemSecret(
        self, request: pb.RedeemSecretRequest, context: grpc.aio.ServicerContext
    ) -> pb.RedeemSecretResponse:
        return pb.RedeemSecretResponse(
            value=await self._x.redeem_secret(request.credential, request.secret_name)
        )

    async def Reconcile(
        self, request: pb.ReconcileRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReconcileResponse:
        finding = _FINDINGS.get(request.finding)
        if finding is None:
            raise invalid_request("finding is required")
        done = await self._x.reconcile(
            request.invocation_id,
            finding,
            external_resource_id=request.external_resource_id,
            commit_time=request.commit_time,
            message=request.message,
            executor_id=request.executor_id,
            trace=current_trace(),
        )
        return pb.ReconcileResponse(
            state=state_pb(done.invocation.state),  # type: ignore[arg-type]
            already_recorded=done.already_recorded,
        )


class PolicyStatusService(pb_grpc.PolicyStatusServicer):
    """``callgate.v1.PolicyStatus`` on every listener: the serving revision and, when the newest
    policy files were refused, each problem (file, place, problem). ``lifecycle`` returns the
    sidecar's :class:`~callgate.policy.lifecycle.PolicyLifecycle` (None before it starts)."""

    def __init__(self, gate: Gate, lifecycle: Callable[[], PolicyLifecycle | None]) -> None:
        self._gate = gate
        self._lifecycle = lifecycle

    async def GetPolicyStatus(
        self, request: pb.GetPolicyStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetPolicyStatusResponse:
        snap = self._gate.snapshot_or_none
        lc = self._lifecycle()
        if lc is None:
            return pb.GetPolicyStatusResponse(serving_revision="", ready=False, latest_files_ok=False)
        return pb.GetPolicyStatusResponse(
            serving_revision=snap.revision if snap is not None and lc.ready else "",
            ready=lc.ready,
            latest_files_ok=not lc.last_error,
            last_error=lc.last_error,
            problems=[
                pb.PolicyProblem(file=f.file, line=f.line, place=f.place, problem=f.problem)
                for f in lc.problems
            ],
            refused_at=lc.refused_at,
        )
