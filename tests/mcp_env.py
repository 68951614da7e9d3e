"""What the MCP gateway tests share (one module, so the set-up is written once): a gateway folder
(config heads, Cedar schema of hand-declared actions, policies, pins from ``callgate mcp import``),
the CLI, and the official MCP Python SDK client to ``callgate mcp serve`` over stdio and over
streamable HTTP, with the small readers of its answers.

Used by tests/test_mcp_gateway.py, test_mcp_http.py, test_mcp_numbers.py, test_mcp_published.py,
test_mcp_rich_upstreams.py, test_mcp_results.py, test_mcp_names.py, test_mcp_in_the_wild.py and
test_mcp_import_globs.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx2
import mcp_types as types
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]

SCHEMA_HEAD = """
entity Role;
entity User in [Role] { tenant: String };
entity Resource { kind: String, name: String, tenant: String };
action read, create, modify, delete;
"""


def config_head(*, policy: str = "", stores: str = "") -> str:
    """The sidecar's half of a gateway config: Unix sockets under ``run/``, the policy folder
    ``policies`` (``policy``: more ``[policy]`` keys), the stores ``var/cg<stores>.db`` and
    ``var/idem<stores>.db``."""
    return f"""
[server]
agent = {{ socket = "run/a.sock" }}
confirmer = {{ socket = "run/c.sock" }}
authorizer = {{ socket = "run/z.sock" }}
executor = {{ socket = "run/x.sock" }}
[policy]
dir = "policies"
{policy}
[store]
path = "var/cg{stores}.db"
synchronous = "normal"
[idempotency]
path = "var/idem{stores}.db"
"""


CONFIG_HEAD = config_head()

LIST_WAIT = "list_wait_seconds = 120.0"
"""``[mcp]``: a ``tools/list`` waits for every upstream's first listing (these tests check what a
listing compared with the upstream shows; tests/test_mcp_startup.py checks the default, where
an upstream still starting is shown from its pins)."""

MCP_HEAD = f"""
[mcp]
elicitation_timeout_seconds = 30.0
{LIST_WAIT}
[mcp.identity]
tenant = "acme"
user = "alice"
"""
"""The stdio gateway's identity: alice of tenant acme; :data:`LIST_WAIT`."""


def http_head(base: Path, tokens: dict[str, str]) -> str:
    """``tokens.json`` (mode 0600) under ``base`` with ``tokens`` (bearer token -> user), and the
    ``[mcp.http]`` table that reads it (tenant acme)."""
    (base / "tokens.json").write_text(json.dumps(tokens))
    (base / "tokens.json").chmod(0o600)
    return '\n[mcp.http]\ntenant = "acme"\ntokens_file = "tokens.json"\n'


def write_principals(base: Path) -> None:
    """``policies/principals.json``: alice of tenant acme (users declared once, for both engines)."""
    (base / "policies").mkdir(parents=True, exist_ok=True)
    (base / "policies" / "principals.json").write_text(
        json.dumps({"tenants": ["acme"], "users": {"alice": {"tenant": "acme"}}})
    )


def write_config(base: Path, upstreams: str, *, tokens: dict[str, str] | None = None, head: str = "") -> Path:
    """``base/callgate.toml``: :data:`CONFIG_HEAD`, ``head`` (e.g. ``[[secrets]]``),
    :data:`MCP_HEAD`, the ``[mcp.http]`` of ``tokens`` when given, then ``upstreams``."""
    config = base / "callgate.toml"
    http = http_head(base, tokens) if tokens is not None else ""
    config.write_text(CONFIG_HEAD + head + MCP_HEAD + http + upstreams)
    return config


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL when it has not exited within 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


ALICE_ENTITIES = [{"uid": {"type": "User", "id": "alice"}, "attrs": {"tenant": "acme"}, "parents": []}]


def cedar_action(name: str, group: str, args: str) -> str:
    """A hand-written Cedar action with the context every request carries."""
    return (
        f'action "{name}" in [{group}] appliesTo {{ principal: User, resource: Resource, '
        f"context: {{ tenant: String, tool: String, args: {{ {args} }} }} }};"
    )


def cedar_schema(actions: dict[str, dict[str, tuple[str, str]]]) -> str:
    """:data:`SCHEMA_HEAD` plus ``mcp.<upstream>.<tool>`` actions: upstream -> tool -> (group, args)."""
    lines = [SCHEMA_HEAD]
    for upstream, tools in actions.items():
        for tool, (group, args) in tools.items():
            lines.append(cedar_action(f"mcp.{upstream}.{tool}", group, args))
    return "\n".join(lines)


def write_policies(base: Path, actions: dict[str, dict[str, tuple[str, str]]], policies: str) -> None:
    """``policies/`` under ``base``: the hand-declared actions, ``policies``, alice, no tools yet."""
    cedar = base / "policies" / "cedar"
    cedar.mkdir(parents=True, exist_ok=True)
    (base / "policies" / "tools").mkdir(exist_ok=True)
    (cedar / "schema.cedarschema").write_text(cedar_schema(actions))
    (cedar / "policies.cedar").write_text(policies)
    (cedar / "entities.json").write_text(json.dumps(ALICE_ENTITIES))


def cli(base: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m callgate ARGS`` in ``base``."""
    return subprocess.run(
        [sys.executable, "-m", "callgate", *args],
        cwd=base,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_port(
    port: int,
    timeout: float = 30.0,
    *,
    host: str = "127.0.0.1",
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Until ``host:port`` accepts connections; fails early when ``proc`` exits (with ``log``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log.read_text() if log else ''}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} not listening" + (f": {log.read_text()}" if log else ""))


class GatewayFolder(Protocol):
    @property
    def base(self) -> Path: ...

    @property
    def config(self) -> Path: ...


def serve_params(env: GatewayFolder) -> dict[str, Any]:
    """``callgate mcp serve`` over stdio for ``env`` (the ``server`` entry of a scenario)."""
    return {
        "command": sys.executable,
        "args": ["-m", "callgate", "mcp", "serve", "--config", str(env.config)],
        "cwd": str(env.base),
        "env": {"PYTHONPATH": str(ROOT)},
    }


@dataclass(frozen=True)
class Published:
    """One gateway folder: config, policies, pins, and the upstream's data."""

    base: Path
    config: Path
    data: Path
    """The upstream's data: a git repository, a served folder, a memory file..."""
    data2: Path | None = None
    """fs only: the root of ``fsec`` (the upstream that gets the canary)."""

    @property
    def tools_dir(self) -> Path:
        return self.base / "policies" / "tools"

    def gateway(self) -> dict[str, Any]:
        return serve_params(self)

    def import_pins(self, *, declare_rest: bool = True) -> str:
        """``callgate mcp import --accept-proposed``; its output. With ``declare_rest`` the tools
        the hand-written schema does not declare get an action with no context (any call of
        theirs is a deny): a ToolSpec whose action is missing is not served."""
        proc = cli(self.base, "mcp", "import", "--config", str(self.config), "--accept-proposed")
        assert proc.returncode == 0, (
            f"callgate mcp import failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
        schema = self.base / "policies" / "cedar" / "schema.cedarschema"
        if declare_rest and schema.is_file():
            declared = schema.read_text()
            caps = {
                cap
                for path in self.tools_dir.glob("*.json")
                for cap in json.loads(path.read_text())["required_capabilities"]
            }
            missing = sorted(cap for cap in caps if f'"{cap}"' not in declared)
            schema.write_text(
                declared
                + "".join(
                    f'\naction "{cap}" appliesTo {{ principal: User, resource: Resource }};'
                    for cap in missing
                )
            )
        return proc.stdout

    def alter_pin(self, spec: str) -> None:
        """Change the pinned definition digest of ``spec`` (a ``<upstream>.<tool>``): the live
        upstream no longer matches its pin, as after a changed tool definition."""
        path = self.tools_dir / f"{spec}@v1.json"
        doc = json.loads(path.read_text())
        doc["upstream"]["definition_sha256"] = "0" * 64
        path.write_text(json.dumps(doc, indent=2) + "\n")


def module_upstream(
    name: str, module: str, timeout_s: float = 30.0, env: dict[str, str] | None = None
) -> str:
    """The ``[[mcp.upstreams]]`` TOML block of a test upstream run as ``python -m module`` from
    the repository (tests/mcp_upstreams/), with ``env`` added to its environment."""
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in (env or {}).items())
    env_line = f"env = {{ {pairs} }}\n" if pairs else ""
    return f"""
[[mcp.upstreams]]
name = "{name}"
command = {json.dumps(sys.executable)}
args = ["-m", "{module}"]
cwd = {json.dumps(str(ROOT))}
{env_line}timeout_seconds = {timeout_s}
"""


@contextmanager
def permit_all_folder(upstreams: str) -> Iterator[Published]:
    """A fresh gateway folder with ``upstreams`` and one Cedar policy permitting alice everything
    (for tests about the gateway, not the policy); removed afterwards."""
    from tests.conftest import short_tmpdir

    base = short_tmpdir()
    try:
        (base / "policies" / "cedar").mkdir(parents=True)
        (base / "policies" / "cedar" / "policies.cedar").write_text(
            '@id("all") permit (principal == User::"alice", action, resource);\n'
        )
        write_principals(base)
        yield Published(base, write_config(base, upstreams), base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------- the SDK client

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def accept(answer: bool) -> Elicit:
    """An elicitation callback answering every confirmation with ``answer``; ``.asked`` lists
    the questions."""

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if answer:
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action="decline")

    asked: list[str] = []
    elicit.asked = asked  # type: ignore[attr-defined]
    return elicit


@asynccontextmanager
async def stdio_gateway(
    env: GatewayFolder, elicit: Elicit | None = None
) -> AsyncIterator[tuple[ClientSession, list[Any]]]:
    """The SDK client over stdio to ``callgate mcp serve``; also returns every notification."""
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with stdio_client(StdioServerParameters(**serve_params(env))) as (read, write):
        kwargs: dict[str, Any] = {"message_handler": on_message}
        if elicit is not None:
            kwargs["elicitation_callback"] = elicit
        async with ClientSession(read, write, **kwargs) as session:
            await session.initialize()
            yield session, seen


@asynccontextmanager
async def http_session(url: str, token: str, elicit: Elicit | None = None) -> AsyncIterator[ClientSession]:
    """The SDK client (``ClientSession``) over streamable HTTP with a bearer token."""
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            kwargs: dict[str, Any] = {} if elicit is None else {"elicitation_callback": elicit}
            async with ClientSession(read, write, **kwargs) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stdio(env: GatewayFolder, **kw: Any) -> AsyncIterator[Client]:
    """The Python SDK ``Client`` (2025-11-25 handshake) over stdio to ``callgate mcp serve``."""
    async with Client(StdioServerParameters(**serve_params(env)), mode="legacy", **kw) as client:
        yield client


@contextmanager
def http_gateway(env: GatewayFolder) -> Iterator[int]:
    """``callgate mcp serve --transport http`` on a free port (yielded) until the block ends."""
    port = free_port()
    server = serve_params(env)
    proc = subprocess.Popen(
        [server["command"], *server["args"], "--transport", "http", "--listen", f"127.0.0.1:{port}"],
        cwd=env.base, env={**os.environ, **server["env"]}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_port(port, 90, proc=proc)
        yield port
    finally:
        terminate(proc)


@asynccontextmanager
async def http_client(port: int, token: str) -> AsyncIterator[Client]:
    """The Python SDK ``Client`` over streamable HTTP with a bearer token."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as h:
        async with Client(
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=h), mode="legacy"
        ) as c:
            yield c


def run(coro: Any, timeout: float = 150.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The tool message's content: the JSON text of an error or a structured result, or for an
    answer in block form its ``_meta`` envelope with the blocks' text as ``data``."""
    envelope = (result.meta or {}).get("io.callgate/result")
    if isinstance(envelope, dict):
        return {**envelope, "data": text_of(result)}
    value: dict[str, Any] = json.loads(text_of(result))
    return value
