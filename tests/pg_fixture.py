"""A real PostgreSQL server for the tests: ``postgres_dsn`` (session scope).

The fixture runs ``scripts/postgres start DIR`` in a fresh directory under /tmp, which installs
PostgreSQL from Debian's packages on first use (a few minutes, once per machine), creates a
throwaway cluster on a free 127.0.0.1 port and prints its DSN. The server is stopped and the
directory removed at the end of the session (and at interpreter exit, should the session be
interrupted). PostgreSQL that cannot be installed or started FAILS the tests that need it: it
is never a skip and never a mock.

``CALLGATE_TEST_PG_DSN`` points the fixture at an existing server instead (nothing is started
or stopped); it must be a database the tests may create tables in.

Register it once for the whole suite in ``tests/conftest.py``::

    pytest_plugins = ["tests.pg_fixture"]

One server serves the whole session even if the fixture is registered more than once. Its tests
carry the ``postgres`` marker (tests/markers.py), so ``-m "not postgres"`` runs without it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.markers import Needs, require

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "postgres"
INSTALL_TIMEOUT_S = 1800  # apt-get update + install on a fresh machine, with room to spare

_lock = threading.Lock()
_server: dict[str, str] = {}  # "dir", "dsn" of the one running server
_users = 0


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )


def _stop() -> None:
    d = _server.pop("dir", "")
    _server.pop("dsn", None)
    if d:
        try:
            _run("stop", d)
        finally:
            shutil.rmtree(d, ignore_errors=True)


def _start() -> str:
    d = tempfile.mkdtemp(prefix="cg-pg-", dir="/tmp")  # short and reachable by the postgres user
    try:
        proc = _run("start", d)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail(f"scripts/postgres start timed out after {exc.timeout} s", pytrace=False)
    dsn = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not dsn.startswith("postgresql://"):
        _run("stop", d)
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail(
            f"PostgreSQL could not be started by scripts/postgres (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}",
            pytrace=False,
        )
    _server["dir"] = d
    _server["dsn"] = dsn
    return dsn


atexit.register(_stop)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN (``postgresql://postgres@127.0.0.1:PORT/postgres``) of a running PostgreSQL server.
    Its users are marked ``postgres`` (tests/markers.py); one that requests it dynamically
    (``request.getfixturevalue``) must carry the marker itself."""
    global _users
    require(Needs.POSTGRES)
    external = os.environ.get("CALLGATE_TEST_PG_DSN", "")
    if external:
        yield external
        return
    with _lock:
        dsn = _server.get("dsn") or _start()
        _users += 1
    try:
        yield dsn
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _stop()
