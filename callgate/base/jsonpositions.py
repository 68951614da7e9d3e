"""Where each member of a JSON document is written: JSON Pointer -> (line, column).

A small position-tracking scanner for messages about files authors edit (ToolSpecs): a problem
found at ``/input_schema/requried`` is reported at the line and column of that member's name,
not at line 1. The text is expected to be valid JSON (it is parsed strictly first); on anything
else the scan stops and the positions found so far are returned. No I/O, no callgate imports.
"""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable
from typing import Final, cast

_scanstring = cast(Callable[[str, int], tuple[str, int]], getattr(json.decoder, "scanstring"))  # noqa: B009
"""``json.decoder.scanstring(text, after_quote) -> (value, end)`` (not in the type stubs)."""
_WS: Final = re.compile(r"[ \t\n\r]*")
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.found: dict[str, tuple[int, int]] = {}
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def at(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:  # last line start <= offset
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self._line_starts[lo] + 1

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i

    def value(self, i: int, pointer: str) -> int:
        """Scan the value at ``i`` (whitespace skipped); return the offset after it."""
        text = self.text
        i = self.ws(i)
        self.found.setdefault(pointer, self.at(i))
        ch = text[i : i + 1]
        if ch == "{":
            i = self.ws(i + 1)
            if text[i : i + 1] == "}":
                return i + 1
            while True:
                i = self.ws(i)
                key_at = i
                key, i = _scanstring(text, i + 1)
                child = f"{pointer}/{_escape(key)}"
                self.found[child] = self.at(key_at)
                i = self.ws(i)
                i = self.value(i + 1, child)  # past ':'
                i = self.ws(i)
                if text[i : i + 1] == ",":
                    i += 1
                    continue
                return i + 1  # '}'
        if ch == "[":
            i = self.ws(i + 1)
            if text[i : i + 1] == "]":
                return i + 1
            n = 0
            while True:
                i = self.value(i, f"{pointer}/{n}")
                n += 1
                i = self.ws(i)
                if text[i : i + 1] == ",":
                    i += 1
                    continue
                return i + 1  # ']'
        if ch == '"':
            return _scanstring(text, i + 1)[1]
        m = _SCALAR.match(text, i)
        if not m:
            raise ValueError(f"unexpected character at offset {i}")
        return m.end()


def positions(text: str) -> dict[str, tuple[int, int]]:
    """Every JSON Pointer of ``text`` -> ``(line, column)`` (both from 1; the column counts
    characters): an object member's position is its name's opening quote, an array element's
    (and the root's) the start of the value. Best effort on invalid JSON."""
    scanner = _Scanner(text)
    try:
        scanner.value(0, "")
    except (ValueError, IndexError):
        pass
    return scanner.found


def locate(text: str, pointer: str) -> tuple[int, int]:
    """The position of ``pointer`` in ``text``, else of its nearest ancestor that is present
    (e.g. the object a missing member should be in); ``(1, 1)`` for nothing."""
    found = positions(text)
    p = pointer
    while True:
        if p in found:
            return found[p]
        if not p:
            return (1, 1)
        p = p.rsplit("/", 1)[0]


__all__ = ["locate", "positions"]
