"""The authorization engine contract (spec 6.6): ``authorize(subject, capability, resource,
context) -> allow | deny | confirm``.

An engine never raises for a policy outcome: deny and confirm are :class:`Decision` values. An
engine *fault* (bad policy evaluation, timeout, undefined result, exception) is also returned as
a deny, with ``error_code`` set, so a caller cannot turn a fault into an allow by forgetting to
catch something (fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from callgate.base.errors import ErrorCode, Violation
from callgate.base.model import AuthzRequest, Decision, Effect, Reason
from callgate.policy.timevalues import TimePlan

if TYPE_CHECKING:
    from callgate._native import Answer, CedarSnapshot
    from callgate.policy.reach import Reach
    from callgate.policy.sessionuse import SessionUse


class Readiness(NamedTuple):
    """An engine's readiness with the reason (unpacks as ``ok, why = await e.readiness()``)."""

    ready: bool
    reason: str
    """Why it is (not) ready, for logs and ``callgate policy test``; never secrets."""


class Engine(Protocol):
    """One narrow interface per engine. Implementations must be safe to call concurrently.

    Every engine implements the whole Protocol: callers never probe for optional methods.
    Engines are registered by name in :mod:`callgate.policy.engines.registry`."""

    @property
    def name(self) -> str:
        """Engine name recorded on every decision (e.g. ``cedar``)."""
        ...

    @property
    def revision(self) -> str:
        """Content digest of the policy snapshot currently serving."""
        ...

    async def authorize_batch(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        """Decide each request; never raises (faults are fail-closed denies). Must not block
        the event loop for long: remote engines use async I/O with a timeout."""
        ...

    async def ready(self) -> bool:
        """True when the engine can decide with the snapshot it was built for (readiness).
        Embedded engines are ready once built; a remote engine checks its server."""
        ...

    async def readiness(self) -> Readiness:
        """:meth:`ready` with the reason why (not). Never raises."""
        ...

    async def load_policies(self) -> None:
        """Make the policies this engine was built for available where it decides: a remote
        engine uploads them to a server that started without them; an embedded engine holds
        them already (no-op). Raises on failure. Called only when the engine's registration says
        the config asks for it (``policy.opa_upload_policies``)."""
        ...

    async def close(self) -> None:
        """Release connections/threads. Idempotent."""
        ...

    @property
    def compiled(self) -> CompiledDecider | None:
        """The engine's side of the compiled core (:class:`CompiledDecider`) when its policies
        can be decided there, else None (Rego, OPA). The one way callers reach it."""
        ...

    @property
    def reach(self) -> Reach | None:
        """What each principal could ever be allowed (ListTools by policy,
        :mod:`callgate.policy.reach`) when ``policy.list_by_policy`` is on and the engine can read
        its policies that way (Cedar), else None: every allowlisted tool is shown."""
        ...

    @property
    def session_use(self) -> SessionUse | None:
        """Which actions' requests must carry ``context.session`` (Cedar:
        :mod:`callgate.policy.sessionuse`), else None: every request carries it (Rego, OPA)."""
        ...

    def conformance_violations(
        self, decision: Decision, capabilities: Sequence[str], args: Any
    ) -> list[Violation] | None:
        """When ``decision`` is a deny because the request does not conform to the engine's
        schema: the violations naming the argument and the action (Cedar,
        :mod:`callgate.policy.conformance`); else None (a policy deny, or an engine that cannot
        tell: Rego, OPA)."""
        ...


class CompiledDecider(Protocol):
    """What an engine whose policies the compiled core decides (``callgate._native``,
    docs/NATIVE.md) offers the core seam (:class:`callgate.propose.core.Core`): optional, reached
    through :attr:`Engine.compiled`, typed, never probed for."""

    def use_native(self, on: bool) -> bool:
        """Decide in the compiled core (``on``, when the snapshot has a compiled form) or in
        Python; returns whether the compiled core now decides."""
        ...

    @property
    def native(self) -> bool:
        """Whether the compiled core decides (``callgate serve`` names it)."""
        ...

    @property
    def native_snapshot(self) -> CedarSnapshot | None:
        """The compiled snapshot the one-call Propose decision runs on, or None (not deciding
        natively, or closed)."""
        ...

    @property
    def time_plans(self) -> Mapping[str, TimePlan]:
        """Action -> the time values its schema declares (a time argument is then a typed value
        in the policies' context, which the one-call decision does not build)."""
        ...

    @property
    def text_actions(self) -> frozenset[str]:
        """Actions whose schema declares ``context.text`` (which the one-call decision does not
        build: a proposal with flagged free text is then decided by the Python stages)."""
        ...

    def native_decision(self, answers: Sequence[tuple[Answer, Answer | None]]) -> Decision:
        """The combined decision of the compiled core's ``(enforcing, shadow)`` answers, one per
        capability: what :meth:`Engine.authorize_batch` gives for the same requests."""
        ...


class NotCompiled:
    """The members of the engine contract (:class:`Engine`) an engine may leave out, each
    answering None: no compiled core, no ListTools by policy, no located conformance refusal.
    Written once for the engines that offer none of them (embedded Rego and OPA)."""

    __slots__ = ()

    @property
    def compiled(self) -> None:
        """Not decided by the compiled core."""
        return None

    @property
    def reach(self) -> None:
        """No ListTools by policy: every allowlisted tool is shown."""
        return None

    @property
    def session_use(self) -> None:
        """No reading of the policies: every request carries ``context.session``."""
        return None

    def conformance_violations(self, decision: Decision, capabilities: Sequence[str], args: Any) -> None:
        """A request the Rego contract cannot hold stays a policy deny (not located)."""
        return None


def fault(engine: str, code: ErrorCode, message: str, policy_id: str = "") -> Decision:
    """A fail-closed deny for an engine fault."""
    return Decision(
        effect=Effect.DENY,
        reasons=(Reason(code=code.value, policy_id=policy_id, message=message),),
        engine=engine,
        error_code=code.value,
    )


def _combined_effect(effects: Sequence[Effect]) -> Effect:
    if Effect.DENY in effects:
        return Effect.DENY
    if Effect.CONFIRM in effects:
        return Effect.CONFIRM
    return Effect.ALLOW


def combine(decisions: Sequence[Decision], engine: str) -> Decision:
    """Combine the decisions for several required capabilities of one invocation.

    Every capability must be allowed: any deny wins (its reasons are kept), then any confirm,
    and only if all allow is the result allow. No decisions at all is a deny (fail closed).
    Shadow mode carries through: the would-be effect combines each capability's shadow effect
    (or its enforced one) by the same rule, and is reported when it differs.
    """
    if not decisions:
        return fault(engine, ErrorCode.ENGINE_NO_DECISION, "no capability was evaluated")
    effect = _combined_effect([d.effect for d in decisions])
    would = _combined_effect([Effect(d.shadow_effect) if d.shadow_effect else d.effect for d in decisions])
    shadow_effect, shadow_ids = "", tuple[str, ...]()
    if would is not effect:
        shadow_effect = would.value
        shadow_ids = tuple(
            pid
            for d in decisions
            if (Effect(d.shadow_effect) if d.shadow_effect else d.effect) is would
            for pid in (d.shadow_policy_ids if d.shadow_effect else d.policy_ids)
        )
    chosen = [d for d in decisions if d.effect is effect] if effect is Effect.DENY else list(decisions)
    error_code = next((d.error_code for d in chosen if d.error_code), "") if effect is Effect.DENY else ""
    return Decision(
        effect=effect,
        reasons=tuple(r for d in chosen for r in d.reasons),
        engine=engine,
        error_code=error_code,
        shadow_effect=shadow_effect,
        shadow_policy_ids=shadow_ids,
    )


def decision_from_dict(d: Mapping[str, Any]) -> Decision:
    """Inverse of :func:`callgate.propose.outcome.decision_to_dict` (stored decisions)."""
    return Decision(
        effect=Effect(d["effect"]),
        reasons=tuple(
            Reason(code=r.get("code", ""), policy_id=r.get("policy_id", ""), message=r.get("message", ""))
            for r in d.get("reasons", [])
        ),
        engine=d.get("engine", ""),
        error_code=d.get("error_code", ""),
    )
