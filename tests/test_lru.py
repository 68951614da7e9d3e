"""The gate's small cache helpers (callgate/base/lru.py)."""

from __future__ import annotations

from collections import OrderedDict

from callgate.base.lru import IdentityMemo, remember


class Box:
    """A value compared by identity only (like the compiled core's shared decisions)."""


def test_identity_memo_builds_once_per_object_and_forgets_all_at_its_limit() -> None:
    built: list[Box] = []

    def build(b: Box) -> str:
        built.append(b)
        return f"v{len(built)}"

    memo: IdentityMemo[Box, str] = IdentityMemo(build, limit=2)
    a, b, c = Box(), Box(), Box()
    assert [memo(a), memo(a), memo(b), memo(a)] == ["v1", "v1", "v2", "v1"]
    assert built == [a, b]
    assert memo(c) == "v3"  # the limit was reached: everything before is forgotten
    assert memo(a) == "v4" and built == [a, b, c, a]


def test_identity_memo_never_answers_for_another_object_with_a_reused_id() -> None:
    memo: IdentityMemo[Box, int] = IdentityMemo(id, limit=8)
    first = Box()
    assert memo(first) == id(first)
    # the cache holds `first`, so its id cannot be handed to a new object while cached
    second = Box()
    assert id(second) != id(first) and memo(second) == id(second)


def test_remember_keeps_the_most_recent_entries() -> None:
    cache: OrderedDict[str, int] = OrderedDict()
    for i, k in enumerate("abcab"):
        remember(cache, k, i, 2)
    assert list(cache.items()) == [("a", 3), ("b", 4)]
