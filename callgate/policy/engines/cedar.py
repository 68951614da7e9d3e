"""Embedded Cedar engine (cedarpy), the default engine.

Policy files live in ``<policy dir>/cedar/``:

* ``policies.cedar``   -- every policy carries ``@id("...")``; a ``permit`` carrying
  ``@confirm("why")`` turns an allow it determines into *confirm* (see docs/POLICIES.md);
* ``schema.cedarschema`` -- Cedar schema; policies are validated against it at load and every
  request and entity set is checked against it at evaluation;
* ``entities.json``    -- users, roles and any static resources.

``schema.cedarschema`` and ``entities.json`` are optional (legacy): actions they do not declare
come from the ToolSpecs, users and roles from ``<policy dir>/principals.json``
(:mod:`callgate.policy.declare`).

Everything is parsed once into an immutable :class:`CedarPolicies` snapshot held by one engine; a
reload builds a new engine (and policy snapshot) and swaps the snapshot reference atomically, so a
request sees either the old or the new policies, never a mix.

Fail closed (spec 6.6, field notes): Cedar reports a ``forbid`` whose condition errors by
*skipping* it, so ``permit`` + erroring ``forbid`` comes back as Allow with diagnostics errors.
Any diagnostics error is therefore a deny (``policy_evaluation_error``); NoDecision and exceptions
are denies too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cedarpy

from callgate.base.errors import ErrorCode, Violation, policy_invalid
from callgate.base.model import AuthzRequest, Decision, Effect, JSONValue, Reason
from callgate.native import load_native, native_missing
from callgate.policy.conformance import NOT_CONFORMING, conformance_violations
from callgate.policy.declare import declared
from callgate.policy.engines.base import Readiness, combine, fault
from callgate.policy.engines.cedar_declare import (
    ActionContext,
    cedar_declared_contexts,
    cedar_entities,
    cedar_schema,
    cedar_text_actions,
    cedar_time_plans,
)
from callgate.policy.engines.cedar_slices import (
    LITERALS,
    EntityIndex,
    LineIndex,
    PolicySlices,
    Slice,
    build_slices,
    est_chunked,
    literal_uids,
    release_free_memory,
    release_incrementally,
    statement_spans,
    validate_grouped,
)
from callgate.policy.reach import Reach
from callgate.policy.sessionuse import SessionUse
from callgate.policy.textflags import TEXT_KEY
from callgate.policy.timevalues import NO_PLAN, Instant, Span, TimePlan, cedar_time_context

if TYPE_CHECKING:
    from callgate._native import Answer, CedarSnapshot

log = logging.getLogger("callgate.engine.cedar")

ENGINE_NAME = "cedar"
ENTITY_CACHE_SIZE = 4096
"""At most this many cached request entity slices per snapshot. A slice is the principal, the
resource, the action and what is reachable from them (:mod:`cedar_slices`), never a copy of the
whole ``entities.json``, so an entry's size does not depend on the size of the file."""
NATIVE_CONTEXT_PROJECTION = True
"""The compiled core's one-call Propose decision builds, type-checks and evaluates only the part
of the Cedar context each action's policies read (docs/NATIVE.md, "The Cedar context"); tests
set it to False to compare against the whole context (read when a snapshot is prepared)."""
PRINCIPAL_TYPE = "User"
RESOURCE_TYPE = "Resource"
ACTION_TYPE = "Action"
CONFIRM_ANNOTATION = "confirm"
SHADOW_ANNOTATION = "shadow"

ANSWERS_MAX = 256
"""Distinct answers of the compiled core an engine keeps read as :class:`Decision` values."""
DETACH_MIN_BYTES = 4096
"""A compiled-core call on at least this many bytes of input releases the GIL; a smaller one (tens
of microseconds) keeps it. On the event loop's thread, taking the GIL back after a short release
waits for whichever thread took it meanwhile (the SQLite writer, gRPC's threads): measured at
several times the call itself (docs/BENCHMARKS.md, "Issue 15: the hot path")."""

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


class SnapshotCores(StrEnum):
    """Which Cedar forms a load prepares (docs/NATIVE.md, "Cedar in the compiled core")."""

    BOTH = "both"
    """cedarpy's and the compiled core's (the parity suite: the reference beside the core)."""
    PYTHON = "python"
    """cedarpy's only (``[core] engine = "python"``, or no compiled core built)."""
    NATIVE = "native"
    """The compiled core's only, entities read by the core itself (it serves decisions). When the
    core cannot take the snapshot, cedarpy's form is built instead, with the reason logged; a
    snapshot neither can take is refused (``policy_invalid``)."""


@dataclass(frozen=True, slots=True)
class CedarPolicies:
    """One parsed, validated Cedar snapshot. Immutable; swapped whole on reload."""

    schema: cedarpy.Schema
    entities: EntityIndex | None
    """The static entities, once; a request gets its slice (:meth:`EntityIndex.slice_json`).
    None when only the compiled core serves (it holds them)."""
    slices: PolicySlices
    """One prepared policy set per action (what a request is evaluated against); their
    ``policy_set`` is None when only the compiled core serves."""
    policy_ids: Mapping[str, str]
    """Positional Cedar id (``policy0``) -> the policy's ``@id``."""
    confirm: Mapping[str, str]
    """Positional id -> ``@confirm`` text, for permits that require confirmation."""
    revision: str
    """``sha256:`` of the three files' bytes."""
    entity_cache: OrderedDict[tuple[str, str, str, str], cedarpy.Entities] = field(
        default_factory=OrderedDict, compare=False, repr=False
    )
    """Per-snapshot LRU of request entity slices (tenant, principal, resource, action)."""
    entity_cache_max: int = ENTITY_CACHE_SIZE
    """Entries the LRU may hold for this snapshot."""
    native: Any = field(default=None, compare=False, repr=False)
    """The same snapshot prepared in the compiled core (``callgate._native.CedarSnapshot``), or
    None when the core is not built; the engine uses it once the core seam enables it."""
    time_plans: Mapping[str, TimePlan] = field(default_factory=dict)
    """Action -> the time values its schema declares (``context.now``, ``datetime`` /
    ``duration`` arguments: :mod:`callgate.policy.timevalues`); absent: none."""
    text_actions: frozenset[str] = frozenset()
    """The actions whose schema declares ``context.text`` (:mod:`callgate.policy.textflags`);
    the others never get it."""
    reach: Reach | None = field(default=None, compare=False, repr=False)
    """What each principal could ever be allowed (ListTools by policy, :mod:`callgate.policy.reach`)."""
    contexts: Mapping[str, ActionContext] = field(default_factory=dict, compare=False, repr=False)
    """Action -> its context as the schema text declares it: where a request Cedar finds not
    conforming misfits (:mod:`callgate.policy.conformance`)."""
    session_use: SessionUse | None = field(default=None, compare=False, repr=False)
    """Which actions' requests must carry ``context.session`` (:mod:`callgate.policy.sessionuse`)."""
    python: bool = True
    """Whether cedarpy's form (policy sets, :attr:`entities`) was built; when not, the compiled
    core decides whatever the seam says (:meth:`CedarEngine.use_native`)."""


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


_SPECIAL = re.compile(r'//|["\;]')
_NONSPACE = re.compile(r"\S")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)


def _statement_starts(text: str) -> list[int]:
    """Offsets where top-level Cedar statements start (split on ``;`` outside strings/comments).

    Jumps from one significant character (``//``, ``"``, ``;``) to the next: linear, and fast on
    a file of 10,000 policies (issue 15)."""
    starts: list[int] = []
    i, n, start = 0, len(text), None
    while True:
        m = _SPECIAL.search(text, i)
        end = m.start() if m is not None else n
        if start is None:
            ns = _NONSPACE.search(text, i, end)
            if ns is not None:
                start = ns.start()
        if m is None:
            break
        tok = m.group()
        if tok == "//":
            j = text.find("\n", end)
            i = n if j < 0 else j + 1
            continue
        if start is None:
            start = end
        if tok == '"':
            sm = _STRING.match(text, end)
            i = sm.end() if sm is not None else n
        else:
            starts.append(start)
            start = None
            i = m.end()
    if start is not None:
        starts.append(start)
    return starts


_UNEXPECTED = re.compile(r"unexpected token `([^`]+)`")


def _locate_parse_error(text: str) -> tuple[int, int]:
    """Best-effort ``(line, column)`` of a syntax error: the first statement Cedar cannot parse,
    and in it the token Cedar names (cedarpy gives no location). Column 0: the statement's line
    only (the message names no token, or no cut before one reproduces it)."""
    starts = _statement_starts(text)
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(text)
        try:
            cedarpy.PolicySet.from_str(text[s:end])
        except ValueError as exc:
            at = _unexpected_token_at(text, s, end, str(exc))
            if at is None:
                return _line_of(text, s), 0
            return _line_of(text, at), at - text.rfind("\n", 0, at)
    return 1, 0


def _unexpected_token_at(text: str, start: int, end: int, message: str) -> int | None:
    """Offset of the token an ``unexpected token `X``` message is about: the first occurrence of
    ``X`` in the statement whose text cut right after it already fails with ``message`` (every
    cut before the real error fails as an unexpected end of input instead); failing that, cut
    after the token that follows it (the parser may need that one to see the error)."""
    m = _UNEXPECTED.search(message)
    if m is None:
        return None
    found = list(re.finditer(re.escape(m.group(1)), text[start:end]))
    for lookahead in (False, True):
        for occurrence in found:
            cut = start + occurrence.end()
            if lookahead:
                following = _NEXT_TOKEN.search(text, cut, end)
                if following is None:
                    continue
                cut = following.end()
            try:
                cedarpy.PolicySet.from_str(text[start:cut])
            except ValueError as exc:
                if str(exc) == message:
                    return start + occurrence.start()
    return None


_NEXT_TOKEN = re.compile(r"\w+|\S")


def _id_lines(text: str, lines: LineIndex | None = None) -> dict[str, int]:
    index = lines or LineIndex(text)
    return {m.group(1): index.line_of(m.start()) for m in re.finditer(r'@id\(\s*"([^"]*)"\s*\)', text)}


POLICY_FILE = "policies.cedar"
"""The usual policy file; every ``*.cedar`` file of the folder is loaded with it as one set."""


def policy_files(directory: Path) -> list[Path]:
    """The ``*.cedar`` files of ``directory`` (``policies.cedar`` first, then by name; hidden
    files and ConfigMap ``..`` entries skipped), all loaded as one policy set. When there are
    none, ``[policies.cedar]`` (its read then fails, naming it)."""
    found = sorted(
        (p for p in directory.glob("*.cedar") if not p.name.startswith(".")),
        key=lambda p: (p.name != POLICY_FILE, p.name),
    )
    return found or [directory / POLICY_FILE]


class _PolicyFiles:
    """The policy files joined into one text, and where each line of it came from."""

    def __init__(self, parts: Sequence[tuple[Path, str]]) -> None:
        self.parts = list(parts)
        chunks: list[str] = []
        self._starts: list[tuple[int, Path]] = []  # (first global line, file)
        line = 1
        for path, text in self.parts:
            if chunks and not chunks[-1].endswith("\n"):
                chunks.append("\n")
                line += 1
            self._starts.append((line, path))
            chunks.append(text)
            line += text.count("\n")
        self.text = "".join(chunks)

    def where(self, global_line: int) -> str:
        """``file:line`` of a line of the joined text."""
        first, path = self._starts[0]
        for start, p in self._starts:
            if start <= global_line:
                first, path = start, p
        return f"{path}:{global_line - first + 1}"


SCHEMAS_KEPT = 2
"""Parsed schemas kept for the next loads (by text): see :func:`_parsed_schema`."""
_schemas: OrderedDict[str, cedarpy.Schema] = OrderedDict()
_schemas_lock = threading.Lock()


def _parsed_schema(text: str) -> cedarpy.Schema:
    """cedarpy's parse of ``text``, shared by the snapshots loaded from the same schema text.

    Freeing a cedarpy ``Schema`` holds the GIL for its whole drop (110-130 ms for 1,000 actions,
    measured on a loaded box), in whichever thread drops it: a reload that leaves the schema
    unchanged (the common case) reuses the parsed one, so neither the loader nor the event loop
    (retiring the old snapshot) frees it. Only a schema change frees the oldest of the last
    :data:`SCHEMAS_KEPT`. Raises ``ValueError`` as ``Schema.from_str``."""
    key = hashlib.sha256(text.encode()).hexdigest()
    with _schemas_lock:
        hit = _schemas.get(key)
        if hit is not None:
            _schemas.move_to_end(key)
            return hit
    schema = cedarpy.Schema.from_str(text, release_gil=True)
    with _schemas_lock:
        _schemas[key] = schema
        evicted = [_schemas.popitem(last=False)[1] for _ in range(max(0, len(_schemas) - SCHEMAS_KEPT))]
    del evicted  # outside the lock
    return schema


def load_cedar_dir(
    directory: Path,
    shadow: Sequence[str] = (),
    cores: SnapshotCores = SnapshotCores.BOTH,
    *,
    reach: bool = True,
    reach_solver_ms: int = 0,
) -> CedarPolicies:
    """Load, parse and validate every ``*.cedar`` file (one policy set: ``policies.cedar`` and any
    other, :func:`policy_files`), ``schema.cedarschema`` and ``entities.json``.

    Linear in the size of the files (issue 15): one index of line offsets, Cedar's JSON form built
    in chunks of statements, validation per group of policies (:mod:`cedar_slices`); the long
    Cedar calls release the GIL, so a reload in a worker thread does not stall serving. ``cores``
    says which forms to prepare (:class:`SnapshotCores`; the server asks for one). ``reach``: read
    what each principal could be allowed (``policy.list_by_policy``, :mod:`callgate.policy.reach`);
    ``reach_solver_ms`` > 0: settle the pairs that reading cannot decide with the symbolic compiler
    within that bound (``policy.list_by_policy_solver_ms``, :mod:`callgate.policy.reach_solve`).

    Raises :class:`LoadError` (``policy_invalid``) with ``file:line`` where it can be located.
    """
    pol_paths = policy_files(directory)
    pol_path = pol_paths[0] if len(pol_paths) == 1 else directory / "*.cedar"
    sch_path = directory / "schema.cedarschema"
    ent_path = directory / "entities.json"
    texts: dict[Path, str] = {}
    for p in (*pol_paths, sch_path, ent_path):
        if p in (sch_path, ent_path) and not p.exists():
            continue  # declared once instead (callgate/policy/declare.py)
        try:
            texts[p] = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise policy_invalid(f"cannot read: {exc.strerror}", source=str(p)) from None
    # Every *.cedar file is one policy set: their texts joined, each line mapped back to its file.
    files = _PolicyFiles([(p, texts[p]) for p in pol_paths])
    # One declaration per tool: actions nobody declares come from the ToolSpecs, users and roles
    # from principals.json (the hand-written schema and entities.json still load: legacy)
    decl = declared(directory.parent)
    texts[sch_path] = cedar_schema(decl, texts.get(sch_path))
    texts[ent_path] = cedar_entities(decl, texts.get(ent_path), str(ent_path))
    pol_text, sch_text, ent_text = files.text, texts[sch_path], texts[ent_path]

    try:
        schema = _parsed_schema(sch_text)
    except ValueError as exc:
        raise policy_invalid(str(exc), source=str(sch_path)) from None
    lines = LineIndex(pol_text)
    starts = _statement_starts(pol_text)
    spans = statement_spans(starts, len(pol_text))
    try:
        est = est_chunked(pol_text, spans) or json.loads(cedarpy.policies_to_json_str(pol_text))
    except ValueError as exc:
        for path, text in files.parts:
            try:
                cedarpy.policies_to_json_str(text)
            except ValueError as part_exc:
                line, column = _locate_parse_error(text)
                where = f"{path}:{line}:{column}" if column else f"{path}:{line}"
                raise policy_invalid(f"syntax error: {part_exc}", source=where) from None
        line, column = _locate_parse_error(pol_text)
        where = files.where(line) + (f":{column}" if column else "")
        raise policy_invalid(f"syntax error: {exc}", source=where) from None

    static: dict[str, Any] = est.get("staticPolicies", {})
    if est.get("templates"):
        raise policy_invalid("policy templates are not supported in *.cedar files", source=str(pol_path))
    id_lines = _id_lines(pol_text, lines)
    policy_ids: dict[str, str] = {}
    confirm: dict[str, str] = {}
    seen: dict[str, str] = {}
    for pos_id, body in static.items():
        ann: dict[str, str] = body.get("annotations") or {}
        index = int(pos_id.removeprefix("policy")) if pos_id.startswith("policy") else -1
        where = files.where(lines.line_of(starts[index])) if 0 <= index < len(starts) else str(pol_path)
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

    shadow_ids = {
        pos
        for pos, body in static.items()
        if SHADOW_ANNOTATION in (body.get("annotations") or {}) or policy_ids.get(pos) in shadow
    }

    # Cedar's action hierarchy, from the action entities it derives from the schema.
    _, graph = EntityIndex.build(str(cedarpy.Entities.from_json_str("[]", schema)), {})
    if not validate_grouped(spans, pol_text, static, schema, graph):
        result = cedarpy.validate_policies(pol_text, schema, release_gil=True)
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
                source=files.where(first_line) if first_line else str(pol_path),
                violations=violations,
            )

    literal_static = {k: static[k] for k in est.get(LITERALS, static)}
    warning = entities_size_warning(len(ent_text.encode()), str(ent_path))
    if warning:
        log.warning("%s", warning)

    enforcing = [k for k in static if k not in shadow_ids]
    # When the statements line up with the policies (they do unless the splitter was fooled),
    # slices are parsed from their text; the positional ids then come from each slice's order.
    aligned = len(spans) == len(static) and all(f"policy{k}" in static for k in range(len(spans)))
    stmts = {f"policy{k}": pol_text[a:b] for k, (a, b) in enumerate(spans)} if aligned else None
    has_shadow = bool(shadow_ids)

    native: Any = None
    entity_index: EntityIndex | None = None
    declined = ""
    if cores is SnapshotCores.NATIVE:
        slices = build_slices(
            static, enforcing, has_shadow, graph, PRINCIPAL_TYPE, RESOURCE_TYPE, stmts, python=False
        )
        native, declined = native_loaded(sch_text, slices, policy_ids, confirm, ent_text, literal_static)
    if native is None:
        try:
            entities = cedarpy.Entities.from_json_str(ent_text, schema, release_gil=True)
            rendered = str(entities)  # explicit JSON (__entity / __extn): a slice parses without the schema
            del entities
            entity_index, graph = EntityIndex.build(rendered, literal_static)
            del rendered
        except (ValueError, json.JSONDecodeError) as exc:
            raise policy_invalid(str(exc), source=str(ent_path)) from None
        if declined:
            log.warning(
                "Cedar: the compiled core cannot take this snapshot (%s); cedarpy serves it", declined
            )
        slices = build_slices(static, enforcing, has_shadow, graph, PRINCIPAL_TYPE, RESOURCE_TYPE, stmts)
        if cores is SnapshotCores.BOTH:
            native = native_snapshot(sch_text, slices, policy_ids, confirm, entity_index)

    descendants = graph.descendants()
    reading = (
        Reach.build(
            static,
            enforcing,
            descendants,
            ent_text,
            principal_type=PRINCIPAL_TYPE,
            resource_type=RESOURCE_TYPE,
            action_type=ACTION_TYPE,
        )
        if reach
        else None
    )
    contexts = cedar_declared_contexts(sch_text)
    if reading is not None and reach_solver_ms > 0:
        from callgate.policy.reach_solve import settle_reach  # its prover runner imports this module

        settle_reach(
            reading,
            directory=directory,
            policies=pol_text,
            schema=sch_text,
            shadow=tuple(shadow),
            actions=[a for a, c in contexts.items() if c.declared],
            wall_ms=reach_solver_ms,
        )
    session_use = SessionUse.build(static, descendants, contexts, action_type=ACTION_TYPE)
    time_plans = cedar_time_plans(sch_text)
    if native is not None:
        declare_now = getattr(native, "declare_now", None)
        if declare_now is not None:
            declare_now(sorted(a for a, plan in time_plans.items() if plan.now))
        projected = getattr(native, "projected_actions", None)
        if projected is not None:
            log.info("Cedar: %d action(s) run with a context projection", projected())
    digest = hashlib.sha256()
    for p in (*pol_paths, sch_path, ent_path):
        digest.update(p.name.encode() + b"\x00" + texts[p].encode() + b"\x00")
    digest.update(("shadow:" + ",".join(sorted(shadow))).encode())
    # Cedar's JSON form of every policy is ~100 objects per policy: freed entry by entry so this
    # thread never holds the GIL for one long deallocation (docs/LIMITS.md, "Reloads").
    for table in (stmts, literal_static, static, est):
        if table is not None:
            release_incrementally(table)
    del texts, ent_text, stmts, static, est
    release_free_memory()  # what the load freed (parse copies) goes back to the OS
    return CedarPolicies(
        schema=schema,
        entities=entity_index,
        slices=slices,
        policy_ids=policy_ids,
        confirm=confirm,
        revision="sha256:" + digest.hexdigest(),
        native=native,
        time_plans=time_plans,
        text_actions=cedar_text_actions(sch_text),
        reach=reading,
        contexts=contexts,
        session_use=session_use,
        python=entity_index is not None,
    )


def native_loaded(
    schema_text: str,
    slices: PolicySlices,
    policy_ids: Mapping[str, str],
    confirm: Mapping[str, str],
    entities_json: str,
    literal_static: Mapping[str, Any],
) -> tuple[Any, str]:
    """The snapshot prepared by the compiled core alone, entities read from ``entities.json`` by
    the core (checked against the schema there, held once), as ``(snapshot, "")``; or
    ``(None, why)`` when the core is not built or cannot take it (cedarpy's form is then built)."""
    mod = load_native()
    if mod is None:
        return None, f"the compiled core is {native_missing()}"
    cls = getattr(mod, "CedarSnapshot", None)
    load = getattr(cls, "load", None)
    if load is None:
        return None, "this build of the compiled core cannot load entities"
    sources, enforcing, default, shadow = _native_slices(slices)
    try:
        return (
            load(
                schema_text,
                sources,
                enforcing,
                default,
                shadow,
                dict(policy_ids),
                dict(confirm),
                entities_json,
                literal_uids(literal_static),
                ENTITY_CACHE_SIZE,
                NATIVE_CONTEXT_PROJECTION,
            ),
            "",
        )
    except ValueError as exc:
        return None, str(exc)


def _native_slices(
    slices: PolicySlices,
) -> tuple[list[tuple[str, bool, list[str]]], dict[str, int], int, tuple[dict[str, int], int] | None]:
    """The distinct slices as the compiled core takes them: sources and slice numbers."""
    numbers: dict[int, int] = {}
    sources: list[tuple[str, bool, list[str]]] = []

    def number(part: Slice) -> int:
        key = id(part)
        if key not in numbers:
            numbers[key] = len(sources)
            sources.append((part.source, part.source_json, list(part.ids)))
        return numbers[key]

    enforcing = {a: number(s) for a, s in slices.by_action.items()}
    default = number(slices.default)
    shadow = None
    if slices.shadow_by_action is not None and slices.shadow_default is not None:
        shadow = ({a: number(s) for a, s in slices.shadow_by_action.items()}, number(slices.shadow_default))
    return sources, enforcing, default, shadow


def native_snapshot(
    schema_text: str,
    slices: PolicySlices,
    policy_ids: Mapping[str, str],
    confirm: Mapping[str, str],
    entities: EntityIndex,
) -> Any:
    """The snapshot prepared in the compiled core (docs/NATIVE.md), from the slices and entity
    index the Python load computed (so both evaluate the same policy sets on the same entities),
    or None when ``callgate._native`` is not built or cannot take it (the Python path then runs)."""
    mod = load_native()
    if mod is None:
        return None
    cls = getattr(mod, "CedarSnapshot", None)
    if cls is None:
        return None
    sources, enforcing, default, shadow = _native_slices(slices)
    try:
        return cls(
            schema_text,
            sources,
            enforcing,
            default,
            shadow,
            dict(policy_ids),
            dict(confirm),
            [entities.fragment(n) for n in range(len(entities))],
            {int(n): list(t) for n, t in entities.edges.items()},
            list(entities.always),
            ENTITY_CACHE_SIZE,
            NATIVE_CONTEXT_PROJECTION,
        )
    except ValueError as exc:
        log.warning("Cedar: the compiled core cannot take this snapshot (%s); cedarpy serves it", exc)
        return None


ENTITIES_WARN_BYTES = 16 * 2**20


def entities_size_warning(entities_bytes: int, source: str) -> str:
    """A warning for an ``entities.json`` big enough to weigh on memory and reloads, or ``""``."""
    if entities_bytes <= ENTITIES_WARN_BYTES:
        return ""
    return (
        f"{source}: {entities_bytes // 1024} KiB of entities; requests read only their slice, but the set "
        "is held in memory (about 2x the file) and parsed at every load and reload: keep per-request "
        "users and resources out of entities.json (docs/POLICIES.md)"
    )


def entity_cache_capacity(entities_bytes: int) -> int:
    """How many request entity slices to cache (a slice does not grow with the file)."""
    del entities_bytes
    return ENTITY_CACHE_SIZE


def to_cedar_value(value: JSONValue, path: str = "") -> Any:
    """Convert a JSON value to Cedar's JSON value form.

    Objects become records, arrays sets, integers Longs, non-integral numbers ``decimal``
    (at most 4 fractional digits, Cedar's decimal), ``null`` members are dropped (Cedar has no
    null). Keys starting with ``__`` are refused: they would let argument data forge Cedar entity
    references (``__entity``) or extension values (``__extn``).

    The conversion runs without building a path per value (60 KB of records: ~2x faster); only
    a value it refuses is converted again with paths, for the message.
    """
    try:
        return _cedar_fast(value)
    except _ContextError:
        return _cedar_value(value, path)


_LONG_MIN, _LONG_MAX = -(2**63), 2**63


def _cedar_fast(value: Any) -> Any:
    """:func:`_cedar_value` for exact JSON types, without paths; anything else (a subclass, a
    refusal) raises :class:`_ContextError` and the caller converts again with paths."""
    t = type(value)
    if t is str or t is bool:
        return value
    if t is int:
        if _LONG_MIN <= value < _LONG_MAX:
            return value
        raise _ContextError
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if v is None:
                if k.startswith("__"):
                    raise _ContextError
                continue
            if k.startswith("__"):
                raise _ContextError
            out[k] = _cedar_fast(v)
        return out
    if t is list:
        return [_cedar_fast(v) for v in value if v is not None]
    if t is float:
        return _cedar_value(value)
    if t is Instant or t is Span:
        return value.cedar
    raise _ContextError


def _cedar_value(value: JSONValue, path: str = "") -> Any:
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
    if isinstance(value, Decimal):  # a decimal argument (the ``decimal`` normalizer)
        if not value.is_finite() or abs(value) >= Decimal("922337203685477.5807"):
            raise _ContextError(f"{path or '/'}: decimal out of Cedar's range")
        try:
            arg = format(value.quantize(Decimal("0.0001")), "f")
        except InvalidOperation:
            raise _ContextError(f"{path or '/'}: decimal not representable") from None
        if Decimal(arg) != value:
            raise _ContextError(f"{path or '/'}: more than 4 fractional digits (Cedar's decimal)")
        return {"__extn": {"fn": "decimal", "arg": arg}}
    if isinstance(value, (Instant, Span)):  # a time value (callgate/policy/timevalues.py)
        return value.cedar
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k.startswith("__"):
                raise _ContextError(f"{path}/{k}: keys starting with '__' are reserved")
            if v is None:
                continue
            out[k] = _cedar_value(v, f"{path}/{k}")
        return out
    if isinstance(value, list):
        return [_cedar_value(v, f"{path}/{i}") for i, v in enumerate(value) if v is not None]
    raise _ContextError(f"{path or '/'}: unsupported value type")


def _sanitize_error(err: str, policy_ids: Mapping[str, str], part: Slice | None = None) -> tuple[str, str]:
    """Map a Cedar diagnostics error to (policy id, message) without echoing request values."""
    m = _POLICY_REF.search(err)
    if m:
        pos = part.global_id(m.group(1)) if part is not None else m.group(1)
        pid = policy_ids.get(pos, pos)
        return pid, f"policy '{pid}' failed to evaluate"
    if "is not valid for" in err or "failed to build request" in err:
        return "", NOT_CONFORMING
    return "", "policy evaluation failed"


def _position(pos_id: str) -> tuple[int, str]:
    """Sort key of a positional id (``policy12``) by its place in the file."""
    n = pos_id.removeprefix("policy")
    return (int(n) if n.isdigit() else 2**62, pos_id)


def _compiled_decision(answer: tuple[str, list[tuple[str, str, str]], str]) -> Decision:
    effect, reasons, error_code = answer
    return Decision(
        effect=Effect(effect),
        reasons=tuple(Reason(code=c, policy_id=pid, message=m) for c, pid, m in reasons),
        engine=ENGINE_NAME,
        error_code=error_code,
    )


def _with_shadow(
    main: tuple[str, list[tuple[str, str, str]], str],
    shadow: tuple[str, list[tuple[str, str, str]], str] | None,
) -> Decision:
    """One capability's decision from the compiled core's answers (the shadow effect reported
    when it differs, as :meth:`CedarEngine._decide` does)."""
    decision = _compiled_decision(main)
    if shadow is not None:
        would = _compiled_decision(shadow)
        if would.effect is not decision.effect:
            decision = replace(decision, shadow_effect=would.effect.value, shadow_policy_ids=would.policy_ids)
    return decision


def _release(p: CedarPolicies) -> None:
    p.entity_cache.clear()
    for table in (p.slices.by_action, p.slices.shadow_by_action, p.slices.sizes, p.policy_ids, p.confirm):
        if isinstance(table, dict):
            while table:
                table.popitem()  # each entry dropped on its own: the GIL switches between


class CedarEngine:
    """:class:`~callgate.policy.engines.base.Engine` over cedarpy, serving one immutable snapshot."""

    def __init__(self, policies: CedarPolicies) -> None:
        self._p = policies
        self._closed = False
        self._native = not policies.python and policies.native is not None
        self._answers: dict[Any, Decision] = {}
        """The compiled core's answers, as read (:func:`_with_shadow`): a handful per snapshot."""

    def use_native(self, on: bool) -> bool:
        """Decide in the compiled core (``on``, when the snapshot has one) or through cedarpy.
        Set by the core seam (``[core] engine``, :class:`callgate.propose.core.Core`); returns
        whether the compiled core now decides. A snapshot loaded for the compiled core alone
        (:attr:`SnapshotCores.NATIVE`) has no cedarpy form: the core decides it either way."""
        self._native = (on or not self._p.python) and self._p.native is not None
        return self._native

    @property
    def native(self) -> bool:
        """Whether the compiled core decides (``callgate serve`` names it)."""
        return self._native

    @property
    def native_snapshot(self) -> CedarSnapshot | None:
        """The compiled snapshot when the compiled core decides and the engine is open, else
        None: the one-call Propose decision (:meth:`callgate.propose.core.Core.front`) runs on
        it, and :meth:`decide_answers` reads its answers."""
        snap: CedarSnapshot | None = self._p.native if self._native and not self._closed else None
        return snap

    def decide_answers(self, answers: Sequence[tuple[Answer, Answer | None]]) -> Decision:
        """The combined decision of the compiled core's ``(enforcing, shadow)`` answers, one per
        capability: what :meth:`authorize_batch` and ``combine`` give for the same requests."""
        return combine([_with_shadow(main, shadow) for main, shadow in answers], ENGINE_NAME)

    @property
    def name(self) -> str:
        return ENGINE_NAME

    @property
    def revision(self) -> str:
        return self._p.revision

    @property
    def compiled(self) -> CedarEngine:
        """Cedar is decided by the compiled core when it is built (:class:`CompiledDecider`)."""
        return self

    @property
    def reach(self) -> Reach | None:
        """ListTools by policy (:mod:`callgate.policy.reach`); None: show every allowlisted tool."""
        return self._p.reach

    @property
    def session_use(self) -> SessionUse | None:
        """Which actions' requests carry ``context.session`` (:mod:`callgate.policy.sessionuse`)."""
        return self._p.session_use

    @property
    def time_plans(self) -> Mapping[str, TimePlan]:
        """Action -> the time values its schema declares (:mod:`callgate.policy.timevalues`)."""
        return self._p.time_plans

    @property
    def text_actions(self) -> frozenset[str]:
        """The actions whose schema declares ``context.text`` (:mod:`callgate.policy.textflags`)."""
        return self._p.text_actions

    def conformance_violations(
        self, decision: Decision, capabilities: Sequence[str], args: Any
    ) -> list[Violation] | None:
        """When Cedar denied ``decision`` because the request does not conform to the schema
        (either engine marks it :data:`NOT_CONFORMING`): the violations naming the argument and
        the action (:mod:`callgate.policy.conformance`); else None."""
        if decision.effect is not Effect.DENY or not any(
            r.message == NOT_CONFORMING for r in decision.reasons
        ):
            return None
        return conformance_violations(self._p.contexts, capabilities, args)

    def _request_entities(self, p: CedarPolicies, req: AuthzRequest) -> list[dict[str, Any]]:
        if p.entities is None:
            raise RuntimeError("cedarpy's form of this snapshot was not built")
        added: list[dict[str, Any]] = []
        if (PRINCIPAL_TYPE, req.subject.id) not in p.entities:
            added.append(
                {
                    "uid": {"type": PRINCIPAL_TYPE, "id": req.subject.id},
                    "attrs": {"tenant": req.subject.tenant},
                    "parents": [],
                }
            )
        if (RESOURCE_TYPE, req.resource) not in p.entities:
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
        """The request's entity slice: principal, resource, action and what they reach, plus the
        principal/resource built from the request when the file does not have them (checked
        against the schema, as a whole set would have been). Cached per snapshot (small LRU)."""
        key = (req.subject.tenant, req.subject.id, req.resource, req.capability)
        cache = p.entity_cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        added = self._request_entities(p, req)
        added_json = [json.dumps(e, ensure_ascii=False) for e in added]
        if added:
            cedarpy.Entities.from_json_str("[" + ",".join(added_json) + "]", p.schema)  # raises if invalid
        roots = [
            (PRINCIPAL_TYPE, req.subject.id),
            (RESOURCE_TYPE, req.resource),
            (ACTION_TYPE, req.capability),
        ]
        assert p.entities is not None  # checked by _request_entities
        entities = cedarpy.Entities.from_json_str(p.entities.slice_json(roots, added_json))
        cache[key] = entities
        if len(cache) > p.entity_cache_max:
            cache.popitem(last=False)
        return entities

    def _decide(self, p: CedarPolicies, req: AuthzRequest) -> Decision:
        try:
            context = to_cedar_value(
                cedar_time_context(req.context, p.time_plans.get(req.capability, NO_PLAN))
            )
            if req.capability not in p.text_actions:
                context.pop(TEXT_KEY, None)  # an action whose schema does not declare it
        except _ContextError as exc:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, f"context not representable in Cedar: {exc}")
        context["tenant"] = req.subject.tenant
        if self._native:
            return self._decide_native(p, req, context)
        try:
            entities = self._entities_for(p, req)
            request = {
                "principal": {"type": PRINCIPAL_TYPE, "id": req.subject.id},
                "action": {"type": ACTION_TYPE, "id": req.capability},
                "resource": {"type": RESOURCE_TYPE, "id": req.resource},
                "context": json.dumps(context, ensure_ascii=False),
            }
            enforcing = p.slices.enforcing(req.capability)
            result = _authorize(request, enforcing.policy_set, entities, p.schema)
            shadow_slice = p.slices.shadow(req.capability)
            shadow = (
                _authorize(request, shadow_slice.policy_set, entities, p.schema)
                if shadow_slice is not None
                else None
            )
        except Exception:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, "the Cedar engine raised an exception")
        decision = self._interpret(p, result, enforcing)
        if shadow is not None and shadow_slice is not None:
            would = self._interpret(p, shadow, shadow_slice)
            if would.effect is not decision.effect:
                decision = replace(
                    decision, shadow_effect=would.effect.value, shadow_policy_ids=would.policy_ids
                )
        return decision

    def _decide_native(self, p: CedarPolicies, req: AuthzRequest, context: dict[str, Any]) -> Decision:
        """The same decision in the compiled core (same slices, entities, mapping and denies)."""
        try:
            context_json = json.dumps(context, ensure_ascii=False)
            main, shadow = p.native.authorize(
                req.subject.id,
                req.capability,
                req.resource,
                req.subject.tenant,
                context_json,
                len(context_json) >= DETACH_MIN_BYTES,
            )
            key = (main[0], tuple(main[1]), main[2], shadow and (shadow[0], tuple(shadow[1]), shadow[2]))
            decision = self._answers.get(key)
            if decision is None:
                if len(self._answers) >= ANSWERS_MAX:
                    self._answers.clear()
                decision = self._answers[key] = _with_shadow(main, shadow)
        except Exception:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, "the Cedar engine raised an exception")
        return decision

    def _interpret(self, p: CedarPolicies, result: Mapping[str, Any], part: Slice) -> Decision:
        try:  # every part must be there and well-typed: an answer we cannot read is no answer
            diag = result["diagnostics"]
            # "errors" must be present (it is what says the answer is trustworthy); "reason" is
            # absent when the request could not even be built (NoDecision).
            raw_errors, raw_reasons, verdict = diag["errors"], diag.get("reason", []), result["decision"]
            if not isinstance(raw_errors, list) or not isinstance(raw_reasons, list):
                raise TypeError("diagnostics lists expected")
            errors: list[str] = [str(e) for e in raw_errors]
            determining: list[str] = [part.global_id(str(r)) for r in raw_reasons]
            determining.sort(key=_position)  # Cedar reports a set: in file order
        except Exception:
            return fault(ENGINE_NAME, ErrorCode.ENGINE_NO_DECISION, "Cedar returned an unreadable answer")
        if errors:
            reasons = []
            for e in errors:
                pid, msg = _sanitize_error(e, p.policy_ids, part)
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
        if self._closed:  # a retired snapshot's engine: its slices are being released
            return [
                fault(ENGINE_NAME, ErrorCode.ENGINE_ERROR, "the Cedar engine was closed") for _ in requests
            ]
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
        """Release the snapshot's prepared policy sets in a worker thread, one at a time: freeing
        a large set at once (~50 ms for 10,000 policies) would hold the event loop."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(_release, self._p)
