"""Strict JSON parse of the model's argument bytes (spec 6.3, 6.4 layer 1).

RFC 8259 JSON with the I-JSON-style refusals a gate needs, so that the parser and every later
reader agree on one value (field notes: parser/authorizer differentials):

=========================  =====================================================
refusal                    error code
=========================  =====================================================
more than ``max_bytes``    ``too_large`` (checked before decoding)
invalid UTF-8, UTF-8 BOM   ``invalid_utf8`` / ``invalid_json``
duplicate object key       ``duplicate_key`` (keys compared after unescaping)
``NaN``/``Infinity``       ``non_finite_number``
float over/underflow       ``number_overflow`` (``1e400``; ``1e-400`` would read as 0)
float precision loss       ``number_overflow`` (``100.0000000000000000001`` would read as 100)
lone surrogate escape      ``lone_surrogate``
bytes after the value      ``trailing_data``
nesting > ``max_depth``    ``too_deep`` (pre-scan, never a RecursionError)
top level not an object    ``not_an_object`` (``parse_arguments`` only)
anything else              ``invalid_json``
=========================  =====================================================

A float literal must be the double it reads as, to the precision it was written with (the double
rounded to the literal's count of significant digits is the literal): a literal with more
precision than a double would otherwise run as a number other than the one the model wrote and
the approver saw. The shortest form and C's ``%.17g`` both pass. Literals of at most 15
significant digits in the normal range always do and skip the exact ``Decimal`` compare. Integers stay exact Python ints (canonicalization later refuses those beyond I-JSON's ±(2^53-1)).
Error messages give positions and JSON pointers, never the bytes themselves (they may hold
secrets). The hot path is the stdlib C scanner with one prebuilt decoder; the slower checks
(surrogates, pointer of a duplicate) run only when a cheap test says they may be needed.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from callgate.base import jsonpointer
from callgate.base.errors import (
    duplicate_key,
    invalid_json,
    invalid_utf8,
    lone_surrogate,
    non_finite_number,
    not_an_object,
    number_overflow,
    too_deep,
    too_large,
    trailing_data,
)
from callgate.base.model import JSONValue, ParsedArguments

__all__ = ["ParseLimits", "parse_arguments", "parse_json_document"]


@dataclass(frozen=True, slots=True)
class ParseLimits:
    max_bytes: int = 65536
    """Largest accepted document in bytes; larger input is refused before it is decoded."""
    max_depth: int = 64
    """Most nested arrays/objects allowed: ``{}`` has depth 1, ``{"a": [1]}`` depth 2."""


_DEFAULT_LIMITS = ParseLimits()
_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_NONZERO_MANTISSA = re.compile(r"-?0*(?:\.0*)?[1-9]")
_SMALLEST_NORMAL = sys.float_info.min
_EXPONENT = re.compile(r"[eE]")
_DEPTH_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class _Duplicate(Exception):
    pass


class _NonFinite(Exception):
    pass


class _Overflow(Exception):
    pass


class _Inexact(_Overflow):
    """A float literal that no double holds exactly as its shortest form (precision loss)."""


def _pairs_strict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Duplicate()
    return d


def _constant(name: str) -> Any:
    raise _NonFinite(name)


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Overflow(text)
    if value == 0.0:
        if _NONZERO_MANTISSA.match(text):
            raise _Overflow(text)  # underflow: a non-zero literal would silently read as 0
        return value
    if (len(text) > 15 or abs(value) < _SMALLEST_NORMAL) and not _round_trips(text, value):
        raise _Inexact(text)  # precision loss: the literal would silently read as another number
    return value


def _significant_digits(text: str) -> int:
    mantissa = _EXPONENT.split(text, 1)[0]
    return len(mantissa.lstrip("-").replace(".", "").strip("0"))


_MAX_EXACT_DIGITS: Final = 767
"""A double's exact decimal expansion has at most 767 significant digits: a literal with more
(after its trailing zeros) is never one."""


def _round_trips(text: str, value: float) -> bool:
    """Whether the literal is the double it reads as, to the precision it was written with: the
    literal is the double's shortest form (``repr``: ``0.1``, what JavaScript, Python and Go
    print) or the double rounded to the literal's own count of significant digits (C's
    ``%.17g``, ``0.10000000000000001``, jansson's default; ties to even, as printf rounds).
    ``100.0000000000000000001`` or ``1.0000000000000001`` (which read as 100 and 1) are neither."""
    digits = _significant_digits(text)
    if abs(value) >= _SMALLEST_NORMAL and digits <= 15:
        return True  # DBL_DIG: 15 significant digits always round-trip in the normal range
    if digits > _MAX_EXACT_DIGITS:
        return False
    literal = Decimal(text)  # exact, as are the compares (no arithmetic under the context)
    if literal == Decimal(repr(value)):
        return True  # the shortest form (2**-24 is 5.960464477539063e-08, a tie rounded up)
    return Decimal(format(value, f".{digits - 1}e")) == literal


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_strict, parse_constant=_constant, parse_float=_float, strict=True
)


class _DupMarker(dict[str, Any]):
    """Object in which a duplicate key was seen (used only on the error path)."""

    dup_key: str = ""


def _pairs_marking(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            m = _DupMarker(d)
            m.dup_key = k
            return m
        d[k] = v
    return d


_MARKING = json.JSONDecoder(
    object_pairs_hook=_pairs_marking, parse_constant=_constant, parse_float=_float, strict=True
)


def _position(text: str, pos: int) -> dict[str, str]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return {"offset": str(pos), "line": str(line), "column": str(col)}


def _find_duplicate(value: Any, path: str = "") -> tuple[str, str] | None:
    if isinstance(value, _DupMarker):
        return path, value.dup_key
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)  # type: ignore[assignment]
    else:
        return None
    for k, v in items:
        found = _find_duplicate(v, f"{path}/{jsonpointer.escape(k)}")
        if found:
            return found
    return None


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _find_surrogate(value: Any, path: str = "") -> str | None:
    if isinstance(value, str):
        return path if _has_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}/{jsonpointer.escape(k)}"
            if _has_surrogate(k):
                return sub
            found = _find_surrogate(v, sub)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_surrogate(v, f"{path}/{i}")
            if found is not None:
                return found
    return None


def _check_depth(text: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot be deeper than the number of openers
    depth = 0
    for m in _DEPTH_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > max_depth:
                raise too_deep(
                    f"nesting deeper than the limit of {max_depth}",
                    position=_position(text, m.start()),
                )
        elif c in "]}":
            depth -= 1


def parse_json_document(raw: bytes, limits: ParseLimits = _DEFAULT_LIMITS) -> JSONValue:
    """Strictly parse any JSON text (any top-level value). Raises :class:`RejectedError`."""
    if len(raw) > limits.max_bytes:
        raise too_large(
            f"document is {len(raw)} bytes, over the limit of {limits.max_bytes}",
            position={},
        )
    if raw.startswith(b"\xef\xbb\xbf"):
        raise invalid_json(
            "a byte order mark is not allowed (RFC 8259 section 8.1)",
            position=_position("", 0),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_utf8(
            f"invalid UTF-8 at byte offset {exc.start}",
            position={"offset": str(exc.start)},
        ) from None
    _check_depth(text, limits.max_depth)
    start = _WS.match(text, 0).end()  # type: ignore[union-attr]
    try:
        value, end = _DECODER.raw_decode(text, start)
    except _Duplicate:
        try:  # the same text up to the duplicate parses; locate the object
            value, end = _MARKING.raw_decode(text, start)
            found = _find_duplicate(value)
        except (_NonFinite, _Overflow, ValueError, RecursionError):  # _Inexact too
            found = None  # a later value is bad too: the duplicate came first, unlocated
        pointer, key = found if found else ("", "")
        raise duplicate_key(
            f"duplicate key '{jsonpointer.escape(key)}' in the object at '{pointer or '/'}'",
            pointer=f"{pointer}/{jsonpointer.escape(key)}",
        ) from None
    except _NonFinite as exc:
        raise non_finite_number(f"{exc.args[0]} is not a JSON number", position={}) from None
    except _Inexact:
        raise number_overflow(
            "a number has more precision than a double holds: it would read as a different number",
            position={},
        ) from None
    except _Overflow:
        raise number_overflow(
            "a number is outside the range of a double (overflow or underflow)",
            position={},
        ) from None
    except json.JSONDecodeError as exc:
        raise invalid_json(exc.msg, position=_position(text, exc.pos)) from None
    except (ValueError, RecursionError):  # e.g. an integer over Python's digit limit
        raise invalid_json("value cannot be represented", position={}) from None
    tail = _WS.match(text, end).end()  # type: ignore[union-attr]
    if tail != len(text):
        raise trailing_data("unexpected data after the JSON value", position=_position(text, tail))
    if _SURROGATE_ESCAPE.search(text):
        bad = _find_surrogate(value)
        if bad is not None:
            raise lone_surrogate(
                "a string holds an unpaired UTF-16 surrogate escape",
                pointer=bad or "/",
            )
    return value


def parse_arguments(raw: bytes, limits: ParseLimits = _DEFAULT_LIMITS) -> ParsedArguments:
    """:func:`parse_json_document` plus: the top level must be an object."""
    value = parse_json_document(raw, limits)
    if not isinstance(value, dict):
        raise not_an_object(
            f"arguments must be a JSON object, not {type(value).__name__}",
            pointer="",
        )
    return ParsedArguments(raw=raw, value=value)
