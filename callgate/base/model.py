"""Frozen value types that flow between the pipeline stages (spec 6.1).

Each stage takes the previous stage's type and returns the next one:

    Proposal --parse--> ParsedArguments --validate--> ValidatedArguments
             --normalize--> NormalizedArguments --authorize--> Decision

JSON values inside these types are plain ``dict``/``list``/``str``/``int``/``float``/``bool``/
``None`` trees. They are treated as immutable by convention: no stage mutates its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

JSONValue = Any
"""A JSON value as produced by the strict parser (dict, list, str, int, float, bool, None)."""


class SideEffectClass(str, Enum):
    READ_ONLY = "read_only"
    CREATE = "create"
    MODIFY = "modify"
    DELETE = "delete"

    @property
    def is_write(self) -> bool:
        return self is not SideEffectClass.READ_ONLY


class Effect(str, Enum):
    """The three answers of ``authorize`` (spec 6.6)."""

    ALLOW = "allow"
    DENY = "deny"
    CONFIRM = "confirm"


@dataclass(frozen=True, slots=True)
class Subject:
    """Who is acting. Always taken from the session the runtime opened, never from arguments."""

    tenant: str
    id: str


@dataclass(frozen=True, slots=True)
class Proposal:
    """What the model proposed (spec 6.1): a name, a version and raw argument bytes."""

    session_id: str
    model_call_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    arguments_bytes: bytes
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedArguments:
    """Output of the strict parser: the raw bytes kept beside the parsed value (6.3)."""

    raw: bytes
    value: dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class ValidatedArguments:
    """Output of schema validation, with the validator that vouched for it (6.4)."""

    value: dict[str, JSONValue] | None
    """The arguments as Python values; None when the compiled core decided the whole proposal
    itself (docs/NATIVE.md) and no Python stage reads them (never built: :func:`values_of`)."""
    dialect: str
    validator: str
    validator_version: str
    format_assertion: bool


@dataclass(frozen=True, slots=True)
class NormalizationContext:
    """Explicit inputs of normalization (6.5): never read from globals."""

    reference_clock: str
    """RFC 3339 timestamp with offset, e.g. ``2026-07-19T14:00:00+08:00``."""
    timezone: str
    """IANA zone name of the user, e.g. ``Asia/Shanghai``."""
    locale: str = "en"
    """BCP 47 locale tag; selects relative-date vocabularies."""
    reference_time: datetime | None = field(default=None, compare=False, repr=False)
    """The instant ``reference_clock`` spells, when the caller has it (the gate does): saves
    re-parsing the string on every call. Used only when it spells exactly ``reference_clock``."""


@dataclass(frozen=True, slots=True)
class NormalizedArguments:
    """Output of normalization + canonicalization: the digest input and the digest (6.5)."""

    value: dict[str, JSONValue] | None
    """The normalized arguments as Python values; None when the compiled core decided the whole
    proposal (never built: :func:`values_of`). ``canonical`` always holds them."""
    canonical: bytes
    """RFC 8785 canonical JSON bytes of ``value``."""
    digest: str
    """``sha256:<hex>`` of tenant, tool name@version and ``canonical`` (see :mod:`callgate.arguments.digest`)."""
    context: NormalizationContext
    applied: tuple[str, ...] = ()
    """Names of the normalizers that changed something, in order, for the event trail."""


def values_of(args: ValidatedArguments | NormalizedArguments) -> dict[str, JSONValue]:
    """``args.value``, which a Python stage needs: an internal error if the compiled core decided
    the proposal and did not build it (a stage reading it on that path is a defect)."""
    if args.value is None:
        raise RuntimeError("the compiled core decided this proposal; its arguments were not built in Python")
    return args.value


@dataclass(frozen=True, slots=True)
class AuthzRequest:
    """The four inputs of ``authorize`` (spec 6.6)."""

    subject: Subject
    capability: str
    resource: str
    context: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a decision came out as it did: a stable code and, when a policy decided, its id."""

    code: str
    policy_id: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """An engine's answer. Deny and confirm are values; only infrastructure failures raise."""

    effect: Effect
    reasons: tuple[Reason, ...] = ()
    engine: str = ""
    error_code: str = ""
    """Set when the decision is a fail-closed deny caused by an engine fault."""
    shadow_effect: str = ""
    """When policies in shadow mode would have changed the answer: the effect they would have
    given (logged on the event, never enforced). Empty when they agree or there are none."""
    shadow_policy_ids: tuple[str, ...] = ()

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(r.policy_id for r in self.reasons if r.policy_id)


class OutputVerdict(str, Enum):
    """What the check of a tool's result against its ToolSpec's ``output_schema`` found (6.10)."""

    UNCHECKED = "unchecked"
    """The ToolSpec declares no ``output_schema``, or the result is an error: nothing checked."""
    VALID = "valid"
    """The result (as the tool sent it, and as cleaned and redacted) conforms."""
    INVALID = "invalid"
    """The result does not conform: withheld from the model (``result_schema_invalid``)."""
    NOT_JSON = "not_json"
    """The result is not strict JSON: withheld from the model (``result_schema_invalid``)."""


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """The verdict on one result and where it failed: JSON pointers and keywords only, never
    the values (the pointers themselves pass the redactor before they are recorded)."""

    verdict: OutputVerdict
    pointers: tuple[tuple[str, str], ...] = ()
    """``(pointer, keyword)`` of each violation, at most :data:`MAX_RECORDED_VIOLATIONS`."""
    violation_count: int = 0
    after_redaction: bool = False
    """The tool's result conformed, but its cleaned and redacted form (what would reach the
    model) did not."""
    parse_code: str = ""
    """``NOT_JSON``: the strict parser's code (``invalid_json``, ``duplicate_key`` ...)."""

    @property
    def refused(self) -> bool:
        return self.verdict in (OutputVerdict.INVALID, OutputVerdict.NOT_JSON)

    def as_event(self) -> dict[str, Any]:
        """The event-data form (``result_encoded`` / ``observed``)."""
        out: dict[str, Any] = {"verdict": self.verdict.value}
        if self.refused:
            out["violation_count"] = self.violation_count
            out["violations"] = [{"pointer": p, "keyword": k} for p, k in self.pointers]
        if self.after_redaction:
            out["after_redaction"] = True
        if self.parse_code:
            out["parse_code"] = self.parse_code
        return out


MAX_RECORDED_VIOLATIONS = 20
"""Violations of an ``output_schema`` recorded on the event (the count is always complete)."""
