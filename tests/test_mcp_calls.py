"""The MCP gateway's call path against real processes (issue 27 items 4 and 6, the unknown tool):
``callgate mcp serve`` over stdio and streamable HTTP, driven by the official SDK client and by
raw JSON-RPC lines and bodies written by hand (the SDK client cannot send a duplicate key), with
the SDK upstream of tests/mcp_upstreams/server.py counting side effects on disk.

* No replay of a new call: two identical writes in one session both run; a retry of the same
  request (the same JSON-RPC id, or the same ``_meta`` request id) runs once; another session or
  transport never gets an earlier call's result (spec 6.8; docs/MCP.md, "Idempotency").
* Strict parse: ``arguments`` reach the sidecar's strict parser as the bytes sent, so duplicate
  keys, lone surrogates, NaN and oversize get the gRPC codes; a malformed message gets a JSON-RPC
  error, never silence (spec 6.3, 6.4 layer 1, 6.14).
* A tool that is not listed answers ``unknown_tool_version``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp_env import ROOT, accept, payload, run, stdio_gateway, text_of, wait_port
from tests.test_mcp_gateway import TOKEN, Env
from tests.test_mcp_gateway_more import imported_once

PROTOCOL = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture(scope="module")
def pins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test here starts from the same import: taken once for the module (:func:`imported_once`)."""
    return imported_once(tmp_path_factory.mktemp("pins") / "tools")


@pytest.fixture
def env(pins: Path) -> Any:
    """A fresh ``Env`` (folder, stores, state, HTTP upstream), its upstreams pinned (a copy of
    :func:`pins`, instead of the same ``import_all`` per test)."""
    e = Env()
    shutil.copytree(pins, e.base / "policies" / "tools", dirs_exist_ok=True)
    e.start_http_upstream()
    yield e
    e.close()


def notes(env: Env) -> list[str]:
    return [e["text"] for e in env.effects() if e["tool"] == "write_note"]


class RawStdio:
    """``callgate mcp serve`` over stdio, spoken to line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        if isinstance(message, dict):
            message = json.dumps(message)
        line = message if isinstance(message, bytes) else message.encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        await self.proc.stdin.drain()

    async def answer(self, request_id: Any = None, *, any_id: bool = False) -> dict[str, Any]:
        """The next response (or error) for ``request_id``; notifications are skipped."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
            assert line, "the gateway closed stdout"
            msg: dict[str, Any] = json.loads(line)
            if "method" in msg:
                continue
            if any_id or msg.get("id") == request_id:
                return msg

    async def call(self, request_id: Any, tool: str, arguments: str, meta: str = "") -> dict[str, Any]:
        """A tools/call whose ``arguments`` are the JSON text given (sent as is)."""
        extra = f', "_meta": {meta}' if meta else ""
        await self.send(
            f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "tools/call", '
            f'"params": {{"name": "{tool}", "arguments": {arguments}{extra}}}}}'
        )
        return await self.answer(request_id)


@asynccontextmanager
async def raw_stdio(env: Env) -> AsyncIterator[RawStdio]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(env.config),
        cwd=env.base, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    raw = RawStdio(proc)
    try:
        await raw.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})  # fmt: skip
        assert "result" in await raw.answer(0)
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await raw.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        assert "result" in await raw.answer("list")
        yield raw
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def tool_payload(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer's tool message content: the ``_meta`` envelope of an answer in block form
    (docs/MCP.md, "One call"), else the JSON of its text."""
    result = answer["result"]
    envelope = (result.get("_meta") or {}).get("io.callgate/result")
    value: dict[str, Any] = (
        dict(envelope) if isinstance(envelope, dict) else json.loads(result["content"][0]["text"])
    )
    value["isError"] = result.get("isError", False)
    return value


@asynccontextmanager
async def http_gateway(env: Env) -> AsyncIterator[str]:
    log = env.base / "gateway-http.log"
    with log.open("wb") as err:
        gw = subprocess.Popen(
            [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(env.config), "--transport", "http"],
            cwd=env.base, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    env.procs.append(gw)
    try:
        await asyncio.to_thread(wait_port, env.gateway_port, 60)
    except TimeoutError:
        gw.kill()
        raise AssertionError(log.read_text()) from None
    yield f"http://127.0.0.1:{env.gateway_port}/mcp"


# ------------------------------------------------------------------------- no replay of a new call
@pytest.mark.timeout(240)
def test_identical_writes_run_twice_retries_once_and_sessions_never_share(env: Env) -> None:
    async def go() -> None:
        # the SDK client: a user's second identical write is a new call and runs
        async with stdio_gateway(env, accept(True)) as (s, _):
            await s.list_tools()
            first = await s.call_tool("up__write_note", {"text": "toggle"})
            second = await s.call_tool("up__write_note", {"text": "toggle"})
            assert not first.is_error and not second.is_error, text_of(second)
            assert payload(first)["invocation_id"] != payload(second)["invocation_id"]
            # a client whose retry goes out under a new JSON-RPC id names the request in _meta
            meta = {"io.callgate/request-id": "req-7"}
            a = await s.call_tool("up__write_note", {"text": "retried"}, meta=meta)
            b = await s.call_tool("up__write_note", {"text": "retried"}, meta=meta)
            assert payload(a)["invocation_id"] == payload(b)["invocation_id"], text_of(b)
        assert notes(env) == ["toggle", "toggle", "retried"]
        # raw lines: the same JSON-RPC id again is a retry of that request: answered, not run
        async with raw_stdio(env) as raw:
            a1 = tool_payload(await raw.call(41, "up__write_note", '{"text": "once"}'))
            a2 = tool_payload(await raw.call(41, "up__write_note", '{"text": "once"}'))
            assert not a1["isError"] and not a2["isError"], a2
            assert a1["invocation_id"] == a2["invocation_id"]
            a3 = tool_payload(await raw.call("41", "up__write_note", '{"text": "once"}'))  # "41" is not 41
            assert a3["invocation_id"] != a1["invocation_id"]
            # a confirmed call, to be repeated by another session below
            await raw.send({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
                            "params": {"name": "up__remove", "arguments": {"name": "n1"}}})  # fmt: skip
            refused = tool_payload(await raw.answer(50))  # this raw client cannot be asked
            assert refused["code"] == "elicitation_unsupported"
        assert notes(env) == ["toggle", "toggle", "retried", "once", "once"]
        # another stdio session, the same JSON-RPC id and arguments as the first session's: runs
        async with raw_stdio(env) as raw:
            again = tool_payload(await raw.call(41, "up__write_note", '{"text": "once"}'))
            assert not again["isError"] and again["invocation_id"] != a1["invocation_id"]
        assert notes(env) == ["toggle", "toggle", "retried", "once", "once", "once"]
        # stdio: a confirmed remove; then over HTTP the identical call is asked again (declined)
        yes = accept(True)
        async with stdio_gateway(env, yes) as (s, _):
            await s.list_tools()
            r = await s.call_tool("up__remove", {"name": "n2"})
            assert not r.is_error, text_of(r)
        no = accept(False)
        async with http_gateway(env) as url:
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
                async with streamable_http_client(url, http_client=http) as (read, write):
                    async with ClientSession(read, write, elicitation_callback=no) as s:
                        await s.initialize()
                        await s.list_tools()
                        r = await s.call_tool("up__remove", {"name": "n2"})
                        assert r.is_error and payload(r)["code"] == "confirmation_declined", text_of(r)
                        assert len(no.asked) == 1  # type: ignore[attr-defined]

    run(go(), 220)
    assert [e["name"] for e in env.effects() if e["tool"] == "remove"] == ["n2"]


# ------------------------------------------------------------------------- strict parse, unknown tool
GRPC_CODES = {
    '{"text": "a", "text": "b"}': "duplicate_key",
    '{"text": "a", "n": NaN}': "non_finite_number",
    '{"text": "\\ud800"}': "lone_surrogate",
    '{"text": "a", "n": 1e400}': "number_overflow",
    '{"text": "a", "n": 100.0000000000000000001}': "number_overflow",
    '{"text": "' + "x" * 70000 + '"}': "too_large",
    '["text"]': "not_an_object",
}


@pytest.mark.timeout(200)
def test_stdio_arguments_reach_the_strict_parser_as_bytes(env: Env) -> None:
    async def go() -> None:
        async with raw_stdio(env) as raw:
            for i, (arguments, code) in enumerate(GRPC_CODES.items()):
                got = tool_payload(await raw.call(100 + i, "up__write_note", arguments))
                assert got["isError"] and got["status"] == "rejected" and got["code"] == code, (code, got)
            # the envelope: a duplicate key outside the arguments is a JSON-RPC parse error
            await raw.send('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", '
                           '"params": {"name": "up__write_note", "name": "up__remove", "arguments": {"text": "x"}}}')  # fmt: skip
            err = await raw.answer(7)
            assert err["error"]["code"] == -32700 and err["error"]["data"]["code"] == "duplicate_key", err
            await raw.send('{"jsonrpc": "2.0", "id": 8, "id": 9, "method": "tools/list"}')
            err = await raw.answer(any_id=True)
            assert err["id"] is None and err["error"]["data"]["code"] == "duplicate_key", err
            await raw.send("this is not json")
            err = await raw.answer(any_id=True)
            assert err["id"] is None and err["error"]["code"] == -32700, err
            await raw.send('{"jsonrpc": "2.0", "id": 10, "method": 5}')
            err = await raw.answer(10)
            assert err["error"]["code"] == -32600, err
            # an unlisted tool: the gRPC code for a tool outside the shown set
            got = tool_payload(await raw.call(11, "up__no_such_tool", "{}"))
            assert got["isError"] and got["code"] == "unknown_tool_version", got
            # still serving, and a sound call runs
            ok = tool_payload(await raw.call(12, "up__write_note", '{"text": "sound"}'))
            assert not ok["isError"], ok

    run(go(), 180)
    assert notes(env) == ["sound"]


@pytest.mark.timeout(200)
def test_http_bodies_reach_the_strict_parser_as_bytes(env: Env) -> None:
    async def go() -> None:
        async with http_gateway(env) as url:
            auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
            async with httpx2.AsyncClient(headers=auth, timeout=30) as http:
                init = await http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})  # fmt: skip
                assert init.status_code == 200, init.text
                session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
                await http.post(
                    url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
                )

                async def post(body: str) -> tuple[int, dict[str, Any]]:
                    r = await http.post(url, content=body.encode(), headers=session)
                    text = r.text
                    if text.startswith("event:") or "\ndata:" in text or text.startswith("data:"):
                        text = next(
                            ln[5:] for ln in text.splitlines() if ln.startswith("data:") and '"id"' in ln
                        )
                    return r.status_code, json.loads(text)

                assert (await post('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'))[0] == 200
                for i, (arguments, code) in enumerate(GRPC_CODES.items()):
                    status, msg = await post(
                        f'{{"jsonrpc": "2.0", "id": {100 + i}, "method": "tools/call", '
                        f'"params": {{"name": "up__write_note", "arguments": {arguments}}}}}'
                    )
                    got = tool_payload(msg)
                    assert status == 200 and got["code"] == code, (code, status, got)
                status, msg = await post('{"jsonrpc": "2.0", "id": 7, "id": 8, "method": "tools/list"}')
                assert status == 400 and msg["error"]["data"]["code"] == "duplicate_key", msg
                status, msg = await post(
                    '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", '
                    '"params": {"name": "up__no_such_tool", "arguments": {}}}'
                )
                assert tool_payload(msg)["code"] == "unknown_tool_version", msg

    run(go(), 180)
    assert notes(env) == []


def test_screen_cuts_the_arguments_out_exactly_and_judges_the_rest() -> None:
    from callgate.mcp.wire import screen

    def call(arguments: str, extra: str = "") -> bytes:
        return (
            f'{{"jsonrpc": "2.0", "id": 5, "method": "tools/call", '
            f'"params": {{"name": "t", "arguments": {arguments}{extra}}}}}'
        ).encode()

    dup = ' {"a" : 1,\n "a": [2, {"b": "\\u00e9"}]} '
    s = screen(call(dup))
    assert s.error is None and s.call is not None and s.call.request_id == 5
    assert s.call.arguments == dup.strip().encode()  # the bytes as sent, for the strict parser
    assert s.forward == call(dup)  # the SDK decodes it: it gets the message unchanged
    s = screen(call('{"a": "\\ud800"}'))  # the SDK cannot decode a lone surrogate
    assert s.call is not None and s.call.arguments == b'{"a": "\\ud800"}' and s.forward == call("{}")
    s = screen(call('{"a": 1}', ', "name": "u"'))  # a duplicate outside the arguments
    assert s.forward is None and s.error is not None and s.error.id == 5
    assert s.error.error.code == -32700 and s.error.error.data == {"code": "duplicate_key"}
    s = screen(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]')  # a batch
    assert s.error is not None and s.error.error.code == -32600
    s = screen(b'{"jsonrpc": "2.0", "id": 1, "result": {"a": 1, "a": 2}}')  # a response: id not ours
    assert s.error is not None and s.error.id is None
    s = screen(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t"}}')
    assert s.error is None and s.call is not None and s.call.arguments is None
