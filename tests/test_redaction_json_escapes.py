"""A secret inside JSON text, behind whatever legal JSON escapes spell its characters (issue 34
item 4; spec 6.10 "结果中的秘密、个人数据和凭证在回填前如何过滤").

Old main looked for a fixed list of forms of each secret (``json.dumps`` with and without
``ensure_ascii``, ``\\/`` for ``/``): a tool result that is a JSON document whose string spells
the secret as ``\\u0073k-\\u0061...`` (any mix of ``\\uXXXX`` in either case, ``\\/``, a
surrogate pair, the document inside another JSON string) passed unredacted. The redactor now also
reads a text behind its JSON escapes (up to four levels) and redacts the characters an
occurrence decodes from; the encoder's final check does the same, so what is left is withheld.

The checks here read the results with their own decoder (tests/unescaped.py), never with the
redactor under test; failures name the case, never the text or a secret.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.config import SecretConfig
from callgate.execute.encode import EncodeInput, encode_result
from callgate.execute.redaction import Redactor
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_execution import CANARY, FakeCalendar, prepared_event, run_attempt
from tests.unescaped import behind_escapes

SECOND = 's3cr/t+CANARY="q"-77af\u00e9\U0001f511'
"""A second secret with ``/``, ``"``, non-ASCII and a character outside the BMP (a surrogate pair
in ``\\u`` form)."""
API_KEY = "sk-" + "escT3stK9vQ2mX7pL4rW8zN1b"
"""Not configured; the default ``api_key`` pattern describes it."""
SECRETS = {"calendar_api_token": CANARY, "second": SECOND}
REDACTOR = Redactor(SECRETS)


def spelled(text: str, rng: random.Random) -> str:
    """``text`` as the inside of a JSON string, each character written in a legal form chosen at
    random: as is (when JSON allows it), ``\\uXXXX`` in lower or upper hex (a surrogate pair
    beyond the BMP), ``\\/`` for ``/``, ``\\"`` and ``\\\\``."""
    out = []
    for ch in text:
        choice = rng.randrange(4)
        if ch in '"\\':
            out.append("\\" + ch if choice < 2 else f"\\u{ord(ch):04x}")
        elif ch == "/" and choice < 2:
            out.append("\\/")
        elif choice == 0 or ord(ch) < 0x20:
            units = ch.encode("utf-16-be")
            hexes = [units[i : i + 2].hex() for i in range(0, len(units), 2)]
            out.append("".join("\\u" + (h.upper() if choice % 2 else h) for h in hexes))
        else:
            out.append(ch)
    return "".join(out)


def document(secret: str, rng: random.Random, depth: int) -> str:
    """A JSON document holding ``secret`` spelled at random, ``depth`` JSON strings deep."""
    doc = '{"ok": true, "path": "C:\\\\tmp\\/x", "token": "' + spelled(secret, rng) + '", "n": 3}'
    for _ in range(depth):
        doc = json.dumps({"body": doc, "note": "caf\u00e9 \\n"}, ensure_ascii=rng.random() < 0.5)
    return doc


def leaks(text: str) -> list[str]:
    """The names of what ``text`` still shows, directly or behind its escapes."""
    return [
        n
        for n, v in (("canary", CANARY), ("second", SECOND), ("api_key", API_KEY))
        if behind_escapes(text, v)
    ]


CASES = [
    (seed, secret, depth)
    for seed in range(40)
    for secret in ("canary", "second", "api_key")
    for depth in range(4)
]


@pytest.mark.parametrize(("seed", "which", "depth"), CASES)
def test_a_secret_spelled_with_any_mix_of_json_escapes_is_redacted(seed: int, which: str, depth: int) -> None:
    rng = random.Random(f"{seed}-{which}-{depth}")
    secret = {"canary": CANARY, "second": SECOND, "api_key": API_KEY}[which]
    text = "result: " + document(secret, rng, depth)
    assert leaks(text) == [which]  # the test's own decoder sees it: the case is real
    out, count = REDACTOR.redact(text)
    assert leaks(out) == [] and count >= 1, (seed, which, depth)
    assert not REDACTOR.contains_known_secret(out) and not REDACTOR.might_match_pattern(out)
    # only the secret went: the document around it still parses, the rest unchanged
    inner = json.loads(out[len("result: ") :])
    for _ in range(depth):
        assert inner["note"] == "caf\u00e9 \\n"
        inner = json.loads(inner["body"])
    assert inner["path"] == "C:\\tmp/x" and inner["n"] == 3 and inner["token"].startswith("[REDACTED:")


def test_json_escapes_without_a_secret_are_left_alone() -> None:
    """No false positive: escaped text that decodes to no secret is not touched, and the
    presence checks say no (the encoder's common path stays one scan)."""
    rng = random.Random(7)
    for i in range(200):
        words = "".join(rng.choice('ab/"\\é\U0001f511 \n') for _ in range(40))
        text = document(words, rng, i % 3)
        assert REDACTOR.redact(text) == (text, 0), i
        assert not REDACTOR.might_contain(text), i


def test_a_secret_split_by_an_escape_across_the_structure_is_not_joined() -> None:
    """The decoded view is the text's strings, not a join of them: half a secret in one string
    and half in the next (a limit documented in docs/RESULT-ENCODING.md) is not invented into a
    match, and the quotes between stay."""
    half = len(CANARY) // 2
    text = json.dumps({"a": CANARY[:half], "b": CANARY[half:]})
    assert REDACTOR.redact(text) == (text, 0)


def test_the_encoder_redacts_a_tool_result_that_is_escaped_json_text() -> None:
    """encode_result: a string value that is a JSON document (a common tool result: a body an
    HTTP tool read) holding the secret behind mixed escapes; the message, the complete data and
    every string are clean, the result is not withheld, the count says so."""
    rng = random.Random(3)
    value = {"status": 200, "body": document(SECOND, rng, 1), "headers": {"x": document(CANARY, rng, 0)}}
    r = encode_result(
        EncodeInput(
            invocation_id="inv_esc1",
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
    assert not r.withheld and r.redactions >= 2
    assert leaks(message) == [] and r.data is not None and leaks(r.data.decode("utf-8")) == []


# ---------------------------------------------------------------------------------- through gRPC


@pytest.fixture(name="sc")
def _sidecar() -> Iterator[Running]:
    import os

    os.environ["CALLGATE_TEST_CALENDAR_TOKEN"] = CANARY
    os.environ["CALLGATE_TEST_SECOND_SECRET"] = SECOND
    running, tmp = start_sidecar(
        secrets=(
            SecretConfig(
                name="calendar_api_token",
                env="CALLGATE_TEST_CALENDAR_TOKEN",
                tools=("calendar.create_event",),
                resources=("calendar:*",),
            ),
            SecretConfig(name="second", env="CALLGATE_TEST_SECOND_SECRET", tools=("calendar.create_event",)),
        ),
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def _stored(sc: Running) -> str:
    return "".join(
        p.read_bytes().decode("latin-1") for p in sorted(Path(sc.config.store.path).parent.glob("*.db*"))
    )


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_escaped_secrets_in_a_result_and_an_outcome_message_never_leave_the_sidecar(
    sc: Running, depth: int
) -> None:
    """The real gRPC API: EncodeResult with JSON documents holding both configured secrets and
    an ``sk-`` key behind mixed escapes, 0 to 2 JSON strings deep; then the agent's GetResult and
    GetInvocation, the executor's answer and the SQLite files."""
    rng = random.Random(depth)
    _, resp = prepared_event(sc, key=f"k-esc-{depth}")
    inv = resp.invocation_id
    run_attempt(sc, FakeCalendar(), inv)
    value = {
        "event_id": "evt_1",
        "raw": " ".join(document(s, rng, depth) for s in (CANARY, SECOND, API_KEY)),
    }
    enc = sc.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=inv, status="ok", value=json.dumps(value).encode())
    )
    assert enc.redactions >= 3
    session = sc.session_of(inv)
    result = sc.gate.GetResult(pb.GetResultRequest(session_id=session, invocation_id=inv)).message.decode()
    trail = str(sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=session, invocation_id=inv)))
    exits = {
        "GetResult": result,
        "EncodeResult answer": enc.SerializeToString().decode("latin-1"),
        "GetInvocation": trail,
        "stores": _stored(sc),
    }
    found = {where: leaks(text) for where, text in exits.items() if leaks(text)}
    assert not found, found  # names only
    markers = sorted(set(re.findall(r"\[REDACTED:[a-z_]+\]", result)))
    assert markers == ["[REDACTED:api_key]", "[REDACTED:secret]"], markers  # the sidecar's names no secret
