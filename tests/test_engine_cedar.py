"""Cedar engine: fail closed on every fault (spec 6.6, field notes), load errors with file:line,
atomic snapshot swap."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from callgate.base.errors import ErrorCode, LoadError
from callgate.base.model import AuthzRequest, Effect, Subject
from callgate.policy.engines import cedar as cedar_module
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir
from tests.conftest import DATA, POLICIES

FAULTS = DATA / "cedar_faults"


def req(n: Any, **extra: Any) -> AuthzRequest:
    return AuthzRequest(
        subject=Subject("acme", "u1"),
        capability="t.act",
        resource="thing:1",
        context={"tool": "t@v1", "args": {"n": n, **extra}},
    )


@pytest.fixture
def engine() -> CedarEngine:
    return CedarEngine(load_cedar_dir(FAULTS))


def test_permit_alone_allows(engine: CedarEngine) -> None:
    (d,) = engine.authorize_batch_sync([req(1)])
    assert d.effect is Effect.ALLOW and d.policy_ids == ("permit-everyone",)


def test_erroring_forbid_is_deny_not_allow(engine: CedarEngine) -> None:
    # Cedar itself answers Allow here (the forbid errored and was skipped).
    raw = cedarpy.is_authorized(
        {
            "principal": {"type": "User", "id": "u1"},
            "action": {"type": "Action", "id": "t.act"},
            "resource": {"type": "Resource", "id": "thing:1"},
            "context": {"tenant": "acme", "tool": "t", "args": {"n": 10**3}},
        },
        cedarpy.PolicySet.from_str((FAULTS / "policies.cedar").read_text()),
        cedarpy.Entities.from_json_str(
            '[{"uid":{"type":"User","id":"u1"},"attrs":{"tenant":"acme"},"parents":[]},'
            '{"uid":{"type":"Resource","id":"thing:1"},"attrs":{"kind":"thing","name":"1","tenant":"acme"},"parents":[]}]'
        ),
    )
    assert raw.decision == cedarpy.Decision.Allow and raw.diagnostics.errors
    (d,) = engine.authorize_batch_sync([req(10**3)])
    assert d.effect is Effect.DENY
    assert d.error_code == ErrorCode.POLICY_EVALUATION_ERROR.value
    assert d.reasons[0].policy_id == "forbid-overflowing"
    assert "1000" not in d.reasons[0].message  # no request values echoed


@pytest.mark.parametrize(
    "ctx_args",
    [
        {"n": "not a long"},  # does not conform to the schema
        {"n": 1, "owner": {"__entity": {"type": "User", "id": "admin"}}},  # forged entity reference
        {"n": 1, "__extn": {"fn": "ip", "arg": "1.2.3.4"}},
        {"n": 2**64},  # outside Cedar's Long
        {"n": 1.23456},  # not a Cedar decimal
    ],
)
def test_bad_context_fails_closed(engine: CedarEngine, ctx_args: dict[str, Any]) -> None:
    r = AuthzRequest(
        subject=Subject("acme", "u1"),
        capability="t.act",
        resource="thing:1",
        context={"tool": "t", "args": ctx_args},
    )
    (d,) = engine.authorize_batch_sync([r])
    assert d.effect is Effect.DENY and d.error_code


def test_engine_exception_is_deny(engine: CedarEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(cedar_module, "_authorize_raw", boom)
    (d,) = engine.authorize_batch_sync([req(1)])
    assert d.effect is Effect.DENY and d.error_code == ErrorCode.ENGINE_ERROR.value


@pytest.mark.parametrize(
    "answer",
    [
        '{"decision":"NoDecision","diagnostics":{"reason":[],"errors":[]}}',
        '{"decision":"Maybe","diagnostics":{"reason":["policy0"],"errors":[]}}',
        '{"diagnostics":{}}',
        '{"decision":"Allow","diagnostics":[]}',
        '{"decision":"Allow","diagnostics":{"reason":[],"errors":[]}}',
        '{"decision":"Allow","diagnostics":{"reason":["policy0"]}}',
        "[]",
    ],
    ids=[
        "no-decision",
        "unknown-decision",
        "no-decision-field",
        "malformed-diagnostics",
        "allow-without-permit",
        "no-errors-field",
        "not-an-object",
    ],
)
def test_no_or_unreadable_decision_is_deny(
    engine: CedarEngine, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    monkeypatch.setattr(cedar_module, "_authorize_raw", lambda *a, **k: [answer])
    (d,) = engine.authorize_batch_sync([req(1)])
    assert d.effect is Effect.DENY and d.error_code in (
        ErrorCode.ENGINE_NO_DECISION.value,
        ErrorCode.ENGINE_ERROR.value,
    )


def _broken_copy(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    (d / "policies.cedar").write_text(text)
    return d


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        (
            '@id("a")\npermit (principal, action, resource);\n\n@id("b")\npermit (principal, action resource);\n',
            "5:27",  # the line and column of the token Cedar names, not of the statement's @id
            "syntax error: unexpected token `resource`",
        ),
        (
            '@id("a")\npermit (principal, action, resource)\nwhen { context.a == 1 && };\n',
            "3:26",  # Cedar sees this `}` only with the token after it
            "syntax error: unexpected token `}`",
        ),
        (
            '@id("a")\npermit (principal, action, resource);\npermit (principal, action, resource);\n',
            3,
            "@id",
        ),
        (
            '@id("a")\npermit (principal, action, resource);\n@id("a")\nforbid (principal, action, resource);\n',
            3,
            "duplicate @id",
        ),
        ('@id("f")\n@confirm("x")\nforbid (principal, action, resource);\n', 1, "@confirm"),
        (
            '@id("ok")\npermit (principal, action, resource);\n@id("typo")\npermit (principal, action == Action::"weather.read", resource)\n  when { context.args.cty == "x" };\n',
            3,
            "typo",
        ),
    ],
    ids=[
        "syntax",
        "syntax-lookahead",
        "missing-id",
        "duplicate-id",
        "confirm-on-forbid",
        "schema-validation",
    ],
)
def test_load_errors_name_file_and_line(tmp_path: Path, text: str, line: int | str, fragment: str) -> None:
    with pytest.raises(LoadError) as err:
        load_cedar_dir(_broken_copy(tmp_path, text))
    assert err.value.code is ErrorCode.POLICY_INVALID
    assert err.value.source.endswith(f"policies.cedar:{line}"), err.value.source
    assert fragment in str(err.value)


def test_new_policies_are_a_new_engine(engine: CedarEngine) -> None:
    """A reload builds a new engine over the new snapshot (no swap in place); the old engine keeps
    its revision for the calls already holding it."""
    before = engine.revision
    other = load_cedar_dir(POLICIES / "cedar")
    assert CedarEngine(other).revision == other.revision != before
    assert engine.revision == before


def test_shadow_policy_is_logged_not_enforced(tmp_path: Path) -> None:
    """A policy marked @shadow reports what it would have decided; the enforced answer ignores it.
    Removing the annotation (a policy file change, hence a new recorded snapshot revision) enforces it."""
    text = (POLICIES / "cedar" / "policies.cedar").read_text() + (
        '\n@id("no-weather-in-paris")\n@shadow("trial")\n'
        'forbid (principal, action == Action::"weather.read", resource) when { resource.name == "Paris" };\n'
    )
    engine = CedarEngine(load_cedar_dir(_broken_copy(tmp_path, text)))
    r = AuthzRequest(
        Subject("acme", "bob"),
        "weather.read",
        "weather:Paris",
        {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}},
    )
    (d,) = engine.authorize_batch_sync([r])
    assert d.effect is Effect.ALLOW
    assert d.shadow_effect == "deny" and d.shadow_policy_ids == ("no-weather-in-paris",)
    (other,) = engine.authorize_batch_sync(
        [
            AuthzRequest(
                Subject("acme", "bob"),
                "weather.read",
                "weather:Lyon",
                {"tool": "weather.get@v1", "args": {"city": "Lyon", "date": "2026-07-20"}},
            )
        ]
    )
    assert other.effect is Effect.ALLOW and not other.shadow_effect  # agreement is not noise
    enforced = CedarEngine(
        load_cedar_dir(_broken_copy(tmp_path / "2", text.replace('@shadow("trial")\n', "")))
    )
    (e,) = enforced.authorize_batch_sync([r])
    assert e.effect is Effect.DENY and e.policy_ids == ("no-weather-in-paris",)
    assert enforced.revision != engine.revision


def test_a_cached_entity_slice_does_not_copy_the_set(tmp_path: Path) -> None:
    """Issue 15 A2: a request's entities are its principal, resource, action and what they reach,
    not a copy of entities.json (so the cache's size does not grow with the file)."""
    import json as _json

    d = _broken_copy(tmp_path, (POLICIES / "cedar" / "policies.cedar").read_text())
    ents = _json.loads((d / "entities.json").read_text())
    ents += [
        {"uid": {"type": "User", "id": f"filler{i}"}, "attrs": {"tenant": "acme"}, "parents": []}
        for i in range(2000)
    ]
    (d / "entities.json").write_text(_json.dumps(ents))
    policies = load_cedar_dir(d)
    engine = CedarEngine(policies)
    r = AuthzRequest(
        Subject("acme", "alice"),
        "calendar.create",
        "calendar:primary",
        {
            "tool": "calendar.create_event@v1",
            "args": {"calendar_id": "primary", "title": "x", "start": "s", "duration_minutes": 30},
        },
    )
    (dec,) = engine.authorize_batch_sync([r])
    assert dec.effect is Effect.CONFIRM  # alice's role (an ancestor) is in her slice
    (entry,) = policies.entity_cache.values()
    # alice, Role::scheduler, the resource, Action::calendar.create and Action::create
    assert len(entry) == 5


def test_the_cache_never_holds_more_than_its_capacity(tmp_path: Path) -> None:
    d = _broken_copy(tmp_path, (POLICIES / "cedar" / "policies.cedar").read_text())
    policies = load_cedar_dir(d)
    policies = type(policies)(
        **{**{f: getattr(policies, f) for f in policies.__dataclass_fields__}, "entity_cache_max": 3}
    )
    engine = CedarEngine(policies)
    for i in range(10):
        engine.authorize_batch_sync(
            [
                AuthzRequest(
                    subject=Subject("acme", f"u{i}"),
                    capability="weather.read",
                    resource=f"weather:c{i}",
                    context={"tool": "weather.get@v1", "args": {"city": "c", "date": "2026-07-20"}},
                )
            ]
        )
        assert len(policies.entity_cache) <= 3


def test_check_warns_about_a_large_entities_file(tmp_path: Path) -> None:
    import io
    import json as _json

    from callgate.cli.main import cmd_check
    from callgate.policy.engines.cedar import ENTITIES_WARN_BYTES

    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    ents = _json.loads((root / "cedar" / "entities.json").read_text())
    (root / "cedar" / "entities.json").write_text(_json.dumps(ents) + " " * ENTITIES_WARN_BYTES)
    cfg = tmp_path / "callgate.toml"
    cfg.write_text(f'[policy]\ndir = "{root}"\n')
    out = io.StringIO()

    class Args:
        config = str(cfg)

    assert cmd_check(Args(), out) == 0  # type: ignore[arg-type]
    assert "warning:" in out.getvalue() and "entities.json" in out.getvalue()
