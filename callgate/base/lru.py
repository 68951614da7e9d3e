"""The bounded caches of the gate (sessions, tool views, usage, limits, shared decisions)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(cache: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """Put ``key`` in ``cache`` as the most recent entry, evicting the oldest beyond ``limit``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


class IdentityMemo(Generic[K, V]):
    """``build(obj)`` computed once per object (by identity, for values the compiled core's path
    shares between calls) and remembered for up to ``limit`` objects, then forgotten all at once.
    Each entry keeps its object alive, so an ``id`` is never reused while it is cached."""

    def __init__(self, build: Callable[[K], V], limit: int) -> None:
        self._build = build
        self._limit = limit
        self._cache: dict[int, tuple[K, V]] = {}

    def __call__(self, obj: K) -> V:
        hit = self._cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = self._build(obj)
        if len(self._cache) >= self._limit:
            self._cache.clear()
        self._cache[id(obj)] = (obj, value)
        return value


__all__ = ["IdentityMemo", "remember"]
