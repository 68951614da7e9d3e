"""The Helm chart charts/callgate: checks, schema rejections, security of the rendered pod, and
the sidecar started from exactly what the chart renders (so chart and binary cannot drift).

Helm is the project's pinned build (scripts/helm, cached in .cache/bin); if it cannot be built
these tests fail, they never skip. Rendering for the start tests sets one value,
``paths.root``, to a temporary directory: every path the chart renders (mounts, callgate.toml,
the command line, the probes) is under it, so the rendered command runs unchanged on this machine.
The ConfigMap and Secret volumes are laid out at their mount paths the way the kubelet does it
(a timestamped directory, ``..data`` and one symlink per top-level entry); Secret values, which
the chart never sees, are placeholders. The one other mapping: a command's ``argv[0]`` is looked
up in the venv's bin directory, as PATH does in the image (/opt/callgate/bin).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from callgate.server import healthcheck
from tests.markers import Needs, require
from tests.ports import free_port, free_ports

pytestmark = pytest.mark.helm

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "callgate"
SCENARIOS = sorted(p.name for p in CHART.glob("values-*.yaml"))
INVALID = sorted(CHART.glob("ci/invalid/*.yaml"))
VENV_BIN = Path(sys.executable).parent
RELEASE = "my-agent"
ROLES = ("agent", "executor", "confirmer", "authorizer")
START_TIMEOUT_S = 30.0
HELM_ENV = {
    "HELM_CACHE_HOME": str(ROOT / ".cache" / "helm" / "cache"),
    "HELM_CONFIG_HOME": str(ROOT / ".cache" / "helm" / "config"),
    "HELM_DATA_HOME": str(ROOT / ".cache" / "helm" / "data"),
}


# --------------------------------------------------------------------------------------------
# helm and the rendered objects


@lru_cache(maxsize=1)
def _helm_build() -> tuple[str, str]:
    """(path, "") or ("", error): built (or found) once per session, a failure included."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "helm"), "path"], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        return "", f"scripts/helm could not provide helm v3.22.0:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip(), ""


def helm_binary() -> str:
    require(Needs.HELM)
    path, error = _helm_build()
    if error:
        pytest.fail(error)  # never a skip: a chart nobody rendered proves nothing
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **HELM_ENV}
    )
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


@cache
def render(*args: str) -> tuple[dict[str, Any], ...]:
    out = helm("template", RELEASE, str(CHART), "--namespace", "agents", *args).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def scenario(name: str, *extra: str) -> tuple[dict[str, Any], ...]:
    return render("-f", str(CHART / name), *extra)


@dataclass(frozen=True)
class Pod:
    docs: tuple[dict[str, Any], ...]
    spec: dict[str, Any]
    metadata: dict[str, Any]

    @classmethod
    def of(cls, docs: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> Pod:
        deployments = [  # the agent pod (the console's own Deployment: tests/test_chart_console.py)
            d for d in docs if d["kind"] == "Deployment" and not d["metadata"]["name"].endswith("-console")
        ]
        assert len(deployments) == 1, [d["kind"] for d in docs]
        template = deployments[0]["spec"]["template"]
        return cls(tuple(docs), template["spec"], template["metadata"])

    @property
    def containers(self) -> dict[str, dict[str, Any]]:
        items = [*self.spec.get("initContainers", []), *self.spec["containers"]]
        by_name = {c["name"]: c for c in items}
        assert len(by_name) == len(items), "container names must be unique"
        return by_name

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        return {v["name"]: v for v in self.spec["volumes"]}

    def mounted_by(self, volume: str) -> set[str]:
        return {
            name
            for name, c in self.containers.items()
            for m in c.get("volumeMounts", [])
            if m["name"] == volume
        }

    def obj(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}"
        return found[0]


@pytest.fixture(scope="module")
def chart_check_out() -> Iterator[Path]:
    """scripts/chart-check, run once; its rendered manifests stay for the tests below."""
    out = Path(tempfile.mkdtemp(prefix="chart-check-"))
    try:
        helm_binary()
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "chart-check")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "CALLGATE_CHART_OUT": str(out), "PYTHON": sys.executable},
        )
        if proc.returncode != 0:
            pytest.fail(f"scripts/chart-check failed:\n{proc.stdout}\n{proc.stderr[-6000:]}")
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rendered_by_chart_check(out: Path, name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((out / name).read_text()) if d]


# --------------------------------------------------------------------------------------------
# the chart checks (lint, template, kubernetes-validate --strict, schema, parent chart)


def test_chart_check_passes(chart_check_out: Path) -> None:
    for name in SCENARIOS:
        assert (chart_check_out / name).stat().st_size > 0
    assert (chart_check_out / "parent.yaml").stat().st_size > 0


def test_scenarios_cover_the_modes() -> None:
    assert {"values-cedar.yaml", "values-opa.yaml", "values-postgres.yaml"} <= set(SCENARIOS)
    engines = {n: scenario(n) for n in SCENARIOS}
    configs = {n: tomllib.loads(config_toml(docs)) for n, docs in engines.items()}
    assert configs["values-cedar.yaml"]["policy"]["engine"] == "cedar"
    assert configs["values-opa.yaml"]["policy"]["engine"] == "opa"
    assert configs["values-postgres.yaml"]["idempotency"]["backend"] == "postgres"
    assert "opa" in Pod.of(engines["values-opa.yaml"]).containers
    assert "opa" not in Pod.of(engines["values-cedar.yaml"]).containers


@pytest.mark.parametrize("case", INVALID, ids=[p.stem for p in INVALID])
def test_schema_and_template_reject_bad_values(case: Path) -> None:
    expect = re.search(r"^# expect: (.+)$", case.read_text(), re.M)
    assert expect, f"{case.name} needs an '# expect: ' line"
    proc = helm(
        "template", RELEASE, str(CHART), "-f", str(CHART / "values-cedar.yaml"), "-f", str(case), check=False
    )
    assert proc.returncode != 0, f"{case.name}: accepted"
    assert expect.group(1) in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "image.digest=sha256:abc"], "/image/digest"),
        (["--set", "sidecar.native=maybe"], "/sidecar/native"),
        (["--set", "opa.port=80"], "/opa/port"),
        (["--set", "example.agent.image="], "/example/agent/image"),
        (
            ["--set-json", 'listeners.confirmer={"enabled":true,"socket":"/tmp/x.sock"}'],
            "/listeners/confirmer",
        ),
        (
            ["--set", "policy.engine=opa", "--set", "opa.diagnosticPort=8181"],
            "opa.port and opa.diagnosticPort must differ",
        ),
        (["--set", "policies.bundled=false"], "no policy files"),
        (["--set", "observability.metrics.port=0"], "/observability/metrics/port"),
        (["--set", "observability.decisionLog.queue=0"], "/observability/decisionLog/queue"),
        (["--set", "observability.decisionLog.destination=stderr"], "/observability/decisionLog/destination"),
        (
            ["--set", "observability.decisionLog.destination=/var/log/callgate/../x"],
            "/observability/decisionLog/destination",
        ),
        (["--set", "observability.tracing.endpoint=otel-collector:4317"], "/observability/tracing/endpoint"),
        # Helm's --set turns 0.5 into a string: a ratio needs --set-json or a values file
        (
            ["--set", "observability.tracing.sampleRatio=0.5"],
            "/observability/tracing/sampleRatio': got string, want number",
        ),
        (["--set-json", "observability.metrics.from=[{}]"], "/observability/metrics/from/0"),
    ],
)
def test_more_bad_values_are_rejected(args: list[str], message: str) -> None:
    proc = helm("template", RELEASE, str(CHART), *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------
# security of the rendered pod


def pods_under_test(out: Path) -> list[tuple[str, Pod]]:
    return [(n, Pod.of(rendered_by_chart_check(out, n))) for n in [*SCENARIOS, "parent.yaml"]]


def test_security_contexts(chart_check_out: Path) -> None:
    for name, pod in pods_under_test(chart_check_out):
        psc = pod.spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0 and psc["runAsGroup"] > 0, name
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod.spec.get("automountServiceAccountToken") is False, name
        for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
            assert not pod.spec.get(key), (name, key)
        assert not any("hostPath" in v for v in pod.volumes.values()), name
        for cname, c in pod.containers.items():
            sc = c["securityContext"]
            where = f"{name}: {cname}"
            assert sc["runAsNonRoot"] is True, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc.get("privileged", False) is False, where
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), where
            assert sc.get("runAsUser", 1) != 0, where


def test_each_socket_is_mounted_only_where_its_role_is_played(chart_check_out: Path) -> None:
    for name, pod in pods_under_test(chart_check_out):
        containers = pod.containers
        assert "callgate" in containers and "agent" in containers, name
        for role in ROLES:
            volume = f"callgate-{role}-socket"
            if volume not in pod.volumes:
                assert role in ("confirmer", "authorizer"), (
                    name,
                    role,
                )  # agent and executor are on everywhere here
                continue
            assert pod.volumes[volume]["emptyDir"] is not None, (name, volume)
            expected = {"callgate"} | ({role} if role in containers else set())
            assert pod.mounted_by(volume) == expected, (name, role, pod.mounted_by(volume))
            for cname in expected - {"callgate"}:
                mount = next(m for m in containers[cname]["volumeMounts"] if m["name"] == volume)
                assert mount["readOnly"] is True, (name, cname)
        # the agent must never see the confirmer's (or the executor's) socket
        agent_volumes = {m["name"] for m in containers["agent"]["volumeMounts"]}
        assert agent_volumes & {f"callgate-{r}-socket" for r in ROLES} == {"callgate-agent-socket"}, name
        assert "callgate-executor-socket" in pod.volumes, name
        assert "executor" in containers, name


def test_secrets_and_config_are_mounted_only_into_the_sidecar(chart_check_out: Path) -> None:
    for name, pod in pods_under_test(chart_check_out):
        secret_volumes = [v for v, spec in pod.volumes.items() if "secret" in spec or "projected" in spec]
        for volume in secret_volumes:
            assert pod.mounted_by(volume) == {"callgate"}, (name, volume)
        for volume in ("callgate-keys", "callgate-state", "callgate-tmp", "callgate-config"):
            assert pod.mounted_by(volume) == {"callgate"}, (name, volume)
        if "callgate-decision-log" in pod.volumes:
            assert pod.mounted_by("callgate-decision-log") == {"callgate"}, name
        policy_readers = {"callgate", "opa"} if "opa" in pod.containers else {"callgate"}
        assert pod.mounted_by("callgate-policies") == policy_readers, name
        assert pod.volumes["callgate-keys"]["emptyDir"]["medium"] == "Memory", name
        for c in pod.containers.values():
            for env in c.get("env", []):
                assert "valueFrom" not in env, (name, c["name"], env["name"])  # secrets as files, never env
    cedar = Pod.of(rendered_by_chart_check(chart_check_out, "values-cedar.yaml"))
    assert cedar.volumes["callgate-secret-weather-api-key"]["secret"]["secretName"] == "weather-api"
    postgres = Pod.of(rendered_by_chart_check(chart_check_out, "values-postgres.yaml"))
    assert postgres.volumes["callgate-postgres-dsn"]["secret"]["secretName"] == "callgate-postgres"


def test_no_role_listens_on_tcp_and_only_diagnostics_expose_ports(chart_check_out: Path) -> None:
    """Roles are on Unix sockets only; the one port on the pod IP is, with observability.metrics,
    callgate's /metrics (named "metrics"). OPA's API and diagnostics are on loopback."""
    metered = set()
    for name, pod in pods_under_test(chart_check_out):
        config = tomllib.loads(config_toml(pod.docs))
        for role, listener in config["server"].items():
            assert "tcp" not in listener, (name, role)
        metrics_address = config.get("observability", {}).get("metrics_address", "")
        for cname, c in pod.containers.items():
            ports = [(p["name"], p["containerPort"], p["protocol"]) for p in c.get("ports", [])]
            if cname == "callgate" and metrics_address:
                assert ports == [("metrics", int(metrics_address.rpartition(":")[2]), "TCP")], (name, ports)
                assert metrics_address.startswith("0.0.0.0:"), name
                metered.add(name)
            else:
                assert ports == [], (name, cname)
    assert metered == {"values-observability.yaml"}


def test_probes_are_exec_health_checks_over_the_sockets(chart_check_out: Path) -> None:
    pod = Pod.of(rendered_by_chart_check(chart_check_out, "values-cedar.yaml"))
    c = pod.containers["callgate"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd[:3] == ["python", "-m", "callgate.server.healthcheck"], cmd
        assert "unix:/run/callgate/agent/agent.sock" in cmd
        assert ("--live" in cmd) == (probe == "livenessProbe")
        # readiness asks the policy snapshot's health service: a refused reload is visible
        service = cmd[cmd.index("--service") + 1] if "--service" in cmd else ""
        assert service == ("callgate.v1.PolicySnapshot" if probe == "readinessProbe" else ""), (probe, cmd)
    assert c["restartPolicy"] == "Always" and c in pod.spec["initContainers"]  # native sidecar


def test_checksum_annotations_roll_the_pods_on_changes() -> None:
    base = Pod.of(scenario("values-cedar.yaml")).metadata["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", base["checksum/callgate-config"])
    assert re.fullmatch(r"[0-9a-f]{64}", base["checksum/callgate-policies"])
    changed_policy = Pod.of(
        scenario("values-cedar.yaml", "--set-string", "policies.files.cedar/policies\\.cedar=// no policy")
    ).metadata["annotations"]
    assert changed_policy["checksum/callgate-policies"] != base["checksum/callgate-policies"]
    assert changed_policy["checksum/callgate-config"] == base["checksum/callgate-config"]
    changed_config = Pod.of(scenario("values-cedar.yaml", "--set", "confirmation.ttlSeconds=60")).metadata[
        "annotations"
    ]
    assert changed_config["checksum/callgate-config"] != base["checksum/callgate-config"]
    watch = Pod.of(scenario("values-cedar.yaml", "--set", "policy.reload=watch"))
    assert "checksum/callgate-policies" not in watch.metadata["annotations"]
    assert "checksum/callgate-config" in watch.metadata["annotations"]
    assert tomllib.loads(config_toml(watch.docs))["policy"]["watch"] is True
    opa = Pod.of(scenario("values-opa.yaml"))
    assert "--watch" in opa.containers["opa"]["args"]  # hot reload on both sides


def test_config_toml_types_and_extra_keys() -> None:
    """Helm hands numbers from values files over as floats and from --set as ints; callgate's
    loader wants TOML integers. config.extra reaches callgate.toml, merged over the chart's keys."""
    docs = scenario(
        "values-cedar.yaml",
        "--set",
        "confirmation.ttlSeconds=60",
        "--set-json",
        'config.extra={"limits": {"max_sessions": 5000}, "server": {"reflection": false}}',
    )
    config = tomllib.loads(config_toml(docs))
    assert config["confirmation"]["ttl_seconds"] == 60 and config["limits"]["max_sessions"] == 5000
    assert config["limits"]["max_argument_bytes"] == 65536 and config["server"]["reflection"] is False
    for section in config.values():
        for value in section.values() if isinstance(section, dict) else []:
            assert not isinstance(value, float), section
    assert config["server"]["authorizer"] == {} and "socket" in config["server"]["agent"]
    assert config["secrets"] == [
        {
            "name": "weather-api-key",
            "file": "/etc/callgate/secrets/weather-api-key/api-key",
            "tools": ["weather.get"],
            "resources": ["*"],
        }
    ]


def observability_of(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    section: dict[str, Any] = tomllib.loads(config_toml(docs)).get("observability", {})
    return section


def network_policy(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    spec: dict[str, Any] = policy["spec"]
    return spec


def test_observability_defaults() -> None:
    """Decision log on stdout, lossless; no metrics listener, no port, no scrape annotations, no
    ingress; no tracing."""
    docs = render()
    pod = Pod.of(docs)
    assert observability_of(docs) == {
        "decision_log": "stdout",
        "decision_log_mode": "lossless",
        "decision_log_queue": 10000,
        "decision_log_mask": [],
    }
    assert "ports" not in pod.containers["callgate"]
    assert not any(k.startswith("prometheus.io/") for k in pod.metadata["annotations"])
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]  # off by default: it would confine the agent
    assert "callgate-decision-log" not in pod.volumes
    off = render("--set", "observability.decisionLog.enabled=false")
    assert "observability" not in tomllib.loads(config_toml(off))


def test_observability_scenario_renders_metrics_logs_and_traces() -> None:
    docs = scenario("values-observability.yaml")
    pod = Pod.of(docs)
    values = yaml.safe_load((CHART / "values-observability.yaml").read_text())["observability"]
    obs = observability_of(docs)
    assert obs == {
        "metrics_address": "0.0.0.0:9464",
        "decision_log": "stdout",
        "decision_log_mode": "bounded",
        "decision_log_queue": 10000,
        "decision_log_mask": ["calendar.create_event#/title"],
        "tracing_exporter": "otlp",
        "tracing_endpoint": "http://otel-collector.monitoring:4317",
        "tracing_sample_ratio": 0.25,
    }
    assert pod.containers["callgate"]["ports"] == [
        {"name": "metrics", "containerPort": 9464, "protocol": "TCP"}
    ]
    annotations = pod.metadata["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9464"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert network_policy(docs)["ingress"] == [
        {"from": values["metrics"]["from"], "ports": [{"protocol": "TCP", "port": 9464}]}
    ]
    # the collector is reachable: the scenario's egress rule for OTLP
    assert any(r.get("ports") == [{"protocol": "TCP", "port": 4317}] for r in network_policy(docs)["egress"])


def test_observability_values_map_to_callgate_toml() -> None:
    docs = scenario(
        "values-cedar.yaml",
        "--set",
        "observability.metrics.enabled=true",
        "--set",
        "observability.metrics.port=9100",
        "--set",
        "observability.metrics.annotations=false",
        "--set",
        "observability.decisionLog.destination=/var/log/callgate/decisions.jsonl",
        "--set",
        "observability.decisionLog.sizeLimit=64Mi",
        "--set",
        "observability.tracing.exporter=console",
        "--set",
        "observability.tracing.sampleRatio=1",  # an int from --set: still a TOML float
        "--set-json",
        'networkPolicy.ingress=[{"from": [{"podSelector": {}}], "ports": [{"port": 8080}]}]',
    )
    pod = Pod.of(docs)
    obs = observability_of(docs)
    assert obs["metrics_address"] == "0.0.0.0:9100"
    assert obs["decision_log"] == "/var/log/callgate/decisions.jsonl"
    assert obs["tracing_exporter"] == "console" and "tracing_endpoint" not in obs
    assert obs["tracing_sample_ratio"] == 1.0 and isinstance(obs["tracing_sample_ratio"], float)
    assert pod.containers["callgate"]["ports"] == [
        {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}
    ]
    assert not any(k.startswith("prometheus.io/") for k in pod.metadata["annotations"])
    # the file is on its own emptyDir, writable by callgate only (the root filesystem is read-only)
    assert pod.volumes["callgate-decision-log"] == {
        "name": "callgate-decision-log",
        "emptyDir": {"sizeLimit": "64Mi"},
    }
    mount = next(
        m for m in pod.containers["callgate"]["volumeMounts"] if m["name"] == "callgate-decision-log"
    )
    assert mount == {"name": "callgate-decision-log", "mountPath": "/var/log/callgate"}
    assert pod.mounted_by("callgate-decision-log") == {"callgate"}
    # networkPolicy.ingress comes first, then the metrics rule with the default peers
    ingress = network_policy(docs)["ingress"]
    assert ingress[0] == {"from": [{"podSelector": {}}], "ports": [{"port": 8080}]}
    assert ingress[1] == {
        "from": [{"podSelector": {"matchLabels": {"callgate/metrics-scraper": "true"}}}],
        "ports": [{"protocol": "TCP", "port": 9100}],
    }
    tiny = observability_of(
        render(
            "--set",
            "observability.tracing.exporter=console",
            "--set-json",
            "observability.tracing.sampleRatio=0.00001",
        )
    )
    assert tiny["tracing_sample_ratio"] == 1e-05
    # the OTLP endpoint is written only for otlp; traces off write no tracing keys
    assert not any(
        k.startswith("tracing_")
        for k in observability_of(render("--set", "observability.tracing.endpoint=http://otel:4317"))
    )
    # metrics off: no port, no rule, no annotations, whatever the other metrics values say
    quiet = scenario(
        "values-cedar.yaml",
        "--set",
        "observability.metrics.port=9100",
        "--set",
        "observability.metrics.annotations=true",
    )
    assert "metrics_address" not in observability_of(quiet) and network_policy(quiet)["ingress"] == []
    assert "ports" not in Pod.of(quiet).containers["callgate"]
    # no NetworkPolicy, no rule (and nothing else changes)
    no_np = render("--set", "observability.metrics.enabled=true", "--set", "networkPolicy.enabled=false")
    assert not [d for d in no_np if d["kind"] == "NetworkPolicy"]
    assert observability_of(no_np)["metrics_address"] == "0.0.0.0:9464"


def network_policy_values(name: str) -> dict[str, Any]:
    """networkPolicy of values.yaml with the scenario's over it (one level deep is enough here)."""
    merged: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())["networkPolicy"]
    if name in SCENARIOS:
        over = yaml.safe_load((CHART / name).read_text()).get("networkPolicy", {})
        merged = {**merged, **over, "egress": {**merged["egress"], **over.get("egress", {})}}
    return merged


def test_network_policy_selects_the_pod_and_admits_nothing(chart_check_out: Path) -> None:
    """No ingress at all, except the metrics port from the configured peers when it is on."""
    for name, pod in pods_under_test(chart_check_out):
        policies = [d for d in pod.docs if d["kind"] == "NetworkPolicy"]
        if name in SCENARIOS and not network_policy_values(name)["enabled"]:
            assert policies == [], name
            continue
        assert len(policies) == 1, name
        spec = policies[0]["spec"]
        labels = pod.metadata["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= labels.items(), name
        assert "Ingress" in spec["policyTypes"], name
        metrics = [p for p in pod.containers["callgate"].get("ports", []) if p["name"] == "metrics"]
        if metrics:
            assert len(spec["ingress"]) == 1, name
            (rule,) = spec["ingress"]
            assert rule["ports"] == [{"protocol": "TCP", "port": metrics[0]["containerPort"]}], name
            assert rule["from"] and all(peer for peer in rule["from"]), name  # never "from anywhere"
        else:
            assert spec["ingress"] == [], name
        assert "Egress" in spec["policyTypes"], name
    postgres = Pod.of(rendered_by_chart_check(chart_check_out, "values-postgres.yaml"))
    egress = next(d for d in postgres.docs if d["kind"] == "NetworkPolicy")["spec"]["egress"]
    assert any(r["ports"] == [{"protocol": "TCP", "port": 5432}] for r in egress)


def test_the_opa_beside_callgate_is_read_only_and_loopback() -> None:
    pod = Pod.of(scenario("values-opa.yaml"))
    args = pod.containers["opa"]["args"]
    assert "--addr=127.0.0.1:8181" in args and "--authorization=basic" in args and "--ignore=.*" in args
    # diagnostics on loopback too: nothing of OPA on the pod IP, so no port and no kubelet probe
    assert "--diagnostic-addr=127.0.0.1:8282" in args
    assert not any(a.startswith("--diagnostic-addr=:") or "0.0.0.0" in a for a in args)
    assert "ports" not in pod.containers["opa"]
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(pod.containers["opa"])
    assert pod.containers["opa"]["image"] == "openpolicyagent/opa:1.22.3"
    authz = pod.obj("ConfigMap", f"{RELEASE}-callgate-opa")["data"]["authz.rego"]
    assert "package system.authz" in authz and "default allow := false" in authz
    assert pod.mounted_by("callgate-opa-authz") == {"opa"}
    # OPA (a native sidecar too) starts before callgate, which asks it
    names = [c["name"] for c in pod.spec["initContainers"]]
    assert names.index("opa") < names.index("callgate")


RENDERINGS = ["values.yaml", *SCENARIOS]
"""The defaults alone, then each scenario file over them."""


def rendering(name: str) -> tuple[dict[str, Any], ...]:
    return render() if name == "values.yaml" else scenario(name)


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_rendering_keeps_the_pod_properties(name: str) -> None:
    """Per rendering (kubernetes-validate checks the same ones in scripts/chart-check): a
    NetworkPolicy only where the values turn it on, and then never one that cuts the agent off
    (the values' egress rules are all there); readiness on the policy snapshot's health service;
    OPA, where it runs, on loopback only; callgate's log as JSON lines; no PodMonitor unless asked."""
    docs = rendering(name)
    pod = Pod.of(docs)
    np = network_policy_values(name)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(policies) == (1 if np["enabled"] else 0), name
    for policy in policies:
        spec = policy["spec"]
        if "Egress" in spec["policyTypes"]:
            given = np["egress"]["rules"]
            assert given and all(rule in spec["egress"] for rule in given), (name, spec["egress"])
    readiness = pod.containers["callgate"]["readinessProbe"]["exec"]["command"]
    assert readiness[readiness.index("--service") + 1] == "callgate.v1.PolicySnapshot", name
    if "opa" in pod.containers:
        opa = pod.containers["opa"]
        assert [a for a in opa["args"] if a.startswith("--diagnostic-addr=")] == [
            "--diagnostic-addr=127.0.0.1:8282"
        ]
        assert "ports" not in opa and "livenessProbe" not in opa, name
    assert tomllib.loads(config_toml(docs))["log"] == {"format": "json"}, name
    assert not [d for d in docs if d["kind"] == "PodMonitor"], name


def test_network_policy_is_off_by_default_and_refuses_to_confine_the_agent_silently() -> None:
    """A NetworkPolicy selects whole pods: restricted egress without rules would leave the agent
    DNS only, so the chart refuses it (naming the way out); unrestricted egress is accepted."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["networkPolicy"]["enabled"] is False
    for extra in ([], ["-f", str(CHART / "values-opa.yaml")], ["-f", str(CHART / "values-postgres.yaml")]):
        proc = helm(
            "template", RELEASE, str(CHART), *extra, "--set", "networkPolicy.enabled=true",
            "--set-json", "networkPolicy.egress.rules=[]", check=False,
        )  # fmt: skip
        assert proc.returncode != 0, extra
        assert "networkPolicy.egress.restrict applies to every container of the pod" in proc.stderr
        assert "networkPolicy.egress.rules" in proc.stderr
    open_egress = render(
        "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.egress.restrict=false"
    )
    spec = network_policy(open_egress)
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec


def test_json_logs_are_the_charts_default_and_text_a_value() -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text())["log"] == {"format": "json"}
    assert tomllib.loads(config_toml(render("--set", "log.format=text")))["log"] == {"format": "text"}


def test_pod_monitor_is_optional_and_scrapes_the_metrics_port() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["observability"]["metrics"]["podMonitor"]
    assert values == {"enabled": False, "interval": "", "labels": {}}
    docs = scenario(
        "values-observability.yaml",
        "--set",
        "observability.metrics.podMonitor.enabled=true",
        "--set",
        "observability.metrics.podMonitor.interval=30s",
        "--set-json",
        'observability.metrics.podMonitor.labels={"release": "prometheus"}',
    )
    pod = Pod.of(docs)
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == f"{RELEASE}-callgate"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod.metadata["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]
    assert "metrics" in {p["name"] for p in pod.containers["callgate"]["ports"]}
    no_interval = scenario(
        "values-observability.yaml", "--set", "observability.metrics.podMonitor.enabled=true"
    )
    (monitor,) = [d for d in no_interval if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]


def test_example_pull_secrets_affinity_and_tolerations() -> None:
    example = yaml.safe_load((CHART / "values-cedar.yaml").read_text())["example"]
    pod = Pod.of(scenario("values-cedar.yaml"))
    assert pod.spec["imagePullSecrets"] == example["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod.spec["tolerations"] == example["tolerations"]
    assert pod.spec["affinity"] == example["affinity"]
    assert not {"imagePullSecrets", "tolerations", "affinity"} & set(Pod.of(render()).spec)


def test_versions_and_bundled_policies_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == values["image"]["tag"] == project["version"]
    assert values["opa"]["image"]["tag"] == "1.22.3"
    pod = Pod.of(scenario("values-cedar.yaml"))
    data = pod.obj("ConfigMap", f"{RELEASE}-callgate-policies")["data"]
    items = pod.volumes["callgate-policies"]["configMap"]["items"]
    files = {i["path"]: data[i["key"]] for i in items}
    expected = {
        p.relative_to(ROOT / "policies").as_posix(): p.read_text()
        for d in ("tools", "cedar")
        for p in (ROOT / "policies" / d).iterdir()
        if p.is_file()
    }
    assert files == expected, "run scripts/chart-check sync-policies"


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and all(f in ("python:3.11-slim", "${PYTHON_IMAGE}") for f in froms)
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    values = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]
    assert users == [f"{values['runAsUser']}:{values['runAsGroup']}"], (
        "one USER, the chart's non-root uid:gid"
    )
    # the sidecar extra, and optional ones (e.g. otlp for observability.tracing.exporter: otlp)
    # through a build ARG
    assert re.search(r'^ARG EXTRAS=""$', text, re.M)
    assert 'pip install ".[sidecar${EXTRAS:+,$EXTRAS}]"' in text
    assert "otlp" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert re.search(r'^ENTRYPOINT \["callgate"\]$', text, re.M)
    ignore = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M)
    sources = {w for line in copied for w in line.split()}
    # what the build backend needs, and what callgate/example links to (serve --example)
    assert sources == {"pyproject.toml", "README.md", "pep517", "callgate", "callgate.toml", "policies"}
    assert ignore[0] == "*" and {f"!{s}/" if (ROOT / s).is_dir() else f"!{s}" for s in sources} <= set(ignore)


# --------------------------------------------------------------------------------------------
# the sidecar started from what the chart renders


def config_toml(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> str:
    cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")]
    assert len(cms) == 1
    text: str = cms[0]["data"]["callgate.toml"]
    return text


def write_atomic_volume(mount: Path, files: dict[str, str]) -> None:
    """Lay out ``files`` (path -> content) the way the kubelet writes a ConfigMap/Secret volume."""
    stamp = "..2026_01_01_00_00_00.000000001"
    mount.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        target = mount / stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (mount / "..data").symlink_to(stamp)
    for top in sorted({rel.split("/", 1)[0] for rel in files}):
        (mount / top).symlink_to(f"..data/{top}")


def lay_out(pod: Pod, container: str, root: Path) -> None:
    """Create every volume of ``container`` at its rendered mount path (all under ``root``)."""
    for m in pod.containers[container].get("volumeMounts", []):
        path = Path(m["mountPath"])
        assert path.is_relative_to(root), f"{m['name']} is mounted outside paths.root: {path}"
        volume = pod.volumes[m["name"]]
        if (path / "..data").exists() or ("emptyDir" in volume and path.is_dir()):
            continue  # the same volume, already laid out for another container of the pod
        if "configMap" in volume:
            data = pod.obj("ConfigMap", volume["configMap"]["name"])["data"]
            items = volume["configMap"].get("items") or [{"key": k, "path": k} for k in data]
            write_atomic_volume(path, {i["path"]: data[i["key"]] for i in items})
        elif "secret" in volume:
            items = volume["secret"]["items"]
            write_atomic_volume(
                path, {i["path"]: f"placeholder-{volume['secret']['secretName']}-{i['key']}" for i in items}
            )
        else:
            assert "emptyDir" in volume, m["name"]
            path.mkdir(parents=True, exist_ok=True)


def venv_argv(argv: list[str]) -> list[str]:
    exe = VENV_BIN / argv[0]
    assert exe.exists(), f"{argv[0]} is not in {VENV_BIN}"
    return [str(exe), *argv[1:]]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def probe(container: dict[str, Any], name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        venv_argv(container[name]["exec"]["command"]), capture_output=True, text=True, timeout=30, env=env
    )


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cgc-", dir="/tmp"))  # short: Unix socket paths <= 107 bytes
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Proc:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.p = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=5)
        self._log.close()
        return self.p.returncode


def start_rendered_sidecar(pod: Pod, root: Path) -> tuple[Proc, dict[str, Any], dict[str, str]]:
    c = pod.containers["callgate"]
    lay_out(pod, "callgate", root)
    env = container_env(c)
    proc = Proc(venv_argv([*c["command"], *c["args"]]), env, root / "tmp", root / "callgate.log")
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.p.poll() is not None:
            pytest.fail(f"the rendered callgate command exited with {proc.p.returncode}:\n{proc.log()}")
        result = probe(c, "startupProbe", env)
        if result.returncode == 0:
            return proc, c, env
        if time.monotonic() > deadline:
            proc.stop()
            pytest.fail(f"startup probe never passed: {result.stdout}{result.stderr}\n{proc.log()}")
        time.sleep(0.2)


def config_arg(container: dict[str, Any]) -> str:
    args = container["args"]
    return str(args[args.index("--config") + 1])


def test_the_rendered_command_line_serves(root: Path) -> None:
    pod = Pod.of(scenario("values-cedar.yaml", "--set", f"paths.root={root}"))
    proc, c, env = start_rendered_sidecar(pod, root)
    try:
        for name in ("readinessProbe", "livenessProbe"):
            result = probe(c, name, env)
            assert result.returncode == 0, (name, result.stdout, result.stderr)
        sockets = {
            role: root / "run" / "callgate" / role / f"{role}.sock"
            for role in ("agent", "executor", "confirmer")
        }
        for role, sock in sockets.items():
            assert healthcheck.check(f"unix:{sock}") == "SERVING", role
            assert stat.S_IMODE(sock.stat().st_mode) == 0o660, role
        assert not (root / "run" / "callgate" / "authorizer").exists()  # disabled: no listener, no volume
        # the agent container's view: its env names the socket it has mounted
        agent_env = {e["name"]: e["value"] for e in pod.containers["agent"]["env"]}
        assert healthcheck.check(agent_env["CALLGATE_AGENT_SOCKET"]) == "SERVING"
        # the key ring lives on the memory emptyDir, owner-only
        ring = root / "run" / "callgate" / "keys" / "ring"
        assert (ring / "keyring.json").exists() and stat.S_IMODE(ring.stat().st_mode) == 0o700
        check = subprocess.run(
            # --offline: the rendered DSN Secret is a placeholder (the store's reachability is tested
            # in tests/test_cli.py)
            venv_argv(["callgate", "check", "--offline", "--config", config_arg(c)]),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert check.returncode == 0 and check.stdout.startswith("ok: 3 tools, engine cedar"), (
            check.stdout + check.stderr
        )
    finally:
        rc = proc.stop()
    assert rc == 0, proc.log()


def swap_atomic_volume(mount: Path, files: dict[str, str], stamp: str) -> None:
    """Update a volume laid out by :func:`write_atomic_volume` as the kubelet does: a new
    timestamped directory, then ``..data`` swapped to it with one rename."""
    for rel, content in files.items():
        target = mount / stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (mount / "..data_tmp").symlink_to(stamp)
    os.replace(mount / "..data_tmp", mount / "..data")


def test_a_refused_reload_fails_readiness_only(root: Path) -> None:
    """policy.reload=watch: a broken ConfigMap update is refused (the last good snapshot keeps
    serving) and the rendered readiness probe fails, so Kubernetes sees it; startup and liveness
    still pass (a restart would not fix the files). Fixed files make the pod ready again."""
    pod = Pod.of(
        scenario(
            "values-cedar.yaml",
            "--set",
            f"paths.root={root}",
            "--set",
            "policy.reload=watch",
            "--set",
            "policy.watchIntervalMs=100",
        )
    )
    proc, c, env = start_rendered_sidecar(pod, root)
    try:
        assert probe(c, "readinessProbe", env).returncode == 0
        mount = Path(next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "callgate-policies"))
        data = pod.obj("ConfigMap", pod.volumes["callgate-policies"]["configMap"]["name"])["data"]
        files = {i["path"]: data[i["key"]] for i in pod.volumes["callgate-policies"]["configMap"]["items"]}
        broken = {**files, "cedar/policies.cedar": "permit (principal, action, resource"}
        swap_atomic_volume(mount, broken, "..2026_01_01_00_01_00.000000001")

        def wait_readiness(rc: int) -> subprocess.CompletedProcess[str]:
            deadline = time.monotonic() + 30
            while True:
                result = probe(c, "readinessProbe", env)
                if result.returncode == rc or time.monotonic() > deadline:
                    return result
                time.sleep(0.2)

        refused = wait_readiness(1)
        assert refused.returncode == 1 and "NOT_SERVING" in refused.stdout, (refused.stdout, proc.log())
        assert probe(c, "livenessProbe", env).returncode == 0
        assert probe(c, "startupProbe", env).returncode == 0  # the last good snapshot serves
        swap_atomic_volume(mount, files, "..2026_01_01_00_02_00.000000001")
        ready = wait_readiness(0)
        assert ready.returncode == 0, (ready.stdout, proc.log())
    finally:
        assert proc.stop() == 0, proc.log()


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_rendered_config_passes_callgate_check(name: str, root: Path) -> None:
    pod = Pod.of(scenario(name, "--set", f"paths.root={root}"))
    c = pod.containers["callgate"]
    lay_out(pod, "callgate", root)
    check = subprocess.run(
        # --offline: the rendered DSN Secret is a placeholder (the store's reachability is tested
        # in tests/test_cli.py)
        venv_argv(["callgate", "check", "--offline", "--config", config_arg(c)]),
        capture_output=True,
        text=True,
        timeout=60,
        env=container_env(c),
    )
    assert check.returncode == 0 and check.stdout.startswith("ok: 3 tools"), check.stdout + check.stderr


@pytest.mark.opa
def test_the_rendered_opa_pair_serves(root: Path) -> None:
    """values-opa.yaml: the rendered OPA arguments run on the project's pinned OPA binary (the
    image's entrypoint is /opa), then callgate with the rendered command; callgate reports
    SERVING only once OPA serves its revision, and OPA refuses writes from inside the pod."""
    from tests.opa_fixture import opa_binary

    port, diag = free_ports(2)
    pod = Pod.of(
        scenario(
            "values-opa.yaml",
            "--set",
            f"paths.root={root}",
            "--set",
            f"opa.port={port}",
            "--set",
            f"opa.diagnosticPort={diag}",
        )
    )
    lay_out(pod, "opa", root)
    opa = Proc([str(opa_binary()), *pod.containers["opa"]["args"]], dict(os.environ), root, root / "opa.log")
    try:
        proc, c, env = start_rendered_sidecar(pod, root)
        try:
            assert probe(c, "readinessProbe", env).returncode == 0
            http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with http.open(f"http://127.0.0.1:{diag}/health", timeout=5) as r:  # diagnostics: loopback
                assert r.status == 200
            assert listening_addresses(diag) == {"127.0.0.1"}  # never the pod IP
            put = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/policies/callgate/evil",
                data=b"package callgate.evil\n",
                method="PUT",
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                http.open(put, timeout=5)
            assert refused.value.code == 401
            query = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/query", data=json.dumps({"query": "data"}).encode()
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                http.open(query, timeout=5)
            assert refused.value.code == 401
        finally:
            assert proc.stop() == 0, proc.log()
    finally:
        opa.stop()


def listening_addresses(port: int) -> set[str]:
    """IPv4/IPv6 addresses with a TCP listener on ``port`` (from /proc/net/tcp{,6})."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # LISTEN
                raw = bytes.fromhex(addr)
                if width == 8:
                    found.add(".".join(str(b) for b in reversed(raw)))
                else:
                    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
                    found.add(str(ipaddress.IPv6Address(b"".join(words))))
    return found


def scrape(port: int) -> str:
    http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with http.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        return str(r.read().decode())


def test_the_rendered_observability_scenario_serves_metrics_logs_and_traces(root: Path) -> None:
    """values-observability.yaml, on a free metrics port, with the decision log in a file on its
    emptyDir and console spans (the venv has no OTLP exporter, the image needs EXTRAS=otlp for
    it): the rendered command serves GET /metrics on the rendered address, a proposal over the
    agent socket shows up in the metrics, as a masked decision-log line and as spans."""
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    port = free_port()
    pod = Pod.of(
        scenario(
            "values-observability.yaml",
            "--set",
            f"paths.root={root}",
            "--set",
            f"observability.metrics.port={port}",
            "--set",
            "observability.decisionLog.destination=/var/log/callgate/decisions.jsonl",
            "--set",
            "observability.tracing.exporter=console",
            "--set",
            "observability.tracing.sampleRatio=1",
        )
    )
    obs = tomllib.loads(config_toml(pod.docs))["observability"]
    assert obs["metrics_address"] == f"0.0.0.0:{port}"
    log_file = root / "var" / "log" / "callgate" / "decisions.jsonl"
    assert obs["decision_log"] == str(log_file)
    proc, c, env = start_rendered_sidecar(pod, root)
    try:
        assert probe(c, "readinessProbe", env).returncode == 0
        text = scrape(port)
        assert "callgate_policy_snapshot_info{" in text and 'engine="cedar"' in text
        assert re.search(r"^callgate_\w+", text, re.M)
        agent_env = {e["name"]: e["value"] for e in pod.containers["agent"]["env"]}
        with grpc.insecure_channel(agent_env["CALLGATE_AGENT_SOCKET"]) as channel:
            gate = pb_grpc.GateStub(channel)
            session = gate.OpenSession(
                pb.OpenSessionRequest(
                    subject=pb.Subject(tenant="acme", id="alice"), timezone="Asia/Shanghai", locale="en"
                ),
                timeout=10,
            ).session_id
            gate.ListTools(pb.ListToolsRequest(session_id=session, model_call_id="mc-1"), timeout=10)
            gate.Propose(
                pb.ProposeRequest(
                    session_id=session,
                    model_call_id="mc-1",
                    proposal_id="call_1",
                    tool_name="calendar.create_event",
                    tool_version="v1",
                    idempotency_key="k-1",
                    arguments=json.dumps({"title": "dentist, private", "start": "2026-07-20T09:00"}).encode(),
                ),
                timeout=10,
            )
        text = scrape(port)
        assert re.search(
            r'^callgate_decisions_total\{[^}]*tool="calendar.create_event@v1"[^}]*\} 1\.0$', text, re.M
        ), text
        assert re.search(
            r'^callgate_rpc_duration_seconds_count\{[^}]*method="Propose"[^}]*\} 1\.0$', text, re.M
        ), text
        # bounded mode: the line is written in the background
        deadline = time.monotonic() + 10
        while (
            not (log_file.exists() and "normalized" in log_file.read_text()) and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        lines = [json.loads(line) for line in log_file.read_text().splitlines()]
        kinds = [line["kind"] for line in lines]
        assert "normalized" in kinds and any(k in kinds for k in ("authorized", "authorization_rejected")), (
            kinds
        )
        assert all(line["tool"] == "calendar.create_event@v1" for line in lines)
        assert "dentist" not in log_file.read_text()  # masked: calendar.create_event#/title
        normalized = next(line for line in lines if line["kind"] == "normalized")
        assert json.loads(normalized["data"]["normalized_arguments"])["title"] == "***", normalized
    finally:
        assert proc.stop() == 0, proc.log()
    spans = proc.log_path.read_text()  # console exporter: stderr, flushed at shutdown at the latest
    assert '"name": "callgate.authorize"' in spans and '"service.name": "callgate"' in spans, proc.log()


# --------------------------------------------------------------------------------------------
# callgate.server.healthcheck


@pytest.fixture(scope="module")
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    tmp = Path(tempfile.mkdtemp(prefix="cgh-", dir="/tmp"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    target = f"unix:{tmp / 'h.sock'}"
    server.add_insecure_port(target)
    server.start()
    try:
        yield target, servicer
    finally:
        server.stop(None)
        shutil.rmtree(tmp, ignore_errors=True)


def test_healthcheck_exit_codes(
    health_server: tuple[str, health.HealthServicer], capsys: pytest.CaptureFixture[str]
) -> None:
    target, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set("callgate.v1.Gate", health_pb2.HealthCheckResponse.NOT_SERVING)
    missing = "unix:/tmp/callgate-no-such-socket.sock"
    assert healthcheck.main([target]) == 0
    assert healthcheck.main([target, "--service", "callgate.v1.Gate"]) == 1
    assert healthcheck.main([target, "--service", "callgate.v1.Gate", "--live"]) == 0
    assert healthcheck.main([target, "--service", "no.such.Service"]) == 1
    assert healthcheck.main([target, "--service", "no.such.Service", "--live"]) == 0
    assert healthcheck.main([target, missing, "--timeout", "0.5"]) == 1
    assert healthcheck.main([missing, "--live", "--timeout", "0.5"]) == 1
    out = capsys.readouterr().out
    assert f"{target}: NOT_SERVING" in out and f"{target}: SERVICE_UNKNOWN" in out
    assert f"{missing}: UNREACHABLE: UNAVAILABLE" in out
    with pytest.raises(SystemExit) as usage:
        healthcheck.main([])
    assert usage.value.code == 2


def test_healthcheck_runs_as_a_module(health_server: tuple[str, health.HealthServicer]) -> None:
    target, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    proc = subprocess.run(
        [sys.executable, "-m", "callgate.server.healthcheck", target],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"{target}: SERVING", proc.stdout + proc.stderr
