"""Normalization, canonicalization and the invocation digest (spec 6.5).

Table-driven tests for every normalizer kind and property tests (hypothesis, derandomized) for
the digest's central promise: equivalent spellings of one intent give one digest, different
intents give different digests.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.arguments.normalize import NormalizerChain, NormalizerSpec, normalize
from callgate.base.errors import ErrorCode, LoadError, RejectedError
from callgate.base.model import NormalizationContext, ValidatedArguments

PROPS = settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# 2026-07-19 is a Sunday, 2026-07-20 a Monday, 2026-07-22 a Wednesday.
SUN = NormalizationContext("2026-07-19T14:00:00+08:00", "Asia/Shanghai", "en")
MON = NormalizationContext("2026-07-20T10:00:00+08:00", "Asia/Shanghai", "en")
WED = NormalizationContext("2026-07-22T10:00:00+08:00", "Asia/Shanghai", "en")
SUN_ZH = NormalizationContext("2026-07-19T14:00:00+08:00", "Asia/Shanghai", "zh-CN")
MON_ZH = NormalizationContext("2026-07-20T10:00:00+08:00", "Asia/Shanghai", "zh-Hans-CN")
NY = NormalizationContext("2026-03-07T12:00:00-05:00", "America/New_York", "en")

ALIASES = {
    "NYC": "new_york",
    "New York": "new_york",
    "Big Apple": "new_york",
    "SF": "san_francisco",
    "San Francisco": "san_francisco",
}

EVENT_CHAIN = NormalizerChain.build(
    [
        {"kind": "text", "field": "/title", "collapse_whitespace": True},
        {"kind": "relative_date", "field": "/date"},
        {"kind": "datetime", "field": "/start"},
        {"kind": "enum_alias", "field": "/city", "aliases": ALIASES},
        {"kind": "default", "field": "/reminder", "value": 15},
        {"kind": "round", "field": "/duration_h", "decimals": 2},
    ],
    source="calendar.create_event.json",
)

TENANT, TOOL, VERSION = "acme", "calendar.create_event", "1.2.0"


def one(kind: str, value: Any, ctx: NormalizationContext = SUN, **options: Any) -> Any:
    """Run a single normalizer declared on ``/v`` and return the normalized ``/v``."""
    chain = NormalizerChain.build([{"kind": kind, "field": "/v", **options}])
    return chain.apply({"v": value}, ctx)[0]["v"]


def digest_of(value: dict[str, Any], ctx: NormalizationContext = SUN, chain: NormalizerChain = EVENT_CHAIN,
              tenant: str = TENANT, tool: str = TOOL, version: str = VERSION) -> str:  # fmt: skip
    validated = ValidatedArguments(value, "2020-12", "test", "0", True)
    return normalize(validated, chain, ctx, tenant=tenant, tool_name=tool, tool_version=version).digest


def assert_rejected(exc: pytest.ExceptionInfo[RejectedError], code: ErrorCode, *secrets: str) -> None:
    assert exc.value.code is code
    assert exc.value.violations
    shown = str(exc.value) + repr(exc.value.violations)
    for secret in secrets:
        if secret.strip():
            assert secret not in shown, "error text must not echo argument values"


# ============================================================================================
# relative_date


@pytest.mark.parametrize(
    ("expression", "ctx", "expected"),
    [
        # spec 6.5's own example
        ("tomorrow", SUN, "2026-07-20"),
        # 20:00Z on 07-19 is already 04:00 on 07-20 in Shanghai: "tomorrow" is 07-21 there
        ("tomorrow", NormalizationContext("2026-07-19T20:00:00Z", "Asia/Shanghai"), "2026-07-21"),
        # ...and the other way round: 02:00+08:00 on 07-20 is still 07-19 in Los Angeles
        ("today", NormalizationContext("2026-07-20T02:00:00+08:00", "America/Los_Angeles"), "2026-07-19"),
        ("today", SUN, "2026-07-19"),
        ("yesterday", SUN, "2026-07-18"),
        ("day after tomorrow", SUN, "2026-07-21"),
        ("the day before yesterday", SUN, "2026-07-17"),
        ("in 3 days", SUN, "2026-07-22"),
        ("in 1 day", SUN, "2026-07-20"),
        ("10 days ago", SUN, "2026-07-09"),
        ("in 2 weeks", SUN, "2026-08-02"),
        ("1 week ago", SUN, "2026-07-12"),
        # case, whitespace, NFKC (fullwidth letters and digits)
        ("  TOMORROW \n", SUN, "2026-07-20"),
        ("Day   After\tTomorrow", SUN, "2026-07-21"),
        ("ｔｏｍｏｒｒｏｗ", SUN, "2026-07-20"),
        ("in ３ days", SUN, "2026-07-22"),
        # weekdays: "next X" and bare "X" = first X strictly after today (+1..+7)
        ("next monday", SUN, "2026-07-20"),
        ("next monday", MON, "2026-07-27"),
        ("monday", MON, "2026-07-27"),
        ("Wednesday", MON, "2026-07-22"),
        ("wed.", WED, "2026-07-29"),
        ("next sunday", SUN, "2026-07-26"),
        ("Sat", SUN, "2026-07-25"),
        # "last X" = last X strictly before today (-1..-7)
        ("last sunday", SUN, "2026-07-12"),
        ("last monday", WED, "2026-07-20"),
        # "this X" = X of the current ISO week (Mon..Sun), may be in the past
        ("this friday", SUN, "2026-07-17"),
        ("this monday", SUN, "2026-07-13"),
        ("this sunday", MON, "2026-07-26"),
        ("this wednesday", WED, "2026-07-22"),
        # English is always on, also for zh locales
        ("tomorrow", SUN_ZH, "2026-07-20"),
        # zh vocabulary
        ("今天", SUN_ZH, "2026-07-19"),
        ("明天", SUN_ZH, "2026-07-20"),
        ("后天", SUN_ZH, "2026-07-21"),
        ("大后天", SUN_ZH, "2026-07-22"),
        ("昨天", SUN_ZH, "2026-07-18"),
        ("前天", SUN_ZH, "2026-07-17"),
        (" 明天 ", SUN_ZH, "2026-07-20"),
        # 下周X = X of the *next ISO week*: on a Sunday 下周一 is tomorrow, on a Monday +7
        ("下周一", SUN_ZH, "2026-07-20"),
        ("下周一", MON_ZH, "2026-07-27"),
        ("下周日", MON_ZH, "2026-08-02"),
        ("下星期三", MON_ZH, "2026-07-29"),
        ("下个礼拜五", MON_ZH, "2026-07-31"),
        ("上周五", MON_ZH, "2026-07-17"),
        ("本周日", MON_ZH, "2026-07-26"),
        ("这周一", SUN_ZH, "2026-07-13"),
        # bare 周X / 星期X = like a bare English weekday: next one strictly after today
        ("周一", SUN_ZH, "2026-07-20"),
        ("周一", MON_ZH, "2026-07-27"),
        ("星期三", MON_ZH, "2026-07-22"),
        ("星期日", MON_ZH, "2026-07-26"),
        ("星期天", MON_ZH, "2026-07-26"),
        ("週五", MON_ZH, "2026-07-24"),
        ("3天后", SUN_ZH, "2026-07-22"),
        ("３天後", SUN_ZH, "2026-07-22"),
        ("2周前", SUN_ZH, "2026-07-05"),
        # an ISO date is already explicit (surrounding whitespace is trimmed)
        ("2026-12-31", SUN, "2026-12-31"),
        (" 2026-12-31 ", SUN, "2026-12-31"),
    ],
)
def test_relative_date(expression: str, ctx: NormalizationContext, expected: str) -> None:
    assert one("relative_date", expression, ctx) == expected


@pytest.mark.parametrize(
    ("expression", "ctx"),
    [
        ("明天", SUN),  # zh vocabulary needs a zh locale
        ("next blursday", SUN),
        ("tomorrow-ish", SUN),
        ("in a few days", SUN),
        ("the other day", SUN),
        ("", SUN),
        ("   ", SUN),
        ("in -1 days", SUN),
        ("in 12345 days", SUN),  # at most four digits
        ("2026-02-30", SUN),  # date-shaped but no calendar date
        ("2026-07-20T09:00:00Z", SUN),  # a date-time is not a date
        ("周天", SUN_ZH),  # colloquial, not accepted
        ("个星期一", SUN_ZH),
        ("三天后", SUN_ZH),  # Chinese numerals are not guessed
        ("next week", SUN),
    ],
)
def test_relative_date_unrecognized_is_rejected(expression: str, ctx: NormalizationContext) -> None:
    chain = NormalizerChain.build([{"kind": "relative_date", "field": "/when/0"}])
    with pytest.raises(RejectedError) as exc:
        chain.apply({"when": [expression]}, ctx)
    assert_rejected(exc, ErrorCode.NORMALIZATION_FAILED, expression)
    (violation,) = exc.value.violations
    assert (violation.pointer, violation.keyword) == ("/when/0", "relative_date")


def test_relative_date_far_future_is_rejected_not_overflowing() -> None:
    ctx = NormalizationContext("9999-12-30T00:00:00Z", "UTC")
    with pytest.raises(RejectedError) as exc:
        one("relative_date", "in 9 days", ctx)
    assert exc.value.code is ErrorCode.NORMALIZATION_FAILED


# ============================================================================================
# datetime

SH = SUN  # Asia/Shanghai session


@pytest.mark.parametrize(
    ("text", "ctx", "expected"),
    [
        ("2026-07-20T09:00:00+08:00", SH, "2026-07-20T09:00:00+08:00"),
        ("2026-07-20T01:00:00Z", SH, "2026-07-20T09:00:00+08:00"),
        ("2026-07-20t01:00:00z", SH, "2026-07-20T09:00:00+08:00"),
        ("2026-07-19T21:00:00-04:00", SH, "2026-07-20T09:00:00+08:00"),
        ("2026-07-20T01:00Z", SH, "2026-07-20T09:00:00+08:00"),  # seconds added
        ("2026-07-20T09:00", SH, "2026-07-20T09:00:00+08:00"),  # naive = session zone
        ("2026-07-20 09:00:00", SH, "2026-07-20T09:00:00+08:00"),
        ("2026-07-20T09:00:00.500", SH, "2026-07-20T09:00:00.5+08:00"),  # zeros trimmed
        ("2026-07-20T09:00:00.000", SH, "2026-07-20T09:00:00+08:00"),  # zero fraction dropped
        ("2026-07-20T09:00:00.123456000Z", SH, "2026-07-20T17:00:00.123456+08:00"),
        ("2026-07-20T00:30:00Z", NormalizationContext(SH.reference_clock, "UTC"), "2026-07-20T00:30:00+00:00"),
        ("2026-07-20T12:00:00Z", NormalizationContext(SH.reference_clock, "Asia/Kathmandu"), "2026-07-20T17:45:00+05:45"),
        # ambiguous wall time (fall back, 01:00-02:00 happens twice): fold=0 = the earlier, EDT
        ("2026-11-01T01:30", NY, "2026-11-01T01:30:00-04:00"),
        ("2026-11-01T01:30:00-05:00", NY, "2026-11-01T01:30:00-05:00"),  # explicit: kept
        ("2026-11-01T06:30:00Z", NY, "2026-11-01T01:30:00-05:00"),
        ("2026-03-08T03:30", NY, "2026-03-08T03:30:00-04:00"),
        # relative date + time of day, resolved in the session zone
        ("tomorrow 09:00", SH, "2026-07-20T09:00:00+08:00"),
        ("Tomorrow at 9am", SH, "2026-07-20T09:00:00+08:00"),
        ("tomorrow at 9:30 p.m.", SH, "2026-07-20T21:30:00+08:00"),
        ("tomorrow 12am", SH, "2026-07-20T00:00:00+08:00"),
        ("tomorrow 12pm", SH, "2026-07-20T12:00:00+08:00"),
        ("next monday at 14:15:30", SH, "2026-07-20T14:15:30+08:00"),
        ("2026-07-25 at 8am", SH, "2026-07-25T08:00:00+08:00"),
        ("明天 09:00", SUN_ZH, "2026-07-20T09:00:00+08:00"),
        ("tomorrow 02:30", NormalizationContext("2026-11-01T00:00:00-04:00", "America/New_York"), "2026-11-02T02:30:00-05:00"),
    ],
)  # fmt: skip
def test_datetime(text: str, ctx: NormalizationContext, expected: str) -> None:
    assert one("datetime", text, ctx) == expected


@pytest.mark.parametrize(
    ("text", "ctx"),
    [
        ("2026-03-08T02:30", NY),  # spring-forward gap in New York: this wall time never exists
        ("2026-03-08 02:00:00", NY),
        ("tomorrow at 2:30am", NY),  # 2026-03-08 again, reached through a relative date
        ("2026-07-20", SH),  # a date is not a date-time
        ("9am", SH),
        ("tomorrow", SH),  # no time of day: never guess one
        ("2026-07-20T24:00:00Z", SH),
        ("2026-07-20T23:59:60Z", SH),  # leap seconds are not representable
        ("2026-02-30T09:00:00Z", SH),
        ("2026-07-20T09:00:00.0000001Z", SH),  # sub-microsecond precision
        ("2026-07-20T09:00:00+24:00", SH),
        ("20260720T090000Z", SH),  # ISO 8601 basic format is not accepted
        ("tomorrow 13pm", SH),
        ("明天 09:00", SH),  # zh vocabulary needs a zh locale
        ("0001-01-01T00:00:00+01:00", SH),  # out of range after conversion
    ],
)
def test_datetime_rejected(text: str, ctx: NormalizationContext) -> None:
    with pytest.raises(RejectedError) as exc:
        one("datetime", text, ctx)
    assert_rejected(exc, ErrorCode.NORMALIZATION_FAILED, text)
    assert exc.value.violations[0].pointer == "/v"


def test_datetime_gap_message_names_the_dst_gap() -> None:
    with pytest.raises(RejectedError) as exc:
        one("datetime", "2026-03-08T02:30", NY)
    assert "DST gap" in exc.value.violations[0].message


# ============================================================================================
# text, enum_alias, default, round


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        ("  Cafe\u0301 review \t", {}, "Café review"),  # NFD -> NFC, trimmed
        ("\u3000a  b\u00a0", {}, "a  b"),  # Unicode whitespace trimmed, inner kept
        (" a \n\t b  c ", {"collapse_whitespace": True}, "a b c"),
        (" Ärger ", {"case": "lower"}, "ärger"),
        ("straße", {"case": "upper"}, "STRASSE"),
        ("ﬁle", {}, "ﬁle"),  # NFC, not NFKC: compatibility characters are kept
        ("already", {}, "already"),
    ],
)
def test_text(value: str, options: dict[str, Any], expected: str) -> None:
    assert one("text", value, **options) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("NYC", "new_york"),
        ("  nyc ", "new_york"),
        ("big apple", "new_york"),
        ("BIG APPLE", "new_york"),
        ("new york", "new_york"),
        ("new_york", "new_york"),  # canonical stays
        ("san francisco", "san_francisco"),
        ("Gotham", "Gotham"),  # unknown stays; schema re-validation decides
    ],
)
def test_enum_alias(value: str, expected: str) -> None:
    assert one("enum_alias", value, aliases=ALIASES) == expected


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("/reminder", {"title": "x"}, {"title": "x", "reminder": 15}),
        ("/reminder", {"reminder": 5}, {"reminder": 5}),  # present: kept
        ("/reminder", {"reminder": None}, {"reminder": None}),  # present (null): kept
        ("/opts/reminder", {"opts": {}}, {"opts": {"reminder": 15}}),
        ("/opts/reminder", {}, {}),  # parent missing: nothing created
        ("/opts/reminder", {"opts": [1]}, {"opts": [1]}),  # parent not an object
        ("/a/*/reminder", {"a": [{}, {"reminder": 1}, 3]}, {"a": [{"reminder": 15}, {"reminder": 1}, 3]}),
    ],
)  # fmt: skip
def test_default(field: str, value: dict[str, Any], expected: dict[str, Any]) -> None:
    chain = NormalizerChain.build([{"kind": "default", "field": field, "value": 15}])
    assert chain.apply(value, SUN)[0] == expected


def test_default_values_are_fresh_copies() -> None:
    chain = NormalizerChain.build([{"kind": "default", "field": "/tags", "value": ["a"]}])
    first, _ = chain.apply({}, SUN)
    first["tags"].append("mutated")
    assert chain.apply({}, SUN)[0] == {"tags": ["a"]}


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        (2.675, {"decimals": 2, "mode": "half_up"}, 2.68),  # decimal of the text, not the binary
        (2.665, {"decimals": 2}, 2.66),  # half_even is the default
        (2.5, {"decimals": 0}, 2.0),
        (3.5, {"decimals": 0}, 4.0),
        (2.5, {"decimals": 0, "mode": "half_up"}, 3.0),
        (-2.5, {"decimals": 0, "mode": "half_up"}, -3.0),  # half away from zero
        (1.23456, {"decimals": 3}, 1.235),
        (1.2, {"decimals": 3}, 1.2),
        (1e300, {"decimals": 2}, 1e300),
        (7, {"decimals": 0}, 7),  # ints stay ints
        (True, {"decimals": 0}, True),  # booleans are not numbers here
    ],
)
def test_round(value: Any, options: dict[str, Any], expected: Any) -> None:
    out = one("round", value, **options)
    assert out == expected and type(out) is type(expected)


def test_round_negative_zero_becomes_zero() -> None:
    out = one("round", -0.001, decimals=0)
    assert out == 0.0 and math.copysign(1.0, out) == 1.0


# ============================================================================================
# Pointers, missing fields, type mismatches, `applied`, immutability


@pytest.mark.parametrize(
    ("kind", "options", "value"),
    [
        ("relative_date", {}, 20260720),
        ("datetime", {}, ["2026-07-20T09:00"]),
        ("text", {}, 3),
        ("enum_alias", {"aliases": ALIASES}, None),
        ("round", {"decimals": 1}, "1.25"),
    ],
)
def test_wrong_type_is_left_for_schema_revalidation(kind: str, options: dict[str, Any], value: Any) -> None:
    assert one(kind, value, **options) == value


@pytest.mark.parametrize("kind", ["relative_date", "datetime", "text", "round"])
def test_missing_field_is_skipped(kind: str) -> None:
    options = {"decimals": 1} if kind == "round" else {}
    chain = NormalizerChain.build([{"kind": kind, "field": "/absent/deeper", **options}])
    assert chain.apply({"other": 1}, SUN) == ({"other": 1}, ())


def test_wildcards_escapes_and_applied_names() -> None:
    chain = NormalizerChain.build(
        [
            {"kind": "text", "field": "/attendees/*/email", "case": "lower"},
            {"kind": "relative_date", "field": "/a~1b/c~0d"},
            {"kind": "relative_date", "field": "/slots/1"},
            {"kind": "text", "field": "/untouched"},
        ]
    )
    value = {
        "attendees": [{"email": " A@X.COM "}, {"name": "no email"}, {"email": "b@x.com"}],
        "a/b": {"c~d": "tomorrow"},
        "slots": ["today", "tomorrow", "in 2 days"],
        "untouched": "ok",
    }
    out, applied = chain.apply(value, SUN)
    assert out["attendees"] == [{"email": "a@x.com"}, {"name": "no email"}, {"email": "b@x.com"}]
    assert out["a/b"] == {"c~d": "2026-07-20"}
    assert out["slots"] == ["today", "2026-07-20", "in 2 days"]
    assert applied == ("text:/attendees/*/email", "relative_date:/a~1b/c~0d", "relative_date:/slots/1")


def test_every_failing_location_is_reported() -> None:
    chain = NormalizerChain.build(
        [{"kind": "relative_date", "field": "/d/*"}, {"kind": "datetime", "field": "/t"}]
    )
    with pytest.raises(RejectedError) as exc:
        chain.apply({"d": ["tomorrow", "someday", "never"], "t": "soon"}, SUN)
    assert [(v.pointer, v.keyword) for v in exc.value.violations] == [
        ("/d/1", "relative_date"),
        ("/d/2", "relative_date"),
        ("/t", "datetime"),
    ]


json_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=12,
)
events = st.fixed_dictionaries(
    {
        "title": st.text(max_size=12),
        "date": st.sampled_from(["tomorrow", "2026-07-30", "in 3 days", 7]),
        "start": st.sampled_from(["2026-07-20T01:00:00Z", "2026-07-20T09:00", 1.5]),
        "city": st.sampled_from([*ALIASES, "paris", None]),
        "duration_h": st.floats(0, 100) | st.integers(0, 10),
    },
    optional={"reminder": json_scalars, "extra": json_values},
)


@PROPS
@given(events)
def test_apply_never_mutates_its_input(value: dict[str, Any]) -> None:
    snapshot = copy.deepcopy(value)
    out, _ = EVENT_CHAIN.apply(value, SUN)
    assert value == snapshot
    assert out is not value


# ============================================================================================
# Load-time validation and context validation


@pytest.mark.parametrize(
    ("decl", "keyword"),
    [
        ({"kind": "fuzzy", "field": "/a"}, "kind"),
        ({"field": "/a"}, "kind"),
        ({"kind": "text"}, "field"),
        ({"kind": "text", "field": "a"}, "field"),
        ({"kind": "text", "field": ""}, "field"),
        ({"kind": "text", "field": "/a~2"}, "field"),
        ({"kind": "text", "field": "/a", "colapse_whitespace": True}, "colapse_whitespace"),
        ({"kind": "text", "field": "/a", "collapse_whitespace": "yes"}, "collapse_whitespace"),
        ({"kind": "text", "field": "/a", "case": "title"}, "case"),
        ({"kind": "relative_date", "field": "/a", "locale": "zh"}, "locale"),
        ({"kind": "enum_alias", "field": "/a"}, "aliases"),
        ({"kind": "enum_alias", "field": "/a", "aliases": {}}, "aliases"),
        ({"kind": "enum_alias", "field": "/a", "aliases": {"x": 1}}, "aliases"),
        ({"kind": "enum_alias", "field": "/a", "aliases": {" ": "x"}}, "aliases"),
        ({"kind": "enum_alias", "field": "/a", "aliases": {"ny": "a", "NY ": "b"}}, "aliases"),
        ({"kind": "enum_alias", "field": "/a", "aliases": {"a": "b", "B": "c"}}, "aliases"),
        ({"kind": "default", "field": "/a"}, "value"),
        ({"kind": "default", "field": "/a/*", "value": 1}, "field"),
        ({"kind": "default", "field": "/a", "value": float("nan")}, "value"),
        ({"kind": "round", "field": "/a"}, "decimals"),
        ({"kind": "round", "field": "/a", "decimals": True}, "decimals"),
        ({"kind": "round", "field": "/a", "decimals": 16}, "decimals"),
        ({"kind": "round", "field": "/a", "decimals": 2, "mode": "ceiling"}, "mode"),
    ],
)
def test_bad_declaration_is_a_load_error(decl: dict[str, Any], keyword: str) -> None:
    good = {"kind": "text", "field": "/ok"}
    with pytest.raises(LoadError) as exc:
        NormalizerChain.build([good, decl], source="tools/x.json")
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID
    assert exc.value.source == "tools/x.json"
    assert [(v.pointer, v.keyword) for v in exc.value.violations] == [("/normalizers/1", keyword)]


@pytest.mark.parametrize(
    "specs", [[{"kind": "text", "field": "/a"}, {"kind": "text", "field": "/a"}], ["text"], "text"]
)
def test_malformed_normalizer_lists(specs: Any) -> None:
    with pytest.raises(LoadError) as exc:
        NormalizerChain.build(specs)
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID


def test_specs_are_frozen_records() -> None:
    chain = NormalizerChain.build([{"kind": "enum_alias", "field": "/c", "aliases": {"a": "b"}}])
    (spec,) = chain.specs
    assert spec == NormalizerSpec("enum_alias", "/c", {"aliases": {"a": "b"}})
    assert spec.name == "enum_alias:/c"
    with pytest.raises(TypeError):
        spec.options["aliases"]["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize(
    ("ctx", "keyword"),
    [
        (NormalizationContext("2026-07-19T14:00:00", "Asia/Shanghai"), "reference_clock"),
        (NormalizationContext("2026-07-19 14:00:00+08:00", "Asia/Shanghai"), "reference_clock"),
        (NormalizationContext("2026-07-19T14:00+08:00", "Asia/Shanghai"), "reference_clock"),
        (NormalizationContext("2026-07-19", "Asia/Shanghai"), "reference_clock"),
        (NormalizationContext("yesterday", "Asia/Shanghai"), "reference_clock"),
        (NormalizationContext("2026-07-19T14:00:00+08:00", "Asia/Shangai"), "timezone"),
        (NormalizationContext("2026-07-19T14:00:00+08:00", "../../etc/passwd"), "timezone"),
        (NormalizationContext("2026-07-19T14:00:00+08:00", "America"), "timezone"),
        (NormalizationContext("2026-07-19T14:00:00+08:00", "+08:00"), "timezone"),
        (NormalizationContext("2026-07-19T14:00:00+08:00", "Asia/Shanghai", "中文"), "locale"),
    ],
)
def test_bad_context_is_rejected(ctx: NormalizationContext, keyword: str) -> None:
    with pytest.raises(RejectedError) as exc:
        EVENT_CHAIN.apply({"title": "t"}, ctx)
    assert exc.value.code is ErrorCode.NORMALIZATION_FAILED
    assert exc.value.violations[0].keyword == keyword


# ============================================================================================
# canonicalize


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ({"n": 2**53}, "/n"),
        ({"n": -(2**53)}, "/n"),
        ({"a": [1, {"b~/": 10**30}]}, "/a/1/b~0~1"),
        ({"x": float("nan")}, "/x"),
        ({"x": [float("inf")]}, "/x/0"),
        ({"s": "ok\ud800"}, "/s"),
        ({"k\udfff": 1}, ""),
        ({"x": {1, 2}}, "/x"),
    ],
)
def test_canonicalize_rejects_values_without_canonical_form(value: Any, pointer: str) -> None:
    with pytest.raises(RejectedError) as exc:
        canonicalize(value)
    assert_rejected(exc, ErrorCode.NOT_CANONICALIZABLE, str(2**53), "9007199254740992", "1" + "0" * 30)
    assert exc.value.violations[0].pointer == pointer


def test_canonicalize_accepts_the_safe_integer_range() -> None:
    assert (
        canonicalize({"b": 2**53 - 1, "a": -(2**53) + 1}) == b'{"a":-9007199254740991,"b":9007199254740991}'
    )


# ============================================================================================
# Digest: golden vector, separators, different intents


GOLDEN_INPUT = {
    "title": "  Cafe\u0301   review ",
    "date": "tomorrow",
    "start": "2026-07-20T01:00:00Z",
    "city": "Big Apple",
    "duration_h": 1.0,
    "attendees": [{"email": "A@Example.com"}],
}
# Written by hand from the rules (keys sorted, NFC "é" = C3 A9, "1.0" -> 1, default reminder 15).
GOLDEN_CANONICAL = (
    b'{"attendees":[{"email":"A@Example.com"}],"city":"new_york","date":"2026-07-20",'
    b'"duration_h":1,"reminder":15,"start":"2026-07-20T09:00:00+08:00","title":"Caf\xc3\xa9 review"}'
)
# Computed once outside Python, from the spec 6.5 formula d = H(tenant ‖ name@version ‖ canonical):
#   printf 'acme\0calendar.create_event@1.2.0\0<GOLDEN_CANONICAL>' | sha256sum   (and openssl dgst)
GOLDEN_DIGEST = "sha256:5c977c088fa1c1432e7662ee57a2e29f1b61b5bdaae912235581bbfc4779154c"


def test_golden_vector() -> None:
    validated = ValidatedArguments(GOLDEN_INPUT, "2020-12", "test", "0", True)
    out = normalize(validated, EVENT_CHAIN, SUN, tenant=TENANT, tool_name=TOOL, tool_version=VERSION)
    assert out.canonical == GOLDEN_CANONICAL
    by_hand = hashlib.sha256(b"acme\x00calendar.create_event@1.2.0\x00" + GOLDEN_CANONICAL).hexdigest()
    assert "sha256:" + by_hand == GOLDEN_DIGEST
    assert out.digest == GOLDEN_DIGEST
    assert out.context is SUN
    assert out.applied == (
        "text:/title",
        "relative_date:/date",
        "datetime:/start",
        "enum_alias:/city",
        "default:/reminder",
    )


@pytest.mark.parametrize(
    ("tenant", "name", "version"),
    [("a\x00", "t", "1"), ("a", "t\x00", "1"), ("a", "t", "1\x00"), ("a", "t@x", "1"), ("\ud800", "t", "1")],
)
def test_digest_rejects_ambiguous_identity(tenant: str, name: str, version: str) -> None:
    with pytest.raises(ValueError):
        invocation_digest(tenant, name, version, b"{}")


@pytest.mark.parametrize(
    ("tenant", "name", "version", "canonical"),
    [
        ("acme2", "t", "1", b"{}"),  # different tenant
        ("acme", "u", "1", b"{}"),  # different tool
        ("acme", "t", "2", b"{}"),  # different version
        ("acme", "t", "1", b'{"a":1}'),  # different arguments
        ("acm", "et", "1", b"{}"),  # boundary shift between tenant and name
        ("acme", "t", "1@", b"{}"),
    ],
)
def test_different_intents_give_different_digests(
    tenant: str, name: str, version: str, canonical: bytes
) -> None:
    assert invocation_digest(tenant, name, version, canonical) != invocation_digest("acme", "t", "1", b"{}")


identity_text = st.text(st.characters(exclude_characters="\x00"), max_size=8)


@PROPS
@given(identity_text, identity_text, identity_text.filter(bool))
def test_identity_parts_are_separated(tenant: str, version: str, moved: str) -> None:
    # Moving text across a field boundary never yields the same digest: NUL separates the three
    # parts and '@' is forbidden in tool names, so the preimage decodes back to one triple.
    triples = {
        (tenant, "tool", version),
        (tenant + moved, "tool", version),
        (tenant, "tool", moved + version),
        (tenant, "tool", version + moved),
    }
    if "@" not in moved:
        triples |= {(tenant, "tool" + moved, version), (tenant, moved + "tool", version)}
    assert len({invocation_digest(*t, b"{}") for t in triples}) == len(triples)


@PROPS
@given(json_values, json_values)
def test_different_values_give_different_digests(a: Any, b: Any) -> None:
    if canonicalize(a) != canonicalize(b):
        assert invocation_digest("t", "x", "1", canonicalize(a)) != invocation_digest(
            "t", "x", "1", canonicalize(b)
        )


# ============================================================================================
# One intent, many spellings -> one digest


def _ws(r: random.Random) -> str:
    return r.choice(["", "", " ", "\n", "\t", " \r\n  "])


def _spell_str(s: str, r: random.Random) -> str:
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if r.random() < 0.3 or ch in '"\\' or cp < 0x20:
            if cp > 0xFFFF:
                hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                out.append(r.choice([f"\\u{hi:04x}\\u{lo:04x}", f"\\u{hi:04X}\\u{lo:04X}"]))
            else:
                short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "/": "\\/"}.get(ch)
                out.append(short if short and r.random() < 0.5 else f"\\u{cp:04x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def _spell_number(n: int | float, r: random.Random) -> str:
    if isinstance(n, int):
        forms = [str(n), f"{n}.0", f"{n}e0", f"{n}.00E+0"] + ([f"{n}0e-1"] if n else [])
        return r.choice(forms) if abs(n) < 2**50 else str(n)
    text = repr(n)
    sign, digits, exp = Decimal(text).as_tuple()
    mantissa = "".join(map(str, digits))
    minus = "-" if sign else ""
    forms = [text, f"{minus}{mantissa}e{exp}"]
    if len(mantissa) > 1:
        forms.append(f"{minus}{mantissa[0]}.{mantissa[1:]}E{exp + len(mantissa) - 1:+d}")
    return r.choice(forms)


def spell(value: Any, r: random.Random) -> str:
    """A JSON text of ``value`` in a random but equivalent spelling: key order, insignificant
    whitespace, \\u escapes, and number forms (1 / 1.0 / 1e0 / 10e-1)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return _spell_number(value, r)
    if isinstance(value, str):
        return _spell_str(value, r)
    if isinstance(value, list):
        return "[" + _ws(r) + ",".join(_ws(r) + spell(v, r) + _ws(r) for v in value) + "]"
    items = list(value.items())
    r.shuffle(items)
    members = (_ws(r) + _spell_str(k, r) + _ws(r) + ":" + _ws(r) + spell(v, r) + _ws(r) for k, v in items)
    return "{" + _ws(r) + ",".join(members) + "}"


@PROPS
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5), st.randoms(use_true_random=False))
def test_json_spellings_give_one_digest(value: dict[str, Any], r: random.Random) -> None:
    empty = NormalizerChain.build([])
    texts = [spell(value, r) for _ in range(3)]
    digests = {digest_of(json.loads(t), chain=empty) for t in texts}
    assert digests == {digest_of(value, chain=empty)}


@pytest.mark.parametrize("text", ['{"n":1}', '{"n":1.0}', '{"n":1e0}', '{"n":10e-1}', '{ "n" : 1.000E+00 }'])
def test_one_number_many_spellings(text: str) -> None:
    assert digest_of(json.loads(text), chain=NormalizerChain.build([])) == digest_of(
        {"n": 1}, chain=NormalizerChain.build([])
    )


@PROPS
@given(events, st.randoms(use_true_random=False))
def test_event_key_order_and_spelling_give_one_digest(value: dict[str, Any], r: random.Random) -> None:
    try:
        expected = digest_of(value)
    except RejectedError:
        return  # e.g. an unrecognized date: rejected whatever the spelling
    permuted = dict(r.sample(list(value.items()), len(value)))
    assert digest_of(permuted) == expected
    assert digest_of(json.loads(spell(value, r))) == expected


@PROPS
@given(st.text(max_size=16), st.sampled_from(["", " ", "\t", "\u3000", "\n  "]))
def test_nfc_and_nfd_titles_give_one_digest(title: str, pad: str) -> None:
    base = {"title": unicodedata.normalize("NFC", title), "date": "2026-07-20"}
    variant = {"title": pad + unicodedata.normalize("NFD", title) + pad, "date": "2026-07-20"}
    assert digest_of(base) == digest_of(variant)


ZONES = ["Asia/Shanghai", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu", "UTC"]


def _spell_instant(instant: datetime, offset_minutes: int, r: random.Random) -> str:
    local = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if local.microsecond or r.random() < 0.3:
        text += "." + f"{local.microsecond:06d}" + "0" * r.randint(0, 3)
    if offset_minutes == 0 and r.random() < 0.5:
        return text + r.choice("Zz")
    sign, m = ("+" if offset_minutes >= 0 else "-"), abs(offset_minutes)
    return f"{text}{sign}{m // 60:02d}:{m % 60:02d}"


@PROPS
@given(
    st.datetimes(datetime(1990, 1, 1), datetime(2090, 1, 1), timezones=st.just(UTC)),
    st.lists(st.integers(-14 * 4, 14 * 4).map(lambda q: q * 15), min_size=2, max_size=4),
    st.sampled_from(ZONES),
    st.randoms(use_true_random=False),
)
def test_equivalent_datetimes_give_one_digest(
    instant: datetime, offsets: list[int], zone: str, r: random.Random
) -> None:
    ctx = NormalizationContext("2026-07-19T14:00:00+08:00", zone)
    digests = {digest_of({"start": _spell_instant(instant, off, r)}, ctx) for off in offsets}
    assert len(digests) == 1


@PROPS
@given(
    st.sampled_from(sorted(ALIASES)), st.randoms(use_true_random=False), st.sampled_from(["", " ", "\u3000"])
)
def test_enum_aliases_give_one_digest(alias: str, r: random.Random, pad: str) -> None:
    spelled = pad + "".join(c.upper() if r.random() < 0.5 else c.lower() for c in alias) + pad
    assert digest_of({"city": spelled}) == digest_of({"city": ALIASES[alias]})


def test_relative_and_absolute_spellings_of_one_day_give_one_digest() -> None:
    spellings = ["tomorrow", "2026-07-20", "next monday", "in 1 day", " Tomorrow "]
    assert len({digest_of({"date": s}) for s in spellings}) == 1
    assert len({digest_of({"date": s}, SUN_ZH) for s in ["明天", "下周一", "周一", "tomorrow"]}) == 1


def test_context_with_the_instant_resolves_like_the_text_alone() -> None:
    """Issue 15: the gate passes the instant with its RFC 3339 text (no re-parse per call, no
    cache keyed on a clock that never repeats); the answer is the text's, and an instant that
    does not spell the text is ignored."""
    from datetime import datetime, timedelta

    from callgate.arguments import normalize as nz

    zone = nz.load_zone("America/New_York")
    assert zone is not None
    base = datetime(2026, 11, 1, 5, 30, 0, 123456, tzinfo=nz.load_zone("UTC"))  # around a DST fold
    for minutes in range(0, 180, 7):
        t = (base + timedelta(minutes=minutes)).astimezone(zone)
        text = NormalizationContext(
            reference_clock=t.isoformat(), timezone="America/New_York", locale="zh-CN"
        )
        fast = NormalizationContext(
            reference_clock=t.isoformat(), timezone="America/New_York", locale="zh-CN", reference_time=t
        )
        a, b = nz._resolve_ctx(fast), nz._resolve_text(text)
        assert a == b and a.now.fold == b.now.fold
    wrong = NormalizationContext(
        reference_clock="2026-07-19T14:00:00+08:00", timezone="Asia/Shanghai", reference_time=base
    )
    assert nz._resolve_ctx(wrong).today.isoformat() == "2026-07-19"
