"""Shared fixtures: a real callgate sidecar (grpc.aio on Unix sockets) running in a background
thread with its own event loop, and synchronous gRPC stubs to drive it like a runtime would."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.arguments.normalize import normalize
from callgate.arguments.parse import ParseLimits, parse_arguments
from callgate.base.clock import FixedClock
from callgate.base.model import NormalizationContext, NormalizedArguments
from callgate.config import (
    Config,
    IdempotencyConfig,
    ListenerConfig,
    SecretConfig,
    ServerConfig,
    StoreConfig,
)
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.policy.toolspecs import CompiledTool
from callgate.server.app import Sidecar, build_components

pytest_plugins = ["tests.markers", "tests.pg_fixture", "tests.opa_fixture"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
POLICIES = ROOT / "policies"
DATA = Path(__file__).resolve().parent / "data"

# The 6.12 reference clock: 2026-07-19T14:00:00+08:00.
SPEC_CLOCK = datetime.fromisoformat("2026-07-19T14:00:00+08:00")


@dataclass
class Running:
    config: Config
    clock: FixedClock
    sidecar: Sidecar
    loop: asyncio.AbstractEventLoop
    gate: pb_grpc.GateStub
    confirmations: pb_grpc.ConfirmationsStub
    authorizer: pb_grpc.AuthorizerStub
    executor: pb_grpc.ExecutorStub
    channels: dict[str, grpc.Channel]
    db_path: Path

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the sidecar's loop (e.g. a reload) and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    # -- runtime helpers -------------------------------------------------------------------
    def session_of(self, invocation_id: str) -> str:
        """The session an invocation belongs to, read from the store (agent RPCs that take an
        invocation id need it: another session's id answers ``invocation_not_found``)."""
        inv = self.call(self.sidecar.components.store.get_invocation(invocation_id))
        return str(inv.session_id) if inv is not None else ""

    def open_session(
        self, tenant: str = "acme", subject: str = "alice", tz: str = "Asia/Shanghai", **kw: Any
    ) -> str:
        resp = self.gate.OpenSession(
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant=tenant, id=subject), timezone=tz, locale="en", **kw
            )
        )
        return str(resp.session_id)

    def list_tools(self, session_id: str, model_call_id: str = "mc-1") -> pb.ListToolsResponse:
        return self.gate.ListTools(pb.ListToolsRequest(session_id=session_id, model_call_id=model_call_id))

    def propose(
        self,
        session_id: str,
        tool: str,
        arguments: bytes | str | dict[str, Any],
        *,
        model_call_id: str = "mc-1",
        proposal_id: str = "call_1",
        idempotency_key: str = "",
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> pb.ProposeResponse:
        name, _, version = tool.partition("@")
        if isinstance(arguments, dict):
            raw = json.dumps(arguments, ensure_ascii=False).encode()
        elif isinstance(arguments, str):
            raw = arguments.encode()
        else:
            raw = arguments
        return self.gate.Propose(
            pb.ProposeRequest(
                session_id=session_id,
                model_call_id=model_call_id,
                proposal_id=proposal_id,
                tool_name=name,
                tool_version=version,
                arguments=raw,
                idempotency_key=idempotency_key,
            ),
            metadata=metadata,
        )


def serve_toml(tmp: Path, policies: Path = POLICIES) -> str:
    """The head of a real ``callgate serve``'s config in ``tmp``: the four listeners on Unix
    sockets there and the policies in ``policies`` (not watched). Callers append the rest
    (more ``[policy]`` keys first, then their own tables)."""
    return f"""
[server]
agent = {{ socket = "{tmp}/agent.sock" }}
confirmer = {{ socket = "{tmp}/confirmer.sock" }}
authorizer = {{ socket = "{tmp}/authorizer.sock" }}
executor = {{ socket = "{tmp}/executor.sock" }}
[policy]
dir = "{policies}"
watch = false
"""


def calendar_secret(env: str, value: str) -> SecretConfig:
    """The calendar tool's upstream secret ``calendar_api_token``, read from ``env`` (set here)."""
    os.environ[env] = value
    return SecretConfig(
        name="calendar_api_token", env=env, tools=("calendar.create_event",), resources=("calendar:*",)
    )


def short_tmpdir() -> Path:
    # Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    return Path(tempfile.mkdtemp(prefix="cg-", dir="/tmp"))


def start_sidecar(
    policy_dir: Path = POLICIES,
    *,
    clock_at: datetime = SPEC_CLOCK,
    tolerate_bad_policies: bool = False,
    policy: Any = None,
    server_kw: dict[str, Any] | None = None,
    **cfg_kw: Any,
) -> tuple[Running, Path]:
    tmp = short_tmpdir()
    cfg = Config(
        server=ServerConfig(
            agent=ListenerConfig(socket=str(tmp / "agent.sock")),
            confirmer=ListenerConfig(socket=str(tmp / "confirmer.sock")),
            authorizer=ListenerConfig(socket=str(tmp / "authorizer.sock")),
            executor=ListenerConfig(socket=str(tmp / "executor.sock")),
            **(server_kw or {}),
        ),
        store=StoreConfig(path=str(tmp / "callgate.db")),
        idempotency=IdempotencyConfig(path=str(tmp / "idempotency.db")),
        base_dir=str(policy_dir.parent),
    )
    cfg = replace(cfg, policy=replace(policy or cfg.policy, dir=str(policy_dir)), **cfg_kw)
    clock = FixedClock(clock_at)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            try:
                sc = Sidecar(
                    await build_components(cfg, clock=clock, tolerate_bad_policies=tolerate_bad_policies)
                )
                await sc.start()
                holder["sidecar"] = sc
            except BaseException as exc:  # surfaced to the test thread
                holder["error"] = exc
            finally:
                started.set()

        loop.run_until_complete(boot())
        if "sidecar" in holder:
            loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started.wait(120)  # a 1,000-tool policy set on a loaded 2-core box (bench) boots slower
    if "error" in holder:
        raise holder["error"]
    sc: Sidecar = holder["sidecar"]
    channels = {role: grpc.insecure_channel(addrs[0]) for role, addrs in sc.addresses.items()}
    running = Running(
        config=cfg,
        clock=clock,
        sidecar=sc,
        loop=loop,
        gate=pb_grpc.GateStub(channels["agent"]),
        confirmations=pb_grpc.ConfirmationsStub(channels["confirmer"]),
        authorizer=pb_grpc.AuthorizerStub(channels["authorizer"]),
        executor=pb_grpc.ExecutorStub(channels["executor"]),
        channels=channels,
        db_path=tmp / "callgate.db",
    )
    return running, tmp


def stop_sidecar(running: Running, tmp: Path) -> None:
    for ch in running.channels.values():
        ch.close()
    running.call(running.sidecar.stop(0))
    running.loop.call_soon_threadsafe(running.loop.stop)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[Running]:
    running, tmp = start_sidecar()
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[Running]:
    """One sidecar for a whole module of read-mostly tests (each test opens its own session)."""
    running, tmp = start_sidecar()
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def reference_front(
    tool: CompiledTool,
    raw: bytes,
    clock: str,
    tenant: str,
    *,
    zone: str = "Asia/Shanghai",
    limits: ParseLimits | None = None,
) -> NormalizedArguments:
    """The Python stages' answer to one proposal (strict parse, JSON Schema, the normalizers,
    RFC 8785, the digest): the reference the compiled core is compared with. Raises their
    ``RejectedError`` as they do."""
    return normalize(
        tool.schema.validate(parse_arguments(raw, limits or ParseLimits())),
        tool.normalizers,
        NormalizationContext(clock, zone, "en"),
        tenant=tenant,
        tool_name=tool.spec.name,
        tool_version=tool.spec.version,
    )
