"""Issue 15 B7 (Cedar): the compiled core's Cedar (``callgate._native.CedarSnapshot``, the
``cedar-policy`` crate) decides exactly as the Python engine over cedarpy, the reference.

Both engines serve the same loaded snapshot (the same slices and entity index), so what is
compared is the decision itself: the effect, the reasons (code, policy id, message) in order,
the error code, the shadow effect and its policies. Cedar reports errors as a list in its own
evaluation order, so the reasons of an error deny are compared as a multiset.

The compiled core must be built (a missing build fails, it never skips)."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.base.model import AuthzRequest, Decision, Effect, Subject
from callgate.policy.engines import cedar as cedar_engine
from callgate.policy.engines.cedar import CedarEngine, CedarPolicies, load_cedar_dir
from callgate.propose.core import Core, CoreKind, load_native
from tests.conftest import POLICIES, reference_front
from tests.test_cedar_slices import ARGS, ENTITIES_EXTRA, POLICIES_EXTRA, SCHEMA_EXTRA

NATIVE = load_native()
if NATIVE is None or not hasattr(NATIVE, "CedarSnapshot"):
    # Never a skip: scripts/test builds the core (scripts/bootstrap -> scripts/native); a missing
    # build is a failure that says how to get it, not a parity check that silently did not run.
    pytest.fail(
        "the compiled core (with Cedar) is not built (scripts/native build); needs a Rust toolchain (rustup)",
        pytrace=False,
    )

COUNTS: Counter[str] = Counter()
PROPS = settings(derandomize=True, max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

# a permit with @confirm next to a plain permit, and a forbid erroring (Long overflow) on one title
POLICIES_MORE = """
@id("confirm-lyon")
@confirm("Lyon needs a human")
permit (principal, action == Action::"weather.write", resource)
when { resource.name == "Lyon" && context.tenant == "acme" };

@id("forbid-overflow-on-err")
forbid (principal, action == Action::"calendar.create", resource)
when { context.args.title == "err" && context.args.duration_minutes * 9223372036854775807 > 0 };
"""


@pytest.fixture(scope="module")
def cedar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("native-cedar") / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    schema = (
        (d / "schema.cedarschema").read_text().replace("entity User in [Role]", "entity User in [Role, Team]")
    )
    (d / "schema.cedarschema").write_text(schema + SCHEMA_EXTRA)
    text = (d / "policies.cedar").read_text() + POLICIES_EXTRA + POLICIES_MORE
    (d / "policies.cedar").write_text(text)
    ents = json.loads((d / "entities.json").read_text()) + ENTITIES_EXTRA
    (d / "entities.json").write_text(json.dumps(ents))
    return d


def engines(p: CedarPolicies) -> tuple[CedarEngine, CedarEngine]:
    assert p.native is not None, "the compiled core did not take the snapshot"
    ref, nat = CedarEngine(p), CedarEngine(p)
    assert not ref.native
    assert nat.use_native(True)
    return ref, nat


def key(d: Decision) -> tuple[Any, ...]:
    reasons: Any = tuple((r.code, r.policy_id, r.message) for r in d.reasons)
    if d.error_code:
        reasons = sorted(reasons)
    return (d.effect, d.error_code, reasons, d.engine, d.shadow_effect, d.shadow_policy_ids)


def check(ref: CedarEngine, nat: CedarEngine, req: AuthzRequest) -> Decision:
    (a,) = ref.authorize_batch_sync([req])
    (b,) = nat.authorize_batch_sync([req])
    assert key(b) == key(a), (req, a, b)
    COUNTS[a.effect.value + (":" + a.error_code if a.error_code else "")] += 1
    return a


GRID_USERS = [("acme", "alice"), ("acme", "bob"), ("acme", "carol"), ("acme", "dave"), ("evil", "eve"), ("other", "zed")]  # fmt: skip
GRID_ACTIONS = ["weather.read", "weather.write", "calendar.create", "files.delete", "no.such.action"]
GRID_RESOURCES = ["weather:Paris", "weather:Lyon", "x:blocked", "calendar:primary"]


@pytest.mark.parametrize("shadow", [(), ("no-blocked", "carol-tenant")])
def test_grid_same_decisions(cedar_dir: Path, shadow: tuple[str, ...]) -> None:
    """tests/test_cedar_slices.py's 120-request grid, with and without shadow policies."""
    ref, nat = engines(load_cedar_dir(cedar_dir, shadow=shadow))
    effects: Counter[str] = Counter()
    for (tenant, user), action, resource in itertools.product(GRID_USERS, GRID_ACTIONS, GRID_RESOURCES):
        for title in ("x", "err"):
            args = dict(ARGS.get(action, {}))
            if action == "calendar.create":
                args["title"] = title
            elif title == "err":
                continue
            d = check(
                ref,
                nat,
                AuthzRequest(Subject(tenant, user), action, resource, {"tool": "t@v1", "args": args}),
            )
            effects[d.effect.value + (":" + d.error_code if d.error_code else "")] += 1
    assert sum(effects.values()) == 6 * 5 * 4 + 6 * 4
    # every kind of answer was exercised
    assert {"allow", "deny", "confirm", "deny:policy_evaluation_error"} <= set(effects), effects
    if shadow:
        assert nat._p.slices.shadow_default is not None
    print(f"grid (shadow={bool(shadow)}): {dict(effects)}")


def test_example_policies_and_reason_order(cedar_dir: Path) -> None:
    """Confirm beats a plain permit, names only the @confirm policies; reasons in file order."""
    ref, nat = engines(load_cedar_dir(cedar_dir))
    d = check(
        ref, nat, AuthzRequest(Subject("acme", "dave"), "weather.write", "weather:Lyon", {"tool": "t", "args": ARGS["weather.write"]})
    )  # fmt: skip
    assert d.effect is Effect.CONFIRM
    assert [r.policy_id for r in d.reasons] == ["confirm-lyon"]
    assert d.reasons[0].message == "Lyon needs a human"


def test_unknown_action_and_bad_context_fail_closed(cedar_dir: Path) -> None:
    ref, nat = engines(load_cedar_dir(cedar_dir))
    cases = [
        AuthzRequest(Subject("acme", "alice"), "no.such.action", "weather:Paris", {"tool": "t", "args": {}}),
        AuthzRequest(Subject("acme", "alice"), "weather.read", "weather:Paris", {"tool": "t", "args": {"city": 1}}),
        AuthzRequest(Subject("acme", "alice"), "weather.read", "weather:Paris", {"tool": "t"}),
        AuthzRequest(Subject("acme", "alice"), "weather.read", "weather:Paris", {"args": {"__entity": 1}}),
        AuthzRequest(Subject("acme", "alice"), "weather.read", "weather:Paris", {"tool": "t", "args": {"city": 2**70}}),
    ]  # fmt: skip
    for req in cases:
        d = check(ref, nat, req)
        assert d.effect is Effect.DENY and d.error_code, d


def test_a_native_failure_is_a_deny(cedar_dir: Path) -> None:
    """Whatever the compiled core raises is an engine_error deny, never an allow."""
    p = load_cedar_dir(cedar_dir)
    nat = CedarEngine(p)
    nat.use_native(True)

    class Broken:
        def authorize(self, *_: Any) -> Any:
            raise RuntimeError("boom")

    from dataclasses import replace

    broken = CedarEngine(replace(p, native=Broken()))
    broken.use_native(True)
    req = AuthzRequest(Subject("acme", "alice"), "weather.read", "weather:Lyon", {"tool": "t", "args": ARGS["weather.read"]})  # fmt: skip
    (ok,) = nat.authorize_batch_sync([req])
    (d,) = broken.authorize_batch_sync([req])
    assert ok.effect is Effect.ALLOW
    assert d.effect is Effect.DENY and d.error_code == "engine_error"


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, 1.25, 1e-5, 12345.6789, -0.0, 2.0]),
    st.text(max_size=8),
    st.sampled_from(["Paris", "Lyon", "err", "2026-07-20", "blocked"]),
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(st.sampled_from(["city", "date", "title", "__x", "path"]), st.text(max_size=4)),
            inner,
            max_size=4,
        ),  # fmt: skip
    ),
    max_leaves=8,
)
SHAPED_ARGS = st.fixed_dictionaries(
    {
        "city": st.one_of(st.sampled_from(["Paris", "Lyon", "blocked"]), JSON_VALUE),
        "date": st.one_of(st.text(max_size=10), JSON_VALUE),
    },  # fmt: skip
    optional={"extra": JSON_VALUE},
)

CONFORMING_ARGS = st.fixed_dictionaries(
    {"city": st.sampled_from(["Paris", "Lyon", "blocked", "ü"]), "date": st.text(max_size=10)}
)


@pytest.fixture(scope="module")
def pair(cedar_dir: Path) -> tuple[CedarEngine, CedarEngine]:
    return engines(load_cedar_dir(cedar_dir, shadow=("no-blocked",)))


@PROPS
@given(
    user=st.sampled_from([*GRID_USERS, ("acme", 'q"uote'), ("ü", "ümlaut"), ("", "")]),
    action=st.sampled_from(GRID_ACTIONS),
    resource=st.sampled_from([*GRID_RESOURCES, "no-colon", "weather:", ":x", 'weather:"Lyon"']),
    args=st.one_of(CONFORMING_ARGS, SHAPED_ARGS, JSON_VALUE),
    tool=st.one_of(st.just("t@v1"), st.text(max_size=6), JSON_VALUE),
)
def test_generated_contexts(
    pair: tuple[CedarEngine, CedarEngine],
    user: tuple[str, str],
    action: str,
    resource: str,
    args: Any,
    tool: Any,
) -> None:
    ref, nat = pair
    check(ref, nat, AuthzRequest(Subject(*user), action, resource, {"tool": tool, "args": args}))


def test_counts_reported() -> None:
    print(f"native Cedar parity: {sum(COUNTS.values())} decisions compared, zero differences: {dict(COUNTS)}")


def test_the_seam_enables_it_and_python_disables_it(cedar_dir: Path) -> None:
    """``[core] engine``: native/auto decide Cedar in the compiled core, python through cedarpy."""
    from callgate.policy.snapshot import load_snapshot

    snap = load_snapshot(POLICIES)
    assert Core("native").cedar_core(snap) is CoreKind.PYTHON  # not enabled before prepare
    Core("native").prepare(snap)
    assert Core.cedar_core(snap) is CoreKind.NATIVE
    Core("python").prepare(snap)
    assert Core.cedar_core(snap) is CoreKind.PYTHON


def test_real_serve_names_the_cedar_core_and_answers_the_same() -> None:
    """A real ``callgate serve`` per ``[core] engine``: the start log names which core decides
    Cedar, and the Authorizer RPC (the same engine object as Propose) answers identically."""
    import grpc
    from google.protobuf import struct_pb2

    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
    from tests.test_crash_consistency import make_pod

    requests = [
        ("bob", "weather.read", "weather:Paris", {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}}),
        ("alice", "calendar.create", "calendar:primary", {"tool": "calendar.create_event@v1", "args": {"calendar_id": "primary", "title": "x", "start": "s", "duration_minutes": 30}}),
        ("alice", "files.delete", "file:/etc/passwd", {"tool": "files.delete@v1", "args": {"path": "/etc/passwd"}}),
        ("alice", "weather.read", "weather:Paris", {"tool": "weather.get@v1", "args": {"city": 1}}),
    ]  # fmt: skip
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for engine in ("python", "native"):
        pod = make_pod('[store]\npath = "{tmp}/callgate.db"\n[core]\nengine = "' + engine + '"', {})
        try:
            pod.start().close()
            log = (pod.tmp / "log").read_text()
            assert f"core: {engine}; Cedar decisions: {engine}" in log, log
            with grpc.insecure_channel(f"unix:{pod.tmp}/authorizer.sock") as ch:
                stub = pb_grpc.AuthorizerStub(ch)
                got = []
                for sid, cap, res, ctx in requests:
                    st = struct_pb2.Struct()
                    st.update(ctx)
                    r = stub.Authorize(
                        pb.AuthorizeRequest(subject=pb.Subject(tenant="acme", id=sid), capability=cap, resource=res, context=st),
                        timeout=10,
                    )  # fmt: skip
                    d = r.decision
                    got.append((d.effect, tuple((x.code, x.policy_id, x.message) for x in d.reasons), tuple(d.policy_ids), d.error_code))  # fmt: skip
                answers[engine] = got
        finally:
            pod.stop()
    assert answers["native"] == answers["python"]
    effects = [a[0] for a in answers["native"]]
    assert effects == [pb.ALLOW, pb.CONFIRM, pb.DENY, pb.DENY], answers


# ---------------------------------------------------------------------------------------------
# The whole decision in one call (issue 15 item 5/7): ``Core.front`` with the session's subject
# runs the front stages, the resource, the Cedar context and the decision in one native call.
# The pieces are compared with their Python references: ``to_cedar_value`` (cedar.py), the
# resource template (toolspecs.py), then whole proposals against the Python stages followed by
# the engine over cedarpy. A defer (the core leaves the decision to the engine) is counted.

N: Any = NATIVE
CONTEXT_VALUE = st.recursive(
    st.one_of(
        JSON_LEAF,
        st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2),
        st.integers(min_value=2**63 - 2, max_value=2**63 + 2),
        st.floats(min_value=-1e16, max_value=1e16, allow_nan=False),
        st.decimals(places=5, min_value=-(10**15), max_value=10**15, allow_nan=False).map(float),
        st.sampled_from([0.0001, 0.00015, 922337203685477.5, 922337203685477.6, 2.0**53, 1e14 + 0.5]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(st.sampled_from(["a", "__entity", "__x", "_y", "tool"]), st.text(max_size=3)),
            inner,
            max_size=3,
        ),
    ),  # fmt: skip
    max_leaves=10,
)


@PROPS
@given(CONTEXT_VALUE)
def test_cedar_context_conversion_is_to_cedar_value(value: Any) -> None:
    from callgate.policy.engines.cedar import _ContextError, to_cedar_value

    try:
        want: Any = to_cedar_value(value)
    except _ContextError:
        want = None
    got = N.cedar_context_of(json.dumps(value).encode())
    if got is None and want is not None:
        COUNTS["context-defer"] += 1  # the engine converts it (Python), as before
        return
    assert (json.loads(got) if got is not None else None) == want, (value, got, want)
    COUNTS["context-equal"] += 1


TEMPLATES = st.sampled_from(
    ["weather:{city}", "file:{/path}", "x:{/a/0}", "x:{/a~1b}-{/a~0b}", "k:{a}{b}", "k:{{a}}", "k:{}",
     "k:{a", "k:{/a/01}", "k:{/a/x}", "k:{/}", "k:{/a/١}", "k:{ü}", "plain:"]
)  # fmt: skip
TEMPLATE_ARGS = st.dictionaries(
    st.sampled_from(["a", "b", "city", "path", "a/b", "a~b", "", "ü"]),
    st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=3), st.dictionaries(st.sampled_from(["", "x", "0"]), JSON_LEAF, max_size=2)),
    max_size=4,
)  # fmt: skip


@PROPS
@given(TEMPLATES, TEMPLATE_ARGS)
def test_resource_rendering_is_the_template(template: str, args: dict[str, Any]) -> None:
    from callgate.base.errors import CallgateError
    from callgate.policy.toolspecs import ResourceTemplate

    try:
        want: str | None = ResourceTemplate.compile(template).render(args)
    except CallgateError:
        want = None
    got = N.render_resource(template, json.dumps(args).encode())
    if got is None and want is not None:
        COUNTS["render-defer"] += 1
        return
    assert got == want, (template, args, got, want)
    COUNTS["render-equal"] += 1


def _one_call_pair() -> tuple[Any, Core, CedarEngine]:
    """The example snapshot with the compiled Cedar enabled (the one-call path), a native core
    prepared on it, and a reference engine over cedarpy on the same loaded policies."""
    from callgate.policy.snapshot import load_snapshot

    if "pair" not in _ONE_CALL:
        snap = load_snapshot(POLICIES)
        core = Core("native")
        core.prepare(snap, eager=True)
        assert Core.cedar_core(snap) is CoreKind.NATIVE
        ref = CedarEngine(snap.engine._p)  # type: ignore[attr-defined]
        assert not ref.native
        _ONE_CALL["pair"] = (snap, core, ref)
    out: tuple[Any, Core, CedarEngine] = _ONE_CALL["pair"]
    return out


_ONE_CALL: dict[str, Any] = {}
WEATHER, FILES = ("weather.get", "v1"), ("files.delete", "v1")
ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=8)
ONE_CALL_PROPOSALS = st.one_of(
    st.tuples(st.just(WEATHER), st.fixed_dictionaries(
        {"city": st.one_of(st.sampled_from(["Paris", " lyon ", "Lyon", "blocked", "上海", "", "a" * 101]), ASCII),
         "date": st.sampled_from(["tomorrow", "2026-07-20", "next monday", "today", "Tomorrow ", "x", "2026-02-30"])},
    )),
    st.tuples(st.just(FILES), st.fixed_dictionaries(
        {"path": st.one_of(st.sampled_from(["/etc/passwd", "/tmp/x", "/a/../b", " /Tmp/Y ", "/etc/"]), ASCII.map(lambda t: "/" + t))},
        optional={"reason": st.one_of(ASCII, st.text(max_size=4))},
    )),
    st.tuples(st.sampled_from([WEATHER, FILES]), st.one_of(
        st.fixed_dictionaries({"city": JSON_LEAF, "date": JSON_LEAF}, optional={"extra": CONTEXT_VALUE}),
        CONTEXT_VALUE,
    )),
)  # fmt: skip


@settings(PROPS, max_examples=600)
@given(proposal=ONE_CALL_PROPOSALS, user=st.sampled_from([*GRID_USERS, ("ü", "ümlaut")]))
def test_one_call_decision_is_the_reference(
    proposal: tuple[tuple[str, str], Any], user: tuple[str, str]
) -> None:
    """The one-call answer (front stages + resource + context + Cedar) equals the Python stages
    followed by the engine over cedarpy: the same refusal code or normalized bytes and digest,
    the same resource and the same decision."""
    import asyncio

    from callgate.arguments.normalize import normalize
    from callgate.arguments.parse import ParseLimits, parse_arguments
    from callgate.base.errors import RejectedError
    from callgate.base.model import NormalizationContext
    from callgate.propose.authorize import authorize_invocation

    tool_key, args = proposal
    snap, core, ref = _one_call_pair()
    tool = snap.tools.get(*tool_key)
    tenant, principal = user
    clock = "2026-07-19T14:00:00+08:00"
    raw = json.dumps(args, ensure_ascii=False).encode()
    answer = core.front(snap, tool, raw, tenant, "en", clock, ParseLimits(), principal)
    assert answer is not None
    if answer.code == "defer":
        COUNTS["one-call-front-defer"] += 1
        return
    try:
        validated = tool.schema.validate(parse_arguments(raw))
        norm = normalize(
            validated,
            tool.normalizers,
            NormalizationContext(clock, "Asia/Shanghai", "en"),
            tenant=tenant,
            tool_name=tool.spec.name,
            tool_version=tool.spec.version,
        )
        code = "schema_violation" if tool.normalized_schema.validate_value(norm.value) else None
    except RejectedError as exc:
        code = exc.code.value
    assert answer.code == code, (args, answer.code, code)
    if code is not None:
        assert answer.authz is None
        COUNTS["one-call-refused"] += 1
        return
    assert (answer.canonical, answer.digest) == (norm.canonical, norm.digest)
    want = asyncio.run(authorize_invocation(ref, tool, norm, Subject(tenant, principal)))
    if answer.authz is None:
        COUNTS["one-call-authz-defer"] += 1  # the engine decides, as before
        return
    got = snap.engine.decide_answers(answer.authz)
    assert answer.resource == want.resource
    assert key(got) == key(want.decision), (args, got, want.decision)
    COUNTS["one-call-" + got.effect.value + (":" + got.error_code if got.error_code else "")] += 1


def test_one_call_runs_only_on_the_compiled_cedar() -> None:
    """Without the subject, on a snapshot whose Cedar runs in cedarpy, or on a closed engine, the
    core answers the front stages only and the engine decides."""
    from callgate.policy.snapshot import load_snapshot

    snap = load_snapshot(POLICIES)
    core = Core("native")
    core.prepare(snap)
    tool = snap.tools.get("weather.get", "v1")
    raw = b'{"city": "Paris", "date": "tomorrow"}'
    clock = "2026-07-19T14:00:00+08:00"
    from callgate.arguments.parse import ParseLimits

    one = core.front(snap, tool, raw, "acme", "en", clock, ParseLimits(), "bob")
    assert one is not None and one.code is None and one.resource == "weather:Paris"
    assert snap.engine.decide_answers(one.authz).effect is Effect.ALLOW
    assert core.front(snap, tool, raw, "acme", "en", clock, ParseLimits()).authz is None
    padded = raw[:-1] + b" " * 5000 + b"}"  # from 4 KiB the call releases the GIL: the same answer
    big = core.front(snap, tool, padded, "acme", "en", clock, ParseLimits(), "bob")
    assert big is not None and (big.canonical, big.digest, big.resource, big.authz) == (
        one.canonical,
        one.digest,
        one.resource,
        one.authz,
    )
    snap.engine.use_native(False)
    assert core.front(snap, tool, raw, "acme", "en", clock, ParseLimits(), "bob").authz is None
    snap.engine.use_native(True)
    import asyncio

    asyncio.run(snap.engine.close())
    assert core.front(snap, tool, raw, "acme", "en", clock, ParseLimits(), "bob").authz is None


def test_one_call_counts_reported() -> None:
    print(f"one-call parity: {dict(sorted((k, v) for k, v in COUNTS.items() if '-' in k))}")


# The one-call context built as Cedar values straight from the parsed arguments (issue 15 A5: no
# JSON form in between) on a tool whose arguments are any object and whose Cedar context declares
# Longs, decimals, sets, nested and optional records, so every conversion rule of
# ``to_cedar_value`` (nulls dropped, ``__`` keys and numbers outside Long refused, floats as Longs
# or decimals) reaches a decision, against the engine over cedarpy.
TYPED_SCHEMA = """
action "typed.put" in [create] appliesTo { principal: User, resource: Resource,
  context: { tenant: String, tool: String,
             args: { table: String, n?: Long, d?: decimal, b?: Bool, xs?: Set<Long>,
                     r?: { a?: Long, s?: String }, rs?: Set<{ id: Long }> } } };
"""
TYPED_POLICIES = """
@id("typed-permit")
permit (principal, action == Action::"typed.put", resource)
when { principal.tenant == context.tenant && context.args.table == "t" };
@id("typed-forbid-n")
forbid (principal, action == Action::"typed.put", resource) when { context.args has n && context.args.n > 100 };
@id("typed-forbid-d")
forbid (principal, action == Action::"typed.put", resource)
when { context.args has d && context.args.d.greaterThan(decimal("1.5")) };
@id("typed-forbid-xs")
forbid (principal, action == Action::"typed.put", resource) when { context.args has xs && context.args.xs.contains(7) };
@id("typed-forbid-r")
forbid (principal, action == Action::"typed.put", resource)
when { context.args has r && context.args.r has a && context.args.r.a == 3 };
@id("typed-forbid-rs")
forbid (principal, action == Action::"typed.put", resource) when { context.args has rs && context.args.rs.contains({id: 7}) };
"""
_TYPED: dict[str, Any] = {}
NUMBER = st.one_of(
    st.integers(min_value=-5, max_value=200),
    st.sampled_from(
        [7, 3, 2**63 - 1, 2**63, -(2**63) - 1, 1.0, 1.5, 1.50001, 2.25, 1e14 + 0.5, 2.0**53, 0.00015]
    ),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)
MAYBE = st.one_of(NUMBER, st.none(), st.booleans(), ASCII)
TYPED_ARGS = st.fixed_dictionaries(
    {"table": st.sampled_from(["t", "u"])},
    optional={
        "n": MAYBE, "d": MAYBE, "b": st.one_of(st.booleans(), st.none(), NUMBER),
        "xs": st.one_of(st.lists(st.one_of(NUMBER, st.none()), max_size=4), MAYBE),
        "r": st.one_of(st.fixed_dictionaries({}, optional={"a": MAYBE, "s": st.one_of(ASCII, st.none()),
                                                           "__x": NUMBER, "extra": NUMBER}), MAYBE),
        "rs": st.lists(st.fixed_dictionaries({"id": st.one_of(NUMBER, st.none())}), max_size=3),
        "extra": CONTEXT_VALUE, "__entity": ASCII,
    },
)  # fmt: skip


def _typed_pair(tmp: Path) -> tuple[Any, Core, CedarEngine]:
    from callgate.policy.snapshot import load_snapshot

    if "pair" not in _TYPED:
        pdir = tmp / "policies"
        shutil.copytree(POLICIES, pdir, ignore=shutil.ignore_patterns("tests", "rego"))
        spec = json.loads((pdir / "tools" / "files.delete@v1.json").read_text())
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}
        spec.update(name="typed.put", input_schema=schema, normalizers=[], required_capabilities=["typed.put"],
                    resource_template="typed:{table}", side_effect_class="create")  # fmt: skip
        (pdir / "tools" / "typed.put@v1.json").write_text(json.dumps(spec))
        with open(pdir / "cedar" / "schema.cedarschema", "a") as fh:
            fh.write(TYPED_SCHEMA)
        with open(pdir / "cedar" / "policies.cedar", "a") as fh:
            fh.write(TYPED_POLICIES)
        snap = load_snapshot(pdir)
        core = Core("native")
        core.prepare(snap, eager=True)
        assert Core.cedar_core(snap) is CoreKind.NATIVE and "typed.put@v1" not in core.unsupported()
        _TYPED["pair"] = (snap, core, CedarEngine(snap.engine._p))  # type: ignore[attr-defined]
    out: tuple[Any, Core, CedarEngine] = _TYPED["pair"]
    return out


@settings(PROPS, max_examples=500)
@given(args=TYPED_ARGS, user=st.sampled_from(GRID_USERS))
def test_one_call_typed_context_is_the_reference(
    tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], user: tuple[str, str]
) -> None:
    import asyncio

    from callgate.arguments.parse import ParseLimits
    from callgate.base.errors import RejectedError
    from callgate.propose.authorize import authorize_invocation

    snap, core, ref = _typed_pair(tmp_path_factory.getbasetemp())
    tool = snap.tools.get("typed.put", "v1")
    tenant, principal = user
    clock = "2026-07-19T14:00:00+08:00"
    raw = json.dumps(args, ensure_ascii=False).encode()
    answer = core.front(snap, tool, raw, tenant, "en", clock, ParseLimits(), principal)
    assert answer is not None
    if answer.code == "defer":
        COUNTS["typed-front-defer"] += 1
        return
    try:
        norm = reference_front(tool, raw, clock, tenant)
    except RejectedError as exc:  # e.g. an integer past 2^53 (no RFC 8785 form): refused alike
        assert answer.code == exc.code.value, (args, answer.code, exc.code)
        COUNTS["typed-refused"] += 1
        return
    assert answer.code is None, (args, answer.code)
    want = asyncio.run(authorize_invocation(ref, tool, norm, Subject(tenant, principal)))
    if answer.authz is None:
        COUNTS["typed-authz-defer"] += 1  # the engine decides (a value to_cedar_value refuses)
        assert want.decision.effect is Effect.DENY, (args, want.decision)
        return
    got = snap.engine.decide_answers(answer.authz)
    assert answer.resource == want.resource
    assert key(got) == key(want.decision), (args, got, want.decision)
    COUNTS["typed-" + got.effect.value + (":" + got.error_code if got.error_code else "")] += 1


def test_typed_counts_reported() -> None:
    typed = {k: v for k, v in COUNTS.items() if k.startswith("typed-")}
    print(f"typed one-call parity: {dict(sorted(typed.items()))}")
    if sum(typed.values()) >= 500:  # the whole property ran: allows, forbids and defers all met
        assert (
            typed.get("typed-allow", 0) and typed.get("typed-deny", 0) and typed.get("typed-authz-defer", 0)
        )


def test_written_entities_decide_the_same_after_their_slices_are_evicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A principal or resource absent from entities.json is written by the compiled core as an
    entity of its own and checked against the schema whenever its slice is built. With a slice
    cache of 2 entries and 4 x 3 (principal, resource) pairs in turn, so that nearly every request
    rebuilds its slice, every decision equals the reference's, three times over: allowed where the
    schema holds the written resources, an error deny every time where it does not (a resource
    attribute the request cannot fill), never an allow remembered from an earlier request."""
    monkeypatch.setattr(cedar_engine, "ENTITY_CACHE_SIZE", 2)
    resource = "entity Resource { kind: String, name: String, tenant: String };"
    good, bad = tmp_path / "good", tmp_path / "bad"
    for d in (good, bad):
        shutil.copytree(POLICIES / "cedar", d)
    schema = (bad / "schema.cedarschema").read_text()
    assert resource in schema
    (bad / "schema.cedarschema").write_text(schema.replace(resource, resource[:-3] + ", owner: String };"))
    for d, conforms in ((good, True), (bad, False)):
        ref, nat = engines(load_cedar_dir(d))
        for _ in range(3):
            for user in ("alice", "bob", "zed", "yan"):  # two in entities.json, two written per request
                for city in ("Paris", "Lyon", "Nice"):
                    args = {"city": city, "date": "2026-12-07"}
                    req = AuthzRequest(
                        Subject("acme", user), "weather.read", f"weather:{city}", {"tool": "t", "args": args}
                    )
                    d_ = check(ref, nat, req)
                    if conforms:
                        assert d_.effect is Effect.ALLOW and not d_.error_code, d_
                    else:
                        assert d_.effect is Effect.DENY and d_.error_code, d_
