"""The console without a browser (issue 13): its config, OIDC bearer tokens (JWKS file and URL),
static tokens, the webhook against a real local HTTP server, the SSE stream, and one console
serving a fleet: two sidecar processes on one real PostgreSQL store."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from http.client import HTTPConnection
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from callgate.base.errors import CallgateError
from callgate.console import config
from callgate.console.auth import Authenticator, Csrf, Identity, Tenants
from callgate.console.config import AuthConfig, AuthMode, ConsoleConfig, TenantAccess
from callgate.console.sidecar import changes
from tests.console_fixture import ALICE, EVENT, GINA, decide, free_port, http, start_console, start_sidecar
from tests.test_store_contract import fresh_pg_database

ISSUER, AUDIENCE = "https://login.example", "callgate-console"


class Hook:
    """A real local HTTP server recording the JSON bodies POSTed to it (the webhook's receiver)."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                hook.bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(status)
                self.end_headers()

            def do_GET(self) -> None:
                body = json.dumps(hook.jwks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.jwks: dict[str, Any] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    try:
        yield h
    finally:
        h.close()


def wait_for(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


# ---------------------------------------------------------------- config


def write(tmp: Path, text: str) -> Path:
    p = tmp / "console.toml"
    p.write_text(text)
    (tmp / "tokens.json").write_text(json.dumps({"a-long-enough-token-1": "alice"}))
    return p


BASE = """
[console]
confirmer = "unix:run/confirmer.sock"
[console.auth]
tokens_file = "tokens.json"
[[console.tenants]]
name = "acme"
identities = ["alice"]
"""


def test_config_loads_typed_and_relative_paths(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path, BASE))
    assert cfg.auth.mode is AuthMode.STATIC and cfg.tenants == (TenantAccess("acme", ("alice",)),)
    assert cfg.confirmer_target == f"unix:{tmp_path}/run/confirmer.sock"
    assert cfg.link_base == "http://127.0.0.1:8765"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE + "[console.extra]\n", "unknown keys"),
        (BASE.replace('tokens_file = "tokens.json"', 'mode = "oidc"\nissuer = "x"'), "issuer and audience"),
        (BASE.replace('tokens_file = "tokens.json"', 'mode = "basic"'), "must be one of"),
        (BASE.replace('name = "acme"', 'name = ""'), "console.tenants"),
        (BASE + '[console.notify]\ntimeout_s = "5"\n', "non-negative number"),
        (
            BASE.replace(
                'tokens_file = "tokens.json"',
                f'mode = "oidc"\nissuer = "{ISSUER}"\naudience = "a"\njwks_file = "j"\nalgorithms = ["HS256"]',
            ),
            "asymmetric",
        ),
        (BASE.replace("[console]", '[console]\nlisten = "8080"'), "host:port"),
    ],
)
def test_config_refuses(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CallgateError) as err:
        config.load(write(tmp_path, text))
    assert message in err.value.message


def test_a_raw_random_key_file_is_taken_whatever_bytes_it_ends_with(tmp_path: Path) -> None:
    """``head -c 32 /dev/urandom > console-csrf.key``: raw bytes that begin or end with whitespace
    bytes are the key as they are (stripping them left fewer than 32 and the console refused to
    start); a text key keeps working without its trailing newline, and a short one is refused."""
    cfg = ConsoleConfig(secret_file=str(tmp_path / "k"))
    who = Identity("alice@acme.example", ("acme-approvers",))
    raw = b"\n\t" + bytes(range(100, 128)) + b" \r"
    (tmp_path / "k").write_bytes(raw)
    assert Csrf.load(cfg).token(who) == Csrf(raw).token(who)
    text = b"A" * 64
    (tmp_path / "k").write_bytes(text + b"\n")
    assert Csrf.load(cfg).token(who) == Csrf(text).token(who)
    (tmp_path / "k").write_bytes(b"short key\n")
    with pytest.raises(CallgateError, match="at least 32 bytes"):
        Csrf.load(cfg)


def test_check_names_the_config_and_the_file_it_cannot_read(tmp_path: Path) -> None:
    """``callgate console --check`` as a new user meets it: a secret file not made yet, a token
    list that is not JSON. The line names the console's config and the file with the OS's reason
    or where the JSON breaks, never a byte of the file; exit 2."""
    import subprocess
    import sys

    cfg = write(tmp_path, BASE.replace("[console]", '[console]\nsecret_file = "csrf.key"'))

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "callgate", "console", "--config", str(cfg), "--check"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    r = check()
    assert r.returncode == 2, r.stderr
    assert (
        f"callgate console: {cfg}: console.secret_file {tmp_path / 'csrf.key'}: cannot read "
        "(No such file or directory)" in r.stderr
    ), r.stderr
    (tmp_path / "csrf.key").write_bytes(b"k" * 32)
    (tmp_path / "tokens.json").write_text('{"a-long-enough-token-1": "alice",\n  "secret-token-of-bob" }')
    r = check()
    assert r.returncode == 2, r.stderr
    assert (
        f"callgate console: {cfg}: console.auth.tokens_file {tmp_path / 'tokens.json'}: cannot read "
        "(not JSON: line 2, column 25)" in r.stderr
    ), r.stderr
    assert "secret-token" not in r.stderr and "a-long-enough" not in r.stderr
    (tmp_path / "tokens.json").write_text(json.dumps({"a-long-enough-token-1": "alice"}))
    assert check().returncode == 0


def test_the_run_it_section_works_as_written(tmp_path: Path) -> None:
    """docs/CONSOLE.md "Run it": its console.toml and the commands that make the two files it
    names, run as written in an empty folder, end in ``console config ok``."""
    import os
    import subprocess
    import sys

    doc = (Path(__file__).resolve().parents[1] / "docs/CONSOLE.md").read_text()
    section = doc[doc.index("## Run it") : doc.index("### Settings")]
    (toml,) = re.findall(r"```toml\n(.*?)```", section, flags=re.DOTALL)
    setup = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)[1]
    (tmp_path / "console.toml").write_text(toml)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(
        ["bash", "-ec", setup], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "console config ok: 1 tenant(s), auth static" in r.stdout, (
        r.stdout + r.stderr
    )
    assert (tmp_path / "console-tokens.json").stat().st_mode & 0o077 == 0


def test_every_config_field_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs/CONSOLE.md").read_text()
    for cls, prefix in (
        (ConsoleConfig, ""),
        (AuthConfig, "auth."),
        (config.NotifyConfig, "notify."),
        (TenantAccess, "tenants[]."),
    ):
        for f in cls.__dataclass_fields__.values():
            if f.metadata.get("internal") or f.name in ("auth", "notify", "tenants"):
                continue
            assert f"`{prefix}{f.name}`" in doc, f"docs/CONSOLE.md does not document {prefix}{f.name}"


# ---------------------------------------------------------------- auth


def oidc_config(tmp: Path, **auth: Any) -> ConsoleConfig:
    return config.check(
        ConsoleConfig(
            auth=AuthConfig(mode=AuthMode.OIDC, issuer=ISSUER, audience=AUDIENCE, **auth),
            tenants=(TenantAccess("acme", groups=("acme-approvers",)),),
            base_dir=str(tmp),
        )
    )


def token(key: ECKey, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "iat": now, "email": "olga@acme.example"}
    body["groups"] = ["acme-approvers"]
    body.update(claims)
    return jwt.encode({"alg": "ES256", "kid": key.kid}, body, key)


def test_oidc_tokens_from_a_jwks_file(tmp_path: Path) -> None:
    key = ECKey.generate_key("P-256", auto_kid=True)
    other = ECKey.generate_key("P-256", auto_kid=True)
    (tmp_path / "jwks.json").write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    cfg = oidc_config(tmp_path, jwks_file="jwks.json")
    auth = Authenticator(cfg)

    async def who(tok: str, header: str = "Authorization") -> Identity | None:
        return await auth.identify({header: f"Bearer {tok}"}, {})

    good = asyncio.run(who(token(key)))
    assert good == Identity("olga@acme.example", ("acme-approvers",))
    assert Tenants(cfg).of(good) == ("acme",)
    for bad in (
        token(key, aud="someone-else"),
        token(key, iss="https://evil.example"),
        token(key, exp=int(time.time()) - 3600),
        token(other),  # not the issuer's key
        token(key, email=""),
        "not.a.jwt",
        "",
    ):
        assert asyncio.run(who(bad)) is None, bad
    assert asyncio.run(auth.identify({}, {"cg_console_token": token(key)})) is None  # header only


def test_oidc_keys_from_the_issuer_url_and_rotation(tmp_path: Path, hook: Hook) -> None:
    first = ECKey.generate_key("P-256", auto_kid=True)
    hook.jwks = KeySet([first]).as_dict(private=False)
    cfg = oidc_config(tmp_path, jwks_url=hook.url, jwks_refresh_s=0.0, header="X-Forwarded-Access-Token")
    auth = Authenticator(cfg)
    assert asyncio.run(auth.identify({"X-Forwarded-Access-Token": token(first)}, {})) is not None
    rotated = ECKey.generate_key("P-256", auto_kid=True)
    hook.jwks = KeySet([rotated]).as_dict(private=False)

    async def both() -> tuple[Identity | None, Identity | None]:
        a = Authenticator(cfg)
        return (
            await a.identify({"X-Forwarded-Access-Token": token(first)}, {}),
            await a.identify({"X-Forwarded-Access-Token": token(rotated)}, {}),
        )

    old, new = asyncio.run(both())
    assert old is None and new is not None


def test_csrf_tokens_are_bound_to_the_person() -> None:
    csrf = Csrf(b"k" * 32)
    alice, bob = Identity("alice"), Identity("bob")
    assert csrf.valid(alice, csrf.token(alice))
    assert not csrf.valid(bob, csrf.token(alice)) and not csrf.valid(alice, "")
    assert Csrf(b"j" * 32).token(alice) != csrf.token(alice)


def test_what_normalization_changed() -> None:
    got = changes({"a": 1, "b": {"c": "x"}, "d/e": 1}, {"a": 1, "b": {"c": "y"}, "f": 2, "d/e": 1.0})
    assert [(c.pointer, c.raw, c.normalized) for c in got] == [
        ("/b/c", '"x"', '"y"'),
        ("/d~1e", "1", "1.0"),
        ("/f", "(absent)", "2"),
    ]


# ---------------------------------------------------------------- a real sidecar and console


def test_webhook_sse_and_static_tokens(hook: Hook) -> None:
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer, webhook=hook.url)
        try:
            sid = sc.session("acme", "alice")
            with urllib.request.urlopen(
                urllib.request.Request(con.url + "/events", headers={"Authorization": f"Bearer {ALICE}"}),
                timeout=20,
            ) as stream:
                parked = sc.propose(sid, EVENT, "w1")
                seen = b""
                while parked.invocation_id.encode() not in seen:
                    seen += stream.readline()
            (body,) = wait_for(lambda: hook.bodies)
            assert set(body) == {"text"} and "calendar.create_event@v1" in body["text"]
            assert "primary" not in body["text"]  # arguments never leave the console
            link = re.search(r"(http://\S+)", body["text"]).group(1)  # type: ignore[union-attr]
            assert link == f"{con.url}/t/acme/i/{parked.invocation_id}"
            status, page = http(link, token=ALICE)
            assert status == 200 and parked.digest in page
            assert http(link, token=GINA)[0] == 404
            assert http(link)[0] == 401 and http(link, token="x" * 20)[0] == 401
            # the login form: double-submit CSRF, then the cookie
            assert http(con.url + "/login", data={"token": ALICE})[0] == 403
        finally:
            con.stop()
    finally:
        sc.stop()


def test_a_failing_webhook_blocks_nothing() -> None:
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer, webhook=dead)
        try:
            sid = sc.session("acme", "alice")
            parked = sc.propose(sid, EVENT, "f1")
            wait_for(lambda: "notification webhook failed" in con.log())
            assert dead not in con.log()  # the URL (a secret for Slack) is not logged
            status, page = http(con.url + "/", token=ALICE)
            assert status == 200 and parked.invocation_id in page
        finally:
            con.stop()
    finally:
        sc.stop()


@pytest.mark.postgres
def test_one_console_serves_two_pods_on_one_postgres(postgres_dsn: str, hook: Hook) -> None:
    dsn = fresh_pg_database(postgres_dsn)
    a = start_sidecar(dsn=dsn)
    try:
        b = start_sidecar(dsn=dsn)
        try:
            con = start_console(b.confirmer, webhook=hook.url)  # the console knows only pod b
            try:
                sid = a.session("acme", "alice")
                parked = a.propose(sid, EVENT, "pg1")  # proposed on pod a
                (body,) = wait_for(lambda: hook.bodies)  # b's WatchPending saw a's proposal
                assert parked.invocation_id in body["text"]
                status, page = http(con.url + "/", token=ALICE)
                assert status == 200 and parked.invocation_id in page
                status = decide(con.url, ALICE, "acme", parked.invocation_id, parked.digest)
                assert status == 303
                assert a.state(sid, parked.invocation_id) == "PREPARED"  # pod a sees the confirmation
                status, page = http(con.url + f"/t/acme/i/{parked.invocation_id}", token=ALICE)
                assert "alice@acme.example" in page and "PREPARED" in page
            finally:
                con.stop()
        finally:
            b.stop()
    finally:
        a.stop()


def test_config_replace_keeps_frozen() -> None:
    cfg = ConsoleConfig()
    with pytest.raises(AttributeError):
        cfg.listen = "x"  # type: ignore[misc]
    assert replace(cfg, listen="127.0.0.1:1").listen == "127.0.0.1:1"


# ---------------------------------------------------------------- sessions (issue 33 item 4)


class Browserless:
    """A cookie-keeping HTTP client from a chosen source address (``http.client``)."""

    def __init__(self, url: str, source: str = "127.0.0.1") -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.source = parts.hostname or "", parts.port or 80, source
        self.cookies: dict[str, str] = {}
        self.set_cookies: list[str] = []

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        conn = HTTPConnection(self.host, self.port, timeout=15, source_address=(self.source, 0))
        h = dict(headers or {})
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            h["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        text = resp.read().decode()
        self.set_cookies = [v for k, v in resp.getheaders() if k.lower() == "set-cookie"]
        for header, value in resp.getheaders():
            if header.lower() == "set-cookie":
                jar = SimpleCookie()
                jar.load(value)
                for name, morsel in jar.items():
                    if morsel["max-age"] == "0" or not morsel.value.strip('"'):
                        self.cookies.pop(name, None)
                    else:
                        self.cookies[name] = morsel.value
        conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text

    def sign_in(self, identity: str, token: str, next_: str = "/") -> tuple[int, dict[str, str], str]:
        status, _, page = self.request("GET", "/login?next=" + urllib.parse.quote(next_, safe=""))
        assert status == 200
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        return self.request(
            "POST", "/login", {"csrf_token": csrf, "identity": identity, "token": token, "next": next_}
        )


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]


def test_sessions_are_server_side_rotated_and_end(tmp_path: Path) -> None:
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer)
        try:
            sid = sc.session("acme", "alice")
            parked = sc.propose(sid, EVENT, "s1")
            b = Browserless(con.url)
            status, headers, _ = b.sign_in("alice@acme.example", ALICE)
            assert status == 303 and headers["location"] == "/"
            (cookie,) = [c for c in b.set_cookies if c.startswith("__Host-cg_session=")]
            assert ALICE not in cookie
            for attr in ("HttpOnly", "Path=/", "SameSite=strict", "Secure"):
                assert attr.lower() in cookie.lower(), attr
            assert "domain" not in cookie.lower()
            first = b.cookies["__Host-cg_session"]
            status, _, page = b.request("GET", "/")
            assert status == 200 and parked.invocation_id in page
            csrf = csrf_of(page)
            assert csrf != Csrf(b"k" * 32).token(Identity("alice@acme.example"))  # the session's own

            # Rotation: signing in again opens a new id and ends the one presented.
            status, _, _ = b.sign_in("alice@acme.example", ALICE)
            second = b.cookies["__Host-cg_session"]
            assert status == 303 and second != first
            replay = Browserless(con.url)
            replay.cookies["__Host-cg_session"] = first
            assert replay.request("GET", "/")[0] == 401
            # The old session's CSRF token is worth nothing in the new one.
            status, _, page = b.request("GET", "/")
            assert csrf_of(page) != csrf

            # A planted cookie without the prefix is ignored, even holding a live session id.
            planted = Browserless(con.url)
            planted.cookies["cg_session"] = second
            assert planted.request("GET", "/")[0] == 401

            # Sign-out ends the session on the server: the old cookie replayed answers 401, and
            # an approval posted with it approves nothing; its open event stream ends.
            port = urllib.parse.urlsplit(con.url).port
            stream = HTTPConnection("127.0.0.1", port, timeout=20)
            stream.request("GET", "/events", headers={"Cookie": f"__Host-cg_session={second}"})
            events = stream.getresponse()
            assert events.status == 200
            while b"event: pending" not in events.readline():
                pass
            form = {"csrf_token": csrf_of(page)}
            assert b.request("POST", "/logout", form)[0] == 303
            sc.propose(sid, {**EVENT, "title": "after sign-out"}, "s2")  # the list changes
            rest = b""
            while line := events.readline():  # the stream ends instead of sending the new list
                rest += line
            assert b"after sign-out" not in rest
            stream.close()
            replay = Browserless(con.url)
            replay.cookies["__Host-cg_session"] = second
            assert replay.request("GET", "/")[0] == 401
            approve = {**form, "digest": parked.digest, "confirm": parked.digest[:19], "note": ""}
            assert replay.request("POST", f"/t/acme/i/{parked.invocation_id}/approve", approve)[0] == 401
            assert sc.state(sid, parked.invocation_id) == "AUTHORIZED"
            # A browser asking for a page is sent to sign in (issue 28 item 6), and back after it.
            status, headers, _ = replay.request("GET", "/t/acme/i/x", headers={"Accept": "text/html"})
            assert status == 303 and headers["location"] == "/login?next=%2Ft%2Facme%2Fi%2Fx"
            status, headers, _ = replay.sign_in("alice@acme.example", ALICE, "/t/acme/i/x")
            assert status == 303 and headers["location"] == "/t/acme/i/x"

            # Revocation: a token taken out of the list ends its sessions.
            assert replay.request("GET", "/")[0] == 200
            tokens = json.loads((con.tmp / "tokens.json").read_text())
            del tokens[ALICE]
            (con.tmp / "tokens.json").write_text(json.dumps(tokens))
            assert replay.request("GET", "/")[0] == 401
            assert http(con.url + "/", token=ALICE)[0] == 401

            # Host: a name the console does not serve answers 421 (DNS rebinding); /healthz is exempt.
            rebind = {"Host": f"attacker.example:{urllib.parse.urlsplit(con.url).port}"}
            assert Browserless(con.url).request("GET", "/login", headers=rebind)[0] == 421
            assert Browserless(con.url).request("GET", "/healthz", headers=rebind)[0] == 200
        finally:
            con.stop()
    finally:
        sc.stop()


def test_sign_in_is_locked_after_failures_per_client_and_per_identity() -> None:
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer)  # the defaults: 5 failures in 300 s lock for 300 s
        try:
            here = Browserless(con.url)
            for _ in range(5):
                assert here.sign_in("alice@acme.example", "wrong-token-000000000")[0] == 401
            # Locked: even the right token is refused, for this client and for this identity.
            assert here.sign_in("alice@acme.example", ALICE)[0] == 429
            assert here.sign_in("gina@globex.example", GINA)[0] == 429  # same client
            other = Browserless(con.url, source="127.0.0.2")
            assert other.sign_in("alice@acme.example", ALICE)[0] == 429  # same identity
            assert other.sign_in("gina@globex.example", GINA)[0] == 303  # neither locked
            wait_for(lambda: "sign-in locked for client '127.0.0.1'" in con.log())
            assert "sign-in locked for identity 'alice@acme.example'" in con.log()
            assert ALICE not in con.log() and "wrong-token" not in con.log()
        finally:
            con.stop()
    finally:
        sc.stop()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_session_lifetimes_and_limiter_windows() -> None:
    from callgate.console.sessions import Lock, SessionStore, SignInLimiter

    clock = FakeClock()
    store = SessionStore(ttl_s=100, idle_s=10, clock=clock)
    alive = {b"t"}
    sid = store.open("alice", (), b"t")
    clock.now += 9
    assert store.get(sid, alive.__contains__) is not None  # used: idle time starts again
    clock.now += 9
    assert store.get(sid, alive.__contains__) is not None
    clock.now += 11
    assert store.get(sid, alive.__contains__) is None and len(store) == 0  # idle too long
    sid = store.open("alice", (), b"t")
    for _ in range(12):
        clock.now += 9
        store.get(sid, alive.__contains__)
    assert store.get(sid, alive.__contains__) is None  # past its lifetime, however busy
    sid = store.open("alice", (), b"t")
    assert store.revoke(lambda d: False) == 1 and store.get(sid, alive.__contains__) is None

    limiter = SignInLimiter(max_failures=3, window_s=60, lockout_s=300, clock=clock)
    limiter.failed("1.2.3.4", "alice")
    limiter.failed("1.2.3.4", "alice")
    clock.now += 61  # the first two fall out of the window
    assert limiter.failed("1.2.3.4", "alice") is None and limiter.locked("1.2.3.4", "alice") is None
    limiter.failed("5.6.7.8", "alice")
    assert limiter.failed("9.9.9.9", "alice") is Lock.IDENTITY  # three clients, one identity
    assert limiter.locked("1.1.1.1", "alice") is Lock.IDENTITY
    assert limiter.locked("1.2.3.4", "bob") is None
    clock.now += 301
    assert limiter.locked("1.1.1.1", "alice") is None  # the lockout ends
