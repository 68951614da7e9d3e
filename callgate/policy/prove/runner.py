"""Properties into checks of the symbolic compiler, run by the ``callgate-prove`` process.

The process (native/prove/, built by ``scripts/prove``) reads one JSON job and writes one JSON line
per check as it finishes; the solver it starts is the executable named by ``CVC5``
(``scripts/solver``). A wall-clock bound covers the whole run: the checks without an answer by then
are *unknown*, as are the solver's own timeouts. Nothing unknown is ever reported as proved.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from callgate.base.errors import LoadError, policy_invalid
from callgate.base.model import Effect
from callgate.policy.declare import declared
from callgate.policy.engines.cedar import policy_files
from callgate.policy.engines.cedar_declare import cedar_schema
from callgate.policy.prove import DEFAULT_SOLVER_TIMEOUT_MS, DEFAULT_WALL_SECONDS
from callgate.policy.prove.properties import Kind, Property, View

REPO = Path(__file__).resolve().parents[3]
"""The checkout (callgate/policy/prove/runner.py -> the root) whose .cache/bin scripts/prove and
scripts/solver install into."""
BIN_ENV = "CALLGATE_PROVE_BIN"
SOLVER_ENV = "CVC5"


class Status(StrEnum):
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"
    """The solver gave no answer in time (or failed): never read as proved."""
    ERROR = "error"
    """The property cannot be checked as written (a scope that does not type-check, ...)."""


class ProverUnavailable(Exception):
    """The prover binary or the solver is not installed: ``prove`` says so and exits non-zero."""


@dataclass(frozen=True, slots=True)
class Counterexample:
    """A concrete request (and entity store) on which the property fails."""

    principal: Mapping[str, str]
    action: Mapping[str, str]
    resource: Mapping[str, str]
    context: Mapping[str, Any]
    entities: Sequence[Mapping[str, Any]]
    policy: str = ""
    """never_errors: the ``@id`` of the policy that errors."""
    offending: tuple[Effect, ...] = ()
    """The answers of callgate on this request that break the property (what a replay shows);
    empty when it depends on which side differs (equivalent)."""

    def request_json(self) -> dict[str, Any]:
        return {
            "principal": dict(self.principal),
            "action": dict(self.action),
            "resource": dict(self.resource),
            "context": dict(self.context),
            "entities": [dict(e) for e in self.entities],
        }


@dataclass(frozen=True, slots=True)
class PropertyResult:
    prop: Property
    status: Status
    detail: str = ""
    counterexample: Counterexample | None = None


@dataclass(frozen=True, slots=True)
class CedarSource:
    """The policy set the properties are about: the texts callgate loads (every ``*.cedar`` file
    joined, the schema as declared: hand-written or from the ToolSpecs) and the shadow ids."""

    directory: Path
    policies: str
    schema: str
    shadow: tuple[str, ...] = ()

    @classmethod
    def load(cls, cedar_dir: Path, shadow: Sequence[str] = ()) -> CedarSource:
        sch_path = cedar_dir / "schema.cedarschema"
        try:
            policies = "\n".join(p.read_text(encoding="utf-8") for p in policy_files(cedar_dir))
            hand = sch_path.read_text(encoding="utf-8") if sch_path.exists() else None
        except OSError as exc:
            raise policy_invalid(f"cannot read: {exc.strerror}", source=str(exc.filename)) from None
        schema = cedar_schema(declared(cedar_dir.parent), hand)
        return cls(cedar_dir, policies, schema, tuple(shadow))


def policies_at(path: Path, revision: str) -> str:
    """The ``*.cedar`` text of ``path`` (a folder or one file) at git ``revision``."""
    path = path.resolve()
    folder = path if path.is_dir() else path.parent

    def git(*args: str, cwd: Path = folder) -> str:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False, timeout=30
        )
        if done.returncode != 0:
            raise policy_invalid(
                f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}", source=f"{path}@{revision}"
            )
        return done.stdout

    top = Path(git("rev-parse", "--show-toplevel").strip())
    rel = path.relative_to(top).as_posix()
    names = (
        [rel] if path.is_file() else git("ls-tree", "--name-only", revision, "--", rel + "/", cwd=top).split()
    )
    cedar = sorted(
        (n for n in names if n.endswith(".cedar")), key=lambda n: (not n.endswith("/policies.cedar"), n)
    )
    if not cedar:
        raise policy_invalid(f"no .cedar file at revision {revision}", source=str(path))
    return "\n".join(git("show", f"{revision}:{n}") for n in cedar)


def other_text(path: Path) -> str:
    """The ``*.cedar`` text of an ``other`` set: one file, or a folder of them."""
    try:
        if path.is_dir():
            return "\n".join(p.read_text(encoding="utf-8") for p in policy_files(path))
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise policy_invalid(f"cannot read: {exc.strerror}", source=str(path)) from None


ADMITTED = (Effect.ALLOW, Effect.CONFIRM)
_VIEW_EFFECTS = {View.ADMITTED: ADMITTED, View.ALLOWED: (Effect.ALLOW,), View.CONFIRMED: (Effect.CONFIRM,)}


@dataclass(frozen=True, slots=True)
class _Check:
    prop: Property
    kind: str
    view: View
    other: str | None = None
    other_view: View = View.ADMITTED
    offending: tuple[Effect, ...] = ()

    def job(self, name: str, source: CedarSource) -> dict[str, Any]:
        def spec(text: str, view: View) -> dict[str, Any]:
            return {"text": text, "view": view.value, "shadow_ids": list(source.shadow)}

        out: dict[str, Any] = {
            "name": name,
            "kind": self.kind,
            "set": spec(source.policies, self.view),
            "scope": self.prop.scope(),
            "actions": list(self.prop.actions) if self.prop.actions is not None else None,
        }
        if self.other is not None:
            out["other"] = spec(self.other, self.other_view)
        return out


def checks_for(prop: Property, source: CedarSource, against: str = "") -> list[_Check]:
    """The symbolic compiler's checks whose answers together decide ``prop``.

    ``against`` overrides a ``no_looser_than`` property's revision (``callgate check --against``)."""
    k = prop.kind
    if k in (Kind.NEVER_ALLOWED, Kind.ALWAYS_DENIED):
        return [_Check(prop, "always_denies", View.ADMITTED, offending=ADMITTED)]
    if k is Kind.NEVER_ALLOWED_WITHOUT_CONFIRM:
        return [_Check(prop, "always_denies", View.ALLOWED, offending=(Effect.ALLOW,))]
    if k is Kind.NEVER_ERRORS:
        return [_Check(prop, "never_errors", View.ADMITTED, offending=(Effect.DENY,))]
    if k in (Kind.IMPLIES, Kind.EQUIVALENT, Kind.DISJOINT):
        assert prop.other is not None  # the JSON Schema requires it
        other = other_text(prop.other)
        offending = () if k is Kind.EQUIVALENT else _VIEW_EFFECTS[prop.view]
        return [_Check(prop, k.value, prop.view, other, prop.view, offending)]
    # NO_LOOSER_THAN: nothing newly admitted, nothing newly allowed without confirmation
    old = policies_at(source.directory, against or prop.revision)
    return [
        _Check(prop, "implies", View.ADMITTED, old, View.ADMITTED, ADMITTED),
        _Check(prop, "implies", View.ALLOWED, old, View.ALLOWED, (Effect.ALLOW,)),
    ]


def prover_binary() -> Path:
    env = os.environ.get(BIN_ENV)
    path = Path(env) if env else REPO / ".cache" / "bin" / "callgate-prove"
    if not (path.is_file() and os.access(path, os.X_OK)):
        if env or (REPO / "scripts" / "prove").is_file():  # a checkout, or the variable's path
            raise ProverUnavailable(
                f"the prover binary is not built ({path}): run scripts/prove build (needs cargo), "
                f"or set {BIN_ENV}"
            )
        raise ProverUnavailable(  # an installed wheel: no checkout to build it in
            f"the prover binary is not part of the installed package: build it in a checkout "
            f"(scripts/prove build, needs cargo) and set {BIN_ENV} to it (docs/PROVE.md)"
        )
    return path


def solver_path() -> Path:
    env = os.environ.get(SOLVER_ENV)
    path = Path(env) if env else REPO / ".cache" / "bin" / "cvc5"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ProverUnavailable(
            f"no SMT solver ({path}): run scripts/solver path (cvc5 1.3.1), or set {SOLVER_ENV} "
            "to a cvc5 1.3.1 executable"
        )
    return path


def _cex(raw: Mapping[str, Any], offending: tuple[Effect, ...]) -> Counterexample:
    entities = raw.get("entities") or []
    return Counterexample(
        principal=raw["principal"],
        action=raw["action"],
        resource=raw["resource"],
        context=raw.get("context") or {},
        entities=[e for e in entities if e.get("uid", {}).get("type") != "Action"],
        policy=raw.get("policy") or "",
        offending=offending,
    )


def run_checks(
    props: Sequence[Property],
    source: CedarSource,
    *,
    against: str = "",
    solver_timeout_ms: int = DEFAULT_SOLVER_TIMEOUT_MS,
    wall_seconds: float = DEFAULT_WALL_SECONDS,
) -> list[PropertyResult]:
    """Decide every property. Raises :class:`ProverUnavailable` when the binary or the solver is
    missing, :class:`LoadError` when a property's other set or revision cannot be read."""
    return run_checks_each(
        [(p, source) for p in props],
        source.schema,
        against=against,
        solver_timeout_ms=solver_timeout_ms,
        wall_seconds=wall_seconds,
    )


def run_checks_each(
    items: Sequence[tuple[Property, CedarSource]],
    schema: str,
    *,
    against: str = "",
    solver_timeout_ms: int = DEFAULT_SOLVER_TIMEOUT_MS,
    wall_seconds: float = DEFAULT_WALL_SECONDS,
) -> list[PropertyResult]:
    """:func:`run_checks` with each property about its own policy set (one ``schema`` for all):
    one prover process for many sets (ListTools by policy's solver pass, its tests)."""
    binary, solver = prover_binary(), solver_path()
    planned: list[tuple[str, _Check, CedarSource]] = []
    failed: dict[int, str] = {}
    for k, (prop, source) in enumerate(items):
        try:
            checks = checks_for(prop, source, against)
        except LoadError as exc:
            failed[k] = str(exc)
            continue
        planned += [(f"{k}#{i}", c, source) for i, c in enumerate(checks)]
    job = {
        "schema": schema,
        "solver_timeout_ms": solver_timeout_ms,
        "checks": [c.job(name, source) for name, c, source in planned],
    }
    answers = _run(binary, solver, json.dumps(job), wall_seconds) if planned else {}
    by_item: dict[int, list[tuple[Mapping[str, Any] | None, _Check]]] = {}
    for name, c, _ in planned:
        by_item.setdefault(int(name.split("#", 1)[0]), []).append((answers.get(name), c))
    results: list[PropertyResult] = []
    for k, (prop, _) in enumerate(items):
        if k in failed:
            results.append(PropertyResult(prop, Status.ERROR, failed[k]))
        else:
            results.append(_combine(prop, by_item.get(k, [])))
    return results


def _combine(prop: Property, parts: list[tuple[Mapping[str, Any] | None, _Check]]) -> PropertyResult:
    unknown = ""
    for answer, check in parts:
        if answer is None:
            unknown = unknown or "no answer within the time limit"
            continue
        status = answer.get("status")
        if status == Status.REFUTED.value:
            return PropertyResult(prop, Status.REFUTED, "", _cex(answer["counterexample"], check.offending))
        if status == Status.ERROR.value:
            return PropertyResult(prop, Status.ERROR, str(answer.get("detail", "")))
        if status != Status.PROVED.value:
            unknown = unknown or str(answer.get("detail", "the solver answered unknown"))
    if unknown:
        return PropertyResult(prop, Status.UNKNOWN, unknown)
    return PropertyResult(prop, Status.PROVED)


@dataclass
class _Output:
    lines: list[str] = field(default_factory=list)


def _run(binary: Path, solver: Path, job: str, wall_seconds: float) -> dict[str, Mapping[str, Any]]:
    env = dict(os.environ, CVC5=str(solver))
    proc = subprocess.Popen(
        [str(binary)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the solver is its child: a timeout ends both
    )
    try:
        out, err = proc.communicate(job, timeout=wall_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    if proc.returncode == 3:
        raise ProverUnavailable(err.strip() or "the solver could not be started")
    if proc.returncode not in (0, -9):
        raise ProverUnavailable(f"the prover failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    answers: dict[str, Mapping[str, Any]] = {}
    for line in out.splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut by the time limit: what follows has no answer
        answers[str(doc.get("name"))] = doc
    return answers
