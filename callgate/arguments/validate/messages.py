"""jsonschema errors -> safe :class:`~callgate.base.errors.Violation` objects.

Violation messages are built from the failing keyword and the *schema* side only (plus property
*names*, truncated); instance values never appear, because arguments may carry secrets or
model-controlled text. Pointers are RFC 6901 (:mod:`callgate.base.jsonpointer`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError, best_match

from callgate.arguments.validate.ecma262 import ecma_search
from callgate.base import jsonpointer
from callgate.base.errors import Violation

__all__ = ["Mapper", "plural", "quote", "sorted_violations"]

_MAX_NAME = 64
"""Property names longer than this are truncated inside messages (pointers stay exact)."""


def quote(name: object) -> str:
    """``repr`` of a name (a property name, a format, a pattern) cut to 64 characters."""
    text = str(name)
    if len(text) > _MAX_NAME:
        text = text[:_MAX_NAME] + "..."
    return repr(text)


def plural(n: object, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _leaf_message(keyword: str | None, expected: Any) -> str:
    """Message for one failing keyword, from the keyword and the schema value only."""
    if keyword is None or (keyword == "not" and expected == {}):
        return "no value is allowed here (false schema)"
    if keyword == "items" and expected is False:
        return "array has more items than prefixItems allows"
    if keyword == "type":
        types = [expected] if isinstance(expected, str) else list(expected)
        return "expected type " + " or ".join(str(t) for t in types)
    simple: dict[str, str] = {
        "enum": "value not in enum",
        "const": "value does not equal const",
        "uniqueItems": "array items are not unique",
        "not": "value must not match the 'not' schema",
        "contains": "array does not contain an item matching 'contains'",
        "unevaluatedItems": "array has items not allowed by unevaluatedItems",
        "unevaluatedProperties": "object has properties not allowed by unevaluatedProperties",
        "additionalProperties": "additional properties are not allowed",
    }
    if keyword in simple:
        return simple[keyword]
    bounded: dict[str, str] = {
        "minLength": "string shorter than minLength {}",
        "maxLength": "string longer than maxLength {}",
        "minimum": "number less than minimum {}",
        "maximum": "number greater than maximum {}",
        "exclusiveMinimum": "number not greater than exclusiveMinimum {}",
        "exclusiveMaximum": "number not less than exclusiveMaximum {}",
        "multipleOf": "number is not a multiple of {}",
        "minItems": "array has fewer items than minItems {}",
        "maxItems": "array has more items than maxItems {}",
        "minProperties": "object has fewer properties than minProperties {}",
        "maxProperties": "object has more properties than maxProperties {}",
        "minContains": "array has fewer items matching 'contains' than minContains {}",
        "maxContains": "array has more items matching 'contains' than maxContains {}",
    }
    if keyword in bounded:
        return bounded[keyword].format(expected)
    if keyword == "pattern":
        return f"string does not match pattern {quote(expected)}"
    if keyword == "format":
        return f"value does not match format {quote(expected)}"
    return f"value fails {quote(keyword)}"


class Mapper:
    """Turn python-jsonschema errors into sorted, de-duplicated, value-free violations."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def _value_at(self, path: Iterable[object]) -> tuple[bool, Any]:
        node = self.root
        for token in path:
            try:
                node = node[token]  # dict key or list index
            except (KeyError, IndexError, TypeError):
                return False, None
        return True, node

    def violations(self, error: ValidationError) -> list[Violation]:
        path = list(error.absolute_path)
        pointer = jsonpointer.join(path)
        keyword: str | None = error.validator
        expected = error.validator_value
        instance = error.instance

        found, value_here = self._value_at(path)
        if found and isinstance(value_here, Mapping) and isinstance(instance, str) and instance in value_here:
            # Only propertyNames evaluates an instance (a key) that is not at error.path.
            leaf = self._describe(error, keyword, expected, instance, pointer)
            return [
                Violation(
                    pointer=f"{pointer}/{jsonpointer.escape(instance)}",
                    message=f"property name {quote(instance)} is invalid: {leaf.message}",
                    keyword="propertyNames",
                )
            ]
        if keyword == "required" and isinstance(instance, Mapping):
            return [
                Violation(
                    pointer=pointer, message=f"missing required property {quote(name)}", keyword="required"
                )
                for name in expected
                if name not in instance
            ]
        if keyword == "dependentRequired" and isinstance(instance, Mapping):
            return [
                Violation(
                    pointer=pointer,
                    message=f"property {quote(prop)} requires property {quote(dep)}",
                    keyword="dependentRequired",
                )
                for prop, deps in expected.items()
                if prop in instance
                for dep in deps
                if dep not in instance
            ]
        if keyword == "additionalProperties" and isinstance(instance, Mapping):
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            props = schema.get("properties", {})
            patterns = schema.get("patternProperties", {})
            extras = [
                name
                for name in instance
                if name not in props and not any(ecma_search(p, name) for p in patterns)
            ]
            if extras:
                return [
                    Violation(
                        pointer=f"{pointer}/{jsonpointer.escape(name)}",
                        message=f"additional property {quote(name)} is not allowed",
                        keyword="additionalProperties",
                    )
                    for name in extras
                ]
        return [self._describe(error, keyword, expected, instance, pointer)]

    def _describe(
        self,
        error: ValidationError,
        keyword: str | None,
        expected: Any,
        instance: Any,
        pointer: str,
    ) -> Violation:
        if keyword in ("anyOf", "oneOf"):
            if not error.context:
                return Violation(
                    pointer=pointer,
                    message=f"value matches more than one alternative of {keyword}",
                    keyword=keyword,
                )
            message = f"value does not match any alternative of {keyword}"
            # best_match descends into the context the way python-jsonschema intends (deepest,
            # type-matching alternative first); it returns the error itself when ambiguous.
            closest = best_match([error])
            if closest is not None and closest is not error:
                hints = self.violations(closest)
                if hints:
                    hint = hints[0]
                    where = hint.pointer if hint.pointer else "the root"
                    message += f" (closest alternative: {hint.message} at {where})"
            return Violation(pointer=pointer, message=message, keyword=keyword)
        message = _leaf_message(keyword, expected)
        if keyword is None or (keyword == "not" and expected == {}):
            keyword = "false"
        return Violation(pointer=pointer, message=message, keyword=keyword)


def sorted_violations(violations: Iterable[Violation]) -> list[Violation]:
    return sorted(set(violations), key=lambda v: (v.pointer, v.keyword, v.message))
