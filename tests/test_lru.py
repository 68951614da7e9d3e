"""The gate's small cache helpers (callgate/base/lru.py)."""

from __future__ import annotations

from collections import OrderedDict

from callgate.base.lru import remember


def test_remember_keeps_the_most_recent_entries() -> None:
    cache: OrderedDict[str, int] = OrderedDict()
    for i, k in enumerate("abcab"):
        remember(cache, k, i, 2)
    assert list(cache.items()) == [("a", 3), ("b", 4)]
