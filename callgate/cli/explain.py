"""``callgate explain INVOCATION_ID``: the eight questions of spec 6.13, answered from the store.

1. Which ToolSpec did the model see?        the tool view of the model call + the ToolSpec digest
2. What were the raw proposal bytes?         the invocation's raw arguments (as received)
3. What did parser, validator, normalizer produce?   the stage events, normalized bytes, digest
4. Who authorized, with which capability, was it confirmed?  ``authorized`` + confirmation events
5. What was executed, and each retry?        the attempts and their events
6. Is the commit status not committed, committed or unknown?  state, resource id, commit time
7. Which bytes went back to the model?       the encoded tool message
8. Which context did the next model call use?   the model calls the runtime said it fed the tool
   message into (``ListToolsRequest.fed_invocation_ids``, recorded with their tool views); without
   such a record, inferred from the model calls listed after the tool message (and labelled so);
   replays of it, and the trace (ids per event)

``callgate explain --decision DECISION_ID`` shows one recorded ``Authorizer.Authorize`` decision
(:func:`explain_decision`).

Everything is read from the event store; nothing is recomputed, so the answer is what happened,
not what the current policies would do. :class:`callgate.store.sqlite.SQLiteReader` (re-exported
here) opens the SQLite file read-only (the sidecar may keep running); with ``store.backend =
postgres`` :func:`open_source` reads the shared PostgreSQL store from outside any pod.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from callgate.base.events import CONFIRMATION_ANSWERS, EventKind, stage_of
from callgate.base.jsonable import bytes_json, jsonable
from callgate.base.states import State
from callgate.store.base import (
    AttemptRecord,
    DecisionRecord,
    EventRecord,
    FedResultRecord,
    InvocationRecord,
    ResultRecord,
    ToolViewRecord,
)
from callgate.store.retention import Tombstone
from callgate.store.sqlite import SQLiteReader

if TYPE_CHECKING:
    from callgate.config import Config
    from callgate.execute.redaction import Redactor


class ExplainSource(Protocol):
    """The reads explain needs (any :class:`~callgate.store.base.Store` has them). A source may
    also offer ``list_tool_views(session_id)``, ``get_snapshot(revision)`` and
    ``list_fed(invocation_id)``."""

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None: ...

    async def list_events(self, invocation_id: str) -> list[EventRecord]: ...

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]: ...

    async def get_result(self, invocation_id: str) -> ResultRecord | None: ...

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None: ...


@dataclass(frozen=True, slots=True)
class OpenedSource:
    """The configured store opened for reading (``callgate explain``)."""

    source: ExplainSource
    where: str
    """Where it is, for messages: the SQLite file, or ``PostgreSQL store`` (never the DSN)."""
    close: Callable[[], Awaitable[None]]


async def open_source(cfg: Config, environ: Mapping[str, str]) -> OpenedSource:
    """Open the store ``cfg`` names, read-only: the SQLite file (beside a running sidecar or
    not), or the PostgreSQL store from outside any pod (DSN from ``store.dsn_env`` /
    ``store.dsn_file``; the schema is checked, never migrated). Raises ``OSError`` /
    ``sqlite3.Error`` (SQLite) or :class:`~callgate.base.errors.CallgateError`."""
    if cfg.store.backend == "postgres":
        from callgate.store.postgres import PostgresStore
        from callgate.store.registry import store_dsn

        pg = PostgresStore(store_dsn(cfg, environ), min_size=0, max_size=1, read_only=True)
        await pg.start()
        return OpenedSource(pg, "PostgreSQL store", pg.close)
    db = cfg.path(cfg.store.path)
    reader = SQLiteReader(db)

    async def close() -> None:
        reader.close()

    return OpenedSource(reader, str(db), close)


# ------------------------------------------------------------------------------- answers
@dataclass(frozen=True, slots=True)
class ToolSeen:
    """1. The ToolSpec the model saw."""

    model_call_id: str
    view_recorded: bool
    """A ``ListTools`` was recorded for this model call."""
    shown: bool
    """``name@version`` was in that view."""
    tool_set_digest: str
    tools: tuple[str, ...]
    spec_digest: str
    """The digest of this ToolSpec in the view (what the model was shown)."""
    validated_spec_digest: str
    """The digest of the ToolSpec the arguments were validated against ("" if not reached)."""
    listed_at: str = ""
    spec_file: str = ""
    """The file under the policy directory whose bytes have ``spec_digest`` ("" = none now)."""
    hidden_by_policy: bool = False
    """Left out of the view by policy (ListTools by policy): the engine's deny answered it."""


@dataclass(frozen=True, slots=True)
class RawProposal:
    """2. The proposal bytes exactly as received."""

    proposal_id: str
    raw: bytes
    sha256: str
    length: int
    matches_event: bool
    """The bytes hash to the ``raw_sha256`` recorded on the ``proposed`` event."""


@dataclass(frozen=True, slots=True)
class StageOutput:
    """3. One event: a stage's output (or a later step of the invocation)."""

    seq: int
    kind: str
    stage: str
    at: str
    from_state: str
    to_state: str
    duration_us: int
    output: Mapping[str, Any]
    trace_id: str
    span_id: str


@dataclass(frozen=True, slots=True)
class Confirmation:
    status: str
    """``not_required``, ``pending``, ``confirmed``, ``rejected`` (digest mismatch), ``expired``,
    ``cancelled`` or ``none`` (no decision reached)."""
    requested_digest: str = ""
    expires_at: str = ""
    confirmed_by: str = ""
    confirmed_digest: str = ""
    at: str = ""


@dataclass(frozen=True, slots=True)
class Authorization:
    """4. Who authorized what, with which capability, and the confirmation."""

    subject_tenant: str
    subject_id: str
    capabilities: tuple[str, ...]
    resource: str
    effect: str
    engine: str
    policy_ids: tuple[str, ...]
    reasons: tuple[Mapping[str, Any], ...]
    error_code: str
    policy_revision: str
    confirmation: Confirmation
    shadow: Mapping[str, Any] | None = None
    snapshot: Mapping[str, Any] | None = None
    """When the policy revision started serving and on which engine (if recorded)."""
    usage: Mapping[str, Any] | None = None
    """``context.usage`` the policy saw (the declared meters, before and after the call)."""
    session_labels: tuple[str, ...] | None = None
    """``context.session.labels`` the policy saw (None: no ToolSpec declares labels)."""


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """5. One attempt (one credential) and its outcome."""

    number: int
    attempt_id: str
    executor_id: str
    jti: str
    started_at: str
    credential_expires_at: str
    outcome: str
    failure_class: str
    finished_at: str
    external_resource_id: str
    http_status: int
    cost_micros: int
    retry_reason: str
    trace_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CommitStatus:
    """6. Not committed, committed or unknown."""

    status: str
    """``not_committed``, ``committed`` or ``unknown``."""
    state: str
    external_resource_id: str
    commit_time: str
    cancel_requested_at: str
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """7. The bytes of the tool message given back to the model."""

    status: str
    message: bytes
    sha256: str
    truncated: bool
    remaining_bytes: int
    redactions: int
    created_at: str
    withheld: bool = False
    """Recorded after a cancel past the commit boundary and never handed to the model (6.7,
    6.12): ``GetResult`` answers ``output_after_cancel``."""


@dataclass(frozen=True, slots=True)
class NextModelCall:
    model_call_id: str
    listed_at: str
    tool_set_digest: str


@dataclass(frozen=True, slots=True)
class Replay:
    proposal_id: str
    model_call_id: str
    trace_id: str
    seq: int


class ContextSource(str, Enum):
    """Where the answer to question 8 comes from."""

    RECORDED = "recorded"
    """The runtime named the invocation in ``fed_invocation_ids`` of a later ``ListTools``."""
    INFERRED = "inferred"
    """No such record: the model calls listed after the tool message (an inference)."""
    NONE = "none"
    """No tool message went back to the model."""


@dataclass(frozen=True, slots=True)
class FedInto:
    """A model call whose context held the tool message, as the runtime recorded it."""

    model_call_id: str
    at: str
    message_sha256: str
    matches_message: bool
    """The fed message's sha256 is that of the stored tool message (question 7)."""


@dataclass(frozen=True, slots=True)
class ContextAndTrace:
    """8. The context the next model call used, and the trace."""

    tool_message_in_context: bool
    """A tool message exists: it is what the runtime put into the next call's context."""
    next_model_calls: tuple[NextModelCall, ...]
    """Model calls of the session whose ``ListTools`` was recorded after the tool message."""
    replays: tuple[Replay, ...]
    """Repeated proposals answered from this invocation (same idempotency key and digest)."""
    trace_ids: tuple[str, ...]
    caller_parent_span_id: str
    source: ContextSource = ContextSource.NONE
    fed_into: tuple[FedInto, ...] = ()
    """Recorded: the model calls the runtime fed the tool message into (``source`` RECORDED)."""


@dataclass(frozen=True, slots=True)
class Explanation:
    invocation_id: str
    session_id: str
    tenant: str
    subject: str
    tool: str
    state: str
    digest: str
    created_at: str
    updated_at: str
    tool_seen: ToolSeen
    raw_proposal: RawProposal
    stages: tuple[StageOutput, ...]
    normalized_arguments: bytes
    authorization: Authorization | None
    attempts: tuple[AttemptInfo, ...]
    commit: CommitStatus
    tool_message: ToolMessage | None
    context: ContextAndTrace
    notes: tuple[str, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------------------- building
_COMMITTED = {State.COMMITTED, State.OBSERVED, State.FAILED_AFTER_COMMIT}
_UNKNOWN = {State.OUTCOME_UNKNOWN, State.EXECUTING}


def _confirmation(inv: InvocationRecord, events: Sequence[EventRecord]) -> Confirmation:
    by_kind = {e.kind: e for e in events}
    req = by_kind.get(EventKind.CONFIRMATION_REQUESTED)
    base: dict[str, Any] = {}
    if req is not None:
        base = {
            "requested_digest": str(req.data.get("digest", "")),
            "expires_at": str(req.data.get("expires_at", "")),
        }
    for kind, status in CONFIRMATION_ANSWERS.items():
        e = by_kind.get(kind)
        if e is not None:
            return Confirmation(
                status=status,
                confirmed_by=str(e.data.get("confirmed_by", "")),
                confirmed_digest=str(e.data.get("digest", "")),
                at=e.at,
                **base,
            )
    if req is not None:
        for kind in (EventKind.CANCELLED, EventKind.DEADLINE_EXPIRED):
            if kind in by_kind:
                return Confirmation(status="cancelled", at=by_kind[kind].at, **base)
        return Confirmation(status="pending", **base)
    if EventKind.PREPARED in by_kind:
        return Confirmation(status="not_required")
    return Confirmation(status="none")


def _hidden_by_policy(decided: EventRecord | None) -> bool:
    """The decision event marks a tool ListTools left out by policy (docs/POLICIES.md)."""
    return decided is not None and decided.data.get("hidden_by_policy") is True


async def explain(
    store: ExplainSource, invocation_id: str, *, spec_files: Mapping[str, str] | None = None
) -> Explanation | None:
    """The 6.13 answers for one invocation, or None when the store does not know it.

    ``spec_files`` maps ToolSpec digests to files (see :func:`spec_files_in`) to name the file
    the model's ToolSpec came from."""
    inv = await store.get_invocation(invocation_id)
    if inv is None:
        return None
    events = await store.list_events(invocation_id)
    attempts = await store.list_attempts(invocation_id)
    result = await store.get_result(invocation_id)
    view = await store.get_tool_view(inv.session_id, inv.model_call_id)
    notes: list[str] = []
    by_kind: dict[str, EventRecord] = {}
    for e in events:
        by_kind.setdefault(e.kind, e)

    # 1 ------------------------------------------------------------------------------------
    key = f"{inv.tool_name}@{inv.tool_version}"
    validated = by_kind.get(EventKind.VALIDATED)
    spec_digest = view.spec_digests.get(key, "") if view else ""
    tool_seen = ToolSeen(
        model_call_id=inv.model_call_id,
        view_recorded=view is not None,
        shown=view is not None and key in view.tools,
        tool_set_digest=view.tool_set_digest if view else "",
        tools=tuple(view.tools) if view else (),
        spec_digest=spec_digest,
        validated_spec_digest=str(validated.data.get("tool_spec_digest", "")) if validated else "",
        listed_at=view.created_at if view else "",
        spec_file=(spec_files or {}).get(spec_digest, "") if spec_digest else "",
        hidden_by_policy=_hidden_by_policy(by_kind.get(EventKind.AUTHORIZATION_REJECTED)),
    )
    proposed = by_kind.get(EventKind.PROPOSED)
    if (
        proposed is not None
        and view is not None
        and proposed.data.get("tool_set_digest") not in ("", None, view.tool_set_digest)
    ):
        notes.append(
            "the tool view was listed again after the proposal; the proposed event's tool_set_digest differs"
        )

    # 2 ------------------------------------------------------------------------------------
    raw_hash = hashlib.sha256(inv.raw_arguments).hexdigest()
    raw = RawProposal(
        proposal_id=inv.proposal_id,
        raw=inv.raw_arguments,
        sha256=raw_hash,
        length=len(inv.raw_arguments),
        matches_event=proposed is not None and proposed.data.get("raw_sha256") == raw_hash,
    )

    # 3 ------------------------------------------------------------------------------------
    stages = []
    prev = ""
    for e in events:
        rej = e.data.get("rejection")
        code = str(rej.get("code", "")) if isinstance(rej, Mapping) else ""
        known = stage_of(e.kind, prev, code)
        stage = known.value if known is not None else e.kind
        prev = e.kind
        dur = e.data.get("duration_us", 0)
        stages.append(
            StageOutput(
                seq=e.seq,
                kind=e.kind,
                stage=stage,
                at=e.at,
                from_state=e.from_state.value if e.from_state else "",
                to_state=e.to_state.value,
                duration_us=dur if isinstance(dur, int) else 0,
                output={k: v for k, v in e.data.items() if k != "duration_us"},
                trace_id=e.trace_id,
                span_id=e.span_id,
            )
        )

    # 4 ------------------------------------------------------------------------------------
    authorization = None
    auth = by_kind.get(EventKind.AUTHORIZED) or by_kind.get(EventKind.AUTHORIZATION_REJECTED)
    if auth is not None:
        d = auth.data
        subj = d.get("subject") if isinstance(d.get("subject"), Mapping) else {}
        dec = d.get("decision") if isinstance(d.get("decision"), Mapping) else {}
        assert isinstance(subj, Mapping) and isinstance(dec, Mapping)
        revision = str(d.get("policy_revision", inv.policy_revision))
        snapshot = None
        get_snapshot = getattr(store, "get_snapshot", None)
        if get_snapshot is not None and revision:
            snapshot = await get_snapshot(revision)
        authorization = Authorization(
            subject_tenant=str(subj.get("tenant", inv.tenant)),
            subject_id=str(subj.get("id", inv.subject)),
            capabilities=tuple(str(c) for c in d.get("capabilities", ())),
            resource=str(d.get("resource", "")),
            effect=str(dec.get("effect", "")),
            engine=str(dec.get("engine", "")),
            policy_ids=tuple(str(p) for p in dec.get("policy_ids", ())),
            reasons=tuple(r for r in dec.get("reasons", ()) if isinstance(r, Mapping)),
            error_code=str(dec.get("error_code", "")),
            policy_revision=revision,
            confirmation=_confirmation(inv, events),
            shadow=dec.get("shadow") if isinstance(dec.get("shadow"), Mapping) else None,
            snapshot=snapshot,
            usage=d.get("usage") if isinstance(d.get("usage"), Mapping) else None,
            session_labels=(
                tuple(str(x) for x in d.get("session_labels", ()))
                if isinstance(d.get("session_labels"), list)
                else None
            ),
        )

    # 5 ------------------------------------------------------------------------------------
    traces_by_attempt: dict[str, list[str]] = {}
    for e in events:
        aid = e.data.get("attempt_id")
        if isinstance(aid, str):
            ids = traces_by_attempt.setdefault(aid, [])
            if e.trace_id not in ids:
                ids.append(e.trace_id)
    attempt_infos = tuple(
        AttemptInfo(
            number=a.number,
            attempt_id=a.attempt_id,
            executor_id=a.executor_id,
            jti=a.jti,
            started_at=a.started_at,
            credential_expires_at=a.credential_expires_at,
            outcome=a.outcome,
            failure_class=a.failure_class,
            finished_at=a.finished_at,
            external_resource_id=a.external_resource_id,
            http_status=a.http_status,
            cost_micros=a.cost_micros,
            retry_reason=a.retry_reason,
            trace_ids=tuple(traces_by_attempt.get(a.attempt_id, ())),
        )  # fmt: skip
        for a in attempts
    )

    # 6 ------------------------------------------------------------------------------------
    if inv.state in _COMMITTED:
        status = "committed"
    elif inv.state in _UNKNOWN:
        status = "unknown"
    else:
        status = "not_committed"
    commit = CommitStatus(
        status=status,
        state=inv.state.value,
        external_resource_id=inv.external_resource_id,
        commit_time=inv.commit_time,
        cancel_requested_at=inv.cancel_requested_at,
        idempotency_key=inv.idempotency_key,
    )

    # 7 ------------------------------------------------------------------------------------
    message = None
    if result is not None:
        message = ToolMessage(
            status=result.status,
            message=result.message,
            sha256=hashlib.sha256(result.message).hexdigest(),
            truncated=result.truncated,
            remaining_bytes=len(result.remaining),
            redactions=result.redactions,
            created_at=result.created_at,
            withheld=any(e.kind == EventKind.RESULT_ENCODED and e.data.get("withheld") for e in events),
        )

    # 8 ------------------------------------------------------------------------------------
    fed: list[FedResultRecord] = []
    list_fed = getattr(store, "list_fed", None)
    if list_fed is not None:
        fed = await list_fed(inv.invocation_id)
    message_sha = hashlib.sha256(result.message).hexdigest() if result is not None else ""
    fed_into = tuple(
        FedInto(f.model_call_id, f.at, f.message_sha256, f.message_sha256 == message_sha) for f in fed
    )
    next_calls: list[NextModelCall] = []
    list_views = getattr(store, "list_tool_views", None)
    if result is not None and list_views is not None and not fed_into:
        for v in await list_views(inv.session_id):
            if v.model_call_id != inv.model_call_id and v.created_at >= result.created_at:
                next_calls.append(NextModelCall(v.model_call_id, v.created_at, v.tool_set_digest))
    replays = tuple(
        Replay(
            proposal_id=str(e.data.get("proposal_id", "")),
            model_call_id=str(e.data.get("model_call_id", "")),
            trace_id=e.trace_id,
            seq=e.seq,
        )
        for e in events
        if e.kind == EventKind.IDEMPOTENT_REPLAY
    )
    trace_ids: list[str] = []
    for e in events:
        if e.trace_id not in trace_ids:
            trace_ids.append(e.trace_id)
    context = ContextAndTrace(
        tool_message_in_context=result is not None and not inv.cancel_requested_at,
        next_model_calls=tuple(next_calls),
        replays=replays,
        trace_ids=tuple(trace_ids),
        caller_parent_span_id=str(proposed.data.get("parent_span_id", "")) if proposed else "",
        source=ContextSource.RECORDED
        if fed_into
        else ContextSource.INFERRED
        if result is not None and not inv.cancel_requested_at
        else ContextSource.NONE,
        fed_into=fed_into,
    )
    if inv.cancel_requested_at:
        notes.append("cancel was requested after the commit boundary: no tool message is handed out")
    if message is not None and message.withheld:
        notes.append(
            "the tool message was recorded after the cancel and withheld: it never went to the model"
        )
    for e in events:
        if e.kind == EventKind.DEADLINE_EXPIRED:
            notes.append(
                f"ended at {e.at} because its deadline {e.data.get('deadline', '')} passed before it executed"
            )

    return Explanation(
        invocation_id=inv.invocation_id,
        session_id=inv.session_id,
        tenant=inv.tenant,
        subject=inv.subject,
        tool=key,
        state=inv.state.value,
        digest=inv.digest,
        created_at=inv.created_at,
        updated_at=inv.updated_at,
        tool_seen=tool_seen,
        raw_proposal=raw,
        stages=tuple(stages),
        normalized_arguments=inv.normalized_arguments,
        authorization=authorization,
        attempts=attempt_infos,
        commit=commit,
        tool_message=message,
        context=context,
        notes=tuple(notes),
    )


def masked(x: Explanation, masker: Redactor) -> Explanation:
    """``x`` as a person may read it: each secret in the proposal bytes, the stage outputs and the
    normalized arguments masked (:meth:`~callgate.execute.redaction.Redactor.mask`: a configured
    secret as ``⟦masked <name>⟧``, a pattern's match as ``⟦masked <pattern> …<last 4>⟧``), as the
    confirmation console shows them. The digests and hashes stay those of the exact bytes. The
    tool message was redacted before it was stored."""

    def text(data: bytes) -> bytes:
        decoded = data.decode("utf-8", "surrogateescape")
        return masker.mask(decoded)[0].encode("utf-8", "surrogateescape") if decoded else data

    stages = tuple(replace(s, output=masker.mask_json(dict(s.output))[0]) for s in x.stages)
    auth = x.authorization
    if auth is not None:  # a resource rendered from the arguments
        auth = replace(auth, resource=masker.mask(auth.resource)[0])
    return replace(
        x,
        authorization=auth,
        raw_proposal=replace(x.raw_proposal, raw=text(x.raw_proposal.raw)),
        stages=stages,
        normalized_arguments=text(x.normalized_arguments),
    )


@dataclass(frozen=True, slots=True)
class ExpiredInvocation:
    """An invocation retention deleted (``[store.retention]``): its tombstone."""

    expired: Tombstone


async def explain_or_expired(
    store: ExplainSource, invocation_id: str, *, spec_files: Mapping[str, str] | None = None
) -> Explanation | ExpiredInvocation | None:
    """:func:`explain`, or, for an invocation retention deleted, when and where it was exported
    (a source that keeps no tombstones answers None)."""
    found = await explain(store, invocation_id, spec_files=spec_files)
    get_tombstone = getattr(store, "get_tombstone", None)
    tomb = await get_tombstone(invocation_id) if get_tombstone is not None else None
    if found is not None and tomb is not None:  # kept, its events deleted (events_seconds)
        where = f", exported to {tomb.exported_to}" if tomb.exported_to else ", not exported"
        note = f"its events were deleted by retention at {tomb.expired_at}{where}"
        return replace(found, notes=(*found.notes, note))
    if found is not None:
        return found
    return None if tomb is None else ExpiredInvocation(tomb)


def render_expired_text(x: ExpiredInvocation) -> str:
    t = x.expired
    where = (
        f"exported before deletion to {t.exported_to}"
        if t.exported_to
        else "not exported ([store.retention] export_path was not set)"
    )
    return (
        f"invocation {t.invocation_id} expired: deleted by retention at {t.expired_at}\n"
        f"  it was {t.state} (tool {t.tool_name}, tenant {t.tenant}), last changed {t.updated_at}\n"
        f"  its records were {where}\n"
    )


def any_to_json(x: Explanation | ExpiredInvocation) -> dict[str, Any]:
    """:func:`to_json`, or ``{"expired": {...tombstone}}``."""
    return jsonable(x) if isinstance(x, ExpiredInvocation) else to_json(x)


def any_to_text(x: Explanation | ExpiredInvocation) -> str:
    return render_expired_text(x) if isinstance(x, ExpiredInvocation) else render_text(x)


@dataclass(frozen=True, slots=True)
class DecisionExplanation:
    """One recorded ``Authorizer.Authorize`` decision (``callgate explain --decision``)."""

    record: DecisionRecord
    snapshot: Mapping[str, Any] | None = None
    """When the decision's policy revision started serving and on which engine (if recorded)."""


async def explain_decision(store: Any, decision_id: str) -> DecisionExplanation | None:
    """The record of one ``Authorize`` decision, or None when the store does not know it."""
    get_decision = getattr(store, "get_decision", None)
    record = await get_decision(decision_id) if get_decision is not None else None
    if not isinstance(record, DecisionRecord):
        return None
    snapshot = None
    get_snapshot = getattr(store, "get_snapshot", None)
    if get_snapshot is not None and record.policy_revision:
        snapshot = await get_snapshot(record.policy_revision)
    return DecisionExplanation(record, snapshot)


def render_decision_text(x: DecisionExplanation) -> str:
    """The human-readable report of one ``Authorize`` decision."""
    d = x.record
    dec = d.decision
    keys = ", ".join(printable(k.encode()) for k in d.context_keys) or "-"
    policies = ", ".join(str(p) for p in dec.get("policy_ids", ())) or "-"
    error = f"; engine error {dec.get('error_code')}" if dec.get("error_code") else ""
    who = f"{printable(d.tenant.encode())}/{printable(d.subject.encode())}"
    what = f"{printable(d.capability.encode())} on {printable(d.resource.encode()) or '-'}"
    out = [
        f"decision {d.decision_id}  {str(dec.get('effect', '')).upper()}  at {d.at}",
        f"  subject {who} asked for {what}",
        f"  context {d.context_digest or '(none)'}; keys {keys} (values are not recorded)",
        f"  decided by {dec.get('engine', '') or '-'}; policies {policies}{error}",
    ]
    for reason in dec.get("reasons", ()):
        if isinstance(reason, Mapping):
            out.append(
                f"    - {reason.get('code', '')} [{reason.get('policy_id', '')}] {printable(str(reason.get('message', '')).encode())}"
            )
    out.append(
        f"  policy revision {d.policy_revision}"
        + (
            f" (serving since {x.snapshot.get('at', '')}, engine {x.snapshot.get('engine', '')})"
            if x.snapshot
            else ""
        )
    )
    out.append(
        f"  trace {d.trace_id} span {d.span_id}"
        + (f"; caller span {d.parent_span_id}" if d.parent_span_id else "")
    )
    return "\n".join(out) + "\n"


def decision_to_json(x: DecisionExplanation) -> dict[str, Any]:
    """A JSON-ready dict of one ``Authorize`` decision."""
    doc: dict[str, Any] = _jsonable(x)
    return doc


def spec_files_in(policy_dir: Path) -> dict[str, str]:
    """``sha256:<hex of file bytes>`` -> path, for every ToolSpec file under ``policy_dir/tools``."""
    out: dict[str, str] = {}
    tools = policy_dir / "tools"
    if tools.is_dir():
        for path in sorted(tools.glob("*.json")):
            try:
                out["sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()] = str(path)
            except OSError:
                continue
    return out


# ------------------------------------------------------------------------------- rendering
def printable(data: bytes) -> str:
    """Bytes as text for a terminal: UTF-8 where valid, ``\\xNN`` for invalid bytes, and control
    characters (ESC, CR, ...) escaped so stored bytes cannot drive the terminal. Never raises."""
    text = data.decode("utf-8", "backslashreplace")
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


_bytes_json = bytes_json
_jsonable = jsonable


def to_json(expl: Explanation) -> dict[str, Any]:
    """A JSON-ready dict; byte fields are ``{"utf8": str | null, "base64": str, "length": n}``."""
    doc: dict[str, Any] = _jsonable(expl)
    return doc


def _stateful_lines(a: Authorization) -> list[str]:
    """What the policy saw of the session's history: the meters and the session labels."""
    out = []
    for meter, windows in sorted((a.usage or {}).items()):
        if isinstance(windows, Mapping):
            seen = "; ".join(
                f"{w} {v.get('before')} -> {v.get('after')}"
                for w, v in windows.items()
                if isinstance(v, Mapping)
            )
            out.append(f"   meter {meter}: {seen}")
    if a.session_labels is not None:
        out.append(f"   session labels: {', '.join(a.session_labels) or '(none)'}")
    return out


def _one_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _indent(text: str, prefix: str = "     ") -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


def render_text(x: Explanation) -> str:
    """The human-readable report (``callgate explain``)."""
    out: list[str] = []
    w = out.append
    w(f"invocation {x.invocation_id}  {x.tool}  state {x.state}")
    w(
        f"  session {x.session_id}  subject {x.tenant}/{x.subject}  created {x.created_at}  updated {x.updated_at}"
    )
    if x.digest:
        w(f"  digest {x.digest}")
    w("")

    t = x.tool_seen
    w("1. ToolSpec the model saw")
    if not t.view_recorded:
        w(f"   no ListTools recorded for model call {t.model_call_id}: the model cannot have seen this tool")
    else:
        w(
            f"   ListTools for model call {t.model_call_id} at {t.listed_at}: {len(t.tools)} tools, tool set {t.tool_set_digest}"
        )
        w(f"   shown: {', '.join(t.tools)}")
        if t.shown:
            same = (
                "validated against the same ToolSpec" if t.validated_spec_digest == t.spec_digest
                else "not validated" if not t.validated_spec_digest
                else f"VALIDATED AGAINST ANOTHER ToolSpec {t.validated_spec_digest}"
            )  # fmt: skip
            w(f"   {x.tool}: ToolSpec {t.spec_digest} ({same})")
            if t.spec_file:
                w(f"   file with these bytes now: {t.spec_file}")
        elif t.hidden_by_policy:
            w(
                f"   {x.tool} was hidden by policy (no request of this subject could be allowed): the engine denied it"
            )
        else:
            w(f"   {x.tool} was NOT in the set shown to the model")
    w("")

    r = x.raw_proposal
    w(f"2. Raw proposal bytes (proposal {r.proposal_id}, {r.length} bytes, sha256 {r.sha256}"
      f"{', matches the proposed event' if r.matches_event else ', DOES NOT match the proposed event'})")  # fmt: skip
    w(_indent(printable(r.raw)))
    w("")

    w("3. Stage outputs")
    for s in x.stages:
        arrow = (
            f"{s.from_state} -> {s.to_state}" if s.from_state and s.from_state != s.to_state else s.to_state
        )
        w(f"   #{s.seq:<3} {s.kind:<24} {s.stage:<11} {arrow}  ({s.duration_us} µs)")
        for k, v in s.output.items():
            if k == "normalized_arguments":
                continue
            w(f"         {k}: {_one_line(v) if not isinstance(v, str) else printable(v.encode())}")
    if x.normalized_arguments:
        w("   normalized arguments (canonical RFC 8785 bytes):")
        w(_indent(printable(x.normalized_arguments)))
    w("")

    a = x.authorization
    w("4. Authorization")
    if a is None:
        w("   not reached")
    else:
        w(
            f"   subject {a.subject_tenant}/{a.subject_id} asked for {', '.join(a.capabilities) or '-'} on {a.resource or '-'}"
        )
        w(f"   decision {a.effect.upper()} by {a.engine or '-'}; policies {', '.join(a.policy_ids) or '-'}"
          f"{'; engine error ' + a.error_code if a.error_code else ''}")  # fmt: skip
        for reason in a.reasons:
            w(
                f"     - {reason.get('code', '')} [{reason.get('policy_id', '')}] {printable(str(reason.get('message', '')).encode())}"
            )
        w(f"   policy revision {a.policy_revision}"
          + (f" (serving since {a.snapshot.get('at', '')}, engine {a.snapshot.get('engine', '')})" if a.snapshot else ""))  # fmt: skip
        if a.shadow:
            w(f"   shadow policies would have answered: {_one_line(a.shadow)}")
        for line in _stateful_lines(a):
            w(line)
        c = a.confirmation
        if c.status == "confirmed":
            match = "digest matches" if c.confirmed_digest == x.digest else "DIGEST DIFFERS"
            w(
                f"   confirmation: confirmed by {c.confirmed_by} at {c.at} ({match}; requested for {c.requested_digest})"
            )
        elif c.status == "rejected":
            w(
                f"   confirmation: REJECTED at {c.at} (a different digest was confirmed by {c.confirmed_by or '-'}); cancelled"
            )
        elif c.status == "expired":
            w(f"   confirmation: expired at {c.expires_at}; cancelled")
        elif c.status == "pending":
            w(f"   confirmation: pending until {c.expires_at}")
        else:
            w(f"   confirmation: {c.status.replace('_', ' ')}")
    w("")

    w("5. Attempts")
    if not x.attempts:
        w("   none")
    for at in x.attempts:
        w(f"   #{at.number} {at.attempt_id} executor {at.executor_id} started {at.started_at}"
          f" credential {at.jti} (expires {at.credential_expires_at})")  # fmt: skip
        if at.outcome:
            extra = []
            if at.failure_class:
                extra.append(at.failure_class)
            if at.http_status:
                extra.append(f"HTTP {at.http_status}")
            if at.external_resource_id:
                extra.append(f"resource {at.external_resource_id}")
            if at.cost_micros:
                extra.append(f"cost {at.cost_micros} µ")
            w(
                f"      -> {at.outcome} at {at.finished_at}{' (' + ', '.join(extra) + ')' if extra else ''}; {at.retry_reason}"
            )
        else:
            w("      -> no outcome reported (still running, or the executor never answered)")
        if at.trace_ids:
            w(f"      trace {', '.join(at.trace_ids)}")
    w("")

    c6 = x.commit
    w(f"6. Commit status: {c6.status.upper().replace('_', ' ')} (state {c6.state})")
    if c6.external_resource_id:
        w(f"   external resource {c6.external_resource_id} committed at {c6.commit_time}")
    if c6.idempotency_key:
        w(f"   idempotency key {printable(c6.idempotency_key.encode())}")
    if c6.cancel_requested_at:
        w(
            f"   cancel requested at {c6.cancel_requested_at} (after the commit boundary: stops only what follows)"
        )
    w("")

    m = x.tool_message
    if m is None:
        w("7. Tool message: none encoded")
    else:
        if m.withheld:
            w(
                "7. Tool message: recorded but WITHHELD (cancelled after the commit boundary; never given to the model)"
            )
        w(f"{'   recorded' if m.withheld else '7. Tool message'} ({len(m.message)} bytes, status {m.status}, sha256 {m.sha256}, "
          f"{'truncated, ' + str(m.remaining_bytes) + ' bytes paged' if m.truncated else 'complete'}, "
          f"{m.redactions} redaction(s), at {m.created_at})")  # fmt: skip
        w(_indent(printable(m.message)))
    w("")

    ctx = x.context
    w("8. Next context and trace")
    if ctx.source is ContextSource.RECORDED:
        w("   recorded by the runtime (fed_invocation_ids on ListTools):")
        for f in ctx.fed_into:
            same = (
                "the tool message above"
                if f.matches_message
                else f"A DIFFERENT MESSAGE (sha256 {f.message_sha256})"
            )
            w(f"   fed into model call {f.model_call_id} at {f.at} ({same})")
    elif ctx.tool_message_in_context:
        w("   INFERRED (the runtime recorded no fed_invocation_ids for it): the tool message above is")
        w("   taken to be tool data of the model calls listed after it")
        for n in ctx.next_model_calls:
            w(
                f"   next model call {n.model_call_id} listed tools at {n.listed_at} (tool set {n.tool_set_digest}; inferred)"
            )
        if not ctx.next_model_calls:
            w("   no later model call recorded in this session yet")
    else:
        w("   no tool message went back to the model")
    for rp in ctx.replays:
        w(f"   replayed to proposal {rp.proposal_id} (model call {rp.model_call_id}, trace {rp.trace_id})")
    w(f"   trace id(s): {', '.join(ctx.trace_ids)}"
      + (f"; caller span {ctx.caller_parent_span_id}" if ctx.caller_parent_span_id else ""))  # fmt: skip
    for s in x.stages:
        w(f"     #{s.seq:<3} {s.kind:<24} trace {s.trace_id} span {s.span_id}")
    for note in x.notes:
        w(f"note: {note}")
    return "\n".join(out) + "\n"


__all__ = [
    "AttemptInfo",
    "Authorization",
    "CommitStatus",
    "Confirmation",
    "ContextAndTrace",
    "ContextSource",
    "DecisionExplanation",
    "ExplainSource",
    "Explanation",
    "FedInto",
    "RawProposal",
    "SQLiteReader",
    "StageOutput",
    "ToolMessage",
    "ToolSeen",
    "decision_to_json",
    "explain",
    "explain_decision",
    "explain_or_expired",
    "ExpiredInvocation",
    "any_to_json",
    "any_to_text",
    "render_expired_text",
    "printable",
    "render_decision_text",
    "render_text",
    "spec_files_in",
    "to_json",
]
