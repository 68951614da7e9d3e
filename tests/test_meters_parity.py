"""Issue 30: one usage fixture decided identically by Cedar (cedarpy and the compiled core), embedded
Rego (regopy) and a real OPA server (tests/data/meters: the Cedar rules and their Rego twin).

The usage values are given (``context.usage``, as Propose builds it from the reserved meters:
tests/test_meters.py covers the reservations); every engine must give the expected effect and
policy ids, at and around each threshold, with decimal totals exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from callgate.base.model import Decision, Subject
from callgate.policy.engines.base import Engine
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.engines.opa import OpaEngine
from callgate.policy.engines.rego import RegoEngine
from callgate.policy.snapshot import load_snapshot
from callgate.propose.authorize import authorize_invocation
from callgate.propose.core import Core
from tests.conftest import reference_front
from tests.opa_fixture import OpaServer, opa_factory  # noqa: F401 - the fixture
from tests.test_meters import meter_folder

CLOCK = "2026-07-19T14:00:00+08:00"


def sends(before: int) -> dict[str, Any]:
    return {"sends": {"1h": {"before": before, "after": before + 1}, "session": {"before": 0, "after": 1}}}


def refunded(before: str, amount: str) -> dict[str, Any]:
    b = Decimal(before)
    return {"refunded": {"24h": {"before": b, "after": b + Decimal(amount)}}}


def deletes(before: int) -> dict[str, Any]:
    return {"deletes": {"24h": {"before": before, "after": before + 1}}}


MAIL = ("mail.send@v1", {"to": "a@example.com"})
DELETE = ("records.delete@v1", {"id": "r1"})
REFUND = ("payments.refund@v1", {"account": "A1", "amount": "0.01"})
CASES: list[tuple[str, tuple[str, dict[str, Any]], dict[str, Any], str, list[str]]] = [
    ("first send", MAIL, sends(0), "allow", ["mail-5-per-hour"]),
    ("send after private", MAIL, {**sends(0), "labels": ["private"]}, "confirm", ["mail-after-private"]),
    (
        "send after other labels",
        MAIL,
        {**sends(0), "labels": ["pii", "untrusted"]},
        "allow",
        ["mail-5-per-hour"],
    ),
    ("sixth send after private", MAIL, {**sends(5), "labels": ["private"]}, "deny", []),
    (
        "private read",
        ("docs.read@v1", {"name": "plan"}),
        {"labels": ["private"]},
        "allow",
        ["docs-read-own-tenant"],
    ),
    ("fifth send", MAIL, sends(4), "allow", ["mail-5-per-hour"]),
    ("sixth send", MAIL, sends(5), "deny", []),
    ("refund to 100.00", REFUND, refunded("99.99", "0.01"), "allow", ["refund-within-total"]),
    ("refund to 100.01", REFUND, refunded("100.00", "0.01"), "confirm", ["refund-confirm-large"]),
    ("refund to 500.00", REFUND, refunded("499.99", "0.01"), "confirm", ["refund-confirm-large"]),
    ("refund to 500.01", REFUND, refunded("500.00", "0.01"), "deny", []),
    ("refund of 0.0001 over", REFUND, refunded("100.00", "0.0001"), "confirm", ["refund-confirm-large"]),
    ("third delete of the day", DELETE, deletes(2), "allow", ["delete-3-a-day"]),
    ("fourth delete of the day", DELETE, deletes(3), "confirm", ["delete-confirm-beyond-3"]),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return meter_folder(tmp_path_factory, "meters-parity")


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def decide(engine: Engine, snap: Any, case: Any, loop: asyncio.AbstractEventLoop) -> tuple[str, list[str]]:
    _, (key, args), usage, _, _ = case
    labels: list[str] = []
    if usage is not None and "labels" in usage:
        usage = dict(usage)
        labels = usage.pop("labels")
        usage = usage or None
    name, version = key.split("@")
    tool = snap.tools.get(name, version)
    norm = reference_front(tool, json.dumps(args).encode(), CLOCK, "acme")
    result = loop.run_until_complete(
        authorize_invocation(engine, tool, norm, Subject("acme", "ana"), usage, labels)
    )
    d: Decision = result.decision
    assert not d.error_code, (case[0], d)
    return d.effect.value, sorted(d.policy_ids)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cedarpy(folder: Path, case: Any, loop: asyncio.AbstractEventLoop) -> None:
    engine = CedarEngine(load_cedar_dir(folder / "cedar", cores=SnapshotCores.PYTHON))
    assert decide(engine, load_snapshot(folder), case, loop) == (case[3], case[4])


def test_compiled_core(folder: Path, loop: asyncio.AbstractEventLoop) -> None:
    snap = load_snapshot(folder)
    core = Core("native")
    core.prepare(snap, eager=True)
    assert core.cedar_core(snap) is not None
    got = {c[0]: decide(snap.engine, snap, c, loop) for c in CASES}
    assert got == {c[0]: (c[3], c[4]) for c in CASES}


def test_compiled_core_in_one_call(folder: Path) -> None:
    """The compiled core's one-call decision after the reservation (``Core.decide_metered``:
    usage and labels as context members, no JSON context built in Python) decides every integer
    case as the reference; a decimal sum is left to the engine (None)."""
    snap = load_snapshot(folder)
    core = Core("native")
    core.prepare(snap, eager=True)
    decider = snap.engine.compiled
    assert decider is not None
    got, want, skipped = {}, {}, 0
    for name, (key, args), usage, effect, ids in CASES:
        tool = snap.tools.get(*key.split("@"))
        norm = reference_front(tool, json.dumps(args).encode(), CLOCK, "acme")
        meters = {m: ws for m, ws in usage.items() if m != "labels"}
        members: dict[str, Any] = {"session": {"labels": list(usage.get("labels", []))}}
        if meters:
            members["usage"] = meters
        answer = core.decide_metered(
            snap, tool, norm.canonical, "acme", "ana", norm.context.reference_clock, members
        )
        if any(isinstance(v, Decimal) for ws in meters.values() for ba in ws.values() for v in ba.values()):
            assert answer is None, name  # the engine's JSON path writes decimal sums
            skipped += 1
            continue
        assert answer is not None, name
        d = decider.decide_answers(answer[1])
        got[name], want[name] = (d.effect.value, sorted(d.policy_ids)), (effect, ids)
    assert got == want and len(got) == len(CASES) - skipped and len(got) >= 7 and skipped


def test_compiled_core_leaves_other_values_to_the_engine(folder: Path) -> None:
    """``context.usage`` reaches the compiled core as Python values (no JSON text): anything but
    dicts, lists, strings and exact integers that fit i64 (a bool, a float, an integer past i64,
    a non-string key) is answered None, so the engine decides (fail closed to the reference)."""
    snap = load_snapshot(folder)
    core = Core("native")
    core.prepare(snap, eager=True)
    name, (key, args), usage, _, _ = next(c for c in CASES if c[2] and "labels" not in c[2])
    tool = snap.tools.get(*key.split("@"))
    norm = reference_front(tool, json.dumps(args).encode(), CLOCK, "acme")
    meter, windows = next(iter(usage.items()))
    window = next(iter(windows))

    def with_before(value: Any) -> Any:
        members = {
            "usage": {**usage, meter: {**windows, window: {**windows[window], "before": value}}},
            "session": {"labels": []},
        }
        return core.decide_metered(
            snap, tool, norm.canonical, "acme", "ana", norm.context.reference_clock, members
        )

    assert with_before(windows[window]["before"]) is not None, name  # the case itself is decided
    for odd in (True, 1.0, 2**70, Decimal(1), None):
        assert with_before(odd) is None, odd
    assert core.decide_metered(
        snap, tool, norm.canonical, "acme", "ana", norm.context.reference_clock,
        {"usage": {1: {}}, "session": {"labels": []}},
    ) is None  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_embedded_rego(folder: Path, case: Any, loop: asyncio.AbstractEventLoop) -> None:
    engine = RegoEngine.from_dir(folder / "rego")
    assert decide(engine, load_snapshot(folder), case, loop) == (case[3], case[4])


@pytest.mark.opa
def test_opa(
    folder: Path,
    opa_factory: Callable[..., OpaServer],  # noqa: F811
    loop: asyncio.AbstractEventLoop,
) -> None:
    server = opa_factory(None)
    engine = OpaEngine.from_dir(folder / "rego", url=server.url, timeout=5.0)
    snap = load_snapshot(folder)
    try:
        loop.run_until_complete(engine.load_policies())
        ok, why = loop.run_until_complete(engine.readiness())
        assert ok, why
        got = {c[0]: decide(engine, snap, c, loop) for c in CASES}
    finally:
        loop.run_until_complete(engine.close())
    assert got == {c[0]: (c[3], c[4]) for c in CASES}


def test_a_tool_without_meters_gets_no_usage_and_rego_still_conforms(
    folder: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """``context.usage`` is optional in schema.rego: a request without it conforms as before."""
    engine = RegoEngine.from_dir(folder / "rego")
    snap = load_snapshot(folder)
    case = ("no usage", MAIL, None, "", [])
    effect, _ = decide(engine, snap, case, loop)
    assert effect == "deny"  # the policy needs usage: undefined is no permit (fail closed)
