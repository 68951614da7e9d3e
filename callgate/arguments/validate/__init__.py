"""Schema validation stage (spec 6.4 layer 2): JSON Schema 2020-12 with format assertion ON.

``ParsedArguments --validate--> ValidatedArguments``

Validation is bound to exactly one dialect (:data:`DIALECT_2020_12`) and one validator
(python-jsonschema, version recorded on every :class:`~callgate.base.model.ValidatedArguments`), with
``format`` *asserted*, not treated as an annotation (spec 6.14 row 3: ``format: date`` must not be
silently unchecked).

Subsystems, one module each (dependencies point up this list, never down):

* :mod:`.ecma262` -- **ECMA-262 regexes.** ``pattern``, ``patternProperties`` (also where
  ``additionalProperties`` / ``unevaluatedProperties`` consult them) and format ``regex`` follow
  ECMA-262 in Unicode mode, as JSON Schema requires -- not Python ``re``. Each schema regex is
  parsed with the ECMA-262 grammar and translated once, at compile, into a Python pattern made of
  explicit code-point classes (``$`` = end of input, ASCII ``\\d``/``\\w``/``\\b``, ECMA ``\\s``,
  ``.`` excluding all line terminators, ``\\p{General_Category}``). A regex that is invalid, that
  cannot be matched faithfully (e.g. variable-width lookbehind, ``\\p{Script=...}``) or that the
  nested-quantifier heuristic flags as a catastrophic-backtracking risk is refused at load
  (``TOOLSPEC_INVALID``); nothing is matched approximately.
* :mod:`.formats` -- **format checkers.** Only :data:`SUPPORTED_FORMATS` are accepted in a schema;
  any other ``format`` is a :class:`~callgate.base.errors.LoadError` with
  ``ErrorCode.UNSUPPORTED_FORMAT``. The checkers are RFC-based, verified against the official
  suite's ``optional/format`` files and self-tested at import time.
* :mod:`.keywords` -- **keyword overrides**: the 2020-12 validator with its regex keywords
  re-implemented on ECMA-262 matching.
* :mod:`.messages` -- **message mapping**: jsonschema errors to sorted, de-duplicated
  :class:`~callgate.base.errors.Violation` objects with JSON pointers, built from the schema side
  only (plus property *names*); instance values never appear.
* :mod:`.fastcheck` -- **the fast path**: an exact compiled yes/no check for the common subset;
  only a "no" runs the full validator.
* :mod:`.schema` -- **compile + schema scan**: :class:`CompiledSchema` checks the metaschema,
  every ``$schema``, every ``$ref`` / ``$dynamicRef`` (offline only: the schema itself, the
  official metaschemas and an explicitly passed :class:`referencing.Registry`; nothing is
  fetched), every ``format`` and every regex once at load, then only runs the validator.
"""

from __future__ import annotations

from callgate.arguments.validate.formats import EXCLUDED_FORMATS, SUPPORTED_FORMATS
from callgate.arguments.validate.schema import (
    DIALECT_2020_12,
    VALIDATOR_NAME,
    VALIDATOR_VERSION,
    CompiledSchema,
)

__all__ = [
    "DIALECT_2020_12",
    "EXCLUDED_FORMATS",
    "SUPPORTED_FORMATS",
    "VALIDATOR_NAME",
    "VALIDATOR_VERSION",
    "CompiledSchema",
]
