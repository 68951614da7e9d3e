"""Compact, key-sorted JSON text for records, with the C encoder built once.

``json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))`` builds a
:class:`json.JSONEncoder` and then a C encoder object on every call: ~6 µs for an event's small
``data`` mapping, of which the encoding itself is about half. The store writes several such
mappings per Propose on its writer thread, holding the GIL the event loop waits for, so
:func:`compact_sorted` keeps one C encoder (the same ``_json.make_encoder`` that ``json.dumps``
uses, with the same separators, key order, escaping and float text) and calls it directly. The
text is byte-for-byte ``json.dumps``'s (tests/test_jsontext.py); without the C accelerator (an
interpreter built without ``_json``) it *is* ``json.dumps``.

The one difference is a cyclic value: ``json.dumps`` raises :class:`ValueError` ("Circular
reference detected"), this raises :class:`RecursionError`. Records are trees; either way nothing
is written.

A value shared by many records and never changed after it is made (a snapshot's shared
decision dicts, :func:`callgate.propose.steps._compiled_decision`) can have its text kept once
(:func:`remember_text`); :func:`known_text` then answers it by identity (~2 µs per Propose's
``decision`` column, built on the event loop before the writer takes the row).
"""

from __future__ import annotations

import json
from json import encoder as _encoder
from typing import Any, Final

__all__ = ["compact_sorted", "known_text", "remember_text"]

_make_encoder: Any = getattr(_encoder, "c_make_encoder", None)  # not in typeshed: _json's C type
_C_ENCODER: Final = (
    _make_encoder(
        None,  # markers: no cycle check (records are trees; a cycle still raises, see above)
        json.JSONEncoder().default,  # an unsupported type: json.dumps's TypeError
        _encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan, as json.dumps
    )
    if _make_encoder is not None
    else None
)


def compact_sorted(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``."""
    if _C_ENCODER is None:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "".join(_C_ENCODER(value, 0))


KNOWN_TEXTS_MAX: Final = 1024
"""Values :func:`remember_text` keeps at most; past it the table starts again (a value no longer
in it is encoded again, to the same text)."""
_known: dict[int, tuple[object, str]] = {}


def remember_text(value: Any) -> str:
    """:func:`compact_sorted` of ``value``, kept for :func:`known_text` of this very object.
    The caller promises ``value`` is never changed afterwards (the table holds it, so its
    ``id`` stays its own)."""
    text = compact_sorted(value)
    if len(_known) >= KNOWN_TEXTS_MAX:
        _known.clear()
    _known[id(value)] = (value, text)
    return text


def known_text(value: Any) -> str:
    """:func:`compact_sorted` of ``value``: the text kept by :func:`remember_text` when
    ``value`` is the object it was given, else encoded now."""
    hit = _known.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    return compact_sorted(value)
