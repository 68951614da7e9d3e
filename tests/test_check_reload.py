"""Issue 12 items 1, 4, 5: `callgate check` catches the three deliberate mistakes (file, place,
problem), the same checks gate a hot reload on a real sidecar (file watcher), multi-file edits
load as one set, every file in the policy folder is loaded or refused by name, and `eval`
compares effects in any letter case with each case isolated."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from callgate.base import jsonpositions
from callgate.config import PolicyConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.policy.lifecycle import SNAPSHOT_HEALTH_SERVICE
from tests.conftest import POLICIES, ROOT, start_sidecar, stop_sidecar
from tests.opa_fixture import OpaServer
from tests.test_cli import callgate
from tests.test_lifecycle import NOT_SERVING, SERVING, health, wait_for, weather

WEATHER = "tools/weather.get@v1.json"


def project(tmp_path: Path, engine: str = "cedar") -> Path:
    shutil.copytree(POLICIES, tmp_path / "policies")
    cfg = (ROOT / "callgate.toml").read_text().replace('engine = "cedar"', f'engine = "{engine}"')
    (tmp_path / "callgate.toml").write_text(cfg)
    return tmp_path


def edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    return text


def untypable_new_capability(text: str) -> str:
    """The ToolSpec asks for a new capability and has an argument no policy type fits: its action
    is generated (callgate/policy/declare.py) without that argument, which is left out of
    ``context.args``."""
    text = text.replace(
        '"required_capabilities": ["weather.read"]', '"required_capabilities": ["weather.forecast"]'
    )
    for date in (
        '"date": {"type": "string", "format": "date"}',
        '"date": {"type": "string", "minLength": 1, "maxLength": 40}',
    ):
        assert date in text
        text = text.replace(date, date + ',\n      "units": {"enum": ["metric", 1]}')
    return text


def position(text: str, needle: str) -> str:
    """``line:column`` (from 1) of the first ``needle`` in ``text``."""
    at = text.index(needle)
    return f"{text.count(chr(10), 0, at) + 1}:{at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def check(proj: Path) -> tuple[int, str]:
    r = callgate("check", "--config", str(proj / "callgate.toml"))
    return r.returncode, r.stdout + r.stderr


APPROVE = (
    '} else := {"effect": "confirm", "reasons": reasons} if {',
    '} else := {"effect": "approve", "reasons": reasons} if {',
)


# -- callgate check: the three mistakes ---------------------------------------------------------


def test_check_refuses_a_misspelt_required_with_pointer_line_and_the_close_keyword(tmp_path: Path) -> None:
    proj = project(tmp_path)
    spec = proj / "policies" / WEATHER
    text = edit(spec, '"required": ["city", "date"]', '"requried": ["city", "date"]')
    rc, out = check(proj)
    assert rc == 1, out
    at = position(text, '"requried"')
    assert f"{spec}:{at}: /input_schema/requried:" in out, out
    assert "unknown JSON Schema keyword 'requried' (did you mean 'required'?)" in out


def test_check_names_a_bad_type_without_verbose(tmp_path: Path) -> None:
    proj = project(tmp_path)
    spec = proj / "policies" / WEATHER
    text = edit(
        spec, '"date": {"type": "string", "minLength": 1', '"date": {"type": "integr", "minLength": 1'
    )
    rc, out = check(proj)
    assert rc == 1, out
    at = position(text, '"type": "integr"')
    assert f"{spec}:{at}: /input_schema/properties/date/type:" in out, out
    assert "'integr' is not a JSON Schema type (did you mean 'integer'?)" in out


def test_check_reports_a_bad_toolspec_key_at_its_own_line(tmp_path: Path) -> None:
    proj = project(tmp_path)
    spec = proj / "policies" / WEATHER
    text = edit(spec, '"side_effect_class"', '"side_efect_class": "read_only",\n  "side_effect_class"')
    rc, out = check(proj)
    assert rc == 1, out
    at = position(text, '"side_efect_class"')
    assert at.startswith("26:") and f"{spec}:{at}: /side_efect_class:" in out, out


@pytest.mark.parametrize("engine", ["rego", "opa"])  # opa: the samples run on embedded Rego, no server
def test_check_shows_a_rego_effect_outside_the_contract_with_its_file_and_sample(
    tmp_path: Path, engine: str
) -> None:
    proj = project(tmp_path, engine)
    rego = proj / "policies" / "rego" / "decision.rego"
    text = edit(rego, *APPROVE)
    rc, out = check(proj)
    assert rc == 1, out
    at = position(text, '"approve"')
    line = f'{rego}:{at}: decision: decision effect "approve" is not one of allow, deny, confirm'
    assert line in out, out
    assert "sample calendar.create_event@v1: principal acme/alice, action calendar.create" in out


def test_check_runs_the_policy_tests(tmp_path: Path) -> None:
    proj = project(tmp_path)
    tests = proj / "policies" / "tests"
    (tests / "DENY" / "files-non-admin.json").rename(tests / "ALLOW" / "files-non-admin.json")
    rc, out = check(proj)
    assert rc == 1, out
    assert (
        f"{tests / 'ALLOW' / 'files-non-admin.json'}: test: policy test failed: wanted allow, got deny" in out
    )


def test_every_cedar_file_is_one_set_and_an_unknown_file_is_refused_by_name(tmp_path: Path) -> None:
    proj = project(tmp_path)
    cedar = proj / "policies" / "cedar"
    (cedar / "no-bob.cedar").write_text(
        '@id("no-bob")\nforbid (principal == User::"bob", action, resource);\n'
    )
    # The forbid in the second file applies: the example suite's denies of bob now name it.
    rc, out = check(proj)
    assert (
        rc == 1
        and "files-non-admin.json: test: policy test failed: wanted policy ids [], got [no-bob]" in out
    ), out
    (cedar / "no-bob.cedar").write_text(
        '@id("no-bob")\nforbid (principal == User::"bob", action, resource)\n'
    )
    rc, out = check(proj)
    assert rc == 1 and f"{cedar / 'no-bob.cedar'}:1" in out and "syntax error" in out, out
    (cedar / "no-bob.cedar").unlink()
    (cedar / "notes.txt").write_text("scratch\n")
    rc, out = check(proj)
    assert rc == 1 and f"error: {cedar / 'notes.txt'}: file refused: not read by the cedar engine" in out, out


def test_an_argument_no_schema_can_type_is_left_out_of_its_tool_alone(tmp_path: Path) -> None:
    """Issue 27 item 3, then the published servers' shapes: the ToolSpec is named with the
    argument's pointer; the tool serves with only that argument left out of ``context.args`` (it
    used to refuse the tool, and before that the whole set)."""
    proj = project(tmp_path)
    spec = proj / "policies" / WEATHER
    text = untypable_new_capability(spec.read_text())
    spec.write_text(text)
    rc, out = check(proj)
    assert rc == 0, out
    line = jsonpositions.locate(text, "/normalized_schema/properties/units/enum")[0]
    assert (
        f"warning: {spec}:{line}: /normalized_schema/properties/units/enum: tool weather.get@v1: "
        "enum values must be all strings, integers or booleans: argument 'units' is left out of "
        "context.args of action 'weather.forecast' (the tool is served"
    ) in out, out
    assert "ok: 3 tools" in out and "weather.get@v1" in out, out


def test_check_passes_the_example_policies_on_every_embedded_engine(tmp_path: Path) -> None:
    for engine in ("cedar", "rego"):
        proj = project(tmp_path / engine, engine)
        rc, out = check(proj)
        assert rc == 0 and "ok: 3 tools" in out, out


# -- the same checks gate a hot reload (a real sidecar, the file watcher) -------------------------

FAST = PolicyConfig(watch=True, watch_interval_ms=50, reload_quiet_ms=200)


def test_hot_reload_refuses_each_mistake_and_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdir = project(tmp_path) / "policies"
    caplog.set_level(logging.INFO, logger="callgate.policy")
    sc, tmp = start_sidecar(pdir, policy=FAST)
    try:
        first = sc.sidecar.components.gate.snapshot.revision
        spec = pdir / WEATHER
        good = spec.read_text()
        for old, new, expect in [
            ('"required": ["city", "date"]', '"requried": ["city", "date"]', "/input_schema/requried"),
            (
                '"type": "string", "minLength": 1, "maxLength": 40',
                '"type": "integr", "minLength": 1, "maxLength": 40',
                "'integr' is not a JSON Schema type",
            ),
        ]:
            caplog.clear()
            spec.write_text(good.replace(old, new, 1))
            wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING)
            lc = sc.sidecar.lifecycle
            assert lc is not None and expect in lc.last_error and str(spec) in lc.last_error, lc.last_error
            refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
            assert any(str(spec) in m and expect in m for m in refused), refused
            assert any(f"serving revision {first} kept" in m for m in refused), refused
            assert health(sc) == SERVING and sc.sidecar.components.gate.snapshot.revision == first
            assert pb.State.Name(weather(sc).state) == "PREPARED"
            # Operators read the problem from the sidecar itself: callgate status (PolicyStatus).
            for role in ("agent", "executor"):
                r = callgate("status", "--target", sc.sidecar.addresses[role][0])
                assert r.returncode == 1 and f"serving: {first} (ready)" in r.stdout, r.stdout + r.stderr
                assert (
                    "latest policy files: REFUSED" in r.stdout
                    and expect in r.stdout
                    and str(spec) in r.stdout
                )
            spec.write_text(good)
            wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING)
            r = callgate("status", "--target", sc.sidecar.addresses["agent"][0], "--json")
            doc = json.loads(r.stdout)
            assert r.returncode == 0 and doc["latestFilesOk"] and doc["problems"] == [], r.stdout
    finally:
        stop_sidecar(sc, tmp)


def test_hot_reload_refuses_a_rego_approve_effect(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pdir = project(tmp_path, "rego") / "policies"
    caplog.set_level(logging.INFO, logger="callgate.policy")
    sc, tmp = start_sidecar(
        pdir, policy=PolicyConfig(engine="rego", watch=True, watch_interval_ms=50, reload_quiet_ms=200)
    )
    try:
        first = sc.sidecar.components.gate.snapshot.revision
        rego = pdir / "rego" / "decision.rego"
        edit(rego, *APPROVE)
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING)
        lc = sc.sidecar.lifecycle
        assert lc is not None and f"{rego}:" in lc.last_error and '"approve"' in lc.last_error, lc.last_error
        assert sc.sidecar.components.gate.snapshot.revision == first and health(sc) == SERVING
    finally:
        stop_sidecar(sc, tmp)


PAYMENTS_SPEC = {
    "name": "payments.refund",
    "version": "v1",
    "description": "Refund an order.",
    "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
    "input_schema": {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "minimum": 1},
            "currency": {"enum": ["EUR", "USD"]},
            "order_id": {"type": "string", "minLength": 1},
        },
        "required": ["amount", "currency", "order_id"],
        "additionalProperties": False,
    },
    "side_effect_class": "modify",
    "required_capabilities": ["payments.refund"],
    "resource_template": "order:{order_id}",
    "idempotency": {"supported": True, "without_key": "allow"},
}


def test_a_multi_file_edit_loads_as_one_set(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The new ToolSpec lands before its Cedar action: the debounce waits for the whole edit,
    and the set is loaded once, with no refusal in between."""
    pdir = project(tmp_path) / "policies"
    caplog.set_level(logging.INFO, logger="callgate.policy")
    sc, tmp = start_sidecar(pdir, policy=PolicyConfig(watch=True, watch_interval_ms=50, reload_quiet_ms=1500))
    try:
        (pdir / "tools" / "payments.refund@v1.json").write_text(json.dumps(PAYMENTS_SPEC, indent=2))
        schema = pdir / "cedar" / "schema.cedarschema"
        schema.write_text(
            schema.read_text()
            + '\naction "payments.refund" in [modify] appliesTo { principal: User, resource: Resource,\n'
            "  context: { tenant: String, tool: String, args: { amount: Long, currency: String, order_id: String } } };\n"
        )
        (pdir / "cedar" / "payments.cedar").write_text(
            '@id("refund-admins")\npermit (principal in Role::"admin", action == Action::"payments.refund", resource);\n'
        )
        wait_for(
            lambda: sc.sidecar.components.gate.snapshot.tools.get("payments.refund", "v1") is not None, 20
        )
        assert not [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING
    finally:
        stop_sidecar(sc, tmp)


# -- eval: effects in any letter case, each case isolated ----------------------------------------


def test_eval_compares_effects_in_any_case_and_isolates_cases(tmp_path: Path) -> None:
    table = {
        "defaults": {"subject": {"tenant": "acme", "id": "bob"}, "idempotency_key": "same-key-for-all"},
        "cases": [
            {
                "tool": "weather.get@v1",
                "arguments": {"city": "Paris", "date": "2026-07-20"},
                "expect": "ALLOW",
            },
            {
                "tool": "weather.get@v1",
                "arguments": {"city": "Rome", "date": "2026-07-21"},
                "expect": "Allow",
            },
            {
                "tool": "weather.get@v1",
                "arguments": {"city": "Oslo", "date": "2026-07-22"},
                "expect": {"effect": "ALLOW"},
            },
        ],
    }
    f = tmp_path / "cases.json"
    f.write_text(json.dumps(table))
    r = callgate("eval", str(f), "--config", str(ROOT / "callgate.toml"))
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and all(res["pass"] for res in results), r.stdout + r.stderr
    assert len(results) == 3
    table["cases"][0]["expect"] = "DENY"
    f.write_text(json.dumps(table))
    r = callgate("eval", str(f), "--config", str(ROOT / "callgate.toml"))
    first = json.loads(r.stdout.splitlines()[0])
    assert r.returncode == 1 and first["mismatches"] == ["wanted deny, got allow"]


def test_the_case_format_is_documented_with_its_schema() -> None:
    doc = (ROOT / "docs" / "EVAL.md").read_text()
    schema = (ROOT / "callgate" / "cli" / "evalcase.schema.json").read_text()
    blocks = re.findall(r"```json\n(.*?)```", doc, re.S)
    assert any(json.loads(b) == json.loads(schema) for b in blocks), "docs/EVAL.md must carry the schema"
    request = (ROOT / "callgate" / "policy" / "policytest-request.schema.json").read_text()
    assert any(json.loads(b) == json.loads(request) for b in blocks), "and the policy test request schema"


# -- the pieces ----------------------------------------------------------------------------------


def test_positions_name_each_member_and_element() -> None:
    from callgate.base.jsonpositions import locate, positions

    text = '{\n  "a/b": {"x~y": [1,\n    {"k": "v\\"}"}]},\n  "z": null\n}'
    found = positions(text)
    assert found[""] == (1, 1)
    assert found["/a~1b"] == (2, 3)
    assert found["/a~1b/x~0y"] == (2, 11)
    assert found["/a~1b/x~0y/1/k"] == (3, 6)
    assert found["/z"] == (4, 3)
    assert locate(text, "/a~1b/missing") == (2, 3)  # the nearest present ancestor
    assert locate("not json", "/a") == (1, 1)


def test_unknown_keywords_are_found_by_keyword_not_by_shape() -> None:
    from callgate.arguments.validate.vocabulary import unknown_keywords

    schema = {
        "type": "object",
        "properties": {"requried": {"type": "string", "maxLenght": 3}, "x": {"enum": [{"bogus": 1}]}},
        "$defs": {"d": {"minimun": 1}},
        "x-ui": {"anything": True},
        "default": {"notAKeyword": 1},
        "requried": ["x"],
    }
    found = {v.pointer: v.message for v in unknown_keywords(schema, "/input_schema")}
    assert set(found) == {
        "/input_schema/properties/requried/maxLenght",
        "/input_schema/$defs/d/minimun",
        "/input_schema/requried",
    }
    assert "did you mean 'maxLength'?" in found["/input_schema/properties/requried/maxLenght"]
    assert "did you mean 'minimum'?" in found["/input_schema/$defs/d/minimun"]


def test_a_set_that_fails_the_checks_at_start_never_serves(tmp_path: Path) -> None:
    pdir = project(tmp_path) / "policies"
    stray = pdir / "cedar" / "old-policies.cedar.bak"
    stray.write_text("// an editor's backup\n")
    sc, tmp = start_sidecar(pdir, policy=FAST)
    try:
        assert health(sc) == NOT_SERVING and health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING
        r = callgate("status", "--target", sc.sidecar.addresses["agent"][0])
        assert r.returncode == 1 and "serving: - (NOT READY)" in r.stdout, r.stdout + r.stderr
        assert f"{stray}: file refused: not read by the cedar engine" in r.stdout
        stray.unlink()
        wait_for(lambda: health(sc) == SERVING and health(sc, SNAPSHOT_HEALTH_SERVICE) == SERVING)
        assert pb.State.Name(weather(sc).state) == "PREPARED"
    finally:
        stop_sidecar(sc, tmp)


def test_opa_never_gets_a_refused_rego_set(tmp_path: Path, opa_factory: Callable[..., OpaServer]) -> None:
    """With a real OPA the sidecar uploads to, the "approve" mistake is refused before upload:
    OPA keeps the serving revision's modules and decisions keep their shape."""
    pdir = project(tmp_path, "opa") / "policies"
    opa = opa_factory(None)
    cfg = PolicyConfig(
        engine="opa", opa_url=opa.url, opa_upload_policies=True, watch_interval_ms=50, reload_quiet_ms=200
    )
    sc, tmp = start_sidecar(pdir, policy=cfg)
    try:
        wait_for(lambda: health(sc) == SERVING, timeout=60)
        first = sc.sidecar.components.gate.snapshot.revision
        rego = pdir / "rego" / "decision.rego"
        edit(rego, *APPROVE)
        wait_for(lambda: health(sc, SNAPSHOT_HEALTH_SERVICE) == NOT_SERVING, timeout=60)
        lc = sc.sidecar.lifecycle
        assert lc is not None and f"{rego}:" in lc.last_error and '"approve"' in lc.last_error, lc.last_error
        assert sc.sidecar.components.gate.snapshot.revision == first and health(sc) == SERVING
        assert "approve" not in json.dumps(opa.get_json("/v1/policies"))
        assert pb.State.Name(weather(sc).state) == "PREPARED"
    finally:
        stop_sidecar(sc, tmp)


def test_each_cedar_validation_error_is_at_its_own_policy(tmp_path: Path) -> None:
    """Two policies that do not validate, in two files: each is named at the line of its own
    ``@id``. Before, every one was shown at the file and line of the first (found with a policy on
    server-postgres's optional ``sql`` argument: three errors, all ``policies.cedar:1``)."""
    proj = project(tmp_path)
    cedar = proj / "policies" / "cedar"
    main = cedar / "policies.cedar"
    lines = main.read_text().count("\n")
    main.write_text(
        main.read_text()
        + '\n@id("bad-one")\npermit (principal, action, resource)\nwhen { context.nope == 1 };\n'
    )
    (cedar / "more.cedar").write_text(
        '// more\n\n@id("bad-two")\nforbid (principal, action, resource)\nwhen { context.nada == 2 };\n'
    )
    rc, out = check(proj)
    assert rc == 1, out
    assert f"{main}:{lines + 2}: policy:bad-one:" in out, out
    assert f"{cedar / 'more.cedar'}:3: policy:bad-two:" in out, out
