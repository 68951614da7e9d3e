"""Issue 15 A5: the compiled core's one-call Propose decision builds, type-checks and evaluates
only the part of the Cedar context each action's policies read (docs/NATIVE.md, "The Cedar
context"). The projection must never change a decision: on policies that read ``context`` in
every way, each generated proposal's decision (effect, reasons, policy ids, errors, shadow) is
the same three ways: the engine over cedarpy on the whole context (the reference), the compiled
core with the projection, and the compiled core without it (a snapshot prepared with
``cedar.NATIVE_CONTEXT_PROJECTION = False``).

The compiled core must be built (a missing build fails, it never skips)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.arguments.parse import ParseLimits
from callgate.base.errors import RejectedError
from callgate.base.model import Effect, Subject
from callgate.policy.engines import cedar as cedar_engine
from callgate.policy.engines.cedar import CedarEngine
from callgate.propose.authorize import authorize_invocation
from callgate.propose.core import Core, CoreKind, load_native
from tests.conftest import POLICIES, reference_front
from tests.test_native_cedar import ASCII, CONTEXT_VALUE, GRID_USERS, NUMBER, key

NATIVE = load_native()
if NATIVE is None or not hasattr(NATIVE, "CedarSnapshot"):
    pytest.fail("the compiled core (with Cedar) is not built (scripts/native build)", pytrace=False)

COUNTS: Counter[str] = Counter()
PROPS = settings(derandomize=True, max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
CLOCK = "2026-07-19T14:00:00+08:00"

# One context type (common types, resolved by the projection) for five actions whose policies
# read it differently.
SCHEMA = """
type ProjRec = { id: Long, name: String };
type ProjArgs = { table: String, n?: Long, d?: decimal, addr?: ipaddr, s?: String, flag?: Bool,
                  r?: { a?: Long, s?: String, deep?: { x?: Long, y?: String } },
                  records?: Set<ProjRec>, tags?: Set<String>, shadow_only?: String, forbid_only?: Long,
                  unread?: { u: Long, v?: String }, unread_set?: Set<{ k: String }>, unread_s?: String };
type ProjCtx = { tenant: String, tool: String, args: ProjArgs };
action "proj.many", "proj.whole", "proj.bare", "proj.narrow" in [create]
  appliesTo { principal: User, resource: Resource, context: ProjCtx };
"""
POLICIES_TEXT = """
@id("pm-permit")
permit (principal, action == Action::"proj.many", resource)
when { principal.tenant == context.tenant && context.args.table like "t*" };
@id("pm-nested-has")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has r && context.args.r has deep && context.args.r.deep has x && context.args.r.deep.x == 3 };
@id("pm-unless")
forbid (principal, action == Action::"proj.many", resource)
unless { if context.args has n then context.args.n < 100 else true };
@id("pm-est-keys")
forbid (principal, action == Action::"proj.many", resource)
when { {"Var": context.args.table, ".": "context", "has": 1, "Value": {"Var": 2}}["Var"] == "tvar" };
@id("pm-decimal")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has d && context.args.d.greaterThan(decimal("1.5")) };
@id("pm-ip")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has addr && context.args.addr.isInRange(ip("127.0.0.0/8")) };
@id("pm-ite-like")
forbid (principal, action == Action::"proj.many", resource)
when { (if context.args has s then context.args.s else "") like "*bad*" };
@id("pm-records")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has records && context.args.records.contains({id: 7, name: "seven"}) };
@id("pm-forbid-only")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has forbid_only && context.args.forbid_only == 1 };
@id("pm-shadow-only")
@shadow("trial")
forbid (principal, action == Action::"proj.many", resource)
when { context.args has shadow_only && context.args.shadow_only == "x" };
@id("pw-permit")
permit (principal, action == Action::"proj.whole", resource) when { principal.tenant == context.tenant };
@id("pw-eq")
forbid (principal, action == Action::"proj.whole", resource)
when { (if context.tenant == "acme" then context.args else context.args).table == "whole" };
@id("pw-contains")
forbid (principal, action == Action::"proj.whole", resource)
when { [context.args].contains(context.args) && context.args has n && context.args.n == 1 };
@id("pb-permit")
permit (principal, action == Action::"proj.bare", resource)
when { principal.tenant == {"Var": context}.Var.tenant };
@id("pn-permit")
permit (principal, action == Action::"proj.narrow", resource)
when { principal.tenant == context.tenant && context.args.table == "t" };
"""
TOOLS = {
    "proj.many": ["proj.many"],
    "proj.whole": ["proj.whole"],
    "proj.bare": ["proj.bare"],
    "proj.narrow": ["proj.narrow"],
    "proj.mixed": ["proj.narrow", "proj.bare", "proj.many"],
}
WANT_PROJECTIONS = {
    "proj.many": {
        "args": {
            **dict.fromkeys(["addr", "d", "forbid_only", "n", "records", "s", "shadow_only", "table"], True),
            "r": {"deep": {"x": True}},
        },
        "tenant": True,
    },
    "proj.whole": {"args": True, "tenant": True},
    "proj.bare": None,
    "proj.narrow": {"args": {"table": True}, "tenant": True},
}

_PAIRS: dict[bool, tuple[Any, Core]] = {}


def _policy_dir(tmp: Path) -> Path:
    pdir = tmp / "policies"
    if pdir.exists():
        return pdir
    shutil.copytree(POLICIES, pdir, ignore=shutil.ignore_patterns("tests", "rego"))
    base = json.loads((pdir / "tools" / "files.delete@v1.json").read_text())
    for name, caps in TOOLS.items():
        spec = dict(base)
        spec.update(name=name, input_schema={"$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object"}, normalizers=[], required_capabilities=caps,
                    resource_template="proj:{table}", side_effect_class="create")  # fmt: skip
        (pdir / "tools" / f"{name}@v1.json").write_text(json.dumps(spec))
    with open(pdir / "cedar" / "schema.cedarschema", "a") as fh:
        fh.write(SCHEMA)
    with open(pdir / "cedar" / "policies.cedar", "a") as fh:
        fh.write(POLICIES_TEXT)
    return pdir


def _pair(tmp: Path, project: bool) -> tuple[Any, Core]:
    """The snapshot (compiled Cedar, with or without the projection) and a native core on it."""
    from callgate.policy.snapshot import load_snapshot

    if project not in _PAIRS:
        pdir = _policy_dir(tmp)
        before = cedar_engine.NATIVE_CONTEXT_PROJECTION
        cedar_engine.NATIVE_CONTEXT_PROJECTION = project
        try:
            snap = load_snapshot(pdir)
        finally:
            cedar_engine.NATIVE_CONTEXT_PROJECTION = before
        core = Core("native")
        core.prepare(snap, eager=True)
        assert Core.cedar_core(snap) is CoreKind.NATIVE
        _PAIRS[project] = (snap, core)
    return _PAIRS[project]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Core, Any, Core, CedarEngine]:
    tmp = tmp_path_factory.mktemp("projection")
    snap, core = _pair(tmp, True)
    plain_snap, plain_core = _pair(tmp, False)
    return snap, core, plain_snap, plain_core, CedarEngine(snap.engine._p)


def test_projections_per_action(engines: tuple[Any, ...]) -> None:
    """What each action keeps: chains and ``has`` paths, the shadow-only and forbid-only
    attributes, ``context.args`` whole where compared whole, nothing projected for a bare
    ``context``; the example policies' actions too. Without the switch nothing is projected."""
    snap, _, plain_snap, _, _ = engines
    native = snap.engine._p.native
    for action, want in WANT_PROJECTIONS.items():
        got = native.projection(action)
        assert (json.loads(got) if got is not None else None) == want, action
    assert json.loads(native.projection("weather.read")) == {"tenant": True}
    assert json.loads(native.projection("files.delete")) == {  # the example's label and meter too
        "args": {"path": True},
        "tenant": True,
        "session": {"labels": True},
        "usage": {"deletes": {"1h": {"after": True}}},
    }
    assert plain_snap.engine._p.native.projected_actions() == 0
    assert native.projected_actions() >= 6


def decide_three_ways(engines: tuple[Any, ...], tool_name: str, args: Any, user: tuple[str, str]) -> str:
    """The one-call decision with and without the projection against the reference; the outcome."""
    snap, core, plain_snap, plain_core, ref = engines
    tenant, principal = user
    tool = snap.tools.get(tool_name, "v1")
    raw = json.dumps(args, ensure_ascii=False).encode()
    answer = core.front(snap, tool, raw, tenant, "en", CLOCK, ParseLimits(), principal)
    plain = plain_core.front(plain_snap, plain_snap.tools.get(tool_name, "v1"), raw, tenant, "en", CLOCK,
                             ParseLimits(), principal)  # fmt: skip
    assert answer is not None and plain is not None
    assert (answer.code, answer.resource, answer.authz) == (plain.code, plain.resource, plain.authz), args
    if answer.code is not None:
        return "refused"
    try:
        norm = reference_front(tool, raw, CLOCK, tenant)
    except RejectedError:
        return "refused"
    want = asyncio.run(authorize_invocation(ref, tool, norm, Subject(tenant, principal)))
    if answer.authz is None:
        assert want.decision.effect is Effect.DENY, (args, want.decision)
        return "authz-defer"
    got = snap.engine.native_decision(answer.authz)
    assert answer.resource == want.resource
    assert key(got) == key(want.decision), (tool_name, args, got, want.decision)
    return got.effect.value + (":" + got.error_code if got.error_code else "")


SOME = st.one_of(NUMBER, st.none(), st.booleans(), ASCII)
RECORD = st.fixed_dictionaries(
    {"id": st.one_of(st.integers(0, 9), st.sampled_from([7, 7.0, "7"])),
     "name": st.sampled_from(["seven", "n1", 7])},
    optional={"ok": st.booleans(), "extra": st.one_of(st.none(), NUMBER), "__x": NUMBER},
)  # fmt: skip
PROJ_ARGS = st.fixed_dictionaries(
    {"table": st.one_of(st.sampled_from(["t", "tvar", "whole", "u", "t2"]), st.sampled_from([5, None, True]))},
    optional={
        "n": st.one_of(st.integers(90, 110), SOME), "d": st.one_of(st.sampled_from([1.25, 2.5, 1.5]), SOME),
        "addr": st.sampled_from(["127.0.0.1", "10.0.0.1", "::1", "nope", 3]),
        "s": st.one_of(st.sampled_from(["a bad b", "good"]), SOME), "flag": SOME,
        "r": st.one_of(st.fixed_dictionaries({}, optional={
            "a": SOME, "s": SOME, "deep": st.one_of(st.fixed_dictionaries({}, optional={
                "x": st.one_of(st.just(3), SOME), "y": SOME, "z": NUMBER}), SOME)}), SOME),
        "records": st.one_of(st.lists(RECORD, max_size=4), st.lists(st.one_of(RECORD, SOME), max_size=2), SOME),
        "tags": st.one_of(st.lists(st.one_of(ASCII, st.none()), max_size=3), SOME),
        "shadow_only": st.one_of(st.just("x"), SOME), "forbid_only": st.one_of(st.just(1), SOME),
        "unread": st.one_of(st.fixed_dictionaries({"u": st.one_of(st.just(1), SOME)},
                                                  optional={"v": SOME, "w": SOME}), SOME),
        "unread_set": st.one_of(st.lists(st.fixed_dictionaries({"k": st.one_of(ASCII, NUMBER)}), max_size=3), SOME),
        "unread_s": st.one_of(ASCII, SOME, st.just(1e14 + 0.5)), "undeclared": CONTEXT_VALUE,
        "__entity": ASCII,
    },
)  # fmt: skip

# well-typed arguments (the common case: the projected context decides)
LONG = st.integers(-(2**53), 2**53)
WELL_TYPED = st.fixed_dictionaries(
    {"table": st.sampled_from(["t", "tvar", "whole", "u", "t2"])},
    optional={
        "n": st.integers(90, 110), "d": st.sampled_from([1.25, 2.5, 1.5, 3]),
        "addr": st.sampled_from(["127.0.0.1", "10.0.0.1"]), "s": st.sampled_from(["a bad b", "good"]),
        "flag": st.booleans(), "r": st.fixed_dictionaries({}, optional={
            "a": LONG, "s": ASCII, "deep": st.fixed_dictionaries({}, optional={"x": st.integers(2, 4), "y": ASCII})}),
        "records": st.lists(st.fixed_dictionaries({"id": st.integers(5, 8), "name": st.sampled_from(["seven", "n"])}),
                            max_size=5),
        "tags": st.lists(st.one_of(ASCII, st.none()), max_size=3), "shadow_only": st.sampled_from(["x", "y"]),
        "forbid_only": st.integers(0, 2),
        "unread": st.fixed_dictionaries({"u": LONG}, optional={"v": st.one_of(ASCII, st.none())}),
        "unread_set": st.lists(st.fixed_dictionaries({"k": ASCII}), max_size=3), "unread_s": ASCII,
    },
)  # fmt: skip


@settings(PROPS)
@given(
    tool=st.sampled_from(sorted(TOOLS)),
    args=st.one_of(WELL_TYPED, PROJ_ARGS),
    user=st.sampled_from(GRID_USERS[:3] + GRID_USERS[-1:]),
)
def test_generated_proposals_same_three_ways(
    engines: tuple[Any, ...], tool: str, args: dict[str, Any], user: tuple[str, str]
) -> None:
    COUNTS[tool + " " + decide_three_ways(engines, tool, args, user)] += 1


def test_counts_reported(engines: tuple[Any, ...]) -> None:
    projected = engines[0].engine._p.native.projected_decisions()
    print(f"projection parity: {dict(sorted(COUNTS.items()))}; {projected} decisions on a projected context")
    assert engines[2].engine._p.native.projected_decisions() == 0
    if sum(COUNTS.values()) >= 1000:  # the whole property ran: every kind of answer was met
        outcomes = {k.split(" ", 1)[1] for k in COUNTS}
        assert {"allow", "deny", "deny:policy_evaluation_error", "authz-defer"} <= outcomes, COUNTS
        assert projected >= 300


CASES: list[tuple[str, dict[str, Any], str]] = [
    # (tool, args, expected outcome): every policy of proj.many decides once
    ("proj.many", {"table": "t"}, "allow"),
    ("proj.many", {"table": "u"}, "deny"),
    ("proj.many", {"table": "t", "r": {"deep": {"x": 3}}}, "deny"),
    ("proj.many", {"table": "t", "n": 101}, "deny"),
    ("proj.many", {"table": "tvar"}, "deny"),
    ("proj.many", {"table": "t", "d": 2.5}, "deny"),
    ("proj.many", {"table": "t", "addr": "127.0.0.1"}, "deny"),
    ("proj.many", {"table": "t", "s": "a bad b"}, "deny"),
    ("proj.many", {"table": "t", "records": [{"id": 7, "name": "seven"}]}, "deny"),
    ("proj.many", {"table": "t", "forbid_only": 1}, "deny"),
    ("proj.many", {"table": "t", "shadow_only": "x"}, "allow"),
    # a kept attribute of the wrong Cedar type: the same deny as without the projection
    ("proj.many", {"table": 5}, "deny:policy_evaluation_error"),
    ("proj.many", {"table": "t", "n": "101"}, "deny:policy_evaluation_error"),
    ("proj.many", {"table": "t", "r": {"deep": {"x": "3"}}}, "deny:policy_evaluation_error"),
    ("proj.many", {"table": "t", "records": [{"id": "7", "name": "seven"}]}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": 5}, "deny:policy_evaluation_error"),
    # a left-out attribute that does not conform: the whole context decides (the same deny)
    ("proj.narrow", {"table": "t", "unread": {"v": "no u"}}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": "t", "unread_s": 3}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": "t", "undeclared": 1}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": "t", "records": [{"id": 1}]}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": "t", "addr": "nope"}, "deny:policy_evaluation_error"),
    ("proj.narrow", {"table": "t", "unread_s": 1e14 + 0.5}, "authz-defer"),
    ("proj.narrow", {"table": "t", "unread": {"u": 1, "__x": 1}}, "authz-defer"),
    ("proj.narrow", {"table": "t", "addr": "10.0.0.1", "unread": {"u": 1}, "records": []}, "allow"),
    ("proj.whole", {"table": "whole"}, "deny"),
    ("proj.whole", {"table": "t", "n": 1}, "deny"),
    ("proj.whole", {"table": "t", "n": 2}, "allow"),
    ("proj.bare", {"table": "t", "unread_s": 3}, "deny:policy_evaluation_error"),
    ("proj.mixed", {"table": "t"}, "allow"),
    ("proj.mixed", {"table": "t", "n": 101}, "deny"),
]


@pytest.mark.parametrize(("tool", "args", "want"), CASES)
def test_each_way_of_reading_context(
    engines: tuple[Any, ...], tool: str, args: dict[str, Any], want: str
) -> None:
    assert decide_three_ways(engines, tool, args, ("acme", "alice")) == want


def test_records_put_drops_the_records() -> None:
    """bench/bench_scale.py's ``records.put`` (60 KB of records in the arguments): the policy
    reads ``context.tenant`` and ``context.args.table``; the records are not in the context."""
    import sys
    import tempfile

    from callgate.policy.snapshot import load_snapshot
    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_scale
    finally:
        sys.path.remove(str(ROOT / "bench"))
    tmp = Path(tempfile.mkdtemp())
    try:
        snap = load_snapshot(bench_scale.policy_dir(tmp, records=True))
        native = snap.engine._p.native
        assert json.loads(native.projection("records.put")) == {"args": {"table": True}, "tenant": True}
        core = Core("native")
        core.prepare(snap, eager=True)
        tool = snap.tools.get("records.put", "v1")
        recs = [{"id": i, "name": f"n{i:05d}", "ok": i % 2 == 0} for i in range(1390)]
        raw = json.dumps({"table": "t", "records": recs}).encode()
        limits = ParseLimits(max_bytes=1 << 20)
        answer = core.front(snap, tool, raw, "acme", "en", CLOCK, limits, "bob")
        assert answer is not None and answer.code is None and answer.authz is not None
        assert native.projected_decisions() == 1
        got = snap.engine.native_decision(answer.authz)
        norm = reference_front(tool, raw, CLOCK, "acme", limits=limits)
        ref = CedarEngine(snap.engine._p)
        want = asyncio.run(authorize_invocation(ref, tool, norm, Subject("acme", "bob")))
        assert key(got) == key(want.decision) and got.effect is Effect.ALLOW
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
