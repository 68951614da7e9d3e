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
"""

from __future__ import annotations

import json
from json import encoder as _encoder
from typing import Any, Final

__all__ = ["compact_sorted"]

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
