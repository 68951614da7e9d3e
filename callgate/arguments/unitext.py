"""Text that cannot hide (issue 33): what in a string a person would not see, and how every
confirmation surface shows it.

Three kinds of invisible difference:

* **hidden characters**: Unicode's ``Default_Ignorable_Code_Point`` (zero-width space and joiner,
  word joiner, soft hyphen, variation selectors, tags, Hangul fillers, ...), ``Bidi_Control`` (the
  embeddings, overrides and isolates that reorder what is shown: ``"\\u202eyramirp\\u202c"``
  reads "primary"), every control (``Cc``: C0, DEL, C1 such as U+009B), format (``Cf``: the
  interlinear annotation characters U+FFF9-FFFB...), private-use (``Co``) and unassigned
  (``Cn``) code point, and the blank U+2800 BRAILLE PATTERN BLANK; whitespace is not hidden (it is
  its own kind, below); the properties come from the ``regex`` package's Unicode tables;
* **mixed scripts**: letters of writing systems that have no script in common (``"prim\\u0430ry"``
  with a Cyrillic ``а``), after UTS #39 section 5.1's augmented sets (Han with Hiragana and
  Katakana, with Hangul, with Bopomofo are one writing system), from the ``disarm`` package
  (:data:`SCRIPT_DATA` names its Unicode version);
* **whitespace runs**: two or more spaces in a row, and any whitespace other than the space
  (tabs, line breaks, no-break and ideographic spaces), which push the rest of a value out of view.

:func:`flags` says which of them a string has (policy sees them, the console lists them);
:func:`segments` cuts a string into what to show as is and what to show as a mark, used by
:func:`visible` (plain text: MCP elicitation messages) and by the console's HTML rendering: the
one renderer of :mod:`callgate.client.visible` (which the slim client's adapters use with the
standard library's data) given this module's data (:data:`RENDERER`).
"""

from __future__ import annotations

from enum import Enum
from typing import Final

import disarm
import regex

from callgate.client.visible import Renderer, SegKind, Segment

__all__ = [
    "RENDERER",
    "SCRIPT_DATA",
    "Flag",
    "SegKind",
    "Segment",
    "flags",
    "hidden_positions",
    "mixed_scripts",
    "segments",
    "visible",
    "visible_json",
]

SCRIPT_DATA: Final = f"disarm {getattr(disarm, '__version__', '?')} (Unicode {disarm.UNICODE_VERSION})"
"""Where the script data comes from (docs, logs)."""

_HIDDEN: Final = regex.compile(
    r"(?!\s)[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}\p{Cc}\p{Cf}\p{Co}\p{Cn}\u2800]"
)
"""A hidden character (the one definition: identifiers refused or stripped, free text flagged,
every confirmation surface's marks). Whitespace controls (tab, line breaks, U+0085) are whitespace
(:data:`_OTHER_SPACE`), not hidden."""
_OTHER_SPACE: Final = regex.compile(r"[^\S ]")
"""Whitespace that is not U+0020 (tab, line breaks, NBSP, the U+2000 spaces, U+3000...)."""
JSON_STRING: Final = regex.compile(r'"(?:[^"\\]|\\.)*"')
"""A string literal in JSON text (``json.dumps`` output)."""


class Flag(str, Enum):
    """What a string hides (the names are stable: policy and events use them)."""

    HIDDEN = "hidden_characters"
    """Default-ignorable, bidi control, control, format, private-use or unassigned characters
    (and U+2800), whitespace aside."""
    MIXED_SCRIPT = "mixed_script"
    """Letters of writing systems with no script in common."""
    WHITESPACE_RUN = "whitespace_run"
    """Two or more spaces in a row, or whitespace other than the space."""


def _plain_ascii(text: str) -> bool:
    """Printable ASCII only: nothing hidden (DEL and the C0 controls are ASCII but not printable)."""
    return text.isascii() and text.isprintable()


def hidden_positions(text: str) -> list[int]:
    """Indexes of the hidden characters of ``text``."""
    if _plain_ascii(text):
        return []
    return [m.start() for m in _HIDDEN.finditer(text)]


def mixed_scripts(text: str) -> tuple[str, ...]:
    """The scripts of ``text``'s letters when they mix writing systems, else ``()``."""
    if text.isascii() or not disarm.is_mixed_script(text):
        return ()
    return tuple(s.value for s in disarm.detect_scripts(text))


def flags(text: str) -> frozenset[Flag]:
    """What ``text`` hides."""
    out: set[Flag] = set()
    if "  " in text or _OTHER_SPACE.search(text):
        out.add(Flag.WHITESPACE_RUN)
    if not _plain_ascii(text) and _HIDDEN.search(text):
        out.add(Flag.HIDDEN)
    if mixed_scripts(text):
        out.add(Flag.MIXED_SCRIPT)
    return frozenset(out)


def _scripts_of(c: str) -> frozenset[str]:
    """The scripts of one letter (none for digits, punctuation, marks, spaces)."""
    if c.isascii():
        return frozenset({"Latin"}) if c.isalpha() else frozenset()
    return frozenset(s.value for s in disarm.detect_scripts(c))


RENDERER: Final = Renderer(
    hidden=lambda c: _HIDDEN.fullmatch(c) is not None,
    other_space=lambda c: _OTHER_SPACE.fullmatch(c) is not None,
    scripts_of=_scripts_of,
    mixed_scripts=mixed_scripts,
)
"""The one renderer (:mod:`callgate.client.visible`) with the sidecar's Unicode data: what the
console and the MCP elicitation show."""


def segments(text: str) -> list[Segment]:
    """``text`` cut into what is shown as is and what is shown as a mark."""
    return RENDERER.segments(text)


def visible(text: str) -> str:
    """``text`` for a plain-text confirmation surface: every mark as ``⟦label⟧``, and a
    trailing note naming the scripts of a mixed-script value."""
    return RENDERER.visible(text)


def visible_json(text: str) -> str:
    """JSON text for a plain-text confirmation surface, each string literal :func:`visible`."""
    return RENDERER.visible_json(text)
