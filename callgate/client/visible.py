"""What a person would not see in a string, shown visibly (issue 33, spec 6.6: what the approver
sees is what runs). The one renderer of every confirmation surface: the console, the MCP
gateway's elicitation message and the adapters' own prompts (``callgate.adapters.hitl``). Pure
and dependency-free (the standard library's ``unicodedata``): the slim client imports it.

Three kinds of invisible difference become marks:

* **hidden characters**, shown as ``⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧``;
* **whitespace runs** (two or more spaces in a row, any whitespace other than the space), shown
  as ``⟦120 spaces⟧`` or the code points (``⟦U+0009⟧``);
* **letters of another writing system** in a mixed-script string, shown as their code points
  (``prim⟦U+0430 CYRILLIC SMALL LETTER A⟧ry``), the value followed by
  ``⟦mixed scripts: Latin + Cyrillic⟧``.

What counts as hidden and which script a letter has is a :class:`Renderer`'s data. The sidecar's
(:data:`callgate.arguments.unitext.RENDERER`) uses Unicode's ``Default_Ignorable_Code_Point`` and
``Bidi_Control`` with every ``Cc``, ``Cf``, ``Co`` and ``Cn`` character and U+2800 (the ``regex``
package) and UTS #39 scripts (``disarm``), the same data that refuses identifiers at propose.
:data:`STDLIB` makes do with what ``unicodedata`` has, erring towards more marks: hidden is every
format (``Cf``), control (``Cc``), private-use (``Co``) and unassigned (``Cn``) character that is
not whitespace, U+2800 BRAILLE PATTERN BLANK and the other default-ignorable ones (fillers,
variation selectors, tags; a fixed table, :data:`OTHER_IGNORABLE`), and a letter's script is read from its character name
(``CYRILLIC SMALL LETTER A``: Cyrillic), with UTS #39's augmented sets (Han with Hiragana and
Katakana, with Hangul, with Bopomofo are one writing system) and the mathematical and modifier
letters counting for no script. tests/test_visible.py holds it to the sidecar's renderer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Final

MASK_MARK: Final = re.compile("\u27e6masked ([A-Za-z0-9_.\\-]{1,64})(?: \u2026([A-Za-z0-9]{4}))?\u27e7")
"""A secret the sidecar masked for a person's eyes (:func:`mask_mark`): group 1 the configured
secret's or the pattern's name, group 2 the last four characters a pattern's match shows."""


def mask_mark(name: str, fingerprint: str = "") -> str:
    """``⟦masked <name>⟧``, or ``⟦masked <name> …<fingerprint>⟧``: what a person is shown in
    place of a secret in the arguments of a call they approve (docs/CONSOLE.md, "Secrets are
    masked"). The approval stays bound to the exact arguments (their digest)."""
    return f"\u27e6masked {name} \u2026{fingerprint}\u27e7" if fingerprint else f"\u27e6masked {name}\u27e7"


__all__ = [
    "JSON_STRING",
    "MASK_MARK",
    "mask_mark",
    "OTHER_IGNORABLE",
    "STDLIB",
    "Renderer",
    "SegKind",
    "Segment",
    "visible",
    "visible_json",
]

JSON_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
"""A string literal in JSON text (``json.dumps`` output)."""


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
        if self.kind is SegKind.SPACE and set(self.text) == {" "}:
            return f"{len(self.text)} spaces"
        if self.kind is SegKind.TEXT:
            return self.text
        return " ".join(_code_point(c) for c in self.text)


def _code_point(c: str) -> str:
    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X} {name}".rstrip()


@dataclass(frozen=True, slots=True)
class Renderer:
    """One set of Unicode data, rendered the one way."""

    hidden: Callable[[str], bool]
    """Whether one character is hidden."""
    other_space: Callable[[str], bool]
    """Whether one character is whitespace other than U+0020."""
    scripts_of: Callable[[str], frozenset[str]]
    """The scripts of one character (none: digits, punctuation, marks, symbols, spaces)."""
    mixed_scripts: Callable[[str], tuple[str, ...]]
    """A string's scripts when its letters mix writing systems, else ``()``."""

    def _main_script(self, text: str) -> str:
        counts: dict[str, int] = {}
        for c in text:
            for name in self.scripts_of(c):
                counts[name] = counts.get(name, 0) + 1
        return max(counts, key=lambda k: (counts[k], k == "Latin")) if counts else ""

    def segments(self, text: str) -> list[Segment]:
        """``text`` cut into what is shown as is and what is shown as a mark."""
        if text.isascii() and text.isprintable() and "  " not in text:
            return [Segment(SegKind.TEXT, text)] if text else []
        main = self._main_script(text) if self.mixed_scripts(text) else ""
        out: list[Segment] = []
        plain: list[str] = []

        def mark(kind: SegKind, chunk: str) -> None:
            if plain:
                out.append(Segment(SegKind.TEXT, "".join(plain)))
                plain.clear()
            out.append(Segment(kind, chunk))

        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == " ":
                j = i + 1
                while j < n and text[j] == " ":
                    j += 1
                if j - i > 1:
                    mark(SegKind.SPACE, text[i:j])
                else:
                    plain.append(c)
                i = j
                continue
            if self.other_space(c):
                mark(SegKind.SPACE, c)
            elif self.hidden(c):
                mark(SegKind.HIDDEN, c)
            elif main and (names := self.scripts_of(c)) and main not in names:
                mark(SegKind.FOREIGN, c)
            else:
                plain.append(c)
            i += 1
        if plain:
            out.append(Segment(SegKind.TEXT, "".join(plain)))
        return out

    def visible(self, text: str) -> str:
        """``text`` for a plain-text confirmation surface: every mark as ``⟦label⟧``, and a
        trailing note naming the scripts of a mixed-script value."""
        out = "".join(s.text if s.kind is SegKind.TEXT else f"⟦{s.label}⟧" for s in self.segments(text))
        scripts = self.mixed_scripts(text)
        if scripts:
            out += f" ⟦mixed scripts: {' + '.join(scripts)}⟧"
        return out

    def visible_json(self, text: str) -> str:
        """JSON text for a plain-text confirmation surface, each string literal :meth:`visible`."""

        def literal(m: re.Match[str]) -> str:
            lit = m.group()
            if lit.isascii() and "  " not in lit:
                return lit
            return '"' + self.visible(lit[1:-1]) + '"'

        return JSON_STRING.sub(literal, text)


# -- the standard library's data -----------------------------------------------------------------

OTHER_IGNORABLE: Final = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2065, 0x2065),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF),
)  # fmt: skip
"""Default-ignorable code points that are not format characters (``Cf``): Unicode's
``Other_Default_Ignorable_Code_Point`` and ``Variation_Selector`` (DerivedCoreProperties.txt;
both closed sets, stable since Unicode 6.3, the tags block whole)."""

_BRAILLE_BLANK: Final = 0x2800
"""U+2800 BRAILLE PATTERN BLANK: a symbol (``So``) that shows as nothing."""

_AUGMENTED: Final = {
    "Han": frozenset({"Han", "Japanese", "Korean", "Han with Bopomofo"}),
    "Hiragana": frozenset({"Hiragana", "Japanese"}),
    "Katakana": frozenset({"Katakana", "Japanese"}),
    "Hangul": frozenset({"Hangul", "Korean"}),
    "Bopomofo": frozenset({"Bopomofo", "Han with Bopomofo"}),
}
"""UTS #39 section 5.1's augmented script sets."""
_NO_SCRIPT: Final = ("MATHEMATICAL ", "DOUBLE-STRUCK ", "SCRIPT ", "BLACK-LETTER ", "MODIFIER ")
"""Letter names of the ``Common`` script (counted for no script, as UTS #39 does)."""
_PREFIXES: Final = (
    ("CJK ", "Han"), ("HALFWIDTH KATAKANA", "Katakana"), ("HALFWIDTH HANGUL", "Hangul"),
    ("FULLWIDTH LATIN", "Latin"),
)  # fmt: skip
_LETTERS: Final = frozenset({"Lu", "Ll", "Lt", "Lo"})


def _stdlib_hidden(c: str) -> bool:
    if unicodedata.category(c) in ("Cf", "Cc", "Cn", "Co"):
        return not c.isspace()
    o = ord(c)
    return o == _BRAILLE_BLANK or any(lo <= o <= hi for lo, hi in OTHER_IGNORABLE)


def _stdlib_other_space(c: str) -> bool:
    return c != " " and c.isspace()


@lru_cache(maxsize=4096)
def _stdlib_script(c: str) -> str:
    """One letter's script from its name ("" for no script)."""
    if c.isascii():
        return "Latin" if c.isalpha() else ""
    if unicodedata.category(c) not in _LETTERS:
        return ""
    name = unicodedata.name(c, "")
    if not name or name.startswith(_NO_SCRIPT):
        return ""
    for prefix, script in _PREFIXES:
        if name.startswith(prefix):
            return script
    return name.split(" ", 1)[0].title()


def _stdlib_scripts_of(c: str) -> frozenset[str]:
    s = _stdlib_script(c)
    return frozenset({s}) if s else frozenset()


def _stdlib_mixed(text: str) -> tuple[str, ...]:
    if text.isascii():
        return ()
    seen: dict[str, None] = {}
    common: frozenset[str] | None = None
    for c in text:
        s = _stdlib_script(c)
        if not s:
            continue
        seen[s] = None
        sets = _AUGMENTED.get(s, frozenset({s}))
        common = sets if common is None else common & sets
    return tuple(seen) if common is not None and not common else ()


STDLIB: Final = Renderer(_stdlib_hidden, _stdlib_other_space, _stdlib_scripts_of, _stdlib_mixed)
"""The renderer of the slim client (the standard library's Unicode data, above)."""


def visible(text: str) -> str:
    """:meth:`Renderer.visible` with :data:`STDLIB`."""
    return STDLIB.visible(text)


def visible_json(text: str) -> str:
    """:meth:`Renderer.visible_json` with :data:`STDLIB`."""
    return STDLIB.visible_json(text)
