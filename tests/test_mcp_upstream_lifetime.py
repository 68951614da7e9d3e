"""An upstream server process never outlives the gateway that started it (docs/MCP.md,
"Upstream processes").

An upstream stuck in a computation reads neither its stdin nor a cancel, so closing its stdin
does not end it. Before, when the gateway ended while such an upstream was busy (its client
gave up and left, so the client's SDK stopped the gateway after its grace period; or the
gateway was killed), the upstream was left running, re-parented to init, for good: found with
the published ``mcp-server-calculator`` asked for ``10**10**10``, still computing at 100% CPU
long after its client and gateway were gone. Now every stdio upstream is started so that the
kernel kills it when the gateway's process ends (Linux ``PR_SET_PDEATHSIG``), and the gateway
closes its upstreams all at once when it stops.

Upstream: tests/mcp_upstreams/stuck.py (the SDK's ``MCPServer``); client: the official ``mcp``
Python SDK over stdio, used as its users do.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.mcp_env import Published, cli, module_upstream, permit_all_folder, run, stdio, text_of

pytestmark = pytest.mark.timeout(240)  # Linux (PR_SET_PDEATHSIG), as the suite is


def upstream(pidfile: Path) -> str:
    return module_upstream("stuck", "tests.mcp_upstreams.stuck", 60.0, env={"STUCK_PIDFILE": str(pidfile)})


@dataclass(frozen=True)
class Stuck:
    folder: Published
    pidfile: Path
    """Where the upstream's ``block`` writes its process id."""


@pytest.fixture
def stuck() -> Iterator[Stuck]:
    piddir = Path(tempfile.mkdtemp(prefix="cg-stuck-"))
    try:
        with permit_all_folder(upstream(piddir / "stuck.pid")) as folder:
            r = cli(folder.base, "mcp", "import", "--config", str(folder.config), "--accept-proposed")
            assert r.returncode == 0, r.stdout + r.stderr
            yield Stuck(folder, piddir / "stuck.pid")
    finally:
        pid = stuck_pid(piddir / "stuck.pid")
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # never leave one behind, whatever the test found
        shutil.rmtree(piddir, ignore_errors=True)


def stuck_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return not alive(pid)


async def wait_pidfile(pidfile: Path) -> int:
    for _ in range(300):
        pid = stuck_pid(pidfile)
        if pid is not None:
            return pid
        await anyio.sleep(0.1)
    raise AssertionError("the upstream's block tool never started")


def test_a_client_that_gives_up_and_leaves_takes_the_stuck_upstream_with_it(stuck: Stuck) -> None:
    """The client cancels the call after a second and closes the session, as an application
    does on its own timeout; its SDK then stops the gateway (stdin closed, then a signal after
    its grace period). The stuck upstream is gone soon after."""

    async def go() -> int:
        async with stdio(stuck.folder) as c:
            first = await c.call_tool("stuck__ping", {})
            assert not first.is_error and "pong" in text_of(first), text_of(first)
            with anyio.move_on_after(1.5):
                await c.call_tool("stuck__block", {})
            return await wait_pidfile(stuck.pidfile)

    pid = run(go())
    assert wait_gone(pid, 15), f"the stuck upstream {pid} outlived its gateway"


def test_a_killed_gateway_takes_the_stuck_upstream_with_it(stuck: Stuck) -> None:
    """kill -9 of the gateway in the middle of the call: nothing of the gateway runs to stop the
    upstream, the kernel does."""
    state: dict[str, int] = {}

    async def go() -> None:
        async with stdio(stuck.folder) as c:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    try:
                        await c.call_tool("stuck__block", {})
                    except Exception:  # the gateway died under the call: what the SDK raises
                        pass

                tg.start_soon(call)
                pid = await wait_pidfile(stuck.pidfile)
                state["upstream"], state["gateway"] = pid, parent_of(pid)
                os.kill(state["gateway"], signal.SIGKILL)
                with anyio.move_on_after(10):
                    while alive(pid):
                        await anyio.sleep(0.1)
                tg.cancel_scope.cancel()

    try:
        run(go(), timeout=120)
    except Exception:  # the SDK's own end of a dead server is not what this test is about
        pass
    pid = state.get("upstream")
    assert pid is not None
    assert wait_gone(pid, 15), f"the stuck upstream {pid} outlived its killed gateway"
