"""What the gate answers: a session's request, a tool view, a proposal's outcome or rejection.

A rejection and a deny are values (spec 6.14): the proposal was recorded, reached a terminal
state, and the runtime gets the reason. Only failures of the call itself raise
:class:`~callgate.base.errors.CallgateError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate.base.errors import CallgateError, Violation
from callgate.base.model import Decision, Subject
from callgate.policy.toolspecs import CompiledTool
from callgate.store.base import InvocationRecord


@dataclass(frozen=True, slots=True)
class Rejection:
    """A stage refused the proposal: a stable code, a message and located violations."""

    code: str
    message: str
    violations: tuple[Violation, ...] = ()

    @staticmethod
    def of(error: CallgateError) -> Rejection:
        return Rejection(error.code.value, error.message, error.violations)

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
    """``OpenSession``: who the session acts for (from the runtime's auth, never the model)."""

    subject: Subject
    timezone: str
    locale: str = "en"
    budgets: Mapping[str, int] = field(default_factory=dict)
    tool_allowlist: tuple[str, ...] = ()
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolView:
    """The tools shown for one model call and the digest of that set."""

    tools: tuple[CompiledTool, ...]
    tool_set_digest: str


@dataclass(frozen=True, slots=True)
class ProposeOutcome:
    """The recorded invocation and how the proposal ended: a decision, a rejection, or a replay."""

    record: InvocationRecord
    decision: Decision | None
    rejection: Rejection | None
    validator: str = ""
    schema_dialect: str = ""
    idempotent_replay: bool = False
    """The key matched an earlier invocation with the same digest: ``record`` is that one."""
    replayed_message: bytes = b""


def decision_to_dict(d: Decision) -> dict[str, Any]:
    """The stored form of a decision (inverse: :func:`callgate.policy.engines.base.decision_from_dict`)."""
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


__all__ = ["ProposeOutcome", "Rejection", "SessionSpec", "ToolView", "decision_to_dict"]
