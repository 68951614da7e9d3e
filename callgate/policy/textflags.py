"""Free text that hides characters, as the policies see it (issue 33 item 1; spec 6.6).

An identifier that hides characters is refused at propose (``text_refused``,
:mod:`callgate.arguments.textpolicy`). Free text (a ToolSpec string whose ``text_policy`` is
``free``: titles, bodies) keeps them, and every confirmation surface shows them as marks. The
policies see it too: when a string argument of the normalized arguments has one of
:class:`callgate.arguments.unitext.Flag`, the request's context carries ``text``::

    context.text = {
      hidden: Bool,               // default-ignorable or bidi control characters somewhere
      mixed_script: Bool,         // letters of writing systems with no script in common
      whitespace_run: Bool,       // two or more spaces, or whitespace other than the space
      hidden_at: Set<String>,     // the JSON pointers of the strings with hidden characters
      mixed_script_at: Set<String>,
      whitespace_run_at: Set<String>,
    }

and carries **no** ``text`` otherwise, on every engine (so ``context has text`` is "some string
argument hides something"). Cedar declares it optional (``text?:``, the generated schema does:
:data:`CEDAR_TEXT_TYPE`); a hand-written Cedar schema or ``data.json`` context that does not
declare it never gets it (the request stays as it was). A policy reads it as
``context has text && context.text.hidden`` (Cedar) or ``input.context.text.hidden`` (Rego:
undefined when absent). Only string values are read (not object keys); identifiers reach here
without hidden characters or mixed scripts (refused or stripped before), so for them only
``whitespace_run`` can be set.

The compiled core does not compute these flags: a proposal whose canonical arguments could hold
one (:func:`may_flag`) and does (:func:`text_context`) is decided by the Python stages
(:func:`callgate.propose.steps.front`), whose Cedar engine may still be the compiled one.
docs/POLICIES.md#free-text-that-hides-characters has the worked example.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from callgate.arguments import unitext
from callgate.arguments.unitext import Flag
from callgate.base import jsonpointer
from callgate.base.model import JSONValue

__all__ = ["CEDAR_TEXT_TYPE", "TEXT_KEY", "may_flag", "text_context"]

TEXT_KEY: Final = "text"
"""``context.text``."""

_AT: Final = "_at"
CEDAR_TEXT_TYPE: Final = (
    "{ hidden: Bool, mixed_script: Bool, whitespace_run: Bool, "
    "hidden_at: Set<String>, mixed_script_at: Set<String>, whitespace_run_at: Set<String> }"
)
"""The Cedar type of ``context.text`` (declared optional: ``text?: ...``)."""


def _walk(value: JSONValue, pointer: str, out: dict[Flag, list[str]]) -> None:
    if isinstance(value, str):
        for flag in unitext.flags(value):
            out[flag].append(pointer)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _walk(v, f"{pointer}/{jsonpointer.escape(k)}", out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{pointer}/{i}", out)


def text_context(value: JSONValue) -> dict[str, JSONValue] | None:
    """``context.text`` for the normalized arguments ``value``, or None when no string hides
    anything (then the context has no ``text``). Pointers are sorted."""
    found: dict[Flag, list[str]] = {f: [] for f in Flag}
    _walk(value, "", found)
    if not any(found.values()):
        return None
    out: dict[str, JSONValue] = {}
    for flag in Flag:
        at = sorted(found[flag])
        out[flag.value.removesuffix("_characters")] = bool(at)
        out[flag.value.removesuffix("_characters") + _AT] = list(at)
    return out


def may_flag(canonical: bytes) -> bool:
    """Whether RFC 8785 bytes of arguments could hold a string :func:`text_context` flags: bytes
    outside ASCII, an escape (a control character, a line break, a tab), or two spaces in a
    row. False is exact (no JSON text without them has a flagged string); True asks for
    :func:`text_context`."""
    return not canonical.isascii() or b"\\" in canonical or b"  " in canonical
