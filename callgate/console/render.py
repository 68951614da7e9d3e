"""Values as the console shows them (issue 33): JSON text whose string values show every hidden
character as its code point, every whitespace run as a mark with its length and every letter of
another script in a mixed-script value as a mark, the value itself marked as mixed
(:mod:`callgate.arguments.unitext`). Hidden characters are never sent to the browser as such: a bidi
override in the page would reorder what the person reads."""

from __future__ import annotations

import unicodedata

from markupsafe import Markup, escape

from callgate.arguments import unitext
from callgate.arguments.unitext import SegKind
from callgate.client.visible import MASK_MARK

_STRING = unitext.JSON_STRING
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs"})
"""Control, format, private-use, unassigned and surrogate code points: none has a glyph a person can
read, so the console marks every one the shared renderer leaves as text (DEL, the C1 controls such
as U+009B, U+FFF9..U+FFFB, U+13430..)."""
_BLANK_GLYPHS = frozenset({0x2800, 0x1D159})
"""Graphic characters drawn as nothing (BRAILLE PATTERN BLANK, MUSICAL SYMBOL NULL NOTEHEAD)."""
COMBINING_MAX = 3
"""Combining marks on one base shown as they are; a longer run is drawn over the lines around it
(stacked marks can hide a neighbouring value), so it is shown as one mark naming its length."""


def _unseen(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSEEN_CATEGORIES or ord(ch) in _BLANK_GLYPHS


def _combining(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Me")


def _label(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X} {name}" if name else f"U+{ord(ch):04X}"


def _text(text: str) -> str:
    """Text the shared renderer shows as is, secrets the sidecar masked shown as such marks, what
    a browser would still hide marked."""
    if "\u27e6masked " not in text:
        return _shown(text)
    html, pos = [], 0
    for m in MASK_MARK.finditer(text):
        html.append(_shown(text[pos : m.start()]))
        name, tail = m.group(1), m.group(2)
        label = escape(f"a secret ({name}) masked by callgate" + (f", ends in {tail}" if tail else ""))
        html.append(
            f'<span class="cp masked" data-secret="{escape(name)}" title="{label}">{escape(m.group())}</span>'
        )
        pos = m.end()
    html.append(_shown(text[pos:]))
    return "".join(html)


def _shown(text: str) -> str:
    html, i = [], 0
    while i < len(text):
        ch = text[i]
        if _unseen(ch):
            label = escape(_label(ch))
            html.append(f'<span class="cp hidden" title="{label}">⟦{label}⟧</span>')
            i += 1
            continue
        j = i
        while j < len(text) and _combining(text[j]):
            j += 1
        if j - i > COMBINING_MAX:
            label = escape(f"{j - i} combining marks, first {_label(ch)}")
            html.append(f'<span class="cp hidden" title="{label}">⟦{label}⟧</span>')
            i = j
            continue
        html.append(str(escape(text[i:j] if j > i else ch)))
        i = max(j, i + 1)
    return "".join(html)


def unseen(text: str) -> bool:
    """Whether ``text`` holds something the console marks beyond the shared renderer's marks."""
    run = 0
    for ch in text:
        if _unseen(ch):
            return True
        run = run + 1 if _combining(ch) else 0
        if run > COMBINING_MAX:
            return True
    return False


def _marks(text: str, quote: str) -> str:
    html = []
    for seg in unitext.segments(text):
        label = escape(seg.label)
        if seg.kind is SegKind.TEXT:
            html.append(_text(seg.text))
        elif seg.kind is SegKind.FOREIGN:
            html.append(
                f'<mark class="cp foreign" title="{label}">{escape(seg.text)}<small>⟦{label}⟧</small></mark>'
            )
        else:
            html.append(f'<span class="cp {seg.kind.value}" title="{label}">⟦{label}⟧</span>')
    body = quote + "".join(html) + quote
    scripts = unitext.mixed_scripts(text)
    if not scripts:
        return body
    names = escape(" + ".join(scripts))
    return (
        f'<span class="mixed" data-scripts="{names}">{body}</span>'
        f'<span class="badge mixed-badge">mixed scripts: {names}</span>'
    )


def json_visible(text: str) -> Markup:
    """Pretty JSON text as HTML, its string literals shown visibly."""
    out, pos = [], 0
    for m in _STRING.finditer(text):
        out.append(str(escape(text[pos : m.start()])))
        out.append(_marks(m.group()[1:-1], '"'))
        pos = m.end()
    out.append(str(escape(text[pos:])))
    return Markup("".join(out))


def text_visible(text: str) -> Markup:
    """Plain text (a subject, a tool name, a reason) as HTML, shown visibly."""
    return Markup(_marks(text, ""))


__all__ = ["COMBINING_MAX", "json_visible", "text_visible", "unseen"]
