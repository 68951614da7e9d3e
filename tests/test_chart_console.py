"""The chart's console Deployment (issue 13, docs/CONSOLE.md): off by default; with
values-console.yaml a Deployment + Service + ConfigMap whose console.toml the console loads, the
console container mounting only the confirmer socket of its own callgate sidecar (on the shared
PostgreSQL store); refused without the PostgreSQL store, tenants or auth settings. scripts/
chart-check (tests/test_chart.py) lints, renders and validates the scenario with
kubernetes-validate --strict like every other."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from callgate.console import config
from tests.test_chart import CHART, RELEASE, helm, render, scenario

pytestmark = pytest.mark.helm


def console_objects(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if d["metadata"]["name"].endswith("-console")}


def test_off_by_default() -> None:
    assert console_objects(render()) == {}


def test_the_console_scenario(tmp_path: Path) -> None:
    docs = scenario("values-console.yaml")
    objs = console_objects(docs)
    assert set(objs) == {"ConfigMap", "Deployment", "Service"}
    toml = objs["ConfigMap"]["data"]["console.toml"]
    (tmp_path / "console.toml").write_text(toml)
    cfg = config.load(tmp_path / "console.toml")  # what `callgate console` reads
    assert cfg.auth.mode is config.AuthMode.OIDC and cfg.tenants[0].name == "acme"
    assert cfg.confirmer == "unix:/run/callgate/confirmer/confirmer.sock"
    assert cfg.allowed_hosts == ("localhost:8765",) and "localhost:8765" in cfg.hosts  # Host check
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}
    assert {"callgate", "console"} <= set(containers)
    console = containers["console"]
    mounts = {m["name"] for m in console["volumeMounts"]}
    assert "callgate-confirmer-socket" in mounts
    assert not {"callgate-agent-socket", "callgate-executor-socket", "callgate-postgres-dsn"} & mounts
    assert console["securityContext"]["readOnlyRootFilesystem"] is True
    assert console["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "callgate-console-webhook"
    # the console pod's sidecar uses the shared PostgreSQL store
    sidecar_cfg = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")
    )
    store = tomllib.loads(sidecar_cfg["data"]["callgate.toml"])["store"]
    assert store["backend"] == "postgres" and store["dsn_file"].endswith("/postgres/dsn")
    svc = objs["Service"]["spec"]
    assert svc["selector"] == objs["Deployment"]["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "console.enabled=true", "--set-json", 'console.tenants=[{"name":"acme"}]'],
            "store.backend: postgres",
        ),
        (["-f", str(CHART / "values-console.yaml"), "--set-json", "console.tenants=[]"], "console.tenants"),
        (["-f", str(CHART / "values-console.yaml"), "--set", "console.auth.jwksUrl="], "mode oidc needs"),
        (["-f", str(CHART / "values-console.yaml"), "--set", "console.auth.mode=static"], "tokensSecret"),
        (["-f", str(CHART / "values-console.yaml"), "--set", "console.port=80"], "/console/port"),
        (["--set", "store.backend=postgres"], "needs idempotency.backend: postgres"),
    ],
)
def test_bad_console_values_are_refused(args: list[str], message: str) -> None:
    proc = helm("template", RELEASE, str(CHART), *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
