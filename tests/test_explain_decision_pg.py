"""``callgate explain --decision`` on the PostgreSQL store (issue 9): a sidecar records
``Authorizer.Authorize`` decisions in a real PostgreSQL (tests/pg_fixture.py); the CLI, given a
config that names that store and nothing else running beside it, shows them as it does for SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.config import StoreConfig
from tests.conftest import POLICIES, ROOT, start_sidecar, stop_sidecar
from tests.test_decision_records import CALLER_SPAN, CONTEXT, SECRET, TRACE_ID, TRACEPARENT, authorize
from tests.test_store_contract import fresh_pg_database

pytestmark = pytest.mark.postgres

DSN_ENV = "CALLGATE_TEST_EXPLAIN_PG_DSN"


def cli_config(tmp: Path) -> Path:
    toml = tmp / "explain.toml"
    toml.write_text(f'[policy]\ndir = "{POLICIES}"\n[store]\nbackend = "postgres"\ndsn_env = "{DSN_ENV}"\n')
    return toml


def run_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate", "explain", *args],
        cwd=ROOT, env={**os.environ, DSN_ENV: dsn}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_explain_decision_reads_the_postgres_store(postgres_dsn: str) -> None:
    dsn = fresh_pg_database(postgres_dsn)
    os.environ[DSN_ENV] = dsn
    try:
        sc, tmp = start_sidecar(store=StoreConfig(backend="postgres", dsn_env=DSN_ENV))
    finally:
        del os.environ[DSN_ENV]
    try:
        resp = authorize(sc, "carol", "files.delete", CONTEXT, metadata=(("traceparent", TRACEPARENT),))
        unknown = authorize(sc, "carol", "files.nuke", CONTEXT)
        cfg = cli_config(tmp)
        assert not (tmp / "callgate.db").exists()  # nothing in SQLite: the record is in PostgreSQL
        r = run_cli(dsn, "--decision", resp.decision_id, "--config", str(cfg))
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"decision {resp.decision_id}  ALLOW")
        assert "acme/carol asked for files.delete on file:/tmp/a" in r.stdout
        assert f"trace {TRACE_ID}" in r.stdout and f"caller span {CALLER_SPAN}" in r.stdout
        assert SECRET not in r.stdout + r.stderr
        r = run_cli(dsn, "--decision", unknown.decision_id, "--config", str(cfg), "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["record"]["decision"]["effect"] == "deny"
        assert doc["record"]["decision"]["error_code"] == "policy_evaluation_error"
        assert doc["snapshot"]["engine"] == "cedar"
        r = run_cli(dsn, "--decision", "dec_nope", "--config", str(cfg))
        assert r.returncode == 1 and "unknown decision_id 'dec_nope' (not in PostgreSQL store)" in r.stderr
        r = run_cli(
            "postgresql://nobody@127.0.0.1:1/none", "--decision", resp.decision_id, "--config", str(cfg)
        )
        assert r.returncode == 2 and "cannot open the event store PostgreSQL store" in r.stderr
    finally:
        stop_sidecar(sc, tmp)
