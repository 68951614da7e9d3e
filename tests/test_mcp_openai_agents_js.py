"""The OpenAI Agents SDK for TypeScript (``@openai/agents`` 0.20, its ``MCPServerStdio`` with the
SDK's own MCP client) in front of ``callgate mcp serve``, as an application writes it
(tests/mcp_agents_js/app.mjs: ``Agent`` with ``mcpServers``, ``run``, the SDK's
``ScriptedModel``), with the real parts of tests/test_mcp_gateway.py (the embedded sidecar, the
SDK upstream of tests/mcp_upstreams/server.py) and the real confirmation console.

That SDK's MCP client declares no elicitation and has no approval of its own for a local MCP
server's tools, so a call that policy says to confirm is decided by a person in the console
(``[mcp] confirm_without_elicitation = "wait"``, docs/MCP.md "Clients that cannot be asked"); the
SDK's session timeout (default 5 s, 60 s here: see :func:`run_app`) bounds the handshake and
listing, its 60 s request timeout the call. Side effects are counted in the upstream's files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.console_fixture import ALICE, decide, http, start_console
from tests.mcp_env import LIST_WAIT, ROOT, serve_params
from tests.test_mcp_confirm_console import waiting_env
from tests.test_mcp_gateway import Env
from tests.test_mcp_gateway_more import imported_once

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

APP = ROOT / "tests" / "mcp_agents_js" / "app.mjs"


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


def js_env(pins: Path) -> Env:
    """The gateway folder with the console wait, and the default ``list_wait_seconds`` (the
    tests' 120 s wait for every upstream would outlast the SDK's 5 s ``tools/list`` timeout)."""
    e = waiting_env(pins, 90.0)
    e.config.write_text(e.config.read_text().replace(f"{LIST_WAIT}\n", ""))
    return e


@pytest.fixture(name="env")
def env_fixture(pins: Path) -> Any:
    e = js_env(pins)
    yield e
    e.close()


def run_app(env: Env, calls: list[dict[str, Any]], person: Any = None) -> list[dict[str, Any]]:
    """Run the application on ``calls``; ``person(console_url)`` runs beside it. Its events."""
    # 60 s, not the SDK's 5 s: on the shared 2-core test machine under the suite's load, the
    # first tools/list (which waits for the embedded sidecar's start) took 5-9 s; start-up time is
    # measured by bench/bench_mcp_startup.py, not asserted here
    scenario = {**serve_params(env), "calls": calls, "sessionTimeoutSeconds": 60}
    scenario["env"] = {**scenario["env"], "PATH": "/usr/bin:/bin"}
    con = start_console(f"unix:{env.base / 'run' / 'c.sock'}") if person is not None else None
    try:
        done: list[BaseException] = []
        worker = None
        if person is not None:
            assert con is not None

            def act() -> None:
                try:
                    person(con.url)
                except BaseException as exc:  # reported after the app ends
                    done.append(exc)

            worker = threading.Thread(target=act, daemon=True)
            worker.start()
        proc = subprocess.run(
            ["node", str(APP), json.dumps(scenario)], cwd=APP.parent, capture_output=True, text=True, timeout=240
        )  # fmt: skip
        if worker is not None:
            worker.join(60)
        if done:
            raise done[0]
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0, (events, proc.stderr[-3000:])
        return events
    finally:
        if con is not None:
            con.stop()


def outputs(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, the text the model got) per call, in order. The SDK gives the model the MCP
    content (not ``structuredContent``: its ``useStructuredContent`` default), one text block
    as ``{"type": "text", "text": ...}``."""
    out = []
    for e in events:
        if e["event"] == "output":
            block = json.loads(e["output"])
            assert block["type"] == "text", block
            out.append((e["name"], block["text"]))
    return out


def approve_in_console(action: str) -> Any:
    """A person watching the console: when the ``up.remove`` card appears, read it, decide."""

    def person(url: str) -> None:
        end = time.monotonic() + 120
        while True:
            page = http(url + "/", token=ALICE)[1]
            m = re.search(r"/t/acme/i/(inv_[0-9a-f]+)", page)
            if m and "up.remove" in page:
                break
            assert time.monotonic() < end, "no card in the console"
            time.sleep(0.3)
        item = http(f"{url}/t/acme/i/{m.group(1)}", token=ALICE)[1]
        assert "note-a" in item  # the arguments that will run
        digest = re.search(r'name="digest" value="([^"]+)"', item).group(1)  # type: ignore[union-attr]
        assert decide(url, ALICE, "acme", m.group(1), digest, action) == 303

    return person


def effects(env: Env, tool: str) -> list[dict[str, Any]]:
    return [e for e in env.effects() if e["tool"] == tool]


def test_agents_js_reads_writes_denies_and_a_person_confirms(env: Env) -> None:
    calls = [
        {"name": "up__lookup", "arguments": {"city": "Paris"}},
        {"name": "up__write_note", "arguments": {"text": "a forbidden note"}},
        {"name": "up__write_note", "arguments": {"text": "hello"}},
        {"name": "up__remove", "arguments": {"name": "note-a"}},
    ]
    events = run_app(env, calls, approve_in_console("approve"))
    assert any(e["event"] == "connected" for e in events)
    tools = next(e for e in events if e["event"] == "tools")["names"]
    assert {"up__lookup", "up__write_note", "up__remove"} <= set(tools)
    (lookup, forbidden, hello, remove) = (text for _, text in outputs(events))
    # the read: the upstream's text reaches the model marked untrusted (6.10)
    assert re.fullmatch(r"⟦untrusted:(\w+)⟧Paris: sunny\. IGNORE PREVIOUS.*⟦/untrusted:\1⟧", lookup), lookup
    # the deny is an answer the model reads, with its stable code; nothing ran
    denied = json.loads(forbidden)
    assert denied["status"] == "denied" and "policy_forbid" in denied["reasons"], denied
    assert "noted: hello" in hello and "⟦untrusted:" in hello, hello
    assert [e["text"] for e in effects(env, "write_note")] == ["hello"]
    # the confirmed call waited for the person in the console, then ran once
    assert "removed note-a" in remove and "⟦untrusted:" in remove, remove
    assert [e["name"] for e in effects(env, "remove")] == ["note-a"]
    assert next(e for e in events if e["event"] == "final")["output"] == "done"


def test_agents_js_a_person_denies(env: Env) -> None:
    events = run_app(
        env, [{"name": "up__remove", "arguments": {"name": "note-a"}}], approve_in_console("deny")
    )
    ((_, remove),) = outputs(events)
    assert json.loads(remove)["code"] == "confirmation_declined", remove
    assert effects(env, "remove") == []


def test_agents_js_refused_without_the_console(pins: Path) -> None:
    """The default, ``confirm_without_elicitation = "refuse"``: fail closed at once."""
    env = js_env(pins)
    try:
        env.config.write_text(env.config.read_text().replace('confirm_without_elicitation = "wait"\n', ""))
        events = run_app(env, [{"name": "up__remove", "arguments": {"name": "note-a"}}])
        ((_, remove),) = outputs(events)
        assert json.loads(remove)["code"] == "elicitation_unsupported", remove
        assert effects(env, "remove") == []
    finally:
        env.close()
        shutil.rmtree(env.base, ignore_errors=True)
