"""The JSON Schemas of the case files (callgate/cli/evalcase.schema.json for `callgate eval`,
callgate/policy/policytest-request.schema.json for `callgate policy test`): every shipped file
validates, broken ones are refused naming the file and the JSON Pointer, and the schemas'
enums follow the code's enums."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from callgate.base.errors import ErrorCode
from callgate.base.model import Effect
from callgate.base.states import State
from callgate.cli.evalcases import SCHEMA_FILE as EVAL_SCHEMA
from callgate.cli.evalcases import CaseFileError, load_cases, parse_cases
from callgate.policy.policytest import FOLDERS, collect, parse_case
from callgate.policy.policytest import SCHEMA_FILE as REQUEST_SCHEMA
from tests.conftest import DATA, POLICIES, ROOT

EVAL_CASE_FILES = [DATA / "gate_cases.json"]
REQUEST_FILES = sorted((POLICIES / "tests").rglob("*.json"))


def schema(package: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize(
    ("package", "name"), [("callgate.cli", EVAL_SCHEMA), ("callgate.policy", REQUEST_SCHEMA)]
)
def test_schemas_are_2020_12_package_data(package: str, name: str) -> None:
    doc = schema(package, name)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(doc)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(fnmatch.fnmatch(name, pattern) for pattern in package_data[package]), package_data


def test_eval_schema_enums_follow_the_code() -> None:
    defs = schema("callgate.cli", EVAL_SCHEMA)["$defs"]
    states, effects = [s.value for s in State], [e.value for e in Effect]
    assert defs["state"]["enum"] == states
    pattern = re.compile(defs["effect"]["pattern"])
    for e in effects:  # any letter case
        assert pattern.match(e) and pattern.match(e.upper()) and pattern.match(e.title())
    assert not pattern.match("approve") and not pattern.match("allowed")
    assert defs["expectation"]["properties"]["effect"] == {"$ref": "#/$defs/effect"}
    assert defs["expectation"]["properties"]["state"] == {"$ref": "#/$defs/state"}


# -- every shipped file validates -----------------------------------------------------------------


@pytest.mark.parametrize("path", EVAL_CASE_FILES, ids=lambda p: p.name)
def test_shipped_eval_case_files_validate(path: Path) -> None:
    cases = load_cases(str(path))
    assert len(cases) == len(json.loads(path.read_text(encoding="utf-8"))["cases"])
    codes = {c["expect"]["code"] for _, c in cases if isinstance(c["expect"], dict) and "code" in c["expect"]}
    assert codes <= {c.value for c in ErrorCode}, codes - {c.value for c in ErrorCode}


def test_shipped_policy_test_suite_validates() -> None:
    assert len(REQUEST_FILES) > 20
    for path in REQUEST_FILES:
        rel = path.relative_to(POLICIES / "tests")
        parse_case(path.read_bytes(), rel.as_posix(), FOLDERS[rel.parts[0]])
    cases, bad = collect(POLICIES / "tests")
    assert not bad and len(cases) == len(REQUEST_FILES)


# -- broken eval case files -------------------------------------------------------------------------


def _table(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "gate_cases.json").read_text(encoding="utf-8"))
    for where, value in changes.items():
        index, key = where.split("__", 1)
        case = doc["cases"][int(index.removeprefix("c"))]
        if value is None:
            del case[key]
        else:
            case[key] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "wanted"),
    [
        (_table(c2__expect={"state": "PREPARD"}), "t.json: /cases/2/expect/state: must be one of "),
        (_table(c4__tool="weather.get"), "t.json: /cases/4/tool: must match the pattern"),
        (_table(c6__expct="allow"), "t.json: /cases/6: unknown key(s) 'expct'"),
        (_table(c7__arguments={}), "t.json: /cases/7: the key 'arguments_raw' excludes 'arguments'"),
        (_table(c0__subject={"tenant": "acme"}), "t.json: /cases/0/subject: missing required key(s) 'id'"),
        (_table(c1__expect=3), "t.json: /cases/1/expect: must be a string or an object, not a number"),
        (_table(c5__subject=None), "t.json: /cases/5: missing required key(s) 'subject'"),
        (_table(c3__reference_clock="2026-02-30T09:00:00Z"), "t.json: /cases/3/reference_clock: not a valid"),
        ({"cases": {}}, "t.json: /cases: must be an array, not an object"),
        ([{"tool": "a@v1", "subject": {"tenant": "t", "id": "i"}}, 7], "t.json: /1: must be an object"),
        ({"tool": "a@v1"}, "t.json: (root): missing required key(s) 'subject'"),
    ],
)
def test_broken_eval_case_files_are_refused(doc: Any, wanted: str) -> None:
    with pytest.raises(CaseFileError) as caught:
        parse_cases(json.dumps(doc), "t.json", lines=False)
    assert str(caught.value).startswith(wanted), str(caught.value)


def test_defaults_complete_a_case() -> None:
    doc = {"defaults": {"subject": {"tenant": "acme", "id": "alice"}}, "cases": [{"tool": "weather.get@v1"}]}
    ((n, case),) = parse_cases(json.dumps(doc), "t.json", lines=False)
    assert n == 1 and case["subject"] == {"tenant": "acme", "id": "alice"}


def test_broken_jsonl_line_names_the_line() -> None:
    good = json.dumps({"tool": "a@v1", "subject": {"tenant": "t", "id": "i"}})
    with pytest.raises(CaseFileError, match=r"^c\.jsonl:3: /tool: must be a string, not a number$"):
        parse_cases(
            f'{good}\n\n{{"tool": 1, "subject": {{"tenant": "t", "id": "i"}}}}\n', "c.jsonl", lines=True
        )
    with pytest.raises(CaseFileError, match=r"^c\.jsonl:2: not JSON \(column 1\): "):
        parse_cases(f"{good}\nnope\n", "c.jsonl", lines=True)


def test_eval_refuses_a_broken_file_with_exit_2(tmp_path: Path) -> None:
    """Through the CLI's existing error path: ``error: ...`` on stderr, exit 2, nothing run."""
    f = tmp_path / "cases.json"
    f.write_text(json.dumps(_table(c2__expect={"state": "PREPARD"})))
    r = subprocess.run(
        [sys.executable, "-m", "callgate", "eval", str(f), "--config", str(ROOT / "callgate.toml")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.startswith(f"error: {f}: /cases/2/expect/state: must be one of "), r.stderr


# -- broken policy test request files ---------------------------------------------------------------


def test_broken_request_file_names_file_and_pointer(tmp_path: Path) -> None:
    (tmp_path / "DENY" / "calendar").mkdir(parents=True)
    (tmp_path / "DENY" / "calendar" / "bad.json").write_text(
        json.dumps(
            {
                "principal": {"tenant": "", "id": "bob"},
                "action": "calendar.create",
                "resource": "calendar:primary",
                "expect_reasons": ["ok", 3],
            }
        )
    )
    cases, bad = collect(tmp_path)
    assert not cases
    (failure,) = bad
    assert failure.message == (
        "malformed case file: DENY/calendar/bad.json: /principal/tenant: must not be empty; "
        "/expect_reasons/1: must be a string, not a number"
    )
