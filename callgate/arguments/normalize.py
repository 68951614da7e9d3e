"""Semantic normalization of validated tool arguments (spec 6.4 layer 3, spec 6.5).

Spec 6.5 ("规范化必须先于幂等比较"): relative values must be turned into explicit values at run
time, and the normalization interface must *fix* locale, time zone, reference clock, rounding and
default fields. Only then is the request digest
``d = H(tenant ‖ tool name/version ‖ canonical normalized arguments)`` computed, so that one
intent cannot slip past de-duplication through field order or an equivalent date spelling.
The spec's own example::

    normalize_date(expression="tomorrow", reference_clock="2026-07-19T14:00:00+08:00",
                   user_timezone="Asia/Shanghai") -> "2026-07-20"

Normalizers are declared per tool in its ToolSpec, as a list of JSON objects
``{"kind": ..., "field": <pointer>, ...options}`` and compiled once at load by
:meth:`NormalizerChain.build`. ``docs/NORMALIZATION.md`` documents every kind, option and rule.

Determinism: every input is explicit. The reference clock, the user's IANA zone and the locale
come from :class:`~callgate.base.model.NormalizationContext`; nothing here reads the system clock, the
process locale or the environment. Zone rules are read from the pinned ``tzdata`` package (not
from the host's ``/usr/share/zoneinfo``), so two sidecars with the same lockfile agree.
"""

from __future__ import annotations

import functools
import importlib
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _dc_field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import Final
from zoneinfo import ZoneInfo

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.base import jsonpointer
from callgate.base.errors import (
    RejectedError,
    Violation,
    decimal_invalid,
    normalization_failed,
    toolspec_invalid,
)
from callgate.base.model import (
    JSONValue,
    NormalizationContext,
    NormalizedArguments,
    ValidatedArguments,
    values_of,
)

__all__ = [
    "KINDS",
    "NormalizerChain",
    "NormalizerSpec",
    "normalize",
    "tzdata_version",
    "load_zone",
]

KINDS: Final = ("relative_date", "datetime", "text", "enum_alias", "default", "round", "decimal")


# ============================================================================================
# Declarations


def _freeze(value: JSONValue) -> JSONValue:
    """Deep read-only view of a JSON value (objects → MappingProxyType, arrays → tuple)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: JSONValue) -> JSONValue:
    """Inverse of :func:`_freeze`: a fresh, mutable plain-JSON copy."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class NormalizerSpec:
    """One normalizer declaration as written in a ToolSpec, after load-time validation.

    ``options`` is a deep read-only copy of every member except ``kind`` and ``field`` (nested
    objects are ``MappingProxyType``, arrays are tuples). Instances compare by value but are not
    hashable (the options mapping is not).
    """

    kind: str
    field: str
    options: Mapping[str, JSONValue]

    @property
    def name(self) -> str:
        """The name reported in ``applied``: ``"<kind>:<field>"``, e.g. ``"relative_date:/date"``."""
        return f"{self.kind}:{self.field}"


# ============================================================================================
# Field pointers: RFC 6901 plus the segment "*" = every item of an array


@dataclass(frozen=True, slots=True)
class _Seg:
    key: str
    """Unescaped member name (also used when the node is an object)."""
    index: int | None
    """Array index when ``key`` is a canonical decimal (RFC 6901: no leading zeros)."""
    wildcard: bool


_INDEX = re.compile(r"0|[1-9][0-9]{0,8}", re.ASCII)
_BAD_TILDE = re.compile(r"~(?![01])")


def _parse_pointer(field: str) -> tuple[_Seg, ...]:
    """Parse a field pointer; raise ValueError with a safe message if it is malformed."""
    if field == "":
        raise ValueError("field must not be the empty pointer (the whole arguments object)")
    if not field.startswith("/"):
        raise ValueError("field must be a JSON pointer starting with '/'")
    segments: list[_Seg] = []
    for raw in field[1:].split("/"):
        if _BAD_TILDE.search(raw):
            raise ValueError("field pointer has '~' not followed by '0' or '1'")
        if raw == "*":
            segments.append(_Seg(key="*", index=None, wildcard=True))
            continue
        key = jsonpointer.unescape(raw)
        index = int(key) if _INDEX.fullmatch(key) else None
        segments.append(_Seg(key=key, index=index, wildcard=False))
    return tuple(segments)


class _Unchanged:
    __slots__ = ()


_UNCHANGED: Final = _Unchanged()


class _FieldError(Exception):
    """A value at one location cannot be normalized. ``message`` is safe (no values)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Leaf = Callable[[JSONValue, "_Resolved"], "JSONValue | _Unchanged"]


def _update(
    node: JSONValue,
    segs: tuple[_Seg, ...],
    i: int,
    leaf: Leaf,
    rctx: _Resolved,
    pointer: str,
    kind: str,
    errors: list[Violation],
) -> JSONValue:
    """Copy-on-write update: return ``node`` itself when nothing below it changed, otherwise a
    shallow copy of every container on the path to the change. The input is never mutated."""
    if i == len(segs):
        try:
            new = leaf(node, rctx)
        except _FieldError as exc:
            errors.append(Violation(pointer=pointer, message=exc.message, keyword=kind))
            return node
        return node if isinstance(new, _Unchanged) else new
    seg = segs[i]
    if seg.wildcard:
        if not isinstance(node, list):
            return node
        copied: list[JSONValue] | None = None
        for idx, item in enumerate(node):
            new_item = _update(item, segs, i + 1, leaf, rctx, f"{pointer}/{idx}", kind, errors)
            if new_item is not item:
                if copied is None:
                    copied = list(node)
                copied[idx] = new_item
        return node if copied is None else copied
    if isinstance(node, dict):
        if seg.key not in node:
            return node
        child = node[seg.key]
        new_child = _update(
            child, segs, i + 1, leaf, rctx, f"{pointer}/{jsonpointer.escape(seg.key)}", kind, errors
        )
        if new_child is child:
            return node
        new_obj = dict(node)
        new_obj[seg.key] = new_child
        return new_obj
    if isinstance(node, list):
        if seg.index is None or seg.index >= len(node):
            return node
        item = node[seg.index]
        new_item = _update(item, segs, i + 1, leaf, rctx, f"{pointer}/{seg.index}", kind, errors)
        if new_item is item:
            return node
        new_list = list(node)
        new_list[seg.index] = new_item
        return new_list
    return node


# ============================================================================================
# Context: reference clock, zone, locale


_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*", re.ASCII)
_LOCALE = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8})*", re.ASCII)


@functools.lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


def tzdata_version() -> str:
    """IANA release of the zone rules in use (e.g. ``"2026f"``), for logs and events."""
    return str(getattr(importlib.import_module("tzdata"), "IANA_VERSION", "unknown"))


def zone_file(name: str) -> Traversable | None:
    """The ``tzdata`` package's file of the IANA zone ``name``, or None if there is no such zone
    (the one file both cores read a zone's rules from)."""
    if not _ZONE_NAME.fullmatch(name) or name not in _zone_names():
        return None
    return resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))


@functools.lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo | None:
    """ZoneInfo for an IANA name from the ``tzdata`` package, or None if there is no such zone.
    Cached: each zone file is read once per process."""
    path = zone_file(name)
    if path is None:
        return None
    try:
        with path.open("rb") as fh:
            return ZoneInfo.from_file(fh, key=name)
    except (OSError, ValueError):
        return None


_DT = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
    r"(?P<sep>[Tt ])"
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2})"
    r"(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,32}))?)?"
    r"(?P<off>[Zz]|[+-][0-9]{2}:[0-9]{2})?",
    re.ASCII,
)


def _parse_dt(text: str) -> tuple[re.Match[str], datetime, timedelta | None] | None:
    """Parse ``YYYY-MM-DD[Tt ]HH:MM[:SS[.f]][Z|±HH:MM]``. Returns (match, naive wall time,
    offset or None) or None when the shape does not match. Raises _FieldError for a shape that
    matches but is not a real instant (month 13, hour 24, leap second, sub-µs precision...)."""
    m = _DT.fullmatch(text)
    if m is None:
        return None
    frac = m["f"] or ""
    if len(frac) > 6 and frac[6:].strip("0"):
        raise _FieldError("sub-microsecond precision is not supported")
    try:
        naive = datetime(
            int(m["y"]),
            int(m["mo"]),
            int(m["d"]),
            int(m["h"]),
            int(m["mi"]),
            int(m["s"] or 0),
            int(frac[:6].ljust(6, "0")),
        )
    except ValueError:
        raise _FieldError("not a valid calendar date and time") from None
    off = m["off"]
    if off is None:
        return m, naive, None
    if off in ("Z", "z"):
        return m, naive, timedelta(0)
    hh, mm = int(off[1:3]), int(off[4:6])
    if hh > 23 or mm > 59:
        raise _FieldError("not a valid UTC offset")
    delta = timedelta(hours=hh, minutes=mm)
    return m, naive, -delta if off[0] == "-" else delta


def _to_zone(naive: datetime, offset: timedelta, zone: tzinfo) -> datetime:
    try:
        return naive.replace(tzinfo=timezone(offset)).astimezone(zone)
    except (OverflowError, ValueError):
        raise _FieldError("date-time is out of the supported range") from None


def _localize(naive: datetime, zone: tzinfo) -> datetime:
    """Interpret a wall-clock time in ``zone``.

    * Nonexistent local time (spring-forward gap): rejected, never shifted.
    * Ambiguous local time (fall-back fold): ``fold=0``, i.e. the *earlier* instant (the first
      time the wall clock shows it, still at the pre-transition offset).
    """
    first = naive.replace(tzinfo=zone, fold=0)
    try:
        as_utc = first.astimezone(UTC)
        back = as_utc.astimezone(zone)
    except (OverflowError, ValueError):
        raise _FieldError("date-time is out of the supported range") from None
    if back.replace(tzinfo=None) != naive:
        raise _FieldError("nonexistent local time in the session time zone (DST gap)")
    return back


def _format_rfc3339(dt: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.f]±HH:MM``: seconds always, fraction only if non-zero (trailing
    zeros trimmed), numeric offset always (``+00:00``, never ``Z``)."""
    off = dt.utcoffset()
    if off is None or off.microseconds or off.seconds % 60:
        # e.g. local mean time before 1901 (Asia/Shanghai +08:05:43): not expressible in RFC 3339
        raise _FieldError("local UTC offset is not a whole number of minutes")
    minutes = int(off.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if dt.microsecond:
        text += "." + f"{dt.microsecond:06d}".rstrip("0")
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


@dataclass(frozen=True, slots=True)
class _Resolved:
    zone: tzinfo
    now: datetime
    """Reference clock converted to ``zone``."""
    today: date
    """The user's local calendar date at the reference clock."""
    lang: str
    """The locale's language subtag, lower case (``zh`` for ``zh-CN``): which relative-date
    vocabulary reads expressions (:data:`DATE_LOCALES`; English is always read too)."""


def _ctx_error(keyword: str, message: str) -> RejectedError:
    return normalization_failed(
        f"invalid normalization context: {message}", [Violation(pointer="", message=message, keyword=keyword)]
    )


@functools.lru_cache(maxsize=512)
def _resolve_place(timezone: str, locale: str) -> tuple[tzinfo, str] | None:
    """(zone, Chinese vocabularies) for a valid zone and locale, else ``None``. The part of a
    context that repeats from call to call (the clock never does, so a cache keyed on the whole
    context never hit: issue 15)."""
    zone = load_zone(timezone)
    if zone is None or not _LOCALE.fullmatch(locale):
        return None
    return zone, re.split(r"[-_]", locale, maxsplit=1)[0].lower()


def _resolve_ctx(ctx: NormalizationContext) -> _Resolved:
    t = ctx.reference_time
    if (
        t is not None
        and t.tzinfo is not None
        and isinstance(ctx.timezone, str)
        and isinstance(ctx.locale, str)
        and isinstance(ctx.reference_clock, str)
    ):
        place = _resolve_place(ctx.timezone, ctx.locale)
        if place is not None and t.isoformat() == ctx.reference_clock:
            try:
                now = t.astimezone(place[0])
            except (OverflowError, ValueError):
                return _resolve_text(ctx)  # reports it as the text path does
            return _Resolved(zone=place[0], now=now, today=now.date(), lang=place[1])
    return _resolve_text(ctx)


@functools.lru_cache(maxsize=512)
def _resolve_text(ctx: NormalizationContext) -> _Resolved:
    if not isinstance(ctx.timezone, str) or not isinstance(ctx.reference_clock, str):
        raise _ctx_error("context", "reference_clock and timezone must be strings")
    zone = load_zone(ctx.timezone)
    if zone is None:
        raise _ctx_error("timezone", "timezone is not a known IANA time zone name")
    try:
        parsed = _parse_dt(ctx.reference_clock)
    except _FieldError:
        parsed = None
    offset = None if parsed is None else parsed[2]
    if parsed is None or offset is None or parsed[0]["s"] is None or parsed[0]["sep"] == " ":
        raise _ctx_error("reference_clock", "reference_clock must be an RFC 3339 date-time with a UTC offset")
    naive = parsed[1]
    try:
        now = _to_zone(naive, offset, zone)
    except _FieldError:
        raise _ctx_error("reference_clock", "reference_clock is out of range") from None
    locale = ctx.locale
    if not isinstance(locale, str) or not _LOCALE.fullmatch(locale):
        raise _ctx_error("locale", "locale must be a BCP 47 language tag")
    lang = re.split(r"[-_]", locale, maxsplit=1)[0].lower()
    return _Resolved(zone=zone, now=now, today=now.date(), lang=lang)


# ============================================================================================
# Relative dates (kind "relative_date", and the date part of relative date-times)

_WS = re.compile(r"\s+")
_ISO_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)

_EN_FIXED: Final[Mapping[str, int]] = {
    "today": 0,
    "tomorrow": 1,
    "yesterday": -1,
    "day after tomorrow": 2,
    "the day after tomorrow": 2,
    "day before yesterday": -2,
    "the day before yesterday": -2,
}
_EN_WEEKDAYS: Final[Mapping[str, int]] = {
    "monday": 0, "mon": 0,
    "tuesday": 1, "tue": 1, "tues": 1,
    "wednesday": 2, "wed": 2,
    "thursday": 3, "thu": 3, "thur": 3, "thurs": 3,
    "friday": 4, "fri": 4,
    "saturday": 5, "sat": 5,
    "sunday": 6, "sun": 6,
}  # fmt: skip
_EN_IN = re.compile(r"in ([0-9]{1,4}) (days?|weeks?)", re.ASCII)
_EN_AGO = re.compile(r"([0-9]{1,4}) (days?|weeks?) ago", re.ASCII)
_EN_WEEKDAY = re.compile(r"(?:(next|last|this) )?([a-z]+)\.?", re.ASCII)

_ZH_FIXED: Final[Mapping[str, int]] = {
    "今天": 0, "今日": 0,
    "明天": 1, "明日": 1,
    "后天": 2, "後天": 2,
    "大后天": 3, "大後天": 3,
    "昨天": -1, "昨日": -1,
    "前天": -2,
    "大前天": -3,
}  # fmt: skip
_ZH_DAYS: Final[Mapping[str, int]] = {
    "一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6,
}  # fmt: skip
_ZH_WEEKDAY = re.compile(r"([下上这這本])?([个個])?(周|週|星期|礼拜|禮拜)([一二三四五六日天])")
_ZH_OFFSET = re.compile(
    r"([0-9]{1,4})(天|周|週|星期|个星期|個星期)(后|後|以后|以後|之后|之後|前|以前|之前)", re.ASCII
)


def _prepare(expression: str) -> str:
    """NFKC, trim, collapse internal whitespace to one space, casefold."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", expression).strip()).casefold()


def _weekday_delta(today: int, target: int, rule: str) -> int:
    """Days from ``today`` (0=Mon) to the ``target`` weekday under ``rule``.

    * ``next``: first such weekday strictly after today (1..7): "next monday" on a Monday is +7,
      on a Sunday +1. A bare weekday name means the same.
    * ``last``: last such weekday strictly before today (-1..-7).
    * ``this``: that weekday of the current ISO week, Monday..Sunday (-6..+6; may be past).
    * ``next_week`` / ``last_week``: that weekday of the following / preceding ISO week (zh 下周X /
      上周X); e.g. 下周一 on a Sunday is +1, on a Monday +7, 下周日 on a Monday +13.
    """
    if rule == "next":
        return (target - today - 1) % 7 + 1
    if rule == "last":
        return -((today - target - 1) % 7 + 1)
    if rule == "this":
        return target - today
    if rule == "next_week":
        return target - today + 7
    if rule == "last_week":
        return target - today - 7
    raise AssertionError(rule)


def _english_days(text: str, today: date) -> int | None:
    if text in _EN_FIXED:
        return _EN_FIXED[text]
    m = _EN_IN.fullmatch(text) or _EN_AGO.fullmatch(text)
    if m is not None:
        n = int(m[1]) * (7 if m[2].startswith("week") else 1)
        return n if text.startswith("in ") else -n
    m = _EN_WEEKDAY.fullmatch(text)
    if m is not None and m[2] in _EN_WEEKDAYS:
        return _weekday_delta(today.weekday(), _EN_WEEKDAYS[m[2]], m[1] or "next")
    return None


def _chinese_days(text: str, today: date) -> int | None:
    if text in _ZH_FIXED:
        return _ZH_FIXED[text]
    m = _ZH_OFFSET.fullmatch(text)
    if m is not None:
        n = int(m[1]) * (1 if m[2] == "天" else 7)
        return -n if m[3].endswith("前") else n
    m = _ZH_WEEKDAY.fullmatch(text)
    if m is not None:
        prefix, classifier, unit, day = m[1], m[2], m[3], m[4]
        if classifier and not prefix:
            return None  # "个星期一" is not an expression
        if day == "天" and unit in ("周", "週"):
            return None  # "周天" is colloquial and ambiguous: not accepted
        rule = {
            None: "next",
            "下": "next_week",
            "上": "last_week",
            "这": "this",
            "這": "this",
            "本": "this",
        }[prefix]
        return _weekday_delta(today.weekday(), _ZH_DAYS[day], rule)
    return None


@dataclass(frozen=True, slots=True)
class DateVocabulary:
    """One locale's relative-date words, as a table (after NFKC, trimming, whitespace collapsing
    and case folding; docs/NORMALIZATION.md lists them).

    * ``fixed``: whole expressions and their day offsets (today, tomorrow...);
    * ``counts``: ``(pattern, sign)``: a pattern with groups ``n`` and ``unit`` ("in 3 days" / "3
      days ago"), ``units`` giving each unit word's days;
    * weekdays: ``[article] [prefix] <weekday> [suffix]``, the prefix or suffix word choosing
      the rule (``next``: strictly after today, the default; ``last``: strictly before; ``this``:
      the current ISO week)."""

    fixed: Mapping[str, int]
    counts: tuple[tuple[re.Pattern[str], int], ...] = ()
    units: Mapping[str, int] = _dc_field(default_factory=dict)
    weekdays: Mapping[str, int] = _dc_field(default_factory=dict)
    articles: frozenset[str] = frozenset()
    prefixes: Mapping[str, str] = _dc_field(default_factory=dict)
    suffixes: Mapping[str, str] = _dc_field(default_factory=dict)

    def days(self, text: str, today: date) -> int | None:
        if text in self.fixed:
            return self.fixed[text]
        for pattern, sign in self.counts:
            m = pattern.fullmatch(text)
            if m is not None and m["unit"] in self.units:
                return sign * int(m["n"]) * self.units[m["unit"]]
        words = text.split(" ")
        if len(words) > 1 and words[0] in self.articles:
            words = words[1:]
        rule = "next"
        if len(words) > 1 and words[0] in self.prefixes:
            rule, words = self.prefixes[words[0]], words[1:]
        if len(words) > 1:
            suffix = " ".join(words[1:])
            if suffix not in self.suffixes or rule != "next":
                return None
            rule, words = self.suffixes[suffix], words[:1]
        name = words[0].removesuffix(".")
        if len(words) != 1 or name not in self.weekdays:
            return None
        return _weekday_delta(today.weekday(), self.weekdays[name], rule)


def _table(
    fixed: dict[str, int],
    counts: tuple[tuple[re.Pattern[str], int], ...],
    units: dict[str, int],
    weekdays: dict[str, int],
    articles: frozenset[str] = frozenset(),
    prefixes: dict[str, str] | None = None,
    suffixes: dict[str, str] | None = None,
) -> DateVocabulary:
    """A vocabulary with read-only tables."""
    return DateVocabulary(
        fixed=MappingProxyType(fixed),
        counts=counts,
        units=MappingProxyType(units),
        weekdays=MappingProxyType(weekdays),
        articles=articles,
        prefixes=MappingProxyType(prefixes or {}),
        suffixes=MappingProxyType(suffixes or {}),
    )


_N = r"(?P<n>[0-9]{1,4})"
DE: Final = _table(
    fixed={"heute": 0, "morgen": 1, "übermorgen": 2, "gestern": -1, "vorgestern": -2},
    counts=((re.compile(rf"in {_N} (?P<unit>\w+)"), 1), (re.compile(rf"vor {_N} (?P<unit>\w+)"), -1)),
    units={"tag": 1, "tagen": 1, "tage": 1, "woche": 7, "wochen": 7},
    weekdays={"montag": 0, "dienstag": 1, "mittwoch": 2, "donnerstag": 3, "freitag": 4,
              "samstag": 5, "sonnabend": 5, "sonntag": 6},
    articles=frozenset({"am"}),
    prefixes={"nächsten": "next", "nächster": "next", "nächste": "next", "kommenden": "next",
              "letzten": "last", "letzter": "last", "letzte": "last", "vergangenen": "last",
              "diesen": "this", "dieser": "this", "diese": "this"},
)  # fmt: skip
FR: Final = _table(
    fixed={"aujourd'hui": 0, "aujourd’hui": 0, "demain": 1, "après-demain": 2, "apres-demain": 2,
           "hier": -1, "avant-hier": -2},
    counts=((re.compile(rf"dans {_N} (?P<unit>\w+)"), 1), (re.compile(rf"il y a {_N} (?P<unit>\w+)"), -1)),
    units={"jour": 1, "jours": 1, "semaine": 7, "semaines": 7},
    weekdays={"lundi": 0, "mardi": 1, "mercredi": 2, "jeudi": 3, "vendredi": 4, "samedi": 5, "dimanche": 6},
    prefixes={"ce": "this"},
    suffixes={"prochain": "next", "dernier": "last"},
)  # fmt: skip
ES: Final = _table(
    fixed={"hoy": 0, "mañana": 1, "manana": 1, "pasado mañana": 2, "pasado manana": 2, "ayer": -1,
           "anteayer": -2, "antier": -2, "antes de ayer": -2},
    counts=((re.compile(rf"(?:en|dentro de) {_N} (?P<unit>\w+)"), 1),
            (re.compile(rf"hace {_N} (?P<unit>\w+)"), -1)),
    units={"día": 1, "dia": 1, "días": 1, "dias": 1, "semana": 7, "semanas": 7},
    weekdays={"lunes": 0, "martes": 1, "miércoles": 2, "miercoles": 2, "jueves": 3, "viernes": 4,
              "sábado": 5, "sabado": 5, "domingo": 6},
    articles=frozenset({"el"}),
    prefixes={"próximo": "next", "proximo": "next", "pasado": "last", "este": "this"},
    suffixes={"próximo": "next", "proximo": "next", "que viene": "next", "pasado": "last"},
)  # fmt: skip


DATE_VOCABULARIES: Final[Mapping[str, DateVocabulary]] = MappingProxyType({"de": DE, "es": ES, "fr": FR})
"""The locales whose relative dates are read from a :class:`DateVocabulary` table (the compiled
core reads the same tables: ``native_vocab`` in callgate/propose/core.py)."""

DATE_LOCALES: Final[Mapping[str, Callable[[str, date], int | None]]] = MappingProxyType(
    {"de": DE.days, "en": _english_days, "es": ES.days, "fr": FR.days, "zh": _chinese_days}
)
"""Relative-date vocabularies by language subtag (one table per locale). English is read in
every supported locale too; a locale not listed here reads no relative expression (an error
naming these)."""


def _relative_days(text: str, today: date, lang: str) -> int | None:
    """Day offset from ``today`` for a prepared (see :func:`_prepare`) relative expression, read
    with the vocabulary of ``lang`` and English. Raises _FieldError for a locale without one."""
    local = DATE_LOCALES.get(lang)
    if local is None:
        raise _FieldError(
            f"relative dates are not supported in locale {lang[:16]!r}; supported: {', '.join(sorted(DATE_LOCALES))}"
            " (or send an ISO date)"
        )
    days = local(text, today)
    if days is None and lang != "en":
        days = _english_days(text, today)
    return days


def _iso_date(text: str) -> date | None:
    """A ``YYYY-MM-DD`` date, None if ``text`` is not of that shape; _FieldError if it has the
    shape but is no calendar date (2026-02-30)."""
    m = _ISO_DATE.fullmatch(text)
    if m is None:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        raise _FieldError("not a valid calendar date") from None


def _resolve_date(prepared: str, rctx: _Resolved) -> date:
    iso = _iso_date(prepared)
    if iso is not None:
        return iso
    days = _relative_days(prepared, rctx.today, rctx.lang)
    if days is None:
        raise _FieldError("unrecognized relative date expression")
    try:
        return rctx.today + timedelta(days=days)
    except OverflowError:
        raise _FieldError("relative date is out of the supported range") from None


def _leaf_relative_date(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
    if not isinstance(value, str):
        return _UNCHANGED
    if _ISO_DATE.fullmatch(value):
        _iso_date(value)  # validates the calendar date
        return _UNCHANGED
    out = _resolve_date(_prepare(value), rctx).isoformat()
    return _UNCHANGED if out == value else out


# ============================================================================================
# Date-times (kind "datetime")

_TIME_24 = r"(?P<h24>[01]?[0-9]|2[0-3]):(?P<m24>[0-5][0-9])(?::(?P<s24>[0-5][0-9]))?"
_TIME_12 = r"(?P<h12>1[0-2]|0?[1-9])(?::(?P<m12>[0-5][0-9]))? ?(?P<ampm>am|pm|a\.m\.|p\.m\.)"
_REL_DT = re.compile(rf"(?P<date>.+?) ?(?:\bat )?(?:{_TIME_24}|{_TIME_12})")


def _relative_datetime(prepared: str, rctx: _Resolved) -> datetime | None:
    m = _REL_DT.fullmatch(prepared)
    if m is None:
        return None
    day = _resolve_date(m["date"].strip(), rctx)
    if m["h24"] is not None:
        hour, minute, second = int(m["h24"]), int(m["m24"]), int(m["s24"] or 0)
    else:
        hour = int(m["h12"]) % 12 + (12 if m["ampm"].startswith("p") else 0)
        minute, second = int(m["m12"] or 0), 0
    try:
        naive = datetime(day.year, day.month, day.day, hour, minute, second)
    except ValueError:
        raise _FieldError("not a valid calendar date and time") from None
    return _localize(naive, rctx.zone)


def _leaf_datetime(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
    if not isinstance(value, str):
        return _UNCHANGED
    text = unicodedata.normalize("NFKC", value).strip()
    parsed = _parse_dt(text)
    if parsed is not None:
        _, naive, offset = parsed
        if offset is None:
            local = _localize(naive, rctx.zone)
        else:
            local = _to_zone(naive, offset, rctx.zone)
    else:
        rel = _relative_datetime(_prepare(text), rctx)
        if rel is None:
            raise _FieldError("unrecognized date-time expression")
        local = rel
    out = _format_rfc3339(local)
    return _UNCHANGED if out == value else out


# ============================================================================================
# Text, enum aliases, defaults, rounding


def _text_key(value: str) -> str:
    return unicodedata.normalize("NFC", value).strip().casefold()


def _make_text_leaf(collapse: bool, case: str | None) -> Leaf:
    def leaf(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        if not isinstance(value, str):
            return _UNCHANGED
        out = unicodedata.normalize("NFC", value).strip()
        if collapse:
            out = _WS.sub(" ", out)
        if case == "lower":
            out = unicodedata.normalize("NFC", out.lower())
        elif case == "upper":
            out = unicodedata.normalize("NFC", out.upper())
        return _UNCHANGED if out == value else out

    return leaf


def _make_alias_leaf(canonical: frozenset[str], table: Mapping[str, str]) -> Leaf:
    def leaf(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        if not isinstance(value, str) or value in canonical:
            return _UNCHANGED
        target = table.get(_text_key(value))
        return _UNCHANGED if target is None or target == value else target

    return leaf


def _make_default_leaf(key: str, default: JSONValue) -> Leaf:
    scalar = not isinstance(default, (Mapping, tuple))

    def leaf(parent: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        if not isinstance(parent, dict) or key in parent:
            return _UNCHANGED
        new = dict(parent)
        new[key] = default if scalar else _thaw(default)
        return new

    return leaf


# Enough precision for any float's shortest repr (≤ 17 significant digits) plus 15 decimals.
_ROUND_CTX: Final = Context(prec=64)
_ROUNDING: Final[Mapping[str, str]] = {"half_even": ROUND_HALF_EVEN, "half_up": ROUND_HALF_UP}


def _make_round_leaf(decimals: int, mode: str) -> Leaf:
    quantum = Decimal(1).scaleb(-decimals)
    rounding = _ROUNDING[mode]

    def leaf(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        # bool is an int subclass; ints (and bools) are never changed
        if not isinstance(value, float):
            return _UNCHANGED
        # The shortest repr is the decimal the JSON text most plausibly said: 2.675 rounds
        # half-up to 2.68, not to 2.67 as its binary value 2.67499999... would.
        dec = Decimal(repr(value))
        if not dec.is_finite():
            return _UNCHANGED  # NaN/inf: canonicalization rejects them
        exponent = dec.as_tuple().exponent
        if isinstance(exponent, int) and exponent >= -decimals:
            return _UNCHANGED
        try:
            rounded = float(dec.quantize(quantum, rounding=rounding, context=_ROUND_CTX))
        except InvalidOperation:
            return _UNCHANGED
        if rounded == 0.0:
            rounded = 0.0  # no negative zero
        return _UNCHANGED if rounded == value and str(rounded) == str(value) else rounded

    return leaf


# ============================================================================================
# Compilation


@dataclass(frozen=True, slots=True)
class _Compiled:
    spec: NormalizerSpec
    segs: tuple[_Seg, ...]
    """Path to the node the leaf receives (for ``default``: the parent object)."""
    leaf: Leaf


class _DeclError(Exception):
    def __init__(self, message: str, keyword: str) -> None:
        super().__init__(message)
        self.message = message
        self.keyword = keyword


_OPTIONS: Final[Mapping[str, frozenset[str]]] = {
    "relative_date": frozenset(),
    "datetime": frozenset(),
    "text": frozenset({"collapse_whitespace", "case"}),
    "enum_alias": frozenset({"aliases"}),
    "default": frozenset({"value"}),
    "round": frozenset({"decimals", "mode"}),
    "decimal": frozenset({"scale", "minimum", "maximum"}),
}
_MAX_DECIMALS: Final = 15


def _compile(decl: Mapping[str, JSONValue]) -> _Compiled:
    kind = decl.get("kind")
    if not isinstance(kind, str):
        raise _DeclError("normalizer needs a string 'kind'", "kind")
    if kind not in _OPTIONS:
        raise _DeclError(f"unknown normalizer kind {kind[:64]!r}; expected one of {', '.join(KINDS)}", "kind")
    field = decl.get("field")
    if not isinstance(field, str):
        raise _DeclError("normalizer needs a string 'field' (JSON pointer)", "field")
    try:
        segs = _parse_pointer(field)
    except ValueError as exc:
        raise _DeclError(str(exc), "field") from None
    options = {k: v for k, v in decl.items() if k not in ("kind", "field")}
    for name in options:
        if name not in _OPTIONS[kind]:
            raise _DeclError(f"option {name[:64]!r} is not known for kind {kind!r}", name)
    spec = NormalizerSpec(kind=kind, field=field, options=_freeze(options))

    if kind == "relative_date":
        return _Compiled(spec, segs, _leaf_relative_date)
    if kind == "datetime":
        return _Compiled(spec, segs, _leaf_datetime)
    if kind == "text":
        collapse = options.get("collapse_whitespace", False)
        if not isinstance(collapse, bool):
            raise _DeclError("'collapse_whitespace' must be a boolean", "collapse_whitespace")
        case = options.get("case")
        if case is not None and case not in ("lower", "upper"):
            raise _DeclError('\'case\' must be "lower" or "upper"', "case")
        return _Compiled(spec, segs, _make_text_leaf(collapse, case))
    if kind == "enum_alias":
        return _Compiled(spec, segs, _compile_aliases(options.get("aliases")))
    if kind == "default":
        if "value" not in options:
            raise _DeclError("kind 'default' needs a 'value'", "value")
        last = segs[-1]
        if last.wildcard:
            raise _DeclError("a default's field must end in a member name, not '*'", "field")
        try:
            canonicalize(options["value"])
        except RejectedError:
            raise _DeclError("default 'value' is not canonicalizable JSON", "value") from None
        leaf = _make_default_leaf(last.key, _freeze(options["value"]))
        return _Compiled(spec, segs[:-1], leaf)
    if kind == "decimal":
        return _Compiled(spec, segs, _compile_decimal(options))
    # kind == "round"
    decimals = options.get("decimals")
    if not isinstance(decimals, int) or isinstance(decimals, bool):
        raise _DeclError("kind 'round' needs an integer 'decimals'", "decimals")
    if not 0 <= decimals <= _MAX_DECIMALS:
        raise _DeclError(f"'decimals' must be between 0 and {_MAX_DECIMALS}", "decimals")
    mode = options.get("mode", "half_even")
    if mode not in _ROUNDING:
        raise _DeclError('\'mode\' must be "half_even" or "half_up"', "mode")
    return _Compiled(spec, segs, _make_round_leaf(decimals, mode))


# ============================================================================================
# Money (kind "decimal")

DECIMAL_MAX_SCALE: Final = 4
"""Cedar's ``decimal`` has four fractional digits: a declared scale can be at most that."""
DECIMAL_LIMIT: Final = Decimal("922337203685477.5807")
"""Cedar's ``decimal`` range (a 64-bit integer of ten-thousandths): larger values are refused."""
_DECIMAL_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,18})?", re.ASCII)


def _decimal_option(options: Mapping[str, JSONValue], name: str) -> Decimal | None:
    raw = options.get(name)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise _DeclError(f"'{name}' must be a number or a decimal string", name)
    text = repr(raw) if isinstance(raw, float) else str(raw)
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _DeclError(f"'{name}' must be a number or a decimal string", name) from None
    if not value.is_finite() or abs(value) >= DECIMAL_LIMIT:
        raise _DeclError(f"'{name}' is out of Cedar's decimal range", name)
    return value


def _compile_decimal(options: Mapping[str, JSONValue]) -> Leaf:
    scale = options.get("scale")
    if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= DECIMAL_MAX_SCALE:
        raise _DeclError(
            f"kind 'decimal' needs an integer 'scale' between 0 and {DECIMAL_MAX_SCALE} (Cedar decimals "
            "have four fractional digits)",
            "scale",
        )
    low, high = _decimal_option(options, "minimum"), _decimal_option(options, "maximum")
    if low is not None and high is not None and low > high:
        raise _DeclError("'minimum' is greater than 'maximum'", "minimum")
    return _make_decimal_leaf(scale, low, high)


def parse_decimal(value: JSONValue) -> Decimal | None:
    """The exact decimal a JSON number or decimal string says, or None for another value. A
    float is read from its shortest repr (what the JSON text most plausibly said)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        try:
            return Decimal(repr(value))
        except InvalidOperation:
            return None
    if isinstance(value, str):
        text = unicodedata.normalize("NFKC", value).strip()
        return Decimal(text) if _DECIMAL_TEXT.fullmatch(text) else None
    return None


def _make_decimal_leaf(scale: int, low: Decimal | None, high: Decimal | None) -> Leaf:
    quantum = Decimal(1).scaleb(-scale)

    def leaf(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        if value is None or isinstance(value, (dict, list, bool)):
            return _UNCHANGED  # schema re-validation rejects a wrong type
        dec = parse_decimal(value)
        if dec is None or not dec.is_finite():
            raise _FieldError("not a decimal number (digits with an optional '.' and fraction)")
        exponent = dec.normalize(_ROUND_CTX).as_tuple().exponent
        if isinstance(exponent, int) and exponent < -scale and dec != 0:
            raise _FieldError(f"more than {scale} decimal place(s): amounts are never rounded")
        if abs(dec) >= DECIMAL_LIMIT or (low is not None and dec < low) or (high is not None and dec > high):
            raise _FieldError("decimal out of the declared range")
        out = format(dec.quantize(quantum, context=_ROUND_CTX), "f")
        if out.startswith("-") and Decimal(out) == 0:
            out = out[1:]  # no negative zero
        return _UNCHANGED if out == value else out

    return leaf


def decimal_fields(chain: NormalizerChain) -> tuple[tuple[_Seg, ...], ...]:
    """The pointers of ``chain``'s ``decimal`` normalizers (for :func:`as_policy_values`)."""
    return tuple(c.segs for c in chain._compiled if c.spec.kind == "decimal")


_NO_CTX: Final = _Resolved(zone=UTC, now=datetime(2000, 1, 1, tzinfo=UTC), today=date(2000, 1, 1), lang="en")


def _leaf_to_decimal(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
    return Decimal(value) if isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value) else _UNCHANGED


def as_policy_values(value: dict[str, JSONValue], chain: NormalizerChain) -> dict[str, JSONValue]:
    """``value`` with every ``decimal`` field as a :class:`~decimal.Decimal` (the policy engines
    make it a Cedar ``decimal`` and a Rego number). The input is not modified; without decimal
    normalizers it is returned as is."""
    segs_list = decimal_fields(chain)
    if not segs_list:
        return value
    current: JSONValue = value
    errors: list[Violation] = []
    for segs in segs_list:
        current = _update(current, segs, 0, _leaf_to_decimal, _NO_CTX, "", "decimal", errors)
    assert isinstance(current, dict)
    return current


def _compile_aliases(aliases: JSONValue) -> Leaf:
    if not isinstance(aliases, Mapping) or not aliases:
        raise _DeclError("kind 'enum_alias' needs a non-empty object 'aliases'", "aliases")
    table: dict[str, str] = {}
    for alias, target in aliases.items():
        if not isinstance(target, str):
            raise _DeclError("every alias must map to a string", "aliases")
        key = _text_key(alias)
        if not key:
            raise _DeclError("an alias must not be empty or blank", "aliases")
        if table.get(key, target) != target:
            raise _DeclError("two aliases match the same text but map to different values", "aliases")
        table[key] = target
    canonical = frozenset(table.values())
    for value in canonical:
        key = _text_key(value)
        if table.get(key, value) != value:
            raise _DeclError("an alias matches a canonical value but maps elsewhere", "aliases")
    return _make_alias_leaf(canonical, table)


# ============================================================================================
# Public API


class NormalizerChain:
    """An ordered, compiled list of normalizers for one tool version. Immutable, thread-safe.

    Normalizers run in declaration order; each sees the output of the previous ones.
    """

    __slots__ = ("_compiled", "specs")

    specs: tuple[NormalizerSpec, ...]
    _compiled: tuple[_Compiled, ...]

    def __init__(self, compiled: Sequence[_Compiled] = ()) -> None:
        self._compiled = tuple(compiled)
        self.specs = tuple(c.spec for c in self._compiled)

    def __repr__(self) -> str:
        return f"NormalizerChain({[s.name for s in self.specs]!r})"

    @classmethod
    def build(cls, specs: Sequence[Mapping[str, JSONValue]], *, source: str = "") -> NormalizerChain:
        """Validate and compile normalizer declarations (done once, at ToolSpec load).

        Raises:
            LoadError: ``code=TOOLSPEC_INVALID`` listing every bad declaration, each as a
                :class:`Violation` with ``pointer="/normalizers/<i>"`` and the offending member
                as ``keyword`` (unknown kind, malformed pointer, unknown/ill-typed option,
                conflicting aliases, duplicate kind+field).
        """
        if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Sequence):
            raise toolspec_invalid(
                "normalizers must be an array of objects",
                source=source,
                violations=[Violation("/normalizers", "must be an array", keyword="normalizers")],
            )
        compiled: list[_Compiled] = []
        violations: list[Violation] = []
        seen: set[tuple[str, str]] = set()
        for i, decl in enumerate(specs):
            pointer = f"/normalizers/{i}"
            if not isinstance(decl, Mapping):
                violations.append(Violation(pointer, "normalizer must be an object", "type"))
                continue
            try:
                item = _compile(decl)
            except _DeclError as exc:
                violations.append(Violation(pointer, exc.message, exc.keyword))
                continue
            identity = (item.spec.kind, item.spec.field)
            if identity in seen:
                violations.append(Violation(pointer, "duplicate normalizer (same kind and field)", "field"))
                continue
            seen.add(identity)
            compiled.append(item)
        if violations:
            raise toolspec_invalid(
                f"{len(violations)} invalid normalizer declaration(s)", source=source, violations=violations
            )
        return cls(compiled)

    def apply(
        self, value: dict[str, JSONValue], ctx: NormalizationContext
    ) -> tuple[dict[str, JSONValue], tuple[str, ...]]:
        """Normalize ``value`` under ``ctx``.

        Returns a new top-level object (the input and everything in it is left untouched;
        containers on the path to a change are copied, unchanged subtrees are shared) and the
        names (``"<kind>:<field>"``) of the normalizers that changed something, in order.

        Raises:
            RejectedError: ``code=NORMALIZATION_FAILED`` for an invalid ``ctx`` (unknown zone,
                reference clock that is not RFC 3339 with offset, bad locale tag) or for values
                that cannot be normalized (unrecognized relative date, DST-gap local time...).
                All failing locations are reported, one :class:`Violation` each; messages
                never contain argument values.
        """
        rctx = _resolve_ctx(ctx)
        current: JSONValue = value
        applied: list[str] = []
        errors: list[Violation] = []
        for item in self._compiled:
            new = _update(current, item.segs, 0, item.leaf, rctx, "", item.spec.kind, errors)
            if new is not current:
                applied.append(item.spec.name)
                current = new
        if errors:
            if all(e.keyword == "decimal" for e in errors):
                raise decimal_invalid(f"{len(errors)} amount(s) refused", errors)
            raise normalization_failed(f"{len(errors)} argument value(s) could not be normalized", errors)
        result: dict[str, JSONValue] = dict(current) if current is value else current
        return result, tuple(applied)


def normalize(
    validated: ValidatedArguments,
    chain: NormalizerChain,
    ctx: NormalizationContext,
    *,
    tenant: str,
    tool_name: str,
    tool_version: str,
) -> NormalizedArguments:
    """Apply ``chain``, canonicalize (RFC 8785) and digest (spec 6.5).

    Raises:
        RejectedError: ``NORMALIZATION_FAILED`` (see :meth:`NormalizerChain.apply`) or
            ``NOT_CANONICALIZABLE`` (see :func:`callgate.arguments.digest.canonicalize`).
        ValueError: NUL in tenant/name/version or '@' in the tool name (see
            :func:`callgate.arguments.digest.invocation_digest`).
    """
    value, applied = chain.apply(values_of(validated), ctx)
    canonical = canonicalize(value)
    digest = invocation_digest(tenant, tool_name, tool_version, canonical)
    return NormalizedArguments(value=value, canonical=canonical, digest=digest, context=ctx, applied=applied)
