"""How much a static bearer token could be guessed: an upper estimate of its entropy.

A token's strength is estimated as ``length x log2(alphabet)``, the alphabet being the smallest
of the usual generator alphabets that holds every character (digits, hex, base32, alphanumeric,
base64/base64url, printable ASCII; anything else counts as printable ASCII). Tokens made of
fewer than :data:`MIN_DISTINCT` different characters are refused whatever their length (a
repeated pattern). It can only over-estimate a human-made token, never refuse a generated one:
``secrets.token_urlsafe(16)`` (22 characters, 132 bits) and ``secrets.token_hex(16)``
(32 characters, 128 bits) pass.
"""

from __future__ import annotations

import math
import string

MIN_TOKEN_BITS = 128
"""Least estimated entropy of a static token (16 bytes)."""
MIN_DISTINCT = 8
"""Least number of different characters in a static token."""

_ALPHABETS: tuple[frozenset[str], ...] = tuple(
    frozenset(a)
    for a in (
        string.digits,
        string.digits + "abcdef",
        string.digits + "ABCDEF",
        string.ascii_uppercase + "234567=",
        string.ascii_lowercase + "234567=",
        string.ascii_letters + string.digits,
        string.ascii_letters + string.digits + "-_=",
        string.ascii_letters + string.digits + "+/=",
    )
)
_PRINTABLE = 95


def entropy_bits(token: str) -> float:
    """The estimated entropy of ``token`` in bits (see the module's docstring)."""
    chars = set(token)
    size = next((len(a) for a in _ALPHABETS if chars <= a), _PRINTABLE)
    return len(token) * math.log2(size)


def weakness(token: str) -> str | None:
    """Why ``token`` is too weak for a static bearer token, or None when it is strong enough."""
    if len(set(token)) < MIN_DISTINCT:
        return f"fewer than {MIN_DISTINCT} different characters"
    bits = entropy_bits(token)
    if bits < MIN_TOKEN_BITS:
        return f"about {bits:.0f} bits of entropy, at least {MIN_TOKEN_BITS} (16 bytes) are required"
    return None


__all__ = ["MIN_DISTINCT", "MIN_TOKEN_BITS", "entropy_bits", "weakness"]
