"""What the sidecar and an agent application both need to read a tool's result: the text forms
of a known secret, the note answered in place of a part that held one, and the ``⟦untrusted:N⟧``
boundary markers with their inverse.

It lives in the client package (standard library only) so the slim client install and its
adapters (:mod:`callgate.adapters.parts`) check result parts with the very functions the sidecar
and the MCP gateway use (:mod:`callgate.execute.redaction`, :mod:`callgate.execute.encode`
re-export them), without loading the sidecar's modules (tests/test_slim_imports.py).
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CLOSE_PREFIX",
    "DEFAULT_MIN_SECRET_LENGTH",
    "OPEN_PREFIX",
    "close_marker",
    "holds_secret",
    "open_marker",
    "part_bytes",
    "part_data",
    "part_views",
    "secret_forms",
    "unmarked_data",
    "withheld_note",
]

DEFAULT_MIN_SECRET_LENGTH = 8
"""Shortest known secret (in characters of its text, or bytes when it is not UTF-8) accepted."""
_PCT = re.compile(r"%[0-9A-F]{2}")
OPEN_PREFIX = "\u27e6untrusted:"
CLOSE_PREFIX = "\u27e6/untrusted:"
_MARK_END = "\u27e7"


# --------------------------------------------------------------------------------------------
# Forms of a known secret


def _b64_cores(data: bytes, encode: Any) -> set[str]:
    """The base64 characters that depend only on ``data``, at byte alignments 0, 1 and 2."""
    out: set[str] = set()
    n = len(data)
    for align in range(3):
        text: str = encode(b"\x00" * align + data).decode("ascii")
        start = -(-8 * align // 6)  # first character whose 6 bits all lie inside the secret
        end = (8 * align + 8 * n) // 6  # one past the last such character
        if end > start:
            out.add(text[start:end])
    return out


def _lower_pct(text: str) -> str:
    return _PCT.sub(lambda m: m.group(0).lower(), text)


def secret_forms(value: str | bytes) -> frozenset[str]:
    """Every text form of one known secret that :class:`Redactor` looks for (see module doc)."""
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        text: str | None = value
    else:
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    forms: set[str] = set()
    if text is not None:
        for t in {text, text.casefold()}:  # the rest of letter case is matching's (re.IGNORECASE)
            forms.add(t)
            escaped = {json.dumps(t)[1:-1], json.dumps(t, ensure_ascii=False)[1:-1]}
            forms |= escaped | {e.replace("/", "\\/") for e in escaped}
            for quote in (True, False):
                escaped_html = html.escape(t, quote=quote)
                forms |= {escaped_html, escaped_html.replace("&#x27;", "&#39;")}
    for safe in ("", "/"):
        for quoted in (
            urllib.parse.quote_from_bytes(raw, safe=safe),
            urllib.parse.quote_plus(raw, safe=safe),
        ):
            forms.add(quoted)
            forms.add(_lower_pct(quoted))
    forms.add(raw.hex())
    forms.add(raw.hex().upper())
    std = _b64_cores(raw, base64.b64encode)
    forms |= std | _b64_cores(raw, base64.urlsafe_b64encode)
    forms |= {urllib.parse.quote(core, safe="") for core in std}
    forms.discard("")
    return frozenset(forms)


def part_data(value: str) -> bytes | None:
    """The decoded base64 of a ``data:`` URL or of base64 text; None when ``value`` is neither."""
    b64 = value.partition(",")[2] if value.startswith("data:") and ";base64," in value else value
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None


def part_bytes(value: str) -> bytes:
    """The bytes a string of a result part stands for: :func:`part_data`, else its UTF-8."""
    data = part_data(value)
    return value.encode("utf-8", "surrogatepass") if data is None else data


def part_views(value: str) -> tuple[bytes, tuple[str, str, str]]:
    """What a string of a result part is searched in for a secret: its bytes (the decoded base64
    of a ``data:`` URL or of base64 text, else its UTF-8) and three casefolded texts (the string,
    its bytes read as Latin-1 and as UTF-8). :func:`holds_secret` and the sidecar's
    :meth:`~callgate.execute.redaction.Redactor.holds_known_secret` share it."""
    raw = part_bytes(value)
    return raw, (
        value.casefold(),
        raw.decode("latin-1").casefold(),
        raw.decode("utf-8", "replace").casefold(),
    )


def holds_secret(value: str, secrets: Iterable[str | bytes]) -> bool:
    """Whether ``value`` (a string of a result part the encoder gets only as size and digest:
    base64 data, a ``data:`` URL, a name) holds one of ``secrets`` (the values redeemed for the
    call, its credential): as the decoded bytes or the text itself, or any form
    :func:`secret_forms` lists (case ignored; forms shorter than
    :data:`DEFAULT_MIN_SECRET_LENGTH` only as the literal). The MCP gateway's binary blocks and
    the adapters' parts are checked by this one function."""
    raw, texts = part_views(value)
    for secret in secrets:
        as_bytes = secret.encode("utf-8", "surrogatepass") if isinstance(secret, str) else bytes(secret)
        if not as_bytes:
            continue
        if as_bytes in raw or (isinstance(secret, str) and secret in value):
            return True
        forms = (f.casefold() for f in secret_forms(secret) if len(f) >= DEFAULT_MIN_SECRET_LENGTH)
        if any(form in text for form in forms for text in texts):
            return True
    return False


def withheld_note(kind: str, why: str = "it contained a secret") -> str:
    """The text answered in place of a result part of type ``kind`` that held a secret (or, with
    ``why``, that could not be checked for one: fail closed)."""
    doc = {
        "type": "callgate_withheld",
        "message": f"callgate withheld a {kind} block of this result: {why}.",
    }
    return json.dumps(doc, sort_keys=True)


# --------------------------------------------------------------------------------------------
# The boundary markers


def open_marker(nonce: str) -> str:
    """``⟦untrusted:<nonce>⟧``: starts a string from the tool."""
    return OPEN_PREFIX + nonce + _MARK_END


def close_marker(nonce: str) -> str:
    """``⟦/untrusted:<nonce>⟧``: ends it."""
    return CLOSE_PREFIX + nonce + _MARK_END


def unmarked_data(content: Mapping[str, Any]) -> tuple[bool, Any]:
    """The complete data of an untruncated ``ok`` message, from the message alone: ``content.data``
    with the boundary markers of its nonce taken off (the inverse of step 3), equal to
    :attr:`EncodedResult.data`. ``(False, None)`` for anything else (an error, a truncated
    message, a missing nonce). Used where only the stored message is at hand, e.g. a replayed
    answer whose structured result must be handed out again (docs/MCP.md)."""
    nonce = content.get("nonce")
    if content.get("status") != "ok" or content.get("truncated") is not False or not isinstance(nonce, str):
        return False, None
    if "data" not in content:
        return False, None
    opening, closing = open_marker(nonce), close_marker(nonce)
    least = len(opening) + len(closing)

    def strip(text: str) -> str:
        if len(text) >= least and text.startswith(opening) and text.endswith(closing):
            return text[len(opening) : len(text) - len(closing)]
        return text

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return strip(value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {strip(k): walk(v) for k, v in value.items()}
        return value

    return True, walk(content["data"])
