"""The MCP gateway's open items of issue 11, end to end with the same real parts as
tests/test_mcp_gateway.py (the official SDK client over stdio <-> ``callgate mcp serve`` with its
embedded sidecar <-> the SDK upstream of tests/mcp_upstreams/server.py): structuredContent
checked by the client against the outputSchema, ``notifications/cancelled`` before and after the
commit boundary, a live ``notifications/tools/list_changed``, unreachable upstreams, and the
async client's error codes. The sidecar's trail is read through the public ``AsyncSession``
API (GetInvocation) on the gateway's own session."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from callgate.client import AsyncClient, CallgateClientError
from callgate.client.aio import AsyncSession
from callgate.gen.v1 import callgate_pb2 as pb
from tests.mcp_clients import result_text, run_ts
from tests.mcp_env import (
    ROOT,
    accept,
    cli,
    payload,
    permit_all_folder,
    run,
    serve_params,
    stdio_gateway,
    text_of,
)
from tests.ports import free_port
from tests.test_mcp_gateway import CANARY, Env, write_policies  # the module's fixtures


def imported_once(out: Path) -> Path:
    """``out``: ``policies/tools`` of one ``callgate mcp import --accept-proposed`` of a fresh
    ``Env`` of tests/test_mcp_gateway.py (the stdio upstreams and the HTTP one). A pin names no
    path or port of its folder (callgate/mcp/pins.py) and fresh upstreams list the same
    definitions, so a copy of it is what each fresh ``Env``'s own import would write."""
    e = Env()
    try:
        e.start_http_upstream()
        r = e.import_all()
        assert r.returncode == 0, r.stdout + r.stderr
        shutil.copytree(e.base / "policies" / "tools", out)
    finally:
        e.close()
        shutil.rmtree(e.base, ignore_errors=True)
    return out


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test here starts from the same import: taken once for the module (:func:`imported_once`)."""
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


@pytest.fixture(name="env")
def env_fixture(pins: Path) -> Any:
    """The same as tests/test_mcp_gateway.py's ``env`` (config, policies and the HTTP upstream),
    its upstreams pinned (a copy of :func:`pins`, instead of the same ``import_all`` per test)."""
    e = Env()
    shutil.copytree(pins, tools_dir(e), dirs_exist_ok=True)
    e.start_http_upstream()
    yield e
    e.close()


def tools_dir(e: Env) -> Path:
    return e.base / "policies" / "tools"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def wait_until(check: Any, timeout: float = 20.0, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.1)


def invocations(e: Env, tool: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(invocation id, session id, raw arguments) of the gateway's invocations of ``tool``, read
    only to learn the ids (the trail itself is read through the public client API)."""
    db = sqlite3.connect(f"file:{e.base / 'var' / 'cg.db'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT invocation_id, session_id, raw_arguments FROM invocations WHERE tool_name = ?", (tool,)
        ).fetchall()
    finally:
        db.close()
    return [(r[0], r[1], json.loads(bytes(r[2]))) for r in rows]


async def trail(e: Env, tool: str, settled: Any) -> tuple[pb.Invocation, list[str]]:
    """The one invocation of ``tool`` and its event kinds, once ``settled(invocation)`` holds."""
    rows = await wait_until(lambda: invocations(e, tool), what=f"an invocation of {tool}")
    assert len(rows) == 1, rows
    invocation_id, session_id, _ = rows[0]
    async with AsyncClient(f"unix:{e.base / 'run' / 'a.sock'}") as client:
        s = AsyncSession(client, session_id)
        end = time.monotonic() + 20
        while True:
            inv = await s.invocation(invocation_id)
            if settled(inv) or time.monotonic() > end:
                break
            await anyio.sleep(0.1)
        kinds = [ev.kind for ev in await s.events(invocation_id)]
    return inv, kinds


def state(inv: pb.Invocation) -> str:
    return pb.State.Name(inv.state)


# ---------------------------------------------------------------------------------- 1. structured
@pytest.mark.timeout(200)
def test_structured_content_checked_by_the_client_and_schema_refusal(env: Env) -> None:
    spec = tools_dir(env) / "up.forecast@v1.json"
    doc = json.loads(spec.read_text())
    assert doc["output_schema"]["properties"]["temp_c"]["type"] == "integer"  # from outputSchema
    doc["output_schema"]["properties"]["temp_c"]["maximum"] = 60  # the author tightens it
    spec.write_text(json.dumps(doc))

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            listed = {t.name: t for t in (await s.list_tools()).tools}
            assert listed["up__forecast"].output_schema is not None
            assert listed["up__forecast"].output_schema["properties"]["temp_c"]["maximum"] == 60
            # conforming: the SDK client validates structuredContent against the outputSchema
            # inside call_tool (it raises on a mismatch), the marked envelope is the text beside it
            r = await s.call_tool("up__forecast", {"city": "Paris"})
            assert not r.is_error, text_of(r)
            assert r.structured_content == {"city": "Paris", "temp_c": 18}
            await s.validate_tool_result("up__forecast", r)
            msg = payload(r)
            assert msg["status"] == "ok" and "⟦untrusted:" in json.dumps(msg["data"], ensure_ascii=False)
            # not conforming to the ToolSpec's output_schema: refused, no structuredContent
            r = await s.call_tool("up__forecast", {"city": "Venus"})
            assert r.is_error and r.structured_content is None
            assert "result_schema_invalid" in text_of(r), text_of(r)
            # the refused value is not shown (ids are random hex and may contain "99": look at
            # everything but them)
            shown = {k: v for k, v in payload(r).items() if k not in ("invocation_id", "nonce")}
            assert "99" not in json.dumps(shown), shown

    run(go())


@pytest.mark.timeout(200)
def test_structured_content_omitted_the_client_gets_the_marked_text_only(env: Env) -> None:
    """``[mcp] structured_content = "omit"``: for clients that give ``structuredContent`` to the
    model (pydantic-ai), no ``outputSchema`` is listed and no result carries it, first answer or
    replay; the data reaches the client only inside the marked text."""
    text = env.config.read_text()
    assert "\n[mcp]\n" in text
    env.config.write_text(text.replace("\n[mcp]\n", '\n[mcp]\nstructured_content = "omit"\n', 1))
    spec = tools_dir(env) / "up.forecast@v1.json"
    doc = json.loads(spec.read_text())
    doc["output_schema"]["properties"]["temp_c"]["maximum"] = 60  # the author tightens it
    spec.write_text(json.dumps(doc))

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            listed = {t.name: t for t in (await s.list_tools()).tools}
            assert listed["up__forecast"].output_schema is None
            meta = {"io.callgate/idempotency-key": "k-forecast-omit"}
            first = await s.call_tool("up__forecast", {"city": "Paris"}, meta=meta)
            again = await s.call_tool("up__forecast", {"city": "Paris"}, meta=meta)  # a replay
            for r in (first, again):
                assert not r.is_error and r.structured_content is None, text_of(r)
                data = payload(r)["data"]  # the upstream's text marked, its numbers as numbers
                assert re.fullmatch(r"⟦untrusted:(\w+)⟧Paris⟦/untrusted:\1⟧", data["city"]), data
                assert data["temp_c"] == 18, data
            assert text_of(first) == text_of(again)
            # still validated against the ToolSpec's output_schema: a non-conforming result is refused
            r = await s.call_tool("up__forecast", {"city": "Venus"})
            assert r.is_error and "result_schema_invalid" in text_of(r), text_of(r)

    run(go())


# ---------------------------------------------------------------------------------- 2. cancel
@pytest.mark.timeout(200)
def test_cancel_before_the_boundary_cancels_the_invocation(env: Env) -> None:
    """notifications/cancelled while the call waits for the user's confirmation (before
    BeginAttempt): CANCELLED_BEFORE_COMMIT, the upstream never called."""
    asked = anyio.Event()

    async def never_answers(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        await anyio.sleep(120)
        return types.ElicitResult(action="decline")

    async def go() -> None:
        async with stdio_gateway(env, never_answers) as (s, _):
            await s.list_tools()
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.call_tool, "up__remove", {"name": "keep-me"})
                with anyio.fail_after(30):
                    await asked.wait()
                tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            inv, kinds = await trail(env, "up.remove", lambda i: state(i) == "CANCELLED_BEFORE_COMMIT")
            assert state(inv) == "CANCELLED_BEFORE_COMMIT", (state(inv), kinds)
            assert "confirmation_requested" in kinds and "cancelled" in kinds
            assert "attempt_started" not in kinds and not inv.cancel_requested_at

    run(go())
    assert not [x for x in env.effects() if x["tool"] == "remove"]


@pytest.mark.timeout(200)
def test_cancel_while_the_gateway_waits_on_the_sidecar_ends_that_call_only(env: Env) -> None:
    """notifications/cancelled while the gateway's gRPC call to the sidecar is out (here the
    propose: an external sidecar, stopped with SIGSTOP so the call is surely in flight). grpc.aio
    answers a cancelled await with a CancelledError of its own, which the SDK's per-request
    cancel scope did not take for its own: it escaped and stopped the whole gateway (exit 0,
    every later request "Connection closed"). Now only that call ends; the next is answered."""
    text = env.config.read_text()
    env.config.write_text(text.replace("[mcp]\n", '[mcp]\nsidecar = "external"\n', 1))
    log = env.base / "sidecar.log"
    with log.open("wb") as err:
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "callgate", "serve", "--config", str(env.config)],
            cwd=env.base, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    env.procs.append(sidecar)
    end = time.monotonic() + 90
    while not (env.base / "run" / "a.sock").exists():
        assert sidecar.poll() is None and time.monotonic() < end, log.read_text()
        time.sleep(0.1)

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            await s.list_tools()
            async with anyio.create_task_group() as tg:
                sidecar.send_signal(signal.SIGSTOP)
                try:
                    tg.start_soon(s.call_tool, "up__lookup", {"city": "Oslo"})
                    await anyio.sleep(1.0)  # the gateway waits on the stopped sidecar
                    tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
                finally:
                    sidecar.send_signal(signal.SIGCONT)
            with anyio.fail_after(60):
                r = await s.call_tool("up__lookup", {"city": "Bergen"})
            assert not r.is_error and "Bergen: sunny" in text_of(r), text_of(r)

    run(go())


@pytest.mark.node
@pytest.mark.timeout(200)
def test_the_typescript_client_aborting_a_call_ends_that_call_only(env: Env) -> None:
    """The TypeScript SDK client aborts a call at its first progress notification (the gateway's
    "proposing": its gRPC call to the embedded sidecar is out, or about to be; the harness's
    ``abort_on_progress``): that call ends, the next one on the connection is answered. Before,
    an abort landing while the gRPC call was out stopped the gateway ("Connection closed")."""
    ts = run_ts(
        {
            "server": serve_params(env),
            "steps": [
                {"op": "list_tools"},
                {
                    "op": "call",
                    "name": "up__hang",
                    "arguments": {"seconds": 30},
                    "abort_on_progress": True,
                    "id": "aborted",
                },
                {"op": "sleep", "ms": 1000},
                {"op": "call", "name": "up__lookup", "arguments": {"city": "Oslo"}, "id": "next"},
            ],
        }
    )
    aborted, nxt = ts.outcome("aborted"), ts.outcome("next")
    assert aborted["event"] == "error" and "aborted by the scenario" in aborted["message"], aborted
    assert nxt["event"] == "result" and not nxt["isError"] and "Oslo: sunny" in result_text(nxt), nxt


@pytest.mark.timeout(200)
@pytest.mark.parametrize("commit_first", [False, True], ids=["upstream-not-done", "upstream-already-wrote"])
def test_cancel_after_the_boundary_is_recorded_and_withheld(env: Env, commit_first: bool) -> None:
    """notifications/cancelled while the upstream call is out (EXECUTING): cancel_requested is
    recorded, the upstream request is cancelled (the SDK upstream sees it), the attempt is
    OUTCOME_UNKNOWN (MCP cancellation is unacknowledged), nothing reaches the client, and a
    retry replays instead of writing again."""
    calls = env.state / "calls.jsonl"
    args = {"text": "slow", "seconds": 60, "commit_first": commit_first}

    async def go() -> None:
        async with stdio_gateway(env, accept(True)) as (s, _):
            await s.list_tools()
            got: list[types.CallToolResult] = []

            # the client names its request, so its retry under a new JSON-RPC id is recognised
            meta = {"io.callgate/request-id": f"slow-{commit_first}"}

            async def call() -> None:
                got.append(await s.call_tool("up__slow_note", args, meta=meta))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await wait_until(lambda: lines(calls), 30, "the upstream to start")
                tg.cancel_scope.cancel()
            assert got == []  # the cancelled request is never answered
            await wait_until(
                lambda: [c for c in lines(calls) if c["event"] == "cancelled"], 20, "the upstream's cancel"
            )
            inv, kinds = await trail(env, "up.slow_note", lambda i: state(i) == "OUTCOME_UNKNOWN")
            assert state(inv) == "OUTCOME_UNKNOWN", (state(inv), kinds)
            assert inv.cancel_requested_at
            assert (
                kinds.index("attempt_started")
                < kinds.index("cancel_requested")
                < kinds.index("outcome_unknown")
            )
            # a retry of the same request replays the recorded invocation: no second side
            # effect, and the withheld result is still not shown
            r = await s.call_tool("up__slow_note", args, meta=meta)
            assert r.is_error and "noted slowly" not in text_of(r), text_of(r)

    run(go())
    notes = [x for x in env.effects() if x["tool"] == "slow_note"]
    assert len(notes) == (1 if commit_first else 0)
    assert len([c for c in lines(calls) if c["event"] == "started"]) == 1


# ---------------------------------------------------------------------------------- 3. list_changed
@pytest.mark.timeout(250)
def test_live_list_changed_hides_and_refuses_until_repinned(env: Env) -> None:

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            names = {t.name for t in (await s.list_tools()).tools}
            assert "up__lookup" in names
            assert not (await s.call_tool("up__lookup", {"city": "Paris"})).is_error
            # the running upstream changes lookup and sends notifications/tools/list_changed
            assert not (await s.call_tool("up__rug_pull", {})).is_error

            async def hidden() -> bool:
                return "up__lookup" not in {t.name for t in (await s.list_tools()).tools}

            end = time.monotonic() + 20
            while not await hidden():
                assert time.monotonic() < end, "up__lookup still listed after list_changed"
                await anyio.sleep(0.2)
            # (another city than before)
            r = await s.call_tool("up__lookup", {"city": "Rome"})
            assert r.is_error and payload(r)["code"] == "upstream_definition_changed"
            assert not (await s.call_tool("up__write_note", {"text": "still fine"})).is_error
            # an operator reviews and re-pins (a changed definition: --accept-changes): calls run again
            repin = cli(env.base, "mcp", "import", "--config", str(env.config), "--upstream", "up",
                        "--accept-proposed", "--accept-changes")  # fmt: skip
            assert repin.returncode == 0, repin.stdout + repin.stderr
            end = time.monotonic() + 20
            while True:
                await s.list_tools()
                r = await s.call_tool("up__lookup", {"city": "Oslo"})
                if not r.is_error or time.monotonic() > end:
                    break
                await anyio.sleep(0.3)
            assert not r.is_error, text_of(r)

    run(go())


# ---------------------------------------------------------------------------------- 4. not reached
def add_unreachable_upstreams(e: Env) -> None:
    refused = free_port()  # nothing listens there
    with e.config.open("a") as f:
        f.write(
            '\n[[mcp.upstreams]]\nname = "dead"\ncommand = "/nonexistent/callgate-no-such-mcp-server"\n'
            "timeout_seconds = 5.0\n"
            f'\n[[mcp.upstreams]]\nname = "gone"\ntransport = "http"\nurl = "http://127.0.0.1:{refused}/mcp"\n'
            "timeout_seconds = 5.0\n"
        )
    write_policies(e.base, ("up", "web", "sec", "dead", "gone"))
    base = json.loads((tools_dir(e) / "up.write_note@v1.json").read_text())
    for server in ("dead", "gone"):
        doc = {
            **base,
            "name": f"{server}.write_note",
            "required_capabilities": [f"mcp.{server}.write_note"],
            "resource_template": f"mcp:{server}.write_note",
            "upstream": {**base["upstream"], "server": server},
        }
        (tools_dir(e) / f"{server}.write_note@v1.json").write_text(json.dumps(doc))


@pytest.mark.timeout(250)
def test_unreachable_upstream_is_not_reached_and_retry_allowed(env: Env) -> None:
    add_unreachable_upstreams(env)

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            names = {t.name for t in (await s.list_tools()).tools}
            assert "up__write_note" in names
            assert "dead__write_note" not in names and "gone__write_note" not in names  # unverifiable
            for server in ("dead", "gone"):
                t0 = time.monotonic()
                r = await s.call_tool(f"{server}__write_note", {"text": "n"})
                assert r.is_error, text_of(r)
                msg = payload(r)
                assert "upstream_unavailable" in json.dumps(msg), msg
                assert '"retryable": true' in json.dumps(msg), msg
                assert time.monotonic() - t0 < 40
                inv, kinds = await trail(
                    env, f"{server}.write_note", lambda i: state(i) == "FAILED_BEFORE_COMMIT"
                )
                assert state(inv) == "FAILED_BEFORE_COMMIT", (state(inv), kinds)
                assert "committed" not in kinds and "outcome_unknown" not in kinds
                assert "attempt_failed" in kinds
                # nothing was sent: the key was released, a retry is a new call (not a replay)
                r = await s.call_tool(f"{server}__write_note", {"text": "n"})
                assert r.is_error and "upstream_unavailable" in text_of(r)
                assert len(invocations(env, f"{server}.write_note")) == 2

    run(go())


DIES_ON_IMPORT = "from mcp.server.fastmcp import FastMCP"
"""A server written for ``mcp<2`` run with this venv's mcp 2.x: it dies at its first import."""


@pytest.mark.timeout(250)
def test_an_upstream_that_cannot_start_is_named_with_why_and_the_rest_keep_serving() -> None:
    """A command that does not exist (``typo``) and a server that dies on import (``dies``, a real
    ``mcp<2`` import under mcp 2.x), beside a working one. Before: the upstream's stderr went
    through bare (a traceback naming no upstream; the launcher's ``cannot start`` line without
    the upstream's name) and the gateway said only ``cannot list tools (ConnectionError)``, as did
    ``callgate mcp import``. Now each stderr line is logged as ``upstream NAME (stderr): ...``
    and the failure names the upstream, why, and its stderr's last lines; the client sees the
    working upstream's tools and ``upstream_unavailable`` (retryable, nothing sent) for the others."""
    py, root = json.dumps(sys.executable), json.dumps(str(ROOT))
    good = f"""
[[mcp.upstreams]]
name = "up"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", "state"]
cwd = {root}
env = {{ PYTHONPATH = {root} }}
timeout_seconds = 20.0
"""
    broken = f"""
[[mcp.upstreams]]
name = "typo"
command = "callgate-no-such-mcp-server"
timeout_seconds = 20.0

[[mcp.upstreams]]
name = "dies"
command = {py}
args = ["-c", {json.dumps(DIES_ON_IMPORT)}]
timeout_seconds = 20.0
"""
    with permit_all_folder(good) as env:
        (env.base / "state").mkdir()
        env.config.write_text(env.config.read_text().replace('"state"', json.dumps(str(env.base / "state"))))
        env.import_pins(declare_rest=False)
        with env.config.open("a") as f:
            f.write(broken)
        base = json.loads((env.tools_dir / "up.lookup@v1.json").read_text())
        for server in ("typo", "dies"):  # pinned while they worked
            doc = {
                **base, "name": f"{server}.lookup", "required_capabilities": [f"mcp.{server}.lookup"],
                "resource_template": f"mcp:{server}.lookup", "upstream": {**base["upstream"], "server": server},
            }  # fmt: skip
            (env.tools_dir / f"{server}.lookup@v1.json").write_text(json.dumps(doc))

        for server, why in (
            ("typo", "cannot start 'callgate-no-such-mcp-server': No such file or directory"),
            ("dies", "ModuleNotFoundError: No module named 'mcp.server.fastmcp'"),
        ):
            r = cli(env.base, "mcp", "import", "--config", str(env.config), "--upstream", server)
            assert r.returncode == 1, r.stdout + r.stderr
            first = r.stdout.splitlines()[0]
            assert first.startswith(
                f"error: upstream {server}: cannot list tools (the process ended before answering initialize; "
                "its stderr ended with: "
            ), first  # fmt: skip
            assert why in first, first

        log_path = env.base / "gateway.log"

        async def go() -> tuple[set[str], dict[str, Any], types.CallToolResult]:
            with log_path.open("w") as log:
                params = StdioServerParameters(**serve_params(env))
                async with stdio_client(params, errlog=log) as (read, write):
                    async with ClientSession(read, write) as s:
                        await s.initialize()
                        names = {t.name for t in (await s.list_tools()).tools}
                        refused = {
                            server: payload(await s.call_tool(f"{server}__lookup", {"city": "Oslo"}))
                            for server in ("typo", "dies")
                        }
                        return names, refused, await s.call_tool("up__lookup", {"city": "Oslo"})

        names, refused, ok = run(go())
        log_text = log_path.read_text()
    assert "up__lookup" in names and not {"typo__lookup", "dies__lookup"} & names, names
    for server, msg in refused.items():
        assert msg["error"]["code"] == "upstream_unavailable" and msg["error"]["retryable"] is True, (
            server,
            msg,
        )
        assert msg["commit_status"] == "NOT_COMMITTED", msg
    assert not ok.is_error and "Oslo" in text_of(ok), text_of(ok)
    lines = log_text.splitlines()
    warned = {
        server: [x for x in lines if f"WARNING callgate.mcp: upstream {server}: cannot list tools (" in x]
        for server in ("typo", "dies")
    }
    assert any(
        "(the process ended before answering initialize; its stderr ended with: callgate mcp: cannot start "
        "'callgate-no-such-mcp-server': No such file or directory); its tools are unavailable" in x
        for x in warned["typo"]
    ), log_text[-3000:]  # fmt: skip
    assert any(
        "(the process ended before answering initialize; its stderr ended with: " in x
        and "No module named 'mcp.server.fastmcp'" in x
        for x in warned["dies"]
    ), log_text[-3000:]
    # every line the upstreams wrote is a log line naming them, none goes through bare
    tracebacks = [x for x in lines if "Traceback (most recent call last)" in x]
    assert tracebacks and all("INFO callgate.mcp: upstream dies (stderr): Traceback" in x for x in tracebacks)
    assert not [x for x in lines if x.startswith(("callgate mcp: cannot start", "ModuleNotFoundError"))]


# ---------------------------------------------------------------------------------- 5. error codes
def test_an_http_upstream_that_cannot_be_reached_is_named_by_its_url_without_secrets() -> None:
    """docs/MCP.md "Five minutes" configures an HTTP upstream; one nobody listens on was named only
    ``cannot connect (ConnectError)``. The line names the URL (scheme, host, port, path), never
    its credentials or query, which may carry a token."""
    port = free_port()
    upstream = f"""
[[mcp.upstreams]]
name = "tickets"
transport = "http"
url = "http://bob:pa55word@127.0.0.1:{port}/mcp?token=s3cret#frag"
timeout_seconds = 10.0
"""
    with permit_all_folder(upstream) as env:
        r = cli(env.base, "mcp", "import", "--config", str(env.config), "--accept-proposed")
        assert r.returncode == 1, r.stdout + r.stderr
        assert (
            f"error: upstream tickets: cannot list tools (cannot connect to http://127.0.0.1:{port}/mcp "
            "(ConnectError))" in r.stdout
        ), r.stdout
        assert not re.search("pa55word|s3cret|bob|frag", r.stdout + r.stderr), r.stdout + r.stderr


def test_async_client_errors_keep_their_code_with_the_embedded_sidecar() -> None:
    """A refusal from the embedded sidecar reaches the gateway with its code and gRPC status
    (it used to arrive as UNKNOWN: grpc.aio's AioRpcError is not a grpc.Call)."""
    import asyncio

    from callgate.client.aio import _call
    from callgate.mcp.config import load_gateway_config
    from callgate.mcp.serve import running_gateway

    e = Env()
    cfg, mcp = load_gateway_config(e.config)

    async def go() -> None:
        async with running_gateway(cfg, mcp) as gw:
            cases = [
                (pb.ReportOutcomeRequest(attempt_id="a1"), "invalid_request", "INVALID_ARGUMENT"),
                (
                    pb.ReportOutcomeRequest(attempt_id="a1", outcome=pb.OUTCOME_COMMITTED),
                    "attempt_not_found",
                    "NOT_FOUND",
                ),
            ]
            for req, code, status in cases:
                with pytest.raises(CallgateClientError) as exc:
                    await _call(gw.executor.ReportOutcome, req, 10)
                assert exc.value.code == code
                assert exc.value.grpc_code.name == status  # type: ignore[attr-defined]

    asyncio.run(asyncio.wait_for(go(), 60))


# ---------------------------------------------------------------------------------- 6. warm secrets
@pytest.mark.timeout(250)
def test_secret_upstream_kept_warm_reuses_one_process_per_secret_value(env: Env) -> None:
    """``keep_warm_seconds``: calls that redeemed the same secret share one upstream process
    (each still redeems it with its own credential); after the idle time it is gone. Without
    it (``sec``), a process per call. The secret never reaches the client either way."""
    text = env.config.read_text().replace(
        'tools = ["sec.echo_env", "web.echo_env"]',
        'tools = ["sec.echo_env", "web.echo_env", "warm.echo_env"]',
    )
    sec = text[text.index('name = "sec"') : text.index('[[mcp.upstreams]]\nname = "web"')]
    text += (
        "\n[[mcp.upstreams]]\n" + sec.replace('name = "sec"', 'name = "warm"') + "keep_warm_seconds = 5.0\n"
    )
    env.config.write_text(text)
    write_policies(env.base, ("up", "web", "sec", "warm"))
    doc = json.loads((tools_dir(env) / "sec.echo_env@v1.json").read_text())
    doc.update(
        name="warm.echo_env",
        required_capabilities=["mcp.warm.echo_env"],
        resource_template="mcp:warm.echo_env",
        upstream={**doc["upstream"], "server": "warm"},
    )
    (tools_dir(env) / "warm.echo_env@v1.json").write_text(json.dumps(doc))
    visible: list[str] = []
    took: dict[str, list[float]] = {"sec": [], "warm": []}

    async def go() -> None:
        async with stdio_gateway(env) as (s, _):
            await s.list_tools()
            # The warm calls come one after another: a per-call process in between takes seconds on a
            # loaded box, which could outlast keep_warm_seconds and close the warm one.
            for tool in ("sec", "sec", "warm", "warm", "warm"):
                t0 = time.monotonic()
                r = await s.call_tool(
                    f"{tool}__echo_env", {}, meta={"io.callgate/idempotency-key": f"k{time.time_ns()}"}
                )
                took[tool].append(time.monotonic() - t0)
                visible.append(r.model_dump_json())
                assert not r.is_error, text_of(r)
            await anyio.sleep(6.0)  # idle past keep_warm_seconds: the warm process is closed
            r = await s.call_tool("warm__echo_env", {}, meta={"io.callgate/idempotency-key": "k-after-idle"})
            visible.append(r.model_dump_json())
            assert not r.is_error, text_of(r)

    run(go())
    seen = env.seen()
    assert [x["canary_env"] for x in seen] == [CANARY] * 6
    pids = [x["pid"] for x in seen]
    sec_pids, warm_pids = [pids[0], pids[1]], [pids[2], pids[3], pids[4]]
    assert sec_pids[0] != sec_pids[1]  # a process per call
    assert len(set(warm_pids)) == 1  # one warm process for the three calls
    assert pids[5] != warm_pids[0]  # reopened after the idle time
    assert CANARY not in "\n".join(visible)
    print(f"\nper-call process: {took['sec']}, warm: {took['warm']}")
