"""The pieces of the client's sans-I/O core (callgate/client/_core.py) that the other client tests
do not reach, held for both shells against a real sidecar: a proposal of another session is
refused before it is sent, ``result()`` is the observed tool message as text (the first page of
``result_page``), and a listener named by a relative filesystem path is dialled as a Unix socket.
(An OpenSession answer without an id is in tests/test_client.py, beside its fake gate.)"""

from __future__ import annotations

import asyncio
import os

import pytest

from callgate.client import (
    Allowed,
    AsyncClient,
    CallgateClientError,
    Client,
    Committed,
    ToolCall,
    ToolContext,
)
from tests.conftest import Running

WEATHER = '{"city": "Oslo", "date": "2026-07-20"}'


def weather(ctx: ToolContext) -> Committed:
    return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})


async def aweather(ctx: ToolContext) -> Committed:
    return weather(ctx)


def relative(address: str) -> str:
    """The listener's socket as a path relative to the working directory (no ``unix:``)."""
    path = os.path.relpath(address.removeprefix("unix:"))
    assert not path.startswith(("unix:", "/"))
    return path


def test_sync_session_checks_the_proposal_and_decodes_the_result(shared_server: Running) -> None:
    a = shared_server.sidecar.addresses
    with Client(relative(a["agent"][0]), executor=relative(a["executor"][0])) as cg:
        mine, other = cg.session("acme", "alice"), cg.session("acme", "alice")
        mine.tools("mc-1")
        req = mine.prepare(ToolCall("c1", "weather__get", WEATHER))
        with pytest.raises(CallgateClientError) as err:
            other.propose_prepared(req)
        assert err.value.code == "invalid_request"
        out = mine.propose_prepared(req)
        assert isinstance(out, Allowed)
        res = cg.run(out.invocation_id, weather, executor_id="core")
        assert res.state == "OBSERVED" and "sunny" in res.message
        assert mine.result(out.invocation_id) == res.message
        assert mine.result_page(out.invocation_id).message.decode() == res.message


def test_async_session_checks_the_proposal_and_decodes_the_result(shared_server: Running) -> None:
    a = shared_server.sidecar.addresses

    async def main() -> None:
        async with AsyncClient(relative(a["agent"][0]), executor=relative(a["executor"][0])) as cg:
            mine, other = await cg.session("acme", "alice"), await cg.session("acme", "alice")
            await mine.tools("mc-1")
            req = mine.prepare(ToolCall("c1", "weather__get", WEATHER))
            with pytest.raises(CallgateClientError) as err:
                await other.propose_prepared(req)
            assert err.value.code == "invalid_request"
            out = await mine.propose_prepared(req)
            assert isinstance(out, Allowed)
            res = await cg.run(out.invocation_id, aweather, executor_id="core")
            assert res.state == "OBSERVED" and "sunny" in res.message
            assert await mine.result(out.invocation_id) == res.message
            assert (await mine.result_page(out.invocation_id)).message.decode() == res.message

    asyncio.run(asyncio.wait_for(main(), 60))
