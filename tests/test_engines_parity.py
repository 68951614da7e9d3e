"""One contract, proven on all three engines: every request of tests/data/parity_cases.json goes
through the Cedar engine (policies/cedar), the embedded Rego engine (regopy, policies/rego) and a
real OPA server (policies/rego, started by tests/opa_fixture.py), and all three must give the
expected effect, the same reason codes, the same policy ids and the same fault code."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.engines.base import Engine
from sidecar.engines.cedar import CedarEngine, load_cedar_dir
from sidecar.engines.opa import OpaEngine
from sidecar.engines.rego import RegoEngine
from sidecar.model import AuthzRequest, Decision, Subject
from tests.opa_fixture import OpaServer, opa_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "policies"
TABLE = json.loads((Path(__file__).resolve().parent / "data" / "parity_cases.json").read_text(encoding="utf-8"))
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
    results = {n: [summary(d) for d in loop.run_until_complete(e.authorize_batch(reqs))] for n, e in engines.items()}
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
        e["uid"]["id"]: {"tenant": e["attrs"]["tenant"], "roles": sorted(p["id"] for p in e["parents"] if p["type"] == "Role")}
        for e in cedar
        if e["uid"]["type"] == "User"
    }
    roles = {
        e["uid"]["id"]: sorted(p["id"] for p in e["parents"] if p["type"] == "Role")
        for e in cedar
        if e["uid"]["type"] == "Role"
    }
    assert {u: {"tenant": v["tenant"], "roles": sorted(v["roles"])} for u, v in rego["users"].items()} == users
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
