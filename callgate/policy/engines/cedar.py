"""Embedded Cedar engine (cedarpy), the default engine.

Policy files live in ``<policy dir>/cedar/``:

* ``policies.cedar``   -- every policy carries ``@id("...")``; a ``permit`` carrying
  ``@confirm("why")`` turns an allow it determines into *confirm* (see docs/POLICIES.md);
* ``schema.cedarschema`` -- Cedar schema; policies are validated against it at load and every
  request and entity set is checked against it at evaluation;
* ``entities.json``    -- users, roles and any static resources.

Everything is parsed once into an immutable :class:`CedarPolicies` snapshot held by one engine; a
reload builds a new engine (and policy snapshot) and swaps the snapshot reference atomically, so a
request sees either the old or the new policies, never a mix.

Fail closed (spec 6.6, field notes): Cedar reports a ``forbid`` whose condition errors by
*skipping* it, so ``permit`` + erroring ``forbid`` comes back as Allow with diagnostics errors.
Any diagnostics error is therefore a deny (``policy_evaluation_error``); NoDecision and exceptions
are denies too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import cedarpy

from callgate.core.errors import ErrorCode, Violation, policy_invalid
from callgate.core.model import AuthzRequest, Decision, Effect, JSONValue, Reason
from callgate.policy.engines.base import Readiness, fault

log = logging.getLogger("callgate.engine.cedar")

ENGINE_NAME = "cedar"
ENTITY_CACHE_SIZE = 4096
"""At most this many cached entity sets per snapshot, and fewer for a large ``entities.json``:"""
ENTITY_CACHE_BYTES = 64 * 2**20
"""memory the cache may use. Each cached set is a full copy of the static entities plus the
request's principal and resource (cedarpy's ``with_added_json_str`` clones its base: measured
~2 bytes of memory per byte of ``entities.json``), so the entry count is capped at
``ENTITY_CACHE_BYTES / (2 x file size)``."""
PRINCIPAL_TYPE = "User"
RESOURCE_TYPE = "Resource"
ACTION_TYPE = "Action"
CONFIRM_ANNOTATION = "confirm"
SHADOW_ANNOTATION = "shadow"

_POLICY_REF = re.compile(r"policy `([^`]+)`")

# The request path calls cedarpy's extension function directly with the context already as a
# JSON string and reads its JSON answer as a dict: the public ``cedarpy.is_authorized`` does the
# same plus a ``json.dumps`` of the context and an ``AuthzResult`` wrapper per call (~20 us).
# The pinned cedarpy version (pyproject) is what this relies on; tests/test_engine_cedar.py
# drives allow, confirm, forbid, erroring forbid, NoDecision and exceptions through it.
_authorize_raw: Any = getattr(getattr(cedarpy, "_internal", None), "is_authorized_batch", None)


def _authorize(
    request: dict[str, Any], policy_set: Any, entities: cedarpy.Entities, schema: Any
) -> dict[str, Any]:
    """One Cedar decision as cedarpy's response dict (``decision``, ``diagnostics``)."""
    if _authorize_raw is not None:
        (answer,) = _authorize_raw([request], policy_set, entities._inner, schema, False)
        out: dict[str, Any] = json.loads(answer)
        return out
    public = dict(request, context=json.loads(request["context"]))  # pragma: no cover - other cedarpy
    r = cedarpy.is_authorized(public, policy_set, entities, schema)  # pragma: no cover
    return {  # pragma: no cover
        "decision": r.decision.value,
        "diagnostics": {"reason": list(r.diagnostics.reasons), "errors": list(r.diagnostics.errors)},
    }


class _ContextError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class CedarPolicies:
    """One parsed, validated Cedar snapshot. Immutable; swapped whole on reload."""

    policy_set: cedarpy.PolicySet
    schema: cedarpy.Schema
    entities: cedarpy.Entities
    entity_uids: frozenset[tuple[str, str]]
    policy_ids: Mapping[str, str]
    """Positional Cedar id (``policy0``) -> the policy's ``@id``."""
    confirm: Mapping[str, str]
    """Positional id -> ``@confirm`` text, for permits that require confirmation."""
    revision: str
    """``sha256:`` of the three files' bytes."""
    shadow_set: cedarpy.PolicySet | None = None
    """All policies including those marked ``@shadow``; ``policy_set`` then holds only the
    enforcing ones. ``None`` when no policy is in shadow mode."""
    entity_cache: OrderedDict[tuple[str, str, str], cedarpy.Entities] = field(
        default_factory=OrderedDict, compare=False, repr=False
    )
    """Per-snapshot LRU of entity sets with the request's principal/resource added."""
    entity_cache_max: int = ENTITY_CACHE_SIZE
    """Entries the LRU may hold for this snapshot (see :data:`ENTITY_CACHE_BYTES`)."""


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _statement_starts(text: str) -> list[int]:
    """Offsets where top-level Cedar statements start (split on ``;`` outside strings/comments)."""
    starts: list[int] = []
    i, n, start = 0, len(text), None
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if start is None and not c.isspace():
            start = i
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == ";":
            if start is not None:
                starts.append(start)
            start = None
        i += 1
    if start is not None:
        starts.append(start)
    return starts


def _locate_parse_error(text: str) -> int:
    """Best-effort line of the first statement Cedar cannot parse (cedarpy gives no location)."""
    starts = _statement_starts(text)
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(text)
        try:
            cedarpy.PolicySet.from_str(text[s:end])
        except ValueError:
            return _line_of(text, s)
    return 1


def _id_lines(text: str) -> dict[str, int]:
    return {m.group(1): _line_of(text, m.start()) for m in re.finditer(r'@id\(\s*"([^"]*)"\s*\)', text)}


def load_cedar_dir(directory: Path, shadow: Sequence[str] = ()) -> CedarPolicies:
    """Load, parse and validate ``policies.cedar``, ``schema.cedarschema`` and ``entities.json``.

    Raises :class:`LoadError` (``policy_invalid``) with ``file:line`` where it can be located.
    """
    pol_path = directory / "policies.cedar"
    sch_path = directory / "schema.cedarschema"
    ent_path = directory / "entities.json"
    texts: dict[Path, str] = {}
    for p in (pol_path, sch_path, ent_path):
        try:
            texts[p] = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise policy_invalid(f"cannot read: {exc.strerror}", source=str(p)) from None
    pol_text, sch_text, ent_text = texts[pol_path], texts[sch_path], texts[ent_path]

    try:
        schema = cedarpy.Schema.from_str(sch_text)
    except ValueError as exc:
        raise policy_invalid(str(exc), source=str(sch_path)) from None
    try:
        policy_set = cedarpy.PolicySet.from_str(pol_text)
        est = json.loads(cedarpy.policies_to_json_str(pol_text))
    except ValueError as exc:
        line = _locate_parse_error(pol_text)
        raise policy_invalid(f"syntax error: {exc}", source=f"{pol_path}:{line}") from None

    static: dict[str, Any] = est.get("staticPolicies", {})
    if est.get("templates"):
        raise policy_invalid("policy templates are not supported in policies.cedar", source=str(pol_path))
    id_lines = _id_lines(pol_text)
    policy_ids: dict[str, str] = {}
    confirm: dict[str, str] = {}
    seen: dict[str, str] = {}
    starts = _statement_starts(pol_text)
    for pos_id, body in static.items():
        ann: dict[str, str] = body.get("annotations") or {}
        index = int(pos_id.removeprefix("policy")) if pos_id.startswith("policy") else -1
        where = (
            f"{pol_path}:{_line_of(pol_text, starts[index])}" if 0 <= index < len(starts) else str(pol_path)
        )
        pid = ann.get("id")
        if not pid:
            raise policy_invalid(
                'every policy needs an @id("...") annotation (ids are the reasons callers see)', source=where
            )
        if pid in seen:
            raise policy_invalid(f"duplicate @id '{pid}'", source=where)
        seen[pid] = pos_id
        policy_ids[pos_id] = pid
        if CONFIRM_ANNOTATION in ann:
            if body.get("effect") != "permit":
                raise policy_invalid(
                    f"@confirm is only meaningful on permit policies ('{pid}' is a forbid)", source=where
                )
            confirm[pos_id] = ann[CONFIRM_ANNOTATION] or "confirmation required"

    shadow_ids = [
        pos
        for pos, body in static.items()
        if SHADOW_ANNOTATION in (body.get("annotations") or {}) or policy_ids.get(pos) in shadow
    ]
    shadow_set: cedarpy.PolicySet | None = None
    if shadow_ids:
        enforcing = {k: v for k, v in static.items() if k not in shadow_ids}
        shadow_set = policy_set
        policy_set = cedarpy.PolicySet.from_json_str(json.dumps({**est, "staticPolicies": enforcing}))

    result = cedarpy.validate_policies(pol_text, schema)
    if not result.validation_passed:
        violations = []
        first_line = 0
        for err in result.errors:
            pid = policy_ids.get(err.policy_id, err.policy_id)
            line = id_lines.get(pid, 0)
            first_line = first_line or line
            violations.append(
                Violation(pointer=f"policy:{pid}", message=err.error, keyword="cedar_validation")
            )
        raise policy_invalid(
            "policies do not validate against the schema: "
            + "; ".join(f"{v.pointer}: {v.message}" for v in violations),
            source=f"{pol_path}:{first_line}" if first_line else str(pol_path),
            violations=violations,
        )

    try:
        ent_json = json.loads(ent_text)
        entities = cedarpy.Entities.from_json_str(ent_text, schema)
    except (ValueError, json.JSONDecodeError) as exc:
        raise policy_invalid(str(exc), source=str(ent_path)) from None
    uids = frozenset((e["uid"]["type"], e["uid"]["id"]) for e in ent_json)
    warning = entities_size_warning(len(ent_text.encode()), str(ent_path))
    if warning:
        log.warning("%s", warning)

    digest = hashlib.sha256()
    for p in (pol_path, sch_path, ent_path):
        digest.update(p.name.encode() + b"\x00" + texts[p].encode() + b"\x00")
    digest.update(("shadow:" + ",".join(sorted(shadow))).encode())
    return CedarPolicies(
        policy_set=policy_set,
        schema=schema,
        entities=entities,
        entity_uids=uids,
        policy_ids=policy_ids,
        confirm=confirm,
        revision="sha256:" + digest.hexdigest(),
        shadow_set=shadow_set,
        entity_cache_max=entity_cache_capacity(len(ent_text.encode())),
    )


ENTITIES_WARN_BYTES = 256 * 1024


def entities_size_warning(entities_bytes: int, source: str) -> str:
    """A warning for an ``entities.json`` big enough to make uncached requests slow, or ``""``."""
    if entities_bytes <= ENTITIES_WARN_BYTES:
        return ""
    return (
        f"{source}: {entities_bytes // 1024} KiB of entities; every request whose principal or resource "
        "is not in the file copies the whole set (about 4 ms per MiB) and caches fewer copies "
        f"({entity_cache_capacity(entities_bytes)}): keep users and resources out of entities.json "
        "(docs/POLICIES.md)"
    )


def entity_cache_capacity(entities_bytes: int) -> int:
    """How many request entity sets to cache for a static ``entities.json`` of this size."""
    per_copy = 2 * entities_bytes + 4096
    return max(1, min(ENTITY_CACHE_SIZE, ENTITY_CACHE_BYTES // per_copy))


def to_cedar_value(value: JSONValue, path: str = "") -> Any:
    """Convert a JSON value to Cedar's JSON value form.

    Objects become records, arrays sets, integers Longs, non-integral numbers ``decimal``
    (at most 4 fractional digits, Cedar's decimal), ``null`` members are dropped (Cedar has no
    null). Keys starting with ``__`` are refused: they would let argument data forge Cedar entity
    references (``__entity``) or extension values (``__extn``).
    """
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise _ContextError(f"{path or '/'}: integer outside Cedar's Long range")
        return value
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        try:
            d = Decimal(repr(value))
        except InvalidOperation:
            raise _ContextError(f"{path or '/'}: number not representable") from None
        exp = d.as_tuple().exponent
        if not isinstance(exp, int) or exp < -4 or abs(d) >= Decimal("922337203685477.5807"):
            raise _ContextError(f"{path or '/'}: number not representable as a Cedar decimal")
        return {"__extn": {"fn": "decimal", "arg": format(d, "f")}}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k.startswith("__"):
                raise _ContextError(f"{path}/{k}: keys starting with '__' are reserved")
            if v is None:
                continue
            out[k] = to_cedar_value(v, f"{path}/{k}")
        return out
    if isinstance(value, list):
        return [to_cedar_value(v, f"{path}/{i}") for i, v in enumerate(value) if v is not None]
    raise _ContextError(f"{path or '/'}: unsupported value type")


def _sanitize_error(err: str, policy_ids: Mapping[str, str]) -> tuple[str, str]:
    """Map a Cedar diagnostics error to (policy id, message) without echoing request values."""
    m = _POLICY_REF.search(err)
    if m:
        pid = policy_ids.get(m.group(1), m.group(1))
        return pid, f"policy '{pid}' failed to evaluate"
    if "is not valid for" in err or "failed to build request" in err:
        return "", "request does not conform to the Cedar schema"
    return "", "policy evaluation failed"


class CedarEngine:
    """:class:`~callgate.policy.engines.base.Engine` over cedarpy, serving one immutable snapshot."""

    def __init__(self, policies: CedarPolicies) -> None:
        self._p = policies

    @property
    def name(self) -> str:
        return ENGINE_NAME

    @property
    def revision(self) -> str:
        return self._p.revision

    def _request_entities(self, p: CedarPolicies, req: AuthzRequest) -> list[dict[str, Any]]:
        added: list[dict[str, Any]] = []
        if (PRINCIPAL_TYPE, req.subject.id) not in p.entity_uids:
            added.append(
                {
                    "uid": {"type": PRINCIPAL_TYPE, "id": req.subject.id},
                    "attrs": {"tenant": req.subject.tenant},
                    "parents": [],
                }
            )
        if (RESOURCE_TYPE, req.resource) not in p.entity_uids:
            kind, _, name = req.resource.partition(":")
            added.append(
                {
                    "uid": {"type": RESOURCE_TYPE, "id": req.resource},
                    "attrs": {"kind": kind, "name": name, "tenant": req.subject.tenant},
                    "parents": [],
                }
            )
        return added

    def _entities_for(self, p: CedarPolicies, req: AuthzRequest) -> cedarpy.Entities:
        key = (req.subject.tenant, req.subject.id, req.resource)
        cache = p.entity_cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        added = self._request_entities(p, req)
        entities = p.entities.with_added_json_str(json.dumps(added), p.schema) if added else p.entities
        cache[key] = entities
        if len(cache) > p.entity_cache_max:
            cache.popitem(last=False)
        return entities

    def _decide(self, p: CedarPolicies, req: AuthzRequest) -> Decision:
        try:
            context = to_cedar_value(dict(req.context))
        except _ContextError as exc:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, f"context not representable in Cedar: {exc}")
        context["tenant"] = req.subject.tenant
        try:
            entities = self._entities_for(p, req)
            request = {
                "principal": {"type": PRINCIPAL_TYPE, "id": req.subject.id},
                "action": {"type": ACTION_TYPE, "id": req.capability},
                "resource": {"type": RESOURCE_TYPE, "id": req.resource},
                "context": json.dumps(context, ensure_ascii=False),
            }
            result = _authorize(request, p.policy_set, entities, p.schema)
            shadow = (
                _authorize(request, p.shadow_set, entities, p.schema) if p.shadow_set is not None else None
            )
        except Exception:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, "the Cedar engine raised an exception")
        decision = self._interpret(p, result)
        if shadow is not None:
            would = self._interpret(p, shadow)
            if would.effect is not decision.effect:
                decision = replace(
                    decision, shadow_effect=would.effect.value, shadow_policy_ids=would.policy_ids
                )
        return decision

    def _interpret(self, p: CedarPolicies, result: Mapping[str, Any]) -> Decision:
        try:  # every part must be there and well-typed: an answer we cannot read is no answer
            diag = result["diagnostics"]
            # "errors" must be present (it is what says the answer is trustworthy); "reason" is
            # absent when the request could not even be built (NoDecision).
            raw_errors, raw_reasons, verdict = diag["errors"], diag.get("reason", []), result["decision"]
            if not isinstance(raw_errors, list) or not isinstance(raw_reasons, list):
                raise TypeError("diagnostics lists expected")
            errors: list[str] = [str(e) for e in raw_errors]
            determining: list[str] = [str(r) for r in raw_reasons]
        except Exception:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_NO_DECISION, "Cedar returned an unreadable answer")
        if errors:
            reasons = []
            for e in errors:
                pid, msg = _sanitize_error(e, p.policy_ids)
                reasons.append(
                    Reason(code=ErrorCode.POLICY_EVALUATION_ERROR.value, policy_id=pid, message=msg)
                )
            return Decision(
                effect=Effect.DENY,
                reasons=tuple(reasons),
                engine=ENGINE_NAME,
                error_code=ErrorCode.POLICY_EVALUATION_ERROR.value,
            )
        if verdict == "Allow" and determining:  # an Allow always names the permits that made it
            confirms = [pid for pid in determining if pid in p.confirm]
            # Any satisfied @confirm permit makes the answer confirm, even when a plain permit
            # matches too: a broad permit must never silently bypass a confirmation. Authors
            # exempt principals explicitly (``unless { principal in Role::"admin" }``).
            if confirms:
                return Decision(
                    effect=Effect.CONFIRM,
                    reasons=tuple(
                        Reason(
                            code="confirm_required",
                            policy_id=p.policy_ids.get(pid, pid),
                            message=p.confirm[pid],
                        )
                        for pid in confirms
                    ),
                    engine=ENGINE_NAME,
                )
            return Decision(
                effect=Effect.ALLOW,
                reasons=tuple(
                    Reason(code="policy_permit", policy_id=p.policy_ids.get(pid, pid))
                    for pid in determining
                    if pid not in p.confirm
                ),
                engine=ENGINE_NAME,
            )
        if verdict == "Deny":
            if determining:
                return Decision(
                    effect=Effect.DENY,
                    reasons=tuple(
                        Reason(code="policy_forbid", policy_id=p.policy_ids.get(pid, pid))
                        for pid in determining
                    ),
                    engine=ENGINE_NAME,
                )
            return Decision(
                effect=Effect.DENY,
                reasons=(
                    Reason(code="no_matching_permit", message="no permit policy matched (default deny)"),
                ),
                engine=ENGINE_NAME,
            )
        return fault(ENGINE_NAME, ErrorCode.ENGINE_NO_DECISION, "Cedar returned no decision")

    def authorize_batch_sync(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        """Synchronous form (Cedar is in-process and takes tens of microseconds)."""
        p = self._p  # one snapshot for the whole batch
        return [self._decide(p, r) for r in requests]

    async def authorize_batch(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        return self.authorize_batch_sync(requests)

    async def ready(self) -> bool:
        return True

    async def readiness(self) -> Readiness:
        """Embedded: ready once built (the policies were parsed and validated at load)."""
        return Readiness(True, f"embedded Cedar policies {self._p.revision}")

    async def load_policies(self) -> None:
        """Embedded: the policies are in process already (no-op)."""
        return None

    async def close(self) -> None:
        return None
