"""Text that cannot hide (issue 33): what in a string a person would not see, and how every
confirmation surface shows it.

Three kinds of invisible difference:

* **hidden characters**: Unicode's ``Default_Ignorable_Code_Point`` (zero-width space and joiner,
  word joiner, soft hyphen, variation selectors, tags, ...) and ``Bidi_Control`` (the embeddings,
  overrides and isolates that reorder what is shown: ``"\\u202eyramirp\\u202c"`` reads
  "primary"); the properties come from the ``regex`` package's Unicode tables;
* **mixed scripts**: letters of writing systems that have no script in common (``"prim\\u0430ry"``
  with a Cyrillic ``а``), after UTS #39 section 5.1's augmented sets (Han with Hiragana and
  Katakana, with Hangul, with Bopomofo are one writing system), from the ``disarm`` package
  (:data:`SCRIPT_DATA` names its Unicode version);
* **whitespace runs**: two or more spaces in a row, and any whitespace other than the space
  (tabs, line breaks, no-break and ideographic spaces), which push the rest of a value out of view.

:func:`flags` says which of them a string has (policy sees them, the console lists them);
:func:`segments` cuts a string into what to show as is and what to show as a mark, used by
:func:`visible` (plain text: MCP elicitation messages, adapters' prompts) and by the console's
HTML rendering.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import Enum
from typing import Final

import disarm
import regex

__all__ = [
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

_HIDDEN: Final = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}]")
_OTHER_SPACE: Final = regex.compile(r"[^\S ]")
"""Whitespace that is not U+0020 (tab, line breaks, NBSP, the U+2000 spaces, U+3000...)."""
JSON_STRING: Final = regex.compile(r'"(?:[^"\\]|\\.)*"')
"""A string literal in JSON text (``json.dumps`` output)."""
_RUN: Final = regex.compile(r" {2,}|[^\S ]|[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}]")


class Flag(str, Enum):
    """What a string hides (the names are stable: policy and events use them)."""

    HIDDEN = "hidden_characters"
    """Default-ignorable or bidi control characters."""
    MIXED_SCRIPT = "mixed_script"
    """Letters of writing systems with no script in common."""
    WHITESPACE_RUN = "whitespace_run"
    """Two or more spaces in a row, or whitespace other than the space."""


def hidden_positions(text: str) -> list[int]:
    """Indexes of the hidden characters of ``text``."""
    if text.isascii():
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
    if not text.isascii():
        if _HIDDEN.search(text):
            out.add(Flag.HIDDEN)
        if mixed_scripts(text):
            out.add(Flag.MIXED_SCRIPT)
    return frozenset(out)


class SegKind(str, Enum):
    TEXT = "text"
    """Shown as is."""
    HIDDEN = "hidden"
    """A hidden character, shown as its code point and name."""
    SPACE = "space"
    """Whitespace other than one space, shown as a mark with its length."""
    FOREIGN = "foreign"
    """A letter of a script other than the string's main one, in a mixed-script string."""


@dataclass(frozen=True, slots=True)
class Segment:
    kind: SegKind
    text: str
    """The characters themselves."""

    @property
    def label(self) -> str:
        """How a mark reads: ``U+202E RIGHT-TO-LEFT OVERRIDE``, ``120 spaces``, ``U+0430
        CYRILLIC SMALL LETTER A``."""
        if self.kind is SegKind.SPACE:
            if set(self.text) == {" "}:
                return f"{len(self.text)} spaces"
            return " ".join(_code_point(c) for c in self.text)
        if self.kind in (SegKind.HIDDEN, SegKind.FOREIGN):
            return " ".join(_code_point(c) for c in self.text)
        return self.text


def _code_point(c: str) -> str:
    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X} {name}".rstrip()


def _scripts_of(c: str) -> frozenset[str]:
    """The scripts of one letter (none for digits, punctuation, marks, spaces)."""
    if c.isascii():
        return frozenset({"Latin"}) if c.isalpha() else frozenset()
    return frozenset(s.value for s in disarm.detect_scripts(c))


def _main_script(text: str) -> str:
    counts: dict[str, int] = {}
    for c in text:
        for name in _scripts_of(c):
            counts[name] = counts.get(name, 0) + 1
    return max(counts, key=lambda k: (counts[k], k == "Latin")) if counts else ""


def segments(text: str) -> list[Segment]:
    """``text`` cut into what is shown as is and what is shown as a mark."""
    if text.isascii() and "  " not in text and not any(c in text for c in "\t\n\r\v\f"):
        return [Segment(SegKind.TEXT, text)] if text else []
    main = _main_script(text) if mixed_scripts(text) else ""
    out: list[Segment] = []
    plain: list[str] = []

    def mark(kind: SegKind, chunk: str) -> None:
        if plain:
            out.append(Segment(SegKind.TEXT, "".join(plain)))
            plain.clear()
        out.append(Segment(kind, chunk))

    def letters(chunk: str) -> None:
        for c in chunk:
            names = _scripts_of(c) if main else frozenset()
            if names and main not in names:
                mark(SegKind.FOREIGN, c)
            else:
                plain.append(c)

    pos = 0
    for m in _RUN.finditer(text):
        letters(text[pos : m.start()])
        chunk = m.group()
        mark(SegKind.HIDDEN if _HIDDEN.fullmatch(chunk) else SegKind.SPACE, chunk)
        pos = m.end()
    letters(text[pos:])
    if plain:
        out.append(Segment(SegKind.TEXT, "".join(plain)))
    return out


def visible(text: str) -> str:
    """``text`` for a plain-text confirmation surface: every mark as ``⟦label⟧``, and a
    trailing note naming the scripts of a mixed-script value."""
    parts = [s.text if s.kind is SegKind.TEXT else f"⟦{s.label}⟧" for s in segments(text)]
    out = "".join(parts)
    scripts = mixed_scripts(text)
    if scripts:
        out += f" ⟦mixed scripts: {' + '.join(scripts)}⟧"
    return out


def _visible_literal(m: regex.Match[str]) -> str:
    literal = m.group()
    if literal.isascii() and "  " not in literal:
        return literal
    return '"' + visible(literal[1:-1]) + '"'


def visible_json(text: str) -> str:
    """JSON text for a plain-text confirmation surface, each string literal :func:`visible`."""
    return JSON_STRING.sub(_visible_literal, text)
