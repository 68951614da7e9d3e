"""Strict parse (spec 6.3, 6.4 layer 1): JSONTestSuite conformance and the refusal table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from callgate.arguments.parse import ParseLimits, parse_arguments, parse_json_document
from callgate.base.errors import ErrorCode, RejectedError
from tests.conftest import ROOT, SHARED

CORPUS = SHARED / "conformance" / "json-parsing" / "test_parsing"
FILES = sorted(CORPUS.glob("*.json"))
# RFC 8259 allows duplicate names ("SHOULD be unique"); spec 6.4 layer 1 refuses them.
Y_REJECTED_BY_DESIGN = {"y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"}


DEFAULT_LIMITS = ParseLimits()


def outcome(raw: bytes, limits: ParseLimits = DEFAULT_LIMITS) -> str:
    try:
        parse_json_document(raw, limits)
    except RejectedError as exc:
        return exc.code.value
    return "accepted"


def test_corpus_is_present() -> None:
    assert len(FILES) > 300, f"JSONTestSuite corpus missing at {CORPUS}"


@pytest.mark.parametrize("path", [f for f in FILES if f.name.startswith("y_")], ids=lambda p: p.name)
def test_y_files_accepted(path: Path) -> None:
    got = outcome(path.read_bytes())
    if path.name in Y_REJECTED_BY_DESIGN:
        assert got == "duplicate_key"
    else:
        assert got == "accepted"


@pytest.mark.parametrize("path", [f for f in FILES if f.name.startswith("n_")], ids=lambda p: p.name)
def test_n_files_rejected(path: Path) -> None:
    assert outcome(path.read_bytes()) != "accepted"


def _documented_i_outcomes() -> dict[str, str]:
    text = (ROOT / "docs" / "json-parsing-i-files.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^\| `(i_[^`]+)` \| `([a-z0-9_]+)` \|", text, re.M))


def test_every_i_file_is_documented() -> None:
    assert set(_documented_i_outcomes()) == {f.name for f in FILES if f.name.startswith("i_")}


@pytest.mark.parametrize("name,documented", sorted(_documented_i_outcomes().items()))
def test_i_files_behave_as_documented(name: str, documented: str) -> None:
    assert outcome((CORPUS / name).read_bytes()) == documented


LIMITS = ParseLimits(max_bytes=64, max_depth=3)

REFUSALS = [
    (b'{"a": 1, "a": 2}', ErrorCode.DUPLICATE_KEY, "/a"),
    (b'{"x": [{"k": 1, "k": 1}]}', ErrorCode.DUPLICATE_KEY, "/x/0/k"),
    (b'{"a": 1, "\\u0061": 2}', ErrorCode.DUPLICATE_KEY, "/a"),
    (b'{"a": NaN}', ErrorCode.NON_FINITE_NUMBER, None),
    (b'{"a": Infinity}', ErrorCode.NON_FINITE_NUMBER, None),
    (b'{"a": -Infinity}', ErrorCode.NON_FINITE_NUMBER, None),
    (b'{"a": 1e400}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": -1e400}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": 1e-400}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": 100.0000000000000000001}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": 3.14159265358979323846}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": -1.234567e-320}', ErrorCode.NUMBER_OVERFLOW, None),
    (b'{"a": "\\ud800"}', ErrorCode.LONE_SURROGATE, "/a"),
    (b'{"a": ["x", "\\udc00"]}', ErrorCode.LONE_SURROGATE, "/a/1"),
    (b'{"\\ud800": 1}', ErrorCode.LONE_SURROGATE, "/\ud800"),
    (b'{"a": 1} x', ErrorCode.TRAILING_DATA, None),
    (b'{"a": 1}{}', ErrorCode.TRAILING_DATA, None),
    (b"[1]", ErrorCode.NOT_AN_OBJECT, ""),
    (b'"s"', ErrorCode.NOT_AN_OBJECT, ""),
    (b'{"a": [[[1]]]}', ErrorCode.TOO_DEEP, None),
    (b'{"a": "' + b"x" * 60 + b'"}', ErrorCode.TOO_LARGE, None),
    (b'{"a": "\xc0\xaf"}', ErrorCode.INVALID_UTF8, None),
    (b'{"a": "\xed\xa0\x80"}', ErrorCode.INVALID_UTF8, None),
    (b'{"a": "\xff"}', ErrorCode.INVALID_UTF8, None),
    (b"\xef\xbb\xbf{}", ErrorCode.INVALID_JSON, None),
    (b'{"a": 1,}', ErrorCode.INVALID_JSON, None),
    (b"{'a': 1}", ErrorCode.INVALID_JSON, None),
    (b'{"a": "\x01"}', ErrorCode.INVALID_JSON, None),
    (b"", ErrorCode.INVALID_JSON, None),
]


@pytest.mark.parametrize(
    "raw,code,pointer", REFUSALS, ids=[f"{c.value}-{i}" for i, (_, c, _) in enumerate(REFUSALS)]
)
def test_refusals(raw: bytes, code: ErrorCode, pointer: str | None) -> None:
    with pytest.raises(RejectedError) as err:
        parse_arguments(raw, LIMITS)
    assert err.value.code is code
    if pointer is not None:
        assert pointer in [v.pointer for v in err.value.violations]


ACCEPTED = [
    b'{"a": [[1]]}',  # depth exactly 3
    b'{"a": "' + b"x" * 55 + b'"}',  # exactly 64 bytes
    b'{"a": "\\ud83d\\ude00"}',  # a valid surrogate pair
    b' \t\r\n{"a": -0.0, "b": 12345678901234567890123} \n',
    b'{"a": "\\\\ud800"}',  # an escaped backslash, not a surrogate escape
]


@pytest.mark.parametrize("raw", ACCEPTED)
def test_accepted_at_the_limits(raw: bytes) -> None:
    parsed = parse_arguments(raw, LIMITS)
    assert parsed.raw is raw  # the raw bytes are kept as they came (6.3)


EXACT_FLOATS = [
    (b"0.1", 0.1),
    (b"1e22", 1e22),
    (b"123.456e78", 123.456e78),
    (b"0.30000000000000004", 0.30000000000000004),
    (b"100.000000000000000000000", 100.0),  # trailing zeros: the same number
    (b"0.000000000000000000000000000001", 1e-30),  # leading zeros: one significant digit
    (b"5e-324", 5e-324),  # the smallest subnormal, exactly its shortest form
    (b"-1.7976931348623157e308", -1.7976931348623157e308),
    (b"123456789012345678901234567890", 123456789012345678901234567890),  # ints stay exact
    # C's %.17g (jansson's default, printf round trips): the double to 17 digits, not shortest
    (b"0.10000000000000001", 0.1),
    (b"4.9406564584124654e-324", 5e-324),
    (b"1.7976931348623157e+308", 1.7976931348623157e308),
    # older Java's Double.toString: 16 digits, not shortest, still the double to 16 digits
    (b"8.409999999999999E21", 8.41e21),
    # the double's exact expansion (more digits than any shortest form) is the double
    (b"0.1000000000000000055511151231257827021181583404541015625", 0.1),
    (b"-0.1000000000000000055511151231257827021181583404541015625", -0.1),
    # 2**-24 = 5.9604644775390625e-08: repr writes ...063 (printf's 16 digits, ...062, name
    # the double below it, and read as that one)
    (b"5.960464477539063e-08", 2**-24),
]


@pytest.mark.parametrize("fmt", [".17g", ".16g", ".18g", ".25g", ".40e"])
def test_every_fixed_precision_print_of_a_double_is_accepted(fmt: str) -> None:
    """A serializer printing with a fixed precision (printf "%.17g" and the like) writes the
    double rounded to that many digits: it passes, and reads back as that double (with 16 digits
    a neighbour may be named: it reads as the neighbour the digits name, exactly)."""
    import random

    rng = random.Random(7)
    for _ in range(2000):
        f = rng.choice([rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randint(-320, 300)])
        text = format(f, fmt)
        if "e" not in text and "." not in text:
            text += ".0"
        value = parse_arguments(b'{"a": ' + text.encode() + b"}").value["a"]
        assert value == float(text)
        assert value == f or fmt == ".16g"  # 16 digits may name a neighbour: that one, exactly


@pytest.mark.parametrize("literal,expected", EXACT_FLOATS, ids=[r.decode() for r, _ in EXACT_FLOATS])
def test_literals_a_double_holds_exactly_are_accepted(literal: bytes, expected: float) -> None:
    value = parse_arguments(b'{"a": ' + literal + b"}").value["a"]
    assert value == expected and type(value) is type(expected)


def test_a_literal_finer_than_a_double_names_the_precision_loss() -> None:
    with pytest.raises(RejectedError) as err:
        parse_arguments(b'{"duration_minutes": 100.0000000000000000001}')
    assert err.value.code is ErrorCode.NUMBER_OVERFLOW
    assert "precision" in str(err.value) and "100" not in str(err.value)


def test_deep_input_never_recurses() -> None:
    with pytest.raises(RejectedError) as err:
        parse_json_document(b"[" * 100000, ParseLimits(max_bytes=10**6))
    assert err.value.code is ErrorCode.TOO_DEEP


def test_syntax_errors_carry_line_and_column() -> None:
    with pytest.raises(RejectedError) as err:
        parse_json_document(b'{\n  "a": 1,\n  "b": tru\n}')
    assert err.value.metadata["line"] == "3" and "line 3" in err.value.message


def test_an_unterminated_string_says_where_once() -> None:
    """Python's decoder says "Unterminated string starting at"; the position is added once
    ("... starting at line 1, column 7", never "at at")."""
    with pytest.raises(RejectedError) as err:
        parse_json_document(b'{"a": "abc')
    assert err.value.message == "Unterminated string starting at line 1, column 7", err.value.message


@pytest.mark.parametrize(
    "raw",
    [
        b'{"k": "SECRET-CANARY-123", "k": 1}',
        b'{"k": "SECRET-CANARY-123", "n": NaN}',
        b'{"k": "SECRET-CANARY-123"} trailing',
        b'{"k": "SECRET-CANARY-123", "s": "\\ud800"}',
        b'{"k": "SECRET-CANARY-123", ]',
    ],
)
def test_messages_never_echo_values(raw: bytes) -> None:
    with pytest.raises(RejectedError) as err:
        parse_arguments(raw)
    e = err.value
    blob = " ".join([e.message, *e.metadata.values(), *(v.message + v.pointer for v in e.violations)])
    assert "SECRET-CANARY" not in blob


@pytest.mark.parametrize("later", [b"1e999", b"NaN", b"1" * 4301])
def test_duplicate_key_before_a_bad_number_is_a_duplicate(later: bytes) -> None:
    """The duplicate comes first in document order; the bad value after it must not escape as
    an internal exception while the duplicate is being located (found by the native parity suite)."""
    raw = b'{"a": {"b": 1, "b": 2}, "c": ' + later + b"}"
    with pytest.raises(RejectedError) as exc:
        parse_json_document(raw)
    assert exc.value.code is ErrorCode.DUPLICATE_KEY
