"""RFC 6901 JSON Pointers (callgate.base.jsonpointer): escaping, the RFC's examples, round trips,
and the stages that now share the module (their pointers must read back identically)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.arguments.digest import canonicalize
from callgate.arguments.parse import parse_json_document
from callgate.base import jsonpointer
from callgate.base.errors import RejectedError

PROPS = settings(max_examples=300, deadline=None)

# Tokens rich in the two characters RFC 6901 escapes, and in look-alikes of their escapes.
_TOKENS = st.lists(st.sampled_from(["~", "/", "0", "1", "~0", "~1", "a", "", " ", "é"]), max_size=6).map(
    "".join
) | st.text(max_size=12)


def _resolve(document: Any, pointer: str) -> Any:
    """RFC 6901 section 4 evaluation, for the examples below."""
    node = document
    for token in jsonpointer.split(pointer):
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


# RFC 6901 section 5: the document and what each pointer (JSON string form) evaluates to.
RFC_DOCUMENT: dict[str, Any] = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}
RFC_EXAMPLES: list[tuple[str, Any]] = [
    ("", RFC_DOCUMENT),
    ("/foo", ["bar", "baz"]),
    ("/foo/0", "bar"),
    ("/", 0),
    ("/a~1b", 1),
    ("/c%d", 2),
    ("/e^f", 3),
    ("/g|h", 4),
    ("/i\\j", 5),
    ('/k"l', 6),
    ("/ ", 7),
    ("/m~0n", 8),
]


@pytest.mark.parametrize(("pointer", "expected"), RFC_EXAMPLES)
def test_rfc6901_examples(pointer: str, expected: Any) -> None:
    assert _resolve(RFC_DOCUMENT, pointer) == expected
    # ...and the pointer is exactly what join() writes for the unescaped tokens
    assert jsonpointer.join(jsonpointer.split(pointer)) == pointer


def test_escape_and_unescape() -> None:
    assert jsonpointer.escape("a/b") == "a~1b"
    assert jsonpointer.escape("m~n") == "m~0n"
    assert jsonpointer.escape(3) == "3"
    assert jsonpointer.escape("~1") == "~01"  # "~" first, so the "1" is not taken as an escape
    assert jsonpointer.unescape("a~1b") == "a/b"
    assert jsonpointer.unescape("m~0n") == "m~n"


def test_order_of_unescaping() -> None:
    """RFC 6901 section 4: ``~1`` is replaced before ``~0``, so ``~01`` is ``~1`` (a tilde and a
    one), not ``/``. The other order would turn ``~01`` into ``~1`` and then into ``/``."""
    assert jsonpointer.unescape("~01") == "~1"
    assert jsonpointer.unescape("~10") == "/0"
    assert jsonpointer.unescape("~0~1") == "~/"
    assert jsonpointer.split("/~01/~10") == ("~1", "/0")


def test_join_and_split() -> None:
    assert jsonpointer.join(()) == ""
    assert jsonpointer.split("") == ()
    assert jsonpointer.join(["a", 0, "b/c", ""]) == "/a/0/b~1c/"
    assert jsonpointer.split("/a/0/b~1c/") == ("a", "0", "b/c", "")
    assert jsonpointer.split("/") == ("",)
    with pytest.raises(ValueError, match="starts with '/'"):
        jsonpointer.split("a/b")


@PROPS
@given(_TOKENS)
def test_token_round_trip(token: str) -> None:
    escaped = jsonpointer.escape(token)
    assert "/" not in escaped
    assert jsonpointer.unescape(escaped) == token


@PROPS
@given(st.lists(_TOKENS, max_size=6))
def test_pointer_round_trip(tokens: list[str]) -> None:
    pointer = jsonpointer.join(tokens)
    assert pointer == "" or pointer.startswith("/")
    assert jsonpointer.split(pointer) == tuple(tokens)


@PROPS
@given(st.lists(_TOKENS, min_size=1, max_size=4))
def test_pointer_resolves_the_member_it_names(keys: list[str]) -> None:
    document: Any = "leaf"
    for key in reversed(keys):
        document = {key: document}
    assert _resolve(document, jsonpointer.join(keys)) == "leaf"


# ------------------------------------------------------------------------ stages that use it


def test_parse_duplicate_key_pointer_uses_rfc6901() -> None:
    with pytest.raises(RejectedError) as exc:
        parse_json_document(b'{"a/b": {"m~n": 1, "m~n": 2}}')
    (violation,) = exc.value.violations
    assert violation.pointer == "/a~1b/m~0n"
    assert jsonpointer.split(violation.pointer) == ("a/b", "m~n")


def test_digest_locates_uncanonicalizable_value_by_rfc6901_pointer() -> None:
    with pytest.raises(RejectedError) as exc:
        canonicalize(json.loads('{"x~/y": [0, {"~1": 1e400}]}'))
    (violation,) = exc.value.violations
    assert violation.pointer == "/x~0~1y/1/~01"
    assert jsonpointer.split(violation.pointer) == ("x~/y", "1", "~1")
