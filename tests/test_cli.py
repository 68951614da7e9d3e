"""`callgate check` and `callgate eval` as a policy author runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import DATA, POLICIES, ROOT, short_tmpdir


def callgate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_check_ok_on_example_policies() -> None:
    r = callgate("check", "--config", str(ROOT / "callgate.toml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "weather.get@v1" in r.stdout and "calendar.create_event@v1" in r.stdout


def test_check_example_checks_the_packaged_policies(tmp_path: Path) -> None:
    r = callgate("check", "--example", cwd=tmp_path)  # from any folder: the policies come with callgate
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: 3 tools, engine cedar" in r.stdout and "weather.get@v1" in r.stdout, r.stdout
    assert " INFO " not in r.stderr, r.stderr  # a one-shot command logs warnings and errors only


def test_serve_without_config_or_policies_names_the_example() -> None:
    workdir = short_tmpdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "serve"],
        cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # printed before the sidecar starts
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    assert (
        f"no ./callgate.toml, so the built-in defaults: policies from {workdir}/policies (missing)" in first
    )
    assert "`callgate serve --example` serves the packaged example policies" in first, first


def test_serve_not_ready_says_why_once_not_every_second() -> None:
    """While nothing serves, the watcher retries the load every second (policy.watch_interval_ms):
    the same refusal is logged at ERROR once (again after a minute), a different one at once, and
    the set that loads says so."""
    workdir = short_tmpdir()
    log = workdir / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "callgate", "serve"],
            cwd=workdir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def wait_for(text: str) -> str:
            deadline = time.monotonic() + 60
            while text not in (seen := log.read_text(errors="replace")):
                assert proc.poll() is None and time.monotonic() < deadline, seen
                time.sleep(0.1)
            return seen

        wait_for("callgate listening")
        time.sleep(3.5)  # three retries or more, each finding the same missing folder
        missing = "toolspec_invalid: ToolSpec directory not found"
        refusals = [ln for ln in log.read_text().splitlines() if "refused: error:" in ln]
        assert len(refusals) == 1 and missing in refusals[0] and "(start)" in refusals[0], refusals
        shutil.copytree(POLICIES, workdir / "policies")
        spec = workdir / "policies" / "tools" / "weather.get@v1.json"
        good = spec.read_text()
        spec.write_text(good.replace('"side_effect_class"', '"side_efect_class"'))
        wait_for("unknown ToolSpec member 'side_efect_class'")  # another refusal: logged at once
        spec.write_text(good)
        wait_for("serving (file change, engine cedar)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def test_check_refuses_core_native_without_the_compiled_core(tmp_path: Path) -> None:
    """As in the sdist's pure-Python wheel: ``serve`` would refuse to start, so ``check`` fails."""
    proj = _project_copy(tmp_path)
    config = proj / "callgate.toml"
    config.write_text(config.read_text() + '\n[core]\nengine = "native"\n')
    no_core = "import sys; sys.modules['callgate._native'] = None; from callgate.cli.main import main; sys.exit(main())"
    r = subprocess.run(
        [sys.executable, "-c", no_core, "check", "--offline", "--config", str(config)],
        cwd=proj, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: {config}: config_invalid: core.engine is 'native' but the compiled core" in r.stdout, (
        r.stdout
    )
    assert callgate("check", "--offline", "--config", str(config), cwd=proj).returncode == 0  # built here


def _project_copy(tmp_path: Path) -> Path:
    shutil.copytree(POLICIES, tmp_path / "policies")
    shutil.copy(ROOT / "callgate.toml", tmp_path / "callgate.toml")
    return tmp_path


def test_check_reports_toolspec_file_and_line(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    spec = proj / "policies" / "tools" / "weather.get@v1.json"
    text = spec.read_text().replace('"format": "date"', '"format": "datum"')
    spec.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if '"datum"' in ln)
    r = callgate("check", "--config", str(proj / "callgate.toml"))
    assert r.returncode == 1
    assert f"weather.get@v1.json:{line}" in r.stdout and "unsupported_format" in r.stdout, r.stdout


def test_check_reports_duplicate_key_in_toolspec(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    spec = proj / "policies" / "tools" / "files.delete@v1.json"
    spec.write_text(spec.read_text().replace('"version": "v1",', '"version": "v1",\n  "version": "v2",'))
    r = callgate("check", "--config", str(proj / "callgate.toml"))
    assert r.returncode == 1 and "files.delete@v1.json:4" in r.stdout and "duplicate" in r.stdout, r.stdout


def test_check_reports_cedar_policy_line(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    pol = proj / "policies" / "cedar" / "policies.cedar"
    text = (
        pol.read_text()
        + '\n@id("broken")\npermit (principal, action, resource) when { context.args.nope };\n'
    )
    pol.write_text(text)
    r = callgate("check", "--config", str(proj / "callgate.toml"))
    assert r.returncode == 1
    line = text.splitlines().index('@id("broken")') + 1
    assert f"policies.cedar:{line}" in r.stdout, r.stdout


def test_config_mistakes_name_the_file_and_place_without_a_traceback(tmp_path: Path) -> None:
    """A new user's first mistakes: a config path that is missing or a folder, a typo in a key or
    a section. Each is one ``error:`` line naming the file (and the line of the key, with the
    closest known name), a non-zero exit, from every command that reads the config: never a
    traceback."""
    proj = _project_copy(tmp_path)
    missing = proj / "nope.toml"
    for args, rc in (
        (("serve", "-c", str(missing)), 1),
        (("check", "-c", str(missing)), 1),
        (("eval", "-", "-c", str(missing)), 2),  # eval and policy test: 2 for what is not a case
    ):
        r = callgate(*args, cwd=proj)
        assert r.returncode == rc, (args, r.stdout, r.stderr)
        assert f"error: {missing}: config_invalid: config file not found" in r.stdout + r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
    r = callgate("check", "-c", str(proj), cwd=proj)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error: {proj}: config_invalid: is a directory; --config names the TOML file" in r.stdout
    config = proj / "callgate.toml"
    config.write_text('[server]\nreflection = true\n\n[policy]\nengin = "cedar"\n')
    r = callgate("serve", "-c", str(config), cwd=proj)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (
        f"error: {config}:5: config_invalid: unknown key 'policy.engin' (did you mean 'engine'?; known: dir,"
        in r.stderr
    ), r.stderr
    config.write_text('[polcy]\nengine = "cedar"\n')
    r = callgate("check", "-c", str(config), cwd=proj)
    assert r.returncode == 1
    assert f"error: {config}:1: config_invalid: unknown section [polcy] (did you mean 'policy'?;" in r.stdout


def test_a_cedar_syntax_error_names_the_line_and_column_of_the_token(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    pol = proj / "policies" / "cedar" / "policies.cedar"
    text = pol.read_text() + '\n@id("broken")\npermit (principal in Role::"admin" action, resource);\n'
    pol.write_text(text)
    r = callgate("check", "--config", str(proj / "callgate.toml"))
    line = text.splitlines().index('@id("broken")') + 2
    assert r.returncode == 1
    assert f"error: {pol}:{line}:36: policy_invalid: syntax error: unexpected token `action`" in r.stdout, (
        r.stdout
    )


def test_every_config_option_says_what_it_is() -> None:
    """``--help`` of each command that takes ``--config`` explains it (a bare ``--config CONFIG``
    left a new user guessing which file, and the default)."""
    commands = [
        ["serve"], ["check"], ["status"], ["eval"], ["explain"], ["policy", "test"], ["policy", "prove"],
        ["new", "tool"], ["store", "backup"], ["store", "compact"], ["mcp", "serve"], ["mcp", "import"],
        ["mcp", "check"], ["console"],
    ]  # fmt: skip
    bare = []
    for words in commands:
        r = callgate(*words, "--help")
        assert r.returncode == 0, (words, r.stderr)
        options = r.stdout.split("options:", 1)[1]
        entry = options.split("--config CONFIG, -c CONFIG", 1)[1].split("\n  -", 1)[0]
        if not entry.strip():
            bare.append(" ".join(words))
    assert not bare, f"--config without a help text: {bare}"


def test_eval_and_policy_test_run_on_the_packaged_example(tmp_path: Path) -> None:
    """From an installed wheel there is no callgate.toml to give: ``--example`` (as for ``serve``
    and ``check``). docs/EVAL.md's case file, as written, passes on the example policies; ``policy
    test --example`` runs the example's own tests; nothing is written to the folder."""
    doc = (ROOT / "docs" / "EVAL.md").read_text(encoding="utf-8")
    section = doc[doc.index("## `callgate eval` case files") :]
    cases = tmp_path / "cases.json"
    cases.write_text(section.split("```json\n", 1)[1].split("```", 1)[0])
    r = callgate("eval", str(cases), "--example", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["case"], x["pass"]) for x in results] == [("weather", True), ("bad json", True)], results
    r = callgate("policy", "test", "--example", cwd=tmp_path)
    assert r.returncode == 0 and "0 failed" in r.stdout, r.stdout + r.stderr
    r = callgate("policy", "test", cwd=tmp_path)
    assert r.returncode == 2 and "give DIR" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.json"]


def test_eval_runs_the_case_table_offline() -> None:
    r = callgate("eval", str(DATA / "gate_cases.json"), "--config", str(ROOT / "callgate.toml"))
    assert r.returncode == 0, r.stdout + r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == len(json.loads((DATA / "gate_cases.json").read_text())["cases"])
    assert all(res["pass"] for res in results), [res for res in results if not res["pass"]]
    weather = results[0]
    assert weather["digest"].startswith("sha256:") and weather["normalized_arguments"]["date"] == "2026-07-20"


def test_eval_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    case = {
        "subject": {"tenant": "acme", "id": "bob"},
        "tool": "files.delete@v1",
        "arguments": {"path": "/tmp/x"},
        "expect": "allow",
    }
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps(case) + "\n")
    r = callgate("eval", str(f), "--config", str(ROOT / "callgate.toml"))
    assert r.returncode == 1
    assert json.loads(r.stdout)["pass"] is False


def test_check_reports_a_missing_secret_without_printing_values(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    cfg = proj / "callgate.toml"
    cfg.write_text(
        cfg.read_text() + '\n[[secrets]]\nname = "api"\nfile = "missing.token"\ntools = ["weather.get"]\n'
    )
    r = callgate("check", "--config", str(cfg))
    assert r.returncode == 1 and "secret 'api'" in r.stdout, r.stdout
    (proj / "missing.token").write_text("TOKEN-VALUE-123456789\n")
    r = callgate("check", "--config", str(cfg))
    assert r.returncode == 0 and "secrets: api" in r.stdout and "TOKEN-VALUE" not in r.stdout + r.stderr


def _with_store(proj: Path, *, store: str = "", idempotency: str = "") -> Path:
    """The example config with ``[store]`` keys replaced and/or an ``[idempotency]`` table."""
    cfg = proj / "callgate.toml"
    text = cfg.read_text()
    if store:
        assert 'backend = "sqlite"\npath = "var/callgate.db"\n' in text
        text = text.replace('backend = "sqlite"\npath = "var/callgate.db"\n', store)
    if idempotency:
        assert "[idempotency]" not in text
        text += "\n[idempotency]\n" + idempotency
    cfg.write_text(text)
    return cfg


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_check_refuses_an_unreachable_postgres_store(tmp_path: Path) -> None:
    """Issue 34: `callgate check` accepted an unreachable DSN; the sidecar then failed at start."""
    proj = _project_copy(tmp_path)
    (proj / "dsn").write_text(f"postgresql://callgate:s3cret-pw@127.0.0.1:{_free_port()}/callgate\n")
    cfg = _with_store(proj, store='backend = "postgres"\ndsn_file = "dsn"\n')
    r = callgate("check", "--config", str(cfg))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "store_unavailable" in r.stdout and "postgres" in r.stdout, r.stdout
    assert "s3cret-pw" not in r.stdout + r.stderr
    offline = callgate("check", "--offline", "--config", str(cfg))  # the files only
    assert offline.returncode == 0 and "\nok: " in "\n" + offline.stdout, offline.stdout + offline.stderr


def test_check_refuses_an_unreachable_postgres_key_store(tmp_path: Path) -> None:
    proj = _project_copy(tmp_path)
    (proj / "dsn").write_text(f"postgresql://callgate:s3cret-pw@127.0.0.1:{_free_port()}/callgate\n")
    cfg = _with_store(proj, idempotency='backend = "postgres"\ndsn_file = "dsn"\n')
    r = callgate("check", "--config", str(cfg))
    assert r.returncode == 1 and "idempotency.backend = postgres" in r.stdout, r.stdout
    assert "s3cret-pw" not in r.stdout + r.stderr


def test_check_reaches_a_real_postgres_store(tmp_path: Path, postgres_dsn: str) -> None:
    from tests.test_store_contract import fresh_pg_database

    proj = _project_copy(tmp_path)
    (proj / "dsn").write_text(fresh_pg_database(postgres_dsn) + "\n")
    cfg = _with_store(proj, store='backend = "postgres"\ndsn_file = "dsn"\n')
    r = callgate("check", "--config", str(cfg))
    assert r.returncode == 0, r.stdout + r.stderr
