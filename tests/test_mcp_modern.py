"""Confirmations for MCP clients in the 2026-07-28 protocol mode (issue 11), end to end with the
same real parts as tests/test_mcp_gateway.py: the official SDK client in its default
``mode="auto"`` (it negotiates 2026-07-28, where a server cannot send ``elicitation/create``
mid-call) over stdio <-> ``callgate mcp serve`` with its embedded sidecar <-> the SDK upstream
of tests/mcp_upstreams/server.py. The gateway asks through ``InputRequiredResult``; the client
answers and retries with the sealed ``requestState``. Side effects are counted in files, the
trail is read through the public ``AsyncSession`` API."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from callgate.mcp.gateway import CONFIRM_INPUT_KEY
from tests.mcp_env import ROOT, Elicit, accept, payload, run, text_of
from tests.test_mcp_gateway import Env
from tests.test_mcp_gateway_more import imported_once, state, trail


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test here starts from the same import: taken once for the module (:func:`imported_once`)."""
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


@pytest.fixture(name="env")
def env_fixture(pins: Path) -> Any:
    """A fresh ``Env`` (folder, stores, state, HTTP upstream), its upstreams pinned (a copy of
    :func:`pins`, instead of the same ``import_all`` per test)."""
    e = Env()
    shutil.copytree(pins, e.base / "policies" / "tools", dirs_exist_ok=True)
    e.start_http_upstream()
    yield e
    e.close()


@asynccontextmanager
async def modern_gateway(env: Env, elicit: Elicit | None = None) -> AsyncIterator[Client]:
    """The SDK client in its default mode (``auto``) over stdio to ``callgate mcp serve``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "callgate", "mcp", "serve", "--config", str(env.config)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(env.base),
    )
    kwargs: dict[str, Any] = {}
    if elicit is not None:
        kwargs["elicitation_callback"] = elicit
    async with Client(params, **kwargs) as client:
        assert client.protocol_version == "2026-07-28"  # the modern mode, no back-channel
        yield client


def removed(env: Env) -> list[str]:
    return [e["name"] for e in env.effects() if e["tool"] == "remove"]


ACCEPT = types.ElicitResult(action="accept", content={"confirm": True})
DECLINE = types.ElicitResult(action="decline")


@pytest.mark.timeout(200)
def test_modern_confirmation_accepted_runs_once(env: Env) -> None:
    yes = accept(True)

    async def go() -> None:
        async with modern_gateway(env, yes) as c:
            await c.list_tools()
            r = await c.call_tool("up__remove", {"name": "note-a"})
            assert not r.is_error, text_of(r)
            assert "removed note-a" in text_of(r)
            inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "OBSERVED")
            assert state(inv) == "OBSERVED", kinds  # committed, result encoded
            assert "confirmed" in kinds, kinds

    run(go())
    assert removed(env) == ["note-a"]  # ran exactly once
    asked: list[str] = yes.asked  # type: ignore[attr-defined]
    assert len(asked) == 1
    assert '"name": "note-a"' in asked[0] and "digest: sha256:" in asked[0], asked[0]


@pytest.mark.timeout(200)
def test_modern_confirmation_declined_never_runs(env: Env) -> None:
    no = accept(False)

    async def go() -> None:
        async with modern_gateway(env, no) as c:
            await c.list_tools()
            r = await c.call_tool("up__remove", {"name": "keep-me"})
            assert r.is_error and payload(r)["code"] == "confirmation_declined", text_of(r)
            inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "CANCELLED_BEFORE_COMMIT")
            assert state(inv) == "CANCELLED_BEFORE_COMMIT", kinds

    run(go())
    assert removed(env) == []
    assert len(no.asked) == 1  # type: ignore[attr-defined]


@pytest.mark.timeout(200)
def test_modern_client_without_elicitation_fails_closed(env: Env) -> None:

    async def go() -> None:
        async with modern_gateway(env) as c:  # declares no elicitation capability
            await c.list_tools()
            r = await c.call_tool("up__remove", {"name": "keep-me"})
            assert r.is_error and payload(r)["code"] == "elicitation_unsupported", text_of(r)

    run(go())
    assert removed(env) == []


@pytest.mark.timeout(200)
def test_modern_tampered_or_replayed_continuation_refused(env: Env) -> None:
    """The client drives the round trip itself: whatever it sends back, only the parked
    invocation, with its arguments, answered once, can be confirmed."""
    args = {"name": "keep-me"}

    async def go() -> None:
        async with modern_gateway(env, accept(True)) as c:
            await c.list_tools()
            session = c.session

            async def again(arguments: dict[str, Any], answer: types.ElicitResult, request_state: str) -> Any:
                return await session.call_tool(
                    "up__remove", arguments, input_responses={CONFIRM_INPUT_KEY: answer},
                    request_state=request_state, allow_input_required=True,
                )  # fmt: skip

            first = await session.call_tool("up__remove", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            assert first.input_requests is not None
            question = first.input_requests[CONFIRM_INPUT_KEY]
            assert isinstance(question, types.ElicitRequest)
            assert (
                '"name": "keep-me"' in question.params.message
                and "digest: sha256:" in question.params.message
            )
            sealed = first.request_state
            assert sealed is not None and "keep-me" not in sealed and "token" not in sealed  # encrypted

            # 1. one character of the sealed state changed: refused before the gateway's handler
            i = len(sealed) // 2
            tampered = sealed[:i] + ("A" if sealed[i] != "A" else "B") + sealed[i + 1 :]
            with pytest.raises(MCPError) as bad:
                await again(args, ACCEPT, tampered)
            assert "requestState" in bad.value.error.message
            # 2. a state written by hand (the gateway's plaintext shape, a guessed token)
            with pytest.raises(MCPError):
                await again(args, ACCEPT, json.dumps({"v": 1, "token": "guessed"}))
            # 3. the genuine state used to approve other arguments
            with pytest.raises(MCPError):
                await again({"name": "something-else"}, ACCEPT, sealed)
            assert removed(env) == []
            # 4. the genuine state, declined: cancelled, never runs
            r = await again(args, DECLINE, sealed)
            assert isinstance(r, types.CallToolResult)
            assert r.is_error and payload(r)["code"] == "confirmation_declined", text_of(r)
            # 5. the same state replayed with an accept: single use, refused
            r = await again(args, ACCEPT, sealed)
            assert isinstance(r, types.CallToolResult)
            assert r.is_error and payload(r)["code"] == "confirmation_invalid", text_of(r)
            inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "CANCELLED_BEFORE_COMMIT")
            assert state(inv) == "CANCELLED_BEFORE_COMMIT", kinds
            assert "confirmed" not in kinds, kinds

    run(go())
    assert removed(env) == []
