"""``callgate --version``, the one version every artefact carries, and the slim install's refusal
of sidecar commands (issue 32, item 3), in the development venv. tests/test_dist.py checks the same
from the installed wheel."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from callgate.cli import main as cli
from callgate.cli import version
from callgate.cli.example import EXAMPLE_DIR, example_config
from callgate.native import load_native
from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = PYPROJECT["project"]["version"]


def test_version_prints_every_part() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "callgate", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"callgate {VERSION}"
    assert load_native() is not None  # scripts/test builds the core (a missing build fails, never skips)
    assert re.fullmatch(
        r"core: native \(callgate-core [0-9.]+, release opt-level s, \S+, rustc .+\)", lines[1]
    ), lines
    assert lines[2] == "proto: callgate.v1"
    assert re.fullmatch(r"store schema: sqlite [1-9]\d*, postgresql [1-9]\d*", lines[3]), lines
    assert lines[4] == "policy engines: cedar, rego, opa"


def test_the_package_carries_its_version_as_users_read_it() -> None:
    """``callgate.__version__`` (what users and bug reports read first) is the installed
    distribution's version, the same ``--version`` prints; any other attribute is still an
    AttributeError."""
    import callgate

    assert callgate.__version__ == VERSION == version.package_version()
    with pytest.raises(AttributeError, match="no attribute 'version'"):
        callgate.version  # noqa: B018
    run = subprocess.run(
        [sys.executable, "-c", "import callgate; print(callgate.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.stdout.split() == [VERSION], run.stderr


def test_one_version_names_every_artefact() -> None:
    """pyproject.toml's version is the chart's appVersion and image tag (tests/test_chart.py too),
    and the compiled core's crate carries it."""
    cargo = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text(encoding="utf-8"))["package"]
    chart = yaml.safe_load((ROOT / "charts" / "callgate" / "Chart.yaml").read_text())
    assert cargo["version"] == chart["appVersion"] == VERSION
    assert f"## [{VERSION}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_a_sidecar_command_in_the_slim_install_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(version, "missing_sidecar", lambda: ("cedarpy", "psycopg"))
    assert cli.main(["serve", "--example"]) == 2
    err = capsys.readouterr().err
    assert (
        "callgate serve needs the sidecar: pip install 'callgate[sidecar]' (not installed: cedarpy, psycopg)"
        in err
    )
    monkeypatch.setattr(version, "missing_sidecar", lambda: ("cedarpy",))
    assert version.store_schema() == version.engine_names() == version.not_installed()


def test_the_install_hint_names_the_wheel_it_was_installed_from(tmp_path: Path) -> None:
    """callgate is installed from its wheel file, not an index: ``pip install 'callgate[sidecar]'``
    would ask the index for a distribution named callgate (none is published: it fails, or gets
    someone else's). The hint names the file of PEP 610's direct_url.json while it is there."""
    wheel = tmp_path / "dist dir" / "callgate-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK")
    url = "file://" + str(wheel).replace(" ", "%20")
    archive = json.dumps({"url": url, "archive_info": {"hash": "sha256=00"}})
    assert version.archive_of(archive) == wheel
    assert version.archive_of(json.dumps({"url": str(tmp_path), "dir_info": {"editable": True}})) is None
    assert version.archive_of(json.dumps({"url": "https://x/callgate.whl", "archive_info": {}})) is None
    assert version.archive_of(None) is None and version.archive_of("{not json") is None
    wheel.unlink()
    assert version.archive_of(archive) is None  # moved away: the name, as for an index install
    # this checkout's install is editable: the hint is the distribution's name
    assert version.installed_from() is None
    assert version.install_hint("mcp") == "pip install 'callgate[mcp]'"


def test_the_full_install_misses_nothing_of_the_sidecar() -> None:
    assert version.missing_sidecar() == ()


def test_the_example_config_reads_packaged_policies_and_writes_under_the_working_dir(tmp_path: Path) -> None:
    cfg = example_config(tmp_path)
    assert Path(cfg.policy.dir) == EXAMPLE_DIR / "policies"
    assert (EXAMPLE_DIR / "policies" / "tools" / "weather.get@v1.json").is_file()
    assert cfg.path(cfg.store.path) == tmp_path / "var" / "callgate.db"
    assert cfg.path(cfg.server.agent.socket).parent == tmp_path / "var" / "run"
    assert cfg.server.agent.tcp == ""  # no loopback port to collide with scripts/serve
