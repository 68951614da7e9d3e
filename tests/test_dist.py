"""The release artefacts, installed as a user installs them (issue 32): ``scripts/dist`` builds the
wheel (compiled core inside, manylinux tag checked by ``auditwheel show``) and the sdist; the wheel
goes into two fresh venvs outside the clone, its dependencies pinned to requirements.lock's
versions (pip may take them from its cache), and everything after the build runs with no Rust
toolchain on ``PATH``:

* ``pip install '<wheel>[openai-agents]'``, the slim install of an agent application: none of the
  sidecar's distributions installed, the client and the adapter import none of its modules,
  sidecar commands say which extra to install, and the README's client loop and the OpenAI Agents
  example app run against the sidecar below;
* ``pip install '<wheel>[sidecar]'``: ``callgate --version`` names the version, the compiled core's
  build, the proto package, the store schemas and the engines, and ``callgate serve --example``
  serves the packaged example policies with ``core: native`` in its start-up line.

The sdist builds a pure-Python wheel without cargo (the fallback, saying so). A cold cargo target
directory makes the first build take minutes (docs/NATIVE.md); a warm one links and packs in
seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from callgate.cli.version import version_info
from tests.conftest import ROOT, short_tmpdir
from tests.test_lock import _locked
from tests.test_slim_imports import PROBE, sidecar_modules, sidecar_only_distributions

pytestmark = pytest.mark.timeout(1800)  # a cold cargo target dir compiles the core (minutes)

VERSION = version_info().version
DIST_TIMEOUT_S = 1500.0
PIP_TIMEOUT_S = 600.0
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    log: str
    """scripts/dist's output (auditwheel show among it)."""


@dataclass(frozen=True)
class Venv:
    root: Path
    env: Mapping[str, str]

    def run(self, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / "bin" / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=dict(self.env),
            stdin=subprocess.DEVNULL,
        )


def without_rust(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment with every PATH entry holding cargo or rustc removed (and no venv active)."""
    path = [p for p in environ.get("PATH", "").split(os.pathsep) if p and not any(
        (Path(p) / tool).exists() for tool in ("cargo", "rustc")
    )]  # fmt: skip
    env = {k: v for k, v in environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(path)
    assert shutil.which("cargo", path=env["PATH"]) is None and shutil.which("rustc", path=env["PATH"]) is None
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    start = time.monotonic()
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "dist")],
        capture_output=True,
        text=True,
        timeout=DIST_TIMEOUT_S,
        env={**os.environ, "PYTHON": sys.executable, "CALLGATE_DIST": str(out)},
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    print(f"scripts/dist: {time.monotonic() - start:.1f} s")
    (wheel,) = out.glob(f"callgate-{VERSION}-*.whl")
    return Built(wheel, out / f"callgate-{VERSION}.tar.gz", run.stderr)


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder outside the clone for the venvs and the constraints file."""
    where = tmp_path_factory.mktemp("users")
    assert ROOT not in where.parents
    yield where


def make_venv(where: Path, name: str, requirement: str) -> Venv:
    """A fresh venv with ``requirement`` installed, each dependency at requirements.lock's version
    (``where/constraints.txt``, written by :func:`venvs` before the venvs are made)."""
    constraints = where / "constraints.txt"
    env = without_rust(os.environ)
    root = where / name
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120, env=env)
    venv = Venv(root, env)
    pip = venv.run(
        "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "-c", str(constraints),
        requirement, cwd=where, timeout=PIP_TIMEOUT_S,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-6000:]
    print(f"venv {name} ({requirement}): {time.monotonic() - start:.1f} s")
    return venv


def installed(venv: Venv, where: Path) -> set[str]:
    listed = venv.run(
        "python", "-m", "pip", "list", "--format=json", "--disable-pip-version-check", cwd=where
    )
    assert listed.returncode == 0, listed.stderr
    return {canonicalize_name(d["name"]) for d in json.loads(listed.stdout)}


@pytest.fixture(scope="module")
def venvs(built: Built, outside: Path) -> dict[str, Venv]:
    """The two venvs, made at the same time (two pip processes: on the 2-core CI box the second
    no longer waits for the first, ~45 s of the module's ~125 s); each is still a fresh venv of
    its own, installed by its own pip exactly as :func:`make_venv` does alone."""
    constraints = outside / "constraints.txt"
    constraints.write_text("".join(f"{name}=={v}\n" for name, (v, _) in _locked().items()))
    wanted = {"slim": f"{built.wheel}[openai-agents]", "sidecar": f"{built.wheel}[sidecar]"}
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        made = {name: pool.submit(make_venv, outside, name, req) for name, req in wanted.items()}
        return {name: future.result() for name, future in made.items()}


@pytest.fixture(scope="module")
def slim(venvs: dict[str, Venv]) -> Venv:
    return venvs["slim"]


@pytest.fixture(scope="module")
def full(venvs: dict[str, Venv]) -> Venv:
    return venvs["sidecar"]


@dataclass
class Serving:
    workdir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def example_sidecar(full: Venv) -> Iterator[Serving]:
    """``callgate serve --example`` from the sidecar venv, in a short folder (socket paths)."""
    workdir = short_tmpdir()
    log = workdir / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(full.root / "bin" / "callgate"), "serve", "--example"],
            cwd=workdir, env=dict(full.env), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    serving = Serving(workdir, proc, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "core: " not in serving.text():  # the start-up line, logged once serving
            assert time.monotonic() < deadline, (
                f"no start-up line after {START_TIMEOUT_S} s:\n{serving.text()}"
            )
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            raise AssertionError(f"callgate serve --example exited with {proc.returncode}:\n{serving.text()}")
        yield serving
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_wheel_carries_the_compiled_core_and_is_manylinux(built: Built) -> None:
    assert re.fullmatch(
        rf"callgate-{re.escape(VERSION)}-cp311-abi3-manylinux_2_34_x86_64\.whl", built.wheel.name
    )
    names = set(zipfile.ZipFile(built.wheel).namelist())
    assert {"callgate/_native.abi3.so", "callgate/example/callgate.toml", "callgate/cli/version.py"} <= names
    assert {f"callgate/example/policies/{p.relative_to(ROOT / 'policies')}" for p in (ROOT / "policies").rglob("*")
            if p.is_file()} <= names  # fmt: skip
    # what a user of the wheel reads: the licence, the stubs, the schemas, the console's pages
    shipped = {
        "callgate-" + VERSION + ".dist-info/licenses/LICENSE",
        "callgate/_native.pyi",
        "callgate/py.typed",
    }
    shipped |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "callgate").rglob("*")
                if p.suffix in (".json", ".html", ".css", ".js") and "example" not in p.parts}  # fmt: skip
    assert shipped <= names, sorted(shipped - names)
    meta = zipfile.ZipFile(built.wheel).read(f"callgate-{VERSION}.dist-info/METADATA").decode()
    for field in ("License-Expression: Apache-2.0", "License-File: LICENSE", "Requires-Python: >=3.11"):
        assert f"\n{field}\n" in meta, field
    extras = {ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Provides-Extra: ")}
    assert {
        "sidecar",
        "openai-agents",
        "langgraph",
        "langchain",
        "mcp",
        "console",
        "otlp",
        "prove",
    } <= extras, extras
    # auditwheel's verdict: the tag maturin set is the one the module's symbols allow
    assert 'is consistent with\nthe following platform tag: "manylinux_2_34_x86_64"' in built.log


def test_the_sdist_builds_a_pure_python_wheel_without_rust(built: Built, tmp_path: Path) -> None:
    members = set(tarfile.open(built.sdist).getnames())
    top = f"callgate-{VERSION}"
    assert {f"{top}/native/Cargo.toml", f"{top}/native/Cargo.lock", f"{top}/pep517/callgate_build.py",
            f"{top}/callgate/example/policies/cedar/policies.cedar"} <= members  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(tmp_path), str(built.sdist)],
        capture_output=True, text=True, timeout=300, env=without_rust(os.environ), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert (
        "callgate: no Rust toolchain (cargo) on PATH: building a pure-Python wheel" in run.stdout + run.stderr
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name == f"callgate-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "callgate/example/policies/tools/weather.get@v1.json" in names
    assert f"callgate-{VERSION}.dist-info/licenses/LICENSE" in names
    assert not any("_native" in n for n in names)


def test_the_slim_install_has_no_sidecar(slim: Venv, outside: Path, built: Built) -> None:
    leaked = installed(slim, outside) & sidecar_only_distributions("openai-agents")
    assert not leaked, f"the slim install pulled in the sidecar's distributions: {sorted(leaked)}"
    for module in ("callgate.client", "callgate.adapters.openai_agents"):
        probe = slim.run("python", "-c", PROBE, "[]", module, cwd=outside)
        assert probe.returncode == 0, probe.stderr[-3000:]
        assert not sidecar_modules(json.loads(probe.stdout)["modules"]), module
    serve = slim.run("callgate", "serve", "--example", cwd=outside)
    assert serve.returncode == 2
    # the pip command names the wheel it was installed from: no index publishes callgate
    assert f"callgate serve needs the sidecar: pip install '{built.wheel}[sidecar]'" in serve.stderr
    for extra in ("mcp", "console"):  # the extras' commands say which extra, as serve does
        run = slim.run("callgate", extra, *(["serve"] if extra == "mcp" else []), "-c", "c.toml", cwd=outside)
        assert run.returncode == 2, run.stdout + run.stderr
        assert (
            f"callgate {extra} needs the '{extra}' extra (pip install '{built.wheel}[{extra}]')" in run.stderr
        )
    version = slim.run("callgate", "--version", cwd=outside)
    assert version.returncode == 0, version.stderr
    assert f"store schema: not installed (pip install '{built.wheel}[sidecar]')" in version.stdout


def test_callgate_version_names_every_part(full: Venv, outside: Path) -> None:
    run = full.run("callgate", "--version", cwd=outside)
    assert run.returncode == 0, run.stderr
    here = version_info()  # the same fields from the checkout, whose module is built by scripts/native
    lines = run.stdout.splitlines()
    assert lines[0] == f"callgate {VERSION}"
    assert re.fullmatch(r"core: native \(callgate-core \S+, release opt-level s, x86_64-unknown-linux-gnu, rustc .+\)",
                        lines[1]), lines[1]  # fmt: skip
    assert lines[2:] == [
        f"proto: {here.proto}",
        f"store schema: {here.store_schema}",
        f"policy engines: {here.engines}",
    ]
    assert here.proto == "callgate.v1" and re.fullmatch(r"sqlite \d+, postgresql \d+", here.store_schema)
    assert here.engines == "cedar, rego, opa"


def test_check_example_checks_the_packaged_policies(full: Venv, outside: Path) -> None:
    run = full.run("callgate", "check", "--example", cwd=outside)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok: 3 tools, engine cedar" in run.stdout, run.stdout


def test_serve_example_runs_the_compiled_core(example_sidecar: Serving) -> None:
    text = example_sidecar.text()
    (line,) = [ln for ln in text.splitlines() if "core: " in ln]
    assert "core: native; Cedar decisions: native" in line, line  # no tool on the Python stages
    assert "policy revision" in text and "ready" in text
    # no checkout to build the prover in: the message says so, not "run scripts/prove build"
    assert "site-packages/.cache/bin" not in text and "scripts/prove build (needs cargo), or" not in text


def test_the_readme_client_loop_runs_from_the_slim_install(slim: Venv, example_sidecar: Serving) -> None:
    run = slim.run("python", str(ROOT / "tests" / "wheel_client_loop.py"), cwd=example_sidecar.workdir)
    assert run.returncode == 0, run.stderr[-4000:]
    answers = json.loads(run.stdout)
    assert "sunny" in answers["c1"], answers
    assert "sunny" not in answers["c2"] and answers["c2"], answers  # the schema's refusal, as text


def test_the_openai_agents_example_runs_from_the_slim_install(slim: Venv, example_sidecar: Serving) -> None:
    app = ROOT / "examples" / "openai_agents" / "app.py"
    run = slim.run("python", str(app), cwd=example_sidecar.workdir)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "Sunny in Paris; the standup is booked." in run.stdout
