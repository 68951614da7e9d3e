"""W3C Trace Context (``traceparent``) handling for events (spec 6.13)."""

from __future__ import annotations

import random
import re
import secrets
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True, slots=True)
class TraceContext:
    trace_id: str
    parent_span_id: str = ""

    @staticmethod
    def from_traceparent(value: str | None) -> TraceContext:
        """Parse a ``traceparent`` header; an absent or invalid one starts a new trace."""
        if value:
            m = _TRACEPARENT.match(value.strip().lower())
            if m and m.group(1) != "ff" and set(m.group(2)) != {"0"} and set(m.group(3)) != {"0"}:
                return TraceContext(trace_id=m.group(2), parent_span_id=m.group(3))
        return TraceContext(trace_id=new_trace_id())


_span_rng = random.Random(secrets.randbits(128))


def new_trace_id() -> str:
    """A non-zero 128-bit trace id (W3C: random, unique; not a secret, so no syscall per call)."""
    return f"{_span_rng.getrandbits(128) | 1:032x}"


def new_span_id() -> str:
    """A non-zero 64-bit span id (unique, not secret: no syscall per event)."""
    return f"{_span_rng.getrandbits(64) | 1:016x}"
