"""Relative dates in every locale docs/NORMALIZATION.md lists (issue 12 item 7), one table each.

The reference clock is spec 6.5's, 2026-07-19T14:00:00+08:00 in Asia/Shanghai: a Sunday. English
is read in every supported locale too; an unlisted locale is an error naming the supported ones
(ISO dates still pass). The compiled core reads the same tables (ASCII expressions; the others
defer to the Python stages) and leaves an unlisted locale to them (checked through a real
sidecar on the native core too).
"""

from __future__ import annotations

import json

import pytest

from callgate.arguments.normalize import DATE_LOCALES, NormalizerChain
from callgate.arguments.parse import ParseLimits
from callgate.base.errors import ErrorCode, RejectedError
from callgate.base.model import NormalizationContext
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.snapshot import load_snapshot
from callgate.propose.core import Core, load_native
from tests.conftest import POLICIES, Running

CLOCK = "2026-07-19T14:00:00+08:00"
CHAIN = NormalizerChain.build([{"kind": "relative_date", "field": "/d"}, {"kind": "datetime", "field": "/t"}])

TABLES: dict[str, list[tuple[str, str]]] = {
    "en": [
        ("today", "2026-07-19"), ("Tomorrow", "2026-07-20"), ("yesterday", "2026-07-18"),
        ("the day after tomorrow", "2026-07-21"), ("monday", "2026-07-20"), ("next friday", "2026-07-24"),
        ("last sunday", "2026-07-12"), ("this friday", "2026-07-17"), ("in 3 days", "2026-07-22"),
        ("2 weeks ago", "2026-07-05"),
    ],
    "de": [
        ("heute", "2026-07-19"), ("morgen", "2026-07-20"), ("Übermorgen", "2026-07-21"),
        ("gestern", "2026-07-18"), ("vorgestern", "2026-07-17"), ("Montag", "2026-07-20"),
        ("am Dienstag", "2026-07-21"), ("nächsten Freitag", "2026-07-24"), ("letzten Sonntag", "2026-07-12"),
        ("diesen Freitag", "2026-07-17"), ("in 3 Tagen", "2026-07-22"), ("in 1 Woche", "2026-07-26"),
        ("vor 2 Wochen", "2026-07-05"), ("tomorrow", "2026-07-20"),
    ],
    "fr": [
        ("aujourd'hui", "2026-07-19"), ("aujourd\u2019hui", "2026-07-19"), ("Demain", "2026-07-20"),
        ("après-demain", "2026-07-21"), ("hier", "2026-07-18"), ("avant-hier", "2026-07-17"),
        ("lundi", "2026-07-20"), ("lundi prochain", "2026-07-20"), ("vendredi dernier", "2026-07-17"),
        ("ce vendredi", "2026-07-17"), ("dans 3 jours", "2026-07-22"), ("il y a 1 semaine", "2026-07-12"),
        ("tomorrow", "2026-07-20"),
    ],
    "es": [
        ("hoy", "2026-07-19"), ("mañana", "2026-07-20"), ("Pasado mañana", "2026-07-21"),
        ("ayer", "2026-07-18"), ("anteayer", "2026-07-17"), ("el lunes", "2026-07-20"),
        ("el próximo viernes", "2026-07-24"), ("el viernes pasado", "2026-07-17"),
        ("el lunes que viene", "2026-07-20"), ("este viernes", "2026-07-17"), ("en 3 días", "2026-07-22"),
        ("dentro de 2 semanas", "2026-08-02"), ("hace 3 días", "2026-07-16"), ("tomorrow", "2026-07-20"),
    ],
    "zh": [
        ("今天", "2026-07-19"), ("明天", "2026-07-20"), ("后天", "2026-07-21"), ("昨天", "2026-07-18"),
        ("下周一", "2026-07-20"), ("周五", "2026-07-24"), ("3天后", "2026-07-22"), ("tomorrow", "2026-07-20"),
    ],
}  # fmt: skip
REFUSED: dict[str, list[str]] = {
    "en": ["morgen", "demain", "next week"],
    "de": ["morgen früh", "demain", "nächste Woche"],
    "fr": ["demain matin", "morgen", "lundi prochain prochain"],
    "es": ["mañana por la tarde", "morgen", "el próximo"],
    "zh": ["三天后", "morgen"],
}


def ctx(locale: str) -> NormalizationContext:
    return NormalizationContext(CLOCK, "Asia/Shanghai", locale)


def test_the_tables_cover_the_documented_locales() -> None:
    assert set(DATE_LOCALES) == set(TABLES) == {"en", "de", "fr", "es", "zh"}


@pytest.mark.parametrize("locale", sorted(TABLES))
def test_locale_table(locale: str) -> None:
    for region in ("", "-XX"):  # the language subtag selects the table
        for expression, want in TABLES[locale]:
            got, _ = CHAIN.apply({"d": expression}, ctx(locale + region))
            assert got["d"] == want, (locale, expression)
        for expression in REFUSED[locale]:
            with pytest.raises(RejectedError) as exc:
                CHAIN.apply({"d": expression}, ctx(locale))
            assert exc.value.code is ErrorCode.NORMALIZATION_FAILED
            assert exc.value.violations[0].message == "unrecognized relative date expression"


def test_relative_date_times_use_the_locale() -> None:
    got, _ = CHAIN.apply({"t": "morgen 09:00"}, ctx("de"))
    assert got["t"] == "2026-07-20T09:00:00+08:00"
    got, _ = CHAIN.apply({"t": "demain 9am"}, ctx("fr"))
    assert got["t"] == "2026-07-20T09:00:00+08:00"


@pytest.mark.parametrize("locale", ["ja", "pt-BR", "it"])
def test_unlisted_locale_is_an_error_naming_the_supported_ones(locale: str) -> None:
    for expression in ("tomorrow", "morgen"):
        with pytest.raises(RejectedError) as exc:
            CHAIN.apply({"d": expression}, ctx(locale))
        assert exc.value.code is ErrorCode.NORMALIZATION_FAILED
        message = exc.value.violations[0].message
        assert repr(locale.split("-")[0]) in message and "supported: de, en, es, fr, zh" in message
        assert expression not in message  # never the argument value
    got, _ = CHAIN.apply({"d": "2026-07-20"}, ctx(locale))  # an ISO date needs no vocabulary
    assert got["d"] == "2026-07-20"


# -- the compiled core ----------------------------------------------------------------------------

NATIVE = load_native() is not None


def test_the_core_reads_each_locales_table_and_leaves_unlisted_locales_to_python() -> None:
    assert NATIVE, "the compiled core is not built (scripts/native build)"
    snap = load_snapshot(POLICIES)
    weather = snap.tools.get("weather.get", "v1")
    assert weather is not None
    core = Core("native")
    seen: list[str] = []
    core.observer = seen.append
    args = json.dumps({"city": "Paris", "date": "morgen"}).encode()
    # "morgen" is German: in an English session a refusal, in a German one tomorrow
    answer = core.front(snap, weather, args, "acme", "en", CLOCK, ParseLimits())
    assert answer is not None and answer.code == "normalization_failed"
    answer = core.front(snap, weather, args, "acme", "de-AT", CLOCK, ParseLimits())
    assert (
        answer is not None
        and answer.code is None
        and answer.normalized == {"city": "Paris", "date": "2026-07-20"}
    )
    for locale in ("ja", "pt-BR"):  # no relative dates there: the reference reports it
        assert core.front(snap, weather, args, "acme", locale, CLOCK, ParseLimits()) is None
    assert seen == ["locale"] * 2
    english = json.dumps({"city": "Paris", "date": "tomorrow"}).encode()
    answer = core.front(snap, weather, english, "acme", "zh-CN", CLOCK, ParseLimits())
    assert (
        answer is not None
        and answer.code is None
        and answer.normalized == {"city": "Paris", "date": "2026-07-20"}
    )


@pytest.mark.parametrize("locale", sorted(TABLES))
def test_the_core_answers_every_table_expression_as_the_reference(locale: str) -> None:
    """Each table's expressions and refusals, as dates and inside date-times, on both sides: the
    core answers the ASCII ones exactly as the reference, and defers the others (accents, CJK)."""
    from callgate.propose.core import _date_language, native_steps, native_vocab, native_zone

    assert NATIVE, "the compiled core is not built (scripts/native build)"
    native = load_native()
    steps = native_steps(CHAIN)
    assert not isinstance(steps, str)
    tool = native.Tool("t", "v1", steps)
    lang = _date_language(locale)
    assert lang is not None
    vocab, zone = native_vocab(native, lang), native_zone(native, "Asia/Shanghai")
    answered = 0
    expressions = [e for e, _ in TABLES[locale]] + REFUSED[locale]
    for args in [{"d": e} for e in expressions] + [{"t": f"{e} 09:30"} for e in expressions]:
        try:
            want, _ = CHAIN.apply(args, ctx(locale))
            code = None
        except RejectedError as exc:
            want, code = None, exc.code.value
        got_code, got, _, _ = tool.normalize(json.dumps(args).encode(), CLOCK, zone, vocab)
        if got_code == "defer":
            assert not all(ch.isascii() for ch in next(iter(args.values()))), args  # ASCII is answered
            continue
        assert (got_code, got if got_code is None else None) == (code, want), (locale, args)
        answered += 1
    assert answered >= 4  # every ASCII expression (above); each table has a few


def test_a_real_sidecar_on_the_native_core_answers_every_locale(server: Running) -> None:
    assert NATIVE, "the compiled core is not built (scripts/native build)"
    assert server.sidecar.components.gate.core.kind.value == "native"
    for locale, expression, want in (
        ("de", "morgen", "PREPARED"),
        ("fr", "demain", "PREPARED"),
        ("es", "mañana", "PREPARED"),
        ("en", "tomorrow", "PREPARED"),
        ("zh-CN", "明天", "PREPARED"),
        ("ja", "tomorrow", "VALIDATION_REJECTED"),
    ):
        sid = server.gate.OpenSession(
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai", locale=locale
            )
        ).session_id
        server.list_tools(sid)
        r = server.propose(sid, "weather.get@v1", {"city": "Paris", "date": expression})
        assert pb.State.Name(r.state) == want, (locale, r)
        if want == "PREPARED":
            inv = server.call(server.sidecar.components.store.get_invocation(r.invocation_id))
            assert json.loads(inv.normalized_arguments)["date"] == "2026-07-20"
        else:
            assert r.rejection.code == "normalization_failed"
            assert "supported: de, en, es, fr, zh" in r.rejection.violations[0].message
