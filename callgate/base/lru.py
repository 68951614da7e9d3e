"""The bounded caches of the gate (sessions, tool views, usage, limits, shared decisions)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(cache: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """Put ``key`` in ``cache`` as the most recent entry, evicting the oldest beyond ``limit``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


__all__ = ["remember"]
