"""`callgate policy test DIR`: the project's own suite (policies/tests) passes on Cedar, embedded
Rego and a real OPA server through the CLI, and a suite that is wrong, empty or malformed fails
loudly. (`opa test policies/rego` for the `_test.rego` files is tests/test_engine_opa.py.)"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.base.model import Effect, Reason
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir
from callgate.policy.policytest import CaseResult, SuiteResult, render_table, run_suite
from tests.conftest import POLICIES, ROOT
from tests.opa_fixture import OpaServer, free_port, opa_server  # noqa: F401 - the fixture

SUITE = POLICIES / "tests"
CONFIG = ROOT / "callgate.toml"
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed$")
CASE_FILES = sorted(SUITE.rglob("*.json"))


def callgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def policy_test(directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return callgate("policy", "test", str(directory), "--config", str(CONFIG), *extra)


def summary(stdout: str) -> tuple[int, int]:
    last = stdout.rstrip("\n").splitlines()[-1]
    m = SUMMARY.match(last)
    assert m, f"last line is not the summary: {last!r}"
    return int(m.group(1)), int(m.group(2))


def row(stdout: str, file: str) -> str:
    rows = [line for line in stdout.splitlines() if f" {file} " in f"{line} "]
    assert len(rows) == 1, f"{file} not exactly once in:\n{stdout}"
    return rows[0]


def copy_suite(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SUITE, tmp_path / "suite"))


def run_in_process(directory: Path) -> SuiteResult:
    async def go() -> SuiteResult:
        engine = CedarEngine(load_cedar_dir(POLICIES / "cedar"))
        try:
            return await run_suite(directory, engine)
        finally:
            await engine.close()

    return asyncio.run(go())


# -- the shipped suite ----------------------------------------------------------------------


def test_shipped_suite_covers_every_policy_and_edge() -> None:
    docs = {p.relative_to(SUITE).as_posix(): json.loads(p.read_text(encoding="utf-8")) for p in CASE_FILES}
    assert len(docs) >= 20
    assert {name.split("/")[0] for name in docs} == {"ALLOW", "CONFIRM", "DENY"}
    # Every case of the project's own suite pins the deciding policies, not only the effect.
    assert all("expect_reasons" in d and d.get("description") for d in docs.values())
    cedar_ids = set(re.findall(r'@id\("([^"]+)"\)', (POLICIES / "cedar" / "policies.cedar").read_text()))
    assert {i for d in docs.values() for i in d["expect_reasons"]} == cedar_ids
    minutes = {
        (name.split("/")[0], d["context"]["args"].get("duration_minutes"))
        for name, d in docs.items()
        if d["action"] == "calendar.create"
    }
    assert ("CONFIRM", 480) in minutes and ("DENY", 481) in minutes
    principals = {
        (name.split("/")[0], d["principal"]["id"], d["principal"]["tenant"]) for name, d in docs.items()
    }
    assert ("ALLOW", "zed", "acme") in principals  # unknown user
    assert any(w == "DENY" and t != "acme" for w, _, t in principals)  # other tenant
    assert any(w == "ALLOW" and p == "carol" for w, p, _ in principals)  # admin role
    assert any(d["context"]["args"].get("path", "").startswith("/etc/") for d in docs.values())
    assert {d.get("expect_error_code") for d in docs.values()} >= {"policy_evaluation_error", "engine_error"}


@pytest.mark.parametrize("engine", ["cedar", "rego"])
def test_shipped_suite_passes_embedded(engine: str) -> None:
    r = policy_test(SUITE, "--engine", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary(r.stdout) == (len(CASE_FILES), 0)
    assert f"on engine {engine} " in r.stdout.splitlines()[0]
    assert "FAIL" not in r.stdout


def test_shipped_suite_passes_on_opa(opa_server: OpaServer) -> None:  # noqa: F811
    r = policy_test(SUITE, "--engine", "opa", "--opa-url", opa_server.url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary(r.stdout) == (len(CASE_FILES), 0)
    assert "on engine opa " in r.stdout.splitlines()[0]


def test_engine_defaults_to_the_config() -> None:
    r = callgate("policy", "test", str(SUITE), "-c", str(CONFIG))  # callgate.toml: engine = "cedar"
    assert r.returncode == 0, r.stdout + r.stderr
    assert "on engine cedar " in r.stdout.splitlines()[0]


def test_table_is_aligned() -> None:
    r = policy_test(SUITE, "--engine", "cedar")
    lines = r.stdout.splitlines()
    header, rows = lines[1], lines[2:-1]
    starts = [header.index(col) for col in ("CASE", "WANT", "GOT", "REASONS")]
    for line in rows:
        assert line.startswith("PASS  ")
        for s in starts:
            assert line[s - 2 : s] == "  " and line[s] != " ", line
    assert row(r.stdout, "DENY/calendar-481-minutes-over-the-limit.json").split()[1:5] == [
        "DENY/calendar-481-minutes-over-the-limit.json",
        "deny",
        "deny",
        "policy_forbid:calendar-max-duration",
    ]


# -- suites that must fail --------------------------------------------------------------------


def test_wrong_effect_fails_and_the_table_says_which(tmp_path: Path) -> None:
    suite = copy_suite(tmp_path)
    (suite / "DENY" / "calendar-481-minutes-over-the-limit.json").rename(suite / "CONFIRM" / "wrong-481.json")
    r = policy_test(suite, "--engine", "rego")
    assert r.returncode == 1, r.stdout + r.stderr
    assert summary(r.stdout) == (len(CASE_FILES) - 1, 1)
    line = row(r.stdout, "CONFIRM/wrong-481.json")
    assert line.startswith("FAIL ") and "wanted confirm, got deny" in line


def test_wrong_policy_id_fails(tmp_path: Path) -> None:
    suite = copy_suite(tmp_path)
    path = suite / "ALLOW" / "weather-own-tenant.json"
    doc = json.loads(path.read_text())
    doc["expect_reasons"] = ["files-delete-admin"]
    path.write_text(json.dumps(doc))
    result = run_in_process(suite)
    assert result.exit_code == 1 and result.failed == 1
    bad = next(c for c in result.cases if not c.passed)
    assert bad.file == "ALLOW/weather-own-tenant.json"
    assert bad.message == "wanted policy ids [files-delete-admin], got [weather-read-own-tenant]"


def test_a_fault_does_not_pass_a_deny_case_unless_expected(tmp_path: Path) -> None:
    suite = copy_suite(tmp_path)
    path = suite / "DENY" / "schema-missing-argument.json"
    doc = json.loads(path.read_text())
    del doc["expect_error_code"]
    path.write_text(json.dumps(doc))
    (suite / "DENY" / "wrong-fault.json").write_text(json.dumps({**doc, "expect_error_code": "engine_error"}))
    result = run_in_process(suite)
    assert result.exit_code == 1 and result.failed == 2
    msgs = {c.file: c.message for c in result.cases if not c.passed}
    assert "engine fault (policy_evaluation_error" in msgs["DENY/schema-missing-argument.json"]
    assert '"expect_error_code": "policy_evaluation_error"' in msgs["DENY/schema-missing-argument.json"]
    assert msgs["DENY/wrong-fault.json"].startswith(
        "wanted error code engine_error, got policy_evaluation_error"
    )


def test_empty_suite_fails(tmp_path: Path) -> None:
    (tmp_path / "ALLOW").mkdir()  # folders without files run nothing either
    r = policy_test(tmp_path, "--engine", "cedar")
    assert r.returncode == 1, r.stdout + r.stderr
    assert summary(r.stdout) == (0, 0)
    assert "no test cases" in r.stdout and "does not pass" in r.stdout


def test_policy_dir_instead_of_suite_gets_a_hint() -> None:
    r = policy_test(POLICIES, "--engine", "cedar")
    assert r.returncode == 1
    assert f"hint: {POLICIES / 'tests'} holds a suite" in r.stdout


def test_missing_dir_is_a_usage_error(tmp_path: Path) -> None:
    r = policy_test(tmp_path / "nope", "--engine", "cedar")
    assert r.returncode == 2 and "no such directory" in r.stderr


def test_malformed_file_is_reported_by_name(tmp_path: Path) -> None:
    suite = copy_suite(tmp_path)
    (suite / "DENY" / "dup.json").write_text(
        '{"principal": {"tenant": "acme", "id": "bob"}, "action": "files.delete", "action": "weather.read",'
        ' "resource": "file:/tmp/x"}'
    )
    r = policy_test(suite, "--engine", "cedar")
    assert r.returncode == 1, r.stdout + r.stderr
    assert summary(r.stdout) == (len(CASE_FILES), 1)
    line = row(r.stdout, "DENY/dup.json")
    assert line.startswith("FAIL ") and "duplicate key 'action'" in line


@pytest.mark.parametrize(
    ("folder", "text", "wanted"),
    [
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", ',
            "not strict JSON (invalid_json)",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", "resource": "r", "n": NaN}',
            "non_finite_number",
        ),
        ("ALLOW", "[]", "one JSON object, not an array"),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x"}',
            "missing required key(s) 'resource'",
        ),
        (
            "ALLOW",
            '{"principal": "alice", "action": "x", "resource": "r"}',
            "ALLOW/bad.json: /principal: must be an object",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a", "role": "admin"}, "action": "x", "resource": "r"}',
            "ALLOW/bad.json: /principal: unknown key(s) 'role'",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": 7}, "action": "x", "resource": "r"}',
            "ALLOW/bad.json: /principal/id: must be a string, not a number",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "", "resource": "r"}',
            "ALLOW/bad.json: /action: must not be empty",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", "resource": "r", "context": []}',
            "ALLOW/bad.json: /context: must be an object",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", "resource": "r", "expect_reason": []}',
            "unknown key(s) 'expect_reason'",
        ),
        (
            "ALLOW",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", "resource": "r", "expect_reasons": "p"}',
            "ALLOW/bad.json: /expect_reasons: must be an array",
        ),
        (
            "CONFIRM",
            '{"principal": {"tenant": "acme", "id": "a"}, "action": "x", "resource": "r", "expect_error_code": "engine_error"}',
            "only meaningful in DENY/",
        ),
    ],
)
def test_malformed_files(tmp_path: Path, folder: str, text: str, wanted: str) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "bad.json").write_text(text)
    result = run_in_process(tmp_path)
    assert result.exit_code == 1 and (result.passed, result.failed) == (0, 1)
    (case,) = result.cases
    assert case.file == f"{folder}/bad.json" and case.got is None
    assert case.message.startswith("malformed case file: ") and wanted in case.message, case.message


def test_misplaced_files_and_misnamed_folders_fail(tmp_path: Path) -> None:
    suite = copy_suite(tmp_path)
    shutil.copytree(suite / "ALLOW", suite / "deny_requests")
    shutil.copy(suite / "ALLOW" / "weather-own-tenant.json", suite / "loose.json")
    (suite / "notes").mkdir()  # an unrelated folder is fine
    result = run_in_process(suite)
    assert result.exit_code == 1 and (result.passed, result.failed) == (len(CASE_FILES), 2)
    msgs = {c.file: c.message for c in result.cases if not c.passed}
    assert "must be named DENY/" in msgs["deny_requests/"]
    assert "outside ALLOW/, CONFIRM/ and DENY/" in msgs["loose.json"]


def test_nested_folders_are_cases(tmp_path: Path) -> None:
    (tmp_path / "ALLOW" / "weather").mkdir(parents=True)
    shutil.copy(SUITE / "ALLOW" / "weather-own-tenant.json", tmp_path / "ALLOW" / "weather" / "own.json")
    result = run_in_process(tmp_path)
    assert result.ok and [c.file for c in result.cases] == ["ALLOW/weather/own.json"]


def test_opa_that_is_not_there_is_an_error_not_a_pass() -> None:
    """A down OPA denies everything (fail closed): DENY cases must not pass on it."""
    r = policy_test(SUITE, "--engine", "opa", "--opa-url", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 2 and "engine opa is not ready" in r.stderr, r.stdout + r.stderr


def test_opa_url_needs_the_opa_engine() -> None:
    r = policy_test(SUITE, "--engine", "rego", "--opa-url", "http://127.0.0.1:8181")
    assert r.returncode == 2 and "--opa-url applies to the opa engine only" in r.stderr


# -- render_table -------------------------------------------------------------------------------


def test_render_table_summary_is_alone_on_the_last_line() -> None:
    ok = CaseResult("ALLOW/a.json", Effect.ALLOW, Effect.ALLOW, (Reason("policy_permit", "p"),), "", True, "")
    bad = CaseResult(
        "DENY/b.json",
        Effect.DENY,
        Effect.ALLOW,
        (Reason("policy_permit", "p"),),
        "",
        False,
        "wanted deny, got allow",
    )
    result = SuiteResult("suite", "cedar", "sha256:x", (ok, bad))
    text = render_table(result)
    assert text.endswith("\n1 passed, 1 failed\n")
    assert not result.ok and result.exit_code == 1
    assert all(line == line.rstrip() for line in text.splitlines())
    assert SuiteResult("suite", "cedar", "sha256:x", (ok,)).exit_code == 0
    assert SuiteResult("suite", "cedar", "sha256:x", ()).exit_code == 1
