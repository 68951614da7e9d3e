"""Masks for a person's eyes (docs/CONSOLE.md, "Secrets are masked"): what the confirmer listener
and ``callgate explain`` show in place of a secret in the arguments. The end-to-end path (a real
``callgate serve``, ``callgate console`` in Chromium, the gRPC answers, ``callgate explain``) is
tests/test_console_browser.py; this file holds the mark's rules. Failures name the case only."""

from __future__ import annotations

import json

import pytest

from callgate.client.visible import MASK_MARK, mask_mark
from callgate.execute.redaction import Redactor
from callgate.server.services import masked_bytes, masked_json

TOKEN = "calendar-" + "tok-5Jf8Qw2Zr7Kp"
KEY = "sk-" + "maskKeyA1b2C3d4E5f6G7h8"
MASKER = Redactor({"calendar_api_token": TOKEN})


def clear(text: str) -> bool:
    folded = text.casefold()
    return TOKEN.casefold() not in folded and KEY.casefold() not in folded


@pytest.mark.parametrize(
    ("case", "text", "want"),
    [
        ("configured", f"use {TOKEN} now", "use ⟦masked calendar_api_token⟧ now"),
        ("configured upper-cased", f"use {TOKEN.upper()}", "use ⟦masked calendar_api_token⟧"),
        (
            "configured, JSON escapes",
            json.dumps("x" + TOKEN)[1:-1].replace("c", "\\u0063"),
            "x⟦masked calendar_api_token⟧",
        ),
        ("pattern with fingerprint", f"key={KEY};", "key=⟦masked api_key …G7h8⟧;"),
        ("pattern behind escapes", "key=" + KEY.replace("k", "\\u006b"), "key=⟦masked api_key …G7h8⟧"),
        ("pattern, fingerprint not alphanumeric", "sk-abcdefghijklmnopqrstuv-_-_", "⟦masked api_key⟧"),
        ("URL credentials, short", "https://bob:hunter2@db", "https://⟦masked url_credentials⟧@db"),
        ("nothing", "a plain title", "a plain title"),
    ],
)
def test_each_secret_becomes_its_mark(case: str, text: str, want: str) -> None:
    got, count = MASKER.mask(text)
    assert got == want and clear(got), case
    assert count == (0 if case == "nothing" else 1), case


def test_a_configured_secret_never_shows_a_character_and_the_marks_parse() -> None:
    got, _ = MASKER.mask(f"{TOKEN} {KEY}")
    marks = [(m.group(1), m.group(2)) for m in MASK_MARK.finditer(got)]
    assert marks == [("calendar_api_token", None), ("api_key", "G7h8")]
    assert TOKEN[-4:] not in got  # no fingerprint of a secret the sidecar holds
    assert mask_mark("api_key", "G7h8") == "⟦masked api_key …G7h8⟧" and MASK_MARK.fullmatch(mask_mark("x"))


def test_json_values_and_argument_bytes() -> None:
    value = {"title": f"t {TOKEN}", f"k-{KEY}": [KEY, 3, None, True]}
    got, count = MASKER.mask_json(value)
    assert count == 3 and clear(json.dumps(got))
    assert got["title"] == "t ⟦masked calendar_api_token⟧"
    raw = json.dumps({"a": TOKEN, "b": "caf\u00e9"}).encode() + b"\xff"  # bytes that are not UTF-8 stay
    shown = masked_bytes(raw, MASKER)
    assert clear(shown.decode("utf-8", "replace")) and shown.endswith(b"\xff") and b'"caf\\u00e9"' in shown
    assert masked_bytes(b'{"a": 1}', MASKER) == b'{"a": 1}'


def test_masked_json_masks_every_string_and_stays_json() -> None:
    """``masked_arguments`` (what the adapters' approval prompts show): each string of the JSON
    masked on its own, so a pattern that runs to the end of the text (a PEM key without its END
    line) or across a string's end never takes the quotes and members after it; keys too; the
    exact bytes when nothing is found."""
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    doc = {"a": pem, "b": f"t {TOKEN}", KEY: 1, "n": [1.5, None, True]}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert masked_bytes(raw, MASKER)[-1:] != b"}"  # the text-level mask takes the rest of the document
    shown = json.loads(masked_json(raw, MASKER))
    assert shown == {
        "a": "⟦masked private_key …AASC⟧",
        "b": "t ⟦masked calendar_api_token⟧",
        "⟦masked api_key …G7h8⟧": 1,
        "n": [1.5, None, True],
    }
    assert clear(json.dumps(shown, ensure_ascii=False))
    plain = b'{"title":"Standup","x":"\\u202e"}'
    assert masked_json(plain, MASKER) is plain and masked_json(b"", MASKER) == b""
