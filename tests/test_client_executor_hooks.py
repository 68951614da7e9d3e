"""The executor helper's surface for a caller that maps its own ends (the MCP gateway,
callgate/mcp/attempts.py), against a real sidecar: ``OutcomeUnknown`` is never retried even when
the advice allows it, ``recorded`` is the message in the trail, ``error`` is what the model reads,
``on_stage`` / ``encode`` / ``shield`` are used, and a cancelled tool function is reported
OUTCOME_UNKNOWN before the cancellation goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from callgate.client import (
    Allowed,
    AsyncClient,
    AsyncSession,
    BusinessRejection,
    Committed,
    ExecutionError,
    OutcomeUnknown,
    Stage,
    ToolCall,
    ToolContext,
)
from tests.conftest import Running

WEATHER = '{"city": "Oslo", "date": "2026-07-20"}'
"""weather.get is a read: after a timeout the sidecar advises a retry."""


def async_client_for(server: Running) -> AsyncClient:
    a = server.sidecar.addresses
    return AsyncClient(a["agent"][0], executor=a["executor"][0], confirmer=a["confirmer"][0])


async def allowed(cg: AsyncClient, call_id: str) -> tuple[AsyncSession, str]:
    s = await cg.session("acme", "alice")
    await s.tools("mc-1")
    out = await s.propose(ToolCall(call_id, "weather__get", WEATHER))
    assert isinstance(out, Allowed)
    return s, out.invocation_id


async def attempt_reports(s: AsyncSession, invocation_id: str) -> list[dict[str, Any]]:
    """The data of each reported attempt outcome in the trail, oldest first."""
    out = []
    for e in await s.events(invocation_id):
        data = MessageToDict(e.data)
        if "outcome" in data and "attempt" in data:
            out.append(data)
    return out


def test_outcome_unknown_is_never_retried_where_a_timeout_is(server: Running) -> None:
    calls: list[str] = []

    async def advance(seconds: float) -> None:
        server.clock.advance(seconds)

    async def timed_out_once(ctx: ToolContext) -> Committed:
        calls.append("timeout")
        if len(calls) == 1:
            raise TimeoutError("no answer")
        return Committed({"forecast": "sunny"})

    async def lost(ctx: ToolContext) -> Committed:
        calls.append("lost")
        raise OutcomeUnknown("the upstream said nothing", recorded="sent, no answer: timeout")

    async def main() -> list[dict[str, Any]]:
        async with async_client_for(server) as cg:
            _, first = await allowed(cg, "c1")
            res = await cg.run(first, timed_out_once, executor_id="x", sleep=advance)
            assert res.attempts == 2 and res.state == "OBSERVED"  # the advice retried the read
            s, second = await allowed(cg, "c2")
            with pytest.raises(ExecutionError) as exc:
                await cg.run(second, lost, executor_id="x", sleep=advance)
            assert exc.value.code == "outcome_unknown"
            return await attempt_reports(s, second)

    reports = asyncio.run(main())
    assert calls == ["timeout", "timeout", "lost"]  # one attempt only, with the advice to retry
    assert len(reports) == 1 and reports[0]["retry"]["allowed"] is True
    assert reports[0]["message"] == "sent, no answer: timeout"


def test_failure_recorded_and_error_stages_encode_and_shield(server: Running) -> None:
    stages: list[Stage] = []
    encoded: list[Any] = []
    shields: list[int] = []

    async def refused(ctx: ToolContext) -> Committed:
        assert ctx.attempt_id  # the sidecar's attempt id reaches the function
        error = {"code": "upstream_refused", "message": "upstream error -32602: bad city", "retryable": False}
        raise BusinessRejection("bad city Oslo", recorded="Refused", error=error)

    async def on_stage(stage: Stage) -> None:
        stages.append(stage)

    def encode(value: Any) -> bytes:
        encoded.append(value)
        return json.dumps(value, ensure_ascii=False, sort_keys=True).encode()

    @contextlib.contextmanager
    def shield() -> Iterator[None]:
        shields.append(1)
        yield

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        async with async_client_for(server) as cg:
            s, inv = await allowed(cg, "c1")
            res = await cg.run(
                inv,
                refused,
                executor_id="x",
                max_attempts=1,
                encode=encode,
                shield=shield,
                on_stage=on_stage,
            )
            return res, await attempt_reports(s, inv)

    res, reports = asyncio.run(main())
    assert stages == [Stage.ATTEMPT, Stage.ENCODE] and len(shields) == 1
    assert encoded == [
        {"code": "upstream_refused", "message": "upstream error -32602: bad city", "retryable": False}
    ]
    assert "upstream_refused" in res.message and "bad city" in res.message, res.message
    assert res.error_code == "" and res.next_page_token == "" and res.structured_json == ""
    assert [r["message"] for r in reports] == ["Refused"]  # never the exception's text


def test_a_cancelled_function_is_reported_outcome_unknown(server: Running) -> None:
    async def main() -> list[dict[str, Any]]:
        started = asyncio.Event()

        async def hangs(ctx: ToolContext) -> Committed:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("never")

        async with async_client_for(server) as cg:
            s, inv = await allowed(cg, "c1")
            task = asyncio.create_task(cg.run(inv, hangs, executor_id="x"))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await attempt_reports(s, inv)

    reports = asyncio.run(main())
    assert len(reports) == 1, reports
    assert reports[0]["outcome"] == "OUTCOME_UNKNOWN"
    assert reports[0]["message"] == "CancelledError"
