"""callgate.client against a real sidecar: the agent loop, the executor helper, WatchInvocation,
failure modes (sidecar down, deadline, malformed answer) and reflection over the Unix socket."""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from callgate.client import (
    LEGAL_NAME,
    Allowed,
    AsyncClient,
    CallRefused,
    Client,
    Committed,
    DeadlineExceeded,
    Denied,
    ExecutionError,
    MalformedAnswer,
    NeedsConfirmation,
    Rejected,
    Replayed,
    ToolCall,
    ToolContext,
    Transient,
    TransportError,
    strict_schema,
)
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import ROOT, Running, short_tmpdir

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}


def client_for(server: Running, timeout: float = 10.0) -> Client:
    a = server.sidecar.addresses
    return Client(a["agent"][0], executor=a["executor"][0], timeout=timeout)


def weather_fn(ctx: ToolContext) -> Committed:
    return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})


def test_agent_loop_with_a_scripted_model(server: Running) -> None:
    ran: list[str] = []
    script = [  # the scripted model: (tool call id, legal name, argument bytes)
        ("c1", "weather__get", '{"city": "Paris", "date": "2026-07-20"}'),
        ("c2", "calendar__create_event", json.dumps({**EVENT, "duration_minutes": 600})),
        ("c3", "weather__get", '{"city": "Paris"}'),
        ("c4", "calendar__create_event", json.dumps(EVENT)),
        ("c1", "weather__get", '{"city": "Paris", "date": "2026-07-20"}'),
    ]
    answers: dict[str, str] = {}
    kinds: list[type] = []

    def confirm_soon(out: NeedsConfirmation) -> None:
        time.sleep(0.3)
        server.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=out.invocation_id, digest=out.digest, confirmed_by="alice")
        )

    with client_for(server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        tools = s.tools("mc-1", "openai")
        assert all(LEGAL_NAME.match(t["function"]["name"]) for t in tools)
        for call_id, name, args in script:  # -- the loop of the README, about 15 lines
            out = s.propose(ToolCall(call_id, name, args))
            kinds.append(type(out))
            if isinstance(out, NeedsConfirmation):
                threading.Thread(target=confirm_soon, args=(out,)).start()
                if not s.wait_confirmed(out, timeout=10):
                    answers[call_id] = out.message
                    continue
                out = Allowed(out.invocation_id, out.digest, out.tool_call_id, out.normalized_arguments)
            if isinstance(out, Allowed):
                ran.append(call_id)
                answers[call_id] = cg.run(
                    out.invocation_id, weather_fn if "weather" in name else _cal, executor_id="x"
                ).message
            else:
                answers[call_id] = out.message
    assert kinds == [Allowed, Denied, Rejected, NeedsConfirmation, Replayed]
    assert ran == ["c1", "c4"]
    assert "sunny" in answers["c1"]
    assert json.loads(answers["c2"])["content"]["status"] == "denied"
    assert json.loads(answers["c3"])["content"]["status"] == "rejected"
    assert "evt_1" in answers["c4"]  # the confirmed write ran and its tool message came back


def _cal(ctx: ToolContext) -> Committed:
    return Committed({"event_id": "evt_1"}, external_resource_id="evt_1")


def test_executor_helper_retries_transient_then_commits(server: Running) -> None:
    calls: list[int] = []

    def flaky(ctx: ToolContext) -> Committed:
        calls.append(ctx.attempt_number)
        if len(calls) == 1:
            raise Transient()
        return Committed({"ok": True})

    with client_for(server) as cg:
        s = cg.session("acme", "alice")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "weather__get", '{"city": "Oslo", "date": "2026-07-20"}'))
        assert isinstance(out, Allowed)
        res = cg.run(out.invocation_id, flaky, executor_id="x", sleep=server.clock.advance)
    assert calls == [1, 2] and res.attempts == 2 and res.state == "OBSERVED"


def test_executor_helper_unknown_outcome_is_never_called_a_failure(server: Running) -> None:
    def lost(ctx: ToolContext) -> Committed:
        raise TimeoutError("upstream did not answer")

    with client_for(server) as cg:
        s = cg.session("acme", "alice")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "weather__get", '{"city": "Oslo", "date": "2026-07-20"}'))
        assert isinstance(out, Allowed)
        with pytest.raises(ExecutionError) as exc:
            cg.run(out.invocation_id, lost, executor_id="x", max_attempts=1)
    assert exc.value.code == "outcome_unknown"


def test_sidecar_down_raises_transport_error_and_runs_nothing() -> None:
    tmp = short_tmpdir()
    with Client(str(tmp / "nobody.sock"), timeout=2) as cg:
        with pytest.raises(TransportError) as exc:
            cg.session("acme", "alice")
    assert exc.value.code in ("unavailable", "deadline_exceeded")


def test_session_refused_errors_carry_the_stable_code(server: Running) -> None:
    with client_for(server) as cg:
        s = cg.session("acme", "alice")
        with pytest.raises(CallRefused) as exc:
            s.tools("mc-1", fed_invocation_ids=("nope",))
    assert exc.value.code == "invalid_request"


class _SlowOrBrokenGate(pb_grpc.GateServicer):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def OpenSession(self, request: Any, context: Any) -> pb.OpenSessionResponse:
        return pb.OpenSessionResponse(session_id="" if self.mode == "no_session" else "s1")

    async def ListTools(self, request: Any, context: Any) -> pb.ListToolsResponse:
        # one tool, so a proposal of it reaches Propose (an unlisted name is answered locally)
        return pb.ListToolsResponse(tools=[pb.ToolSpec(name="x", version="1", input_schema_json="{}")])

    async def Propose(self, request: Any, context: Any) -> pb.ProposeResponse:
        if self.mode == "slow":
            await asyncio.sleep(5)
        # malformed: ALLOW while the state says nothing was prepared
        return pb.ProposeResponse(
            invocation_id="i1", state=pb.EXECUTING, decision=pb.Decision(effect=pb.ALLOW)
        )


@pytest.fixture
def fake_gate() -> Iterator[tuple[str, _SlowOrBrokenGate]]:
    tmp = short_tmpdir()
    sock = tmp / "fake.sock"
    servicer = _SlowOrBrokenGate("malformed")
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            srv = grpc.aio.server()
            pb_grpc.add_GateServicer_to_server(servicer, srv)
            srv.add_insecure_port(f"unix:{sock}")
            await srv.start()
            holder["srv"] = srv
            ready.set()

        loop.run_until_complete(boot())
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    yield str(sock), servicer
    asyncio.run_coroutine_threadsafe(holder["srv"].stop(0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)


def test_a_session_reopens_by_its_id_for_the_same_subject_only(server: Running) -> None:
    """issue 28: OpenSession with a client-chosen id that exists answered "session_id already
    exists"; a restarted runtime (or a graph resumed in another process) reopens it, as
    docs/CLIENTS.md says, and keeps what it was opened with. Another subject is refused."""
    with client_for(server) as cg:
        first = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id="ses-reopen-1")
        first.tools("mc-1")
        again = cg.session("acme", "alice", session_id="ses-reopen-1")  # e.g. another process
        assert again.session_id == first.session_id == "ses-reopen-1"
        again.tools("mc-2")  # the same session: ListTools works on the reopened one
        record = server.call(server.sidecar.components.store.get_session("ses-reopen-1"))
        assert record.timezone == "Asia/Shanghai"  # as first opened
        for tenant, subject in (("acme", "mallory"), ("other", "alice")):
            with pytest.raises(CallRefused) as err:
                cg.session(tenant, subject, session_id="ses-reopen-1")
            assert err.value.code == "invalid_request"


def test_an_open_session_answer_without_an_id_is_malformed(fake_gate: tuple[str, _SlowOrBrokenGate]) -> None:
    """Both clients refuse a session the sidecar answered without an id (no session to use)."""
    sock, servicer = fake_gate
    servicer.mode = "no_session"
    with Client(sock, timeout=2) as cg, pytest.raises(MalformedAnswer):
        cg.session("acme", "alice")

    async def main() -> None:
        async with AsyncClient(sock, timeout=2) as acg:
            await acg.session("acme", "alice")

    with pytest.raises(MalformedAnswer):
        asyncio.run(main())


@pytest.mark.parametrize("mode", ["malformed", "slow"])
def test_malformed_or_slow_answers_raise_and_run_nothing(
    fake_gate: tuple[str, _SlowOrBrokenGate], mode: str
) -> None:
    sock, servicer = fake_gate
    servicer.mode = mode
    ran: list[str] = []
    with Client(sock, timeout=0.5) as cg:
        s = cg.session("acme", "alice")
        s.tools("mc-1")
        err = MalformedAnswer if mode == "malformed" else DeadlineExceeded
        with pytest.raises(err):
            out = s.propose(ToolCall("c1", "x", "{}"))
            ran.append(type(out).__name__)
    assert ran == []


def test_async_client_propose_and_watch(server: Running) -> None:
    async def main() -> tuple[type, bool]:
        async with AsyncClient(server.sidecar.addresses["agent"][0]) as cg:
            s = await cg.session("acme", "alice", timezone="Asia/Shanghai")
            await s.tools("mc-1", "anthropic")
            out = await s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
            assert isinstance(out, NeedsConfirmation)
            server.confirmations.Confirm(
                pb.ConfirmRequest(invocation_id=out.invocation_id, digest=out.digest, confirmed_by="alice")
            )
            return type(out), await s.wait_confirmed(out, timeout=10)

    assert asyncio.run(main()) == (NeedsConfirmation, True)


def test_watch_ends_at_a_terminal_state_and_leaves_nothing_registered(server: Running) -> None:
    with client_for(server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
        assert isinstance(out, NeedsConfirmation)
        server.gate.Cancel(pb.CancelRequest(invocation_id=out.invocation_id, session_id=s.session_id))
        changes = list(s.watch(out.invocation_id, timeout=5))
        assert (
            changes[-1].terminal and pb.State.Name(changes[-1].invocation.state) == "CANCELLED_BEFORE_COMMIT"
        )
        assert not s.wait_confirmed(out, timeout=5)
        other = cg.session("acme", "bob")
        with pytest.raises(CallRefused) as exc:
            list(other.watch(out.invocation_id, timeout=5))
        assert exc.value.code == "invocation_not_found"
    watch = server.sidecar.components.watch
    assert watch is not None and watch.watching(out.invocation_id) == 0


def test_strict_schema_and_names() -> None:
    schema = json.loads((ROOT / "policies/tools/calendar.create_event@v1.json").read_text())["input_schema"]
    strict = strict_schema(schema)
    assert "$schema" not in strict and strict["additionalProperties"] is False
    assert sorted(strict["required"]) == sorted(schema["properties"])
    assert strict["properties"]["calendar_id"]["type"] == ["string", "null"]
    assert strict["properties"]["title"]["type"] == "string"


def test_reflection_describes_every_method_and_message(server: Running) -> None:
    for role, service in (("agent", "Gate"), ("executor", "Executor"), ("confirmer", "Confirmations")):
        with grpc.insecure_channel(server.sidecar.addresses[role][0]) as ch:
            db = ProtoReflectionDescriptorDatabase(ch)
            full = f"callgate.v1.{service}"
            svc = pb.DESCRIPTOR.services_by_name[service]
            for m in svc.methods:
                fd = db.FindFileContainingSymbol(f"{full}.{m.name}")
                assert fd.name == "callgate/v1/callgate.proto"
            for msg in pb.DESCRIPTOR.message_types_by_name:
                assert db.FindFileContainingSymbol(f"callgate.v1.{msg}").name == "callgate/v1/callgate.proto"


def test_client_imports_no_server_module() -> None:
    allowed = ("grpc", "google", "grpc_status", "callgate.gen", "callgate.client", "opentelemetry")
    for path in (ROOT / "callgate/client").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            for name in names:
                if name.startswith("callgate"):
                    assert name.startswith(allowed), f"{path.name} imports {name}"
    assert Path(ROOT / "callgate/client/__init__.py").exists()
