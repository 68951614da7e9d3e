"""Real processes for the console tests: ``callgate serve`` (SQLite or PostgreSQL store) and
``callgate console`` with a static token list, each in its own temporary directory, and a
runtime's calls (open a session, propose) on the sidecar's agent listener."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import ROOT, serve_toml
from tests.ports import free_port
from tests.test_shared_idempotency import wait_serving

TOKENS = {
    "alice-token-0123456789": {"identity": "alice@acme.example", "groups": ["acme-approvers"]},
    "gina-token-0123456789ab": {"identity": "gina@globex.example", "groups": ["globex-approvers"]},
}
ALICE, GINA = "alice-token-0123456789", "gina-token-0123456789ab"
EVENT = {"title": "Dentist", "start": "2026-12-20T09:00:00", "calendar_id": "main"}


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    tmp: Path
    gate: pb_grpc.GateStub
    confirmations: pb_grpc.ConfirmationsStub
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def confirmer(self) -> str:
        return f"unix:{self.tmp}/confirmer.sock"

    def session(self, tenant: str, subject: str) -> str:
        sid = self.gate.OpenSession(
            pb.OpenSessionRequest(subject=pb.Subject(tenant=tenant, id=subject), timezone="Europe/Berlin")
        ).session_id
        self.gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))
        return str(sid)

    def propose(self, sid: str, args: dict[str, Any], pid: str, key: str = "") -> pb.ProposeResponse:
        return self.gate.Propose(
            pb.ProposeRequest(
                session_id=sid, model_call_id="m", proposal_id=pid, tool_name="calendar.create_event",
                tool_version="v1", arguments=json.dumps(args).encode(), idempotency_key=key or f"k-{pid}",
            )
        )  # fmt: skip

    def state(self, sid: str, invocation_id: str) -> str:
        got = self.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=invocation_id, session_id=sid))
        return str(pb.State.Name(got.invocation.state))

    def stop(self) -> None:
        for ch in self.channels:
            ch.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start_sidecar(*, ttl_seconds: int = 600, dsn: str = "", secret: str = "") -> Sidecar:
    """``secret``: the calendar tool's ``calendar_api_token`` (a file in the sidecar's folder)."""
    tmp = Path(tempfile.mkdtemp(prefix="cg-con-", dir="/tmp"))
    secrets = ""
    if secret:
        (tmp / "calendar.token").write_text(secret + "\n")
        secrets = (
            '[[secrets]]\nname = "calendar_api_token"\nfile = "calendar.token"\n'
            'tools = ["calendar.create_event"]\nresources = ["calendar:*"]\n'
        )
    store = (
        '[store]\nbackend = "postgres"\ndsn_env = "CALLGATE_TEST_STORE_DSN"\n'
        if dsn
        else f'[store]\npath = "{tmp}/callgate.db"\n[idempotency]\npath = "{tmp}/idempotency.db"\n'
    )
    (tmp / "callgate.toml").write_text(
        serve_toml(tmp)
        + f"""[confirmation]
ttl_seconds = {ttl_seconds}
sweep_interval_ms = 500
{store}{secrets}"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "serve", "--config", str(tmp / "callgate.toml")],
        cwd=ROOT, env={**os.environ, "CALLGATE_TEST_STORE_DSN": dsn}, stderr=open(tmp / "log", "wb"),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        agent = wait_serving(f"unix:{tmp}/agent.sock", proc, tmp / "log")
    except BaseException:
        proc.kill()
        raise
    confirmer = grpc.insecure_channel(f"unix:{tmp}/confirmer.sock")
    return Sidecar(
        proc, tmp, pb_grpc.GateStub(agent), pb_grpc.ConfirmationsStub(confirmer), [agent, confirmer]
    )


@dataclass
class Console:
    proc: subprocess.Popen[bytes]
    tmp: Path
    url: str

    def log(self) -> str:
        return (self.tmp / "console.log").read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start_console(confirmer: str, *, webhook: str = "", extra: str = "") -> Console:
    tmp = Path(tempfile.mkdtemp(prefix="cg-console-", dir="/tmp"))
    port = free_port()
    (tmp / "tokens.json").write_text(json.dumps(TOKENS))
    (tmp / "console.toml").write_text(
        f"""
[console]
listen = "127.0.0.1:{port}"
confirmer = "{confirmer}"
cookie_secure = true
{extra}
[console.auth]
mode = "static"
tokens_file = "tokens.json"
[console.notify]
webhook_url = "{webhook}"
timeout_s = 2
[[console.tenants]]
name = "acme"
groups = ["acme-approvers"]
[[console.tenants]]
name = "globex"
groups = ["globex-approvers"]
"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "console", "--config", str(tmp / "console.toml")],
        cwd=ROOT, stderr=open(tmp / "console.log", "wb"), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError((tmp / "console.log").read_text())
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return Console(proc, tmp, url)
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("console did not start: " + (tmp / "console.log").read_text())
        time.sleep(0.1)


def http(
    url: str, *, token: str = "", data: dict[str, str] | None = None, cookie: str = ""
) -> tuple[int, str]:
    """(status, body) of a GET, or of a form POST when ``data`` is given; no redirects followed."""
    body = None
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = cookie
    if data is not None:
        body = urllib.parse.urlencode(data).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **k: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(
        url, data=body, headers=headers, method="POST" if data is not None else "GET"
    )
    try:
        with opener.open(req, timeout=15) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def decide(
    url: str, token: str, tenant: str, invocation_id: str, digest: str, action: str = "approve"
) -> int:
    """What a person does in the console: read the list page's CSRF token, then post the card's
    form (``approve`` or ``deny``) with the digest shown and its first characters typed back.
    Returns the POST's status (303 when decided)."""
    page = http(url + "/", token=token)[1]
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    form = {"csrf_token": csrf, "digest": digest, "note": "", "confirm": digest[:19]}
    return http(f"{url}/t/{tenant}/i/{invocation_id}/{action}", token=token, data=form)[0]
