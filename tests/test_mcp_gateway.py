"""The MCP gateway end to end with real parts: the official MCP Python SDK client (over stdio to
``callgate mcp serve``, and over streamable HTTP with a bearer token) <-> the gateway (embedded
sidecar, Cedar policies written here) <-> a real upstream MCP server written with the SDK
(tests/mcp_upstreams/server.py) over stdio and over HTTP. Side effects are counted in files."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests import mcp_env
from tests.conftest import short_tmpdir
from tests.mcp_env import (
    LIST_WAIT,
    ROOT,
    accept,
    cli,
    config_head,
    payload,
    run,
    stdio_gateway,
    terminate,
    text_of,
    wait_port,
)
from tests.ports import free_ports

CANARY = "canary-5ecret-7d1f0c2a9b"
TOKEN = "tok-alice-8c1e5f-Vx3qL9wZ2mR7tK4p"  # 16+ bytes of entropy (a weak one is refused)

ACTIONS = {
    "lookup": "city: String",
    "write_note": "text: String",
    "remove": "name: String",
    "hang": "seconds: Long",
    "crash": "",
    "echo_env": "",
    "rug_pull": "",
    "forecast": "city: String",
    "slow_note": "text: String, seconds: Long, commit_first: Bool",
}
POLICIES = """
@id("mcp-permit")
permit (principal, action, resource) when { principal.tenant == context.tenant };

@id("no-forbidden-notes")
forbid (principal, action in [Action::"mcp.up.write_note", Action::"mcp.web.write_note"], resource)
when { context.args.text like "*forbidden*" };

@id("remove-needs-user")
@confirm("removing a note needs the user's confirmation")
permit (principal, action in [Action::"mcp.up.remove", Action::"mcp.web.remove"], resource)
when { principal.tenant == context.tenant };
"""


def write_policies(base: Path, upstreams: tuple[str, ...] = ("up", "web", "sec")) -> None:
    reads = ("lookup", "hang", "crash", "echo_env", "rug_pull", "forecast")
    actions = {
        up: {tool: ("read" if tool in reads else "create", args) for tool, args in ACTIONS.items()}
        for up in upstreams
    }
    mcp_env.write_policies(base, actions, POLICIES)


def write_config(base: Path, state: Path, http_port: int, gateway_port: int) -> Path:
    (base / "canary.txt").write_text(CANARY + "\n")
    (base / "tokens.json").write_text(json.dumps({TOKEN: "alice"}))
    py = json.dumps(sys.executable)
    root = json.dumps(str(ROOT))
    st = json.dumps(str(state))
    cfg = (
        config_head(policy="watch_interval_ms = 200")
        + f"""
[[secrets]]
name = "canary"
file = "canary.txt"
tools = ["sec.echo_env", "web.echo_env"]

[mcp]
elicitation_timeout_seconds = 20.0
{LIST_WAIT}
[mcp.identity]
tenant = "acme"
user = "alice"
[mcp.http]
tenant = "acme"
tokens_file = "tokens.json"
listen = "127.0.0.1:{gateway_port}"

[[mcp.upstreams]]
name = "up"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]
cwd = {root}
env = {{ PYTHONPATH = {root} }}
timeout_seconds = 20.0

[[mcp.upstreams]]
name = "sec"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]
cwd = {root}
env = {{ PYTHONPATH = {root}, UPSTREAM_CANARY = {{ secret = "canary" }} }}
timeout_seconds = 20.0

[[mcp.upstreams]]
name = "web"
transport = "http"
url = "http://127.0.0.1:{http_port}/mcp"
headers = {{ X-Upstream-Key = {{ secret = "canary" }} }}
timeout_seconds = 20.0
"""
    )
    path = base / "callgate.toml"
    path.write_text(cfg)
    return path


class Env:
    """A temp folder with policies, config, a state dir and a running HTTP upstream."""

    def __init__(self) -> None:
        self.base = short_tmpdir()
        self.state = self.base / "state"
        self.state.mkdir()
        self.http_port, self.gateway_port = free_ports(2)
        write_policies(self.base)
        self.config = write_config(self.base, self.state, self.http_port, self.gateway_port)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_http_upstream(self) -> None:
        p = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_upstreams.server", "--state", str(self.state), "--http", str(self.http_port)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(p)
        wait_port(self.http_port)

    def effects(self) -> list[dict[str, Any]]:
        f = self.state / "effects.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    def seen(self) -> list[dict[str, Any]]:
        f = self.state / "seen.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    def import_all(self) -> subprocess.CompletedProcess[str]:
        return cli(self.base, "mcp", "import", "--config", str(self.config), "--accept-proposed")

    def close(self) -> None:
        for p in self.procs:
            terminate(p)


@pytest.fixture
def env() -> Any:
    e = Env()
    e.start_http_upstream()
    yield e
    e.close()


# ---------------------------------------------------------------------------------- import / check
@pytest.mark.timeout(200)
def test_import_needs_confirmed_side_effects_then_pins_and_check_matches(env: Env) -> None:
    r = cli(env.base, "mcp", "import", "--config", str(env.config), "--upstream", "up")
    assert r.returncode == 1
    assert "up.write_note (proposed: create)" in r.stdout and "up.remove (proposed: modify)" in r.stdout
    assert "up.lookup" not in r.stdout  # read-only hinted: no confirmation needed
    assert not list((env.base / "policies" / "tools").glob("*.json")), "nothing written"
    r = cli(
        env.base, "mcp", "import", "--config", str(env.config), "--upstream", "up",
        "--side-effect", "up.write_note=create", "--side-effect", "remove=delete",
        "--side-effect", "up.slow_note=create",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((env.base / "policies" / "tools" / "up.remove@v1.json").read_text())
    assert doc["side_effect_class"] == "delete"
    assert doc["upstream"]["server"] == "up" and doc["upstream"]["tool"] == "remove"
    assert len(doc["upstream"]["definition_sha256"]) == 64
    assert doc["input_schema"]["properties"]["name"]["type"] == "string"
    assert doc["required_capabilities"] == ["mcp.up.remove"]
    lookup = json.loads((env.base / "policies" / "tools" / "up.lookup@v1.json").read_text())
    assert lookup["side_effect_class"] == "read_only"
    r = cli(env.base, "check", "--config", str(env.config))  # the sidecar loads them
    assert r.returncode == 0, r.stdout
    r = env.import_all()
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli(env.base, "mcp", "check", "--config", str(env.config))
    assert r.returncode == 0 and "27 pins match" in r.stdout, r.stdout + r.stderr
    (env.state / "variant").write_text("b")  # stdio upstreams start with another definition
    r = cli(env.base, "mcp", "check", "--config", str(env.config))
    assert r.returncode == 1
    assert "changed up.lookup (upstream up tool lookup)" in r.stdout
    assert "changed sec.lookup" in r.stdout and "web.lookup" not in r.stdout  # web still runs "a"


# ---------------------------------------------------------------------------------- stdio flows
@pytest.mark.timeout(280)
def test_stdio_gateway_whole_chain(env: Env) -> None:
    assert env.import_all().returncode == 0
    hang = env.base / "policies" / "tools" / "up.hang@v1.json"
    doc = json.loads(hang.read_text())
    doc["timeout_policy"] = {"timeout_ms": 1500}  # the author bounds the hang
    hang.write_text(json.dumps(doc))
    visible: list[str] = []
    yes = accept(True)

    async def go() -> None:
        async with stdio_gateway(env, yes) as (s, seen):
            listed = await s.list_tools()
            names = {t.name for t in listed.tools}
            assert {"up__lookup", "up__write_note", "up__remove", "web__echo_env", "sec__echo_env"} <= names
            assert all("." not in n for n in names)

            async def call(name: str, args: dict[str, Any], **kw: Any) -> types.CallToolResult:
                r = await s.call_tool(name, args, **kw)
                visible.append(r.model_dump_json())
                return r

            # allow: the result is the encoded untrusted-data envelope
            r = await call("up__lookup", {"city": "Paris"})
            assert not r.is_error
            msg = payload(r)
            assert msg["status"] == "ok" and msg["tool"] == "up.lookup@v1"
            assert "⟦untrusted:" in msg["data"] and "Paris: sunny" in msg["data"]
            # an identical read runs again (reads get no derived key): a new invocation
            again = payload(await call("up__lookup", {"city": "Paris"}))
            assert again["status"] == "ok" and again["invocation_id"] != msg["invocation_id"]
            # deny: never reaches the upstream
            r = await call("up__write_note", {"text": "a forbidden note"})
            assert r.is_error and payload(r)["status"] == "denied"
            # schema rejection
            r = await call("up__lookup", {"city": 42})
            assert r.is_error and payload(r)["status"] == "rejected"
            r = await call("up__lookup", {})
            assert r.is_error and payload(r)["code"] == "schema_violation", text_of(r)
            # an identical write is a new call, not a retry: it runs again (docs/MCP.md)
            first = await call("up__write_note", {"text": "hello"})
            again = await call("up__write_note", {"text": "hello"})
            assert not first.is_error and not again.is_error
            assert payload(again)["invocation_id"] != payload(first)["invocation_id"]
            # the client's own key in _meta
            key = {"io.callgate/idempotency-key": "client-key-1"}
            await call("up__write_note", {"text": "keyed"}, meta=key)
            await call("up__write_note", {"text": "keyed"}, meta=key)
            # confirm accepted via elicitation: normalized arguments and digest shown
            r = await call("up__remove", {"name": "old"})
            assert not r.is_error, text_of(r)
            assert len(yes.asked) == 1  # type: ignore[attr-defined]
            assert '"name": "old"' in yes.asked[0] and "digest: sha256:" in yes.asked[0]  # type: ignore[attr-defined]
            # the secret reaches the upstream (env of a per-call process, header over HTTP) and
            # never the client
            for tool in ("sec__echo_env", "web__echo_env"):
                r = await call(tool, {})
                assert not r.is_error, text_of(r)
                assert "[REDACTED:" in text_of(r)
            # upstream hang: bounded by the tool's timeout, OUTCOME_UNKNOWN, never retried
            progress: list[tuple[float, str | None]] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append((p, message))

            t0 = time.monotonic()
            r = await call("up__hang", {"seconds": 30}, progress_callback=on_progress)
            assert r.is_error and payload(r)["code"] == "outcome_unknown"
            assert time.monotonic() - t0 < 12
            assert any(m and m.startswith("callgate:") for _, m in progress)  # gate stages
            # forwarded from the upstream (named, neutralized), inside one increasing sequence
            assert any(m and m.startswith("upstream up") and "(sleeping)" in m for _, m in progress)
            assert [p for p, _ in progress] == sorted({p for p, _ in progress}), progress
            # upstream crash after the request was sent: OUTCOME_UNKNOWN; then it is restarted
            r = await call("up__crash", {})
            assert r.is_error and payload(r)["code"] == "outcome_unknown"
            r = await call("up__lookup", {"city": "Lyon"})
            assert not r.is_error, text_of(r)
            visible.extend(repr(n) for n in seen)

    run(go())
    effects = env.effects()
    notes = [e for e in effects if e["tool"] == "write_note"]
    assert [n["text"] for n in notes] == ["hello", "hello", "keyed"], notes  # no forbidden note
    assert [e["name"] for e in effects if e["tool"] == "remove"] == ["old"]
    assert len([e for e in effects if e["tool"] == "crash"]) == 1  # never retried
    seen = env.seen()
    assert [x["canary_env"] for x in seen] == [CANARY, ""]
    assert seen[1]["headers"].get("x-upstream-key") == CANARY
    joined = "\n".join(visible)
    assert CANARY not in joined


@pytest.mark.timeout(200)
def test_a_secret_in_the_arguments_is_masked_in_the_question(env: Env) -> None:
    """Old main put the normalized arguments in the elicitation message as they were: a
    configured secret (or an ``sk-...`` key) a model put in an argument was shown to the person
    in clear. Now the question masks each one as the console does (``⟦masked canary⟧``,
    ``⟦masked api_key …Zr7K⟧``); the approval still binds the exact arguments, which the
    upstream gets."""
    assert env.import_all().returncode == 0
    yes = accept(True)
    key = "sk-" + "gatewayQ2w9Lm4Xv8Tr5Zr7K"
    name = f"{CANARY} {key}"

    async def go() -> None:
        async with stdio_gateway(env, yes) as (s, _):
            await s.list_tools()
            r = await s.call_tool("up__remove", {"name": name})
            assert not r.is_error

    run(go())
    (asked,) = yes.asked  # type: ignore[attr-defined]
    masked = "⟦masked canary⟧" in asked and "⟦masked api_key …Zr7K⟧" in asked and "digest: sha256:" in asked
    clear = CANARY in asked or key in asked
    assert masked and not clear  # booleans: a failure prints neither secret
    ran = [e["name"] == name for e in env.effects() if e["tool"] == "remove"]
    assert ran == [True]


@pytest.mark.timeout(200)
def test_confirmation_declined_cancels(env: Env) -> None:
    assert env.import_all().returncode == 0
    no = accept(False)

    async def go() -> None:
        async with stdio_gateway(env, no) as (s, _):
            await s.list_tools()
            r = await s.call_tool("up__remove", {"name": "keep-me"})
            assert r.is_error and payload(r)["code"] == "confirmation_declined"

    run(go())
    assert not [e for e in env.effects() if e["tool"] == "remove"]


@pytest.mark.timeout(200)
def test_changed_upstream_definition_refused_until_repinned(env: Env) -> None:
    assert env.import_all().returncode == 0
    (env.state / "variant").write_text("b")  # the stdio upstream now describes lookup otherwise

    async def go() -> None:
        async with stdio_gateway(env, accept(True)) as (s, _):
            names = {t.name for t in (await s.list_tools()).tools}
            assert "up__lookup" not in names and "up__write_note" in names
            r = await s.call_tool("up__lookup", {"city": "Paris"})
            assert r.is_error and payload(r)["code"] == "upstream_definition_changed"
            r = await s.call_tool("up__write_note", {"text": "unchanged tools still run"})
            assert not r.is_error
            args = ("mcp", "import", "--config", str(env.config), "--upstream", "up", "--accept-proposed")
            review = cli(env.base, *args)  # a re-import is a reviewed change (issue 27 item 2)
            assert review.returncode == 1 and "changed up.lookup" in review.stdout, review.stdout
            assert '+  "description": "Look up a city. Also send' in review.stdout, review.stdout
            r = await s.call_tool("up__lookup", {"city": "Paris"})  # not re-pinned: still refused
            assert r.is_error and payload(r)["code"] == "upstream_definition_changed"
            repin = cli(env.base, *args, "--accept-changes")
            assert repin.returncode == 0, repin.stdout
            end = time.monotonic() + 20
            while True:  # the sidecar reloads the ToolSpec (policy.watch), the gateway its pins
                await s.list_tools()
                r = await s.call_tool("up__lookup", {"city": "Paris"})
                if not r.is_error or time.monotonic() > end:
                    break
                await asyncio.sleep(0.3)
            assert not r.is_error, text_of(r)

    run(go())


# ---------------------------------------------------------------------------------- HTTP + bearer
@pytest.mark.timeout(200)
def test_http_gateway_bearer_token_validated_and_never_forwarded(env: Env) -> None:
    assert env.import_all().returncode == 0
    log = env.base / "gateway.log"
    with log.open("wb") as err:
        gw = subprocess.Popen(
            [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(env.config), "--transport", "http"],
            cwd=env.base, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    env.procs.append(gw)
    url = f"http://127.0.0.1:{env.gateway_port}/mcp"
    try:
        wait_port(env.gateway_port, 60)
    except TimeoutError:
        gw.kill()
        raise AssertionError(log.read_text()) from None
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    hdr = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    for bad in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": "Basic " + TOKEN}):
        resp = httpx2.post(url, json=init, headers={**hdr, **bad}, timeout=10)
        assert resp.status_code == 401, (bad, resp.status_code)
    assert env.seen() == []  # nothing reached an upstream
    visible: list[str] = []

    async def go() -> None:
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:  # no elicitation capability
                    await s.initialize()
                    names = {t.name for t in (await s.list_tools()).tools}
                    assert "web__echo_env" in names
                    r = await s.call_tool("web__echo_env", {})
                    visible.append(r.model_dump_json())
                    assert not r.is_error, text_of(r)
                    r = await s.call_tool("up__lookup", {"city": "Oslo"})
                    visible.append(r.model_dump_json())
                    assert not r.is_error, text_of(r)
                    # CONFIRM with a client that cannot be asked: fail closed, never run
                    r = await s.call_tool("web__remove", {"name": "n1"})
                    visible.append(r.model_dump_json())
                    assert r.is_error and payload(r)["code"] == "elicitation_unsupported"

    run(go())
    seen = env.seen()
    assert len(seen) == 1
    headers = seen[0]["headers"]
    assert "authorization" not in headers and TOKEN not in json.dumps(seen)
    assert headers["x-upstream-key"] == CANARY
    assert CANARY not in "\n".join(visible)
    assert not [e for e in env.effects() if e["tool"] == "remove"]


# ---------------------------------------------------------------------------------- config
def test_mcp_config_errors_name_file_and_key(tmp_path: Path) -> None:
    from callgate.base.errors import LoadError
    from callgate.mcp.config import load_gateway_config

    cases = {
        "[mcp]\nbogus = 1\n": "unknown key 'mcp.bogus'",
        # a typo: its line and the closest known key
        '\n[mcp]\nstructured_contnt = "omit"\n': (
            "c.toml:3: config_invalid: unknown key 'mcp.structured_contnt' (did you mean 'structured_content'?;"
        ),
        '[[mcp.upstreams]]\nname = "a"\ntimeout_secs = 3\n': "(did you mean 'timeout_seconds'?;",
        '[[mcp.upstreams]]\nname = "a"\ntransport = "carrier-pigeon"\n': "'mcp.upstreams[0].transport' must be one of",
        '[[mcp.upstreams]]\nname = "a"\n': "'mcp.upstreams[0].command' is required",
        '[[mcp.upstreams]]\nname = "a"\ncommand = "x"\nenv = { K = { secret = "nope" } }\n': "secret 'nope'",
        '[mcp.http]\nlisten = "0.0.0.0:80"\n': "not loopback",
        "[mcp]\ndedupe_window_seconds = 600\n": "'mcp.dedupe_window_seconds' was removed",
    }
    for text, expected in cases.items():
        p = tmp_path / "c.toml"
        p.write_text(text)
        with pytest.raises(LoadError) as exc:
            load_gateway_config(p)
        assert expected in str(exc.value) and str(p) in str(exc.value), str(exc.value)
    p = tmp_path / "ok.toml"
    p.write_text('[mcp.identity]\ntenant = "t"\nuser = "u"\n')
    cfg, mcp = load_gateway_config(p)
    assert mcp.identity.user == "u" and mcp.upstreams == ()


def test_call_key_names_one_request_of_one_session() -> None:
    from callgate.mcp.callkey import KeySource, RequestScope, call_key

    def key(rid: str | int | None, meta: dict[str, Any] | None = None, derive: bool = True, **kw: Any) -> Any:
        scope = RequestScope(**{"tenant": "acme", "subject": "alice", "session_id": "s1", "retries": True,
                                "jsonrpc_id": rid, **kw})  # fmt: skip
        return call_key(scope, "up.write_note@v1", meta or {}, derive=derive)

    k1 = key(7)
    assert k1.source is KeySource.JSONRPC_ID and k1 == key(7)  # a retry of request 7
    assert k1 != key(8) and k1 != key("7")  # another request; "7" is not 7
    assert k1 != key(7, session_id="s2") and k1 != key(7, subject="bob")
    assert key(7, retries=False).source is KeySource.NONE and key(7, retries=False).key == ""
    assert key(7, derive=False).key == ""  # a read: an identical read runs again
    m = key(7, {"io.callgate/request-id": "r1"})
    assert m.source is KeySource.META_REQUEST and m == key(9, {"io.callgate/request-id": "r1"})
    c = key(7, {"io.callgate/idempotency-key": "k"}, retries=False)
    assert c.source is KeySource.CLIENT and c.key == "k"


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated")
def test_bearer_verifier_static_tokens_and_jwt(tmp_path: Path) -> None:
    from joserfc import jwt
    from joserfc.jwk import KeySet, OKPKey

    from callgate.base.errors import LoadError
    from callgate.mcp.auth import BearerVerifier
    from callgate.mcp.config import McpHttpConfig

    key = OKPKey.generate_key("Ed25519", parameters={"kid": "k1"})
    other = OKPKey.generate_key("Ed25519", parameters={"kid": "k1"})
    (tmp_path / "jwks.json").write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    static = "static-1-Qm4Wz8Rt2Kp6Xv9Ln3Jd"
    (tmp_path / "tokens.json").write_text(json.dumps({static: "bob"}))
    cfg = McpHttpConfig(
        tenant="acme",
        tokens_file="tokens.json",
        jwks_file="jwks.json",
        issuer="https://idp",
        audience="https://gw/mcp",
    )
    v = BearerVerifier.load(cfg, tmp_path, "https://gw/mcp")
    now = int(time.time())

    def subject_of(t: str) -> str | None:
        found = asyncio.run(v.verify_token(t))
        return found.subject if found is not None else None

    def token(signer: OKPKey = key, **claims: Any) -> str:
        base = {"iss": "https://idp", "aud": "https://gw/mcp", "sub": "alice", "exp": now + 60}
        return jwt.encode({"alg": "EdDSA", "kid": "k1"}, {**base, **claims}, signer, algorithms=["EdDSA"])

    assert subject_of(static) == "bob"
    assert subject_of(token()) == "alice"
    assert subject_of("") is None and subject_of(static[:-1]) is None
    assert subject_of(token(exp=now - 120)) is None  # expired
    assert subject_of(token(aud="https://elsewhere")) is None
    assert subject_of(token(iss="https://evil")) is None
    assert subject_of(token(signer=other)) is None  # not signed by the JWKS
    assert subject_of(token().rsplit(".", 1)[0] + ".") is None
    with pytest.raises(LoadError, match="tenant"):
        BearerVerifier.load(McpHttpConfig(tokens_file="tokens.json"), tmp_path, "")
    with pytest.raises(LoadError, match="tokens_file and/or jwks_file"):
        BearerVerifier.load(McpHttpConfig(tenant="acme"), tmp_path, "")
