"""Two ``callgate mcp serve`` processes of one gateway folder at once each keep their own
embedded sidecar (docs/MCP.md, "Several gateways of one folder").

Found with langchain-mcp-adapters 0.3.2, whose tools open a new MCP session (so a new stdio
``callgate mcp serve``) for every tool call by default, and LangGraph, which runs a model's tool
calls side by side: every gateway's embedded sidecar bound the ``[server]`` sockets of the
config, taking the path over from the one already serving there (gRPC unlinks a Unix socket
path before it binds it), and a gateway that stopped removed the path (gRPC unlinks it again at
shutdown) although another process was serving it by then. A gateway that had not connected to
its sidecar yet connected to the other process's, and once that process was gone every call of
the first gateway failed (``unavailable: ... agent.sock: No such file or directory``) until its
client restarted it. Reproduced here with the official SDK client, as those clients' sessions
do: gateway A answered ``initialize`` and its sidecar is serving; gateway B of the same folder
starts, serves a call and stops; A's calls must still run. B's sidecar listened on private
sockets (``$TMPDIR/callgate-sidecar-<pid>-*``), removed when it stopped; a folder a killed
gateway left is removed by the next gateway that needs one. The sidecar's choice of listener is
also checked without MCP (a served socket or a taken port: private; a stale file: replaced).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from callgate.base.clock import FixedClock
from callgate.config import Config, IdempotencyConfig, ListenerConfig, ServerConfig, StoreConfig
from callgate.server.app import Sidecar, build_components
from tests.conftest import POLICIES, SPEC_CLOCK, short_tmpdir
from tests.mcp_env import Published, cli, module_upstream, permit_all_folder, run, stdio_gateway, text_of

pytestmark = pytest.mark.timeout(240)

UPSTREAM = module_upstream("draft", "tests.mcp_upstreams.draft04")


@pytest.fixture
def folder() -> Iterator[Published]:
    with permit_all_folder(UPSTREAM) as published:
        r = cli(published.base, "mcp", "import", "--config", str(published.config))
        assert r.returncode == 0, r.stdout + r.stderr
        yield published


def served(path: Path) -> bool:
    """A process accepts connections on the Unix socket ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        return False
    finally:
        s.close()
    return True


async def until_served(path: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not served(path):
        assert time.monotonic() < deadline, f"{path} never served"
        await asyncio.sleep(0.1)


def test_a_gateway_keeps_its_sidecar_when_another_comes_and_goes(folder: Published) -> None:
    agent_socket = folder.base / "run" / "a.sock"
    dead_pid = subprocess.Popen(["true"])  # a process that is surely gone once waited for
    dead_pid.wait()
    left = Path(tempfile.mkdtemp(prefix=f"callgate-sidecar-{dead_pid.pid}-"))  # as a killed gateway leaves it
    (left / "agent.sock").write_text("")

    def private_dirs() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("callgate-sidecar-*-*"))

    async def go() -> None:
        async with stdio_gateway(folder) as (a, _):
            await until_served(agent_socket)  # A's embedded sidecar is up on the [server] sockets
            before = private_dirs()
            async with stdio_gateway(folder) as (b, _):
                res = await b.call_tool("draft__echo", {"text": "from b"})
                assert not res.is_error and "from b" in text_of(res), text_of(res)
                during = private_dirs() - before
                assert during  # B's sidecar listens on private sockets
                assert served(next(iter(during)) / "agent.sock")
                assert not left.exists()  # the dead process's folder was swept
            assert not (private_dirs() & during)  # removed when B stopped
            for text in ("from a", "from a again"):
                res = await a.call_tool("draft__echo", {"text": text})
                assert not res.is_error and text in text_of(res), text_of(res)
        async with stdio_gateway(folder) as (c, _):  # and a later gateway starts as before
            res = await c.call_tool("draft__echo", {"text": "from c"})
            assert not res.is_error and "from c" in text_of(res), text_of(res)

    run(go(), timeout=200)


def sidecar_config(tmp: Path, agent: ListenerConfig) -> Config:
    """Only the agent role listens (``agent``); the stores under ``tmp``."""
    none = ListenerConfig()
    cfg = Config(
        server=ServerConfig(agent=agent, confirmer=none, authorizer=none, executor=none),
        store=StoreConfig(path=str(tmp / "callgate.db")),
        idempotency=IdempotencyConfig(path=str(tmp / "idempotency.db")),
        base_dir=str(POLICIES.parent),
    )
    return replace(cfg, policy=replace(cfg.policy, dir=str(POLICIES)))


async def started(cfg: Config, *, private_when_taken: bool) -> Sidecar:
    sc = Sidecar(
        await build_components(cfg, clock=FixedClock(SPEC_CLOCK)), private_when_taken=private_when_taken
    )
    await sc.start()
    return sc


def test_the_sidecar_leaves_a_served_listener_to_its_process_and_replaces_a_stale_file() -> None:
    """The embedded sidecar's choice of listener, without MCP: a Unix socket path or a TCP port
    another live process serves -> a private socket (``callgate serve``, which does not ask for
    it, takes the socket path over and fails on the port, as before); a socket file nobody
    serves (its process died) -> the configured path."""
    tmp = short_tmpdir()

    async def go() -> None:
        path = tmp / "agent.sock"
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # another process's listener
        other.bind(str(path))
        other.listen()
        sc = await started(sidecar_config(tmp, ListenerConfig(socket=str(path))), private_when_taken=True)
        try:
            (mine,) = sc.addresses["agent"]
            assert mine.startswith("unix:") and mine != f"unix:{path}" and sc.private_dir is not None
            assert served(Path(mine[5:])) and served(path)  # the other listener untouched
        finally:
            await sc.stop()
        assert sc.private_dir is not None and not sc.private_dir.exists()
        assert served(path)
        other.close()  # the file stays, nobody serves it: stale
        assert path.is_socket() and not served(path)
        sc = await started(sidecar_config(tmp, ListenerConfig(socket=str(path))), private_when_taken=True)
        try:
            assert sc.addresses["agent"] == [f"unix:{path}"] and sc.private_dir is None
            assert served(path)
        finally:
            await sc.stop()

        taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        tcp = sidecar_config(tmp, ListenerConfig(tcp=f"127.0.0.1:{port}"))
        sc = await started(tcp, private_when_taken=True)
        try:
            (mine,) = sc.addresses["agent"]
            assert mine.startswith("unix:") and served(Path(mine[5:])), mine
        finally:
            await sc.stop()
        components = await build_components(tcp, clock=FixedClock(SPEC_CLOCK))
        try:
            with pytest.raises(RuntimeError, match="Failed to bind"):
                await Sidecar(components).start()
        finally:
            await components.close()
        taken.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
