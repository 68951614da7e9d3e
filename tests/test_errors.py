"""Named error constructors (callgate/base/errors.py): one per raised code, the right class."""

from __future__ import annotations

import inspect

from callgate.base import errors
from callgate.base.errors import CallgateError, ErrorCode, LoadError, RejectedError, Violation

REJECTED = {
    ErrorCode.INVALID_JSON, ErrorCode.INVALID_UTF8, ErrorCode.DUPLICATE_KEY, ErrorCode.NON_FINITE_NUMBER,
    ErrorCode.NUMBER_OVERFLOW, ErrorCode.LONE_SURROGATE, ErrorCode.TRAILING_DATA, ErrorCode.NOT_AN_OBJECT,
    ErrorCode.TOO_DEEP, ErrorCode.TOO_LARGE, ErrorCode.SCHEMA_VIOLATION, ErrorCode.NORMALIZATION_FAILED,
    ErrorCode.NOT_CANONICALIZABLE, ErrorCode.DECIMAL_INVALID, ErrorCode.TEXT_REFUSED,
}  # fmt: skip
LOAD = {
    ErrorCode.CONFIG_INVALID,
    ErrorCode.TOOLSPEC_INVALID,
    ErrorCode.UNSUPPORTED_FORMAT,
    ErrorCode.POLICY_INVALID,
}
NOT_RAISED = {  # engine faults are fail-closed Decision values (policy/engines/base.fault)
    ErrorCode.ENGINE_ERROR, ErrorCode.ENGINE_NO_DECISION, ErrorCode.POLICY_EVALUATION_ERROR,
    ErrorCode.ENGINE_TIMEOUT, ErrorCode.ENGINE_UNAVAILABLE, ErrorCode.ENGINE_UNDEFINED, ErrorCode.ENGINE_MALFORMED,
}  # fmt: skip


def _build(code: ErrorCode) -> CallgateError:
    ctor = getattr(errors, code.value)
    params = inspect.signature(ctor).parameters
    if code is ErrorCode.BUDGET_EXHAUSTED:
        return ctor(["tool_calls"])  # type: ignore[no-any-return]
    if code is ErrorCode.CREDENTIAL_INVALID:
        return ctor("malformed")  # type: ignore[no-any-return]
    if "violations" in params and params["violations"].default is inspect.Parameter.empty:
        return ctor("m", [Violation("/a", "m")])  # type: ignore[no-any-return]
    return ctor("m")  # type: ignore[no-any-return]


def test_a_constructor_per_raised_code_returning_its_class() -> None:
    for code in set(ErrorCode) - NOT_RAISED:
        err = _build(code)
        assert err.code is code
        expected = RejectedError if code in REJECTED else LoadError if code in LOAD else CallgateError
        assert type(err) is expected, code


def test_constructor_metadata_and_defaults() -> None:
    assert errors.session_not_found().message == "unknown session_id"
    assert errors.credential_invalid("expired").metadata == {"reason": "expired"}
    assert errors.credential_invalid("expired").message == "credential refused: expired"
    assert errors.illegal_transition("m").metadata == {}
    assert errors.illegal_transition("m", from_state="A", to_state="B").metadata == {"from": "A", "to": "B"}
    assert errors.terminal_state("m", state="OBSERVED").metadata == {"state": "OBSERVED"}
    assert errors.attempt_not_allowed("m", retry_after="t").metadata == {"retry_after": "t"}
    b = errors.budget_exhausted(["tool_calls", "wall_clock"])
    assert b.message == "session budget exhausted: tool_calls, wall_clock; the tool loop ends here"
    assert b.metadata == {"budgets": "tool_calls,wall_clock"}
    assert str(errors.config_invalid("bad", source="c.toml:3")) == "c.toml:3: config_invalid: bad"


def test_parse_constructors_place_the_position() -> None:
    at = errors.invalid_json("Expecting value", position={"offset": "4", "line": "1", "column": "5"})
    assert at.message == "Expecting value at line 1, column 5" and at.violations == ()
    assert at.metadata == {"offset": "4", "line": "1", "column": "5"}
    ptr = errors.duplicate_key("dup", pointer="/a/b")
    assert ptr.violations == (Violation("/a/b", "dup", "duplicate_key"),) and ptr.metadata == {}


def test_located_and_restated_keep_the_code() -> None:
    err = errors.toolspec_invalid("m", violations=[Violation("/x", "m")])
    moved = err.located("t.json:7")
    assert (moved.code, moved.message, moved.source, moved.violations) == (
        err.code,
        "m",
        "t.json:7",
        err.violations,
    )
    assert err.located("s", violations=()).violations == ()
    again = errors.invalid_json("m", pointer="/p").restated("result value: m")
    assert type(again) is CallgateError and again.code is ErrorCode.INVALID_JSON and not again.violations
