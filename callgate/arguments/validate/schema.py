"""Schema compilation and validation (spec 6.4 layer 2): JSON Schema 2020-12, format assertion ON.

``ParsedArguments --validate--> ValidatedArguments``

:meth:`CompiledSchema.compile` checks the schema against the 2020-12 metaschema, checks every
``$schema``, resolves every ``$ref`` / ``$dynamicRef``, scans every ``format`` keyword (the load-time
*schema scan*, :class:`_SchemaScan`), translates every regex, then builds the validator
(:data:`~.keywords.EcmaValidator`) and the fast path (:func:`~.fastcheck.compile_check`).
:meth:`CompiledSchema.validate` only runs them. ``$ref`` resolves only inside the schema document,
the official metaschemas and an explicitly passed :class:`referencing.Registry`; nothing is fetched.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator, FormatChecker

from callgate.arguments.validate.ecma262 import RegexError, compile_ecma, ecma_syntax_error
from callgate.arguments.validate.fastcheck import compile_check
from callgate.arguments.validate.formats import EXCLUDED_FORMATS, FORMAT_CHECKER, SUPPORTED_FORMATS, is_regex
from callgate.arguments.validate.keywords import EcmaValidator
from callgate.arguments.validate.messages import Mapper, plural, quote, sorted_violations
from callgate.base import jsonpointer
from callgate.base.errors import (
    Violation,
    schema_violation,
    toolspec_invalid,
    unsupported_format,
)
from callgate.base.lru import remember
from callgate.base.model import ParsedArguments, ValidatedArguments

if TYPE_CHECKING:  # referencing does not re-export Resolver at top level
    from referencing._core import Resolver

    _Resolver = Resolver[Any]

_jsonschema_specifications: Any
try:  # untyped package (the official metaschemas); imported dynamically to keep mypy quiet
    _jsonschema_specifications = importlib.import_module("jsonschema_specifications")
except ImportError:  # pragma: no cover - jsonschema itself depends on it
    _jsonschema_specifications = None

__all__ = ["DIALECT_2020_12", "VALIDATOR_NAME", "VALIDATOR_VERSION", "CompiledSchema"]

DIALECT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
"""The one dialect callgate validates with (``$schema`` of JSON Schema 2020-12)."""

VALIDATOR_NAME: Final = "python-jsonschema"
"""Recorded as :attr:`ValidatedArguments.validator`."""

VALIDATOR_VERSION: Final[str] = metadata.version("jsonschema")
"""Installed python-jsonschema version, recorded as :attr:`ValidatedArguments.validator_version`."""


_SCHEMA_VALUED: Final = frozenset(
    {
        "additionalProperties",
        "propertyNames",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
_SCHEMA_ARRAY_VALUED: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAP_VALUED: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})


def _spec() -> referencing.Specification[Any]:
    return referencing.jsonschema.DRAFT202012


class _SchemaScan:
    """Walk every subschema reachable from the root, following ``$ref``/``$dynamicRef``.

    Subschemas are found by keyword (``properties`` values, ``items``, ``$defs`` ...), never by
    shape, so a *property named* ``format`` or data inside ``enum``/``const``/``default`` is not
    mistaken for a keyword. Reference targets are walked too (including ones in unknown keywords
    or in registry documents); violations there are reported at the pointer of the root
    document's ``$ref`` that leads to them.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.dialect_violations: list[Violation] = []
        self.ref_violations: list[Violation] = []
        self.format_violations: list[Violation] = []
        self.unsupported_formats: set[str] = set()
        self.regex_violations: list[Violation] = []
        self._seen: set[int] = set()
        # (reference, resolver at its location, pointer in the root document it is reported at)
        self._refs: deque[tuple[str, _Resolver, str]] = deque()

    def run(self, root: Any, resolver: _Resolver) -> None:
        """Scan ``root`` and everything it references."""
        self._walk(root, resolver, origin=None, label="")
        while self._refs:
            ref, ref_resolver, origin = self._refs.popleft()
            try:
                resolved = ref_resolver.lookup(ref)
            except Exception:
                self.ref_violations.append(
                    Violation(
                        pointer=origin,
                        message=f"reference {quote(ref)} cannot be resolved offline (only the "
                        "schema itself, the official metaschemas and preloaded documents are "
                        "available; nothing is fetched)",
                        keyword=origin.rsplit("/", 1)[-1],
                    )
                )
                continue
            self._walk(resolved.contents, resolved.resolver, origin=origin, label=ref)

    def _walk(self, node: Any, resolver: _Resolver, *, origin: str | None, label: str) -> None:
        stack: list[tuple[Any, str, _Resolver]] = [(node, "", resolver)]
        while stack:
            current, ptr, res = stack.pop()
            if not isinstance(current, Mapping) or id(current) in self._seen:
                continue
            self._seen.add(id(current))
            if isinstance(current.get("$id"), str):
                res = res.in_subresource(_spec().create_resource(current))

            def at(keyword: str) -> str:
                return f"{ptr}/{keyword}" if origin is None else origin  # noqa: B023 (called within this iteration)

            suffix = "" if origin is None else f" (in {quote(label)} at {quote(ptr or '/')})"
            schema_uri = current.get("$schema")
            if schema_uri is not None and schema_uri != self.dialect:
                self.dialect_violations.append(
                    Violation(
                        pointer=at("$schema"),
                        message=f"$schema {quote(schema_uri)} is not the required dialect "
                        f"{self.dialect!r}{suffix}",
                        keyword="$schema",
                    )
                )
            fmt = current.get("format")
            if isinstance(fmt, str) and fmt not in SUPPORTED_FORMATS:
                self.unsupported_formats.add(fmt)
                reason = EXCLUDED_FORMATS.get(fmt, "unknown to this validator")
                self.format_violations.append(
                    Violation(
                        pointer=at("format"),
                        message=f"format {quote(fmt)} cannot be asserted: {reason}{suffix}",
                        keyword="format",
                    )
                )
            pattern = current.get("pattern")
            if isinstance(pattern, str):
                self._check_regex(pattern, at("pattern"), "pattern", suffix)
            members = current.get("patternProperties")
            if isinstance(members, Mapping):
                for name in members:
                    where = (
                        f"{ptr}/patternProperties/{jsonpointer.escape(name)}" if origin is None else origin
                    )
                    self._check_regex(str(name), where, "patternProperties", suffix)
            for keyword in ("$ref", "$dynamicRef"):
                ref = current.get(keyword)
                if isinstance(ref, str):
                    self._refs.append((ref, res, at(keyword)))
            for keyword, value in current.items():
                if keyword in _SCHEMA_VALUED:
                    stack.append((value, f"{ptr}/{keyword}", res))
                elif keyword in _SCHEMA_ARRAY_VALUED and isinstance(value, list):
                    for i, sub in enumerate(value):
                        stack.append((sub, f"{ptr}/{keyword}/{i}", res))
                elif keyword in _SCHEMA_MAP_VALUED and isinstance(value, Mapping):
                    for name, sub in value.items():
                        stack.append(
                            (sub, f"{ptr}/{jsonpointer.escape(keyword)}/{jsonpointer.escape(name)}", res)
                        )

    def _check_regex(self, source: str, pointer: str, keyword: str, suffix: str) -> None:
        """Translate (and cache) a schema regex now, so validation never meets a bad one."""
        try:
            compile_ecma(source)
        except RegexError as err:
            what = (
                "is not a valid ECMA-262 regular expression"
                if err.syntax
                else "cannot be matched with ECMA-262 semantics by callgate"
            )
            self.regex_violations.append(
                Violation(
                    pointer=pointer,
                    message=f"regex {quote(source)} {what}: {err.message}{suffix}",
                    keyword=keyword,
                )
            )


def _rewrite_false_subschemas(root: Any) -> None:
    """Replace ``false`` with the equivalent ``{"not": {}}`` where python-jsonschema would lose
    the instance path.

    python-jsonschema 4.26 ``descend`` returns early for boolean ``false`` before appending the
    path, so ``{"properties": {"a": false}}`` reports its error at the object, not at ``/a``. The
    two schemas accept exactly the same instances; :func:`_leaf_message` reports ``not: {}`` as a
    false schema. Only the (private copy of the) root document is rewritten.
    """
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        for keyword in ("properties", "patternProperties"):
            members = node.get(keyword)
            if isinstance(members, dict):
                for name in [n for n, sub in members.items() if sub is False]:
                    members[name] = {"not": {}}
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            node["prefixItems"] = [{"not": {}} if sub is False else sub for sub in prefix]
        for keyword, value in node.items():
            if keyword in _SCHEMA_VALUED:
                stack.append(value)
            elif keyword in _SCHEMA_ARRAY_VALUED and isinstance(value, list):
                stack.extend(value)
            elif keyword in _SCHEMA_MAP_VALUED and isinstance(value, dict):
                stack.extend(value.values())


def _metaschema_registry() -> referencing.Registry[Any]:
    if _jsonschema_specifications is None:  # pragma: no cover
        return referencing.Registry()
    registry: referencing.Registry[Any] = _jsonschema_specifications.REGISTRY
    return registry


_SPECIFICATIONS: Final = _metaschema_registry()


def _meta_format_checker() -> FormatChecker:
    """python-jsonschema's 2020-12 format checker with ``regex`` replaced by the ECMA-262 one,
    so that every ``pattern`` / ``patternProperties`` name must be a valid ECMA-262 regex."""
    checker = FormatChecker(formats=())
    for name, (fn, raises) in Draft202012Validator.FORMAT_CHECKER.checkers.items():
        checker.checks(name, raises)(fn)
    checker.checks("regex")(is_regex)
    return checker


_META_VALIDATOR: Final = EcmaValidator(
    Draft202012Validator.META_SCHEMA,
    format_checker=_meta_format_checker(),
    registry=_SPECIFICATIONS,
)


_META_CACHE: OrderedDict[str, tuple[Violation, ...]] = OrderedDict()
_META_CACHE_SIZE: Final = 4096
_META_LOCK: Final = threading.Lock()


def _metaschema_violations(schema: Any) -> list[Violation]:
    """The 2020-12 metaschema's verdict on ``schema``, remembered by the schema's digest (issue
    15: ~85% of loading a tool was this check; a reload re-checks only schemas that changed)."""
    try:
        digest = hashlib.sha256(
            json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()
    except (TypeError, ValueError):
        return _metaschema_check(schema)
    with _META_LOCK:
        hit = _META_CACHE.get(digest)
        if hit is not None:
            _META_CACHE.move_to_end(digest)
            return list(hit)
    found = _metaschema_check(schema)
    with _META_LOCK:
        remember(_META_CACHE, digest, tuple(found), _META_CACHE_SIZE)
    return found


_TYPES: Final = ("array", "boolean", "integer", "null", "number", "object", "string")


def _type_message(value: Any) -> str:
    """What is wrong with a ``type`` value, naming the bad name and the close one."""
    import difflib

    names = value if isinstance(value, list) else [value]
    bad = [n for n in names if n not in _TYPES]
    if not bad or not all(isinstance(n, str) for n in bad):
        return f"{quote(json.dumps(value))} is not a type name or a list of unique type names"
    close = difflib.get_close_matches(str(bad[0]), _TYPES, n=1)
    hint = f" (did you mean {quote(close[0])}?)" if close else ""
    return f"{quote(bad[0])} is not a JSON Schema type{hint}; the types are {', '.join(_TYPES)}"


def _metaschema_check(schema: Any) -> list[Violation]:
    out = []
    for error in _META_VALIDATOR.iter_errors(schema):
        message = str(error.message)
        path = list(error.absolute_path)
        if error.validator == "format" and error.validator_value == "regex":
            source = str(error.instance)
            message = (
                f"{quote(source)} is not a valid ECMA-262 regular expression: {ecma_syntax_error(source)}"
            )
            if path and path[-1] == "patternProperties":  # reported by propertyNames
                path.append(source)
        if path and path[-1] == "type" and error.validator == "anyOf":
            message = _type_message(error.instance)
        if len(message) > 200:
            message = message[:200] + "..."
        out.append(
            Violation(
                pointer=jsonpointer.join(path),
                message=message,
                keyword=str(error.validator or ""),
            )
        )
    return sorted(set(out), key=lambda v: (v.pointer, v.keyword, v.message))


class CompiledSchema:
    """A JSON Schema 2020-12 document checked, resolved and compiled once, ready to validate.

    Build with :meth:`compile`; instances are immutable and safe to share between threads
    (python-jsonschema validators keep no per-call state).
    """

    __slots__ = ("_schema", "_source", "_validator", "_fast")

    def __init__(self, *, schema: Any, source: str, validator: Any) -> None:
        """Private: use :meth:`compile`."""
        self._schema = schema
        self._source = source
        self._validator = validator
        self._fast = compile_check(schema, regex=compile_ecma, format_conforms=FORMAT_CHECKER.conforms)
        """Exact yes/no check when the schema is in the fast subset (:mod:`.fastcheck`)."""

    @property
    def document(self) -> Any:
        """The compiled schema document (read-only by convention), e.g. for the compiled core."""
        return self._schema

    @property
    def has_fast_path(self) -> bool:
        """True when valid instances are confirmed by the compiled check alone."""
        return self._fast is not None

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any] | bool,
        *,
        source: str = "",
        dialect: str = DIALECT_2020_12,
        registry: referencing.Registry[Any] | None = None,
    ) -> CompiledSchema:
        """Check ``schema`` and build its validator.

        Raises :class:`LoadError` with ``ErrorCode.TOOLSPEC_INVALID`` if ``dialect`` is not
        2020-12, if any ``$schema`` differs from it, if the schema fails the 2020-12 metaschema
        (which includes "every pattern is a valid ECMA-262 regex"), if a ``$ref``/``$dynamicRef``
        cannot be resolved offline, or if a ``pattern`` / ``patternProperties`` regex anywhere
        reachable cannot be matched with ECMA-262 semantics (see the module docstring); with
        ``ErrorCode.UNSUPPORTED_FORMAT`` if any ``format`` reachable from the schema is not in
        :data:`SUPPORTED_FORMATS`.

        ``registry`` may preload further documents (e.g. remotes in tests). It is used as given;
        callgate never adds a retrieval function, so no reference ever triggers I/O.
        ``source`` (``file:line``) is copied into every :class:`LoadError`.
        """

        if dialect != DIALECT_2020_12:
            raise toolspec_invalid(
                f"unsupported dialect {dialect!r}; only {DIALECT_2020_12!r} is supported",
                source=source,
                violations=[Violation(pointer="", message="unsupported dialect", keyword="$schema")],
            )
        if not isinstance(schema, (Mapping, bool)):
            raise toolspec_invalid(
                "schema must be a JSON object or boolean",
                source=source,
                violations=[Violation(pointer="", message="schema must be an object", keyword="type")],
            )
        schema_copy: Any = copy.deepcopy(dict(schema) if isinstance(schema, Mapping) else schema)

        scan = _SchemaScan(dialect)
        if isinstance(schema_copy, dict):
            top = schema_copy.get("$schema")
            if top is not None and top != dialect:
                raise toolspec_invalid(
                    f"$schema {quote(top)} does not match the required dialect {dialect!r}",
                    source=source,
                    violations=[Violation(pointer="/$schema", message="wrong dialect", keyword="$schema")],
                )

        meta = _metaschema_violations(schema_copy)
        if meta:
            raise toolspec_invalid(
                f"schema is not valid JSON Schema 2020-12 ({plural(len(meta), 'problem')})",
                source=source,
                violations=meta,
            )

        _rewrite_false_subschemas(schema_copy)
        base = registry if registry is not None else referencing.Registry()
        combined: referencing.Registry[Any] = base.combine(_SPECIFICATIONS)
        resource = _spec().create_resource(schema_copy)
        scan.run(schema_copy, combined.resolver_with_root(resource))
        if scan.dialect_violations:
            raise toolspec_invalid(
                "embedded or referenced schema declares another dialect",
                source=source,
                violations=sorted_violations(scan.dialect_violations),
            )
        if scan.ref_violations:
            raise toolspec_invalid(
                f"unresolvable reference ({plural(len(scan.ref_violations), 'problem')})",
                source=source,
                violations=sorted_violations(scan.ref_violations),
            )
        if scan.regex_violations:
            raise toolspec_invalid(
                "regular expression refused "
                f"({plural(len(scan.regex_violations), 'problem')}); patterns are matched with "
                "ECMA-262 semantics, see docs/json-schema-conformance.md",
                source=source,
                violations=sorted_violations(scan.regex_violations),
            )
        if scan.format_violations:
            names = ", ".join(quote(n) for n in sorted(scan.unsupported_formats))
            raise unsupported_format(
                f"format(s) not supported for assertion: {names} (supported: "
                f"{', '.join(sorted(SUPPORTED_FORMATS))})",
                source=source,
                violations=sorted_violations(scan.format_violations),
            )

        validator = EcmaValidator(schema_copy, registry=combined, format_checker=FORMAT_CHECKER)
        return cls(schema=schema_copy, source=source, validator=validator)

    # --- validation -------------------------------------------------------------------

    def validate_value(self, value: Any) -> list[Violation]:
        """Validate a JSON value; return every violation sorted by (pointer, keyword).

        An empty list means valid.

        Fails closed: a reference that cannot be resolved at run time or a recursion overflow is
        reported as a violation rather than passing the value.
        """
        fast = self._fast
        if fast is not None:
            try:
                if fast(value):
                    return []
            except RecursionError:
                pass  # the full validator reports it
        mapper = Mapper(value)
        out: list[Violation] = []
        try:
            for error in self._validator.iter_errors(value):
                out.extend(mapper.violations(error))
        except referencing.exceptions.Unresolvable:
            out.append(
                Violation(pointer="", message="schema reference could not be resolved", keyword="$ref")
            )
        except RecursionError:
            out.append(Violation(pointer="", message="validation exceeded the nesting limit", keyword=""))
        return sorted_violations(out)

    def validate(self, parsed: ParsedArguments) -> ValidatedArguments:
        """Validate parsed arguments.

        Raises :class:`RejectedError` (``SCHEMA_VIOLATION``) listing every violation; otherwise
        returns :class:`ValidatedArguments` recording dialect, validator, version and format
        assertion."""
        violations = self.validate_value(parsed.value)
        if violations:
            raise schema_violation(
                f"arguments do not match the tool schema ({plural(len(violations), 'violation')})",
                violations,
            )
        return ValidatedArguments(
            value=parsed.value,
            dialect=DIALECT_2020_12,
            validator=VALIDATOR_NAME,
            validator_version=VALIDATOR_VERSION,
            format_assertion=True,
        )

    # --- recorded facts -----------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """The dialect this schema is bound to (always :data:`DIALECT_2020_12`)."""
        return DIALECT_2020_12

    @property
    def validator_name(self) -> str:
        """``"python-jsonschema"``."""
        return VALIDATOR_NAME

    @property
    def validator_version(self) -> str:
        """Installed python-jsonschema version."""
        return VALIDATOR_VERSION

    @property
    def format_assertion(self) -> bool:
        """Always ``True``: ``format`` is asserted (spec 6.4, 6.14)."""
        return True

    @property
    def source(self) -> str:
        """Where the schema came from (``file:line``), as passed to :meth:`compile`."""
        return self._source
