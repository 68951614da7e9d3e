"""Markers for the tests that need a real outside program, and the rules that keep them honest.

``@pytest.mark.opa`` (a real OPA server or the ``opa`` binary), ``@pytest.mark.postgres`` (a
PostgreSQL server), ``@pytest.mark.helm`` (the ``helm`` binary), ``@pytest.mark.node`` (Node.js
and the npm dependencies of the TypeScript client, tests/test_ts_client.py, and of the MCP tests,
tests/mcp_node and tests/mcp_agents_js, with the published MCP servers that need mcp 1.x in venvs of their own,
scripts/mcp-pyvenv), ``@pytest.mark.image`` (buildah and mmdebstrap, Debian's packages, as root:
tests/test_image.py builds and runs the container image with scripts/image),
``@pytest.mark.browser`` (Debian's headless Chromium, driven by Playwright: the console's browser
test; scripts/chromium). They are registered in
pyproject.toml (``--strict-markers``) and give the fast local loop::

    scripts/test -m "not opa and not postgres and not helm and not node and not image and not browser"

How a test gets its marker:

* A test that uses a fixture of :data:`FIXTURE_MARKERS` (directly or through another fixture)
  is marked automatically at collection: the marker follows the fixture and cannot be forgotten.
* A test that reaches OPA, PostgreSQL or Helm some other way (``opa_binary()``, ``start_opa()``,
  ``shared_opa()``, ``request.getfixturevalue("postgres_dsn")`` in one parameter, the chart
  tests' ``helm_binary()``) carries the marker in its module (``pytestmark``, a decorator or
  ``pytest.param(..., marks=...)``). Those helpers call :func:`require`, which FAILS a test
  that lacks the marker, so ``-m "not opa"`` can never start OPA unnoticed.

Before the first test runs, the binaries that the selected tests need are built or installed
once (``scripts/opa build``, ``scripts/helm build``, ``scripts/postgres install``, the two
``npm ci`` of :data:`PREPARE` and :data:`PREPARE_MORE`), so the first
run on a fresh machine spends its minutes there and not inside one test's timeout. A failure
there is only reported; the fixtures then fail the tests that need the binary (never a skip).

With ``CI`` set (CI runs ``.ci/run`` with ``CI=true``) or ``CALLGATE_TEST_NO_SKIP=1``, a skipped
test is a failure: CI runs everything, and a binary or corpus that went missing must not turn
into a green run that tested less.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PREPARE_TIMEOUT_S = 1800  # a cold Go build of OPA or Helm, or apt-get install postgresql


class Needs(str, Enum):
    """An outside program a test needs; the value is the marker's name."""

    OPA = "opa"
    POSTGRES = "postgres"
    HELM = "helm"
    NODE = "node"
    IMAGE = "image"
    BROWSER = "browser"
    PROVE = "prove"


FIXTURE_MARKERS: dict[str, Needs] = {
    "opa_server": Needs.OPA,
    "opa_factory": Needs.OPA,
    "postgres_dsn": Needs.POSTGRES,
}
"""Fixtures whose users are marked automatically."""

PREPARE: dict[Needs, tuple[str, ...]] = {
    Needs.OPA: ("scripts/opa", "build"),
    Needs.HELM: ("scripts/helm", "build"),
    Needs.POSTGRES: ("scripts/postgres", "install"),
    Needs.NODE: ("scripts/node-client", "install"),
    Needs.IMAGE: ("scripts/image", "install"),
    Needs.BROWSER: ("scripts/chromium", "install"),
    Needs.PROVE: ("scripts/prove", "build"),
}
"""What builds or installs each program (idempotent; seconds when it is already there)."""

PREPARE_MORE: dict[Needs, tuple[tuple[str, ...], ...]] = {
    Needs.NODE: (  # the MCP tests' published upstreams: Node side and mcp 1.x Python venvs
        ("scripts/mcp-node", "install"),
        ("scripts/mcp-pyvenv", "install"),
    ),
    Needs.PROVE: (("scripts/solver", "path"),),  # cvc5 1.3.1 behind callgate/policy/prove/smtdriver.py
}
"""Further install steps for a program, run after :data:`PREPARE`'s (same rules)."""

_running: list[pytest.Item] = []


def require(need: Needs) -> None:
    """Fail the running test unless it is marked ``need`` (called by the helpers that start or
    build the program). Outside a test (collection, session teardown) it does nothing."""
    if not _running:
        return
    item = _running[-1]
    if item.get_closest_marker(need.value) is None:
        pytest.fail(
            f"{item.nodeid} needs {need.value} but is not marked: add @pytest.mark.{need.value} "
            f"(or pytest.param(..., marks=pytest.mark.{need.value})) so that "
            f'-m "not {need.value}" leaves it out',
            pytrace=False,
        )


def no_skips() -> bool:
    """True on CI (``CI`` set to anything but ``false``/``0``) or with ``CALLGATE_TEST_NO_SKIP=1``."""
    ci = os.environ.get("CI", "").strip().lower()
    return ci not in ("", "0", "false") or os.environ.get("CALLGATE_TEST_NO_SKIP", "") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in getattr(item, "fixturenames", ()):
            need = FIXTURE_MARKERS.get(name)
            if need is not None and item.get_closest_marker(need.value) is None:
                item.add_marker(need.value)


def _needed(items: list[pytest.Item]) -> list[Needs]:
    wanted = [n for n in Needs if any(i.get_closest_marker(n.value) for i in items)]
    if Needs.POSTGRES in wanted and os.environ.get("CALLGATE_TEST_PG_DSN"):
        wanted.remove(Needs.POSTGRES)  # an existing server: nothing to install
    return wanted


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for need in _needed(session.items):
        for script, command in (PREPARE[need], *PREPARE_MORE.get(need, ())):
            _prepare(reporter, need, script, command)


def _prepare(reporter: Any, need: Needs, script: str, command: str) -> None:
    if reporter is not None:
        reporter.write_line(
            f"callgate: {need.value}: {script} {command} (builds or installs it on first use)"
        )
    try:
        proc = subprocess.run(
            ["bash", str(ROOT / script), command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PREPARE_TIMEOUT_S,
            check=False,
        )
        failed = f"exit {proc.returncode}: {proc.stderr[-2000:]}" if proc.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        failed = str(exc)
    if failed and reporter is not None:
        reporter.write_line(f"callgate: {script} {command} failed ({failed}); its tests will fail")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Remember the running test for :func:`require` (module fixtures start inside it too)."""
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On CI a skip is a failure (an expected failure, xfail, stays what it is)."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and no_skips():
        why = report.longrepr
        if isinstance(why, tuple) and len(why) == 3:  # (path, line, "Skipped: reason")
            why = f"{why[0]}:{why[1]}: {why[2]}"
        report.outcome = "failed"
        report.longrepr = f"skipped, and a skip fails on CI (CI or CALLGATE_TEST_NO_SKIP=1): {why}"
    return report
