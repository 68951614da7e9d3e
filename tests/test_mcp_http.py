"""The HTTP gateway as a client meets it: real processes (``callgate mcp serve --transport http``
bound to 127.0.0.2, its embedded sidecar, an SDK upstream over stdio; a small OAuth
authorization server, tests/oauth_as.py, in its own process) driven by the official MCP Python
SDK client, its OAuth flow (``OAuthClientProvider``: RFC 9728 discovery, RFC 8414 metadata,
dynamic registration, authorization code + PKCE, RFC 8707 resource) included, and by raw HTTP
where a client would not misbehave on its own (Host, Origin, a flood of sessions)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPError

from callgate.base.tokenstrength import weakness
from tests.conftest import short_tmpdir
from tests.mcp_env import LIST_WAIT, ROOT, cli, config_head, run, terminate, text_of, wait_port
from tests.ports import free_port
from tests.test_mcp_gateway import write_policies

HOST = "127.0.0.2"  # a loopback address other than 127.0.0.1: the SDK's own checks are off there
ALICE = secrets.token_urlsafe(32)
BOB = secrets.token_urlsafe(32)
LIMIT = 3
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
CALL_SCOPE = "mcp:call"
"""A second scope the authorization server grants when asked (the step-up test's gateway needs it)."""


def _config(
    base: Path,
    port: int,
    as_port: int,
    *,
    limit: int = LIMIT,
    extra: str = "",
    tokens: str = "tokens.json",
    scopes: tuple[str, ...] = ("mcp",),
) -> Path:
    py, root = json.dumps(sys.executable), json.dumps(str(ROOT))
    as_url = f"http://127.0.0.1:{as_port}"
    oauth = (
        f'issuer = "{as_url}"\njwks_url = "{as_url}/jwks"\nrequired_scopes = {json.dumps(list(scopes))}'
        if as_port
        else ""
    )
    state = json.dumps(str(base / "state"))
    path = base / f"callgate-{port}.toml"
    path.write_text(
        config_head(stores=f"-{port}")
        + f"""
[mcp]
{LIST_WAIT}
[mcp.http]
tenant = "acme"
listen = "{HOST}:{port}"
tokens_file = "{tokens}"
{oauth}
max_sessions_per_subject = {limit}
{extra}
[[mcp.upstreams]]
name = "up"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {state}]
cwd = {root}
env = {{ PYTHONPATH = {root} }}
timeout_seconds = 20.0
"""
    )
    return path


@dataclass
class Site:
    """A temp folder with policies, pins, the authorization server and one running gateway."""

    base: Path
    as_port: int
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.as_port}"

    def spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.base / log).open("wb") as err:
            p = subprocess.Popen(
                [sys.executable, "-m", *args], cwd=self.base, env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        self.procs.append(p)
        return p

    def gateway(self, **kw: Any) -> int:
        port = free_port(HOST)
        config = _config(self.base, port, self.as_port, **kw)
        p = self.spawn(
            ["callgate", "mcp", "serve", "--config", str(config), "--transport", "http"], f"gw-{port}.log"
        )
        wait_port(port, 60, host=HOST, proc=p, log=self.base / f"gw-{port}.log")
        return port

    def close(self) -> None:
        for p in self.procs:
            terminate(p)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    base = short_tmpdir()
    (base / "state").mkdir()
    write_policies(base, ("up",))
    users = [
        {"uid": {"type": "User", "id": u}, "attrs": {"tenant": "acme"}, "parents": []}
        for u in ("alice", "bob", "carol")
    ]
    cedar = base / "policies" / "cedar"
    (cedar / "entities.json").write_text(json.dumps(users))
    (cedar / "policies.cedar").write_text(
        '@id("mcp-permit")\npermit (principal, action, resource) when { principal.tenant == context.tenant };\n'
    )
    (base / "tokens.json").write_text(json.dumps({ALICE: "alice", BOB: "bob"}))
    s = Site(base, free_port())
    try:
        r = cli(base, "mcp", "import", "--config", str(_config(base, 1, s.as_port)), "--accept-proposed")
        assert r.returncode == 0, r.stdout + r.stderr
        a = s.spawn(
            [
                "tests.oauth_as",
                "--port",
                str(s.as_port),
                "--subject",
                "carol",
                "--scopes",
                f"mcp {CALL_SCOPE}",
            ],
            "as.log",
        )
        wait_port(s.as_port, 60, proc=a, log=base / "as.log")
        s.port = s.gateway()
        yield s
    finally:
        s.close()


def _open(url: str, token: str, **headers: str) -> httpx2.Response:
    auth = {"authorization": f"Bearer {token}"} if token else {}
    return httpx2.post(url, json=INIT, headers={**ACCEPT, **auth, **headers}, timeout=20)


def _close(url: str, token: str, session: str) -> None:
    r = httpx2.delete(
        url, headers={"authorization": f"Bearer {token}", "mcp-session-id": session}, timeout=20
    )
    assert r.status_code == 200, r.text


async def _use(url: str, auth: httpx2.Auth | None = None, token: str = "") -> list[str]:
    """initialize, tools/list and one allowed call through the SDK client; the call's text."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(auth=auth, headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                assert "up__lookup" in {t.name for t in (await s.list_tools()).tools}
                r = await s.call_tool("up__lookup", {"city": "Oslo"})
                assert not r.is_error, text_of(r)
                return [text_of(r)]


async def _refused_initialize(url: str, token: str) -> None:
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                with pytest.raises(MCPError) as exc:
                    await s.initialize()
    assert exc.value.code == -32000 and exc.value.data["code"] == "session_limit", exc.value
    assert "open MCP sessions (the limit)" in exc.value.message


# ---------------------------------------------------------------------------------- limits
@pytest.mark.timeout(240)
def test_one_subject_over_its_session_limit_is_refused_while_others_work(site: Site) -> None:
    opened = []
    for _ in range(LIMIT):
        r = _open(site.url, ALICE)
        assert r.status_code == 200, r.text
        opened.append(r.headers["mcp-session-id"])
    over = _open(site.url, ALICE)
    assert over.status_code == 429, over.text
    err = over.json()["error"]
    assert (
        err["data"] == {"code": "session_limit", "limit": LIMIT} and "3 open MCP sessions" in err["message"]
    )
    run(_refused_initialize(site.url, ALICE))  # what the SDK client shows its user
    run(_use(site.url, token=BOB))  # another subject: initialize, list and call still work
    _close(site.url, ALICE, opened.pop())  # a session ended frees its place
    r = _open(site.url, ALICE)
    assert r.status_code == 200, r.text
    opened.append(r.headers["mcp-session-id"])
    assert _open(site.url, ALICE).status_code == 429
    for session in opened:
        _close(site.url, ALICE, session)


@pytest.mark.timeout(120)
def test_concurrent_opening_requests_cannot_overshoot_the_limit(site: Site) -> None:
    async def burst() -> list[httpx2.Response]:
        hdr = {**ACCEPT, "authorization": f"Bearer {ALICE}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            return list(
                await asyncio.gather(*(http.post(site.url, json=INIT, headers=hdr) for _ in range(12)))
            )

    answers = run(burst())
    assert sorted(r.status_code for r in answers) == [200] * LIMIT + [429] * (12 - LIMIT)
    for r in answers:
        if r.status_code == 200:
            _close(site.url, ALICE, r.headers["mcp-session-id"])
    r = _open(site.url, ALICE)  # every place given back
    assert r.status_code == 200, r.text
    _close(site.url, ALICE, r.headers["mcp-session-id"])


@pytest.mark.timeout(240)
def test_idle_sessions_are_closed_after_the_configured_minutes(site: Site) -> None:
    port = site.gateway(limit=1, extra="session_idle_minutes = 0.03")
    url = f"http://{HOST}:{port}/mcp"
    r = _open(url, BOB)
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    end = time.monotonic() + 60
    while (again := _open(url, BOB)).status_code == 429:  # its one place is taken until...
        assert again.json()["error"]["data"]["code"] == "session_limit"
        assert time.monotonic() < end, "the idle session was never closed"
        time.sleep(0.3)
    assert again.status_code == 200, again.text  # ...it is closed when idle, and its place given back
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    hdr = {**ACCEPT, "authorization": f"Bearer {BOB}", "mcp-protocol-version": "2025-11-25"}
    assert (
        httpx2.post(url, json=ping, headers={**hdr, "mcp-session-id": session}, timeout=20).status_code == 404
    )
    assert httpx2.post(
        url, json=ping, headers={**hdr, "mcp-session-id": again.headers["mcp-session-id"]}
    ).is_success


# ---------------------------------------------------------------------------------- one session
@pytest.mark.timeout(120)
def test_a_session_is_its_subjects_a_stream_resumed_by_last_event_id_opens_and_delete_ends_it(
    site: Site,
) -> None:
    """A session id works only with its subject's token; a client reconnecting its GET stream
    with ``Last-Event-ID`` (the gateway keeps no event store, so there is nothing to replay)
    gets a fresh stream, not an HTTP 500; DELETE ends the session."""
    r = _open(site.url, BOB)
    assert r.status_code == 200, r.text
    session = r.headers["mcp-session-id"]
    bob = {
        **ACCEPT,
        "authorization": f"Bearer {BOB}",
        "mcp-protocol-version": "2025-11-25",
        "mcp-session-id": session,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx2.post(site.url, json=initialized, headers=bob, timeout=20).status_code == 202
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    alice = {**bob, "authorization": f"Bearer {ALICE}"}
    assert httpx2.post(site.url, json=ping, headers=alice, timeout=20).status_code == 404  # not hers

    def reconnect(last_event_id: str) -> tuple[int, str]:
        sse = {**bob, "accept": "text/event-stream", "last-event-id": last_event_id}
        with httpx2.stream("GET", site.url, headers=sse, timeout=20) as g:
            return g.status_code, g.headers.get("content-type", "")

    for last in ("0", "never-issued"):  # one after the other: one GET stream per session at a time
        status, kind = reconnect(last)
        assert (status, kind.split(";")[0]) == (200, "text/event-stream"), (last, status, kind)
    assert httpx2.post(site.url, json=ping, headers=bob, timeout=20).is_success  # the session goes on
    _close(site.url, BOB, session)
    assert httpx2.post(site.url, json=ping, headers=bob, timeout=20).status_code == 404


# ---------------------------------------------------------------------------------- Host / Origin
def test_host_and_origin_checked_on_a_non_default_loopback_address(site: Site) -> None:
    host = f"{HOST}:{site.port}"
    assert _open(site.url, BOB, host=f"evil.example:{site.port}").status_code == 421
    assert _open(site.url, BOB, host=f"localhost:{site.port}").status_code == 421
    for origin in ("http://evil.example", f"http://localhost:{site.port}", "http://localhost:5173", "null"):
        r = _open(site.url, BOB, origin=origin)
        assert r.status_code == 403 and r.json()["error"]["data"]["code"] == "origin_not_allowed", (
            origin,
            r.text,
        )
    # the PRM route too: nothing answers a foreign Host
    r = httpx2.get(
        f"http://{host}/.well-known/oauth-protected-resource/mcp", headers={"host": "evil.example"}
    )
    assert r.status_code == 421
    r = _open(site.url, BOB, host=host, origin=f"http://{host}")  # the listen address itself
    assert r.status_code == 200, r.text
    _close(site.url, BOB, r.headers["mcp-session-id"])


# ---------------------------------------------------------------------------------- static tokens
def test_token_strength_rule() -> None:
    for good in (secrets.token_urlsafe(16), secrets.token_hex(16), secrets.token_urlsafe(32)):
        assert weakness(good) is None, good
    for bad in ("x", "tok-alice-8c1e5f", "a" * 64, "abababababababababababababababab", "0123456789" * 3):
        assert weakness(bad) is not None, bad


@pytest.mark.timeout(120)
def test_a_weak_static_token_is_refused_at_load(site: Site) -> None:
    (site.base / "weak.json").write_text(json.dumps({BOB: "bob", "tok-alice-8c1e5f": "alice"}))
    config = _config(site.base, free_port(HOST), site.as_port, tokens="weak.json")
    r = subprocess.run(
        [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(config), "--transport", "http"],
        cwd=site.base, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "tokens_file" in r.stderr and "'alice'" in r.stderr and "too weak" in r.stderr, r.stderr
    assert "tok-alice-8c1e5f" not in r.stderr  # the secret itself is never printed


# ---------------------------------------------------------------------------------- OAuth
@pytest.mark.timeout(120)
def test_static_tokens_only_name_no_authorization_server(site: Site) -> None:
    """Without an authorization server the gateway publishes no protected-resource metadata and
    its 401 names none (it used to name itself, whose authorization-server metadata is 404)."""
    site.as_port, as_port = 0, site.as_port
    try:
        port = site.gateway()
    finally:
        site.as_port = as_port
    url = f"http://{HOST}:{port}/mcp"
    assert httpx2.get(f"http://{HOST}:{port}/.well-known/oauth-protected-resource/mcp").status_code == 404
    unauth = _open(url, "")
    assert unauth.status_code == 401 and "resource_metadata" not in unauth.headers["www-authenticate"]
    r = _open(url, BOB)
    assert r.status_code == 200, r.text
    _close(url, BOB, r.headers["mcp-session-id"])


class MemoryStorage:
    """The SDK's ``TokenStorage`` in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The user agent of the authorization-code flow: follows the authorization URL to the
    server's redirect and hands the redirect's parameters back to the SDK."""

    def __init__(self) -> None:
        self.visited: list[str] = []
        self.redirect = ""

    async def open(self, url: str) -> None:
        self.visited.append(url)
        async with httpx2.AsyncClient(timeout=20) as http:
            r = await http.get(url, follow_redirects=False)
        assert r.status_code == 302, r.text
        self.redirect = r.headers["location"]

    async def callback(self) -> AuthorizationCodeResult:
        q = {k: v[0] for k, v in parse_qs(urlsplit(self.redirect).query).items()}
        return AuthorizationCodeResult(code=q["code"], state=q.get("state"), iss=q.get("iss"))


@pytest.mark.timeout(240)
def test_oauth_flow_of_the_sdk_client_end_to_end(site: Site) -> None:
    prm = httpx2.get(f"http://{HOST}:{site.port}/.well-known/oauth-protected-resource/mcp", timeout=20).json()
    assert prm["resource"] == site.url and [a.rstrip("/") for a in prm["authorization_servers"]] == [
        site.issuer
    ]
    assert prm["scopes_supported"] == ["mcp"]
    unauth = _open(site.url, "")
    assert unauth.status_code == 401 and "oauth-protected-resource/mcp" in unauth.headers["www-authenticate"]
    browser, storage = Browser(), MemoryStorage()
    auth = OAuthClientProvider(
        server_url=site.url,
        client_metadata=OAuthClientMetadata(
            client_name="callgate test", redirect_uris=["http://127.0.0.1:1/callback"],
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        ),
        storage=storage, redirect_handler=browser.open, callback_handler=browser.callback,
    )  # fmt: skip
    texts = run(_use(site.url, auth=auth))
    assert texts and "Oslo" in texts[0]
    assert len(browser.visited) == 1 and browser.visited[0].startswith(site.issuer + "/authorize?")
    assert parse_qs(urlsplit(browser.visited[0]).query)["resource"] == [site.url]  # RFC 8707
    assert storage.tokens is not None and storage.client is not None


def _token_for(site: Site, resource: str, scope: str = "mcp") -> str:
    """An access token of the authorization server for ``resource``, by the plain OAuth flow."""
    with httpx2.Client(base_url=site.issuer, timeout=20) as http:
        redirect = "http://127.0.0.1:1/callback"
        reg = http.post("/register", json={"redirect_uris": [redirect], "client_name": "other", "scope": scope,
                                           "token_endpoint_auth_method": "none"}).json()  # fmt: skip
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        r = http.get("/authorize", params={
            "response_type": "code", "client_id": reg["client_id"], "redirect_uri": redirect, "state": "s",
            "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource, "scope": scope})  # fmt: skip
        code = parse_qs(urlsplit(r.headers["location"]).query)["code"][0]
        tok = http.post("/token", data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect,
                                         "client_id": reg["client_id"], "code_verifier": verifier, "resource": resource})  # fmt: skip
        assert tok.status_code == 200, tok.text
        return str(tok.json()["access_token"])


@pytest.mark.timeout(120)
def test_a_token_minted_for_another_audience_is_refused(site: Site) -> None:
    other = _token_for(site, "http://127.0.0.1:9/upstream/mcp")  # e.g. meant for an upstream
    r = _open(site.url, other)
    assert r.status_code == 401, r.text
    mine = _token_for(site, site.url)  # the same issuer, key and subject, for this gateway
    r = _open(site.url, mine)
    assert r.status_code == 200, r.text
    _close(site.url, mine, r.headers["mcp-session-id"])


@pytest.mark.timeout(240)
def test_a_token_without_the_required_scope_gets_insufficient_scope_and_the_sdk_steps_up(site: Site) -> None:
    """RFC 6750 3.1 and the MCP authorization spec (scope challenge): a valid token for this
    gateway that lacks a required scope is a 403 with ``WWW-Authenticate: Bearer
    error="insufficient_scope"``, the scopes needed and the metadata URL; the SDK's OAuth client
    then authorizes again for those scopes (step-up) and the call goes through."""
    port = site.gateway(scopes=("mcp", CALL_SCOPE))
    url = f"http://{HOST}:{port}/mcp"
    narrow = _token_for(site, url)  # the right issuer, key, subject and audience; scope "mcp" only
    r = _open(url, narrow)
    assert r.status_code == 403, r.text
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"'), challenge
    assert f'scope="mcp {CALL_SCOPE}"' in challenge, challenge
    assert f'resource_metadata="http://{HOST}:{port}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert r.json()["error"] == "insufficient_scope"
    wide = _token_for(site, url, f"mcp {CALL_SCOPE}")
    r = _open(url, wide)
    assert r.status_code == 200, r.text
    _close(url, wide, r.headers["mcp-session-id"])
    # the SDK client holding the narrow token: 403, re-authorization for both scopes, then served
    browser, storage = Browser(), MemoryStorage()
    storage.tokens = OAuthToken(access_token=narrow, token_type="Bearer", expires_in=300, scope="mcp")
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="callgate step-up", redirect_uris=["http://127.0.0.1:1/callback"],
            grant_types=["authorization_code"], response_types=["code"],
        ),
        storage=storage, redirect_handler=browser.open, callback_handler=browser.callback,
    )  # fmt: skip
    texts = run(_use(url, auth=auth))
    assert texts and "Oslo" in texts[0]
    assert len(browser.visited) == 1, browser.visited
    asked = parse_qs(urlsplit(browser.visited[0]).query)
    assert set(asked["scope"][0].split()) == {"mcp", CALL_SCOPE}, asked
    assert storage.tokens is not None and storage.tokens.access_token != narrow
    assert set((storage.tokens.scope or "").split()) == {"mcp", CALL_SCOPE}


# ---------------------------------------------------------------------------------- config
def test_http_config_errors_name_the_file_and_key(tmp_path: Path) -> None:
    from callgate.base.errors import LoadError
    from callgate.mcp.config import load_gateway_config
    from callgate.mcp.http_app import Allowlist, resource_url

    cases = {
        "max_sessions_per_subject = 0": "'mcp.http.max_sessions' and 'max_sessions_per_subject' must be at least 1",
        "max_sessions = 4\nmax_sessions_per_subject = 5": "must not exceed 'max_sessions'",
        "session_idle_minutes = 0": "'mcp.http.session_idle_minutes' must be more than 0",
        'allowed_origins = ["evil.example"]': "'evil.example' is not an origin",
        'allowed_origins = ["http://a.example/path"]': "is not an origin",
        'allowed_hosts = "a.example"': "'mcp.http.allowed_hosts' must be an array",
        'authorization_server = "login.example"': "'mcp.http.authorization_server' must be an http(s) URL",
    }
    for text, expected in cases.items():
        p = tmp_path / "c.toml"
        p.write_text(f"[mcp.http]\n{text}\n")
        with pytest.raises(LoadError) as exc:
            load_gateway_config(p)
        assert expected in str(exc.value) and str(p) in str(exc.value), str(exc.value)
    p = tmp_path / "ok.toml"
    p.write_text('[mcp.http]\nlisten = "[::1]:8765"\nallowed_origins = ["https://App.example"]\n')
    _, mcp = load_gateway_config(p)
    assert resource_url(mcp.http, "::1", 8765) == "http://[::1]:8765/mcp"
    allow = Allowlist.of(mcp.http, "::1", 8765, resource_url(mcp.http, "::1", 8765))
    assert allow.hosts == {"[::1]:8765"} and allow.origins == {"https://app.example"}
