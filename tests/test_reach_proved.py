"""Issue 31 item 4: ListTools by policy checked by the symbolic compiler (``callgate policy prove``).

For each (principal, capability) pair of the example policies and of the 200 generated sets of
tests/test_list_by_policy.py, one ``never_allowed`` property scoped to that principal and
that action, with the principal's role memberships pinned to the snapshot's entity set (``when``:
``principal in Role::"r"`` or its negation for every role), everything else free (resource,
context and arguments, attributes), as the reading of callgate/policy/reach.py has them:

* hidden  => the prover proves it (never allowed or confirmed);
* shown   => the prover refutes it with a witness, a request that the real engines (cedarpy and the
  compiled core, replayed) allow or confirm; or the pair is *shown by caution* (proved never, but
  neither the reading nor the solver pass could tell), counted: none on any set.

One prover run for all pairs (the real prover binary and cvc5 1.3.1, by scripts/prove and
scripts/solver, as tests/test_prove.py). The snapshots' own solver pass
(callgate/policy/reach_solve.py) settles the pairs the reading cannot decide; with it the shown set
is exact on the example set and on all 200 generated sets; without an answer (no prover, the time
bound) a pair stays shown.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import cedarpy
import pytest

from callgate.base.model import Effect
from callgate.native import load_native
from callgate.policy import reach_solve
from callgate.policy.engines.cedar import load_cedar_dir
from callgate.policy.prove.properties import Kind, Property
from callgate.policy.prove.replay import Core, replay
from callgate.policy.prove.runner import (
    BIN_ENV,
    CedarSource,
    PropertyResult,
    Status,
    run_checks,
    run_checks_each,
)
from callgate.policy.reach import Reach, entity_parents
from callgate.policy.reach_solve import Plan, apply_results, plan_checks
from tests.conftest import POLICIES
from tests.test_list_by_policy import ACTIONS, DESCENDANTS, ENTITIES, PRINCIPALS, _random_policy
from tests.test_prove import prover  # noqa: F401  (the module fixture: binary and solver)

pytestmark = pytest.mark.prove

ADMITTED = (Effect.ALLOW, Effect.CONFIRM)
GENERATED = 200
"""Generated sets checked: the 200 of test_list_by_policy.py (same generator and seed)."""
WALL = 1800.0
"""The prover runs' wall-clock bound: ~20 s of CPU, but a loaded 2-core box stretches the
prover/solver round trips (an answer missing at the bound would be unknown, not a failure of the
property under test)."""


def _memberships(who: str, entities: str, roles: Sequence[str]) -> str:
    """``when``: the principal's role memberships exactly as the entity set has them (transitively)."""
    parents = entity_parents(entities)
    assert parents is not None
    seen: set[tuple[str, str]] = set()
    todo = list(parents.get(("User", who), ()))
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo.extend(parents.get(u, ()))
    return " && ".join(
        f'principal in Role::"{r}"' if ("Role", r) in seen else f'!(principal in Role::"{r}")' for r in roles
    )


def _pair_properties(
    tag: str, entities: str, principals: Sequence[str], actions: Sequence[str], roles: Sequence[str]
) -> list[Property]:
    return [
        Property(
            name=f"{tag}.{who}.{act}",
            kind=Kind.NEVER_ALLOWED,
            source=f"{tag}:{who}:{act}",
            actions=(act,),
            principals=(f'User::"{who}"',),
            when=_memberships(who, entities, roles),
        )
        for who in principals
        for act in actions
    ]


def _witness_admitted(r: PropertyResult, source: CedarSource, *, cores: bool = True) -> None:
    """A shown pair's witness is allowed or confirmed: replayed through callgate's engines (cedarpy
    and the compiled core) when ``cores``, else through Cedar itself (cedarpy on the text, schema
    and the witness's entities: Cedar's Allow on the enforcing policies = allowed or confirmed)."""
    cex = r.counterexample
    assert cex is not None
    if not cores:
        req = {
            "principal": f'{cex.principal["type"]}::"{cex.principal["id"]}"',
            "action": f'{cex.action["type"]}::"{cex.action["id"]}"',
            "resource": f'{cex.resource["type"]}::"{cex.resource["id"]}"',
            "context": dict(cex.context),
        }
        got = cedarpy.is_authorized(
            req, source.policies, json.dumps(list(cex.entities)), schema=source.schema
        )
        assert got.allowed, (r.prop.name, got.diagnostics, cex)
        return
    got = {x.core: x.decision.effect for x in replay(cex, source.policies, source.schema)}
    assert Core.PYTHON in got and (load_native() is None or Core.NATIVE in got)
    assert all(e in ADMITTED for e in got.values()), (r.prop.name, got, cex)


def _compare(
    results: Mapping[str, PropertyResult],
    never: Mapping[str, frozenset[str]],
    source: CedarSource,
    tag: str,
    *,
    cores: bool = True,
) -> tuple[int, int, int, int]:
    """(hidden, shown with a witness, shown by caution, shown undecided) over one set's pairs."""
    hidden = witnessed = caution = undecided = 0
    for who, acts in never.items():
        for act in ACTIONS:
            r = results[f"{tag}.{who}.{act}"]
            if act in acts:
                hidden += 1
                assert r.status is Status.PROVED, (tag, who, act, r.status, r.detail, r.counterexample)
            elif r.status is Status.REFUTED:
                witnessed += 1
                _witness_admitted(r, source, cores=cores)
            elif r.status is Status.PROVED:
                caution += 1
            else:  # unknown/error: shown, as the cautious reading does (counted, never hidden)
                assert r.status is Status.UNKNOWN, (tag, who, act, r.status, r.detail)
                undecided += 1
    return hidden, witnessed, caution, undecided


@pytest.mark.usefixtures("prover")
def test_example_policies_shown_iff_some_request_admitted() -> None:
    source = CedarSource.load(POLICIES / "cedar")
    entities = (POLICIES / "cedar" / "entities.json").read_text()
    reach = load_cedar_dir(POLICIES / "cedar", reach_solver_ms=60_000).reach  # with the solver pass
    assert reach is not None and reach.solver is not None
    assert reach.solver.unknown == 0 and reach.solver.undecided > 0
    who_all = ("alice", "bob", "carol", "zed")  # zed: not in the entity set (no roles)
    results = run_checks(_pair_properties("ex", entities, who_all, ACTIONS, ("scheduler", "admin")), source)
    by_name = {r.prop.name: r for r in results}
    never = {who: reach.never(who, ACTIONS) for who in who_all}
    hidden, witnessed, caution, undecided = _compare(by_name, never, source, "ex")
    assert (caution, undecided) == (0, 0)  # the example set: shown exactly when some request is
    assert (hidden, witnessed) == (6, 6)  # alice 1 hidden, bob 2, carol 1, zed 2


@pytest.mark.usefixtures("prover")
def test_generated_sets_shown_iff_some_request_admitted() -> None:
    """The 200 sets of test_list_by_policy.py: the reading, then the solver pass on the pairs it
    cannot decide (planned per set, run in one prover process, as :func:`settle_reach` does per
    snapshot); then every pair checked on its own by the symbolic compiler: shown <=> some request
    is allowed or confirmed, both ways."""
    rng = random.Random(31)  # the generator and seed of test_list_by_policy.py
    texts = ["".join(_random_policy(rng, n) for n in range(rng.randint(1, 6))) for _ in range(GENERATED)]
    entities = json.dumps(ENTITIES)
    schema = CedarSource.load(POLICIES / "cedar").schema  # the actions, groups and context they use
    sources = [CedarSource(POLICIES / "cedar", text, schema) for text in texts]
    reaches: list[Reach] = []
    plans: list[Plan] = []
    for text in texts:
        static = json.loads(cedarpy.policies_to_json_str(text))["staticPolicies"]
        reach = Reach.build(
            static, list(static), DESCENDANTS, entities,
            principal_type="User", resource_type="Resource", action_type="Action",
        )  # fmt: skip
        reaches.append(reach)
        plans.append(plan_checks(reach, ACTIONS))
    # the solver pass of every set in one prover process
    planned = [(prop, source) for plan, source in zip(plans, sources, strict=True) for prop in plan.props]
    answers = iter(run_checks_each(planned, schema, wall_seconds=WALL))
    passes = [
        apply_results(r, plan, [next(answers) for _ in plan.props], 0.0)
        for r, plan in zip(reaches, plans, strict=True)
    ]
    # every pair, checked on its own (the pair's memberships pinned as test code writes them)
    items = [
        (prop, source)
        for i, source in enumerate(sources)
        for prop in _pair_properties(f"g{i}", entities, PRINCIPALS, ACTIONS, ("scheduler", "admin", "staff"))
    ]
    by_name = {r.prop.name: r for r in run_checks_each(items, schema, wall_seconds=WALL)}
    totals = [0, 0, 0, 0]
    for i, (source, reach) in enumerate(zip(sources, reaches, strict=True)):
        never = {who: reach.never(who, ACTIONS) for who in PRINCIPALS}
        # every witness through Cedar; every 20th set's also through callgate's two cores
        for k, v in enumerate(_compare(by_name, never, source, f"g{i}", cores=i % 20 == 0)):
            totals[k] += v
    hidden, witnessed, caution, undecided = totals
    settled = sum(p.undecided for p in passes)
    by_solver = sum(p.hidden for p in passes)
    print(
        f"generated: hidden {hidden} ({by_solver} by the solver pass of {settled} undecided), "
        f"shown with a witness {witnessed}, by caution {caution}, undecided {undecided}"
    )
    assert hidden + witnessed + caution + undecided == GENERATED * len(PRINCIPALS) * len(ACTIONS)
    assert (caution, undecided) == (0, 0)  # exact both ways
    assert sum(p.unknown for p in passes) == 0
    # the shapes the reading cannot decide occur, and the solver pass hides some of them
    assert by_solver > 0 and settled > by_solver and hidden > by_solver and witnessed > 0


CANCELLED = """
@id("weather-cancelled")
forbid (principal, action == Action::"weather.read", resource)
when { principal.tenant == context.tenant };
"""
"""Cancels ``weather-read-own-tenant`` wherever it applies: weather is never allowed, which only
the solver pass can tell (the reading sees a conditional permit and a conditional forbid)."""


@pytest.mark.usefixtures("prover")
def test_the_solver_pass_hides_what_it_proves_and_shows_what_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root, ignore=shutil.ignore_patterns("tests", "properties.toml"))
    with open(root / "cedar" / "policies.cedar", "a") as fh:
        fh.write(CANCELLED)
    reach_solve._memo.clear()
    solved = load_cedar_dir(root / "cedar", reach_solver_ms=60_000).reach
    assert solved is not None and solved.solver is not None
    assert solved.solver.unknown == 0 and solved.solver.hidden == 3  # alice, carol, anyone else
    for who in ("alice", "bob", "carol", "zed"):
        assert "weather.read" in solved.never(who, ACTIONS), who
        assert "weather.read" not in solved.assess(who, ACTIONS)[0]  # the reading alone: shown
    # no solver pass, the prover missing, or no answer in time: shown (never hidden on unknown)
    off = load_cedar_dir(root / "cedar", reach_solver_ms=0).reach
    assert off is not None and off.solver is None and "weather.read" not in off.never("bob", ACTIONS)
    reach_solve._memo.clear()
    monkeypatch.setenv(BIN_ENV, str(tmp_path / "no-such-prover"))
    missing = load_cedar_dir(root / "cedar", reach_solver_ms=60_000).reach
    assert missing is not None and missing.solver is not None
    assert missing.solver.unknown == missing.solver.undecided > 0 and "not built" in missing.solver.note
    assert not any("weather.read" in missing.never(w, ACTIONS) for w in ("alice", "bob", "carol", "zed"))
    monkeypatch.undo()
    reach_solve._memo.clear()
    late = load_cedar_dir(root / "cedar", reach_solver_ms=1).reach  # a 1 ms bound: no answer
    assert late is not None and late.solver is not None and late.solver.unknown > 0
    assert late.solver.hidden + late.solver.witnessed + late.solver.unknown == late.solver.undecided
    assert all("weather.read" not in late.never(w, ACTIONS) for w in ("alice", "bob", "carol", "zed"))


def test_a_missing_prover_says_how_to_build_it_or_turn_the_pass_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed wheel has no prover: every start warned, naming only a checkout's build. The
    note (logged once per process) also names the setting that turns the pass off."""
    reach_solve._memo.clear()
    monkeypatch.setenv(BIN_ENV, str(tmp_path / "no-such-prover"))
    missing = load_cedar_dir(POLICIES / "cedar", reach_solver_ms=60_000).reach
    assert missing is not None and missing.solver is not None and missing.solver.unknown > 0
    assert "not built" in missing.solver.note, missing.solver.note
    assert missing.solver.note.endswith("or turn this pass off: [policy] list_by_policy_solver_ms = 0")
