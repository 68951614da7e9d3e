"""Embedded Rego engine (regopy / rego-cpp): compiled once, one interpreter per thread, strict
built-in errors, default deny, every fault a deny with a stable code, load errors with file:line."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from callgate.base.errors import ErrorCode, LoadError
from callgate.base.model import AuthzRequest, Effect, Subject
from callgate.config import PolicyConfig
from callgate.policy.engines.rego import RegoEngine
from callgate.policy.engines.rego_contract import (
    ENGINE_MALFORMED,
    ENGINE_UNDEFINED,
    MalformedDecision,
    build_input,
    decision_from_document,
    load_rego_dir,
    normalize_decision_path,
)
from callgate.policy.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[1]
REGO = ROOT / "policies" / "rego"

# Policies that misbehave on purpose (package callgate.faults), evaluated at their own paths.
FAULTS = """package callgate.faults

default builtin_error := {"effect": "deny", "reasons": [{"code": "no_matching_permit"}]}

# with strict built-in errors, to_number("calendar.create") fails the query instead of making
# this (allowing!) rule silently undefined
builtin_error := {"effect": "allow", "reasons": [{"code": "policy_permit", "policy_id": "p"}]} if {
\tto_number(input.capability) > 0
}

undefined := {"effect": "deny", "reasons": [{"code": "no_matching_permit"}]} if not input.subject

unknown_effect := {"effect": "permit", "reasons": [{"code": "policy_permit"}]}

no_reasons := {"effect": "allow", "reasons": []}

not_an_object := "allow"

error_on_allow := {"effect": "allow", "reasons": [{"code": "policy_evaluation_error"}]}

bad_reason := {"effect": "deny", "reasons": [{"policy_id": 7}]}

bad_shadow := {"effect": "allow", "reasons": [{"code": "policy_permit"}], "shadow": {"effect": "permit", "policy_ids": []}}
"""


def request(user: str = "alice", capability: str = "calendar.create", **args: Any) -> AuthzRequest:
    a = {"calendar_id": "primary", "title": "t", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 30}
    a.update(args)
    return AuthzRequest(
        Subject("acme", user), capability, "calendar:primary", {"tool": "calendar.create_event@v1", "args": a}
    )


@pytest.fixture(scope="module")
def engine() -> RegoEngine:
    return RegoEngine.from_dir(REGO)


def faults_dir(tmp_path: Path) -> Path:
    d = tmp_path / "rego"
    d.mkdir()
    (d / "faults.rego").write_text(FAULTS)
    return d


def test_decides_and_names_policies(engine: RegoEngine) -> None:
    (d,) = engine.authorize_batch_sync([request()])
    assert d.effect is Effect.CONFIRM and d.policy_ids == ("calendar-create-scheduler",)
    assert d.engine == "rego" and not d.error_code
    (d,) = engine.authorize_batch_sync([request(duration_minutes=481)])
    assert d.effect is Effect.DENY and [r.code for r in d.reasons] == ["policy_forbid"]


def test_revision_covers_modules_and_data(tmp_path: Path, engine: RegoEngine) -> None:
    copy = tmp_path / "rego"
    shutil.copytree(REGO, copy)
    assert load_rego_dir(copy).revision == engine.revision  # content, not location
    (copy / "policies_test.rego").write_text("package callgate.authz_test\n")
    assert load_rego_dir(copy).revision == engine.revision  # tests are not policy
    (copy / "data.json").write_text((REGO / "data.json").read_text().replace('"acme"', '"acme2"', 1))
    assert load_rego_dir(copy).revision != engine.revision


@pytest.mark.parametrize(
    "path,code",
    [
        ("callgate/faults/builtin_error", ErrorCode.POLICY_EVALUATION_ERROR.value),
        ("callgate/faults/undefined", ENGINE_UNDEFINED),
        ("callgate/faults/unknown_effect", ENGINE_MALFORMED),
        ("callgate/faults/no_reasons", ENGINE_MALFORMED),
        ("callgate/faults/not_an_object", ENGINE_MALFORMED),
        ("callgate/faults/error_on_allow", ENGINE_MALFORMED),
        ("callgate/faults/bad_reason", ENGINE_MALFORMED),
        ("callgate/faults/bad_shadow", ENGINE_MALFORMED),
    ],
)
def test_faults_are_denies_with_stable_codes(tmp_path: Path, path: str, code: str) -> None:
    e = RegoEngine.from_dir(faults_dir(tmp_path), decision_path=path)
    (d,) = e.authorize_batch_sync([request()])
    assert d.effect is Effect.DENY and d.error_code == code, d
    assert "calendar" not in d.reasons[0].message  # no request values echoed


@pytest.mark.parametrize(
    "args",
    [
        {"__entity": {"type": "User", "id": "carol"}},
        {"duration_minutes": 2**64},
        {"duration_minutes": float("nan")},
        {"duration_minutes": 1.23456},
    ],
    ids=["forged-key", "beyond-64-bits", "nan", "decimal-digits"],
)
def test_requests_outside_the_contract_are_engine_errors(engine: RegoEngine, args: dict[str, Any]) -> None:
    (d,) = engine.authorize_batch_sync([request(**args)])
    assert d.effect is Effect.DENY and d.error_code == ErrorCode.ENGINE_ERROR.value


def test_engine_exception_is_deny(engine: RegoEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    class Boom:
        def __init__(self, *a: Any) -> None:
            raise RuntimeError("boom")

    monkeypatch.setattr("callgate.policy.engines.rego.regopy.Input", Boom)
    (d,) = engine.authorize_batch_sync([request()])
    assert d.effect is Effect.DENY and d.error_code == ErrorCode.ENGINE_ERROR.value


@pytest.mark.parametrize(
    "files,where,fragment",
    [
        ({"a.rego": "package callgate.authz\n\ndefault decision := {\n"}, "a.rego:3", "rego-cpp"),
        ({"a.rego": "package other\n\nx := 1\n"}, "a.rego:1", "outside 'callgate'"),
        ({"a.rego": "# no package\n"}, "a.rego", "no package"),
        ({"a.rego": "package callgate.authz\n\nx := 1\n"}, "rego", "default"),
        (
            {
                "a.rego": "package callgate.authz\n\ndefault decision := 1\n",
                "data.json": '{"callgate": {"a": 1, "a": 2}}',
            },
            "data.json",
            "duplicate key",
        ),
        (
            {"a.rego": "package callgate.authz\n\ndefault decision := 1\n", "data.json": '{"other": {}}'},
            "data.json",
            "only key",
        ),
    ],
    ids=[
        "syntax",
        "foreign-package",
        "no-package",
        "no-default-decision",
        "duplicate-data-key",
        "foreign-data",
    ],
)
def test_load_errors_name_file_and_line(
    tmp_path: Path, files: dict[str, str], where: str, fragment: str
) -> None:
    d = tmp_path / "rego"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    with pytest.raises(LoadError) as err:
        RegoEngine.from_dir(d)
    assert err.value.code is ErrorCode.POLICY_INVALID
    assert err.value.source.endswith(where), err.value.source
    assert fragment in str(err.value)


def test_one_interpreter_per_thread(engine: RegoEngine) -> None:
    """Many threads deciding at once get their own interpreters and the right answers."""
    reqs = [request(duration_minutes=m) for m in (30, 480, 481)] * 20
    want = [d.effect for d in engine.authorize_batch_sync(reqs)]
    interpreters: set[int] = set()
    errors: list[str] = []

    def work() -> None:
        for _ in range(5):
            got = [d.effect for d in engine.authorize_batch_sync(reqs)]
            if got != want:
                errors.append("mismatch")
        interpreters.add(id(engine._local.state[1]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(interpreters) == 4


def test_offloaded_batches_keep_the_loop_free() -> None:
    async def main() -> tuple[int, list[Effect]]:
        e = RegoEngine.from_dir(REGO, offload=True)
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        decisions = await e.authorize_batch([request()] * 300)
        stop = True
        await t
        await e.close()
        await e.close()  # idempotent
        return ticks, [d.effect for d in decisions]

    ticks, effects = asyncio.run(main())
    assert set(effects) == {Effect.CONFIRM}
    assert ticks > 10  # the loop ran while rego-cpp evaluated on the pool


def test_inline_mode_and_new_policies(tmp_path: Path) -> None:
    """New policies are a new engine (a reload builds one); a broken set never builds one and
    the old engine keeps serving."""
    e = RegoEngine.from_dir(REGO, offload=False)
    (d,) = asyncio.run(e.authorize_batch([request(duration_minutes=481)]))
    assert d.policy_ids == ("calendar-max-duration",)
    copy = tmp_path / "rego"
    shutil.copytree(REGO, copy)
    text = (copy / "policies.rego").read_text().replace("duration_minutes > 480", "duration_minutes > 600")
    (copy / "policies.rego").write_text(text)
    before = e.revision
    new = RegoEngine(load_rego_dir(copy), offload=False)
    assert new.revision != before == e.revision
    (d,) = new.authorize_batch_sync([request(duration_minutes=481)])
    assert d.effect is Effect.CONFIRM
    (copy / "policies.rego").write_text("package callgate.authz\n\np := {\n")
    with pytest.raises(LoadError):
        RegoEngine(load_rego_dir(copy), offload=False)
    assert e.authorize_batch_sync([request()])[0].effect is Effect.CONFIRM  # old set keeps serving


def test_compiled_once_per_thread(engine: RegoEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision is bundle + entrypoint: the thread's interpreter and bundle are compiled on its
    first call only (a recompilation per decision would cost ~10 ms; counted here, not timed:
    speed is for bench/, and a timed check failed on the loaded box at 5.9 ms per decision)."""
    compiled = type(engine._c)
    compiles: list[threading.Thread] = []
    real = compiled.compile

    def counting(self: Any) -> tuple[Any, Any]:
        compiles.append(threading.current_thread())
        return real(self)

    monkeypatch.setattr(compiled, "compile", counting)
    engine.authorize_batch_sync([request()])  # this thread's interpreter exists now (or is made)
    before = len(compiles)
    assert before <= 1
    for _ in range(20):
        engine.authorize_batch_sync([request()] * 10)
    assert len(compiles) == before  # 200 decisions, no compilation

    other = threading.Thread(target=lambda: engine.authorize_batch_sync([request()] * 10))
    other.start()
    other.join()
    assert compiles[before:] == [other]  # a new thread compiles its own, once


def test_input_document_shape() -> None:
    doc = build_input(
        AuthzRequest(
            Subject("acme", "alice"),
            "files.delete",
            "file:/a:b",
            {"tool": "files.delete@v1", "tenant": "x", "args": {"path": "/a:b", "reason": None, "n": 3.0}},
        )
    )
    assert doc == {
        "subject": {"tenant": "acme", "id": "alice"},
        "capability": "files.delete",
        "resource": {"id": "file:/a:b", "kind": "file", "name": "/a:b"},
        "context": {"tenant": "acme", "tool": "files.delete@v1", "args": {"path": "/a:b", "n": 3}},
    }


def test_decision_documents() -> None:
    d = decision_from_document({"effect": "deny", "reasons": [{"code": "policy_evaluation_error"}]}, "x")
    assert d.error_code == "policy_evaluation_error"
    with pytest.raises(MalformedDecision):
        decision_from_document({"effect": "ALLOW", "reasons": [{"code": "c"}]}, "x")
    assert normalize_decision_path("data.callgate.authz.decision") == "callgate/authz/decision"
    assert normalize_decision_path("/callgate/authz/decision/") == "callgate/authz/decision"
    for bad in ("decision", "callgate/../x", "callgate.authz.de-cision"):
        with pytest.raises(ValueError):
            normalize_decision_path(bad)


def test_configmap_hidden_copies_are_not_loaded_twice(tmp_path: Path) -> None:
    """A ConfigMap volume keeps its files in a hidden ``..<timestamp>/`` folder beside symlinks."""
    import shutil

    from callgate.policy.engines.rego_contract import load_rego_dir

    target = tmp_path / "rego"
    hidden = target / "..2026_11_30_12_00_00.123"
    shutil.copytree(REGO, hidden, ignore=shutil.ignore_patterns("*_test.rego"))
    for f in hidden.iterdir():
        (target / f.name).symlink_to(f)
    direct = load_rego_dir(REGO)
    mounted = load_rego_dir(target)
    assert len(mounted.modules) == len(direct.modules)


# -- shadow mode (the contract of the Cedar engine's @shadow, tests/test_engine_cedar.py) --------

PARIS_FORBID = """
# trial: no weather for Paris
forbid contains "no-weather-in-paris" if {
\tinput.capability == "weather.read"
\tresource.name == "Paris"
}
"""


def weather(city: str) -> AuthzRequest:
    return AuthzRequest(
        Subject("acme", "bob"),
        "weather.read",
        f"weather:{city}",
        {"tool": "weather.get@v1", "args": {"city": city, "date": "2026-07-20"}},
    )


def shadow_copy(tmp_path: Path, shadow: list[str] | None) -> Path:
    """policies/rego plus the forbid ``no-weather-in-paris``; ``data.callgate.shadow`` set to
    ``shadow`` (``None``: no shadow key in data.json at all)."""
    d = tmp_path / "rego"
    shutil.copytree(REGO, d)
    (d / "policies.rego").write_text((d / "policies.rego").read_text() + PARIS_FORBID)
    data = json.loads((d / "data.json").read_text())
    if shadow is None:
        data["callgate"].pop("shadow", None)
    else:
        data["callgate"]["shadow"] = shadow
    (d / "data.json").write_text(json.dumps(data, indent=2))
    return d


def test_shadow_policy_is_logged_not_enforced(tmp_path: Path) -> None:
    """A policy listed in data.callgate.shadow reports what it would have decided; the enforced
    answer ignores it. Taking it out of the list (a policy file change, hence a new revision)
    enforces it."""
    engine = RegoEngine.from_dir(shadow_copy(tmp_path / "1", ["no-weather-in-paris"]))
    (d,) = engine.authorize_batch_sync([weather("Paris")])
    assert d.effect is Effect.ALLOW and d.policy_ids == ("weather-read-own-tenant",)
    assert d.shadow_effect == "deny" and d.shadow_policy_ids == ("no-weather-in-paris",)
    (other,) = engine.authorize_batch_sync([weather("Lyon")])
    assert other.effect is Effect.ALLOW and not other.shadow_effect and not other.shadow_policy_ids
    enforced = RegoEngine.from_dir(shadow_copy(tmp_path / "2", []))
    (e,) = enforced.authorize_batch_sync([weather("Paris")])
    assert e.effect is Effect.DENY and e.policy_ids == ("no-weather-in-paris",) and not e.shadow_effect
    assert enforced.revision != engine.revision


def test_shadow_ids_from_the_config(tmp_path: Path) -> None:
    """``policy.shadow`` ids reach the policies as ``input.shadow`` and are part of the revision."""
    d = shadow_copy(tmp_path, None)
    engine = RegoEngine.from_dir(d, shadow=["no-weather-in-paris", "no-weather-in-paris"])
    assert engine.policies.shadow == ("no-weather-in-paris",)
    assert engine.policies.shadow_ids == ("no-weather-in-paris",)
    (p,) = engine.authorize_batch_sync([weather("Paris")])
    assert p.effect is Effect.ALLOW
    assert (p.shadow_effect, p.shadow_policy_ids) == ("deny", ("no-weather-in-paris",))
    enforced = RegoEngine.from_dir(d)
    assert enforced.authorize_batch_sync([weather("Paris")])[0].effect is Effect.DENY
    assert enforced.revision != engine.revision
    assert build_input(weather("Paris"), engine.policies.shadow)["shadow"] == ["no-weather-in-paris"]
    assert "shadow" not in build_input(weather("Paris"))
    # the snapshot passes the config's ids to the engine (and its revision changes with them)
    policy_dir = tmp_path / "policies"
    shutil.copytree(ROOT / "policies" / "tools", policy_dir / "tools")
    shutil.copytree(d, policy_dir / "rego")
    snap = load_snapshot(
        policy_dir, "rego", policy=PolicyConfig(engine="rego", shadow=("no-weather-in-paris",))
    )
    plain = load_snapshot(policy_dir, "rego", policy=PolicyConfig(engine="rego"))
    (s,) = asyncio.run(snap.engine.authorize_batch([weather("Paris")]))
    (p,) = asyncio.run(plain.engine.authorize_batch([weather("Paris")]))
    assert s.effect is Effect.ALLOW and s.shadow_effect == "deny" and p.effect is Effect.DENY
    assert snap.revision != plain.revision


def test_shadow_member_of_the_decision_document() -> None:
    base = {"effect": "allow", "reasons": [{"code": "policy_permit", "policy_id": "p"}]}
    d = decision_from_document({**base, "shadow": {"effect": "deny", "policy_ids": ["f", "g"]}}, "x")
    assert d.effect is Effect.ALLOW and d.shadow_effect == "deny" and d.shadow_policy_ids == ("f", "g")
    d = decision_from_document({**base, "shadow": {"effect": "deny", "policy_ids": []}}, "x")
    assert d.shadow_effect == "deny" and d.shadow_policy_ids == ()
    assert decision_from_document(base, "x").shadow_effect == ""
    for bad in (
        None,
        "deny",
        [],
        {},
        {"effect": "deny"},
        {"policy_ids": ["f"]},
        {"effect": "DENY", "policy_ids": ["f"]},
        {"effect": "permit", "policy_ids": ["f"]},
        {"effect": 1, "policy_ids": ["f"]},
        {"effect": "deny", "policy_ids": "f"},
        {"effect": "deny", "policy_ids": [1]},
        {"effect": "deny", "policy_ids": None},
        {"effect": "deny", "policy_ids": ["f"], "extra": 1},
        {"effect": "allow", "policy_ids": ["p"]},  # agreement carries no shadow
    ):
        with pytest.raises(MalformedDecision):
            decision_from_document({**base, "shadow": bad}, "x")


@pytest.mark.parametrize("value", ['"no-weather-in-paris"', "[1]", '[""]', "{}", "null"])
def test_shadow_ids_in_data_must_be_an_array_of_ids(tmp_path: Path, value: str) -> None:
    d = shadow_copy(tmp_path, [])
    (d / "data.json").write_text((d / "data.json").read_text().replace('"shadow": []', f'"shadow": {value}'))
    with pytest.raises(LoadError) as err:
        load_rego_dir(d)
    assert err.value.source.endswith("data.json") and "shadow" in str(err.value)
