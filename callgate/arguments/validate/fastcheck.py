"""A compiled yes/no check for the common subset of JSON Schema 2020-12 (the validation fast path).

python-jsonschema walks a schema keyword by keyword through generic machinery (``iter_errors``,
``descend``, ``evolve``) on every call, ~20 us for a small tool schema even when the arguments
are valid, which they almost always are. :func:`compile_check` turns a schema into a tree of
closures that answers one question, *is this instance valid?*, for the keywords most ToolSpecs
use. :class:`~callgate.arguments.validate.schema.CompiledSchema` calls it first; only when it says "no"
does the full validator run (to report every violation with its JSON pointer), so a valid
instance costs a few closure calls and an invalid one costs what it always did.

The check must be *exact* for every schema it compiles (valid iff python-jsonschema + the
project's ECMA-262 keywords say valid): ``not``/``oneOf`` compose answers, so "not sure" is not
an option. Anything outside the subset makes :func:`compile_check` return ``None`` and that
schema simply has no fast path. Exactness is tested against the official JSON-Schema-Test-Suite
(draft 2020-12, every case whose schema compiles here) and by property tests against the full
validator on the shipped ToolSpecs (``tests/test_fastcheck.py``).

The subset: boolean schemas; ``type``, ``enum``, ``const``; ``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``propertyNames``, ``minProperties``,
``maxProperties``, ``dependentRequired``, ``dependentSchemas``; ``items``, ``prefixItems``,
``minItems``, ``maxItems``, ``uniqueItems``; ``minLength``, ``maxLength``, ``pattern``,
``format`` (the same format checker as the full validator); ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``; ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if`` /
``then`` / ``else``; and the annotation-only keywords. Not in it (no fast path): ``$ref``,
``$dynamicRef``, ``unevaluated*``, ``contains``, ``multipleOf``, ``$vocabulary`` and any unknown
keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:  # the full validator's own JSON equality, so enum/const/uniqueItems agree with it exactly
    from jsonschema._utils import equal as _json_equal
    from jsonschema._utils import uniq as _json_unique
except ImportError:  # pragma: no cover - another jsonschema: those keywords get no fast path
    _json_equal = _json_unique = None

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "title",
        "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
        "contentEncoding", "contentMediaType", "contentSchema",
    }
)  # fmt: skip
"""Keywords with no effect on validity once references are excluded (2020-12)."""


class _Unsupported(Exception):
    pass


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_check(name: str) -> Check:
    if name == "string":
        return lambda v: isinstance(v, str)
    if name == "object":
        return lambda v: isinstance(v, dict)
    if name == "array":
        return lambda v: isinstance(v, list)
    if name == "boolean":
        return lambda v: isinstance(v, bool)
    if name == "null":
        return lambda v: v is None
    if name == "number":
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if name == "integer":
        return lambda v: (
            (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
        )
    raise _Unsupported(f"type {name!r}")


def compile_check(
    schema: Any,
    *,
    regex: Callable[[str], Any],
    format_conforms: Callable[[Any, str], bool],
) -> Check | None:
    """The exact validity check of ``schema``, or ``None`` when it uses anything outside the
    subset. ``regex(source)`` returns a compiled pattern with the full validator's (ECMA-262)
    semantics; ``format_conforms(instance, name)`` is the full validator's format checker."""
    try:
        return _Compiler(regex, format_conforms).schema(schema)
    except Exception:
        return None


class _Compiler:
    def __init__(self, regex: Callable[[str], Any], format_conforms: Callable[[Any, str], bool]) -> None:
        self._regex = regex
        self._format = format_conforms

    def schema(self, s: Any) -> Check:
        if s is True:
            return lambda v: True
        if s is False:
            return lambda v: False
        if not isinstance(s, Mapping):
            raise _Unsupported("schema must be an object or a boolean")
        checks: list[Check] = []
        for key in s:
            if key in _ANNOTATIONS or key in _HANDLED_WITH:
                continue
            build = _BUILDERS.get(key)
            if build is None:
                raise _Unsupported(key)
            checks.append(build(self, s[key], s))
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        tup = tuple(checks)
        return lambda v: all(c(v) for c in tup)

    # --- generic -----------------------------------------------------------------------
    def type_(self, t: Any, s: Mapping[str, Any]) -> Check:
        if isinstance(t, str):
            return _type_check(t)
        alts = tuple(_type_check(n) for n in t)
        return lambda v: any(c(v) for c in alts)

    def enum(self, members: Any, s: Mapping[str, Any]) -> Check:
        if _json_equal is None:
            raise _Unsupported("enum")
        ms = tuple(members)
        return lambda v: any(_json_equal(m, v) for m in ms)

    def const(self, c: Any, s: Mapping[str, Any]) -> Check:
        if _json_equal is None:
            raise _Unsupported("const")
        return lambda v: _json_equal(v, c)

    # --- objects -------------------------------------------------------------------------
    def properties(self, props: Any, s: Mapping[str, Any]) -> Check:
        subs = tuple((name, self.schema(sub)) for name, sub in props.items())

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for name, sub in subs:
                if name in v and not sub(v[name]):
                    return False
            return True

        return check

    def required(self, names: Any, s: Mapping[str, Any]) -> Check:
        req = tuple(names)
        return lambda v: not isinstance(v, dict) or all(n in v for n in req)

    def pattern_properties(self, pats: Any, s: Mapping[str, Any]) -> Check:
        subs = tuple((self._regex(p), self.schema(sub)) for p, sub in pats.items())

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for rx, sub in subs:
                for name, value in v.items():
                    if rx.search(name) is not None and not sub(value):
                        return False
            return True

        return check

    def additional_properties(self, add: Any, s: Mapping[str, Any]) -> Check:
        known = frozenset(s.get("properties", {}))
        pats = tuple(self._regex(p) for p in s.get("patternProperties", {}))
        sub = self.schema(add)

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for name, value in v.items():
                if name in known or any(rx.search(name) is not None for rx in pats):
                    continue
                if not sub(value):
                    return False
            return True

        return check

    def property_names(self, sub_schema: Any, s: Mapping[str, Any]) -> Check:
        sub = self.schema(sub_schema)
        return lambda v: not isinstance(v, dict) or all(sub(k) for k in v)

    def min_properties(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, dict) or len(v) >= n

    def max_properties(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, dict) or len(v) <= n

    def dependent_required(self, deps: Any, s: Mapping[str, Any]) -> Check:
        pairs = tuple((name, tuple(needed)) for name, needed in deps.items())
        return lambda v: (
            not isinstance(v, dict)
            or all(name not in v or all(n in v for n in needed) for name, needed in pairs)
        )

    def dependent_schemas(self, deps: Any, s: Mapping[str, Any]) -> Check:
        pairs = tuple((name, self.schema(sub)) for name, sub in deps.items())
        return lambda v: not isinstance(v, dict) or all(name not in v or sub(v) for name, sub in pairs)

    # --- arrays --------------------------------------------------------------------------
    def prefix_items(self, items: Any, s: Mapping[str, Any]) -> Check:
        subs = tuple(self.schema(sub) for sub in items)
        return lambda v: not isinstance(v, list) or all(sub(x) for sub, x in zip(subs, v, strict=False))

    def items(self, item: Any, s: Mapping[str, Any]) -> Check:
        start = len(s.get("prefixItems", ()))
        sub = self.schema(item)
        return lambda v: not isinstance(v, list) or all(sub(x) for x in v[start:])

    def min_items(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, list) or len(v) >= n

    def max_items(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, list) or len(v) <= n

    def unique_items(self, on: Any, s: Mapping[str, Any]) -> Check:
        if not on:
            return lambda v: True
        if _json_unique is None:
            raise _Unsupported("uniqueItems")
        return lambda v: not isinstance(v, list) or bool(_json_unique(v))

    # --- strings -------------------------------------------------------------------------
    def min_length(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, str) or len(v) >= n

    def max_length(self, n: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not isinstance(v, str) or len(v) <= n

    def pattern(self, source: Any, s: Mapping[str, Any]) -> Check:
        rx = self._regex(source)
        return lambda v: not isinstance(v, str) or rx.search(v) is not None

    def format(self, name: Any, s: Mapping[str, Any]) -> Check:
        conforms = self._format
        return lambda v: conforms(v, name)

    # --- numbers -------------------------------------------------------------------------
    def minimum(self, m: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not _is_number(v) or v >= m

    def maximum(self, m: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not _is_number(v) or v <= m

    def exclusive_minimum(self, m: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not _is_number(v) or v > m

    def exclusive_maximum(self, m: Any, s: Mapping[str, Any]) -> Check:
        return lambda v: not _is_number(v) or v < m

    # --- composition ---------------------------------------------------------------------
    def all_of(self, subs: Any, s: Mapping[str, Any]) -> Check:
        cs = tuple(self.schema(x) for x in subs)
        return lambda v: all(c(v) for c in cs)

    def any_of(self, subs: Any, s: Mapping[str, Any]) -> Check:
        cs = tuple(self.schema(x) for x in subs)
        return lambda v: any(c(v) for c in cs)

    def one_of(self, subs: Any, s: Mapping[str, Any]) -> Check:
        cs = tuple(self.schema(x) for x in subs)

        def check(v: Any) -> bool:
            hits = 0
            for c in cs:
                if c(v):
                    hits += 1
                    if hits > 1:
                        return False
            return hits == 1

        return check

    def not_(self, sub_schema: Any, s: Mapping[str, Any]) -> Check:
        sub = self.schema(sub_schema)
        return lambda v: not sub(v)

    def if_(self, cond_schema: Any, s: Mapping[str, Any]) -> Check:
        cond = self.schema(cond_schema)
        then = self.schema(s["then"]) if "then" in s else None
        other = self.schema(s["else"]) if "else" in s else None

        def check(v: Any) -> bool:
            if cond(v):
                return then is None or then(v)
            return other is None or other(v)

        return check


_BUILDERS: Mapping[str, Callable[[_Compiler, Any, Mapping[str, Any]], Check]] = {
    "type": _Compiler.type_,
    "enum": _Compiler.enum,
    "const": _Compiler.const,
    "properties": _Compiler.properties,
    "required": _Compiler.required,
    "patternProperties": _Compiler.pattern_properties,
    "additionalProperties": _Compiler.additional_properties,
    "propertyNames": _Compiler.property_names,
    "minProperties": _Compiler.min_properties,
    "maxProperties": _Compiler.max_properties,
    "dependentRequired": _Compiler.dependent_required,
    "dependentSchemas": _Compiler.dependent_schemas,
    "prefixItems": _Compiler.prefix_items,
    "items": _Compiler.items,
    "minItems": _Compiler.min_items,
    "maxItems": _Compiler.max_items,
    "uniqueItems": _Compiler.unique_items,
    "minLength": _Compiler.min_length,
    "maxLength": _Compiler.max_length,
    "pattern": _Compiler.pattern,
    "format": _Compiler.format,
    "minimum": _Compiler.minimum,
    "maximum": _Compiler.maximum,
    "exclusiveMinimum": _Compiler.exclusive_minimum,
    "exclusiveMaximum": _Compiler.exclusive_maximum,
    "allOf": _Compiler.all_of,
    "anyOf": _Compiler.any_of,
    "oneOf": _Compiler.one_of,
    "not": _Compiler.not_,
    "if": _Compiler.if_,
}

_HANDLED_WITH: frozenset[str] = frozenset({"then", "else"})
"""Read by the ``if`` builder (alone, without ``if``, they have no effect: 2020-12)."""
