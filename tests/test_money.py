"""Money (issue 12 item 3): the ``decimal`` normalizer, and decimals as both engines see them.

A JSON number or decimal string becomes a fixed-scale decimal string (``"50.00"``); the policy
engines get it as a Cedar ``decimal`` extension value and a Rego number, so ``50``, ``50.0``,
``"50.00"`` and ``49.99`` all compare correctly with ``.greaterThan(decimal("100.00"))``. More
places than the scale (never rounded), values out of range and non-decimals are refused with
``decimal_invalid``. The compiled core does not run it: such a tool stays on the Python stages.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from callgate.arguments.normalize import NormalizerChain, as_policy_values, normalize
from callgate.arguments.parse import ParseLimits
from callgate.base.errors import ErrorCode, LoadError, RejectedError
from callgate.base.model import Effect, NormalizationContext, Subject, ValidatedArguments
from callgate.policy.engines.cedar import _ContextError, to_cedar_value
from callgate.policy.engines.rego_contract import RequestError, contract_value
from callgate.policy.snapshot import load_snapshot
from callgate.propose.authorize import authorize_invocation
from callgate.propose.core import Core, native_plan
from tests.conftest import POLICIES

CTX = NormalizationContext("2026-07-19T14:00:00+08:00", "Asia/Shanghai", "en")


def chain(**options: Any) -> NormalizerChain:
    return NormalizerChain.build([{"kind": "decimal", "field": "/amount", **options}])


@pytest.mark.parametrize(
    ("scale", "given", "want"),
    [
        (2, 50, "50.00"), (2, 50.0, "50.00"), (2, "50.00", "50.00"), (2, "50", "50.00"), (2, 49.99, "49.99"),
        (2, "49.9", "49.90"), (2, 0, "0.00"), (2, "-0.00", "0.00"), (2, -12.5, "-12.50"), (2, " 7.10 ", "7.10"),
        (2, "1.000", "1.00"), (2, 1e2, "100.00"), (4, "0.0001", "0.0001"), (4, 3, "3.0000"), (0, 12, "12"),
        (0, "12.0", "12"), (2, "922337203685477.58", "922337203685477.58"),
    ],
)  # fmt: skip
def test_accepted(scale: int, given: Any, want: str) -> None:
    got, applied = chain(scale=scale).apply({"amount": given}, CTX)
    assert got == {"amount": want}
    assert applied == (() if want == given else ("decimal:/amount",))


@pytest.mark.parametrize(
    ("options", "given", "message"),
    [
        ({"scale": 2}, 1.005, "more than 2 decimal place(s)"),
        ({"scale": 2}, "0.001", "more than 2 decimal place(s)"),
        ({"scale": 0}, "1.5", "more than 0 decimal place(s)"),
        ({"scale": 2}, "1e3", "not a decimal number"),
        ({"scale": 2}, "12,50", "not a decimal number"),
        ({"scale": 2}, "0x10", "not a decimal number"),
        ({"scale": 2}, "", "not a decimal number"),
        ({"scale": 2}, "922337203685477.59", "out of the declared range"),
        ({"scale": 2}, 1e20, "out of the declared range"),
        ({"scale": 2, "minimum": 0}, -1, "out of the declared range"),
        ({"scale": 2, "maximum": "10000.00"}, "10000.01", "out of the declared range"),
    ],
)
def test_refused_with_a_stable_code(options: dict[str, Any], given: Any, message: str) -> None:
    with pytest.raises(RejectedError) as exc:
        chain(**options).apply({"amount": given}, CTX)
    assert exc.value.code is ErrorCode.DECIMAL_INVALID
    (v,) = exc.value.violations
    assert (v.pointer, v.keyword) == ("/amount", "decimal")
    assert message in v.message
    assert not str(given) or str(given) not in v.message.replace(message, "")


def test_other_types_are_left_to_the_schema_and_mixed_failures_keep_the_general_code() -> None:
    for value in (True, None, [1], {"a": 1}):
        assert chain(scale=2).apply({"amount": value}, CTX)[0] == {"amount": value}
    mixed = NormalizerChain.build(
        [{"kind": "decimal", "field": "/amount", "scale": 2}, {"kind": "relative_date", "field": "/d"}]
    )
    with pytest.raises(RejectedError) as exc:
        mixed.apply({"amount": "1.001", "d": "someday"}, CTX)
    assert exc.value.code is ErrorCode.NORMALIZATION_FAILED
    assert {v.keyword for v in exc.value.violations} == {"decimal", "relative_date"}


@pytest.mark.parametrize(
    "decl",
    [
        {},
        {"scale": 5},
        {"scale": True},
        {"scale": "2"},
        {"scale": 2, "minimum": "abc"},
        {"scale": 2, "minimum": 10, "maximum": 1},
        {"scale": 2, "places": 2},
    ],
)
def test_declaration_errors(decl: dict[str, Any]) -> None:
    with pytest.raises(LoadError) as exc:
        NormalizerChain.build([{"kind": "decimal", "field": "/amount", **decl}])
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID
    assert exc.value.violations[0].pointer == "/normalizers/0"


def test_one_digest_for_every_spelling() -> None:
    digests = set()
    for given in (50, 50.0, "50", "50.00", " 50.0 "):
        validated = ValidatedArguments(
            value={"amount": given}, dialect="", validator="", validator_version="", format_assertion=True
        )
        n = normalize(
            validated, chain(scale=2), CTX, tenant="acme", tool_name="payments.refund", tool_version="v1"
        )
        digests.add(n.digest)
    assert len(digests) == 1


def test_policy_values_and_engine_forms() -> None:
    c = NormalizerChain.build([{"kind": "decimal", "field": "/lines/*/price", "scale": 2}])
    value, _ = c.apply({"lines": [{"price": 1}, {"price": "2.5"}]}, CTX)
    assert value == {"lines": [{"price": "1.00"}, {"price": "2.50"}]}
    policy = as_policy_values(value, c)
    assert policy == {"lines": [{"price": Decimal("1.00")}, {"price": Decimal("2.50")}]}
    assert value == {"lines": [{"price": "1.00"}, {"price": "2.50"}]}  # not modified
    assert to_cedar_value(Decimal("49.99")) == {"__extn": {"fn": "decimal", "arg": "49.9900"}}
    assert to_cedar_value(Decimal("50")) == {"__extn": {"fn": "decimal", "arg": "50.0000"}}
    assert contract_value(Decimal("49.99")) == 49.99 and contract_value(Decimal("50.00")) == 50
    with pytest.raises(_ContextError):
        to_cedar_value(Decimal("1.00001"))
    with pytest.raises(RequestError):
        contract_value(Decimal("1e30"))


REFUND = {
    "name": "payments.refund",
    "version": "v1",
    "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
    "input_schema": {
        "type": "object",
        "properties": {
            "amount": {"type": ["number", "string"]},
            "currency": {"type": "string"},
            "order_id": {"type": "string"},
        },
        "required": ["amount", "currency", "order_id"],
        "additionalProperties": False,
    },
    "side_effect_class": "modify",
    "required_capabilities": ["payments.refund"],
    "resource_template": "order:{order_id}",
    "normalizers": [{"kind": "decimal", "field": "/amount", "scale": 2}],
}
CEDAR = """
@id("small")
permit (principal, action == Action::"payments.refund", resource)
when { !context.args.amount.greaterThan(decimal("100.00")) };
@id("large")
@confirm("over 100")
permit (principal, action == Action::"payments.refund", resource)
when { context.args.amount.greaterThan(decimal("100.00")) };
@id("negative")
forbid (principal, action == Action::"payments.refund", resource)
when { context.args.amount.lessThan(decimal("0.00")) };
"""
REGO = """package callgate.authz

permit contains "small" if {
	input.capability == "payments.refund"
	input.context.args.amount <= 100
}

permit contains "large" if {
	input.capability == "payments.refund"
	input.context.args.amount > 100
}

confirm["large"] := "over 100"

forbid contains "negative" if {
	input.capability == "payments.refund"
	input.context.args.amount < 0
}
"""


@pytest.fixture(scope="module")
def refund_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy folder of the new layout: no hand-written Cedar schema, no data.json."""
    root = tmp_path_factory.mktemp("money")
    (root / "tools").mkdir()
    (root / "tools" / "payments.refund@v1.json").write_text(json.dumps(REFUND))
    (root / "cedar").mkdir()
    (root / "cedar" / "policies.cedar").write_text(CEDAR)
    (root / "rego").mkdir()
    for name in ("decision.rego", "entities.rego", "schema.rego"):
        shutil.copy(POLICIES / "rego" / name, root / "rego" / name)
    (root / "rego" / "refund.rego").write_text(REGO)
    return root


@pytest.mark.parametrize("engine", ["cedar", "rego"])
def test_amounts_compare_correctly_on_both_engines(refund_dir: Path, engine: str) -> None:
    snap = load_snapshot(refund_dir, engine)
    tool = snap.tools.get("payments.refund", "v1")
    assert tool is not None
    assert not isinstance(native_plan(tool), str)  # the compiled core runs the decimal normalizer
    core = Core("auto")
    core.prepare(snap, eager=True)

    async def decide(amount: Any) -> Effect:
        args = {"amount": amount, "currency": "EUR", "order_id": "o1"}
        validated = ValidatedArguments(
            value=args, dialect="", validator="", validator_version="", format_assertion=True
        )
        n = normalize(
            validated, tool.normalizers, CTX, tenant="acme", tool_name="payments.refund", tool_version="v1"
        )
        front = core.front(
            snap, tool, json.dumps(args).encode(), "acme", "en", CTX.reference_clock, ParseLimits()
        )
        if front is not None:  # built: the same amount, bytes and digest the engine decides on
            assert (front.code, front.canonical, front.digest) == (None, n.canonical, n.digest), amount
        result = await authorize_invocation(snap.engine, tool, n, Subject(tenant="acme", id="dana"))
        assert not result.decision.error_code, result.decision
        return result.decision.effect

    for amount, want in (
        (50, Effect.ALLOW), (50.0, Effect.ALLOW), ("50.00", Effect.ALLOW), (49.99, Effect.ALLOW),
        (100, Effect.ALLOW), ("100.00", Effect.ALLOW), ("100.01", Effect.CONFIRM), (150, Effect.CONFIRM),
        (1000000, Effect.CONFIRM), (-5, Effect.DENY), ("-0.01", Effect.DENY), (0, Effect.ALLOW),
    ):  # fmt: skip
        assert asyncio.run(decide(amount)) is want, (engine, amount)
