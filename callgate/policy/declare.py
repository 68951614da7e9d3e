"""One declaration per tool (issue 12 item 2): what a ToolSpec and the principals file imply,
as an engine-neutral model.

A ToolSpec already types every argument (its ``normalized_schema``, else its ``input_schema``, and
its ``decimal`` normalizers). From it this module derives, for each required capability, the
typed :class:`ToolDecl` (its action class, its argument record as an :class:`ArgType`, its
meters and labels); from one **principals file**, ``<policy dir>/principals.json`` (users, roles,
tenants, static resources), the :class:`Principals`, so users and roles are written once for every
engine. :func:`declared` is both, the :class:`Declared` of a policy folder.

Each engine renders it in its own language through its folder's
:attr:`~callgate.policy.engines.factory.PolicyFolder.render_declarations` (the Cedar schema and
entities: :mod:`callgate.policy.engines.cedar_declare`; the Rego data:
:mod:`callgate.policy.engines.rego_declare`), merged with what the policy folder still declares by
hand (the legacy files keep working): an action the hand-written schema declares is not generated
(:func:`check_tools` reports where the two disagree); an action nobody declares is generated
(:func:`actions_of`). Users in both the principals file and a legacy entity file are refused (one
source). ``docs/POLICIES.md`` has the layout. This module names no engine.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import jsonschema

from callgate.arguments.parse import ParseLimits, parse_json_document
from callgate.base import jsonpointer
from callgate.base.errors import CallgateError, LoadError, policy_invalid
from callgate.policy.meters import declared_usage
from callgate.policy.timevalues import field_kind, is_null_schema, non_null

if TYPE_CHECKING:
    from callgate.policy.engines.factory import PolicyFolder

__all__ = [
    "PRINCIPALS_FILE",
    "GROUPS",
    "GROUP_OF_CLASS",
    "TIME_TYPES",
    "ArgType",
    "Declared",
    "Principals",
    "Problem",
    "ToolDecl",
    "actions_of",
    "admits_more",
    "arg_place",
    "check_tools",
    "close_objects",
    "declared",
    "load_principals",
    "read_json",
    "rendered",
    "tool_declarations",
    "tool_typing",
    "type_diff",
    "ToolTyping",
    "Unseen",
]

PRINCIPALS_FILE: Final = "principals.json"
GROUPS: Final = ("read", "create", "modify", "delete")
GROUP_OF_CLASS: Final[Mapping[str, str]] = {
    "read_only": "read",
    "create": "create",
    "modify": "modify",
    "delete": "delete",
}
TIME_TYPES: Final = frozenset({"datetime", "duration"})
"""Cedar's extension types of time values (``context.now``, date/date-time/duration arguments)."""

log = logging.getLogger("callgate.policy.declare")

_LIMITS: Final = ParseLimits(max_bytes=16 * 1024 * 1024, max_depth=64)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing ``callgate check`` reports: the file, the place in it, what is wrong."""

    file: str
    place: str
    message: str
    warning: bool = False
    """Reported, but no reason to refuse the set (e.g. a tool every request of which is denied:
    fail closed already)."""

    def __str__(self) -> str:
        return f"{self.file}: {self.place}: {self.message}" if self.place else f"{self.file}: {self.message}"


@dataclass(frozen=True, slots=True)
class ArgType:
    """An argument's type as both engines see it: ``String``, ``Long``, ``Bool``, ``decimal``,
    ``Set`` (``element``) or ``Record`` (``fields``: name, type, required)."""

    kind: str
    element: ArgType | None = None
    fields: tuple[tuple[str, ArgType, bool], ...] = ()

    def cedar(self) -> str:
        """The type as written (Cedar's notation, ``Set<String>``, ``{ a?: Long }``): how
        ``callgate check`` and a ``schema_violation`` show it, and what
        :mod:`callgate.policy.engines.cedar_declare` writes in a generated action."""
        if self.kind == "Set":
            assert self.element is not None
            return f"Set<{self.element.cedar()}>"
        if self.kind == "Record":
            return _cedar_record(self.fields)
        return self.kind


def _cedar_record(fields: Iterable[tuple[str, ArgType, bool]]) -> str:
    inner = ", ".join(f"{_cedar_name(n)}{'' if req else '?'}: {t.cedar()}" for n, t, req in fields)
    return "{ " + inner + " }" if inner else "{}"


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _cedar_name(name: str) -> str:
    return name if _IDENT.fullmatch(name) else json.dumps(name, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolDecl:
    """What one ToolSpec declares for the engines."""

    key: str
    source: str
    capabilities: tuple[str, ...]
    group: str
    args: ArgType | None
    """A ``Record``: the arguments the policy sees (``context.args``); None when an argument has
    no policy type (:attr:`error` says which): an error only when the action must be generated
    (a hand-written schema may declare it as it likes)."""
    error: LoadError | None = field(default=None, compare=False)
    labels: bool = field(default=False, compare=False)
    """The ToolSpec declares ``result_labels`` (then every generated action has ``context.session``)."""
    usage: str = ""
    """The Cedar type of ``context.usage`` (its declared meters, :mod:`callgate.policy.meters`);
    empty when the ToolSpec declares none."""
    unseen: tuple[Unseen, ...] = field(default=(), compare=False)
    """Arguments and members of arguments with no policy type, left out of :attr:`args` (and of
    ``context.args`` where the action is generated)."""


class _TypeError(Exception):
    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.message = message


@dataclass(frozen=True, slots=True)
class Unseen:
    """An argument, or a member of one (nested in its records or in the records of its Sets),
    with no policy type (a union of two types, a free-form object, a number without a decimal
    normalizer...): the tool is served, the argument is validated against its schema and bound
    into the digest, and that one part is left out of ``context.args`` of the actions generated
    for the tool, the rest of the argument kept (docs/MCP.md, "Arguments as policies see
    them")."""

    name: str
    """The top-level argument it is (in)."""
    pointer: str
    """The schema pointer of the part that has no policy type (in the ToolSpec file)."""
    why: str
    source: str
    """``file:line`` of :attr:`pointer`."""
    field: str = ""
    """The field pointer of what is left out (``/where/meta``; ``*`` for the items of a Set,
    ``/points/*/meta``); ``/`` + :attr:`name` for a whole argument."""

    @property
    def path(self) -> str:
        """:attr:`field` as :func:`type_diff` and ``callgate check`` name it (``where.meta``,
        ``points[].meta``)."""
        tokens = jsonpointer.split(self.field or "/" + _esc(self.name))
        return "".join("[]" if t == "*" else f".{t}" if i else t for i, t in enumerate(tokens))


@dataclass(frozen=True, slots=True)
class _Scope:
    """What typing one ToolSpec schema reads besides the node: the schema a local ``$ref``
    resolves in, its pointer in the ToolSpec, the fields a ``decimal`` normalizer makes decimal."""

    root: Any
    base: str
    decimals: frozenset[str]


_SHAPE_KEYS: Final = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "items")
"""Keywords that decide a schema's JSON type (the others only constrain or annotate it)."""
_UNRESOLVED: Final = object()


def _unwrapped(
    node: Any, schema_ptr: str, scope: _Scope, refs: frozenset[str]
) -> tuple[Any, str, frozenset[str]]:
    """``node`` as its type reads: a local ``$ref`` (``#/$defs/Model``: Pydantic's nested models
    and enums) resolved, a one-schema ``allOf`` wrapper (``{"allOf": [{"$ref": ...}],
    "default": ...}``) and a nullable union (:func:`~callgate.policy.timevalues.non_null`)
    unwrapped, repeatedly; with the schema pointer of what is left (for messages)."""
    while isinstance(node, Mapping):
        others = [k for k in _SHAPE_KEYS if k in node]
        if "$ref" in node:
            ref = node["$ref"]
            if others != ["$ref"]:
                raise _TypeError(schema_ptr, "a $ref beside other type keywords has no single policy type")
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise _TypeError(
                    f"{schema_ptr}/$ref", "only a $ref into the same schema (#/$defs/...) has a policy type"
                )
            if ref in refs:
                raise _TypeError(f"{schema_ptr}/$ref", f"a recursive $ref ({ref}) has no policy type")
            target = _at(scope.root, unquote(ref[1:]))
            if target is _UNRESOLVED:
                raise _TypeError(f"{schema_ptr}/$ref", f"{ref} is not in the schema")
            node, schema_ptr, refs = target, scope.base + unquote(ref[1:]), refs | {ref}
            continue
        all_of = node.get("allOf")
        if others == ["allOf"] and isinstance(all_of, list) and len(all_of) == 1:
            node, schema_ptr = all_of[0], f"{schema_ptr}/allOf/0"
            continue
        inner = non_null(node)
        if inner is not node:
            key = "anyOf" if "anyOf" in node else "oneOf"
            at = next(i for i, b in enumerate(node[key]) if b is inner)
            node, schema_ptr = inner, f"{schema_ptr}/{key}/{at}"
            continue
        break
    return node, schema_ptr, refs


def _at(root: Any, pointer: str) -> Any:
    node = root
    try:
        for token in jsonpointer.split(pointer):
            node = node[int(token)] if isinstance(node, list) else node[token]
    except (KeyError, IndexError, TypeError, ValueError):
        return _UNRESOLVED
    return node


def _arg_type(
    node: Any,
    schema_ptr: str,
    field_ptr: str,
    scope: _Scope,
    top: bool = False,
    refs: frozenset[str] = frozenset(),
    unseen: list[tuple[str, _TypeError]] | None = None,
) -> ArgType:
    """``node``'s policy type. With ``unseen``, a member of a record (also nested, also in the
    records of a Set) that has none is left out of its record and listed there as (field
    pointer, why); without, it raises :class:`_TypeError`."""
    if field_ptr in scope.decimals:
        return ArgType("decimal")
    time_kind = field_kind(node) if top else None
    if time_kind is not None:  # a top-level date, date-time or duration (callgate/policy/timevalues.py)
        return ArgType(time_kind.cedar_type)
    node, schema_ptr, refs = _unwrapped(node, schema_ptr, scope, refs)
    if not isinstance(node, Mapping):
        raise _TypeError(schema_ptr, "not a schema object")
    for key in ("enum", "const"):
        if key in node:
            values = node[key] if key == "enum" else [node[key]]
            kinds = {_scalar_kind(v) for v in values if v is not None} if isinstance(values, list) else {None}
            if len(kinds) == 1 and None not in kinds:
                (kind,) = kinds
                assert kind is not None
                return ArgType(kind)
            raise _TypeError(f"{schema_ptr}/{key}", f"{key} values must be all strings, integers or booleans")
    raw = node.get("type")
    if raw is None:
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                return _union(node[key], f"{schema_ptr}/{key}", field_ptr, scope, refs)
    types = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
    types = [t for t in types if t != "null"]
    if len(types) != 1:
        raise _TypeError(
            schema_ptr,
            "needs exactly one JSON type (other than null) to have a policy type"
            + ("; a number or string amount needs a decimal normalizer" if "number" in types else ""),
        )
    t = types[0]
    if t == "string":
        return ArgType("String")
    if t == "integer":
        return ArgType("Long")
    if t == "boolean":
        return ArgType("Bool")
    if t == "number":
        raise _TypeError(
            f"{schema_ptr}/type",
            "a JSON number has no exact policy type: declare a decimal normalizer with a scale "
            "(docs/NORMALIZATION.md) or use integer",
        )
    if t == "array":
        items = node.get("items")
        if not isinstance(items, Mapping):
            raise _TypeError(schema_ptr, "an array needs an 'items' schema to have a policy type (Set)")
        element = _arg_type(items, f"{schema_ptr}/items", f"{field_ptr}/*", scope, refs=refs, unseen=unseen)
        return ArgType("Set", element=element)
    if t == "object":
        if "properties" not in node and node.get("additionalProperties", True) is not False:
            raise _TypeError(
                schema_ptr,
                "an object with no declared properties (a free-form map) has no policy type (a record)",
            )
        return _record(node, schema_ptr, field_ptr, scope, refs, unseen)
    raise _TypeError(f"{schema_ptr}/type", f"type {t!r} has no policy type")


def _union(
    branches: list[Any], schema_ptr: str, field_ptr: str, scope: _Scope, refs: frozenset[str]
) -> ArgType:
    """An ``anyOf`` / ``oneOf`` of several non-null schemas: typed only when every branch has the
    same policy type (zod's unions of string formats); a union of two types has none."""
    found = [
        _arg_type(b, f"{schema_ptr}/{i}", field_ptr, scope, refs=refs)
        for i, b in enumerate(branches)
        if not is_null_schema(b)
    ]
    if found and all(t == found[0] for t in found):
        return found[0]
    kinds = ", ".join(sorted({t.cedar() for t in found}))
    raise _TypeError(
        schema_ptr,
        f"a union of {len(found)} schemas of different policy types ({kinds}) has no single policy type",
    )


def _scalar_kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return "Bool"
    if isinstance(v, int):
        return "Long"
    if isinstance(v, str):
        return "String"
    return None


def _record(
    node: Mapping[str, Any],
    schema_ptr: str,
    field_ptr: str,
    scope: _Scope,
    refs: frozenset[str] = frozenset(),
    unseen: list[tuple[str, _TypeError]] | None = None,
) -> ArgType:
    """The record of ``node``'s properties. With ``unseen``, a property with no policy type (here
    or in a record below: :func:`_arg_type`) is left out of its record and listed there (field
    pointer, why) instead of refusing the record; the record keeps every member that has one."""
    props = node.get("properties", {})
    if not isinstance(props, Mapping):
        raise _TypeError(f"{schema_ptr}/properties", "must be an object")
    required = node.get("required", [])
    required = set(required) if isinstance(required, list) else set()
    fields = []
    for name, sub in sorted(props.items()):
        try:
            t = _arg_type(
                sub,
                f"{schema_ptr}/properties/{_esc(name)}",
                f"{field_ptr}/{_esc(name)}",
                scope,
                not field_ptr,
                refs,
                unseen,
            )
        except _TypeError as exc:
            if unseen is None:
                raise
            unseen.append((f"{field_ptr}/{_esc(name)}", exc))
            continue
        fields.append((name, t, name in required))
    return ArgType("Record", fields=tuple(fields))


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _line(text: str, pointer: str) -> int:
    from callgate.base import jsonpositions

    return jsonpositions.locate(text, pointer)[0]


def read_json(path: Path) -> Any:
    try:
        return parse_json_document(path.read_bytes(), _LIMITS)
    except OSError as exc:
        raise policy_invalid(f"cannot read: {exc.strerror}", source=str(path)) from None
    except CallgateError as exc:
        raise policy_invalid(f"not strict JSON: {exc.message}", source=str(path)) from None


def tool_declaration(path: Path) -> ToolDecl:
    """The declaration of one ToolSpec file. Raises :class:`LoadError` naming ``file:line`` and
    the schema pointer of an argument that has no policy type."""
    doc = read_json(path)
    if not isinstance(doc, Mapping):
        raise policy_invalid("a ToolSpec is an object", source=str(path))
    text = path.read_text(encoding="utf-8", errors="replace")
    member = "normalized_schema" if isinstance(doc.get("normalized_schema"), Mapping) else "input_schema"
    decimals = frozenset(
        str(n.get("field"))
        for n in doc.get("normalizers", []) or []
        if isinstance(n, Mapping) and n.get("kind") == "decimal"
    )
    args: ArgType | None = None
    error: LoadError | None = None
    left_out: list[tuple[str, _TypeError]] = []
    root = doc.get(member, {})
    try:
        args = _record(root, f"/{member}", "", _Scope(root, f"/{member}", decimals), unseen=left_out)
    except _TypeError as exc:
        error = policy_invalid(f"{exc.pointer}: {exc.message}", source=f"{path}:{_line(text, exc.pointer)}")
    unseen = tuple(
        Unseen(
            jsonpointer.split(field)[0], exc.pointer, exc.message, f"{path}:{_line(text, exc.pointer)}", field
        )
        for field, exc in left_out
    )
    caps = doc.get("required_capabilities", [])
    return ToolDecl(
        usage=declared_usage(doc, str(path)),
        labels=bool(doc.get("result_labels")),
        key=f"{doc.get('name')}@{doc.get('version')}",
        source=str(path),
        capabilities=tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else (),
        group=GROUP_OF_CLASS.get(str(doc.get("side_effect_class")), "read"),
        args=args,
        error=error,
        unseen=unseen if error is None else (),
    )


def tool_declarations(tools_dir: Path) -> list[ToolDecl]:
    """Every ToolSpec under ``tools_dir`` (``*.json``, sorted)."""
    if not tools_dir.is_dir():
        return []
    return [tool_declaration(p) for p in sorted(tools_dir.glob("*.json"))]


def actions_of(
    decls: Iterable[ToolDecl], declared_by_hand: Container[str] = (), *, strict: bool = True
) -> dict[str, ToolDecl]:
    """Capability -> the declaration that types it, for the capabilities not ``declared_by_hand``.
    A capability that two ToolSpecs type differently (an action has one context type) is a
    :class:`LoadError` when ``strict`` (no hand-written schema: every action must be generated). A
    capability whose ToolSpec has an argument without a policy type is left undeclared and logged
    (so is a conflict when not ``strict``): the ToolSpecs that require it are refused alone, not
    served (:func:`tool_typing`), and the rest of the set loads."""
    out: dict[str, ToolDecl] = {}
    skipped: set[str] = set()
    for d in decls:
        for cap in d.capabilities:
            if cap in GROUPS or cap in declared_by_hand or cap in skipped:
                continue
            problem = d.error
            other = out.get(cap)
            if (
                problem is None
                and other is not None
                and (other.args != d.args or other.group != d.group or other.usage != d.usage)
            ):
                problem = policy_invalid(
                    f"capability '{cap}' is typed differently by {other.source} ({other.key}); "
                    "one capability has one argument type: declare it once or give it another name",
                    source=d.source,
                )
            if problem is not None:
                if strict and d.error is None:  # an untyped argument refuses its tool, not the set
                    raise problem
                log.warning(
                    "%s: %s: action %s not generated (declare it by hand)",
                    problem.source,
                    problem.message,
                    cap,
                )
                skipped.add(cap)
                out.pop(cap, None)
                continue
            out.setdefault(cap, d)
    return out


# -- the principals file ------------------------------------------------------------------------

_PRINCIPALS_SCHEMA: Final = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "tenants": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
        "roles": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"parents": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "users": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tenant"],
                "properties": {
                    "tenant": {"type": "string", "minLength": 1},
                    "roles": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                },
            },
        },
        "resources": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tenant"],
                "properties": {"tenant": {"type": "string", "minLength": 1}},
            },
        },
    },
}
_PRINCIPALS_VALIDATOR: Final = jsonschema.Draft202012Validator(_PRINCIPALS_SCHEMA)


@dataclass(frozen=True, slots=True)
class Principals:
    """``principals.json``: users (tenant, roles), roles (parent roles), tenants, resources."""

    source: str
    tenants: tuple[str, ...]
    roles: Mapping[str, tuple[str, ...]]
    users: Mapping[str, tuple[str, tuple[str, ...]]]
    """User id -> (tenant, roles)."""
    resources: Mapping[str, str]
    """Resource id (``kind:name``) -> tenant."""


def load_principals(policy_dir: Path) -> Principals | None:
    """``<policy_dir>/principals.json``, or None when there is none. Raises :class:`LoadError`
    naming the file, line and JSON pointer of the first problem."""
    path = policy_dir / PRINCIPALS_FILE
    if not path.is_file():
        return None
    doc = read_json(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    errors = sorted(_PRINCIPALS_VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        ptr = "".join(f"/{_esc(str(p))}" for p in e.absolute_path)
        raise policy_invalid(f"{ptr or '/'}: {e.message}", source=f"{path}:{_line(text, ptr)}")

    def fail(ptr: str, message: str) -> LoadError:
        return policy_invalid(f"{ptr}: {message}", source=f"{path}:{_line(text, ptr)}")

    tenants = tuple(doc.get("tenants", []))
    roles = {r: tuple(v.get("parents", [])) for r, v in doc.get("roles", {}).items()}
    for r, parents in roles.items():
        for p in parents:
            if p not in roles:
                raise fail(f"/roles/{_esc(r)}/parents", f"role '{p}' is not declared under /roles")
    users: dict[str, tuple[str, tuple[str, ...]]] = {}
    for u, v in doc.get("users", {}).items():
        if tenants and v["tenant"] not in tenants:
            raise fail(f"/users/{_esc(u)}/tenant", f"tenant '{v['tenant']}' is not declared under /tenants")
        for r in v.get("roles", []):
            if r not in roles:
                raise fail(f"/users/{_esc(u)}/roles", f"role '{r}' is not declared under /roles")
        users[u] = (v["tenant"], tuple(v.get("roles", [])))
    resources: dict[str, str] = {}
    for rid, v in doc.get("resources", {}).items():
        if ":" not in rid:
            raise fail(f"/resources/{_esc(rid)}", "a resource id is 'kind:name'")
        resources[rid] = v["tenant"]
    return Principals(str(path), tenants, roles, users, resources)


# -- what the engines load ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Declared:
    """What a policy folder declares once, for every engine (each renders it:
    :attr:`~callgate.policy.engines.factory.PolicyFolder.render_declarations`)."""

    tools: tuple[ToolDecl, ...]
    principals: Principals | None


def declared(policy_dir: Path) -> Declared:
    """The ToolSpecs' declarations and the principals file of ``policy_dir``. Raises LoadError."""
    return Declared(tuple(tool_declarations(policy_dir / "tools")), load_principals(policy_dir))


def rendered(policy_dir: Path, folder: PolicyFolder) -> Mapping[Path, str]:
    """What ``policy_dir`` declares once, in the language of the engine reading ``folder`` (its
    :attr:`~callgate.policy.engines.factory.PolicyFolder.render_declarations`): file -> text.
    Raises LoadError."""
    return folder.render_declarations(policy_dir, declared(policy_dir))


# -- which ToolSpecs an engine's schema can type ------------------------------------------------


def close_objects(node: Any, *, deep: bool = True) -> None:
    """Set ``additionalProperties: false`` (unless the schema says otherwise) on an object schema
    that declares ``properties``, and when ``deep`` on every such object below it (through
    ``properties``, ``items``, the branch of a nullable union, a one-schema ``allOf`` and the
    ``$defs`` / ``definitions`` that local ``$ref`` s point into). A generated action types ``context.args`` as a record of the
    declared properties, which has no room for others (Cedar's records, nested too; the Rego
    contract checks the top level only): closed, an undeclared argument is a ``schema_violation``
    naming it, before any policy, not an evaluation error."""
    if not isinstance(node, dict):
        return
    if deep and non_null(node) is not node:  # the one branch of a nullable union
        close_objects(non_null(node))
    props = node.get("properties")
    if isinstance(props, dict):
        node.setdefault("additionalProperties", False)
        if deep:
            for sub in props.values():
                close_objects(sub)
    if deep:
        close_objects(node.get("items"))
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:  # Pydantic v1's {"allOf": [{"$ref": ...}]}
            close_objects(all_of[0])
        for key in ("$defs", "definitions"):  # the targets of local $refs (nested models)
            defs = node.get(key)
            if isinstance(defs, dict):
                for sub in defs.values():
                    close_objects(sub)


@dataclass(frozen=True, slots=True)
class ToolTyping:
    """How the engine's schema types each ToolSpec (keyed by ToolSpec file)."""

    refused: Mapping[str, Problem]
    """ToolSpecs not served: a capability they require has no action (the ToolSpec's schema is
    not an object of properties, and no hand-written declaration). Refused alone: the rest of the
    set serves."""
    own_record: frozenset[str]
    """ToolSpecs whose every action is generated from their own arguments (so an argument their
    schema does not declare can never conform: :func:`close_objects`)."""
    unseen: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """ToolSpec file -> the field pointers (:attr:`Unseen.field`) of the arguments and members
    left out of ``context.args`` (no policy type, :class:`Unseen`) because an action of the tool
    is generated: still validated and bound into the digest, never seen by a policy."""
    notes: tuple[Problem, ...] = ()
    """One warning per argument in :attr:`unseen`, naming ``file:line`` and the pointer."""


def tool_typing(policy_dir: Path, folder: PolicyFolder) -> ToolTyping:
    """:class:`ToolTyping` of ``policy_dir`` for an engine reading ``folder`` (its
    registration's :attr:`~callgate.policy.engines.factory.EngineFactory.folder`)."""
    try:
        decls = tool_declarations(policy_dir / "tools")
    except LoadError:
        return ToolTyping({}, frozenset())  # loading the ToolSpecs reports it
    hand = folder.hand_declared(policy_dir)
    generated = actions_of(decls, hand, strict=False)
    refused: dict[str, Problem] = {}
    own: set[str] = set()
    unseen: dict[str, frozenset[str]] = {}
    notes: list[Problem] = []
    for d in decls:
        caps = [c for c in d.capabilities if c not in GROUPS]
        mine = [c for c in caps if c in generated]
        if d.unseen and mine:  # the generated record has no room for them: left out for every action
            unseen[d.source] = frozenset(u.field for u in d.unseen)
            notes.extend(_unseen_problem(d, u, mine[0]) for u in d.unseen)
        missing = [c for c in caps if c not in hand and c not in generated]
        if missing:
            why = d.error.message if d.error is not None else f"capability {missing[0]!r} has no action"
            refused[d.source] = Problem(
                d.error.source if d.error is not None else d.source,
                f"tool {d.key}",
                f"{why}: the tool is refused and not served (the rest of the set is); declare "
                f"action {missing[0]!r} by hand with the full context, or give the argument a "
                'policy type (docs/MCP.md, "Arguments as policies see them")',
                warning=True,
            )
        elif caps and all(c in generated and generated[c].args == d.args for c in caps):
            own.add(d.source)
    return ToolTyping(refused, frozenset(own), unseen, tuple(notes))


def _unseen_problem(d: ToolDecl, u: Unseen, cap: str) -> Problem:
    return Problem(
        u.source,
        f"tool {d.key}",
        f"{u.pointer}: {u.why}: argument '{u.path}' is left out of context.args of action '{cap}' "
        "(the tool is served; the argument is still validated against its schema and bound into "
        "the digest; a policy that reads it fails callgate check); declare the action by hand to "
        'type it (docs/MCP.md, "Arguments as policies see them")',
        warning=True,
    )


# -- callgate check: ToolSpec argument types against the hand-written schemas -------------------


def type_diff(prefix: str, want: ArgType, have: ArgType, skip: Container[str] = ()) -> list[str]:
    """Where ``have`` (the engine's schema) differs from ``want`` (the ToolSpec), by path;
    ``skip``: the arguments and members the ToolSpec cannot type (:attr:`Unseen.path` of
    :attr:`ToolDecl.unseen`), which a
    hand-written schema types as it likes (``callgate check`` warns where the ToolSpec admits
    values it has no room for: :func:`admits_more`)."""
    if want.kind != have.kind and not (want.kind in TIME_TYPES and have.kind == "String"):
        # a hand-written String keeps a time argument a string (the legacy form)
        return [f"{prefix}: the ToolSpec makes it {want.cedar()}, the schema {have.cedar()}"]
    if want.kind == "Set":
        assert want.element is not None and have.element is not None
        return type_diff(f"{prefix}[]", want.element, have.element, skip)
    if want.kind != "Record":
        return []
    out: list[str] = []
    w = {n: (t, r) for n, t, r in want.fields}
    h = {n: (t, r) for n, t, r in have.fields}
    for name in sorted(w.keys() | h.keys()):
        path = f"{prefix}.{name}" if prefix else name
        if path in skip:
            continue
        if name not in h:
            out.append(
                f"{path}: in the ToolSpec, not declared in the schema (a request carrying it is denied)"
            )
        elif name not in w:
            if h[name][1]:
                out.append(f"{path}: required by the schema, not in the ToolSpec (every request is denied)")
        else:
            (wt, wr), (ht, hr) = w[name], h[name]
            if not wr and hr:
                out.append(
                    f"{path}: optional in the ToolSpec, required by the schema (a call without it is denied)"
                )
            out.extend(type_diff(path, wt, ht, skip))
    return out


def _open_places(
    node: Any, have: ArgType, ptr: str, root: Any = None, base: str = ""
) -> list[tuple[str, str]]:
    """Where a ToolSpec schema ``node`` admits arguments the record ``have`` cannot hold: an
    object not closed (``additionalProperties`` other than false), a property with no single
    policy type where the record types it; (schema pointer, what)."""
    if not isinstance(node, Mapping):
        return []
    out: list[tuple[str, str]] = []
    if have.kind == "Record":
        if node.get("additionalProperties", True) is not False:
            out.append((ptr, "admits arguments its properties do not declare"))
        props = node.get("properties", {})
        fields = {n: t for n, t, _ in have.fields}
        for name, sub in sorted(props.items()) if isinstance(props, Mapping) else ():
            t = fields.get(name)
            if t is None:
                continue  # the type diff below names it
            sub_ptr = f"{ptr}/properties/{_esc(name)}"
            if t.kind in ("Record", "Set"):
                out.extend(_open_places(sub, t, sub_ptr, root, base))
                continue
            try:
                _arg_type(sub, sub_ptr, sub_ptr, _Scope(root, base, frozenset()))
            except _TypeError:
                if t.kind not in TIME_TYPES and t.kind != "decimal":
                    out.append(
                        (sub_ptr, f"admits values of other types than the {t.cedar()} declared for it")
                    )
    elif have.kind == "Set" and have.element is not None:
        out.extend(_open_places(node.get("items"), have.element, f"{ptr}/items", root, base))
    return out


def admits_more(d: ToolDecl, cap: str, schema_path: Path, have: ArgType, text: str) -> list[Problem]:
    """Warnings for a ToolSpec whose schema admits arguments the hand-written action's
    ``context.args`` cannot hold: such a call is refused (``schema_violation`` naming the
    argument, :mod:`callgate.policy.conformance`), never allowed."""
    try:
        doc = read_json(Path(d.source))
    except LoadError:
        return []
    if not isinstance(doc, Mapping):
        return []
    member = "normalized_schema" if isinstance(doc.get("normalized_schema"), Mapping) else "input_schema"
    return [
        Problem(
            f"{d.source}:{_line(text, ptr)}",
            f"tool {d.key}",
            f"{ptr}: {what}, which action {cap} in {schema_path} has no room for "
            "(a call carrying one is refused as a schema_violation naming it): close the schema "
            "(additionalProperties: false, one type) or declare them in the action's context.args",
            warning=True,
        )
        for ptr, what in _open_places(doc.get(member), have, f"/{member}", doc.get(member), f"/{member}")
    ]


def arg_place(text: str, arg: str) -> str:
    """``line N`` of the ToolSpec ``text`` where the top-level argument of the path ``arg``
    (``a.b[]``, as :func:`type_diff` names it) is declared."""
    top = arg.split(".", 1)[0].split("[", 1)[0]
    ptr = f"/input_schema/properties/{_esc(top)}" if top else "/input_schema"
    return f"line {_line(text, ptr)}"


def check_tools(policy_dir: Path, folders: Iterable[PolicyFolder]) -> list[Problem]:
    """ToolSpec argument types checked against what each engine folder declares by hand (issue 12
    item 1): the :attr:`~callgate.policy.engines.factory.PolicyFolder.type_rules` of every
    registered folder (:func:`callgate.policy.engines.registry.policy_folders`), whichever engine
    serves. Problems name the ToolSpec file and line, the argument and both types. Generated
    declarations agree by construction."""
    try:
        decls = tool_declarations(policy_dir / "tools")
    except LoadError as exc:
        return [Problem(exc.source, "", exc.message)]
    texts = {d.source: Path(d.source).read_text(encoding="utf-8", errors="replace") for d in decls}
    return [problem for folder in folders for problem in folder.type_rules(policy_dir, decls, texts)]
