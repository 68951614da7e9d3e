"""Every reason the compiled core hands a proposal back to the Python stages, written out as one
list (as OPA's wasm ``exceptions.yaml`` lists what its compiled form does not do). The Python
stages are the reference: each hand-back answers exactly as they do, never differently.

The value of each is the label of the metric ``callgate_core_python_path_total`` and the key of
``Core.python_path``; docs/NATIVE.md explains each case at length.
"""

from __future__ import annotations

from enum import StrEnum


class HandBack(StrEnum):
    """Why the Python stages answered a proposal although the compiled core runs."""

    UNSUPPORTED_TOOL = "unsupported_tool"
    """The tool is outside the core's subset (a schema the fast check does not compile exactly,
    a normalizer kind it does not run, a ``decimal`` bound finer than 10^-18); the reason per
    tool is logged at start (``Core.unsupported``)."""
    LOCALE = "locale"
    """A ``relative_date`` or ``datetime`` normalizer in a session whose locale has no relative
    dates in the core (the reference answers, with its error for an unknown locale)."""
    ZONE = "zone"
    """A ``datetime`` normalizer in a session whose zone the reference does not know or whose
    rules the core cannot read exactly as ``zoneinfo`` does."""
    DEFERRED = "deferred"
    """The core met a value it cannot answer for exactly (non-ASCII text outside its table under
    ``text`` or ``enum_alias``, an integer past 64 bits, an ``xn--`` host name...) and said
    ``defer``."""
    MISMATCH = "mismatch"
    """The core refused what the reference accepts: the reference wins (never seen in the parity
    suite; counted so that it would show)."""


HANDBACKS: tuple[HandBack, ...] = tuple(HandBack)
"""The list, in the order above."""

__all__ = ["HANDBACKS", "HandBack"]
