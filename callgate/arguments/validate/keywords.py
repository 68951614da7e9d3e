"""Keywords that evaluate regexes, re-implemented with ECMA-262 matching.

python-jsonschema's own versions call Python ``re.search`` on the raw pattern (``pattern``,
``patternProperties``, and the ``patternProperties`` look-ups inside ``additionalProperties`` /
``unevaluatedProperties``). :data:`EcmaValidator` is ``Draft202012Validator`` with these four
keywords replaced by versions that match with :func:`~.ecma262.ecma_search`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema import validators as _jsonschema_validators
from jsonschema.exceptions import ValidationError

from callgate.arguments.validate.ecma262 import ecma_search

__all__ = ["EcmaValidator"]


def _kw_pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma_search(pattern, instance):
        yield ValidationError("string does not match pattern")


def _kw_pattern_properties(
    validator: Any, pattern_properties: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for name, value in instance.items():
            if ecma_search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _matches_pattern_properties(schema: Mapping[str, Any], name: str) -> bool:
    return any(ecma_search(pattern, name) for pattern in schema.get("patternProperties", {}))


def _kw_additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = [
        name for name in instance if name not in properties and not _matches_pattern_properties(schema, name)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError("additional properties are not allowed")


def _evaluated_property_keys(validator: Any, instance: Any, schema: Any) -> set[str]:
    """python-jsonschema's ``find_evaluated_property_keys_by_schema`` (4.26) with ECMA-262
    matching for patternProperties."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            keys |= _evaluated_property_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance,
                resolved.contents,
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {
                name
                for name, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            }
    if "patternProperties" in schema:
        keys |= {name for name in instance if _matches_pattern_properties(schema, name)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_property_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                keys |= _evaluated_property_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_property_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_property_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_property_keys(validator, instance, schema["else"])
    return keys


def _kw_unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_property_keys(validator, instance, schema)
    failed = [
        name
        for name in instance
        if name not in evaluated
        and next(validator.descend(instance[name], unevaluated, path=name, schema_path=name), None)
        is not None
    ]
    if failed:
        yield ValidationError("unevaluated properties are not allowed")


EcmaValidator: Final[Any] = _jsonschema_validators.extend(
    Draft202012Validator,
    {
        "pattern": _kw_pattern,
        "patternProperties": _kw_pattern_properties,
        "additionalProperties": _kw_additional_properties,
        "unevaluatedProperties": _kw_unevaluated_properties,
    },
)
"""Draft 2020-12 validator whose regex keywords use ECMA-262 semantics."""
