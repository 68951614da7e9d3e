"""A secret spelled with HTML character references or percent-escapes mixed in per character
(issue 34 item 4: each secret caught "case-folded, base64 (standard and URL-safe, any padding),
percent-encoded, hex, JSON- and HTML-escaped"; spec 6.10).

Old main knew only whole-value forms (``html.escape`` of the secret, ``quote`` of it): a result
spelling the secret ``&#115;k-...``, ``&#x73;``, ``&amp;`` for its ``&``, or ``s%6B-...`` (one
character percent-escaped among plain ones) passed unredacted. The redactor now also reads a text
behind its HTML character references (decimal, hexadecimal, named; ``;`` optional as HTML5 reads
them) and percent-escapes (UTF-8), as it reads JSON escapes, level after level, and replaces the
characters an occurrence decodes from.

The checks read the results with the standard library's decoders (tests/unescaped.py
``behind_encodings``), never with the redactor under test; failures name the case, never the text.
"""

from __future__ import annotations

import html
import html.entities
import json
import os
import random
from collections.abc import Iterator

import pytest

from callgate.config import SecretConfig
from callgate.execute.encode import EncodeInput, encode_result
from callgate.execute.redaction import Redactor
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_execution import CANARY, FakeCalendar, prepared_event, run_attempt
from tests.unescaped import behind_encodings

AMPED = 'p&ss<W0rd>&key/9="q"-caf\u00e9'
"""A configured secret with ``&`` (``&amp;`` in HTML), ``<``, ``>``, ``/``, ``"``, ``=`` and a
character beyond ASCII (two percent-escaped bytes in UTF-8)."""
API_KEY = "sk-" + "htmlT3stK9vQ2mX7pL4rW8zN1b"
"""Not configured; the default ``api_key`` pattern describes it."""
SECRETS = {"calendar_api_token": CANARY, "amped": AMPED}
REDACTOR = Redactor(SECRETS)
VALUES = {"canary": CANARY, "amped": AMPED, "api_key": API_KEY}
MARKS = {
    "canary": "[REDACTED:calendar_api_token]",
    "amped": "[REDACTED:amped]",
    "api_key": "[REDACTED:api_key]",
}

NAMES: dict[str, list[str]] = {}
"""Each character's HTML5 names that end in ``;`` (``&amp;``, ``&sol;``, ``&period;`` ...)."""
for _name, _value in html.entities.html5.items():
    if _name.endswith(";") and len(_value) == 1:
        NAMES.setdefault(_value, []).append(_name)


def reference(ch: str, rng: random.Random) -> str:
    """``ch`` as an HTML character reference: decimal, hexadecimal (``x`` or ``X``, either case
    of digits) or a name, chosen at random."""
    choice = rng.randrange(4)
    if choice == 0 or (choice == 3 and ch not in NAMES):
        return f"&#{ord(ch)};"
    if choice in (1, 2):
        digits = f"{ord(ch):x}"
        return f"&#x{digits};" if choice == 1 else f"&#X{digits.upper()};"
    return "&" + rng.choice(sorted(NAMES[ch]))


def percent(ch: str, rng: random.Random) -> str:
    """``ch`` as the percent-escapes of its UTF-8 bytes, upper- or lower-case hex."""
    escaped = "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
    return escaped if rng.random() < 0.5 else escaped.lower()


def spelled(text: str, rng: random.Random, mode: str, *, fold: bool) -> str:
    """``text`` with characters written as references (``html``), percent-escapes (``percent``)
    or either (``mixed``), each chosen at random, the rest as they are (``&`` and ``%`` always
    escaped, as a document writes them); ``fold``: letters in random case."""
    out = []
    for ch in text:
        if fold and ch.isalpha() and rng.random() < 0.3:
            ch = ch.swapcase()
        kind = rng.choice({"html": "hh.", "percent": "pp.", "mixed": "hp."}[mode])
        if ch in "&%" and kind == ".":
            kind = "h" if ch == "&" else "p"
        out.append(reference(ch, rng) if kind == "h" else percent(ch, rng) if kind == "p" else ch)
    return "".join(out)


def leaks(text: str) -> list[str]:
    """The names of what ``text`` still shows, directly or behind its escapes."""
    return [n for n, v in VALUES.items() if behind_encodings(text, v)]


CASES = [
    (seed, which, mode, depth)
    for seed in range(30)
    for which in VALUES
    for mode in ("html", "percent", "mixed")
    for depth in (0, 1)
]


@pytest.mark.parametrize(("seed", "which", "mode", "depth"), CASES)
def test_a_secret_with_references_or_percent_escapes_mixed_in_is_redacted(
    seed: int, which: str, mode: str, depth: int
) -> None:
    rng = random.Random(f"{seed}-{which}-{mode}-{depth}")
    secret = VALUES[which]
    inner = spelled(secret, rng, mode, fold=which != "api_key")
    text = f"before {inner} after"
    if depth:
        text = json.dumps({"body": text, "n": 1}, ensure_ascii=rng.random() < 0.5)
    assert leaks(text) == [which]  # the standard library's decoders see it: the case is real
    out, count = REDACTOR.redact(text)
    assert leaks(out) == [] and count >= 1, (seed, which, mode, depth)
    assert not REDACTOR.contains_known_secret(out) and not REDACTOR.might_match_pattern(out)
    body = json.loads(out)["body"] if depth else out
    # exactly the secret's characters went (a pattern's match too, however much of it is plain)
    assert body == f"before {MARKS[which]} after", (seed, which, mode, depth)
    masked, _ = REDACTOR.mask(text)
    assert leaks(masked) == [], (seed, which, mode, depth)


@pytest.mark.parametrize(
    ("case", "text", "want"),
    [
        ("decimal reference", f"&#{ord(CANARY[0])};{CANARY[1:]}", "[REDACTED:calendar_api_token]"),
        ("decimal, no semicolon", f"&#{ord(CANARY[0])}{CANARY[1:]}", "[REDACTED:calendar_api_token]"),
        ("hex reference", f"x&#x{ord(CANARY[0]):x};{CANARY[1:]}.", "x[REDACTED:calendar_api_token]."),
        ("named &amp;", html.escape(AMPED, quote=False), "[REDACTED:amped]"),
        ("&amp; without ;", AMPED.replace("&", "&amp").replace("<", "&lt;"), "[REDACTED:amped]"),
        ("one percent escape", "s%6B" + CANARY[2:], "[REDACTED:calendar_api_token]"),
        ("percent, twice encoded", "s%256b" + CANARY[2:], "[REDACTED:calendar_api_token]"),
        ("UTF-8 bytes", AMPED.replace("\u00e9", "%C3%A9"), "[REDACTED:amped]"),
        ("a reference behind a JSON escape", "\\u0026#115;" + CANARY[1:], "[REDACTED:calendar_api_token]"),
        ("pattern behind a reference", "key=&#x73;" + API_KEY[1:] + ";", "key=[REDACTED:api_key];"),
    ],
)
def test_each_spelling_is_redacted_in_place(case: str, text: str, want: str) -> None:
    assert leaks(text), case
    assert REDACTOR.redact(text) == (want, 1), case


ORDINARY = [
    "AT&T and R&D, 50% off, 100% sure, %d items, 5%-10% && || a & b; &c.",
    '<p>Tom &amp; Jerry &lt;3 &nbsp;&copy; 2026 &#169; &#xA9; <a href="/q?a=1&amp;b=2&c=%20x">link</a></p>',
    "https://example.com/search?q=caf%C3%A9%20cr%C3%A8me&page=2&sort=asc%2Cdesc#frag",
    "GET /a%2Fb/%7Euser/index.html?next=https%3A%2F%2Fexample.com%2Fhome HTTP/1.1",
    "&ampersand &lt &gt &quot &apos &notanentity; &#; &#x; &#xZZ; %zz %4 %%20 100%25",
    json.dumps({"html": "<b>caf&eacute;</b> &mdash; 10&percnt;", "url": "a%20b"}),
    "\\u0026amp; \\u0025 C:\\\\tmp\\/x &#92;u0041",
]


def test_ordinary_text_with_ampersands_and_percent_signs_is_left_alone() -> None:
    """No false positive: prose, HTML with entities, URLs with escapes, and random strings made
    of ``&#;%``, digits and hex letters decode to no secret; nothing is touched and the presence
    checks say no."""
    rng = random.Random(11)
    texts = list(ORDINARY)
    for _ in range(300):
        texts.append("".join(rng.choice("ab&#;%0123456789xXcdefAB \nsk-") for _ in range(60)))
    for i, text in enumerate(texts):
        assert REDACTOR.redact(text) == (text, 0), i
        assert REDACTOR.mask(text) == (text, 0), i
        assert not REDACTOR.might_contain(text), i


def test_the_encoder_redacts_a_result_with_spelled_secrets() -> None:
    """encode_result: an HTML body and a URL holding the secrets behind references and
    percent-escapes; the message, the complete data and every string are clean, not withheld."""
    rng = random.Random(5)
    value = {
        "status": 200,
        "body": "<p>token: " + spelled(AMPED, rng, "html", fold=False) + "</p>",
        "location": "https://x.example/cb?t=" + spelled(CANARY, rng, "percent", fold=True) + "&ok=1",
        "log": "key " + spelled(API_KEY, rng, "mixed", fold=False),
    }
    assert sorted(leaks(json.dumps(value))) == ["amped", "api_key", "canary"]
    r = encode_result(
        EncodeInput(
            invocation_id="inv_html1",
            tool_call_id="call_1",
            tool_name="http.get",
            tool_version="v1",
            status="ok",
            value=value,
            commit_status="NOT_APPLICABLE",
            max_bytes=1 << 16,
        ),  # fmt: skip
        REDACTOR,
        continuation_token="pg_1",
        nonce_key=b"k" * 32,
    )
    message = r.message_bytes.decode("utf-8")
    assert not r.withheld and r.redactions >= 3
    assert leaks(message) == [] and r.data is not None and leaks(r.data.decode("utf-8")) == []


# ---------------------------------------------------------------------------------- through gRPC


@pytest.fixture(name="sc")
def _sidecar() -> Iterator[Running]:
    os.environ["CALLGATE_TEST_CALENDAR_TOKEN"] = CANARY
    os.environ["CALLGATE_TEST_AMPED_SECRET"] = AMPED
    running, tmp = start_sidecar(
        secrets=(
            SecretConfig(
                name="calendar_api_token",
                env="CALLGATE_TEST_CALENDAR_TOKEN",
                tools=("calendar.create_event",),
                resources=("calendar:*",),
            ),
            SecretConfig(name="amped", env="CALLGATE_TEST_AMPED_SECRET", tools=("calendar.create_event",)),
        ),
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def test_spelled_secrets_in_a_result_never_leave_the_sidecar(sc: Running) -> None:
    """The real gRPC API: EncodeResult with the three secrets spelled with references and
    percent-escapes; then the agent's GetResult and GetInvocation and the executor's answer."""
    rng = random.Random(9)
    _, resp = prepared_event(sc, key="k-html-1")
    inv = resp.invocation_id
    run_attempt(sc, FakeCalendar(), inv)
    raw = " ".join(spelled(v, rng, "mixed", fold=False) for v in VALUES.values())
    enc = sc.executor.EncodeResult(
        pb.EncodeResultRequest(
            invocation_id=inv, status="ok", value=json.dumps({"event_id": "evt_1", "raw": raw}).encode()
        )
    )
    assert enc.redactions >= 3
    session = sc.session_of(inv)
    exits = {
        "GetResult": sc.gate.GetResult(pb.GetResultRequest(session_id=session, invocation_id=inv)).message.decode(),
        "EncodeResult answer": enc.SerializeToString().decode("latin-1"),
        "GetInvocation": str(sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=session, invocation_id=inv))),
    }  # fmt: skip
    found = {where: leaks(text) for where, text in exits.items() if leaks(text)}
    assert not found, found  # names only
