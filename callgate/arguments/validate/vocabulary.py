"""Unknown keywords in an author's JSON Schema (a ToolSpec's schemas).

JSON Schema ignores keywords it does not know, so ``"requried": ["amount"]`` is silently no
constraint at all. The ToolSpec loader refuses them instead: :func:`unknown_keywords` walks
every subschema (by keyword, like the load-time scan: data inside ``enum``/``const``/``default``
and *property names* are never mistaken for keywords) and names each unknown keyword with its
JSON Pointer and the closest known keyword. Extension keywords are allowed when they start with
``x-`` (the OpenAPI convention). This is a ToolSpec rule, not a validator rule: the official
test suite's schemas (which carry unknown keywords on purpose) still compile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from callgate.base import jsonpointer
from callgate.base.errors import Violation

KNOWN_KEYWORDS: Final = frozenset(
    {
        # core
        "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
        "$comment", "$defs",
        # applicator
        "prefixItems", "items", "contains", "additionalProperties", "properties",
        "patternProperties", "dependentSchemas", "propertyNames", "if", "then", "else",
        "allOf", "anyOf", "oneOf", "not",
        # unevaluated
        "unevaluatedItems", "unevaluatedProperties",
        # validation
        "type", "const", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
        "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
        "required", "dependentRequired",
        # format, content, meta-data
        "format", "contentEncoding", "contentMediaType", "contentSchema",
        "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
        # kept by the 2020-12 metaschema for compatibility (``$ref: "#/definitions/x"`` works)
        "definitions", "dependencies",
    }
)  # fmt: skip
"""Every keyword of the JSON Schema 2020-12 vocabularies (plus the two the metaschema keeps)."""

EXTENSION_PREFIX: Final = "x-"

_ONE: Final = frozenset(
    {
        "additionalProperties", "propertyNames", "items", "contains", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "contentSchema",
    }
)  # fmt: skip
_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP: Final = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def suggestion(keyword: str) -> str:
    """The closest known keyword (case-insensitive), or ``""``."""
    import difflib  # only for a schema with an unknown keyword: not resident in a serving sidecar

    by_lower = {k.lower(): k for k in KNOWN_KEYWORDS}
    close = difflib.get_close_matches(keyword.lower(), list(by_lower), n=1, cutoff=0.7)
    return by_lower[close[0]] if close else ""


def unknown_keywords(schema: Any, prefix: str = "") -> list[Violation]:
    """Every unknown keyword in ``schema`` and its subschemas, sorted by pointer; each pointer
    is prefixed with ``prefix`` (e.g. ``/input_schema``)."""
    out: list[Violation] = []
    stack: list[tuple[Any, str]] = [(schema, prefix)]
    while stack:
        node, ptr = stack.pop()
        if not isinstance(node, Mapping):
            continue
        for keyword, value in node.items():
            where = f"{ptr}/{jsonpointer.escape(str(keyword))}"
            if keyword in _ONE:
                stack.append((value, where))
            elif keyword in _LIST and isinstance(value, list):
                stack.extend((sub, f"{where}/{i}") for i, sub in enumerate(value))
            elif keyword in _MAP and isinstance(value, Mapping):
                stack.extend((sub, f"{where}/{jsonpointer.escape(str(n))}") for n, sub in value.items())
            elif keyword not in KNOWN_KEYWORDS and not str(keyword).startswith(EXTENSION_PREFIX):
                near = suggestion(str(keyword))
                hint = f" (did you mean {near!r}?)" if near else ""
                out.append(
                    Violation(
                        pointer=where,
                        message=f"unknown JSON Schema keyword {keyword!r}{hint}: it would be "
                        "silently ignored (extension keywords start with 'x-')",
                        keyword="unknown_keyword",
                    )
                )
    return sorted(out, key=lambda v: v.pointer)


__all__ = ["EXTENSION_PREFIX", "KNOWN_KEYWORDS", "suggestion", "unknown_keywords"]
