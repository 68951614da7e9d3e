"""Values as the console shows them (issue 33): JSON text whose string values show every hidden
character as its code point, every whitespace run as a mark with its length and every letter of
another script in a mixed-script value as a mark, the value itself marked as mixed
(:mod:`callgate.arguments.unitext`). Hidden characters are never sent to the browser as such: a bidi
override in the page would reorder what the person reads."""

from __future__ import annotations

from markupsafe import Markup, escape

from callgate.arguments import unitext
from callgate.arguments.unitext import SegKind

_STRING = unitext.JSON_STRING


def _marks(text: str, quote: str) -> str:
    html = []
    for seg in unitext.segments(text):
        label = escape(seg.label)
        if seg.kind is SegKind.TEXT:
            html.append(str(escape(seg.text)))
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


__all__ = ["json_visible", "text_visible"]
