"""Past authorization (spec 6.7 - 6.12): attempts, scoped credentials, the commit boundary,
retries, result encoding and secret release.

    PREPARED --BeginAttempt--> EXECUTING (attempt n, credential for exactly this invocation)
    EXECUTING --ReportOutcome COMMITTED--> COMMITTED --EncodeResult ok--> OBSERVED
    EXECUTING --FAILED_BEFORE_COMMIT, retry advised--> EXECUTING (next BeginAttempt after backoff)
    EXECUTING --FAILED_BEFORE_COMMIT, no retry--> FAILED_BEFORE_COMMIT (idempotency key released)
    EXECUTING --timeout / lost answer on a write--> OUTCOME_UNKNOWN (never back to PREPARED)
    OUTCOME_UNKNOWN --same-key retry or status query--> COMMITTED | FAILED_BEFORE_COMMIT
    OUTCOME_UNKNOWN --Reconcile (what a status query found)--> COMMITTED | FAILED_BEFORE_COMMIT
                                                               | FAILED_AFTER_COMMIT

An executor sees only the canonical normalized arguments and a credential bound to their digest;
secrets are released to it by ``RedeemSecret`` and never pass through the agent's listener.

Every string an executor hands in (external resource ids, commit times, outcome messages, the
reconciliation fields) passes the same :class:`~callgate.execute.redaction.Redactor` the result
encoder uses *before* it is stored, so every later exit (agent answers, the decision log, traces,
``explain``, the store's tables and the idempotency record) only ever sees the redacted text. An
``executor_id`` is an identity the credential is bound to, so it is not rewritten: one the
redactor would change is refused (docs/RESULT-ENCODING.md, "Redaction at every exit").
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import random
import secrets as _secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import (
    CallgateError,
    ErrorCode,
    Violation,
    attempt_not_allowed,
    attempt_not_found,
    credential_invalid,
    deadline_exceeded,
    illegal_transition,
    invalid_request,
    invocation_not_found,
    output_after_cancel,
    reconcile_conflict,
    reconcile_not_allowed,
    result_not_available,
    result_schema_invalid,
    secret_already_redeemed,
    terminal_state,
    unknown_tool_version,
)
from callgate.base.events import EventKind
from callgate.base.meters import RESULT_LABELS_KEY
from callgate.base.model import MAX_RECORDED_VIOLATIONS, OutputCheck, OutputVerdict
from callgate.base.states import State
from callgate.base.trace import TraceContext
from callgate.config import Config
from callgate.credentials.issuer import CredentialIssuer, Grant, KeyRing, MintedCredential
from callgate.credentials.verifier import CredentialError, CredentialVerifier
from callgate.execute.encode import EncodedResult as EncodedMessage
from callgate.execute.encode import (
    EncodeInput,
    encode_refusal,
    encode_result,
    limits_from_spec,
    neutralize,
    page,
)
from callgate.execute.expiry import judge
from callgate.execute.partcheck import PartData, PartVerdict, check_parts, part_bytes
from callgate.execute.redaction import Redactor
from callgate.execute.retry import Advice, FailureClass, Reliability, RetryPolicy, advise, reliability
from callgate.execute.secrets import SecretStore
from callgate.execute.usage import UsageMeter
from callgate.policy.serving import ServingSnapshot
from callgate.policy.toolspecs import CompiledTool
from callgate.store.base import AttemptRecord, InvocationRecord, ResultRecord, Store, Usage
from callgate.store.labels import OBSERVING
from callgate.store.ownership import owned_invocation
from callgate.store.trail import Trail, move

if TYPE_CHECKING:  # built by the composition root and handed in; the pipeline above is not imported
    from callgate.propose.idempotency import IdempotencyFlow


class Outcome(str, Enum):
    """What an executor reports for one attempt (6.7): the commit boundary as it saw it."""

    COMMITTED = "COMMITTED"
    FAILED_BEFORE_COMMIT = "FAILED_BEFORE_COMMIT"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    FAILED_AFTER_COMMIT = "FAILED_AFTER_COMMIT"


OUTCOMES = tuple(Outcome)

_OUTCOME_EVENT = {
    State.COMMITTED: EventKind.COMMITTED,
    State.FAILED_AFTER_COMMIT: EventKind.FAILED_AFTER_COMMIT,
    State.OUTCOME_UNKNOWN: EventKind.OUTCOME_UNKNOWN,
    State.FAILED_BEFORE_COMMIT: EventKind.FAILED_BEFORE_COMMIT,
}
"""The event of a reported outcome by the state it leads to; any other: ``attempt_failed``."""

MAX_MESSAGE_CHARS = 1024
"""An executor's free-text ``message`` is kept up to this many characters (after redaction)."""


class Finding(str, Enum):
    """What a status query of the external system found for an OUTCOME_UNKNOWN invocation."""

    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    FAILED_AFTER_COMMIT = "failed_after_commit"


_FINDING_STATE = {
    Finding.COMMITTED: State.COMMITTED,
    Finding.NOT_COMMITTED: State.FAILED_BEFORE_COMMIT,
    Finding.FAILED_AFTER_COMMIT: State.FAILED_AFTER_COMMIT,
}
_FINDING_OUTCOME = {
    Finding.COMMITTED: Outcome.COMMITTED,
    Finding.NOT_COMMITTED: Outcome.FAILED_BEFORE_COMMIT,
    Finding.FAILED_AFTER_COMMIT: Outcome.FAILED_AFTER_COMMIT,
}


@dataclass(frozen=True, slots=True)
class StartedAttempt:
    attempt: AttemptRecord
    credential: MintedCredential
    invocation: InvocationRecord


@dataclass(frozen=True, slots=True)
class ReportedOutcome:
    invocation: InvocationRecord
    advice: Advice


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """What ``EncodeResult`` recorded."""

    result: ResultRecord
    invocation: InvocationRecord
    """The invocation after the call (OBSERVED after an ok result that goes to the model)."""
    withheld: bool
    """Cancelled after the commit boundary: the message is recorded for the trail and never
    handed out (6.7, 6.12); the state does not become OBSERVED."""
    output: OutputCheck = OutputCheck(OutputVerdict.UNCHECKED)
    """The check against the ToolSpec's ``output_schema``; refused: the message is a
    ``result_schema_invalid`` error instead of the result."""
    structured: bytes = b""
    """The validated result as compact UTF-8 JSON (cleaned and redacted like the message, without
    boundaries) when the ToolSpec has an ``output_schema``, the result conforms and the message
    is complete (not truncated, not withheld); empty otherwise."""
    part_verdicts: tuple[PartVerdict, ...] = ()
    """One per part sent with the result (:mod:`callgate.execute.partcheck`), in order."""


MAX_POINTER_CHARS = 256
"""A recorded violation pointer is cut to this many characters (after redaction)."""


WITHHELD_MESSAGE = "cancelled after the commit boundary; the result is recorded but withheld"
"""The ``output_after_cancel`` message of ``GetResult`` when a result exists but is withheld."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    invocation: InvocationRecord
    already_recorded: bool
    """The same finding had been recorded before: nothing was written."""


@dataclass(frozen=True, slots=True)
class Page:
    message: bytes
    truncated: bool
    next_page_token: str


def _name_result_labels(data: dict[str, Any], tool: CompiledTool | None, before: State, after: State) -> None:
    """Name the tool's result labels in the event of a move that makes its result exist (into
    COMMITTED, OUTCOME_UNKNOWN or FAILED_AFTER_COMMIT from before them): the store records them
    for the session in the same transaction (:mod:`callgate.store.labels`). A tool no longer
    served names none (its labels are not known any more)."""
    if tool is not None and tool.labels and after in OBSERVING and before not in OBSERVING:
        data[RESULT_LABELS_KEY] = list(tool.labels)


def _claims_unverified(token: str) -> dict[str, Any]:
    """Read the payload only to find which attempt a token claims to be for. Everything is
    verified afterwards against that attempt; nothing here is trusted."""
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise credential_invalid("malformed", "malformed credential") from None
    if not isinstance(data, dict):
        raise credential_invalid("malformed", "malformed credential")
    return data


def _attempt_id_of(claims: dict[str, Any]) -> str:
    for detail in claims.get("authorization_details") or []:
        if isinstance(detail, dict) and isinstance(detail.get("attempt_id"), str):
            return str(detail["attempt_id"])
    raise credential_invalid("malformed", "credential names no attempt")


EXECUTING_SWEEP_BATCH = 500
"""EXECUTING invocations past their deadline that one sweep looks at (the oldest deadlines)."""


class _PerSecretUse:
    """Replay cache for the sidecar's own verification: always first use (see redeem_once)."""

    def first_use(self, jti: str, *, keep_until: float, now: float) -> bool:
        return True


class Execution:
    """The executor-facing half of the gate."""

    def __init__(
        self,
        *,
        config: Config,
        serving: ServingSnapshot,
        store: Store,
        clock: Clock,
        keyring: KeyRing,
        keys: IdempotencyFlow,
        usage: UsageMeter,
        secrets: SecretStore,
        redactor: Redactor,
        rng: random.Random | None = None,
    ) -> None:
        self._cfg = config
        self._serving = serving
        self._usage = usage
        self._store = store
        self._clock = clock
        self._keyring = keyring
        self._issuer = CredentialIssuer(
            keyring,
            config.credentials.issuer,
            clock,
            default_ttl_s=config.credentials.ttl_seconds,
            max_ttl_s=config.credentials.max_ttl_seconds,
        )
        # The sidecar's own check for RedeemSecret: single use is per (attempt, secret) in the
        # store, not per jti (one attempt may redeem several secrets, each once).
        self._verifier = CredentialVerifier(
            keyring.jwks,
            issuer=config.credentials.issuer,
            audience=None,
            clock=clock,
            replay_cache=_PerSecretUse(),
        )
        self._keys = keys
        self._secrets = secrets
        self._redactor = redactor
        self._rng = rng or random.Random(_secrets.randbits(64))
        self._nonce_key = os.urandom(32)  # result boundary nonces cannot be predicted from outside

    # ------------------------------------------------------------------ helpers
    def _tool(self, inv: InvocationRecord) -> CompiledTool:
        tool = self._serving.current.tools.get(inv.tool_name, inv.tool_version)
        if tool is None:
            raise unknown_tool_version(
                f"{inv.tool_name}@{inv.tool_version} is no longer in the policy snapshot"
            )
        return tool

    async def invocation(self, invocation_id: str) -> InvocationRecord:
        return await self._inv(invocation_id)

    async def _inv(self, invocation_id: str) -> InvocationRecord:
        inv = await self._store.get_invocation(invocation_id)
        if inv is None:
            raise invocation_not_found("unknown invocation_id")
        return inv

    def _redact(self, text: str, limit: int = 0) -> tuple[str, int]:
        """``text`` through the result encoder's redactor (then cut to ``limit`` characters when
        given: cutting after redaction never leaves part of a secret behind) and the count."""
        if not text:
            return text, 0
        clean, count = self._redactor.redact(text)
        return (clean[:limit] if limit else clean), count

    def _check_executor_id(self, executor_id: str) -> None:
        """An executor id is bound into credentials and cannot be rewritten: refuse one that the
        redactor would change (the message does not repeat it)."""
        if executor_id and self._redactor.might_contain(executor_id):
            raise invalid_request("executor_id contains what looks like a secret")
        allowed = self._cfg.credentials.executors
        if executor_id and allowed and executor_id not in allowed:
            raise attempt_not_allowed("executor_id is not a configured executor")

    def jwks(self) -> dict[str, Any]:
        self._keyring.maybe_rotate(self._clock.now())
        return self._keyring.jwks()

    # ------------------------------------------------------------------ attempts
    @staticmethod
    def _check_backoff(last: AttemptRecord, now: datetime) -> None:
        """The sidecar applies the backoff it advised (6.9): no retry before ``retry_after``."""
        if last.retry_after and now < datetime.fromisoformat(last.retry_after):
            wait_ms = int((datetime.fromisoformat(last.retry_after) - now).total_seconds() * 1000) + 1
            raise attempt_not_allowed(
                f"retry too early: back off {wait_ms} ms more (6.9)", retry_after=last.retry_after
            )

    async def begin_attempt(
        self, invocation_id: str, executor_id: str, trace: TraceContext
    ) -> StartedAttempt:
        if not executor_id:
            raise invalid_request("executor_id is required")
        self._check_executor_id(executor_id)
        inv = await self._inv(invocation_id)
        tool = self._tool(inv)
        now = self._clock.now()
        if inv.cancel_requested_at:
            raise attempt_not_allowed("the invocation was cancelled")
        if inv.deadline and now >= datetime.fromisoformat(inv.deadline):
            raise deadline_exceeded("the invocation deadline has passed")
        attempts = await self._store.list_attempts(invocation_id)
        last = attempts[-1] if attempts else None
        rel = reliability(
            tool.spec.side_effect_class, tool.spec.idempotency_supported, bool(inv.idempotency_key)
        )
        if inv.state is State.PREPARED:
            target = State.EXECUTING
        elif inv.state is State.EXECUTING and last is not None and last.outcome:
            if not last.retry_reason.startswith("retry:"):
                raise attempt_not_allowed("the last attempt may not be retried")
            self._check_backoff(last, now)
            target = State.EXECUTING
        elif inv.state is State.OUTCOME_UNKNOWN and rel is not Reliability.WRITE_UNSAFE:
            if last is not None:
                self._check_backoff(last, now)
            target = State.OUTCOME_UNKNOWN  # same-key retry / status query; the state stays unknown
        else:
            detail = (
                "an attempt is still running" if inv.state is State.EXECUTING else f"state {inv.state.value}"
            )
            raise attempt_not_allowed(f"no attempt may start: {detail}")
        number = inv.attempts + 1
        attempt_id = f"att_{_secrets.token_hex(12)}"
        resource = tool.resource.render(json.loads(inv.normalized_arguments))
        credential = self._issuer.mint(
            Grant(
                invocation_id=inv.invocation_id,
                attempt_id=attempt_id,
                tenant=inv.tenant,
                subject=inv.subject,
                audience=executor_id,
                tool_name=inv.tool_name,
                tool_version=inv.tool_version,
                capabilities=tool.spec.required_capabilities,
                resource=resource,
                digest=inv.digest,
                idempotency_key=inv.idempotency_key,
                deadline=datetime.fromisoformat(inv.deadline),
                trace_id=trace.trace_id,
            )
        )
        at = rfc3339(now)
        attempt = AttemptRecord(
            attempt_id=attempt_id,
            invocation_id=inv.invocation_id,
            number=number,
            executor_id=executor_id,
            jti=credential.jti,
            started_at=at,
            credential_expires_at=rfc3339(credential.expires_at),
        )
        trail = Trail.on(inv, trace, at)
        trail.add(
            EventKind.ATTEMPT_STARTED,
            target,
            {
                "attempt_id": attempt_id,
                "attempt": number,
                "executor_id": executor_id,
                "credential": {
                    "jti": credential.jti,
                    "kid": credential.kid,
                    "expires_at": rfc3339(credential.expires_at),
                },
                "idempotency_key": inv.idempotency_key,
            },
        )
        new = replace(inv, state=target, attempts=number, updated_at=at)
        if not await self._store.begin_attempt(new, inv.state, attempt, trail.events):
            raise attempt_not_allowed("another attempt started concurrently")
        return StartedAttempt(attempt, credential, new)

    async def report_outcome(
        self,
        attempt_id: str,
        reported: str,
        *,
        failure_class: str = "",
        external_resource_id: str = "",
        commit_time: str = "",
        http_status: int = 0,
        cost_micros: int = 0,
        message: str = "",
        trace: TraceContext,
    ) -> ReportedOutcome:
        try:
            outcome = Outcome(reported)
        except ValueError:
            raise invalid_request(f"outcome must be one of {', '.join(OUTCOMES)}") from None
        # Redacted before anything is stored or compared: every later exit sees only this.
        external_resource_id, n_id = self._redact(external_resource_id)
        commit_time, n_time = self._redact(commit_time)
        message, n_msg = self._redact(message, MAX_MESSAGE_CHARS)
        redactions = n_id + n_time + n_msg
        attempt = await self._store.get_attempt(attempt_id)
        if attempt is None:
            raise attempt_not_found("unknown attempt_id")
        if attempt.outcome:
            raise attempt_not_allowed("this attempt already reported its outcome")
        inv = await self._inv(attempt.invocation_id)
        tool = self._tool(inv)
        now = self._clock.now()
        at = rfc3339(now)
        rel = reliability(
            tool.spec.side_effect_class, tool.spec.idempotency_supported, bool(inv.idempotency_key)
        )
        advice = Advice(False, "no_failure")
        if outcome is Outcome.COMMITTED:
            if not external_resource_id and tool.spec.side_effect_class.is_write:
                raise invalid_request("COMMITTED needs external_resource_id")
            target = State.COMMITTED
        elif outcome is Outcome.FAILED_AFTER_COMMIT:
            target = State.FAILED_AFTER_COMMIT
        else:
            fc = (
                FailureClass(failure_class)
                if failure_class
                else (
                    FailureClass.TIMEOUT if outcome is Outcome.OUTCOME_UNKNOWN else FailureClass.NOT_REACHED
                )
            )
            if outcome is Outcome.OUTCOME_UNKNOWN and fc is not FailureClass.TIMEOUT:
                fc = FailureClass.TIMEOUT
            rp = tool.spec.retry_policy
            policy = RetryPolicy(
                max_attempts=int(rp.get("max_attempts", 1)),
                initial_backoff_ms=int(rp.get("initial_backoff_ms", 100)),
                max_backoff_ms=int(rp.get("max_backoff_ms", 2000)),
                jitter=float(rp.get("jitter", 0.2)),
            )
            advice = advise(
                fc, rel, policy, attempts_made=attempt.number, now=now,
                deadline=datetime.fromisoformat(inv.deadline), rng=self._rng, http_status=http_status,
            )  # fmt: skip
            if inv.cancel_requested_at:
                advice = replace(advice, retry=False, reason="cancelled")
            unknown = advice.commit_unknown or outcome is Outcome.OUTCOME_UNKNOWN
            if rel is Reliability.READ_ONLY:
                unknown = False  # a read that may or may not have happened changed nothing
            if unknown and tool.spec.side_effect_class.is_write:
                # 6.7: a write whose commit is unknown is never "not executed".
                target = State.OUTCOME_UNKNOWN
            elif advice.retry:
                target = State.EXECUTING if inv.state is State.EXECUTING else inv.state
            else:
                target = State.FAILED_BEFORE_COMMIT
            if target is State.OUTCOME_UNKNOWN and inv.state is State.OUTCOME_UNKNOWN:
                target = State.OUTCOME_UNKNOWN
        finished = replace(
            attempt,
            outcome=outcome.value,
            failure_class=failure_class,
            finished_at=at,
            external_resource_id=external_resource_id,
            http_status=http_status,
            cost_micros=cost_micros,
            retry_reason=("retry:" if advice.retry else "final:") + advice.reason,
            retry_after=rfc3339(now + timedelta(milliseconds=advice.backoff_ms)) if advice.retry else "",
        )
        trail = Trail.on(inv, trace, at)
        data: dict[str, Any] = {
            "attempt_id": attempt_id,
            "attempt": attempt.number,
            "outcome": outcome.value,
            "failure_class": failure_class,
            "http_status": http_status,
            "retry": {
                "allowed": advice.retry,
                "reason": advice.reason,
                "backoff_ms": advice.backoff_ms,
                "attempts_left": advice.attempts_left,
                "same_key": advice.same_key,
            },
        }
        if outcome is Outcome.COMMITTED:
            data.update(external_resource_id=external_resource_id, commit_time=commit_time or at)
        if message:
            data["message"] = message
        if redactions:
            data["redactions"] = redactions
        _name_result_labels(data, tool, inv.state, target)
        trail.add(_OUTCOME_EVENT.get(target, EventKind.ATTEMPT_FAILED), target, data)
        new = replace(
            inv,
            state=target,
            updated_at=at,
            external_resource_id=external_resource_id or inv.external_resource_id,
            commit_time=(commit_time or at) if outcome is Outcome.COMMITTED else inv.commit_time,
        )
        if not await self._store.finish_attempt(new, inv.state, finished, trail.events):
            raise attempt_not_allowed("the invocation changed concurrently")
        if target in (State.COMMITTED, State.FAILED_AFTER_COMMIT):
            await self._keys.complete(inv, target, external_resource_id, now)
        elif target is State.FAILED_BEFORE_COMMIT:
            await self._keys.release(inv, now)
        if cost_micros:
            session = await self._store.get_session(inv.session_id)
            if session is not None:
                await self._usage.consume(session, Usage(cost_micros=cost_micros), check=False)
        return ReportedOutcome(new, advice)

    # ------------------------------------------------------------------ the deadline sweep (6.2, 6.7)
    async def expire_executing(self) -> int:
        """Sweep: end every EXECUTING invocation past its deadline that no attempt can finish any
        more (FAILED_BEFORE_COMMIT, key released; or OUTCOME_UNKNOWN when an attempt never
        reported: :mod:`callgate.execute.expiry`); at most :data:`EXECUTING_SWEEP_BATCH` per call.
        Returns how many were ended (one that an executor's report moved first is skipped)."""
        now = self._clock.now()
        at = rfc3339(now)
        trace = TraceContext.from_traceparent(None)
        snap = self._serving.current_or_none
        ended = 0
        for inv in await self._store.list_past_deadline(now, EXECUTING_SWEEP_BATCH, executing=True):
            tool = snap.tools.get(inv.tool_name, inv.tool_version) if snap is not None else None
            is_write = tool is None or tool.spec.side_effect_class.is_write
            verdict = judge(
                inv, await self._store.list_attempts(inv.invocation_id), is_write=is_write, now=now
            )
            if verdict.state is None or verdict.kind is None:
                continue
            _name_result_labels(verdict.data, tool, inv.state, verdict.state)
            moved = await move(self._store, inv, verdict.state, verdict.kind, verdict.data, trace, at)
            if moved is None:
                continue
            if verdict.state is State.FAILED_BEFORE_COMMIT:
                await self._keys.release(inv, now)
            ended += 1
        return ended

    # ------------------------------------------------------------------ reconciliation (6.7, 6.12)
    async def reconcile(
        self,
        invocation_id: str,
        finding: Finding,
        *,
        external_resource_id: str = "",
        commit_time: str = "",
        message: str = "",
        executor_id: str = "",
        trace: TraceContext,
    ) -> Reconciled:
        """Record what a status query found for an OUTCOME_UNKNOWN invocation.

        Allowed after a cancel (the record must say what happened even when nothing more may be
        output), deadline or not; mints no credential; closes an attempt still open on the
        invocation in the same write (its credential can redeem nothing more). The key is
        completed on a committed finding and released on a not-committed one. The same finding
        again answers the current state without writing; a contradicting one is
        ``reconcile_conflict``; any other state that was never reconciled is
        ``reconcile_not_allowed``.
        """
        committed = finding is not Finding.NOT_COMMITTED
        if committed and not external_resource_id:
            raise invalid_request(f"a {finding.value} finding needs external_resource_id")
        if not committed and (external_resource_id or commit_time):
            raise invalid_request("a not_committed finding has no external_resource_id or commit_time")
        self._check_executor_id(executor_id)
        rid, n_id = self._redact(external_resource_id)
        ctime, n_time = self._redact(commit_time)
        note, n_msg = self._redact(message, MAX_MESSAGE_CHARS)
        for _ in range(3):  # a concurrent writer (another Reconcile, an attempt's report) may win
            inv = await self._inv(invocation_id)
            if inv.state is not State.OUTCOME_UNKNOWN:
                return await self._reconciled_before(inv, finding, rid)
            now = self._clock.now()
            at = rfc3339(now)
            target = _FINDING_STATE[finding]
            attempts = await self._store.list_attempts(invocation_id)
            running = attempts[-1] if attempts and not attempts[-1].outcome else None
            data: dict[str, Any] = {
                "finding": finding.value,
                "external_resource_id": rid,
                "commit_time": (ctime or at) if committed else "",
                "executor_id": executor_id,
                "closed_attempt_id": running.attempt_id if running else "",
                "after_cancel": bool(inv.cancel_requested_at),
            }
            if note:
                data["message"] = note
            if n_id + n_time + n_msg:
                data["redactions"] = n_id + n_time + n_msg
            trail = Trail.on(inv, trace, at)
            trail.add(EventKind.RECONCILED, target, data)
            new = replace(
                inv,
                state=target,
                updated_at=at,
                external_resource_id=rid if committed else inv.external_resource_id,
                commit_time=(ctime or at) if committed else inv.commit_time,
            )
            if running is not None:
                closed = replace(
                    running,
                    outcome=_FINDING_OUTCOME[finding].value,
                    finished_at=at,
                    external_resource_id=rid,
                    retry_reason="final:reconciled",
                )
                written = await self._store.finish_attempt(new, inv.state, closed, trail.events)
            else:
                written = await self._store.transition(new, inv.state, trail.events)
            if not written:
                continue
            if committed:
                await self._keys.complete(inv, target, rid, now)
            else:
                await self._keys.release(inv, now)
            await self._store.barrier()  # the finding is on disk before it is answered (6.7)
            return Reconciled(new, already_recorded=False)
        raise reconcile_conflict("the invocation kept changing concurrently; read it and retry")

    async def _reconciled_before(self, inv: InvocationRecord, finding: Finding, rid: str) -> Reconciled:
        """A Reconcile on an invocation that is no longer OUTCOME_UNKNOWN: a repeat of the
        recorded finding, a contradiction, or a state that was never unknown."""
        recorded = [
            e for e in await self._store.list_events(inv.invocation_id) if e.kind == EventKind.RECONCILED
        ]
        if not recorded:
            raise reconcile_not_allowed(
                f"only an OUTCOME_UNKNOWN invocation is reconciled (state {inv.state.value})"
            )
        first = recorded[0].data
        if first.get("finding") == finding.value and first.get("external_resource_id", "") == rid:
            await self._store.barrier()  # a repeat after a failed barrier is refused too
            return Reconciled(inv, already_recorded=True)
        what = "external_resource_id" if first.get("finding") == finding.value else "finding"
        raise reconcile_conflict(
            f"a {first.get('finding')} finding was recorded at {recorded[0].at}; this one has another {what}"
        )

    # ------------------------------------------------------------------ results (6.10)
    async def encode(
        self,
        invocation_id: str,
        status: str,
        value_bytes: bytes,
        trace: TraceContext,
        parts: Sequence[PartData] = (),
    ) -> EncodedResult:
        """Encode the executor's result as the 6.10 tool message and store it once.

        After a cancel past the commit boundary (``cancel_requested_at``) the result is still
        encoded, redacted and stored with its event (``result_encoded``, ``withheld``), so the
        trail keeps what the tool answered; it is never handed to the model: the state does not
        become OBSERVED, no repeat of the idempotency key replays it, it does not count against
        the result-bytes budget, and ``GetResult`` answers ``output_after_cancel`` (6.7, 6.12).

        ``parts``: the bytes of a result in parts' non-text parts, checked for known secrets
        (:mod:`callgate.execute.partcheck`) and never stored; the verdicts are answered and the
        withheld parts' positions recorded on the event."""
        from callgate.arguments.parse import ParseLimits, parse_json_document

        if status not in ("ok", "error"):
            raise invalid_request("status must be 'ok' or 'error'")
        inv = await self._inv(invocation_id)
        if inv.state is State.CANCELLED_BEFORE_COMMIT:
            raise output_after_cancel(
                "the invocation was cancelled before the commit boundary; nothing ran, no tool message follows"
            )
        withheld = bool(inv.cancel_requested_at)
        if status == "ok" and inv.state is not State.COMMITTED:
            needs = f"an ok result needs a COMMITTED invocation (state {inv.state.value})"
            raise terminal_state(needs) if inv.state is State.OBSERVED else illegal_transition(needs)
        if status == "error" and inv.state not in (
            State.FAILED_BEFORE_COMMIT, State.FAILED_AFTER_COMMIT, State.OUTCOME_UNKNOWN, State.COMMITTED
        ):  # fmt: skip
            raise illegal_transition(
                f"an error result needs a failed, unknown or committed invocation (state {inv.state.value})"
            )
        tool = self._tool(inv)
        checked = status == "ok" and tool.output_schema is not None
        check = OutputCheck(OutputVerdict.UNCHECKED)
        value: Any = None
        try:
            value = parse_json_document(value_bytes, ParseLimits(max_bytes=16 * 1024 * 1024, max_depth=128))
        except CallgateError as exc:
            if not checked:
                raise exc.restated(f"result value: {exc.message}") from None
            # A tool that declares its output gets no benefit of the doubt: not JSON is refused.
            check = OutputCheck(OutputVerdict.NOT_JSON, parse_code=exc.code.value)
        verdicts = await self._check_parts(value, parts)
        max_bytes, max_items = limits_from_spec(tool.spec.result_limits)
        token = f"pg_{_secrets.token_hex(12)}"
        commit_status = {
            State.COMMITTED: "COMMITTED",
            State.FAILED_AFTER_COMMIT: "COMMITTED",
            State.OUTCOME_UNKNOWN: "UNKNOWN",
        }.get(inv.state, "NOT_COMMITTED")
        encode_input = EncodeInput(
            invocation_id=inv.invocation_id,
            tool_call_id=inv.proposal_id,
            tool_name=inv.tool_name,
            tool_version=inv.tool_version,
            status="ok" if status == "ok" else "error",
            value=value,
            commit_status=commit_status,
            max_bytes=max_bytes,
            max_items=max_items,
        )
        encode = functools.partial(self._encode_checked, tool, encode_input, check, token)
        # Large results take tens of milliseconds to encode: keep the event loop free for them.
        encoded, check = await asyncio.to_thread(encode) if len(value_bytes) > 64 * 1024 else encode()
        refused = check.refused
        now = self._clock.now()
        at = rfc3339(now)
        target = State.OBSERVED if inv.state is State.COMMITTED and not withheld else inv.state
        result = ResultRecord(
            invocation_id=inv.invocation_id,
            status="error" if refused else status,
            message=encoded.message_bytes,
            truncated=encoded.truncated,
            remaining=encoded.remaining or b"",
            page_token=token if encoded.truncated else "",
            redactions=encoded.redactions,
            created_at=at,
            nonce=encoded.nonce,
        )
        trail = Trail.on(inv, trace, at)
        data: dict[str, Any] = {
            "status": status,
            "message_bytes": len(encoded.message_bytes),
            "message_sha256": encoded.content_digest,
            "truncated": encoded.truncated,
            "redactions": encoded.redactions,
        }
        if withheld:
            data["withheld"] = ErrorCode.OUTPUT_AFTER_CANCEL.value
        if verdicts:  # positions only: the parts' bytes are never kept
            data["parts_checked"] = len(verdicts)
            data["parts_withheld"] = [
                p.index for p, v in zip(parts, verdicts, strict=True) if v is PartVerdict.HOLDS_SECRET
            ]
        if tool.output_schema is not None:
            data["output_schema"] = check.as_event()
        if refused:
            data["error_code"] = ErrorCode.RESULT_SCHEMA_INVALID.value
        trail.add(EventKind.OBSERVED if target is State.OBSERVED else EventKind.RESULT_ENCODED, target, data)
        new = replace(inv, state=target, updated_at=at)
        if not await self._store.put_result(new, inv.state, result, trail.events):
            raise terminal_state("a result was already encoded for this invocation")
        if target is State.OBSERVED:
            await self._keys.set_result(inv, encoded.message_bytes, now)
        session = await self._store.get_session(inv.session_id)
        if session is not None and not withheld:
            await self._usage.consume(session, Usage(result_bytes=len(encoded.message_bytes)), check=False)
        structured = b""
        if (
            check.verdict is OutputVerdict.VALID
            and not (withheld or encoded.withheld or encoded.truncated)
            and encoded.data is not None
        ):
            structured = encoded.data
        return EncodedResult(result, new, withheld, check, structured, verdicts)

    async def _check_parts(self, value: Any, parts: Sequence[PartData]) -> tuple[PartVerdict, ...]:
        """:func:`check_parts` with the sidecar's redactor (off the event loop when large)."""
        if not parts:
            return ()
        check = functools.partial(check_parts, value, parts, self._redactor)
        return await asyncio.to_thread(check) if part_bytes(parts) > 64 * 1024 else check()

    def _encode_checked(
        self, tool: CompiledTool, inp: EncodeInput, check: OutputCheck, token: str
    ) -> tuple[EncodedMessage, OutputCheck]:
        """Check an ``ok`` result against the tool's ``output_schema`` (as sent, then as cleaned
        and redacted: what would reach the model), and encode it, or the refusal in its place."""
        schema = tool.output_schema if inp.status == "ok" else None
        if schema is not None and not check.refused:
            check = self._output_check(schema.validate_value(inp.value))
        if not check.refused:
            encoded = encode_result(inp, self._redactor, continuation_token=token, nonce_key=self._nonce_key)
            if schema is None or encoded.withheld or encoded.data is None:
                return encoded, check
            cleaned = self._output_check(
                schema.validate_value(json.loads(encoded.data)), after_redaction=True
            )
            if not cleaned.refused:
                return encoded, check
            check = cleaned
        refusal = result_schema_invalid()
        return (
            encode_refusal(
                inp,
                self._redactor,
                code=refusal.code.value,
                message=refusal.message,
                nonce_key=self._nonce_key,
            ),
            check,
        )

    def _output_check(self, violations: list[Violation], *, after_redaction: bool = False) -> OutputCheck:
        """The verdict on a validation: pointers cleaned and redacted (a pointer may name a
        member the tool invented), cut and capped; never a value."""
        if not violations:
            return OutputCheck(OutputVerdict.VALID)
        pointers = []
        for v in violations[:MAX_RECORDED_VIOLATIONS]:
            pointer, _ = neutralize(v.pointer)
            pointer, _ = self._redact(pointer, MAX_POINTER_CHARS)
            pointers.append((pointer, v.keyword))
        return OutputCheck(
            OutputVerdict.INVALID,
            pointers=tuple(pointers),
            violation_count=len(violations),
            after_redaction=after_redaction,
        )

    async def get_result(
        self, invocation_id: str, page_token: str = "", tool_call_id: str = "", *, session_id: str
    ) -> Page:
        inv = await owned_invocation(self._store, invocation_id, session_id)  # else: invocation_not_found
        result = await self._store.get_result(invocation_id)
        if inv.cancel_requested_at:
            raise output_after_cancel(
                WITHHELD_MESSAGE
                if result is not None
                else "cancelled after the commit boundary; no tool message will be handed out"
            )
        if inv.state is State.CANCELLED_BEFORE_COMMIT:
            raise output_after_cancel("cancelled before the commit boundary; nothing ran, no tool message")
        if result is None:
            raise result_not_available("no tool message for this invocation yet")
        if not page_token:
            return Page(result.message, result.truncated, result.page_token)
        prefix, _, offset_s = page_token.rpartition(":")
        if not result.truncated or (prefix or page_token) != result.page_token:
            raise result_not_available("unknown page token")
        offset = int(offset_s) if prefix and offset_s.isdigit() else 0
        tool = self._tool(inv)
        try:
            chunk, nxt = page(
                result.remaining,
                offset,
                limits_from_spec(tool.spec.result_limits)[0],
                tool_call_id=tool_call_id or inv.proposal_id,
                invocation_id=inv.invocation_id,
                token=result.page_token,
                nonce=result.nonce,
                redactor=self._redactor,
            )
        except ValueError:
            raise result_not_available("bad page token") from None
        return Page(chunk, nxt is not None, f"{result.page_token}:{nxt}" if nxt is not None else "")

    # ------------------------------------------------------------------ secrets
    async def redeem_secret(self, token: str, name: str) -> bytes:
        claims = _claims_unverified(token)
        attempt = await self._store.get_attempt(_attempt_id_of(claims))
        if attempt is None:
            raise credential_invalid("unknown_attempt", "credential names an unknown attempt")
        if attempt.outcome:
            raise credential_invalid("attempt_finished", "the attempt has finished")
        inv = await self._inv(attempt.invocation_id)
        try:
            verified = self._verifier.verify(
                token,
                tool_name=inv.tool_name,
                tool_version=inv.tool_version,
                canonical_arguments=inv.normalized_arguments,
                audience=attempt.executor_id,
            )
        except CredentialError as exc:
            raise credential_invalid(exc.code, f"credential refused: {exc.code}") from None
        if verified.jti != attempt.jti or verified.invocation_id != inv.invocation_id:
            raise credential_invalid("wrong_attempt", "credential is not this attempt's")
        value = self._secrets.release(name, inv.tool_name, inv.tool_version, verified.resource)
        if not await self._store.redeem_once(attempt.attempt_id, name, rfc3339(self._clock.now())):
            raise secret_already_redeemed("secret already released for this attempt")
        return value


__all__ = [
    "EncodedResult",
    "Execution",
    "Finding",
    "MAX_MESSAGE_CHARS",
    "MAX_POINTER_CHARS",
    "Outcome",
    "Page",
    "Reconciled",
    "ReportedOutcome",
    "StartedAttempt",
    "WITHHELD_MESSAGE",
]
