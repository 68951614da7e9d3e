"""The validation fast path (callgate.arguments.validate.fastcheck) must be exact wherever it compiles.

Exactness, not just soundness: ``not`` and ``oneOf`` compose the compiled answers, so a single
wrong "no" inside them can become a wrong "yes" outside. Checked three ways:

1. every case of the official JSON-Schema-Test-Suite (draft 2020-12 required files and the
   optional format files of every asserted format) whose schema compiles to a fast check: the
   check's answer equals the expected one (with the project's deliberate exclusions applied);
2. the subset is not vacuous: most of the suite's cases run through it;
3. property tests against the full validator on the shipped ToolSpec schemas, with generated
   instances near and far from valid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.arguments.validate import SUPPORTED_FORMATS, CompiledSchema
from callgate.arguments.validate.ecma262 import compile_ecma
from callgate.arguments.validate.fastcheck import compile_check
from callgate.arguments.validate.formats import FORMAT_CHECKER
from callgate.base.errors import LoadError
from tests.conftest import POLICIES
from tests.test_validate import (
    EXCLUSIONS,
    FORMAT_DIR,
    compiled_case,
    load_file,
    required_files,
)


def _fast(compiled: CompiledSchema) -> Any:
    return compiled._fast  # the check the validator itself uses


def _suite_files() -> list[Path]:
    files = list(required_files())
    files += [
        FORMAT_DIR / f"{fmt}.json"
        for fmt in sorted(SUPPORTED_FORMATS)
        if (FORMAT_DIR / f"{fmt}.json").is_file()
    ]
    return files


def test_exact_on_the_official_suite() -> None:
    files = _suite_files()
    assert len(files) > 50, "JSON-Schema-Test-Suite corpus missing (see tests/test_validate.py)"
    checked = skipped = 0
    wrong: list[str] = []
    for path in files:
        for ci, case in enumerate(load_file(path)):
            compiled = compiled_case(path, ci)
            if isinstance(compiled, LoadError):
                continue
            fast = _fast(compiled)
            for test in case["tests"]:
                if fast is None:
                    skipped += 1
                    continue
                key = (path.name, case["description"], test["description"])
                expected = test["valid"]
                if key in EXCLUSIONS:
                    want = EXCLUSIONS[key][0]
                    if want.startswith("load_error"):
                        continue
                    expected = want == "valid"
                checked += 1
                try:
                    got = fast(test["data"])
                except RecursionError:
                    continue  # the validator falls back to the full path
                if got is not expected:
                    wrong.append(f"{path.name} :: {case['description']} :: {test['description']}: {got}")
    assert not wrong, "\n".join(wrong)
    # Not vacuous: the subset covers the bulk of the suite (refs, unevaluated*, contains and
    # multipleOf are the cases it leaves to the full validator).
    print("fastcheck coverage", checked, skipped)
    assert checked > 1200 and checked > 2 * skipped, (checked, skipped)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/a", "$defs": {"a": {}}},
        {"unevaluatedProperties": False},
        {"contains": {"type": "integer"}},
        {"multipleOf": 0.1},
        {"x-unknown-keyword": 1},
        {"properties": {"a": {"$dynamicRef": "#meta"}}},
    ],
)
def test_outside_the_subset_there_is_no_fast_path(schema: dict[str, Any]) -> None:
    assert compile_check(schema, regex=compile_ecma, format_conforms=FORMAT_CHECKER.conforms) is None


def _shipped_schemas() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((POLICIES / "tools").glob("*.json")):
        spec = json.loads(path.read_text())
        for field in ("input_schema", "normalized_schema"):
            if field in spec:
                out.append((f"{path.stem}:{field}", spec[field]))
    return out


SHIPPED = _shipped_schemas()


def test_every_shipped_schema_has_a_fast_path() -> None:
    assert SHIPPED
    missing = [name for name, schema in SHIPPED if not CompiledSchema.compile(schema).has_fast_path]
    assert not missing, f"no fast path (every call pays the full validator): {missing}"


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "2026-07-20",
            "2026-02-30",
            "tomorrow",
            "primary",
            "x" * 101,
            "/tmp/a",
            "10:00",
            "2026-07-20T10:00:00+08:00",
        ]
    ),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)


def _near(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Objects using the schema's own property names (valid-ish), with random values."""
    names = sorted(schema.get("properties", {})) + ["extra"]
    return st.dictionaries(st.sampled_from(names), _json, max_size=len(names))


@pytest.mark.parametrize(("name", "schema"), SHIPPED, ids=[n for n, _ in SHIPPED])
@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_agrees_with_the_full_validator(name: str, schema: dict[str, Any], data: st.DataObject) -> None:
    compiled = CompiledSchema.compile(schema)
    value = data.draw(st.one_of(_near(schema), _json))
    full = not list(compiled._validator.iter_errors(value))
    assert _fast(compiled)(value) is full, (name, value)
