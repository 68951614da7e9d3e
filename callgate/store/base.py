"""The store contract: sessions, tool views, invocations and their append-only events.

Every method is async and durable when it returns: the gate answers an RPC only after the
events describing it are stored (spec 6.13). ``transition`` is a compare-and-set on the state so
that two racing callers (two ``Confirm`` calls, ``Cancel`` vs ``Confirm``) cannot both win.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from callgate.base.events import EventKind
from callgate.base.states import State
from callgate.store.idempotency.base import (
    ClaimResult,
    ExpiredPolicy,
    IdempotencyKey,
    IdempotencyRecord,
    IdempotencyStore,
    completed,
    released,
    with_result,
)

PAST_DEADLINE_STATES: Final = {False: "('AUTHORIZED', 'PREPARED')", True: "('EXECUTING')"}
"""SQL state lists of :meth:`Store.list_past_deadline`, by its ``executing`` flag (both stores)."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    tenant: str
    subject: str
    timezone: str
    locale: str
    budgets: Mapping[str, int]
    tool_allowlist: tuple[str, ...]
    opened_at: str

    def allows(self, key: str, name: str) -> bool:
        """Whether the allowlist admits the tool ``name@version`` = ``key`` (empty: every tool)."""
        return not self.tool_allowlist or key in self.tool_allowlist or name in self.tool_allowlist


@dataclass(frozen=True, slots=True)
class ToolViewRecord:
    """Which ToolSpecs were shown to the model for one model call (6.13 question 1)."""

    session_id: str
    model_call_id: str
    tools: tuple[str, ...]
    """``name@version`` keys shown."""
    spec_digests: Mapping[str, str]
    """Digest of each key shown; with :data:`HIDDEN_BY_POLICY` as a key when allowlisted tools
    were left out by policy (its value: the snapshot revision of the listing)."""
    tool_set_digest: str
    """Over the keys shown and their digests (what the model saw)."""
    created_at: str
    tools_json: str = field(default="", compare=False, repr=False)
    """``tools`` as the stored JSON text, when its owner made it once for many views (the shown
    set of ``propose/sessions.py``: one per snapshot and allowlist); empty: the store makes it."""
    spec_digests_json: str = field(default="", compare=False, repr=False)
    """``spec_digests`` as the stored JSON text, likewise."""

    @property
    def hid_by_policy(self) -> bool:
        """Whether allowlisted tools were left out of ``tools`` because no request of the subject
        could be allowed or confirmed (``policy.list_by_policy``, docs/POLICIES.md): a Propose
        for one of them runs the chain and the engine's deny answers it."""
        return HIDDEN_BY_POLICY in self.spec_digests


HIDDEN_BY_POLICY = "hidden_by_policy"
"""The mark in a view's ``spec_digests`` (no ``@``: never a tool's ``name@version``)."""


@dataclass(frozen=True, slots=True)
class InvocationRecord:
    invocation_id: str
    session_id: str
    model_call_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    tenant: str
    subject: str
    state: State
    raw_arguments: bytes
    digest: str = ""
    normalized_arguments: bytes = b""
    decision: Mapping[str, Any] | None = None
    rejection: Mapping[str, Any] | None = None
    idempotency_key: str = ""
    deadline: str = ""
    confirmation_expires_at: str = ""
    policy_revision: str = ""
    created_at: str = ""
    updated_at: str = ""
    attempts: int = 0
    """Attempts begun so far (6.9: every attempt is recorded)."""
    external_resource_id: str = ""
    commit_time: str = ""
    cancel_requested_at: str = ""
    """Set when Cancel arrived after the commit boundary: the record stays COMMITTED but nothing
    further (no tool message) is produced (6.7, 6.14 row 9)."""


@dataclass(frozen=True, slots=True)
class EventRecord:
    event_id: str
    invocation_id: str
    seq: int
    at: str
    kind: str
    from_state: State | None
    to_state: State
    trace_id: str
    span_id: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    attempt_id: str
    invocation_id: str
    number: int
    executor_id: str
    jti: str
    started_at: str
    credential_expires_at: str
    outcome: str = ""
    failure_class: str = ""
    finished_at: str = ""
    external_resource_id: str = ""
    http_status: int = 0
    cost_micros: int = 0
    retry_reason: str = ""
    retry_after: str = ""
    """When a retry was advised: the earliest time (RFC 3339) the next attempt may start."""


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """The encoded tool message of an invocation and, when truncated, the rest for paging."""

    invocation_id: str
    status: str
    message: bytes
    truncated: bool
    remaining: bytes
    page_token: str
    redactions: int
    created_at: str
    nonce: str = ""
    """Boundary nonce of the message; continuation pages reuse it."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Cumulative consumption of one session (6.11)."""

    model_calls: int = 0
    tool_calls: int = 0
    result_bytes: int = 0
    cost_micros: int = 0


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One answer of the generic decision point (``Authorizer.Authorize``), stored before the
    answer. The request context is kept as a digest (its values may hold secrets) and its
    top-level key names; the decision is ``decision_to_dict`` of the engine's answer."""

    decision_id: str
    at: str
    tenant: str
    subject: str
    capability: str
    resource: str
    context_digest: str
    """``sha256:`` of the RFC 8785 canonical bytes of the request context (``""`` = no context)."""
    context_keys: tuple[str, ...]
    decision: Mapping[str, Any]
    policy_revision: str
    trace_id: str
    span_id: str
    parent_span_id: str = ""
    """The caller's span (its ``traceparent``), ``""`` when it sent none."""


@dataclass(frozen=True, slots=True)
class FedResultRecord:
    """A tool message the runtime put into a model call's context (6.13 question 8), told to
    callgate on that model call's ``ListTools``."""

    invocation_id: str
    session_id: str
    model_call_id: str
    at: str
    message_sha256: str
    """sha256 of the tool message bytes that had been handed out for the invocation."""


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """The idempotency claim (6.8) a ``Propose`` writes together with its invocation."""

    key: IdempotencyKey
    digest: str
    retention: timedelta
    expired_policy: ExpiredPolicy
    now: datetime


@dataclass(frozen=True, slots=True)
class Move:
    """One compare-and-set move of :meth:`Store.transition_many`: the invocation as it will be,
    the state it must still be in, and the events that record the move."""

    record: InvocationRecord
    expected: State
    events: Sequence[EventRecord]


# How a key follows its invocation, in the transaction that moves the invocation (every backend).
KEY_COMPLETES: frozenset[State] = frozenset({State.COMMITTED, State.FAILED_AFTER_COMMIT, State.OBSERVED})
"""States past the commit boundary: the key is completed (repeats replay the invocation)."""
KEY_RELEASES: frozenset[State] = frozenset(
    {
        State.PARSE_REJECTED,
        State.VALIDATION_REJECTED,
        State.AUTHORIZATION_REJECTED,
        State.CANCELLED_BEFORE_COMMIT,
        State.FAILED_BEFORE_COMMIT,
    }
)
"""States that end before the commit boundary: the key is released (free for any digest)."""


def key_of(record: InvocationRecord) -> IdempotencyKey:
    """The 6.8 lookup key of an invocation: scope (tenant + subject), tool name, version, key."""
    return IdempotencyKey(
        record.tenant, record.subject, record.tool_name, record.tool_version, record.idempotency_key
    )


def key_follows(
    rec: IdempotencyRecord | None, record: InvocationRecord, message: bytes | None = None
) -> IdempotencyRecord | None:
    """The key record after ``record`` (the invocation as just written) moved: completed past
    the commit boundary, released when it ended before it, given ``message`` (the tool message
    of an OBSERVED invocation) to replay. None: nothing to write (no record, another
    invocation's, or already so)."""
    if rec is None or rec.invocation_id != record.invocation_id:
        return None
    now = datetime.fromisoformat(record.updated_at) if record.updated_at else datetime.now(UTC)
    new = rec
    if rec.state == "claimed" and record.state in KEY_COMPLETES:
        outcome = State.COMMITTED.value if record.state is State.OBSERVED else record.state.value
        new = completed(rec, record.invocation_id, outcome, record.external_resource_id, now) or rec
    elif rec.state == "claimed" and record.state in KEY_RELEASES:
        new = released(rec, record.invocation_id, now) or rec
    if message is not None and new.state == "completed" and new.result is None:
        new = with_result(new, record.invocation_id, message, now) or new
    return None if new == rec else new


ARGUMENTS_KEY: Final = "normalized_arguments"
"""The key of the ``normalized`` event's data that names the normalized arguments. The
arguments are stored once, in the invocation (``InvocationRecord.normalized_arguments``): the
event is written without them and every read of the events puts them back from the invocation
(:func:`with_arguments`), so the trail shows the same facts (docs/BENCHMARKS.md, issue 15 A5).
Events written before that carry their own copy, which is read as it is."""


def needs_arguments(e: EventRecord) -> bool:
    """Whether ``e`` is a ``normalized`` event stored without its arguments."""
    return e.kind == EventKind.NORMALIZED.value and ARGUMENTS_KEY not in e.data


def with_arguments(events: Sequence[EventRecord], normalized_arguments: bytes) -> list[EventRecord]:
    """``events`` as the trail recorded them: a ``normalized`` event stored without its
    arguments gets the invocation's (the RFC 8785 bytes as text, as the event was built)."""
    if not normalized_arguments:
        return list(events)
    text = normalized_arguments.decode("utf-8")
    return [replace(e, data={**e.data, ARGUMENTS_KEY: text}) if needs_arguments(e) else e for e in events]


class Store(Protocol):
    """One answer, one transaction: every write below is atomic with the events it carries and,
    for an invocation with an idempotency key kept in this store (:meth:`keys`), with its key:
    ``create_invocation`` claims it (``claim``), and a write that moves the invocation to
    COMMITTED / FAILED_AFTER_COMMIT completes it, to a state ending before the commit boundary
    (denied, cancelled, failed before commit) releases it, and ``put_result`` of an OBSERVED
    invocation stores its tool message for replays. A crash leaves all of them or none."""

    def keys(self) -> IdempotencyStore:
        """The idempotency keys kept in this store (``in_store``: they follow its transactions)."""
        ...

    async def put_session(self, session: SessionRecord) -> None: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def put_tool_view(self, view: ToolViewRecord) -> None: ...

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None: ...

    async def create_invocation(
        self,
        record: InvocationRecord,
        events: Sequence[EventRecord],
        usage: Mapping[str, Usage] | None = None,
        claim: KeyClaim | None = None,
    ) -> ClaimResult | None:
        """Insert a new invocation with its first events, atomically; ``usage`` (session id ->
        increment) is added in the same transaction (budget counters ride along with the call's
        own write instead of costing a transaction of their own). With ``claim``, the key is
        claimed for ``record`` in that transaction first: if the claim is not NEW (another
        invocation got the key since the gate looked) nothing is written and the claim's answer
        is returned; None means everything was written."""
        ...

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        """Replace the invocation row with ``record`` and append ``events`` iff its stored state
        is still ``expected``. Returns False (and writes nothing) when another writer won."""
        ...

    async def transition_many(self, moves: Sequence[Move]) -> list[bool]:
        """:meth:`transition` for each move, all in one transaction (a sweep ending many
        invocations writes once, not once per invocation). Returns, per move, whether it was
        written: a move whose invocation is no longer in its ``expected`` state is skipped and
        the others are still written. A failure of the store fails them all (nothing written)."""
        ...

    async def append_events(self, events: Sequence[EventRecord]) -> None:
        """Append events to existing invocations without changing them (seq 0 = next)."""
        ...

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None: ...

    async def list_events(self, invocation_id: str) -> list[EventRecord]: ...

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        """Invocations parked for confirmation (state AUTHORIZED with a pending confirmation)."""
        ...

    async def begin_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        """CAS the invocation (``expected`` state and attempt count ``record.attempts - 1``),
        insert the attempt and append events, atomically. False if another writer won. Durable
        against power loss when it returns, with every record before it (a barrier, spec 6.7):
        the credential is handed out only after."""
        ...

    async def finish_attempt(
        self, record: InvocationRecord, expected: State, attempt: AttemptRecord, events: Sequence[EventRecord]
    ) -> bool:
        """CAS the invocation and the unfinished attempt, record the outcome, append events."""
        ...

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None: ...

    async def list_attempts(self, invocation_id: str) -> list[AttemptRecord]: ...

    async def put_result(
        self, record: InvocationRecord, expected: State, result: ResultRecord, events: Sequence[EventRecord]
    ) -> bool:
        """Store the encoded result once (CAS on the invocation state) with its events."""
        ...

    async def get_result(self, invocation_id: str) -> ResultRecord | None: ...

    async def add_usage(self, session_id: str, delta: Usage) -> Usage:
        """Atomically add ``delta`` to the session's usage and return the new totals."""
        ...

    async def redeem_once(self, attempt_id: str, secret_name: str, at: str) -> bool:
        """Record that a secret was released for an attempt; False if it already was."""
        ...

    async def record_snapshot(self, revision: str, at: str, detail: Mapping[str, Any]) -> None:
        """Append a record that a policy snapshot started serving (append-only)."""
        ...

    async def close(self) -> None: ...

    async def barrier(self) -> None:
        """Make every record committed before this call durable against power loss (spec 6.7,
        6.8: before anything can run). Raises ``store_unavailable`` if it cannot; a store whose
        every commit is already durable returns at once."""
        ...

    async def put_tool_view_fed(self, view: ToolViewRecord, fed: Sequence[FedResultRecord]) -> None:
        """Record a tool view and the tool messages fed into that model call, in one transaction
        (a repeated pair is kept once)."""
        ...

    async def list_fed(self, invocation_id: str) -> list[FedResultRecord]:
        """The model calls the invocation's tool message was fed into, in recording order."""
        ...

    async def record_decision(self, record: DecisionRecord, *, durable: bool = False) -> None:
        """Append one ``Authorize`` decision (append-only); committed when it returns. With
        ``durable`` it is also behind a :meth:`barrier` when it returns (one writer round trip:
        the gate asks it for an allow, spec 6.7)."""
        ...

    async def append_to_current(
        self, invocation_id: str, events_of: Callable[[InvocationRecord], Sequence[EventRecord]]
    ) -> InvocationRecord | None:
        """In one transaction: read the invocation as it is now and append ``events_of(it)``
        (numbered after its last event); return what was read, or None for an unknown id. A
        state change that commits meanwhile comes wholly before or wholly after (an idempotent
        replay never reports a state the trail has already left)."""
        ...

    async def get_decision(self, decision_id: str) -> DecisionRecord | None: ...
    async def list_past_deadline(
        self, now: datetime, limit: int, *, executing: bool = False
    ) -> list[InvocationRecord]:
        """Invocations not yet executing (AUTHORIZED or PREPARED; with ``executing``, those in
        EXECUTING instead) whose ``deadline`` is at or before ``now``, earliest deadline first, at
        most ``limit``: what the deadline sweep ends (spec 6.2, 6.7). Records without a deadline
        are never returned."""
        ...

    async def list_pending_page(
        self, tenant: str, after: tuple[str, str] | None, limit: int
    ) -> list[InvocationRecord]:
        """One page of :meth:`list_pending` for ``tenant``: at most ``limit`` records in the
        order ``(created_at, invocation_id)``, starting after the key ``after`` (exclusive;
        None: from the start). Keyset paging: a page does not shift when earlier records are
        confirmed or expire."""
        ...
