"""OPA engine against real OPA servers (tests/opa_fixture.py; never a mock): the project's Rego
passes `opa test`, decisions, readiness bound to the policy revision, and every fault -- refused
connection, timeout, HTTP 500, undefined and malformed documents -- a fail-closed deny with a
stable code, reached without retries and without blocking the event loop."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callgate.base.errors import ErrorCode
from callgate.base.model import AuthzRequest, Effect, Subject
from callgate.policy.engines.opa import OpaEngine, parse_url
from callgate.policy.engines.rego_contract import (
    ENGINE_MALFORMED,
    ENGINE_TIMEOUT,
    ENGINE_UNAVAILABLE,
    ENGINE_UNDEFINED,
    load_rego_dir,
)
from tests.opa_fixture import OpaServer, free_port, opa_binary, opa_factory, opa_server  # noqa: F401
from tests.test_engine_rego import shadow_copy, weather

ROOT = Path(__file__).resolve().parents[1]
REGO = ROOT / "policies" / "rego"

# Misbehaving decision documents, served by a real OPA at their own paths. The package is
# outside `callgate`, so these modules never count towards the readiness revision.
FAULTS = """package faults

builtin_error := {"effect": "allow", "reasons": [{"code": "policy_permit", "policy_id": "p"}]} if {
\tto_number(input.capability) > 0
}

undefined := {"effect": "deny", "reasons": [{"code": "no_matching_permit"}]} if not input.subject

unknown_effect := {"effect": "permit", "reasons": [{"code": "policy_permit"}]}

no_reasons := {"effect": "allow", "reasons": []}

not_an_object := "allow"

bad_shadow := {"effect": "allow", "reasons": [{"code": "policy_permit"}], "shadow": {"effect": "deny", "policy_ids": "p"}}

conflict := "a" if input.subject

conflict := "b" if input.capability

# ~1 s of real evaluation: long enough to hit a short decision timeout
slow := {"effect": "allow", "reasons": [{"code": "policy_permit", "policy_id": "slow"}]} if {
\tcount([x | some x in numbers.range(1, 1500000); x % 7 == 0]) > 0
}
"""


def request(user: str = "alice", **args: Any) -> AuthzRequest:
    a = {"calendar_id": "primary", "title": "t", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 30}
    a.update(args)
    return AuthzRequest(
        Subject("acme", user),
        "calendar.create",
        "calendar:primary",
        {"tool": "calendar.create_event@v1", "args": a},
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def decide_once(engine: OpaEngine, req: AuthzRequest | None = None) -> Any:
    try:
        (d,) = await engine.authorize_batch([req or request()])
        return d
    finally:
        await engine.close()


@pytest.fixture(scope="module")
def faults_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.opa_fixture import start_opa

    d = tmp_path_factory.mktemp("opa-faults")
    (d / "faults.rego").write_text(FAULTS)
    server = start_opa(d)
    yield server
    server.stop()


@pytest.mark.opa
def test_opa_test_passes_on_the_project_policies() -> None:
    opa = opa_binary()
    r = subprocess.run([str(opa), "test", str(REGO), "-v"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "FAIL" not in r.stdout


@pytest.mark.opa
def test_opa_check_strict_and_fmt() -> None:
    opa = opa_binary()
    r = subprocess.run(
        [str(opa), "check", "--strict", str(REGO)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [str(opa), "fmt", "--list", "--fail", str(REGO)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, "not `opa fmt`-formatted: " + r.stdout + r.stderr


@pytest.mark.opa
def test_pinned_version() -> None:
    out = subprocess.run([str(opa_binary()), "version"], capture_output=True, text=True, timeout=30).stdout
    assert "Version: 1.22.3" in out.splitlines()


def test_decides_over_the_data_api(opa_server: OpaServer) -> None:  # noqa: F811
    async def main() -> list[Any]:
        e = OpaEngine.from_dir(REGO, url=opa_server.url, timeout=2.0)
        try:
            assert await e.ready()
            return await e.authorize_batch([request(), request(duration_minutes=481), request("bob")])
        finally:
            await e.close()

    confirm, forbid, nomatch = run(main())
    assert confirm.effect is Effect.CONFIRM and confirm.policy_ids == ("calendar-create-scheduler",)
    assert forbid.effect is Effect.DENY and forbid.policy_ids == ("calendar-max-duration",)
    assert nomatch.effect is Effect.DENY and [r.code for r in nomatch.reasons] == ["no_matching_permit"]
    assert confirm.engine == "opa"


def test_readiness_follows_the_policy_revision(opa_factory: Callable[..., OpaServer], tmp_path: Path) -> None:  # noqa: F811
    """NOT ready until the server serves exactly the engine's modules and data."""
    empty = opa_factory(None)
    changed = tmp_path / "rego"
    shutil.copytree(REGO, changed)
    (changed / "policies.rego").write_text((changed / "policies.rego").read_text().replace("> 480", "> 600"))

    async def main() -> None:
        e = OpaEngine.from_dir(REGO, url=empty.url)
        try:
            ok, why = await e.readiness()
            assert not ok and "missing" in why  # healthy, but no policies
            await e.load_policies()
            ok, why = await e.readiness()
            assert ok, why
            (d,) = await e.authorize_batch([request()])
            assert d.effect is Effect.CONFIRM
            # the server moves to another revision: this engine is no longer ready ...
            newer = OpaEngine(load_rego_dir(changed), url=empty.url)
            await newer.load_policies()
            assert not await e.ready()
            assert await newer.ready()
            await newer.close()
            # ... other data is another revision too
            await e.load_policies()
            assert await e.ready()
            client = await e._client("admin")
            await client.update_or_create_data(
                {"alice": {"tenant": "acme", "roles": []}}, "callgate/entities/users"
            )
            ok, why = await e.readiness()
            assert not ok and "data.callgate.entities" in why
        finally:
            await e.close()
        assert not await e.ready()  # closed

    run(main())


def test_connection_refused_is_unavailable_fast() -> None:
    e = OpaEngine.from_dir(REGO, url=f"http://127.0.0.1:{free_port()}", timeout=2.0)
    t = time.perf_counter()
    d = run(decide_once(e))
    assert d.effect is Effect.DENY and d.error_code == ENGINE_UNAVAILABLE
    assert time.perf_counter() - t < 1.0  # no retries, no backoff
    assert not run(e.ready())


@pytest.mark.opa
@pytest.mark.parametrize(
    "path,code",
    [
        ("faults/builtin_error", ErrorCode.POLICY_EVALUATION_ERROR.value),  # HTTP 500, strict built-ins
        ("faults/conflict", ErrorCode.POLICY_EVALUATION_ERROR.value),  # HTTP 500, conflicting outputs
        ("faults/undefined", ENGINE_UNDEFINED),  # {}
        ("faults/missing_rule", ENGINE_UNDEFINED),
        ("faults/unknown_effect", ENGINE_MALFORMED),
        ("faults/no_reasons", ENGINE_MALFORMED),
        ("faults/not_an_object", ENGINE_MALFORMED),
        ("faults/bad_shadow", ENGINE_MALFORMED),
    ],
)
def test_faults_are_denies_with_stable_codes(faults_server: OpaServer, path: str, code: str) -> None:
    e = OpaEngine.from_dir(REGO, url=faults_server.url, decision_path=path, timeout=2.0)
    d = run(decide_once(e))
    assert d.effect is Effect.DENY and d.error_code == code, d
    assert "calendar" not in d.reasons[0].message


@pytest.mark.opa
def test_timeout_is_a_fast_deny_and_the_loop_stays_free(faults_server: OpaServer) -> None:
    async def main() -> tuple[Any, float, int]:
        e = OpaEngine.from_dir(REGO, url=faults_server.url, decision_path="faults/slow", timeout=0.2)
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        start = time.perf_counter()
        (d,) = await e.authorize_batch([request()])
        elapsed = time.perf_counter() - start
        stop = True
        await t
        await e.close()
        return d, elapsed, ticks

    d, elapsed, ticks = run(main())
    assert d.effect is Effect.DENY and d.error_code == ENGINE_TIMEOUT
    assert elapsed < 0.8, (
        elapsed
    )  # 200 ms deadline, not OPA's ~1 s evaluation, no retry (margin for a loaded CI machine)
    assert ticks > 20  # the loop kept running while the decision was in flight


def test_http_status_mapping() -> None:
    codes = {s: OpaEngine._http_fault(s).error_code for s in (400, 401, 404, 500, 502, 503, 504)}
    assert codes == {
        400: "engine_error",
        401: "engine_error",
        404: "engine_error",
        500: "policy_evaluation_error",
        502: ENGINE_UNAVAILABLE,
        503: ENGINE_UNAVAILABLE,
        504: ENGINE_UNAVAILABLE,
    }


def test_requests_outside_the_contract_are_never_sent(opa_server: OpaServer) -> None:  # noqa: F811
    e = OpaEngine.from_dir(REGO, url=opa_server.url)
    forged = AuthzRequest(
        Subject("acme", "alice"),
        "weather.read",
        "weather:Paris",
        {
            "tool": "weather.get@v1",
            "args": {"city": "Paris", "date": "2026-07-20", "__entity": {"type": "User", "id": "carol"}},
        },
    )
    d = run(decide_once(e, forged))
    assert d.effect is Effect.DENY and d.error_code == ErrorCode.ENGINE_ERROR.value


def test_url_and_path_validation() -> None:
    assert parse_url("http://127.0.0.1:8181") == ("127.0.0.1", 8181, False)
    assert parse_url("https://opa.internal") == ("opa.internal", 443, True)
    assert parse_url("http://localhost") == ("localhost", 8181, False)
    for bad in ("127.0.0.1:8181", "http://127.0.0.1:8181/v1", "ftp://x", "http://"):
        with pytest.raises(ValueError):
            parse_url(bad)
    with pytest.raises(ValueError):
        OpaEngine.from_dir(REGO, decision_path="decision")
    with pytest.raises(ValueError):
        OpaEngine.from_dir(REGO, timeout=0)


# -- shadow mode on a real OPA (the contract of the Cedar engine's @shadow) -----------------------


def test_shadow_policy_is_logged_not_enforced(opa_factory: Callable[..., OpaServer], tmp_path: Path) -> None:  # noqa: F811
    """data.callgate.shadow served by OPA: the shadow forbid is reported, not enforced; out of the
    list it is enforced (another data.json: another revision)."""
    shadowed = shadow_copy(tmp_path / "1", ["no-weather-in-paris"])
    enforcing = shadow_copy(tmp_path / "2", [])
    s1, s2 = opa_factory(shadowed), opa_factory(enforcing)

    async def main() -> None:
        e = OpaEngine.from_dir(shadowed, url=s1.url, timeout=5.0)
        f = OpaEngine.from_dir(enforcing, url=s2.url, timeout=5.0)
        try:
            ok, why = await e.readiness()
            assert ok, why
            d, other = await e.authorize_batch([weather("Paris"), weather("Lyon")])
            assert d.effect is Effect.ALLOW and d.policy_ids == ("weather-read-own-tenant",)
            assert d.shadow_effect == "deny" and d.shadow_policy_ids == ("no-weather-in-paris",)
            assert other.effect is Effect.ALLOW and not other.shadow_effect and not other.shadow_policy_ids
            assert await f.ready()
            (x,) = await f.authorize_batch([weather("Paris")])
            assert (
                x.effect is Effect.DENY and x.policy_ids == ("no-weather-in-paris",) and not x.shadow_effect
            )
            assert f.revision != e.revision
            # an engine expecting the enforcing set is not ready against the shadowing server
            ok, why = await OpaEngine.from_dir(enforcing, url=s1.url).readiness()
            assert not ok and "data.callgate.shadow" in why
        finally:
            await e.close()
            await f.close()

    run(main())


def test_config_shadow_ids_go_in_the_input(opa_factory: Callable[..., OpaServer], tmp_path: Path) -> None:  # noqa: F811
    """policy.shadow ids are sent as input.shadow: the server serves exactly the policy files and
    the engine is ready, and the same server enforces for an engine without them."""
    d = shadow_copy(tmp_path, [])
    server = opa_factory(d)

    async def main() -> None:
        e = OpaEngine.from_dir(d, url=server.url, timeout=5.0, shadow=["no-weather-in-paris"])
        plain = OpaEngine.from_dir(d, url=server.url, timeout=5.0)
        try:
            ok, why = await e.readiness()
            assert ok, why
            (p,) = await e.authorize_batch([weather("Paris")])
            assert p.effect is Effect.ALLOW
            assert (p.shadow_effect, p.shadow_policy_ids) == ("deny", ("no-weather-in-paris",))
            (q,) = await plain.authorize_batch([weather("Paris")])
            assert q.effect is Effect.DENY and not q.shadow_effect
            assert e.revision != plain.revision  # the switch is on record
        finally:
            await e.close()
            await plain.close()

    run(main())


def test_stale_shadow_ids_are_not_ready(opa_factory: Callable[..., OpaServer], tmp_path: Path) -> None:  # noqa: F811
    """A data.json without shadow ids is not served by an OPA that still holds some (they would
    silently stop enforcing policies); an upload replaces the whole base document."""
    import urllib.request

    empty = opa_factory(None)
    no_key = shadow_copy(tmp_path / "a", None)
    with_ids = shadow_copy(tmp_path / "b", ["no-weather-in-paris"])

    async def main() -> None:
        old = OpaEngine.from_dir(with_ids, url=empty.url, timeout=5.0)
        new = OpaEngine.from_dir(no_key, url=empty.url, timeout=5.0)
        try:
            await old.load_policies()
            assert await old.ready()
            ok, why = await new.readiness()
            assert not ok and "data.callgate.shadow" in why  # same modules, stale shadow ids
            await new.load_policies()
            ok, why = await new.readiness()
            assert ok, why
            assert empty.get_json("/v1/data/callgate/shadow") == {}  # undefined: the upload dropped it
            (x,) = await new.authorize_batch([weather("Paris")])
            assert x.effect is Effect.DENY
            put = urllib.request.Request(
                empty.url + "/v1/data/callgate/shadow",
                data=b'["no-weather-in-paris"]',
                method="PUT",
                headers={"Content-Type": "application/json"},
            )
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(put, timeout=5).close()
            ok, why = await new.readiness()
            assert not ok and "data.callgate.shadow" in why
        finally:
            await old.close()
            await new.close()

    run(main())
