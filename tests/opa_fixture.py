"""A real OPA server for the tests (never a mock).

The binary is the project's pinned OPA, built once by ``scripts/opa path`` into ``.cache/bin/``
(a few minutes the first time, nothing afterwards). Servers listen on a free loopback port and
are stopped at the end of the session. If OPA cannot be built or started the fixture *fails*
(it never skips): a suite that silently skipped the OPA engine would prove nothing about it.

Use it with ``from tests.opa_fixture import opa_server`` in a test module (or list
``tests.opa_fixture`` in ``pytest_plugins`` of conftest.py). ``start_opa(dir)`` starts extra
servers (e.g. with other policies) for one test. Tests using the fixtures are marked ``opa``
automatically; a test calling ``opa_binary()``, ``start_opa()`` or ``shared_opa()`` itself must
carry ``@pytest.mark.opa`` (it fails otherwise: tests/markers.py).
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.markers import Needs, require
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
REGO_POLICIES = ROOT / "policies" / "rego"
OPA_VERSION = "1.22.3"
BUILD_TIMEOUT_S = 1800
START_TIMEOUT_S = 30.0

_binary: Path | None = None
_shared: OpaServer | None = None
_started: list[OpaServer] = []
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy


def opa_binary() -> Path:
    """Path of the pinned OPA binary, building it on first use. Fails the test if impossible,
    or if the test is not marked ``opa``."""
    global _binary
    require(Needs.OPA)
    if _binary is not None:
        return _binary
    try:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "opa"), "path"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"scripts/opa path could not run: {exc}", pytrace=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        pytest.fail(
            f"OPA v{OPA_VERSION} could not be built (scripts/opa path exited {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}",
            pytrace=False,
        )
    _binary = Path(proc.stdout.strip().splitlines()[-1])
    return _binary


@dataclass
class OpaServer:
    """One running ``opa run --server`` on loopback."""

    url: str
    port: int
    policy_dir: Path | None
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def get_json(self, path: str) -> object:
        with _http.open(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.log_path.parent, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with _http.open(url + "/health", timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_opa(policy_dir: Path | None = REGO_POLICIES, *extra: str) -> OpaServer:
    """Start ``opa run --server`` on a free loopback port, serving ``policy_dir`` (test modules
    ignored, as in production) or nothing. Waits for ``/health``; fails the test otherwise."""
    binary = opa_binary()
    last = ""
    for _attempt in range(3):  # a free port can be taken between probe and bind: retry
        port = free_port()
        logdir = Path(tempfile.mkdtemp(prefix="cg-opa-"))
        log_path = logdir / "opa.log"
        args = [
            str(binary),
            "run",
            "--server",
            "--addr",
            f"127.0.0.1:{port}",
            "--log-level",
            "error",
            "--skip-version-check",
            "--ignore",
            "*_test.rego",
            *extra,
        ]
        if policy_dir is not None:
            args.append(str(policy_dir))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        server = OpaServer(f"http://127.0.0.1:{port}", port, policy_dir, proc, log_path)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if _healthy(server.url):
                _started.append(server)
                return server
            time.sleep(0.05)
        last = server.log()
        server.stop()
    pytest.fail(f"OPA did not start on loopback (policies: {policy_dir}):\n{last}", pytrace=False)


def shared_opa() -> OpaServer:
    """One server with policies/rego for the whole session (started on first use). Only for
    tests marked ``opa``."""
    global _shared
    require(Needs.OPA)
    if _shared is None or _shared.process.poll() is not None:
        _shared = start_opa(REGO_POLICIES)
    return _shared


@atexit.register
def _stop_all() -> None:
    for s in _started:
        s.stop()


@pytest.fixture(scope="session")
def opa_server() -> Iterator[OpaServer]:
    """The shared OPA server serving policies/rego (fails, never skips, if OPA is missing)."""
    yield shared_opa()


@pytest.fixture
def opa_factory() -> Iterator[Callable[..., OpaServer]]:
    """``start(policy_dir=policies/rego, *extra_args)``: extra servers for one test, stopped
    when it ends."""
    servers: list[OpaServer] = []

    def start(policy_dir: Path | None = REGO_POLICIES, *extra: str) -> OpaServer:
        s = start_opa(policy_dir, *extra)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
