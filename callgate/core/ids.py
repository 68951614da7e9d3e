"""Unguessable identifiers (invocations, events) without a system call per identifier."""

from __future__ import annotations

import os
import threading

_CHUNK = 4096
_lock = threading.Lock()
_buf = b""
_pos = _CHUNK


def new_id() -> str:
    """128 bits from the operating system's CSPRNG as 32 hex digits (like ``uuid4().hex``, which
    asks the kernel for 16 bytes on every call; this reads 4 KiB at a time). Thread-safe."""
    global _buf, _pos
    with _lock:
        if _pos >= _CHUNK:
            _buf, _pos = os.urandom(_CHUNK), 0
        start = _pos
        _pos += 16
        return _buf[start : start + 16].hex()


def _forget_after_fork() -> None:  # a forked child must not hand out its parent's bytes again
    global _buf, _pos
    _buf, _pos = b"", _CHUNK


os.register_at_fork(after_in_child=_forget_after_fork)
