"""The OpenAI Agents SDK's own MCP client in front of ``callgate mcp serve``: an application
written as the SDK documents it (tests/mcp_agents_app.py: ``MCPServerStdio``, the SDK's
``require_approval`` for MCP tools, ``result.interruptions``, ``state.approve`` /
``state.reject``, ``RunState.to_json`` -> ``RunState.from_json`` in a **second process** with a
new gateway connection), the model replaced by the SDK's ``agents.testing.ScriptedModel``.
Real parts throughout: the gateway with its embedded sidecar and the SDK upstream of
tests/mcp_upstreams/server.py; side effects counted in the upstream's ``effects.jsonl``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from tests.mcp_agents_app import RUN, agent, gateway, outputs
from tests.mcp_env import ROOT, http_gateway
from tests.test_mcp_gateway import TOKEN, Env
from tests.test_mcp_gateway_more import imported_once


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test here starts from the same import: taken once for the module (:func:`imported_once`)."""
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


@pytest.fixture(name="env")
def env_fixture(pins: Path) -> Any:
    """tests/test_mcp_gateway.py's folder (policies: ``remove`` needs callgate's confirmation,
    notes with "forbidden" are denied), its upstreams, and the tools pinned: a copy of
    :func:`pins` (a pin names no path or port of its folder), instead of the same
    ``callgate mcp import`` per test. Each test still has its own folder, stores and upstreams."""
    e = Env()
    shutil.copytree(pins, e.base / "policies" / "tools", dirs_exist_ok=True)
    e.start_http_upstream()
    yield e
    e.close()


def invocations(e: Env, tool: str) -> list[tuple[str, str]]:
    """(invocation id, state) of the gateway's invocations of ``tool`` (read-only look)."""
    path = e.base / "var" / "cg.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return [tuple(r) for r in db.execute(
            "SELECT invocation_id, state FROM invocations WHERE tool_name = ?", (tool,)
        ).fetchall()]  # fmt: skip
    finally:
        db.close()


async def first_run(e: Env, calls: list[Any]) -> tuple[Any, dict[str, str]]:
    """One run of the app until it ends or is interrupted: the result and the tool outputs."""
    async with gateway(e.config, e.base) as server:
        model = ScriptedModel([calls, [assistant_message("done")]])
        result = await Runner.run(agent(server, model), "keep a note", run_config=RUN)
        return result, outputs(result)


def resume_elsewhere(e: Env, result: Any, decision: str) -> dict[str, Any]:
    """``to_json`` here, ``from_json`` + the decision + resume in a new Python process."""
    state_file = e.base / "run-state.json"
    state_file.write_text(json.dumps(result.to_state().to_json()))
    p = subprocess.run(
        [sys.executable, "-m", "tests.mcp_agents_app", "resume", str(state_file), str(e.config), str(e.base), decision],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-4000:]
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.timeout(240)
def test_a_read_runs_without_asking_and_the_model_gets_the_marked_result(env: Env) -> None:
    result, out = asyncio.run(first_run(env, [function_call("up__lookup", {"city": "Paris"}, call_id="r1")]))
    assert result.interruptions == []
    assert "Paris: sunny" in out["r1"]
    assert result.final_output == "done"


@pytest.mark.timeout(240)
def test_sdk_approval_given_in_another_process_runs_the_write_once(env: Env) -> None:
    calls = [
        function_call("up__lookup", {"city": "Oslo"}, call_id="r1"),
        function_call("up__write_note", {"text": "buy milk"}, call_id="w1"),
    ]
    result, out = asyncio.run(first_run(env, calls))
    assert [i.call_id for i in result.interruptions] == ["w1"]
    assert "Oslo: sunny" in out["r1"]  # the read beside it ran at once
    assert env.effects() == [] and invocations(env, "up.write_note") == []  # nothing proposed yet
    resumed = resume_elsewhere(env, result, "approve")
    assert resumed["decided"] == ["w1"] and resumed["final"] == "done"
    assert [x.get("text") for x in env.effects()] == ["buy milk"]  # once
    assert [s for _, s in invocations(env, "up.write_note")] == ["OBSERVED"]


@pytest.mark.timeout(240)
def test_sdk_rejection_in_another_process_never_reaches_the_gateway(env: Env) -> None:
    result, _ = asyncio.run(first_run(env, [function_call("up__write_note", {"text": "x"}, call_id="w1")]))
    resumed = resume_elsewhere(env, result, "reject")
    assert resumed["decided"] == ["w1"] and "w1" in resumed["outputs"]
    assert env.effects() == [] and invocations(env, "up.write_note") == []


@pytest.mark.timeout(240)
def test_a_call_callgate_denies_after_the_sdks_approval_never_runs(env: Env) -> None:
    result, _ = asyncio.run(
        first_run(env, [function_call("up__write_note", {"text": "forbidden"}, call_id="w1")])
    )
    resumed = resume_elsewhere(env, result, "approve")
    assert "policy_forbid" in resumed["outputs"]["w1"], resumed
    assert env.effects() == []


@pytest.mark.timeout(240)
def test_a_call_needing_callgates_confirmation_is_refused_to_this_client_and_left_parked_nowhere(
    env: Env,
) -> None:
    """The SDK's client answers no elicitation: callgate's own confirmation cannot be asked, so
    the SDK user's approval is not taken for it; the model is told, nothing runs, and the
    invocation is not left waiting for a confirmation nobody can give."""
    result, _ = asyncio.run(first_run(env, [function_call("up__remove", {"name": "n1"}, call_id="d1")]))
    resumed = resume_elsewhere(env, result, "approve")
    assert "elicitation_unsupported" in resumed["outputs"]["d1"], resumed
    assert env.effects() == []
    assert [s for _, s in invocations(env, "up.remove")] == ["CANCELLED_BEFORE_COMMIT"]


@pytest.mark.timeout(300)
def test_one_saved_state_resumed_twice_with_the_call_id_as_key_writes_once(env: Env) -> None:
    """A state approved and resumed in two processes (a worker that crashed after sending, then
    a second one): with the SDK's ``tool_meta_resolver`` sending the model's call id as the
    idempotency key, the second resume is answered with the first call's result; one write."""
    result, _ = asyncio.run(
        first_run(env, [function_call("up__write_note", {"text": "pay rent"}, call_id="w7")])
    )
    first = resume_elsewhere(env, result, "approve+keyed")
    second = resume_elsewhere(env, result, "approve+keyed")
    assert [x.get("text") for x in env.effects()] == ["pay rent"]  # one side effect
    assert "noted: pay rent" in first["outputs"]["w7"]
    assert second["outputs"]["w7"] == first["outputs"]["w7"]  # the replay answers the same
    assert len(invocations(env, "up.write_note")) == 1


@pytest.mark.timeout(300)
def test_over_streamable_http_sdk_approval_in_another_process_runs_the_write_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same application with the SDK's ``MCPServerStreamableHttp`` (the 2026-07-28 protocol
    it negotiates: no session) against one ``callgate mcp serve --transport http``: interrupted
    here, approved and resumed in another process; the write runs once, callgate's confirmation
    is refused to this client as over stdio."""
    with http_gateway(env) as port:
        monkeypatch.setenv("CALLGATE_TEST_MCP_URL", f"http://127.0.0.1:{port}/mcp")
        monkeypatch.setenv("CALLGATE_TEST_MCP_TOKEN", TOKEN)
        calls = [
            function_call("up__write_note", {"text": "over http"}, call_id="w1"),
            function_call("up__remove", {"name": "n1"}, call_id="d1"),
        ]
        result, _ = asyncio.run(first_run(env, calls))
        assert sorted(i.call_id for i in result.interruptions) == ["d1", "w1"]
        resumed = resume_elsewhere(env, result, "approve")
    assert [x.get("text") for x in env.effects()] == ["over http"]
    assert "noted: over http" in resumed["outputs"]["w1"]
    assert "elicitation_unsupported" in resumed["outputs"]["d1"], resumed
    assert [s for _, s in invocations(env, "up.remove")] == ["CANCELLED_BEFORE_COMMIT"]
