"""One contract, proven on all three engines: every request of tests/data/parity_cases.json goes
through the Cedar engine (policies/cedar), the embedded Rego engine (regopy, policies/rego) and a
real OPA server (policies/rego, started by tests/opa_fixture.py), and all three must give the
expected effect, the same reason codes, the same policy ids and the same fault code."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.base.model import AuthzRequest, Decision, Subject
from callgate.policy.engines.base import Engine
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir
from callgate.policy.engines.opa import OpaEngine
from callgate.policy.engines.rego import RegoEngine
from tests.opa_fixture import OpaServer, opa_factory, opa_server  # noqa: F401 - the fixtures
from tests.test_engine_rego import shadow_copy, weather

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "policies"
TABLE = json.loads(
    (Path(__file__).resolve().parent / "data" / "parity_cases.json").read_text(encoding="utf-8")
)
CASES: list[dict[str, Any]] = TABLE["cases"]


def request_of(case: dict[str, Any]) -> AuthzRequest:
    s = case["subject"]
    return AuthzRequest(
        subject=Subject(tenant=s["tenant"], id=s["id"]),
        capability=case["capability"],
        resource=case["resource"],
        context=case["context"],
    )


def summary(d: Decision) -> dict[str, Any]:
    """What must be identical across engines (messages may differ in wording)."""
    return {
        "effect": d.effect.value,
        "reasons": sorted([r.code, r.policy_id] for r in d.reasons),
        "error_code": d.error_code,
    }


def expected(case: dict[str, Any]) -> dict[str, Any]:
    reasons = sorted(list(r) for r in case["expect"]["reasons"])
    faults = {"policy_evaluation_error", "engine_error"}
    error_code = next((code for code, _ in reasons if code in faults), "")
    return {"effect": case["expect"]["effect"], "reasons": reasons, "error_code": error_code}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def engines(opa_server: OpaServer, loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, Engine]]:  # noqa: F811
    cedar = CedarEngine(load_cedar_dir(POLICIES / "cedar"))
    rego = RegoEngine.from_dir(POLICIES / "rego")
    # A generous timeout: this suite is about meaning, test_engine_opa.py about deadlines.
    opa = OpaEngine.from_dir(POLICIES / "rego", url=opa_server.url, timeout=5.0)
    ok, why = loop.run_until_complete(opa.readiness())
    assert ok, why
    assert opa.revision == rego.revision
    yield {"cedar": cedar, "rego": rego, "opa": opa}
    for e in (cedar, rego, opa):
        loop.run_until_complete(e.close())


def test_table_is_substantial() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)) >= 25
    assert {c["expect"]["effect"] for c in CASES} == {"allow", "deny", "confirm"}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_decision_on_every_engine(
    case: dict[str, Any], engines: dict[str, Engine], loop: asyncio.AbstractEventLoop
) -> None:
    req = request_of(case)
    decisions = {name: loop.run_until_complete(e.authorize_batch([req]))[0] for name, e in engines.items()}
    got = {name: summary(d) for name, d in decisions.items()}
    want = expected(case)
    assert got["cedar"] == want, f"cedar: {got['cedar']}"
    assert got["rego"] == got["cedar"], f"rego differs from cedar: {got['rego']}"
    assert got["opa"] == got["cedar"], f"opa differs from cedar: {got['opa']}"
    # rego-cpp and OPA run the same Rego: they must agree on every word, messages included
    assert decisions["rego"].reasons == decisions["opa"].reasons


def test_whole_table_as_one_batch(engines: dict[str, Engine], loop: asyncio.AbstractEventLoop) -> None:
    """Batches keep their order on every engine (OPA's requests run concurrently)."""
    reqs = [request_of(c) for c in CASES]
    results = {
        n: [summary(d) for d in loop.run_until_complete(e.authorize_batch(reqs))] for n, e in engines.items()
    }
    assert results["rego"] == results["cedar"] == results["opa"]
    assert results["cedar"] == [expected(c) for c in CASES]


def test_confirm_messages_match(engines: dict[str, Engine], loop: asyncio.AbstractEventLoop) -> None:
    """The @confirm text reaches the confirmer identically from every engine."""
    case = next(c for c in CASES if c["expect"]["effect"] == "confirm")
    msgs = {
        n: [r.message for r in loop.run_until_complete(e.authorize_batch([request_of(case)]))[0].reasons]
        for n, e in engines.items()
    }
    assert msgs["rego"] == msgs["opa"] == msgs["cedar"] != [""]


def test_rego_entities_are_cedars() -> None:
    """policies/rego/data.json holds the same users, tenants and roles as cedar/entities.json."""
    cedar = json.loads((POLICIES / "cedar" / "entities.json").read_text(encoding="utf-8"))
    rego = json.loads((POLICIES / "rego" / "data.json").read_text(encoding="utf-8"))["callgate"]["entities"]
    users = {
        e["uid"]["id"]: {
            "tenant": e["attrs"]["tenant"],
            "roles": sorted(p["id"] for p in e["parents"] if p["type"] == "Role"),
        }
        for e in cedar
        if e["uid"]["type"] == "User"
    }
    roles = {
        e["uid"]["id"]: sorted(p["id"] for p in e["parents"] if p["type"] == "Role")
        for e in cedar
        if e["uid"]["type"] == "Role"
    }
    assert {
        u: {"tenant": v["tenant"], "roles": sorted(v["roles"])} for u, v in rego["users"].items()
    } == users
    assert {r: sorted(v["parents"]) for r, v in rego["roles"].items()} == roles
    assert rego["resources"] == {} and not [e for e in cedar if e["uid"]["type"] == "Resource"]


def test_policy_ids_are_cedars() -> None:
    """Every Rego policy id is a Cedar @id and vice versa (the ids are the reasons callers see)."""
    import re

    cedar_ids = set(re.findall(r'@id\("([^"]+)"\)', (POLICIES / "cedar" / "policies.cedar").read_text()))
    rego_text = (POLICIES / "rego" / "policies.rego").read_text()
    rego_ids = set(re.findall(r'^(?:permit|forbid) contains "([^"]+)"', rego_text, re.MULTILINE))
    assert rego_ids == cedar_ids
    covered = {pid for c in CASES for _, pid in c["expect"]["reasons"] if pid}
    assert covered == cedar_ids, "every policy must decide at least one case of the table"


# -- shadow mode: the same shadow fields from every engine ----------------------------------------

PARIS = "no-weather-in-paris"
CEDAR_PARIS_FORBID = (
    '\n@id("no-weather-in-paris")\n{annotation}'
    'forbid (principal, action == Action::"weather.read", resource) when {{ resource.name == "Paris" }};\n'
)


def shadow_summary(d: Decision) -> dict[str, Any]:
    return {**summary(d), "shadow_effect": d.shadow_effect, "shadow_policy_ids": list(d.shadow_policy_ids)}


@pytest.mark.parametrize(
    "annotated,config,expect",
    [
        # policy file: Cedar's @shadow / Rego's data.callgate.shadow
        (True, (), {"Paris": ("allow", "deny", [PARIS]), "Lyon": ("allow", "", [])}),
        # the config's policy.shadow
        (False, (PARIS,), {"Paris": ("allow", "deny", [PARIS]), "Lyon": ("allow", "", [])}),
        # enforced: no shadow fields
        (False, (), {"Paris": ("deny", "", []), "Lyon": ("allow", "", [])}),
        # a permit in shadow mode: would allow where nothing else permits; a forbid decides alike
        (
            False,
            ("weather-read-own-tenant",),
            {"Paris": ("deny", "", []), "Lyon": ("deny", "allow", ["weather-read-own-tenant"])},
        ),
    ],
    ids=["annotated", "config", "enforced", "config-permit"],
)
def test_same_shadow_fields_on_every_engine(
    tmp_path: Path,
    opa_factory: Callable[..., OpaServer],  # noqa: F811
    annotated: bool,
    config: tuple[str, ...],
    expect: dict[str, tuple[str, str, list[str]]],
) -> None:
    """Cedar (a copy of policies/cedar with the forbid, ``@shadow`` when annotated), rego-cpp and
    OPA (a copy of policies/rego with the same forbid, in ``data.callgate.shadow`` when annotated)
    give the same enforced answer and the same shadow_effect / shadow_policy_ids."""
    cedar_dir = tmp_path / "cedar"
    shutil.copytree(POLICIES / "cedar", cedar_dir)
    text = (cedar_dir / "policies.cedar").read_text()
    annotation = '@shadow("trial")\n' if annotated else ""
    (cedar_dir / "policies.cedar").write_text(text + CEDAR_PARIS_FORBID.format(annotation=annotation))
    rego_dir = shadow_copy(tmp_path, [PARIS] if annotated else [])
    server = opa_factory(rego_dir)
    cedar = CedarEngine(load_cedar_dir(cedar_dir, shadow=config))
    rego = RegoEngine.from_dir(rego_dir, shadow=config, offload=False)
    opa = OpaEngine.from_dir(rego_dir, shadow=config, url=server.url, timeout=5.0)
    calendar = AuthzRequest(
        Subject("acme", "alice"),
        "calendar.create",
        "calendar:primary",
        {
            "tool": "calendar.create_event@v1",
            "args": {
                "calendar_id": "primary",
                "title": "t",
                "start": "2026-07-20T09:00:00+08:00",
                "duration_minutes": 30,
            },
        },
    )
    reqs = [weather("Paris"), weather("Lyon"), calendar]

    async def main() -> dict[str, list[Decision]]:
        try:
            ok, why = await opa.readiness()
            assert ok, why
            return {
                n: await e.authorize_batch(reqs) for n, e in (("cedar", cedar), ("rego", rego), ("opa", opa))
            }
        finally:
            await opa.close()

    got = asyncio.run(main())
    sums = {n: [shadow_summary(d) for d in ds] for n, ds in got.items()}
    assert sums["rego"] == sums["cedar"], sums
    assert sums["opa"] == sums["cedar"], sums
    for d, city in zip(got["cedar"], ("Paris", "Lyon"), strict=False):
        effect, shadow_effect, shadow_ids = expect[city]
        assert (d.effect.value, d.shadow_effect, list(d.shadow_policy_ids)) == (
            effect,
            shadow_effect,
            shadow_ids,
        ), city
    assert got["cedar"][2].effect.value == "confirm" and not got["cedar"][2].shadow_effect
    assert [d.reasons for d in got["rego"]] == [d.reasons for d in got["opa"]]
    assert rego.revision == opa.revision
