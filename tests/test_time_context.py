"""Issue 30 item 1: time in the context, one fixture on every engine.

tests/data/time_context/ is a policy folder (two ToolSpecs, ``principals.json``, Cedar rules and
their Rego twin) and ``cases.json`` a table of proposals (the reference clock, the arguments) with
the expected decision. Every case is decided by Cedar on cedarpy, Cedar in the compiled core (the
engine's JSON path, and the one-call decision of the core for the tool without time arguments),
embedded Rego (regopy) and a real OPA server the engine uploads the folder to: all must give the
expected effect and policy ids. A date-time finer than a millisecond or a duration in months is a
validation error (``schema_violation``) before any engine is asked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from callgate.arguments.parse import ParseLimits
from callgate.base.errors import ErrorCode, RejectedError
from callgate.base.model import AuthzRequest, Subject
from callgate.policy.declare import cedar_time_plans, declared
from callgate.policy.engines.base import Engine
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.engines.rego import RegoEngine
from callgate.policy.engines.rego_contract import build_input, load_rego_dir
from callgate.policy.timevalues import Instant, Span, TimeKind, TimeValueError, instant_of, span_of
from callgate.propose.authorize import policy_context
from callgate.propose.steps import check_times
from tests import policy_tables
from tests.conftest import POLICIES
from tests.opa_fixture import OpaServer, opa_factory  # noqa: F401 - the fixture
from tests.policy_tables import (
    cases,
    check_and_policy_test,
    copy_folder,
    native_snapshot,
    normalized,
    opa_decisions,
    python_snapshot,
    summary,
    want,
)
from tests.policy_tables import decide as decide_case

FIXTURE = Path(__file__).resolve().parent / "data" / "time_context"
CASES = cases(FIXTURE)
DECIDED = [c for c in CASES if "effect" in c["expect"]]
LIMITS = ParseLimits()
loop = policy_tables.loop


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_folder(tmp_path_factory, FIXTURE)


def decide(
    engine: Engine, snap: Any, case: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> dict[str, Any]:
    return decide_case(engine, snap, case, loop, check_times)


def test_the_table_covers_every_effect_and_refusal() -> None:
    effects = {c["expect"].get("effect", c["expect"].get("rejected")) for c in CASES}
    assert effects == {"allow", "deny", "confirm", "schema_violation"}
    assert len(DECIDED) >= 15


def test_generated_schema_declares_time(folder: Path) -> None:
    """``context.now`` and the time arguments are declared: Cedar ``datetime``/``duration``,
    Rego's context gains ``now`` and ``millis`` (the arguments stay strings there)."""
    decl = declared(folder)
    schema = decl.cedar_schema(None)
    assert "now: datetime" in schema
    assert "length: duration" in schema and "repeat_until: datetime" in schema and "start: datetime" in schema
    plans = cedar_time_plans(schema)
    assert plans["events.schedule"].now and plans["events.schedule"].args == {
        "length",
        "repeat_until",
        "start",
    }
    assert plans["reports.fetch"].now and not plans["reports.fetch"].args
    rego = decl.rego_data({}, "data.json")["callgate"]["schema"]
    assert rego["context"] == {"tenant": "String", "tool": "String", "now": "String", "millis": "Record"}
    assert rego["actions"]["events.schedule"]["args"]["start"] == {"type": "String"}


@pytest.mark.parametrize("case", DECIDED, ids=[c["name"] for c in DECIDED])
def test_cedarpy(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    snap = python_snapshot(folder)
    engine = CedarEngine(load_cedar_dir(folder / "cedar", cores=SnapshotCores.PYTHON))
    assert decide(engine, snap, case, loop) == want(case)


@pytest.mark.parametrize("case", DECIDED, ids=[c["name"] for c in DECIDED])
def test_compiled_core(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """The compiled core: its one-call decision (tools without time arguments: the context it
    builds itself carries ``now``), else the engine's JSON path in the core."""
    snap, core = native_snapshot(folder)
    tool, _ = normalized(snap, case)
    raw = json.dumps(case["args"]).encode()
    principal = case["principal"]
    answer = core.front(snap, tool, raw, principal["tenant"], "en", case["clock"], LIMITS, principal["id"])
    assert answer is not None and answer.code is None, case["name"]
    if tool.times:
        assert answer.authz is None  # a time argument: the engine decides (a Cedar datetime)
        got = decide(snap.engine, snap, case, loop)
    else:
        assert answer.authz is not None, "the one-call decision runs for a tool without time arguments"
        got = summary(snap.engine.native_decision(answer.authz))
    assert got == want(case)


@pytest.mark.parametrize("case", DECIDED, ids=[c["name"] for c in DECIDED])
def test_embedded_rego(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    snap = python_snapshot(folder)
    assert decide(RegoEngine.from_dir(folder / "rego"), snap, case, loop) == want(case)


@pytest.mark.opa
def test_opa(
    folder: Path,
    opa_factory: Callable[..., OpaServer],  # noqa: F811
    loop: asyncio.AbstractEventLoop,
) -> None:
    got = opa_decisions(folder, opa_factory, loop, DECIDED, check_times)
    assert got == {c["name"]: want(c) for c in DECIDED}


REFUSED = [c for c in CASES if "rejected" in c["expect"]]


@pytest.mark.parametrize("case", REFUSED, ids=[c["name"] for c in REFUSED])
def test_no_exact_time_value_is_a_validation_error(folder: Path, case: dict[str, Any]) -> None:
    """Fail closed: the JSON Schema format accepts these, the policies could not compare them
    exactly; the proposal is rejected before authorization, on both cores."""
    snap = python_snapshot(folder)
    tool, norm = normalized(snap, case)
    with pytest.raises(RejectedError) as exc:
        check_times(tool, norm.value)
    assert exc.value.code is ErrorCode.SCHEMA_VIOLATION
    assert exc.value.violations[0].pointer in ("/start", "/length")
    _, core = native_snapshot(folder)
    raw = json.dumps(case["args"]).encode()
    answer = core.front(snap, tool, raw, "acme", "en", case["clock"], LIMITS, "ana")
    assert answer is not None and answer.authz is None  # the core never decides it


def test_rego_input_carries_text_and_millis(folder: Path) -> None:
    snap = python_snapshot(folder)
    case = DECIDED[0]
    tool, norm = normalized(snap, case)
    ctx = policy_context(tool, norm)
    req = AuthzRequest(Subject("acme", "ana"), "events.schedule", "calendar:team", ctx)
    doc = build_input(req, (), load_rego_dir(folder / "rego").context_names)
    c = doc["context"]
    assert c["now"] == "2026-07-19T14:00:00+08:00" and c["args"]["start"] == "2026-07-20T09:00:00+08:00"
    assert c["millis"] == {
        "now": 1784440800000,
        "args": {"start": 1784509200000, "length": 3600000, "repeat_until": 1785542400000},
    }
    # a data.json that declares the legacy context gets the legacy input (no now, no millis)
    legacy = build_input(req, (), frozenset({"tenant", "tool", "args"}))
    assert set(legacy["context"]) == {"tenant", "tool", "args"}


def test_example_policies_keep_their_strings() -> None:
    """The example folder's hand-written schema says ``start: String``: its policies still get
    the string (the legacy form), and ``callgate check`` accepts it."""
    from callgate.policy.declare import check_tools
    from callgate.policy.engines.registry import policy_folders
    from callgate.policy.timevalues import NO_PLAN, cedar_time_context

    assert not [p for p in check_tools(POLICIES, policy_folders()) if "start" in p.message]
    plans = cedar_time_plans((POLICIES / "cedar" / "schema.cedarschema").read_text())
    ctx = {"tool": "t", "args": {"start": Instant("2026-07-20T09:00:00+08:00", 0)}, "now": Instant("x", 0)}
    out = cedar_time_context(ctx, plans.get("calendar.create", NO_PLAN))
    assert out == {"tool": "t", "args": {"start": "2026-07-20T09:00:00+08:00"}}


@pytest.mark.parametrize(
    ("text", "kind", "ms"),
    [
        ("1970-01-01", TimeKind.DATE, 0),
        ("1969-12-31T23:59:59.999Z", TimeKind.DATE_TIME, -1),
        ("2026-07-19T14:00:00.5+08:00", TimeKind.DATE_TIME, 1784440800500),
        ("0001-01-01T00:00:00-23:59", TimeKind.DATE_TIME, -62135510460000),
    ],
)
def test_instants(text: str, kind: TimeKind, ms: int) -> None:
    assert instant_of(text, kind) == Instant(text, ms)


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30",
        "2026-07-19T14:00:60Z",
        "2026-07-19T14:00:00.0000001Z",
        "2026-07-19T14:00:00",
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC: no Cedar datetime
        "2026-07-19T14:00:00+05:99",
    ],
)
def test_instants_refused(text: str) -> None:
    with pytest.raises(TimeValueError):
        instant_of(text, TimeKind.DATE if len(text) == 10 else TimeKind.DATE_TIME)


def test_spans() -> None:
    assert span_of("P1W") == Span("P1W", 604800000)
    assert span_of("P1DT2H3M4S") == Span("P1DT2H3M4S", 93784000)
    for bad in ("P1M", "P1Y", "P", "PT", "P1DT", "PT1.5S", "-P1D"):
        with pytest.raises(TimeValueError):
            span_of(bad)


def test_through_a_real_sidecar(folder: Path) -> None:
    """gRPC end to end (the sidecar's own core, compiled when built): a proposal within the window
    is allowed, the table's sub-millisecond start is a ``schema_violation`` before any decision,
    and ``Authorize`` decides on the sidecar's clock (the record's ``at``), never on a ``now`` the
    caller sends."""
    from google.protobuf import struct_pb2

    from callgate.gen.v1 import callgate_pb2 as pb
    from tests.conftest import SPEC_CLOCK, start_sidecar, stop_sidecar
    from tests.test_gate_cases import propose_recorded

    by_name = {c["name"]: c for c in CASES}
    sc, tmp = start_sidecar(folder)
    try:
        sid = sc.open_session(subject="ana")
        sc.list_tools(sid)
        ok = sc.propose(sid, "events.schedule@v1", by_name["an hour tomorrow"]["args"], idempotency_key="k1")
        assert pb.State.Name(ok.state) == "PREPARED" and ok.decision.effect == pb.ALLOW
        long = by_name["5 hours needs confirmation"]["args"]
        confirm = sc.propose(sid, "events.schedule@v1", long, idempotency_key="k2", proposal_id="call_2")
        assert confirm.decision.effect == pb.CONFIRM
        bad = by_name["a digit below the millisecond is refused"]["args"]
        refused, _ = propose_recorded(
            sc, sid, "events.schedule@v1", bad, idempotency_key="k3", proposal_id="c3"
        )
        assert pb.State.Name(refused.state) == "VALIDATION_REJECTED"
        assert refused.rejection.code == "schema_violation"
        assert [v.pointer for v in refused.rejection.violations] == ["/start"]

        def authorize(context: dict[str, Any], capability: str = "reports.fetch") -> Any:
            ctx = struct_pb2.Struct()
            ctx.update(context)
            return sc.authorizer.Authorize(
                pb.AuthorizeRequest(
                    subject=pb.Subject(tenant="acme", id="ana"), capability=capability,
                    resource="report:q3", context=ctx,
                )
            )  # fmt: skip

        # a caller's context naming the ToolSpec gets its time arguments as Propose does
        event = {"tool": "events.schedule@v1", "args": by_name["an hour tomorrow"]["args"]}
        assert authorize(event, "events.schedule").decision.effect == pb.ALLOW
        far = {"tool": "events.schedule@v1", "args": by_name["40 days ahead"]["args"]}
        assert authorize(far, "events.schedule").decision.effect == pb.DENY
        report = {"tool": "reports.fetch@v1", "args": {"name": "q3"}}
        assert authorize(report).decision.effect == pb.ALLOW  # 2026: before 2027
        sc.clock.advance((datetime(2027, 1, 1, tzinfo=UTC) - SPEC_CLOCK).total_seconds())
        late = authorize({**report, "now": "2026-01-01T00:00:00Z"})  # the caller's now is not used
        assert late.decision.effect == pb.DENY
        rec = sc.call(sc.sidecar.components.store.get_decision(late.decision_id))
        assert rec.at.startswith("2027-01-01T00:00:00") and rec.context_keys == ("args", "now", "tool")
    finally:
        stop_sidecar(sc, tmp)


@pytest.mark.parametrize("engine", ["cedar", "rego"])
def test_check_and_policy_tests_pass(folder: Path, tmp_path: Path, engine: str) -> None:
    """``callgate check`` on the folder: the derived samples (``context.now`` the check's clock)
    stay in the contract, and the policy tests in ``tests/`` state their ``context.now`` and
    time arguments as production passes them."""
    out = check_and_policy_test(folder, tmp_path, engine)
    assert "4 passed" in out, out
