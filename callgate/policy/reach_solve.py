"""ListTools by policy's solver pass: the pairs the reading cannot decide, settled at snapshot build.

:mod:`callgate.policy.reach` decides most (principal, action) pairs from the policies' scopes; a
pair whose answer hangs on a condition (``when``/``unless``), a forbid that covers a permit only
sometimes, a resource scope, ... is *undecided*. Here, once per snapshot (off the request path: the
load runs in the reload's worker thread), every undecided pair of every principal class
(:meth:`Reach.classes`) becomes one ``never_allowed`` check of the symbolic compiler
(:mod:`callgate.policy.prove.runner`, the ``callgate-prove`` process and cvc5): the principal, its
memberships pinned as the entity set has them, resource, context (arguments) and attributes free.
Proved: the pair is hidden. Refuted (a request the set allows or confirms), unknown (the solver's
time limit, the pass's wall-clock bound), an error, or no prover or solver on the machine: shown.
Nothing unknown is ever hidden; the counts are logged and kept on :attr:`Reach.solver`.

Answers are remembered per process for the same policy text, schema and checks (a reload of an
unchanged set, the test suite's many sidecars), at most :data:`MEMO_MAX` sets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from callgate.base.errors import LoadError
from callgate.policy.prove.properties import Kind, Property
from callgate.policy.prove.runner import CedarSource, PropertyResult, ProverUnavailable, Status, run_checks
from callgate.policy.reach import ClassKey, Reach, Uid

log = logging.getLogger("callgate.policy")

SOLVER_TIMEOUT_MS = 2_000
"""The solver's limit per check (a pair past it stays shown)."""
MEMO_MAX = 32
_memo: OrderedDict[str, tuple[PropertyResult, ...]] = OrderedDict()


@dataclass(frozen=True, slots=True)
class SolverPass:
    """What the pass did for one snapshot (logged; :attr:`Reach.solver`)."""

    undecided: int
    """Pairs (principal class, action) the reading could not decide."""
    hidden: int
    """Of them, proved never allowed nor confirmed: hidden."""
    witnessed: int
    """Refuted: a request is allowed or confirmed; shown."""
    unknown: int
    """No answer (time limit, error, no prover or solver): shown by caution."""
    seconds: float
    note: str = ""
    """Why the pass did not run (no prover or solver)."""
    checks: int = 0
    """Distinct questions put to the solver (pairs that ask the same share one)."""


def _pinned(reach: Reach) -> frozenset[Uid]:
    """Memberships the pass may pin: the policies' entity literals of a type principals can be
    members of (as the entity set's parents or the principal scopes have them), and every
    principal's ancestors."""
    ancestors: set[Uid] = set()
    for key in reach.classes():
        ancestors |= key[1]
    member_types = {u[0] for u in ancestors} | set(reach.member_types)
    return frozenset({u for u in reach.literals if u[0] in member_types} | ancestors)


def _uid(u: Uid) -> str:
    """Cedar's text of an entity uid (the id escaped as a string literal; one Cedar cannot read
    makes the check an error, and the pair stays shown)."""
    return f"{u[0]}::{json.dumps(u[1], ensure_ascii=False)}"


@dataclass(frozen=True, slots=True)
class Plan:
    """The checks of one snapshot's pass: one ``never_allowed`` property per distinct question."""

    props: tuple[Property, ...]
    pairs: tuple[tuple[tuple[ClassKey, str], ...], ...]
    """For each property, the (principal class, action) pairs its answer settles."""


def plan_checks(reach: Reach, actions: Iterable[str]) -> Plan:
    """The undecided pairs of every principal class over ``actions``, as properties: the principal
    (its id, which only matters when a policy names it) and its memberships in the entities the
    action's policies mention (others cannot change the answer), pinned as the entity set has
    them. Pairs that ask the same question share one property."""
    wanted = frozenset(actions)
    pinned = _pinned(reach)
    relevant = {a: sorted(pinned & reach.literals_for(a)) for a in wanted}
    questions: dict[
        tuple[str, str | None, tuple[tuple[Uid, bool], ...]], tuple[str, list[tuple[ClassKey, str]]]
    ] = {}
    for key, rep in reach.classes().items():
        never, sure = reach.assess(rep, wanted)
        for act in sorted(wanted - never - sure):
            members = tuple((u, u in key[1]) for u in relevant[act])
            q = (act, key[0], members)
            if q not in questions:
                questions[q] = (rep, [])
            questions[q][1].append((key, act))
    props: list[Property] = []
    pairs: list[tuple[tuple[ClassKey, str], ...]] = []
    for (act, _, members), (rep, settled) in questions.items():
        when = " && ".join(
            f"principal in {_uid(u)}" if inside else f"!(principal in {_uid(u)})" for u, inside in members
        )
        props.append(
            Property(
                name=f"reach.{len(props)}",
                kind=Kind.NEVER_ALLOWED,
                source="policy.list_by_policy",
                actions=(act,),
                principals=(_uid((reach.principal_type, rep)),),
                when=when,
            )
        )
        pairs.append(tuple(settled))
    return Plan(tuple(props), tuple(pairs))


def apply_results(reach: Reach, plan: Plan, results: Sequence[PropertyResult], seconds: float) -> SolverPass:
    """Record the proved pairs on ``reach`` (hidden); every other answer leaves its pairs shown."""
    proved: dict[ClassKey, set[str]] = {}
    witnessed = unknown = 0
    for settled, r in zip(plan.pairs, results, strict=True):
        if r.status is Status.PROVED:
            for key, act in settled:
                proved.setdefault(key, set()).add(act)
        elif r.status is Status.REFUTED:
            witnessed += len(settled)
        else:
            unknown += len(settled)
    reach.settle({k: frozenset(v) for k, v in proved.items()})
    hidden = sum(len(v) for v in proved.values())
    undecided = sum(len(s) for s in plan.pairs)
    return _done(reach, SolverPass(undecided, hidden, witnessed, unknown, seconds, checks=len(plan.props)))


def settle_reach(
    reach: Reach,
    *,
    directory: Path,
    policies: str,
    schema: str,
    shadow: Sequence[str],
    actions: Iterable[str],
    wall_ms: int,
) -> SolverPass:
    """Run the pass over ``actions`` (the schema's) and record its answers on ``reach``."""
    start = time.monotonic()
    plan = plan_checks(reach, actions)
    if not plan.props:
        return _done(reach, SolverPass(0, 0, 0, 0, time.monotonic() - start))
    undecided = sum(len(s) for s in plan.pairs)
    digest = hashlib.sha256()
    for part in (policies, schema, "\x00".join(shadow), *(f"{p.scope()}|{p.actions}" for p in plan.props)):
        digest.update(part.encode() + b"\x00")
    memo_key = digest.hexdigest()
    hit = _memo.get(memo_key)
    if hit is not None:
        _memo.move_to_end(memo_key)
        return apply_results(reach, plan, hit, time.monotonic() - start)
    source = CedarSource(directory, policies, schema, tuple(shadow))
    try:
        results = run_checks(
            plan.props, source, solver_timeout_ms=SOLVER_TIMEOUT_MS, wall_seconds=max(wall_ms, 1) / 1000
        )
    except ProverUnavailable as exc:  # a machine without scripts/prove: said once per process
        n, c = undecided, len(plan.props)
        note = f"{exc}; or turn this pass off: [policy] list_by_policy_solver_ms = 0"
        return _done(reach, SolverPass(n, 0, 0, n, time.monotonic() - start, note, checks=c), _said_missing())
    except (LoadError, OSError) as exc:
        n, c = undecided, len(plan.props)
        return _done(reach, SolverPass(n, 0, 0, n, time.monotonic() - start, str(exc), checks=c))
    if all(r.status in (Status.PROVED, Status.REFUTED) for r in results):
        _memo[memo_key] = tuple(results)  # only complete answers (a timeout may pass next time)
        if len(_memo) > MEMO_MAX:
            _memo.popitem(last=False)
    return apply_results(reach, plan, results, time.monotonic() - start)


_missing_said = False


def _said_missing() -> bool:
    global _missing_said
    said, _missing_said = _missing_said, True
    return said


def _done(reach: Reach, result: SolverPass, quiet: bool = False) -> SolverPass:
    reach.solver = result
    if result.undecided == 0:
        return result
    if result.unknown:
        (log.info if quiet else log.warning)(
            "ListTools by policy: %d of %d undecided (principal class, action) pair(s) stay shown by "
            "caution (%s); %d hidden by the solver, %d shown with a witness, %.2f s",
            result.unknown,
            result.undecided,
            result.note or "no answer within the time limit",
            result.hidden,
            result.witnessed,
            result.seconds,
        )
    else:
        log.info(
            "ListTools by policy: %d undecided pair(s) settled by the solver in %d check(s) "
            "(%d hidden, %d shown), %.2f s",
            result.undecided,
            result.checks,
            result.hidden,
            result.witnessed,
            result.seconds,
        )
    return result


__all__ = ["Plan", "SolverPass", "apply_results", "plan_checks", "settle_reach"]
