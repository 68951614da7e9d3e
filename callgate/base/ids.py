"""Unguessable, time-ordered identifiers (invocations, events, decisions) without a system call
per identifier.

An id is 32 hex digits (128 bits, the shape of ``uuid4().hex``): the first 12 digits are the Unix
time in milliseconds, the other 20 are 80 bits from the operating system's CSPRNG (like a UUIDv7,
RFC 9562, which keeps 74). Ids made later sort after ids made earlier, so each new row of the
store lands at the right edge of the indexes keyed by them (invocations, events, decisions)
instead of on a random page: a commit dirties a few pages, not one per row. Measured on the
store's own schema, batches of three proposals with six events each: 174 -> 73 us of SQLite CPU
per proposal at 16 MiB of database, 240 -> 74 us at 100 MiB (random ids keep getting dearer as
the indexes outgrow the page cache). 80 random bits per millisecond keep ids unguessable; the
time they carry is in the events' timestamps anyway.
"""

from __future__ import annotations

import os
import threading
import time

_CHUNK = 4096
_RANDOM_BYTES = 10
_lock = threading.Lock()
_buf = b""
_pos = _CHUNK
_last_ms = 0


def new_id() -> str:
    """A new id: 12 hex digits of Unix milliseconds (never decreasing within the process, even
    if the wall clock steps back) and 80 CSPRNG bits as 20 hex digits. The random bytes are read
    4 KiB at a time (``uuid4`` asks the kernel for 16 bytes on every call). Thread-safe."""
    global _buf, _pos, _last_ms
    with _lock:
        if _pos + _RANDOM_BYTES > _CHUNK:
            _buf, _pos = os.urandom(_CHUNK), 0
        start = _pos
        _pos += _RANDOM_BYTES
        ms = time.time_ns() // 1_000_000
        if ms < _last_ms:
            ms = _last_ms
        _last_ms = ms
        return f"{ms & 0xFFFF_FFFF_FFFF:012x}" + _buf[start : start + _RANDOM_BYTES].hex()


def _forget_after_fork() -> None:  # a forked child must not hand out its parent's bytes again
    global _buf, _pos
    _buf, _pos = b"", _CHUNK


os.register_at_fork(after_in_child=_forget_after_fork)
