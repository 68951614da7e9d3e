"""The MCP gateway end to end with real parts: the official MCP Python SDK client (over stdio to
``callgate mcp serve``, and over streamable HTTP with a bearer token) <-> the gateway (embedded
sidecar, Cedar policies written here) <-> a real upstream MCP server written with the SDK
(tests/mcp_upstreams/server.py) over stdio and over HTTP. Side effects are counted in files."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import short_tmpdir

ROOT = Path(__file__).resolve().parents[1]
CANARY = "canary-5ecret-7d1f0c2a9b"
TOKEN = "tok-alice-8c1e5f"

SCHEMA = """
entity Role;
entity User in [Role] { tenant: String };
entity Resource { kind: String, name: String, tenant: String };
action read, create, modify, delete;
"""
ACTIONS = {
    "lookup": "city: String",
    "write_note": "text: String",
    "remove": "name: String",
    "hang": "seconds: Long",
    "crash": "",
    "echo_env": "",
}
POLICIES = """
@id("mcp-permit")
permit (principal, action, resource) when { principal.tenant == context.tenant };

@id("no-forbidden-notes")
forbid (principal, action in [Action::"mcp.up.write_note", Action::"mcp.web.write_note"], resource)
when { context.args.text like "*forbidden*" };

@id("remove-needs-user")
@confirm("removing a note needs the user's confirmation")
permit (principal, action in [Action::"mcp.up.remove", Action::"mcp.web.remove"], resource)
when { principal.tenant == context.tenant };
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_policies(base: Path, upstreams: tuple[str, ...] = ("up", "web", "sec")) -> None:
    cedar = base / "policies" / "cedar"
    cedar.mkdir(parents=True, exist_ok=True)
    (base / "policies" / "tools").mkdir(exist_ok=True)
    lines = [SCHEMA]
    for up in upstreams:
        for tool, args in ACTIONS.items():
            group = "read" if tool in ("lookup", "hang", "crash", "echo_env") else "create"
            lines.append(
                f'action "mcp.{up}.{tool}" in [{group}] appliesTo {{ principal: User, resource: Resource, '
                f"context: {{ tenant: String, tool: String, args: {{ {args} }} }} }};"
            )
    (cedar / "schema.cedarschema").write_text("\n".join(lines))
    (cedar / "policies.cedar").write_text(POLICIES)
    (cedar / "entities.json").write_text(
        json.dumps([{"uid": {"type": "User", "id": "alice"}, "attrs": {"tenant": "acme"}, "parents": []}])
    )


def write_config(base: Path, state: Path, http_port: int, gateway_port: int) -> Path:
    (base / "canary.txt").write_text(CANARY + "\n")
    (base / "tokens.json").write_text(json.dumps({TOKEN: "alice"}))
    py = json.dumps(sys.executable)
    root = json.dumps(str(ROOT))
    st = json.dumps(str(state))
    cfg = f"""
[server]
agent = {{ socket = "run/a.sock" }}
confirmer = {{ socket = "run/c.sock" }}
authorizer = {{ socket = "run/z.sock" }}
executor = {{ socket = "run/x.sock" }}
[policy]
dir = "policies"
watch_interval_ms = 200
[store]
path = "var/cg.db"
synchronous = "normal"
[idempotency]
path = "var/idem.db"

[[secrets]]
name = "canary"
file = "canary.txt"
tools = ["sec.echo_env", "web.echo_env"]

[mcp]
elicitation_timeout_seconds = 20.0
[mcp.identity]
tenant = "acme"
user = "alice"
[mcp.http]
tenant = "acme"
tokens_file = "tokens.json"
listen = "127.0.0.1:{gateway_port}"

[[mcp.upstreams]]
name = "up"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]
cwd = {root}
env = {{ PYTHONPATH = {root} }}
timeout_seconds = 20.0

[[mcp.upstreams]]
name = "sec"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]
cwd = {root}
env = {{ PYTHONPATH = {root}, UPSTREAM_CANARY = {{ secret = "canary" }} }}
timeout_seconds = 20.0

[[mcp.upstreams]]
name = "web"
transport = "http"
url = "http://127.0.0.1:{http_port}/mcp"
headers = {{ X-Upstream-Key = {{ secret = "canary" }} }}
timeout_seconds = 20.0
"""
    path = base / "callgate.toml"
    path.write_text(cfg)
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "callgate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


class Env:
    """A temp folder with policies, config, a state dir and a running HTTP upstream."""

    def __init__(self) -> None:
        self.base = short_tmpdir()
        self.state = self.base / "state"
        self.state.mkdir()
        self.http_port = _free_port()
        self.gateway_port = _free_port()
        write_policies(self.base)
        self.config = write_config(self.base, self.state, self.http_port, self.gateway_port)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_http_upstream(self) -> None:
        p = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_upstreams.server", "--state", str(self.state), "--http", str(self.http_port)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(p)
        wait_port(self.http_port)

    def effects(self) -> list[dict[str, Any]]:
        f = self.state / "effects.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    def seen(self) -> list[dict[str, Any]]:
        f = self.state / "seen.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    def import_all(self) -> subprocess.CompletedProcess[str]:
        return cli("mcp", "import", "--config", str(self.config), "--accept-proposed", cwd=self.base)

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def wait_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"port {port} not listening")


@pytest.fixture
def env() -> Any:
    e = Env()
    e.start_http_upstream()
    yield e
    e.close()


Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@asynccontextmanager
async def stdio_gateway(
    env: Env, elicit: Elicit | None = None
) -> AsyncIterator[tuple[ClientSession, list[Any]]]:
    """The SDK client over stdio to ``callgate mcp serve``; also returns every notification."""
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "callgate", "mcp", "serve", "--config", str(env.config)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(env.base),
    )
    async with stdio_client(params) as (read, write):
        kwargs: dict[str, Any] = {"message_handler": on_message}
        if elicit is not None:
            kwargs["elicitation_callback"] = elicit
        async with ClientSession(read, write, **kwargs) as session:
            await session.initialize()
            yield session, seen


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def run(coro: Any, timeout: float = 150.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))
