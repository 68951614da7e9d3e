"""RFC 6901 JSON Pointers: the one place their escaping is written.

A pointer is ``""`` (the whole document) or ``/`` followed by reference tokens joined by ``/``;
inside a token ``~`` is written ``~0`` and ``/`` is written ``~1`` (in that order, so ``~1``
in a key survives a round trip as ``~01``). Violations, normalizer paths, redaction paths and
truncation marks all use these helpers, so a pointer printed by one stage is read back
identically by another.
"""

from __future__ import annotations

from collections.abc import Iterable


def escape(token: str | int) -> str:
    """One reference token, escaped: ``a/b`` -> ``a~1b``, ``m~n`` -> ``m~0n``."""
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """The inverse of :func:`escape` (``~1`` before ``~0``, as RFC 6901 section 4 requires)."""
    return token.replace("~1", "/").replace("~0", "~")


def join(tokens: Iterable[str | int]) -> str:
    """The pointer naming ``tokens`` from the document root (``()`` -> ``""``)."""
    return "".join("/" + escape(t) for t in tokens)


def split(pointer: str) -> tuple[str, ...]:
    """The unescaped tokens of ``pointer`` (``""`` -> ``()``); raises ``ValueError`` when the
    pointer does not start with ``/``."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/': {pointer!r}")
    return tuple(unescape(t) for t in pointer[1:].split("/"))


__all__ = ["escape", "join", "split", "unescape"]
