"""``callgate policy prove``: each property kind proved and refuted over every request, every
counterexample replayed through cedarpy and the compiled core, the example properties proved.

The prover (native/prove/, scripts/prove) and cvc5 1.3.1 (PyPI bindings behind
callgate/policy/prove/smtdriver.py, scripts/solver) are real and installed by the project's scripts
before the first test (tests/markers.py, marker ``prove``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.base.errors import LoadError
from callgate.base.model import Effect
from callgate.native import load_native
from callgate.policy.prove.properties import Kind, load_properties
from callgate.policy.prove.replay import Core, replay
from callgate.policy.prove.runner import (
    BIN_ENV,
    CedarSource,
    PropertyResult,
    ProverUnavailable,
    Status,
    run_checks,
)
from callgate.policy.prove.smtdriver import commands
from tests.markers import Needs, require

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.prove

SCHEMA = """
entity Role;
entity User in [Role] { tenant: String };
entity Resource { kind: String, name: String, tenant: String };
action "doc.read" appliesTo {
  principal: User, resource: Resource,
  context: { tenant: String, tool: String, args: { path: String } }
};
action "doc.delete" appliesTo {
  principal: User, resource: Resource,
  context: { tenant: String, tool: String, args: { path: String, count: Long } }
};
"""

BASE = """
@id("read-own-tenant")
permit (principal, action == Action::"doc.read", resource)
when { principal.tenant == context.tenant && resource.tenant == context.tenant };

@id("delete-confirmed")
@confirm("deleting needs the user's confirmation")
permit (principal, action == Action::"doc.delete", resource)
when { principal.tenant == context.tenant };

@id("delete-many-forbidden")
forbid (principal, action == Action::"doc.delete", resource)
when { context.args.count > 10 };
"""


def _script(name: str) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / name), "path"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/{name} path failed: {done.stderr[-2000:]}", pytrace=False)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def prover() -> Iterator[None]:
    """The prover binary and the solver, by the project's scripts (never a skip)."""
    require(Needs.PROVE)
    binary, solver = _script("prove"), _script("solver")
    saved = {k: os.environ.get(k) for k in (BIN_ENV, "CVC5")}
    os.environ[BIN_ENV], os.environ["CVC5"] = binary, solver
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _policy_dir(tmp: Path, policies: str, props: str, schema: str = SCHEMA) -> Path:
    cedar = tmp / "policies" / "cedar"
    cedar.mkdir(parents=True, exist_ok=True)
    (cedar / "policies.cedar").write_text(textwrap.dedent(policies))
    (cedar / "schema.cedarschema").write_text(textwrap.dedent(schema))
    (cedar / "entities.json").write_text("[]")
    (tmp / "policies" / "properties.toml").write_text(textwrap.dedent(props))
    return tmp / "policies"


def _prove(
    tmp: Path, policies: str, props: str, **kw: object
) -> tuple[CedarSource, dict[str, PropertyResult]]:
    pdir = _policy_dir(tmp, policies, props)
    source = CedarSource.load(pdir / "cedar")
    results = run_checks(load_properties(pdir / "properties.toml"), source, **kw)  # type: ignore[arg-type]
    return source, {r.prop.name: r for r in results}


def _replayed(source: CedarSource, r: PropertyResult) -> dict[Core, Effect]:
    """Replay ``r``'s counterexample on both engines; each must give an offending answer."""
    assert r.status is Status.REFUTED and r.counterexample is not None, r
    got = replay(r.counterexample, source.policies, source.schema, source.shadow)
    cores = {x.core: x.decision for x in got}
    assert Core.PYTHON in cores
    if load_native() is not None:
        assert Core.NATIVE in cores  # the compiled core replays it too
    for core, decision in cores.items():
        if r.counterexample.offending:
            assert decision.effect in r.counterexample.offending, (core, decision, r.counterexample)
    return {c: d.effect for c, d in cores.items()}


# --- the solver driver ---------------------------------------------------------------------------


def test_driver_cuts_whole_commands() -> None:
    text = (
        '(set-logic ALL) ; a comment (\n(assert (= s "a""(b"))\n(declare-const |x (y| Int)\n(check-sat\n)\n'
    )
    assert list(commands(io.StringIO(text))) == [
        "(set-logic ALL)",
        '(assert (= s "a""(b"))',
        "(declare-const |x (y| Int)",
        "(check-sat\n)",
    ]


def test_solver_script_installs_a_working_cvc5(prover: None) -> None:
    script = (
        "(set-option :produce-models true)\n(set-logic ALL)\n(declare-const x Int)\n"
        "(assert (> x 41))\n(check-sat)\n(get-model)\n(reset)\n(set-option :produce-models true)\n"
        "(set-logic ALL)\n(declare-const x Int)\n(assert (and (> x 1) (< x 1)))\n(check-sat)\n"
    )
    done = subprocess.run(
        [os.environ["CVC5"], "--lang", "smt", "--tlimit-per=10000"],
        input=script,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "sat" and lines[-1] == "unsat"
    assert "(define-fun x () Int 42)" in done.stdout


# --- each kind, proved and refuted ---------------------------------------------------------------

PROPS_SAFE = """
[[property]]
name = "tenant-isolation"
kind = "never_allowed"
when = "principal.tenant != context.tenant"

[[property]]
name = "delete-needs-confirm"
kind = "never_allowed_without_confirm"
actions = ["doc.delete"]

[[property]]
name = "many-deletes-denied"
kind = "always_denied"
actions = ["doc.delete"]
when = "context.args.count > 10"

[[property]]
name = "no-errors"
kind = "never_errors"
"""


def test_each_kind_proved(prover: None, tmp_path: Path) -> None:
    _, results = _prove(tmp_path, BASE, PROPS_SAFE)
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(results, Status.PROVED)
    assert len(results) == 4


LOOSE = """
@id("read-any")
permit (principal, action == Action::"doc.read", resource);

@id("delete-admin")
permit (principal in Role::"admin", action == Action::"doc.delete", resource)
when { context.args.count * 1000 > 0 };

@id("delete-confirmed")
@confirm("deleting needs the user's confirmation")
permit (principal, action == Action::"doc.delete", resource)
when { principal.tenant == context.tenant };

@id("delete-very-many-forbidden")
forbid (principal, action == Action::"doc.delete", resource)
when { context.args.count > 100 };
"""


def test_each_kind_refuted_and_replayed(prover: None, tmp_path: Path) -> None:
    source, results = _prove(tmp_path, LOOSE, PROPS_SAFE)
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(results, Status.REFUTED)
    # another tenant's session reads: ALLOW on both engines
    iso = results["tenant-isolation"].counterexample
    assert iso is not None and iso.context["tenant"] != _principal_tenant(iso)
    assert set(_replayed(source, results["tenant-isolation"]).values()) == {Effect.ALLOW}
    # an admin's delete within the session's tenant also matches the @confirm permit (CONFIRM);
    # across tenants only the admin permit does: ALLOW without confirmation
    cex = results["delete-needs-confirm"].counterexample
    assert cex is not None and cex.context["tenant"] != _principal_tenant(cex)
    assert set(_replayed(source, results["delete-needs-confirm"]).values()) == {Effect.ALLOW}
    many = results["many-deletes-denied"].counterexample
    assert many is not None and 10 < int(many.context["args"]["count"]) <= 100
    assert set(_replayed(source, results["many-deletes-denied"]).values()) <= {Effect.ALLOW, Effect.CONFIRM}
    # the overflow of count * 1000: a policy error, a fail-closed deny naming the policy
    err = results["no-errors"]
    assert err.counterexample is not None and err.counterexample.policy == "delete-admin"
    for x in replay(err.counterexample, source.policies, source.schema):
        assert x.decision.effect is Effect.DENY and x.decision.error_code == "policy_evaluation_error"


def _principal_tenant(cex: object) -> object:
    from callgate.policy.prove.runner import Counterexample

    assert isinstance(cex, Counterexample)
    for e in cex.entities:
        if e.get("uid") == dict(cex.principal):
            return (e.get("attrs") or {}).get("tenant")
    return None


def test_set_relations(prover: None, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "any-read.cedar").write_text(
        '@id("read-any")\npermit (principal, action == Action::"doc.read", resource);\n'
    )
    (tmp_path / "other" / "deletes.cedar").write_text(
        '@id("delete-all")\npermit (principal, action == Action::"doc.delete", resource);\n'
    )
    (tmp_path / "other" / "same.cedar").write_text(BASE.replace("read-own-tenant", "renamed"))
    props = """
    [[property]]
    name = "implies-any-read"
    kind = "implies"
    other = "../other/any-read.cedar"
    actions = ["doc.read"]

    [[property]]
    name = "any-read-implies-base"
    kind = "implies"
    other = "../other/any-read.cedar"
    actions = ["doc.read"]

    [[property]]
    name = "equivalent-renamed"
    kind = "equivalent"
    other = "../other/same.cedar"

    [[property]]
    name = "equivalent-any-read"
    kind = "equivalent"
    other = "../other/any-read.cedar"

    [[property]]
    name = "disjoint-from-deletes"
    kind = "disjoint"
    other = "../other/deletes.cedar"
    actions = ["doc.read"]

    [[property]]
    name = "disjoint-from-any-read"
    kind = "disjoint"
    other = "../other/any-read.cedar"
    """
    # "any-read-implies-base" is checked with the sets swapped: the other is the base
    pdir = _policy_dir(tmp_path, BASE, props)
    base = CedarSource.load(pdir / "cedar")
    got = {r.prop.name: r for r in run_checks(load_properties(pdir / "properties.toml"), base)}
    assert got["implies-any-read"].status is Status.PROVED
    assert got["equivalent-renamed"].status is Status.PROVED
    assert got["disjoint-from-deletes"].status is Status.PROVED
    assert got["equivalent-any-read"].status is Status.REFUTED
    assert got["disjoint-from-any-read"].status is Status.REFUTED
    assert set(_replayed(base, got["disjoint-from-any-read"]).values()) == {Effect.ALLOW}
    # any-read implies the base? refuted: a read across tenants, which the base denies
    (pdir / "cedar" / "policies.cedar").write_text((tmp_path / "other" / "any-read.cedar").read_text())
    (tmp_path / "other" / "base.cedar").write_text(BASE)
    (pdir / "properties.toml").write_text(
        '[[property]]\nname = "looser"\nkind = "implies"\nother = "../other/base.cedar"\n'
    )
    loose = CedarSource.load(pdir / "cedar")
    (r,) = run_checks(load_properties(pdir / "properties.toml"), loose)
    assert r.status is Status.REFUTED
    assert set(_replayed(loose, r).values()) == {Effect.ALLOW}
    assert r.counterexample is not None
    for x in replay(r.counterexample, BASE, base.schema):
        assert x.decision.effect is Effect.DENY  # ... and the other set denies it


def test_no_looser_than_a_revision(prover: None, tmp_path: Path) -> None:
    props = '[[property]]\nname = "no-looser"\nkind = "no_looser_than"\nrevision = "HEAD"\n'
    pdir = _policy_dir(tmp_path, BASE, props)
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    source = CedarSource.load(pdir / "cedar")
    (r,) = run_checks(load_properties(pdir / "properties.toml"), source)
    assert r.status is Status.PROVED
    # the confirmation dropped from deletes: looser (ALLOW where HEAD said CONFIRM)
    (pdir / "cedar" / "policies.cedar").write_text(
        BASE.replace('@confirm("deleting needs the user\'s confirmation")\n', "")
    )
    source = CedarSource.load(pdir / "cedar")
    (r,) = run_checks(load_properties(pdir / "properties.toml"), source)
    assert r.status is Status.REFUTED
    assert set(_replayed(source, r).values()) == {Effect.ALLOW}
    assert r.counterexample is not None and r.counterexample.action["id"] == "doc.delete"


def test_shadow_policies_are_not_enforced_in_the_model(prover: None, tmp_path: Path) -> None:
    shadow = (
        BASE
        + '\n@id("read-any-shadow")\n@shadow\npermit (principal, action == Action::"doc.read", resource);\n'
    )
    props = (
        '[[property]]\nname = "iso"\nkind = "never_allowed"\nwhen = "principal.tenant != context.tenant"\n'
    )
    _, results = _prove(tmp_path, shadow, props)
    assert results["iso"].status is Status.PROVED
    # the same policy enforcing: refuted
    _, results = _prove(tmp_path, shadow.replace("@shadow\n", ""), props)
    assert results["iso"].status is Status.REFUTED


# --- never "proved" without an answer ------------------------------------------------------------


def test_no_answer_in_time_is_unknown(prover: None, tmp_path: Path) -> None:
    _, results = _prove(tmp_path, BASE, PROPS_SAFE, wall_seconds=0.01)
    assert {r.status for r in results.values()} == {Status.UNKNOWN}


HARD = """
@id("square-plus")
permit (principal, action == Action::"doc.delete", resource)
when { context.args.count > 1 && context.args.count < 4294967296
       && context.args.count * (context.args.count + 2) == 1000006000009 };
"""


def test_a_solver_timeout_is_unknown(prover: None, tmp_path: Path) -> None:
    """Bit-vector multiplication the solver cannot settle in 1 ms: unknown, never proved."""
    _, results = _prove(
        tmp_path, HARD, '[[property]]\nname = "hard"\nkind = "never_allowed"\n', solver_timeout_ms=1
    )
    assert results["hard"].status is Status.UNKNOWN and "unknown" in results["hard"].detail


def test_without_a_solver_prove_says_so(
    prover: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CVC5", str(tmp_path / "no-such-cvc5"))
    with pytest.raises(ProverUnavailable, match="no SMT solver"):
        _prove(tmp_path, BASE, PROPS_SAFE)
    pdir = tmp_path / "policies"
    (tmp_path / "callgate.toml").write_text('[policy]\nengine = "cedar"\ndir = "policies"\n')
    done = _cli(tmp_path, "policy", "prove", "-c", str(tmp_path / "callgate.toml"))
    assert done.returncode == 2 and "no SMT solver" in done.stderr and "proved" not in done.stdout
    assert pdir.exists()


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "callgate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


# --- the properties file -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (
            '[[property]]\nname = "a"\nkind = "never_allowed"\n\n[[property]]\nname = "b"\nkind = "sometimes"\n',
            5,
            "kind",
        ),
        ('[[property]]\nname = "a"\nkind = "implies"\n', 1, "'other' is a required property"),
        ('[[property]]\nname = "a"\nkind = "never_errors"\nrevision = "HEAD"\n', 1, "revision"),
        (
            '[[property]]\nname = "a"\nkind = "never_errors"\n[[property]]\nname = "a"\nkind = "never_errors"\n',
            4,
            "duplicate",
        ),
        ('[[property]]\nname = "a"\nkind = \n', 3, "TOML"),
        ('[[property]]\nname = "a"\nkind = "never_allowed"\nprincipals = ["admin"]\n', 1, "principals.0"),
    ],
)
def test_properties_errors_name_file_and_line(tmp_path: Path, text: str, where: int, what: str) -> None:
    path = tmp_path / "properties.toml"
    path.write_text(text)
    with pytest.raises(LoadError) as err:
        load_properties(path)
    assert f"{path}:{where}" in str(err.value) and what in str(err.value)


def test_a_scope_that_does_not_type_check_is_an_error(prover: None, tmp_path: Path) -> None:
    props = '[[property]]\nname = "bad"\nkind = "never_allowed"\nwhen = "context.args.nope > 1"\n'
    _, results = _prove(tmp_path, BASE, props)
    assert results["bad"].status is Status.ERROR


# --- the example policies ------------------------------------------------------------------------


def test_the_example_properties_are_proved(prover: None) -> None:
    props = load_properties(ROOT / "policies" / "properties.toml")
    assert {p.kind for p in props} >= {
        Kind.NEVER_ALLOWED,
        Kind.NEVER_ALLOWED_WITHOUT_CONFIRM,
        Kind.NEVER_ERRORS,
    }
    assert any(p.guard for p in props)
    results = run_checks(props, CedarSource.load(ROOT / "policies" / "cedar"))
    assert {r.prop.name: r.status for r in results} == {p.name: Status.PROVED for p in props}


def test_cli_prints_a_refutation_with_its_replay(prover: None, tmp_path: Path) -> None:
    props = (
        '[[property]]\nname = "resource-tenant"\nkind = "never_allowed"\n'
        'actions = ["weather.read"]\nwhen = "resource.tenant != principal.tenant"\n'
    )
    (tmp_path / "props.toml").write_text(props)
    done = _cli(ROOT, "policy", "prove", "--properties", str(tmp_path / "props.toml"))
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("refuted  resource-tenant")
    assert 'action Action::"weather.read"' in done.stdout
    assert "replayed on cedarpy: ALLOW (weather-read-own-tenant)" in done.stdout
    if load_native() is not None:
        assert "replayed on compiled core: ALLOW (weather-read-own-tenant)" in done.stdout
    done = _cli(ROOT, "policy", "prove", "--json", "--properties", str(tmp_path / "props.toml"))
    doc = json.loads(done.stdout)
    assert doc["status"] == "refuted" and doc["counterexample"]["action"]["id"] == "weather.read"
    assert set(doc["replayed"].values()) == {"allow"}
    done = _cli(ROOT, "policy", "prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("proved ") == 4


# --- the reload guard and check --against --------------------------------------------------------

CONFIRM_LINE = '@confirm("creating a calendar event needs the user\'s confirmation")\n'


def test_a_reload_that_loosens_a_guard_property_is_refused(prover: None, tmp_path: Path) -> None:
    """Through a real sidecar's file watcher: dropping the confirmation of calendar.create is
    refused (the serving revision stays), a change that loosens nothing guarded is taken."""
    import shutil

    from callgate.config import PolicyConfig
    from callgate.policy.lifecycle import SNAPSHOT_HEALTH_SERVICE
    from tests.conftest import start_sidecar, stop_sidecar
    from tests.test_lifecycle import NOT_SERVING, SERVING, health, wait_for

    # without tests/ (its CONFIRM cases would refuse the loosened set before the guard does)
    shutil.copytree(ROOT / "policies", tmp_path / "policies", ignore=shutil.ignore_patterns("tests"))
    cedar = tmp_path / "policies" / "cedar" / "policies.cedar"
    good = cedar.read_text()
    assert CONFIRM_LINE in good
    policy = PolicyConfig(watch=True, watch_interval_ms=50, reload_quiet_ms=200, reload_prove=True)
    sc, tmp = start_sidecar(tmp_path / "policies", policy=policy)
    try:
        first = sc.sidecar.components.gate.snapshot.revision
        cedar.write_text(good.replace(CONFIRM_LINE, ""))
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING, timeout=60)
        lc = sc.sidecar.lifecycle
        assert lc is not None
        assert "guard property calendar-create-needs-confirm" in lc.last_error, lc.last_error
        assert "refuted" in lc.last_error and "calendar.create" in lc.last_error
        assert health(sc) == SERVING and sc.sidecar.components.gate.snapshot.revision == first
        # back to the serving text: good again
        cedar.write_text(good)
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING, timeout=60)
        # a forbid more: nothing loosens, the reload is taken
        cedar.write_text(
            good + '\n@id("no-weather-for-bob")\nforbid (principal == User::"bob", action, resource);\n'
        )
        wait_for(lambda: sc.sidecar.components.gate.snapshot.revision != first, timeout=60)
        assert lc.last_error == "" and health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING
    finally:
        stop_sidecar(sc, tmp)


def test_check_against_a_revision_prints_what_loosens(prover: None, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "policies", tmp_path / "policies", ignore=shutil.ignore_patterns("tests"))
    (tmp_path / "callgate.toml").write_text('[policy]\nengine = "cedar"\ndir = "policies"\n')
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    done = _cli(tmp_path, "check", "--offline", "--against", "HEAD")
    assert done.returncode == 0 and "proved   no-looser-than-HEAD" in done.stdout, done.stdout + done.stderr
    cedar = tmp_path / "policies" / "cedar" / "policies.cedar"
    cedar.write_text(cedar.read_text().replace(CONFIRM_LINE, ""))
    done = _cli(tmp_path, "check", "--offline", "--against", "HEAD")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "refuted  no-looser-than-HEAD" in done.stdout and 'action Action::"calendar.create"' in done.stdout
    assert "replayed on cedarpy: ALLOW (calendar-create-scheduler)" in done.stdout


def test_reload_prove_needs_the_cedar_engine(tmp_path: Path) -> None:
    from callgate.config import load_config

    cfg = tmp_path / "callgate.toml"
    cfg.write_text('[policy]\nengine = "rego"\ndir = "policies"\nreload_prove = true\n')
    with pytest.raises(LoadError, match="reload_prove proves Cedar policies"):
        load_config(cfg)


def test_the_default_prover_and_solver_paths_are_where_the_scripts_install_them() -> None:
    """Without CALLGATE_PROVE_BIN / CVC5 a checkout's ``callgate policy prove`` looks in the
    checkout's .cache/bin, where scripts/prove and scripts/solver put them (a path computed from
    the package once pointed into callgate/ after the package moved)."""
    from callgate.policy.prove import runner

    assert (runner.REPO / "scripts" / "prove").is_file()
    assert (runner.REPO / "scripts" / "solver").is_file()
    assert (runner.REPO / "callgate" / "policy" / "prove" / "runner.py").is_file()
