"""A confirmation for an MCP client that cannot be asked, decided in the confirmation console
(``[mcp] confirm_without_elicitation = "wait"``), end to end with real parts: the official SDK
client declaring no elicitation (as the OpenAI Agents SDK's MCP client and most IDE clients do)
over stdio <-> ``callgate mcp serve`` with its embedded sidecar <-> the SDK upstream of
tests/mcp_upstreams/server.py, and ``callgate console`` on the embedded sidecar's confirmer
socket, where a person approves or denies through the console's own form. The default
(``refuse``) is tested in tests/test_mcp_modern.py and tests/test_mcp_openai_agents.py."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from callgate.client import AsyncClient, AsyncSession
from callgate.gen.v1 import callgate_pb2 as pb
from tests.console_fixture import ALICE, decide, http, start_console
from tests.mcp_env import payload, run, stdio, text_of
from tests.test_mcp_gateway import Env
from tests.test_mcp_gateway_more import imported_once, invocations, state, trail


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


def waiting_env(pins: Path, timeout_s: float) -> Env:
    e = Env()
    shutil.copytree(pins, e.base / "policies" / "tools", dirs_exist_ok=True)
    text = e.config.read_text()
    assert "[mcp]\nelicitation_timeout_seconds = 20.0\n" in text
    e.config.write_text(
        text.replace(
            "[mcp]\nelicitation_timeout_seconds = 20.0\n",
            f'[mcp]\nconfirm_without_elicitation = "wait"\nelicitation_timeout_seconds = {timeout_s}\n',
        )
    )
    e.start_http_upstream()
    return e


@pytest.fixture(name="env")
def env_fixture(pins: Path) -> Any:
    e = waiting_env(pins, 60.0)
    yield e
    e.close()


def removed(env: Env) -> list[str]:
    return [e["name"] for e in env.effects() if e["tool"] == "remove"]


def decide_in_console(env: Env, action: str, invocation: pb.Invocation) -> None:
    """What a person does: open the console, find the card, approve or deny with its form."""
    con = start_console(f"unix:{env.base / 'run' / 'c.sock'}")
    try:
        status, page = http(con.url + "/", token=ALICE)
        assert status == 200 and invocation.invocation_id in page, page[:2000]
        assert "up.remove" in page and "note-a" in page  # the tool and the arguments that will run
        status = decide(con.url, ALICE, "acme", invocation.invocation_id, invocation.digest, action)
        assert status == 303, status
    finally:
        con.stop()


def call_decided_in_console(env: Env, action: str) -> tuple[Any, list[str], list[str]]:
    """The client calls ``up__remove`` (policy: confirm); while the call waits, a person decides
    in the console. Returns the call's answer, the progress messages and the trail's kinds
    followed by the ``confirmed`` event's text (empty when none)."""
    progress: list[str] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def go() -> tuple[Any, list[str]]:
        async with stdio(env) as c:  # no elicitation_callback: the client cannot be asked
            await c.list_tools()
            call = asyncio.ensure_future(
                c.call_tool("up__remove", {"name": "note-a"}, progress_callback=on_progress)
            )
            inv, _ = await trail(env, "up.remove", lambda i: state(i) == "AUTHORIZED")
            assert state(inv) == "AUTHORIZED"  # parked, waiting for a person
            await asyncio.sleep(0.5)
            assert not call.done()  # the call waits; it was not refused
            await asyncio.to_thread(decide_in_console, env, action, inv)
            r = await call
            settled = "OBSERVED" if action == "approve" else "CANCELLED_BEFORE_COMMIT"
            _, kinds = await trail(env, "up.remove", lambda i: state(i) == settled)
            return r, kinds + [await confirmed_by(env)]

    r, kinds = run(go())
    return r, progress, kinds


@pytest.mark.timeout(240)
def test_approved_in_the_console_runs_once(env: Env) -> None:
    r, progress, kinds = call_decided_in_console(env, "approve")
    assert not r.is_error, text_of(r)
    assert "removed note-a" in text_of(r)
    assert removed(env) == ["note-a"]  # ran exactly once
    assert "confirmed" in kinds, kinds
    assert "alice@acme.example" in kinds[-1], kinds[-1]  # who decided: the person in the console
    waits = [m for m in progress if "confirm in the callgate console" in m]
    assert waits and "invocation " in waits[0] and "digest sha256:" in waits[0], progress


@pytest.mark.timeout(240)
def test_denied_in_the_console_never_runs(env: Env) -> None:
    r, _, kinds = call_decided_in_console(env, "deny")
    assert r.is_error and payload(r)["code"] == "confirmation_declined", text_of(r)
    assert removed(env) == []
    assert "confirmation_rejected" in kinds and "confirmed" not in kinds, kinds


async def confirmed_by(env: Env) -> str:
    """The ``confirmed`` event of the one ``up.remove`` invocation, as text (while it runs)."""
    ((invocation_id, session_id, _),) = invocations(env, "up.remove")
    async with AsyncClient(f"unix:{env.base / 'run' / 'a.sock'}") as client:
        events = await AsyncSession(client, session_id).events(invocation_id)
    return " ".join(str(e) for e in events if e.kind == "confirmed")


@pytest.mark.timeout(240)
def test_a_client_that_gives_up_cancels_the_parked_call(env: Env) -> None:
    async def go() -> None:
        async with stdio(env) as c:
            await c.list_tools()
            call = asyncio.ensure_future(c.call_tool("up__remove", {"name": "keep-me"}))
            await trail(env, "up.remove", lambda i: state(i) == "AUTHORIZED")
            call.cancel()  # the client's own timeout: the SDK sends notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await call
            inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "CANCELLED_BEFORE_COMMIT")
            assert state(inv) == "CANCELLED_BEFORE_COMMIT", kinds  # not left parked for the console

    run(go())
    assert removed(env) == []


@pytest.mark.timeout(240)
def test_nobody_decides_the_call_times_out_and_is_cancelled(pins: Path) -> None:
    env = waiting_env(pins, 3.0)
    try:

        async def go() -> None:
            async with stdio(env) as c:
                await c.list_tools()
                r = await c.call_tool("up__remove", {"name": "keep-me"})
                assert r.is_error and payload(r)["code"] == "confirmation_timeout", text_of(r)
                inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "CANCELLED_BEFORE_COMMIT")
                assert state(inv) == "CANCELLED_BEFORE_COMMIT", kinds  # never left parked

        run(go())
        assert removed(env) == []
    finally:
        env.close()
