"""JSON Schemas (2020-12) for the project's own input files, and their errors as
``/json/pointer: message`` lines.

The case-file loaders (``callgate/cli/evalcases.py``, ``callgate/policy/policytest.py``) ship
their format as a schema next to the code (package data) and check every loaded document
against it with :class:`jsonschema.Draft202012Validator`. This module loads those schemas
once and turns validation errors into short messages that say *where* (an RFC 6901 pointer
into the file) and *what kind* of problem; they name keys, types and the schema's own
constants, never the values found in the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from callgate.base import jsonpointer

MAX_PROBLEMS = 10
"""At most this many problems are reported for one document (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """One place where a document breaks its schema."""

    pointer: str
    """RFC 6901 pointer into the document (``""`` = the whole document)."""
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '(root)'}: {self.message}"


@cache
def packaged_validator(package: str, name: str) -> Draft202012Validator:
    """The validator for schema file ``name`` shipped in ``package`` (checked against the
    2020-12 meta-schema on first use; a broken schema is a bug and raises)."""
    schema = json.loads(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def subschema_validator(validator: Draft202012Validator, definition: str) -> Draft202012Validator:
    """A validator for ``#/$defs/<definition>`` of ``validator``'s schema (references resolve
    against the whole schema)."""
    return validator.evolve(schema={**validator.schema, "$ref": f"#/$defs/{definition}"})


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_ARTICLE = {"object": "an object", "array": "an array", "integer": "an integer"}


def _wanted_type(name: str) -> str:
    return _ARTICLE.get(name, name if name == "null" else f"a {name}")


def _keys(names: Any) -> str:
    return ", ".join(repr(str(n)) for n in names)


def _message(error: ValidationError) -> str:
    """A value-free message for one error (keys and schema constants only)."""
    kw, want, got = error.validator, error.validator_value, error.instance
    if kw == "type" and want == "object" and not error.absolute_path:
        return f"must be one JSON object, not {_type_name(got)}"
    if kw == "type":
        wanted = [want] if isinstance(want, str) else list(want)
        return f"must be {' or '.join(_wanted_type(w) for w in wanted)}, not {_type_name(got)}"
    if kw == "required":
        missing = [k for k in want if isinstance(got, dict) and k not in got]
        return f"missing required key(s) {_keys(missing)}"
    if kw in ("additionalProperties", "unevaluatedProperties") and isinstance(got, dict):
        allowed = list(error.schema.get("properties", {}))
        unknown = sorted(k for k in got if k not in allowed)
        return f"unknown key(s) {_keys(unknown)}; allowed: {', '.join(allowed)}"
    if kw == "minLength":
        return "must not be empty" if want == 1 else f"must be at least {want} characters long"
    if kw == "minItems":
        return "must not be empty" if want == 1 else f"must have at least {want} items"
    if kw == "enum":
        return f"must be one of {', '.join(json.dumps(v, ensure_ascii=False) for v in want)}"
    if kw == "const":
        return f"must be {json.dumps(want, ensure_ascii=False)}"
    if kw == "pattern":
        about = error.schema.get("description") if isinstance(error.schema, dict) else None
        return f"must match the pattern {want}" + (f" ({about})" if isinstance(about, str) else "")
    if kw == "not" and isinstance(want, dict) and set(want) == {"required"}:
        where = list(error.relative_schema_path)
        if len(where) >= 3 and where[-3] == "dependentSchemas":
            return f"the key {str(where[-2])!r} excludes {_keys(want['required'])}"
        return f"must not have the key(s) {_keys(want['required'])}"
    if kw == "format":
        return f"must be a valid {want}"
    return f"fails the schema keyword {kw!r}"


def _document_order(document: Any, path: tuple[str | int, ...]) -> tuple[int, ...]:
    """Where ``path`` is in ``document``: the position of each key or index in its parent."""
    out: list[int] = []
    node = document
    for token in path:
        if isinstance(node, dict):
            keys = list(node)
            out.append(keys.index(token) if token in node else len(keys))
            node = node.get(token)
        elif isinstance(node, list) and isinstance(token, int):
            out.append(token)
            node = node[token] if 0 <= token < len(node) else None
        else:
            out.append(0)
    return tuple(out)


def schema_problems(validator: Draft202012Validator, document: Any) -> list[SchemaProblem]:
    """Every place ``document`` breaks ``validator``'s schema, in document order (empty when it
    is valid). The errors of one missing key set come as one problem."""
    found: dict[tuple[str, str], tuple[tuple[int, ...], SchemaProblem]] = {}
    for error in validator.iter_errors(document):
        path = tuple(error.absolute_path)
        problem = SchemaProblem(jsonpointer.join(path), _message(error))
        # `required` yields one error per missing key, each rendered with all of them: keep one.
        found[(problem.pointer, problem.message)] = (_document_order(document, path), problem)
    return [p for _, p in sorted(found.values(), key=lambda op: (op[0], op[1].message))]


def describe(problems: list[SchemaProblem]) -> str:
    """``/a: ...; /b: ...`` (at most :data:`MAX_PROBLEMS`, then how many more)."""
    text = "; ".join(str(p) for p in problems[:MAX_PROBLEMS])
    more = len(problems) - MAX_PROBLEMS
    return f"{text}; and {more} more" if more > 0 else text


__all__ = [
    "MAX_PROBLEMS",
    "SchemaProblem",
    "describe",
    "packaged_validator",
    "schema_problems",
    "subschema_validator",
]
