"""The Rego contract, shared by the embedded Rego engine (:mod:`callgate.policy.engines.rego`) and the OPA
engine (:mod:`callgate.policy.engines.opa`): the input document callgate sends, the decision document it
reads back, the fault codes, and the policy directory both engines are built from.

Input document (one per ``AuthzRequest``; see docs/ENGINES.md)::

    {"subject":    {"tenant": "<session tenant>", "id": "<session subject>"},
     "capability": "<capability>",                       e.g. "calendar.create"
     "resource":   {"id": "<kind>:<name>", "kind": "<kind>", "name": "<name>"},
     "context":    {"tenant": "<session tenant>", "tool": "<name>@<version>",
                    "args": <normalized arguments>,
                    "now": "<reference clock, RFC 3339>",                 when declared
                    "millis": {"now": <epoch ms>, "args": {<time argument>: <ms>}},  when declared
                    "text": {"hidden": <bool>, ..., "hidden_at": [<pointer>, ...], ...}},
                                      when declared and a string argument hides characters
                                      (callgate/policy/textflags.py)
     "shadow":     ["<policy id>", ...]}      only when the config puts policies in shadow mode

It carries what the Cedar engine's request carries, and the argument values are held to the same
domain (:func:`contract_value`), so one table of requests means the same thing to Cedar, rego-cpp
and OPA: ``null`` members are dropped, integral floats become integers, keys starting with ``__``
are refused, and so are integers outside 64 bits, non-finite numbers and non-integral numbers with
more than 4 fractional digits. A refused request is a deny with ``engine_error`` on every engine.

Decision document (at the decision path, ``data.callgate.authz.decision`` by default)::

    {"effect": "allow" | "deny" | "confirm",
     "reasons": [{"code": "...", "policy_id": "...", "message": "..."}, ...],
     "shadow":  {"effect": "allow" | "deny" | "confirm", "policy_ids": ["...", ...]}}

``reasons`` must be non-empty (a decision explains itself); ``policy_id`` and ``message`` are
optional strings. A deny whose reason code is ``policy_evaluation_error`` is an evaluation fault
(``Decision.error_code`` set), exactly like the Cedar engine's. ``shadow`` is optional: present
only when the policies in shadow mode would have changed the effect, it becomes
``Decision.shadow_effect`` / ``Decision.shadow_policy_ids`` (logged, never enforced), exactly like
the Cedar engine's. Anything else -- not an object, an unknown effect, a reason without a code, a
fault code on an allow, a ``shadow`` that is not ``{effect, policy_ids}`` with a known effect other
than the enforced one and an array of strings -- is ``engine_malformed``.

Policy ids in shadow mode come from ``data.callgate.shadow`` (``data.json``, an array of ids) and
from the config's ``policy.shadow``, which both engines send as ``input.shadow`` (so the base
documents an OPA server must serve stay exactly ``data.json``; see :class:`RegoPolicies`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final

from callgate.arguments.parse import ParseLimits, parse_json_document
from callgate.base.errors import CallgateError, ErrorCode, LoadError, policy_invalid
from callgate.base.model import AuthzRequest, Decision, Effect, JSONValue, Reason
from callgate.policy.engines.base import fault
from callgate.policy.textflags import TEXT_KEY
from callgate.policy.timevalues import MILLIS_KEY, NOW_KEY, Instant, Span, millis_of

__all__ = [
    "DATA_FILE",
    "DEFAULT_DECISION_PATH",
    "EFFECTS",
    "malformed_effect",
    "shown_value",
    "ENGINE_MALFORMED",
    "ENGINE_TIMEOUT",
    "ENGINE_UNAVAILABLE",
    "ENGINE_UNDEFINED",
    "FAULT_REASON_CODES",
    "PACKAGE_ROOT",
    "SHADOW_KEY",
    "TEST_SUFFIX",
    "MalformedDecision",
    "RegoPolicies",
    "RequestError",
    "build_input",
    "contract_value",
    "decision_from_document",
    "engine_fault",
    "load_rego_dir",
    "module_digests",
    "normalize_decision_path",
]

DEFAULT_DECISION_PATH = "callgate/authz/decision"
"""Where the decision document lives: ``data.callgate.authz.decision``."""

PACKAGE_ROOT = "callgate"
"""Every engine module's package lies under ``data.callgate``; so does all base data."""

DATA_FILE = "data.json"
SHADOW_KEY = "shadow"
"""``data.callgate.shadow``: the policy ids ``data.json`` puts in shadow mode (an array of ids)."""
TEST_SUFFIX = "_test.rego"

# Fault codes of the Rego engines (members of ``ErrorCode``, with rows in the gRPC status map of
# :mod:`callgate.server.status`), named here so both engines and their tests import one set.
ENGINE_TIMEOUT: Final = ErrorCode.ENGINE_TIMEOUT
"""The engine did not answer within its deadline (OPA)."""
ENGINE_UNAVAILABLE: Final = ErrorCode.ENGINE_UNAVAILABLE
"""The engine could not be reached or answered with a server error (OPA)."""
ENGINE_UNDEFINED: Final = ErrorCode.ENGINE_UNDEFINED
"""The decision document is undefined (no rule produced it and there is no default)."""
ENGINE_MALFORMED: Final = ErrorCode.ENGINE_MALFORMED
"""The decision document is not of the contract's shape."""

EFFECTS = {e.value: e for e in Effect}
FAULT_REASON_CODES = frozenset({ErrorCode.POLICY_EVALUATION_ERROR.value})
"""Reason codes a policy may put on a deny to report an evaluation fault."""

_INT64 = 2**63
_DECIMAL_MAX = Decimal("922337203685477.5807")
_PATH_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PACKAGE_LINE = re.compile(r"^\s*package\s+([^\s#]+)", re.MULTILINE)
_DATA_LIMITS = ParseLimits(max_bytes=16 * 1024 * 1024, max_depth=64)


def engine_fault(engine: str, code: ErrorCode | str, message: str, policy_id: str = "") -> Decision:
    """A fail-closed deny for an engine fault: :func:`callgate.policy.engines.base.fault` with
    ``code`` as an :class:`ErrorCode` (the engines pass members or their values). A string that
    is not an ``ErrorCode`` value is a programming error: ``ValueError``."""
    return fault(engine, ErrorCode(code), message, policy_id)


class RequestError(ValueError):
    """A request value outside the contract's domain (message names a pointer, never a value)."""


def contract_value(value: JSONValue, path: str = "") -> JSONValue:
    """Check and normalize one JSON value to the contract's domain (the same domain
    :func:`callgate.policy.engines.cedar.to_cedar_value` accepts). Raises :class:`RequestError`."""
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (Instant, Span)):  # a time value: its RFC 3339 / ISO 8601 text
        return value.text
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise RequestError(f"{path or '/'}: integer outside 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RequestError(f"{path or '/'}: number not finite")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        try:
            d = Decimal(repr(value))
        except InvalidOperation:
            raise RequestError(f"{path or '/'}: number not representable") from None
        exp = d.as_tuple().exponent
        if not isinstance(exp, int) or exp < -4 or abs(d) >= _DECIMAL_MAX:
            raise RequestError(f"{path or '/'}: number with more than 4 fractional digits or out of range")
        return value
    if isinstance(value, Decimal):  # a decimal argument (the ``decimal`` normalizer): a number
        if not value.is_finite() or abs(value) >= _DECIMAL_MAX:
            raise RequestError(f"{path or '/'}: decimal out of range")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        out: dict[str, JSONValue] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RequestError(f"{path or '/'}: object keys must be strings")
            if k.startswith("__"):
                raise RequestError(f"{path}/{k}: keys starting with '__' are reserved")
            if v is None:
                continue
            out[k] = contract_value(v, f"{path}/{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [contract_value(v, f"{path}/{i}") for i, v in enumerate(value) if v is not None]
    raise RequestError(f"{path or '/'}: unsupported value type")


def build_input(
    req: AuthzRequest, shadow: Sequence[str] = (), context_names: Container[str] | None = None
) -> dict[str, JSONValue]:
    """The input document for one request (the module docstring gives the shape).

    ``context.tenant`` is always the session's tenant (a ``tenant`` key in the request context
    is overwritten, as the Cedar engine does). ``shadow``: the config's shadow policy ids, sent
    as ``input.shadow`` when there are any. ``context_names``: the context attributes the data
    declares (``data.callgate.schema.context`` and ``optional_context``); ``now``, ``millis`` and
    ``text`` are sent only when declared (a legacy ``data.json`` without them keeps its exact
    input). Raises :class:`RequestError`.
    """
    context = contract_value(dict(req.context))
    assert isinstance(context, dict)
    millis = millis_of(req.context)
    if millis is not None:
        context[MILLIS_KEY] = millis
    if context_names is not None:
        for key in (NOW_KEY, MILLIS_KEY, TEXT_KEY):
            if key not in context_names:
                context.pop(key, None)
    context["tenant"] = req.subject.tenant
    kind, _, name = req.resource.partition(":")
    doc: dict[str, JSONValue] = {
        "subject": {"tenant": req.subject.tenant, "id": req.subject.id},
        "capability": req.capability,
        "resource": {"id": req.resource, "kind": kind, "name": name},
        "context": context,
    }
    if shadow:
        doc["shadow"] = list(shadow)
    return doc


class MalformedDecision(ValueError):
    """The decision document is not of the contract's shape."""


def shown_value(value: object, limit: int = 60) -> str:
    """A policy's output value as JSON for a message (the policy wrote it; it is not a request
    value), cut at ``limit`` characters. :func:`malformed_effect` reads it back."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."


_MALFORMED_EFFECT = re.compile(r"decision effect (.+) is not one of allow, deny, confirm")


def malformed_effect(message: str) -> str | None:
    """The JSON text of the bad effect a malformed-decision message names, else None."""
    m = _MALFORMED_EFFECT.search(message)
    return m.group(1) if m else None


def decision_from_document(doc: object, engine: str) -> Decision:
    """Validate a decision document and turn it into a :class:`Decision`.

    Raises :class:`MalformedDecision`; callers turn that into an ``engine_malformed`` deny.
    """
    if not isinstance(doc, dict):
        raise MalformedDecision(f"decision is a {type(doc).__name__}, not an object")
    raw_effect = doc.get("effect")
    effect = EFFECTS.get(raw_effect) if isinstance(raw_effect, str) else None
    if effect is None:
        raise MalformedDecision(
            "decision effect is missing"
            if raw_effect is None
            else f"decision effect {shown_value(raw_effect)} is not one of allow, deny, confirm"
        )
    raw_reasons = doc.get("reasons")
    if not isinstance(raw_reasons, list) or not raw_reasons:
        raise MalformedDecision("decision reasons must be a non-empty array")
    reasons: list[Reason] = []
    for i, r in enumerate(raw_reasons):
        if not isinstance(r, dict):
            raise MalformedDecision(f"reason {i} is not an object")
        code, pid, msg = r.get("code"), r.get("policy_id", ""), r.get("message", "")
        if not isinstance(code, str) or not code:
            raise MalformedDecision(f"reason {i} has no code")
        if not isinstance(pid, str) or not isinstance(msg, str):
            raise MalformedDecision(f"reason {i}: policy_id and message must be strings")
        reasons.append(Reason(code=code, policy_id=pid, message=msg))
    error_code = next((r.code for r in reasons if r.code in FAULT_REASON_CODES), "")
    if error_code and effect is not Effect.DENY:
        raise MalformedDecision(f"a fault reason ({error_code}) on a {effect.value} decision")
    shadow_effect, shadow_ids = _shadow_of(doc, effect)
    return Decision(
        effect=effect,
        reasons=tuple(reasons),
        engine=engine,
        error_code=error_code,
        shadow_effect=shadow_effect,
        shadow_policy_ids=shadow_ids,
    )


def _shadow_of(doc: Mapping[str, Any], effect: Effect) -> tuple[str, tuple[str, ...]]:
    """The optional ``shadow`` member -> (shadow effect, shadow policy ids); ``("", ())`` when
    absent. Raises :class:`MalformedDecision`."""
    if "shadow" not in doc:
        return "", ()
    raw = doc["shadow"]
    if not isinstance(raw, dict) or set(raw) != {"effect", "policy_ids"}:
        raise MalformedDecision("decision shadow must be an object with exactly effect and policy_ids")
    would = raw["effect"]
    if not isinstance(would, str) or would not in EFFECTS:
        raise MalformedDecision("decision shadow effect is not one of allow, deny, confirm")
    if EFFECTS[would] is effect:
        raise MalformedDecision(
            "decision shadow effect equals the enforced effect (agreement carries no shadow)"
        )
    ids = raw["policy_ids"]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise MalformedDecision("decision shadow policy_ids must be an array of strings")
    return would, tuple(ids)


def normalize_decision_path(path: str) -> str:
    """``callgate.authz.decision``, ``data.callgate.authz.decision`` or ``callgate/authz/decision``
    -> ``callgate/authz/decision`` (the form of an OPA Data API path and a rego-cpp entrypoint).
    Raises ValueError on anything else."""
    p = path.strip().strip("/")
    parts = p.split("/") if "/" in p else p.split(".")
    if parts and parts[0] == "data":
        parts = parts[1:]
    if len(parts) < 2 or not all(_PATH_SEGMENT.match(s) for s in parts):
        raise ValueError(
            f"decision path '{path}' must be package segments and a rule name, e.g. {DEFAULT_DECISION_PATH}"
        )
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class RegoPolicies:
    """The Rego policy directory as both Rego engines see it. Immutable."""

    directory: Path
    modules: tuple[tuple[str, str], ...]
    """``(path relative to the directory, source text)`` of every non-test ``.rego`` file, sorted."""
    data: Mapping[str, Any]
    """The base document (``{"callgate": {...}}``): ``data.json`` (optional, legacy) plus what is
    declared once (:mod:`callgate.policy.declare`): ``callgate.schema`` actions from the ToolSpecs
    that ``data.json`` does not declare, ``callgate.entities`` from ``principals.json``."""
    data_text: str
    """:attr:`data` as JSON text (what rego-cpp compiles and OPA is given)."""
    revision: str
    """``sha256:`` over the module paths and texts and ``data.json``, and the config's shadow ids
    when there are any (so a switch between shadow and enforcing is a new revision)."""
    shadow: tuple[str, ...] = ()
    """Policy ids the config (``policy.shadow``) puts in shadow mode, sorted, without duplicates.
    The engines send them as ``input.shadow``; they are not data, so an OPA server serving
    exactly ``data.json`` serves this revision (readiness). ``data.callgate.shadow`` in
    ``data.json`` puts policies in shadow mode from the policy files instead."""

    @property
    def context_names(self) -> frozenset[str] | None:
        """The context attributes ``data.callgate.schema.context`` declares (None: no schema)."""
        schema = self.data.get(PACKAGE_ROOT, {}).get("schema", {})
        ctx, optional = schema.get("context"), schema.get("optional_context", {})
        if not isinstance(ctx, Mapping):
            return None
        return frozenset(ctx) | frozenset(optional if isinstance(optional, Mapping) else ()) | {"args"}

    @property
    def shadow_ids(self) -> tuple[str, ...]:
        """Every policy id in shadow mode: ``data.callgate.shadow`` and the config's, sorted."""
        base = self.data.get(PACKAGE_ROOT, {}).get(SHADOW_KEY, [])
        return tuple(sorted(set(base) | set(self.shadow)))


def _load_error(message: str, source: Path | str, line: int = 0) -> LoadError:
    where = f"{source}:{line}" if line else str(source)
    return policy_invalid(message, source=where)


def load_rego_dir(directory: Path, shadow: Sequence[str] = ()) -> RegoPolicies:
    """Read ``<directory>/**/*.rego`` (``*_test.rego`` excluded: those are for ``opa test``) and
    ``<directory>/data.json``, merged with the declarations of the policy folder
    (``<directory>/..``: ToolSpecs and ``principals.json``, :mod:`callgate.policy.declare`). Checks what can be checked without a Rego compiler: every module
    declares a package under ``callgate``, ``data.json`` is strict JSON (duplicate keys refused:
    OPA and rego-cpp might each keep a different one) holding only ``callgate``, and its
    ``callgate.shadow``, if any, is an array of policy ids. Compilation errors are reported by the
    engine that compiles them. ``shadow``: the config's shadow policy ids (``policy.shadow``).
    Raises :class:`LoadError` (``policy_invalid``).
    """
    if not directory.is_dir():
        raise _load_error("not a directory", directory)
    modules: list[tuple[str, str]] = []
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.rego")):
        if path.name.endswith(TEST_SUFFIX):
            continue
        rel = path.relative_to(directory).as_posix()
        if any(part.startswith(".") for part in path.relative_to(directory).parts):
            continue  # e.g. a ConfigMap volume's ..<timestamp>/ copies: each module once
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _load_error(f"cannot read: {exc}", path) from None
        m = _PACKAGE_LINE.search(text)
        if not m:
            raise _load_error("no package declaration", path)
        pkg = m.group(1).removeprefix("data.")
        if pkg != PACKAGE_ROOT and not pkg.startswith(PACKAGE_ROOT + "."):
            line = text.count("\n", 0, m.start(1)) + 1
            raise _load_error(f"package '{pkg}' is outside '{PACKAGE_ROOT}'", path, line)
        modules.append((rel, text))
        digest.update(b"rego\x00" + rel.encode() + b"\x00" + text.encode() + b"\x00")
    if not modules:
        raise _load_error("no .rego policy modules", directory)
    data_path = directory / DATA_FILE
    data: dict[str, Any] = {}
    data_text = "{}"
    if data_path.exists():
        try:
            raw = data_path.read_bytes()
            parsed = parse_json_document(raw, _DATA_LIMITS)
        except OSError as exc:
            raise _load_error(f"cannot read: {exc.strerror}", data_path) from None
        except CallgateError as exc:
            raise _load_error(exc.message, data_path) from None
        if not isinstance(parsed, dict) or set(parsed) - {PACKAGE_ROOT}:
            raise _load_error(f"data.json must be an object whose only key is '{PACKAGE_ROOT}'", data_path)
        if not isinstance(parsed.get(PACKAGE_ROOT, {}), dict):
            raise _load_error(f"data.json: '{PACKAGE_ROOT}' must be an object", data_path)
        ids = parsed.get(PACKAGE_ROOT, {}).get(SHADOW_KEY, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise _load_error(
                f"data.json: '{PACKAGE_ROOT}.{SHADOW_KEY}' must be an array of policy ids", data_path
            )
        data, data_text = parsed, raw.decode("utf-8")
    # One declaration per tool (callgate/policy/declare.py): schema actions data.json does not
    # declare come from the ToolSpecs, users and roles from principals.json
    from callgate.policy.declare import declared

    data = declared(directory.parent).rego_data(data, str(data_path))
    data_text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    digest.update(b"data\x00" + data_text.encode() + b"\x00")
    config_shadow = tuple(sorted(set(shadow)))
    if config_shadow:
        digest.update(b"shadow\x00" + "\x00".join(config_shadow).encode() + b"\x00")
    return RegoPolicies(
        directory=directory,
        modules=tuple(modules),
        data=data,
        data_text=data_text,
        revision="sha256:" + digest.hexdigest(),
        shadow=config_shadow,
    )


def module_digests(texts: Sequence[str]) -> frozenset[str]:
    """Content digests of module texts (what the OPA readiness check compares)."""
    return frozenset(hashlib.sha256(t.encode()).hexdigest() for t in texts)
