"""The idempotency-key contract of spec 6.8, shared by every backend.

A record is found by the scope (tenant + subject), the tool name and version and the key the
runtime sent, and holds the canonical request digest ``d`` of 6.5, the owner invocation, a
state and (once the commit boundary is passed) the outcome and the tool message to replay.
On a repeated key (6.8):

1. same digest, finished -> the original result, no second side effect (``COMPLETED``);
2. same digest, still running -> ``IN_PROGRESS`` with the owner invocation id;
3. other digest -> key reuse rejected (``MISMATCH``; the record is never overwritten);
4. past the retention window -> the configured :class:`ExpiredPolicy`, never a guess.

The decision for an existing record is one pure function, :func:`decide`, which every backend
calls inside its own atomic read-modify-write (SQLite ``BEGIN IMMEDIATE``, PostgreSQL
``SELECT ... FOR UPDATE``), so both backends answer alike by construction.

Times are inputs (``now``, an aware datetime), never read from a global clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Literal, Protocol

from callgate.base.errors import CallgateError, ErrorCode

RecordState = Literal["claimed", "completed", "released"]
RECORD_STATES: tuple[RecordState, ...] = ("claimed", "completed", "released")


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """Where a record lives: scope (tenant + subject), tool name and version, and the key."""

    tenant: str
    subject: str
    tool_name: str
    tool_version: str
    key: str

    def __post_init__(self) -> None:
        for name in ("tenant", "subject", "tool_name", "tool_version", "key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"IdempotencyKey.{name} must be a non-empty string")
            if "\x00" in value:
                raise ValueError(f"IdempotencyKey.{name} must not contain NUL")


class ClaimKind(Enum):
    NEW = "new"
    """The caller owns the key now: a fresh record, a released / expired one taken over, or the
    claim this same invocation already holds (a retried claim)."""
    IN_PROGRESS = "in_progress"
    """Same digest, another invocation holds the claim and has not completed it."""
    COMPLETED = "completed"
    """Same digest, completed: replay ``record.result``; do not execute again."""
    MISMATCH = "mismatch"
    """The key was used with another digest: key reuse, rejected."""
    EXPIRED_REJECTED = "expired_rejected"
    """The record is past its retention window and the policy is :attr:`ExpiredPolicy.REJECT`."""


class ExpiredPolicy(Enum):
    """What a key whose record is past ``expires_at`` means (6.8 rule 4)."""

    REJECT = "reject"
    """Refuse the call: the runtime must pick a new key."""
    NEW = "new"
    """Treat it as a new call: the old record is replaced atomically by a fresh claim."""


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    key: IdempotencyKey
    digest: str
    """Canonical request digest of 6.5 (``sha256:...``) the key was first used with."""
    invocation_id: str
    """The owner: the invocation that claimed the key (and alone may complete / release it)."""
    state: RecordState
    outcome: str
    """Set by :meth:`IdempotencyStore.complete` (e.g. ``COMMITTED``, ``FAILED_AFTER_COMMIT``)."""
    result: bytes | None
    """The encoded tool message to replay; ``None`` until :meth:`IdempotencyStore.set_result`."""
    external_resource_id: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    """``claimed_at + retention`` while claimed; ``completed_at + retention`` once completed."""
    retention: timedelta
    """The retention given to the claim; completion restarts the window with it."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    kind: ClaimKind
    record: IdempotencyRecord | None
    """NEW: the new claim. IN_PROGRESS: the owner's record. COMPLETED: the record with the result
    to replay. MISMATCH / EXPIRED_REJECTED: the stored record *without* its result (it belongs to
    another request)."""


class IdempotencyError(CallgateError):
    """A store operation the record's state or owner does not allow (programming error of the
    caller, e.g. completing a key another invocation owns). ``metadata["reason"]`` says which:
    ``no_record``, ``not_owner``, ``wrong_state``, ``result_already_set``."""

    def __init__(self, *, reason: str, message: str) -> None:
        super().__init__(code=ErrorCode.ILLEGAL_TRANSITION, message=message, metadata={"reason": reason})
        self.reason = reason


class IdempotencyStore(Protocol):
    in_store: bool
    """True when the keys live in the event store (:mod:`callgate.store.base`) and are claimed,
    completed, released and given their result inside the transactions that write their
    invocations (one commit per answer); False for a backend of its own, which the gate and the
    executor half then call after their store writes."""

    async def start(self) -> None:
        """Connect and create the schema if missing (idempotent). Call once before use."""
        ...

    async def claim(
        self,
        key: IdempotencyKey,
        digest: str,
        invocation_id: str,
        *,
        now: datetime,
        retention: timedelta,
        expired_policy: ExpiredPolicy,
    ) -> ClaimResult:
        """Atomically look the key up and claim it when it is free (see :func:`decide`).
        Of any number of concurrent claimers of one key, in any number of processes sharing the
        backend, exactly one gets NEW. Durable when it returns."""
        ...

    async def complete(
        self,
        key: IdempotencyKey,
        invocation_id: str,
        *,
        outcome: str,
        external_resource_id: str,
        now: datetime,
    ) -> None:
        """The owner records that the commit boundary was passed. Repeating the same completion
        is a no-op; anything else raises :class:`IdempotencyError`."""
        ...

    async def set_result(
        self, key: IdempotencyKey, invocation_id: str, result: bytes, *, now: datetime
    ) -> None:
        """The owner stores the encoded tool message for replay (claimed or completed record).
        The same bytes again are a no-op; other bytes raise: a replayed result never changes."""
        ...

    async def release(self, key: IdempotencyKey, invocation_id: str, *, now: datetime) -> None:
        """The owner gives the key back before the commit boundary (denied, cancelled, failed
        before commit): the next claim, whatever its digest, gets NEW. Raises on a completed
        record; releasing twice is a no-op."""
        ...

    async def get(self, key: IdempotencyKey) -> IdempotencyRecord | None: ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------------- shared semantics


class Action(Enum):
    RETURN = "return"
    """Answer with the existing record; write nothing."""
    TAKE_OVER = "take_over"
    """Replace the existing record with a fresh claim (released, or expired under NEW)."""


@dataclass(frozen=True, slots=True)
class Decision:
    kind: ClaimKind
    action: Action


def decide(
    existing: IdempotencyRecord, digest: str, invocation_id: str, now: datetime, expired_policy: ExpiredPolicy
) -> Decision:
    """What a claim on an existing record means. Order matters and is the contract:

    1. ``released``: the earlier invocation never reached the commit boundary, so no side
       effect exists under this key; it is free for anyone (any digest), expired or not.
    2. expired (``now >= expires_at``): the policy, before any digest comparison - the old
       record is no longer evidence of anything (6.8 rule 4).
    3. other digest: MISMATCH (6.8 rule 3), whatever the state.
    4. same digest, completed: COMPLETED (rule 1).
    5. same digest, claimed by this very invocation: NEW again with the existing record (a
       claim retried after a lost answer, e.g. a dropped connection, is not its own duplicate).
    6. same digest, claimed by another invocation: IN_PROGRESS (rule 2).
    """
    if existing.state == "released":
        return Decision(ClaimKind.NEW, Action.TAKE_OVER)
    if now >= existing.expires_at:
        if expired_policy is ExpiredPolicy.NEW:
            return Decision(ClaimKind.NEW, Action.TAKE_OVER)
        return Decision(ClaimKind.EXPIRED_REJECTED, Action.RETURN)
    if existing.digest != digest:
        return Decision(ClaimKind.MISMATCH, Action.RETURN)
    if existing.state == "completed":
        return Decision(ClaimKind.COMPLETED, Action.RETURN)
    if existing.invocation_id == invocation_id:
        return Decision(ClaimKind.NEW, Action.RETURN)
    return Decision(ClaimKind.IN_PROGRESS, Action.RETURN)


async def check_claim(
    store: IdempotencyStore,
    key: IdempotencyKey,
    digest: str,
    invocation_id: str,
    *,
    now: datetime,
    retention: timedelta,
    expired_policy: ExpiredPolicy,
) -> ClaimResult:
    """What :meth:`IdempotencyStore.claim` would answer now, writing nothing (NEW: the key is
    free). The gate looks first and writes the claim with its invocation; a claim that loses a
    race between the look and the write learns it in that transaction."""
    now = check_now(now)
    check_claim_args(digest, invocation_id, retention)
    existing = await store.get(key)
    fresh = fresh_claim(key, digest, invocation_id, now, retention)
    if existing is None:
        return ClaimResult(ClaimKind.NEW, fresh)
    d = decide(existing, digest, invocation_id, now, expired_policy)
    if d.action is Action.TAKE_OVER:
        return ClaimResult(ClaimKind.NEW, fresh)
    return answer(d, existing)


def fresh_claim(
    key: IdempotencyKey, digest: str, invocation_id: str, now: datetime, retention: timedelta
) -> IdempotencyRecord:
    return IdempotencyRecord(
        key=key, digest=digest, invocation_id=invocation_id, state="claimed", outcome="", result=None,
        external_resource_id="", created_at=now, updated_at=now, expires_at=now + retention, retention=retention,
    )  # fmt: skip


def answer(decision: Decision, existing: IdempotencyRecord) -> ClaimResult:
    """The :class:`ClaimResult` for a RETURN decision (the result bytes only for COMPLETED)."""
    if decision.kind in (ClaimKind.COMPLETED, ClaimKind.IN_PROGRESS, ClaimKind.NEW):
        return ClaimResult(decision.kind, existing)
    return ClaimResult(decision.kind, replace(existing, result=None))


def completed(
    existing: IdempotencyRecord | None,
    invocation_id: str,
    outcome: str,
    external_resource_id: str,
    now: datetime,
) -> IdempotencyRecord | None:
    """The record after ``complete``; ``None`` when it is a repeat (nothing to write)."""
    rec = _owned(existing, invocation_id, "complete")
    if rec.state == "completed":
        if rec.outcome == outcome and rec.external_resource_id == external_resource_id:
            return None
        raise IdempotencyError(
            reason="wrong_state", message="the key was already completed with another outcome"
        )
    if rec.state != "claimed":
        raise IdempotencyError(reason="wrong_state", message=f"cannot complete a {rec.state} key")
    return replace(
        rec, state="completed", outcome=outcome, external_resource_id=external_resource_id,
        updated_at=now, expires_at=now + rec.retention,
    )  # fmt: skip


def with_result(
    existing: IdempotencyRecord | None, invocation_id: str, result: bytes, now: datetime
) -> IdempotencyRecord | None:
    """The record after ``set_result``; ``None`` when the same bytes are already stored."""
    rec = _owned(existing, invocation_id, "set the result of")
    if rec.state == "released":
        raise IdempotencyError(reason="wrong_state", message="cannot set the result of a released key")
    if rec.result is not None:
        if rec.result == result:
            return None
        raise IdempotencyError(reason="result_already_set", message="the replay result was already stored")
    return replace(rec, result=bytes(result), updated_at=now)


def released(
    existing: IdempotencyRecord | None, invocation_id: str, now: datetime
) -> IdempotencyRecord | None:
    """The record after ``release``; ``None`` when it is already released."""
    rec = _owned(existing, invocation_id, "release")
    if rec.state == "released":
        return None
    if rec.state != "claimed":
        raise IdempotencyError(reason="wrong_state", message="a completed key cannot be released")
    return replace(rec, state="released", updated_at=now)


def _owned(existing: IdempotencyRecord | None, invocation_id: str, what: str) -> IdempotencyRecord:
    if existing is None:
        raise IdempotencyError(reason="no_record", message=f"cannot {what} a key that was never claimed")
    if existing.invocation_id != invocation_id:
        raise IdempotencyError(
            reason="not_owner", message=f"only the invocation that claimed the key may {what} it"
        )
    return existing


def check_now(now: datetime) -> datetime:
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
    return now.astimezone(UTC)


def check_claim_args(digest: str, invocation_id: str, retention: timedelta) -> None:
    if not digest:
        raise ValueError("digest must be non-empty")
    if not invocation_id:
        raise ValueError("invocation_id must be non-empty")
    if retention <= timedelta(0):
        raise ValueError("retention must be positive")


def check_outcome(outcome: str) -> None:
    if not outcome:
        raise ValueError("outcome must be non-empty (e.g. COMMITTED)")


Change = Callable[["IdempotencyRecord | None"], "IdempotencyRecord | None"]
"""A change to the record of one key: the new record to write, or None to write nothing."""


class LockedRecordChanges:
    """``complete``, ``set_result`` and ``release`` of :class:`IdempotencyStore`, written once over
    one primitive a backend provides: :meth:`_change` applies a change to the key's record under
    its row lock, in one transaction."""

    async def _change(self, key: IdempotencyKey, change: Change) -> None:
        raise NotImplementedError

    async def complete(
        self,
        key: IdempotencyKey,
        invocation_id: str,
        *,
        outcome: str,
        external_resource_id: str,
        now: datetime,
    ) -> None:
        now = check_now(now)
        check_outcome(outcome)
        await self._change(key, lambda rec: completed(rec, invocation_id, outcome, external_resource_id, now))

    async def set_result(
        self, key: IdempotencyKey, invocation_id: str, result: bytes, *, now: datetime
    ) -> None:
        now = check_now(now)
        await self._change(key, lambda rec: with_result(rec, invocation_id, result, now))

    async def release(self, key: IdempotencyKey, invocation_id: str, *, now: datetime) -> None:
        now = check_now(now)
        await self._change(key, lambda rec: released(rec, invocation_id, now))
