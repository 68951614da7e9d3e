"""callgate.base.jsontext.compact_sorted writes exactly json.dumps's compact, key-sorted text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.base import jsontext
from callgate.base.jsontext import compact_sorted


def reference(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # any code point, lone surrogates and U+2028 included
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5)
        | st.dictionaries(st.integers(-5, 5), inner, max_size=3)
    ),  # int keys become strings, sorted
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_same_text_as_json_dumps(v: Any) -> None:
    assert compact_sorted(v) == reference(v)


@pytest.mark.parametrize(
    "v",
    ["x", 1, None, 1.5, math.nan, -0.0, 1e300, [], {}, {"b": 1, "a": {"é": "\u2028\x00"}}, {2: "x", 1: "y"}],
)
def test_cases(v: Any) -> None:
    assert compact_sorted(v) == reference(v)


def test_unsupported_type_raises_json_dumps_type_error() -> None:
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        compact_sorted({"a": object()})


def test_mixed_keys_raise_like_json_dumps() -> None:
    with pytest.raises(TypeError):
        reference({1: "a", "b": 2})
    with pytest.raises(TypeError):
        compact_sorted({1: "a", "b": 2})


def test_without_the_c_encoder_it_is_json_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsontext, "_C_ENCODER", None)
    v = {"b": [1, 2.5, "é"], "a": None}
    assert compact_sorted(v) == reference(v)


def test_the_c_encoder_is_used_here() -> None:
    assert jsontext._C_ENCODER is not None  # CPython with _json: the fast path is what runs
