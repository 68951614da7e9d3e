"""A ToolSpec's ``result_limits`` (6.10): read when ToolSpecs load (an invalid one refuses the
file) and when a result is encoded (:mod:`callgate.execute.encode`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIN_MAX_BYTES = 512
"""Smallest ``max_bytes`` accepted: room for the envelope of a truncated message."""
DEFAULT_MAX_BYTES = 16384
"""``max_bytes`` when a ToolSpec has no ``result_limits.max_bytes``."""


def limits_from_spec(result_limits: Mapping[str, Any]) -> tuple[int, int | None]:
    """``(max_bytes, max_items)`` from a ToolSpec's ``result_limits`` (defaults when absent).

    Raises:
        ValueError: ``max_bytes`` below :data:`MIN_MAX_BYTES` (call this when loading ToolSpecs).
    """
    max_bytes = result_limits.get("max_bytes", DEFAULT_MAX_BYTES)
    max_items = result_limits.get("max_items")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < MIN_MAX_BYTES:
        raise ValueError(f"result_limits.max_bytes must be an integer >= {MIN_MAX_BYTES}")
    if max_items is not None and (
        isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1
    ):
        raise ValueError("result_limits.max_items must be an integer >= 1")
    return max_bytes, max_items


__all__ = ["DEFAULT_MAX_BYTES", "MIN_MAX_BYTES", "limits_from_spec"]
