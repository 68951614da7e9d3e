"""Time in the policy context (issue 30 item 1; spec 6.5, 6.6 "time-range constraints").

Two kinds of values reach the policies as time:

* ``context.now``: the proposal's reference clock, the one normalization used and recorded in the
  ``normalized`` event (:func:`callgate.propose.steps._context`);
* the **top-level arguments** whose ToolSpec schema (``normalized_schema``, else ``input_schema``)
  is a ``string`` with ``format`` ``date``, ``date-time`` or ``duration``.

Each is held as an :class:`Instant` or a :class:`Span`: the text the policy engines that speak
JSON see (Rego: the RFC 3339 string, plus the number in ``context.millis``) and its exact value in
milliseconds (Cedar's ``datetime`` and ``duration`` resolution). Nothing is rounded: a date-time
with a non-zero digit below the millisecond, a leap second, or a duration in years or months (no
fixed length) is refused (:class:`TimeValueError`), and the proposal is rejected as a validation
error (``schema_violation``) before any policy is asked.

A Cedar action sees a value as ``datetime`` / ``duration`` where its schema declares that type
(the generated declarations do, :mod:`callgate.policy.declare`), and as the plain string where a
hand-written schema still says ``String`` (:func:`cedar_time_context`); ``context.now`` is in the
context of the actions that declare it. docs/POLICIES.md#time has the worked examples.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "MILLIS_KEY",
    "NO_PLAN",
    "NOW_KEY",
    "Instant",
    "Span",
    "TimeField",
    "TimeKind",
    "TimePlan",
    "TimeValueError",
    "cedar_time_context",
    "instant_of",
    "is_null_schema",
    "millis_of",
    "non_null",
    "now_instant",
    "time_fields",
    "time_values",
]

NOW_KEY: Final = "now"
"""``context.now``."""
MILLIS_KEY: Final = "millis"
"""``input.context.millis`` of the Rego input: ``{"now": <epoch ms>, "args": {<name>: <ms>}}``."""


class TimeKind(StrEnum):
    """A ToolSpec ``format`` that makes an argument a time value."""

    DATE = "date"
    DATE_TIME = "date-time"
    DURATION = "duration"

    @property
    def cedar_type(self) -> str:
        return "duration" if self is TimeKind.DURATION else "datetime"


@dataclass(frozen=True, slots=True)
class TimeField:
    name: str
    kind: TimeKind


class TimeValueError(ValueError):
    """A value that has no exact time value (the message names no value)."""


@dataclass(frozen=True, slots=True)
class Instant:
    """A point in time: its RFC 3339 text and milliseconds since the Unix epoch."""

    text: str
    epoch_ms: int

    @property
    def cedar(self) -> dict[str, Any]:
        """Cedar's explicit JSON form, ``datetime("YYYY-MM-DDThh:mm:ss.SSSZ")`` (UTC)."""
        dt = _EPOCH + timedelta(milliseconds=self.epoch_ms)
        text = (
            f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
            f".{dt.microsecond // 1000:03d}Z"
        )
        return {"__extn": {"fn": "datetime", "arg": text}}


@dataclass(frozen=True, slots=True)
class Span:
    """A length of time: its ISO 8601 text and milliseconds."""

    text: str
    ms: int

    @property
    def cedar(self) -> dict[str, Any]:
        """Cedar's explicit JSON form, ``duration("<n>ms")``."""
        return {"__extn": {"fn": "duration", "arg": f"{self.ms}ms"}}


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)
_I64: Final = 2**63
_DATE: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_DATE_TIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
_DURATION: Final = re.compile(
    r"P(?:(\d+)W|(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?)", re.ASCII
)


def _ms(delta: timedelta) -> int:
    return delta // _MS


def instant_of(text: str, kind: TimeKind) -> Instant:
    """The :class:`Instant` of a ``date`` (midnight UTC, as Cedar reads ``datetime("2026-07-20")``)
    or an RFC 3339 ``date-time``. Raises :class:`TimeValueError`."""
    if kind is TimeKind.DATE:
        m = _DATE.fullmatch(text)
        if m is None:
            raise TimeValueError("not an RFC 3339 full-date")
        try:
            d = date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            raise TimeValueError("not a calendar date") from None
        return Instant(text, _ms(datetime(d.year, d.month, d.day, tzinfo=UTC) - _EPOCH))
    m = _DATE_TIME.fullmatch(text)
    if m is None:
        raise TimeValueError("not an RFC 3339 date-time with a UTC offset")
    frac = m[7] or ""
    if frac[3:].strip("0"):
        raise TimeValueError("finer than a millisecond (Cedar's datetime resolution; never rounded)")
    if m[6] == "60":
        raise TimeValueError("a leap second has no datetime value")
    offset = timedelta(0)
    if m[9]:
        offset = timedelta(hours=int(m[10]), minutes=int(m[11]))
        if offset >= timedelta(hours=24) or int(m[11]) > 59:
            raise TimeValueError("UTC offset out of range")
        offset = -offset if m[9] == "-" else offset
    try:
        dt = datetime(
            int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]),
            int((frac + "000")[:3]) * 1000, tzinfo=timezone(offset),
        )  # fmt: skip
        dt.astimezone(UTC)  # Cedar's datetime is UTC: years 1 to 9999 there too
    except (ValueError, OverflowError):
        raise TimeValueError("not a valid date-time, or outside years 1-9999 in UTC") from None
    return Instant(text, _ms(dt - _EPOCH))


def span_of(text: str) -> Span:
    """The :class:`Span` of an ISO 8601 duration (weeks, days, hours, minutes, seconds; years and
    months have no fixed length and are refused). Raises :class:`TimeValueError`."""
    m = _DURATION.fullmatch(text)
    if m is None or text in ("P", "PT") or text.endswith("T"):
        raise TimeValueError("not an ISO 8601 duration")
    if m[2] or m[3]:
        raise TimeValueError("a duration in years or months has no fixed length: use days")
    weeks, days, hours, minutes, seconds = (int(m[i] or 0) for i in (1, 4, 5, 6, 7))
    ms = ((((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000
    if ms >= _I64:
        raise TimeValueError("duration out of range")
    return Span(text, ms)


def now_instant(reference_clock: str, reference_time: datetime | None = None) -> Instant:
    """``context.now``: the reference clock's text and its instant, to the millisecond below
    (``reference_time``: the instant the text spells, when the caller has it)."""
    if reference_time is None:
        try:
            reference_time = datetime.fromisoformat(reference_clock)
        except ValueError:
            raise TimeValueError("reference clock is not RFC 3339") from None
    if reference_time.tzinfo is None:
        raise TimeValueError("reference clock without a UTC offset")
    return Instant(reference_clock, _ms(reference_time - _EPOCH))


def time_fields(schema: Any) -> tuple[TimeField, ...]:
    """The top-level properties of ``schema`` that are time values: one JSON type, ``string``
    (``null`` aside, also as a nullable ``anyOf``: :func:`non_null`), with ``format`` ``date``,
    ``date-time`` or ``duration``."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return ()
    out = []
    for name, sub in sorted(props.items()):
        kind = field_kind(sub)
        if kind is not None:
            out.append(TimeField(name, kind))
    return tuple(out)


_TYPE_KEYS: Final = ("type", "enum", "const")


def is_null_schema(node: Any) -> bool:
    """``{"type": "null"}`` (annotations such as ``title`` aside): the ``None`` of a Pydantic
    ``Optional[X]`` / zod ``.nullable()``."""
    if not isinstance(node, Mapping):
        return False
    raw = node.get("type")
    return (raw == "null" or raw == ["null"]) and not any(
        k in node for k in ("enum", "const", "anyOf", "oneOf", "allOf", "$ref")
    )


def non_null(node: Any) -> Any:
    """The one non-null branch of a nullable union, else ``node`` itself: a schema with no
    ``type``, ``enum`` or ``const`` of its own whose ``anyOf`` (or ``oneOf``) is exactly one
    schema plus ``{"type": "null"}``, in any order (``Optional[X] = None`` as Pydantic writes it:
    ``{"anyOf": [X, {"type": "null"}], "default": null}``) is typed as that schema, made
    optional-nullable, like ``"type": [X, "null"]`` (docs/MCP.md, "Arguments as policies see
    them"). The branch object itself is returned (not a copy): callers that rewrite it (the
    decimal fields of :mod:`callgate.mcp.argtypes`) rewrite the schema."""
    if not isinstance(node, Mapping) or any(k in node for k in _TYPE_KEYS):
        return node
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if key in node and isinstance(branches, list):
            rest = [b for b in branches if not is_null_schema(b)]
            if len(rest) == 1:
                return rest[0]
            return node
    return node


def field_kind(node: Any) -> TimeKind | None:
    """The :class:`TimeKind` of one property schema (the branch of a nullable union:
    :func:`non_null`), or None."""
    inner = non_null(node)
    if inner is not node and isinstance(inner, Mapping) and isinstance(node, Mapping):
        if "format" in node and "format" not in inner:  # a format beside the union applies to it
            inner = {**inner, "format": node["format"]}
        node = inner
    if not isinstance(node, Mapping) or "enum" in node or "const" in node:
        return None
    raw = node.get("type")
    types = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
    if [t for t in types if t != "null"] != ["string"]:
        return None
    fmt = node.get("format")
    return TimeKind(fmt) if isinstance(fmt, str) and fmt in TimeKind._value2member_map_ else None


def time_values(args: Mapping[str, Any], fields: tuple[TimeField, ...]) -> dict[str, Any]:
    """``args`` with every time field present as an :class:`Instant` or :class:`Span`.
    Raises :class:`TimeValueError` whose message starts with the field's JSON pointer."""
    out = dict(args)
    for f in fields:
        v = out.get(f.name)
        if v is None:
            continue
        if not isinstance(v, str):
            raise TimeValueError(f"/{_esc(f.name)}: a {f.kind.value} must be a string")
        try:
            out[f.name] = span_of(v) if f.kind is TimeKind.DURATION else instant_of(v, f.kind)
        except TimeValueError as exc:
            raise TimeValueError(f"/{_esc(f.name)}: {exc}") from None
    return out


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True, slots=True)
class TimePlan:
    """What one Cedar action's schema declares: ``context.now`` as ``datetime``, and the
    top-level arguments declared ``datetime`` or ``duration``."""

    now: bool = False
    args: frozenset[str] = frozenset()


NO_PLAN: Final = TimePlan()


def cedar_time_context(context: Mapping[str, Any], plan: TimePlan) -> dict[str, Any]:
    """``context`` as one Cedar action reads it: ``now`` kept only where declared, each time value
    as Cedar's ``datetime`` / ``duration`` where declared, else its text."""
    out = dict(context)
    now = out.pop(NOW_KEY, None)
    if plan.now and isinstance(now, Instant):
        out[NOW_KEY] = now
    args = out.get("args")
    if isinstance(args, Mapping) and any(isinstance(v, (Instant, Span)) for v in args.values()):
        out["args"] = {
            k: v if k in plan.args or not isinstance(v, (Instant, Span)) else v.text for k, v in args.items()
        }
    return out


def millis_of(context: Mapping[str, Any]) -> dict[str, Any] | None:
    """``input.context.millis`` of the Rego input: the epoch milliseconds of ``now`` and of every
    time argument (a duration: its length), or None when the context holds no time value."""
    now = context.get(NOW_KEY)
    args = context.get("args")
    times: dict[str, Any] = {}
    if isinstance(args, Mapping):
        for k, v in args.items():
            if isinstance(v, Instant):
                times[k] = v.epoch_ms
            elif isinstance(v, Span):
                times[k] = v.ms
    if not isinstance(now, Instant) and not times:
        return None
    out: dict[str, Any] = {"args": times}
    if isinstance(now, Instant):
        out[NOW_KEY] = now.epoch_ms
    return out
