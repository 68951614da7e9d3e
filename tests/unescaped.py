"""A test-side reading of text behind JSON string escapes (and HTML character references and
percent-escapes), written apart from the redactor's own (callgate/execute/redaction.py) so a test
of the redactor can fail: :func:`behind_escapes` (:func:`behind_encodings`) says whether a value
is in a text as written or once its escapes are decoded, level after level."""

from __future__ import annotations

import html
import json
import re
import urllib.parse

_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')


def decoded_levels(text: str, levels: int = 6) -> list[str]:
    """``text`` and the texts behind its JSON escapes, one per level (surrogate pairs joined)."""
    out = [text]
    for _ in range(levels):
        nxt = _ESCAPE.sub(lambda m: json.loads('"' + m.group() + '"'), out[-1])
        nxt = nxt.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if nxt == out[-1]:
            break
        out.append(nxt)
    return out


def behind_escapes(text: str, value: str) -> bool:
    """Whether ``value`` (case ignored) is in ``text`` or in a text behind its JSON escapes.
    Returns a bool only, so an assertion on it never prints either."""
    folded = value.casefold()
    return any(folded in level.casefold() for level in decoded_levels(text))


def encoded_levels(text: str, levels: int = 3) -> list[str]:
    """``text`` and the texts behind its JSON escapes, HTML character references
    (``html.unescape``) and percent-escapes (``urllib.parse.unquote``), one per level, each level
    decoding all three in turn (stdlib decoders, none of the redactor's)."""
    out = [text]
    for _ in range(levels):
        nxt = _ESCAPE.sub(lambda m: json.loads('"' + m.group() + '"'), out[-1])
        nxt = nxt.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        nxt = urllib.parse.unquote(html.unescape(nxt), errors="replace")
        if nxt == out[-1]:
            break
        out.append(nxt)
    return out


def behind_encodings(text: str, value: str) -> bool:
    """Whether ``value`` (case ignored) is in ``text`` or behind its JSON, HTML or percent
    escapes (:func:`encoded_levels`). Returns a bool only."""
    folded = value.casefold()
    return any(folded in level.casefold() for level in encoded_levels(text))
