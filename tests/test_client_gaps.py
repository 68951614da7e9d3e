"""callgate.client, the rest of issue 10 against a real sidecar: the asyncio executor helper and
the one state machine both helpers use, the public confirmer (list, confirm, deny) and
Session.cancel/parked, a configured secret redeemed inside the helper, ``traceparent`` from the
caller's OpenTelemetry context, and the exact tool shapes of the anthropic and mcp dialects."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from callgate.client import (
    Allowed,
    AsyncClient,
    CallRefused,
    Client,
    Committed,
    DeadlineExceeded,
    ExecutionError,
    NeedsConfirmation,
    ToolCall,
    ToolContext,
    Transient,
)
from callgate.client.executor import Encode, RetryAfter, Stop, after_report
from callgate.config import SecretConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import ROOT, Running, start_sidecar, stop_sidecar

EVENT = {"title": "Standup", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 15}
WEATHER = '{"city": "Oslo", "date": "2026-07-20"}'
CANARY = "cg-canary-7f3a9d2e5b1c4a08"


def client_for(server: Running, timeout: float = 10.0) -> Client:
    a = server.sidecar.addresses
    return Client(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0], timeout=timeout)


def async_client_for(server: Running) -> AsyncClient:
    a = server.sidecar.addresses
    return AsyncClient(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0])


# ---------------------------------------------------------------- the shared state machine
def _report(state: int, retry: bool, backoff_ms: int = 0) -> pb.ReportOutcomeResponse:
    return pb.ReportOutcomeResponse(state=state, retry=pb.RetryAdvice(retry=retry, backoff_ms=backoff_ms))  # type: ignore[arg-type]


def test_state_machine_commit_retry_error_and_unknown() -> None:
    done = after_report("inv", 1, 10, Committed({"ok": 1}), None, _report(pb.COMMITTED, False))
    assert isinstance(done, Encode) and done.request.status == "ok" and done.state == "COMMITTED"
    again = after_report("inv", 1, 10, None, Transient(), _report(pb.FAILED_BEFORE_COMMIT, True, 250))
    assert again == RetryAfter(0.25)
    spent = after_report("inv", 10, 10, None, Transient(), _report(pb.FAILED_BEFORE_COMMIT, True, 250))
    assert isinstance(spent, Encode) and spent.request.status == "error"
    assert json.loads(spent.request.value) == {
        "code": "Transient",
        "message": "the tool failed",
        "retryable": True,
    }
    unknown = after_report("inv", 1, 1, None, TimeoutError(), _report(pb.OUTCOME_UNKNOWN, True))
    assert isinstance(unknown, Stop) and unknown.error.code == "outcome_unknown"
    assert unknown.error.state == "OUTCOME_UNKNOWN"  # never an error message telling the model it failed


# ---------------------------------------------------------------- the asyncio executor helper
def test_async_run_retries_transient_then_commits(server: Running) -> None:
    calls: list[int] = []

    async def flaky(ctx: ToolContext) -> Committed:
        calls.append(ctx.attempt_number)
        if len(calls) == 1:
            raise Transient()
        return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})

    async def advance(seconds: float) -> None:
        server.clock.advance(seconds)

    async def main() -> Any:
        async with async_client_for(server) as cg:
            s = await cg.session("acme", "alice")
            await s.tools("mc-1")
            out = await s.propose(ToolCall("c1", "weather__get", WEATHER))
            assert isinstance(out, Allowed)
            return await cg.run(out.invocation_id, flaky, executor_id="x", sleep=advance)

    res = asyncio.run(main())
    assert calls == [1, 2] and res.attempts == 2 and res.state == "OBSERVED"
    assert "sunny" in res.message


def test_async_run_unknown_outcome_stops_typed(server: Running) -> None:
    async def lost(ctx: ToolContext) -> Committed:
        raise TimeoutError("upstream did not answer")

    async def main() -> None:
        async with async_client_for(server) as cg:
            s = await cg.session("acme", "alice")
            await s.tools("mc-1")
            out = await s.propose(ToolCall("c1", "weather__get", WEATHER))
            assert isinstance(out, Allowed)
            await cg.run(out.invocation_id, lost, executor_id="x", max_attempts=1)

    with pytest.raises(ExecutionError) as exc:
        asyncio.run(main())
    assert exc.value.code == "outcome_unknown"


# ---------------------------------------------------------------- confirmer, cancel, parked
def test_confirmer_lists_confirms_and_denies(server: Running) -> None:
    with client_for(server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        first = s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
        second = s.propose(ToolCall("c2", "calendar__create_event", json.dumps({**EVENT, "title": "Retro"})))
        third = s.propose(ToolCall("c3", "calendar__create_event", json.dumps({**EVENT, "title": "1:1"})))
        assert all(isinstance(o, NeedsConfirmation) for o in (first, second, third))
        assert isinstance(first, NeedsConfirmation) and isinstance(second, NeedsConfirmation)
        assert isinstance(third, NeedsConfirmation)
        c = cg.confirmer()
        pending = {p.invocation_id: p for p in c.list_pending("acme", page_size=1)}  # every page
        assert sorted(pending) == sorted(o.invocation_id for o in (first, second, third))
        p1 = pending[first.invocation_id]
        assert p1.digest == first.digest and json.loads(p1.arguments)["title"] == "Standup"
        assert p1.tool_name == "calendar.create_event" and p1.subject == "alice" and p1.tenant == "acme"
        assert s.parked(first.invocation_id) is not None

        assert c.confirm(first.invocation_id, first.digest, confirmed_by="alice@ui") == "PREPARED"
        assert s.parked(first.invocation_id) is None
        assert c.deny(second.invocation_id, second.digest, denied_by="alice@ui") == "CANCELLED_BEFORE_COMMIT"
        with pytest.raises(CallRefused) as exc:
            c.deny(third.invocation_id, "sha256:" + "0" * 64, denied_by="mallory")
        assert exc.value.code == "confirmation_digest_mismatch"
        with pytest.raises(CallRefused) as exc:
            c.confirm(second.invocation_id, second.digest, confirmed_by="alice@ui")
        assert exc.value.code == "confirmation_not_pending"  # a denial is final
        assert c.list_pending("acme") == []
        denied = s.invocation(second.invocation_id)
        last = s.events(second.invocation_id)[-1]
        assert (
            last.kind == "confirmation_rejected" and pb.State.Name(denied.state) == "CANCELLED_BEFORE_COMMIT"
        )
        assert pb.State.Name(s.invocation(third.invocation_id).state) == "CANCELLED_BEFORE_COMMIT"
        # the public cancel: idempotent, the state it is in
        assert s.cancel(first.invocation_id, reason="changed my mind") == "CANCELLED_BEFORE_COMMIT"
        assert s.cancel(first.invocation_id) == "CANCELLED_BEFORE_COMMIT"
        other = cg.session("acme", "bob")
        with pytest.raises(CallRefused) as exc:
            other.cancel(third.invocation_id)
        assert exc.value.code == "invocation_not_found"


def test_async_confirmer_and_cancel(server: Running) -> None:
    async def main() -> tuple[str, str, str]:
        async with async_client_for(server) as cg:
            s = await cg.session("acme", "alice", timezone="Asia/Shanghai")
            await s.tools("mc-1")
            a = await s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
            b = await s.propose(ToolCall("c2", "calendar__create_event", json.dumps({**EVENT, "title": "x"})))
            assert isinstance(a, NeedsConfirmation) and isinstance(b, NeedsConfirmation)
            c = cg.confirmer()
            listed = sorted(p.invocation_id for p in await c.list_pending("acme"))
            assert listed == sorted([a.invocation_id, b.invocation_id])
            assert (await s.parked(a.invocation_id)) is not None
            return (
                await c.deny(a.invocation_id, a.digest, denied_by="alice@ui"),
                await c.confirm(b.invocation_id, b.digest, confirmed_by="alice@ui"),
                await s.cancel(b.invocation_id),
            )

    assert asyncio.run(main()) == ("CANCELLED_BEFORE_COMMIT", "PREPARED", "CANCELLED_BEFORE_COMMIT")


def test_a_parked_call_is_found_by_its_tool_call_id_from_another_process(server: Running) -> None:
    """A second client over the same session id (another process: no invocation id in hand)
    finds the call its tool call id made (FindInvocation) and the session's parked calls
    (ListParked); another session finds neither. Sync and asyncio alike."""
    found_by_tool_call_id(server)


@pytest.mark.postgres
def test_a_parked_call_is_found_by_its_tool_call_id_in_a_postgres_store(postgres_dsn: str) -> None:
    """The same with the keys and invocations in PostgreSQL (tests/pg_fixture.py)."""
    from callgate.config import StoreConfig
    from tests.test_store_contract import fresh_pg_database

    os.environ["CALLGATE_TEST_FIND_PG_DSN"] = fresh_pg_database(postgres_dsn)
    try:
        running, tmp = start_sidecar(
            store=StoreConfig(backend="postgres", dsn_env="CALLGATE_TEST_FIND_PG_DSN")
        )
    finally:
        del os.environ["CALLGATE_TEST_FIND_PG_DSN"]
    try:
        found_by_tool_call_id(running)
    finally:
        stop_sidecar(running, tmp)


def found_by_tool_call_id(server: Running) -> None:
    with client_for(server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id="ses-find-1")
        s.tools("mc-find")
        out = s.propose(ToolCall("call-7", "calendar__create_event", json.dumps(EVENT)))
        assert isinstance(out, NeedsConfirmation)
        ran = s.propose(ToolCall("call-8", "weather__get", WEATHER))
        assert isinstance(ran, Allowed)
    with client_for(server) as cg:  # the other process: the session reopened by id, a new listing
        s = cg.session("acme", "alice", timezone="Asia/Shanghai", session_id="ses-find-1")
        s.tools("mc-other")
        assert [(i.invocation_id, i.proposal_id) for i in s.list_parked()] == [(out.invocation_id, "call-7")]
        found = s.find("call-7", "calendar__create_event", model_call_id="mc-find")
        assert found is not None and found.invocation_id == out.invocation_id and found.digest == out.digest
        assert s.find("call-7", "calendar.create_event", model_call_id="mc-find") == found  # callgate name
        got = s.find("call-8", "weather__get", model_call_id="mc-find")
        assert got is not None and got.invocation_id == ran.invocation_id
        assert s.find("call-9", "calendar__create_event", model_call_id="mc-find") is None
        assert s.find("call-7", "calendar__create_event") is None  # another model call: another key
        other = cg.session("acme", "alice", timezone="Asia/Shanghai")  # same subject, another session
        other.tools("mc-find")
        assert other.find("call-7", "calendar__create_event", model_call_id="mc-find") is None
        assert other.list_parked() == []

        async def aio() -> tuple[str, list[str]]:
            async with async_client_for(server) as acg:
                a = await acg.session("acme", "alice", timezone="Asia/Shanghai", session_id="ses-find-1")
                await a.tools("mc-x")
                inv = await a.find("call-7", "calendar__create_event", model_call_id="mc-find")
                assert inv is not None
                return inv.invocation_id, [i.proposal_id for i in await a.list_parked()]

        assert asyncio.run(aio()) == (out.invocation_id, ["call-7"])
        assert s.cancel(out.invocation_id) == "CANCELLED_BEFORE_COMMIT"
        assert s.list_parked() == []
        ended = s.find("call-7", "calendar__create_event", model_call_id="mc-find")
        assert ended is not None and pb.State.Name(ended.state) == "CANCELLED_BEFORE_COMMIT"


WAITER = """
import sys
from callgate.client import Client, Session
agent, sid, inv = sys.argv[1:4]
with Client(agent) as cg:
    for change in Session(cg, sid).watch(inv, timeout=120, cancel_on_close=True):
        print("waiting", flush=True)  # the stream is open: the sidecar has shown it the call
"""


def _ended(s: Any, invocation_id: str) -> str:
    """The state the invocation ends in (watched until terminal)."""
    for change in s.watch(invocation_id, timeout=30):
        if change.terminal:
            return pb.State.Name(change.invocation.state)
    raise AssertionError("no terminal state")


def test_a_watch_given_up_cancels_the_parked_call_only_when_asked(server: Running) -> None:
    """``cancel_on_close``: a watch closed before its deadline, or an agent process killed while
    it waits, cancels the parked call at once (it leaves the console); the deadline passing, or a
    watch without the flag, leaves it parked."""
    with client_for(server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-close")

        def park(call_id: str) -> NeedsConfirmation:
            out = s.propose(
                ToolCall(call_id, "calendar__create_event", json.dumps({**EVENT, "title": call_id}))
            )
            assert isinstance(out, NeedsConfirmation)
            return out

        plain, timed, closed, killed = park("w1"), park("w2"), park("w3"), park("w4")
        it = s.watch(plain.invocation_id, timeout=30)
        next(it)
        it.close()  # no flag: closing decides nothing
        with pytest.raises(DeadlineExceeded):  # the deadline passes: the call stays the console's
            s.wait_confirmed(timed, timeout=0.5, cancel_on_close=True)
        it = s.watch(closed.invocation_id, timeout=30, cancel_on_close=True)
        assert pb.State.Name(next(it).invocation.state) == "AUTHORIZED"
        it.close()  # the caller gave it up
        assert _ended(s, closed.invocation_id) == "CANCELLED_BEFORE_COMMIT"
        proc = subprocess.Popen(
            [sys.executable, "-c", WAITER, server.sidecar.addresses["agent"][0], s.session_id,
             killed.invocation_id],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "waiting"
            proc.kill()  # the agent process dies while it waits for the console
            proc.wait(30)
        finally:
            proc.kill()
        assert _ended(s, killed.invocation_id) == "CANCELLED_BEFORE_COMMIT"
        events = s.events(closed.invocation_id)
        assert [e.data["reason"] for e in events if e.kind == "cancelled"] == ["the agent closed its watch"]
        for left in (plain, timed):
            assert pb.State.Name(s.invocation(left.invocation_id).state) == "AUTHORIZED"
            s.cancel(left.invocation_id)


def test_confirmer_not_configured_is_typed() -> None:
    with Client("/nonexistent/agent.sock") as cg:
        with pytest.raises(Exception) as exc:
            cg.confirmer()
    assert getattr(exc.value, "code", "") == "not_configured"


# ---------------------------------------------------------------- a secret inside the helper
@pytest.fixture
def secret_server() -> Iterator[Running]:
    os.environ["CALLGATE_TEST_CLIENT_TOKEN"] = CANARY
    running, tmp = start_sidecar(
        secrets=(
            SecretConfig(
                name="calendar_api_token",
                env="CALLGATE_TEST_CLIENT_TOKEN",
                tools=("calendar.create_event",),
                resources=("calendar:*",),
            ),
        )
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def test_redeemed_secret_reaches_the_function_never_the_model(secret_server: Running) -> None:
    seen: list[bytes] = []

    def create(ctx: ToolContext) -> Committed:
        token = ctx.redeem("calendar_api_token")
        seen.append(token)
        # a careless upstream echoes the key back: the tool message must not carry it
        return Committed({"event_id": "evt_9", "echo": f"authorized with {token.decode()}"}, "evt_9")

    async def acreate(ctx: ToolContext) -> Committed:
        token = await ctx.redeem("calendar_api_token")
        seen.append(token)
        return Committed({"event_id": "evt_10", "echo": token.decode()}, "evt_10")

    with client_for(secret_server) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
        assert isinstance(out, NeedsConfirmation)
        cg.confirmer().confirm(out.invocation_id, out.digest, confirmed_by="alice@ui")
        res = cg.run(out.invocation_id, create, executor_id="calendar-executor")
        second = s.propose(ToolCall("c2", "calendar__create_event", json.dumps({**EVENT, "title": "B"})))
        assert isinstance(second, NeedsConfirmation)
        cg.confirmer().confirm(second.invocation_id, second.digest, confirmed_by="alice@ui")
        result_again = s.result(out.invocation_id)

    async def arun() -> str:
        async with async_client_for(secret_server) as acg:
            return (await acg.run(second.invocation_id, acreate, executor_id="calendar-executor")).message

    amessage = asyncio.run(arun())
    assert seen == [CANARY.encode(), CANARY.encode()]
    for text in (res.message, result_again, amessage, out.message, second.message):
        assert CANARY not in text
    assert res.state == "OBSERVED" and "evt_9" in res.message and "REDACTED" in res.message
    assert "evt_10" in amessage


# ---------------------------------------------------------------- traceparent from OpenTelemetry
def test_traceparent_from_the_callers_opentelemetry_context(server: Running) -> None:
    tracer = TracerProvider().get_tracer("agent-runtime")  # a real SDK tracer, not the global one
    with client_for(server) as cg, tracer.start_as_current_span("agent-turn") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "calendar__create_event", json.dumps(EVENT)))
        assert isinstance(out, NeedsConfirmation)
        cg.confirmer().confirm(out.invocation_id, out.digest, confirmed_by="alice@ui")
        res = cg.run(out.invocation_id, lambda ctx: Committed({"event_id": "e1"}, "e1"), executor_id="x")
        events = s.events(out.invocation_id)
    assert res.state == "OBSERVED"
    kinds = [e.kind for e in events]
    assert kinds[0] == "proposed" and "confirmed" in kinds and kinds[-1] == "observed"
    assert {e.trace_id for e in events} == {trace_id}  # one trace for the whole invocation
    # no active span and no explicit value: the sidecar starts its own trace per call
    with client_for(server) as cg:
        s = cg.session("acme", "alice")
        s.tools("mc-2")
        out2 = s.propose(ToolCall("c1", "weather__get", WEATHER))
        assert isinstance(out2, Allowed)
        assert {e.trace_id for e in s.events(out2.invocation_id)} != {trace_id}


def test_explicit_traceparent_wins_over_the_otel_context(server: Running) -> None:
    explicit = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    tracer = TracerProvider().get_tracer("agent-runtime")
    with client_for(server) as cg, tracer.start_as_current_span("agent-turn"):
        s = cg.session("acme", "alice")
        s.tools("mc-1")
        out = s.propose(ToolCall("c1", "weather__get", WEATHER), traceparent=explicit)
        events = s.events(out.invocation_id)
    assert {e.trace_id for e in events} == {"ab" * 16}


# ---------------------------------------------------------------- the dialects' exact shapes
def test_anthropic_and_mcp_tool_shapes(server: Running) -> None:
    spec = json.loads((ROOT / "policies/tools/weather.get@v1.json").read_text())
    with client_for(server) as cg:
        s = cg.session("acme", "alice")
        anthropic = {t["name"]: t for t in s.tools("mc-1", "anthropic")}
        mcp = {t["name"]: t for t in s.tools("mc-2", "mcp")}
    for tools, key in ((anthropic, "input_schema"), (mcp, "inputSchema")):
        # alice is a scheduler, not an admin: files.delete is hidden by policy (docs/POLICIES.md)
        assert set(tools) == {"weather__get", "calendar__create_event"}
        for t in tools.values():
            assert set(t) == {"name", "description", key}  # exactly what the provider expects
            assert isinstance(t["description"], str) and t["description"]
            assert t[key]["type"] == "object" and "$schema" not in t[key]
        expected = {k: v for k, v in spec["input_schema"].items() if k != "$schema"}
        assert tools["weather__get"][key] == expected  # not strict-mode transformed
        assert tools["weather__get"]["description"] == spec["description"]
