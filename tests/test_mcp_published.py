"""Published MCP servers behind ``callgate mcp serve``, driven by two real MCP clients (issue 11).

Client × upstream: the official Python SDK client and the TypeScript SDK client (the node
harness, tests/mcp_node) each talk over stdio to ``callgate mcp serve`` (embedded sidecar, Cedar
policies written here), which fronts

* ``git``: ``mcp-server-git`` (PyPI) on a temporary repository: its write tools make real
  commits and branches, counted with ``git rev-list --count`` / ``git branch``;
* ``fs``: ``@modelcontextprotocol/server-filesystem`` (npm, the installed ``dist/index.js`` run
  with node) on a temporary folder: files and contents counted; and ``fsec``, the same server on a
  second folder whose environment carries a canary secret (``{ secret = "canary" }``) that a
  wrapper writes into a file there, so a read returns it: the client must never see it.

The pins come from ``callgate mcp import --accept-proposed``; one pinned definition digest is then
altered (as if the upstream had changed its tool after approval). Each (client, upstream) pair
runs one scenario in one gateway session, with every flow in it:

    read allowed · write outside policy denied (no commit / no file) · schema-invalid call
    rejected · confirmation accepted (runs once) · confirmation declined (never runs) · changed
    definition refused (and absent from tools/list) · retried write runs once (client key in
    ``_meta``) · an identical write without a key runs again · canary secret never in anything
    the client sees

The TS client also runs the core flows once over streamable HTTP to ``callgate mcp serve
--transport http`` with a bearer token. Each flow is checked separately and recorded in a matrix
(client × upstream × flow -> result), printed at the end of the module's run (the "Tested with"
section of docs/MCP.md has it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import short_tmpdir
from tests.mcp_clients import FILESYSTEM_JS, Event, Run, result_text, run_python, run_ts
from tests.mcp_env import ROOT, Published, cli, terminate, write_config, write_policies
from tests.test_mcp_upstreams import commits, git, make_repo

CANARY = "canary-9f3b1c7e-published"
TOKEN = "tok-published-3e9a-Hc7Nw2Qz5Lr8Vm"  # the HTTP gateway's static bearer token for alice
KEY_META = "io.callgate/idempotency-key"

pytestmark = pytest.mark.timeout(600)

GIT_ACTIONS = {
    "git_status": ("read", "repo_path: String"),
    "git_show": ("read", "repo_path: String, revision: String"),
    "git_log": (
        "read",
        "repo_path: String, max_count?: Long, start_timestamp?: String, end_timestamp?: String",
    ),
    "git_add": ("create", "repo_path: String, files: Set<String>"),
    "git_commit": ("create", "repo_path: String, message: String"),
    "git_create_branch": ("create", "repo_path: String, branch_name: String, base_branch?: String"),
    "git_reset": ("modify", "repo_path: String"),
}
GIT_POLICIES = """
@id("git-read")
permit (principal == User::"alice", action in Action::"read", resource);

@id("git-stage-and-commit")
permit (principal == User::"alice", action in [Action::"mcp.git.git_add", Action::"mcp.git.git_commit"], resource);

@id("git-no-forbidden-commits")
forbid (principal, action == Action::"mcp.git.git_commit", resource)
when { context.args.message like "*forbidden*" };

@id("git-branch-needs-user")
@confirm("creating a branch needs the user's confirmation")
permit (principal == User::"alice", action == Action::"mcp.git.git_create_branch", resource);
"""

FS_TOOLS_USED = {
    "read_text_file": ("read", "path: String, head?: decimal, tail?: decimal"),  # JSON numbers
    "get_file_info": ("read", "path: String"),
    "list_directory": ("read", "path: String"),
    "write_file": ("modify", "path: String, content: String"),
}
FS_POLICIES = """
@id("fs-read")
permit (principal == User::"alice", action in Action::"read", resource);

@id("fs-notes")
permit (principal == User::"alice", action == Action::"mcp.fs.write_file", resource)
when { context.args.path like "*/notes/*" };

@id("fs-important-needs-user")
@confirm("overwriting an important file needs the user's confirmation")
permit (principal == User::"alice", action == Action::"mcp.fs.write_file", resource)
when { context.args.path like "*/important/*" };

@id("fs-no-forbidden")
forbid (principal, action == Action::"mcp.fs.write_file", resource)
when { context.args.path like "*forbidden*" };
"""


@pytest.fixture(scope="module")
def git_env() -> Iterator[Published]:
    base = short_tmpdir()
    repo = make_repo(base / "repo")
    write_policies(base, {"git": GIT_ACTIONS}, GIT_POLICIES)
    config = write_config(
        base,
        f"""
[[mcp.upstreams]]
name = "git"
command = {json.dumps(str(Path(sys.executable).with_name("mcp-server-git")))}
args = ["--repository", {json.dumps(str(repo))}]
timeout_seconds = 30.0
""",
        tokens={TOKEN: "alice"},
    )
    env = Published(base, config, repo)
    env.import_pins()
    env.alter_pin("git.git_show")
    yield env
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def fs_env() -> Iterator[Published]:
    assert FILESYSTEM_JS.is_file(), f"{FILESYSTEM_JS} missing: run scripts/mcp-node install"
    base = short_tmpdir()
    root, root2 = base / "files", base / "files2"
    for d in (root / "notes", root / "important", root2):
        d.mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (base / "canary.txt").write_text(CANARY + "\n")
    write_policies(
        base,
        {"fs": FS_TOOLS_USED, "fsec": {"read_text_file": FS_TOOLS_USED["read_text_file"]}},
        FS_POLICIES + '\n@id("fsec-read")\npermit (principal == User::"alice", action == '
        'Action::"mcp.fsec.read_text_file", resource);\n',
    )
    # fsec: a wrapper that writes the secret it was given into a file the server then serves
    # (only when it has it: the gateway's listing connection runs without secrets).
    wrapper = (
        'if [ -n "$FS_CANARY" ]; then printf "token=%s\\n" "$FS_CANARY" > "$1/leak.txt"; '
        'printf yes > "$1/../fsec-got-secret"; fi; exec node "$2" "$1"'
    )
    config = write_config(
        base,
        f"""
[[mcp.upstreams]]
name = "fs"
command = "node"
args = [{json.dumps(str(FILESYSTEM_JS))}, {json.dumps(str(root))}]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "fsec"
command = "sh"
args = ["-c", {json.dumps(wrapper)}, "fsec", {json.dumps(str(root2))}, {json.dumps(str(FILESYSTEM_JS))}]
env = {{ FS_CANARY = {{ secret = "canary" }} }}
timeout_seconds = 30.0
""",
        head='\n[[secrets]]\nname = "canary"\nfile = "canary.txt"\ntools = ["fsec.read_text_file"]\n',
    )
    env = Published(base, config, root, root2)
    env.import_pins()
    env.alter_pin("fs.get_file_info")
    yield env
    shutil.rmtree(base, ignore_errors=True)


# --- the matrix ---------------------------------------------------------------------------------

MATRIX: dict[tuple[str, str, str], str] = {}
"""(client, upstream, flow) -> "ok ..." or "FAIL ..."; printed at the end of the module."""

FLOWS = (
    "list",
    "read allowed",
    "write denied",
    "schema rejected",
    "confirm accepted",
    "confirm declined",
    "definition changed",
    "retry once (key)",
    "identical write runs again",
    "replay answered",
    "secret hidden",
)


@pytest.fixture(scope="module", autouse=True)
def print_matrix(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not MATRIX:
        return
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    lines = matrix_lines()
    if reporter is None or capture is None:  # pragma: no cover
        print("\n".join(lines))
        return
    with capture.global_and_fixture_disabled():  # shown in the run's output, not only on -rA
        for line in lines:
            reporter.write_line(line)


def matrix_lines() -> list[str]:
    pairs = sorted({(c, u) for c, u, _ in MATRIX})
    head = "| flow | " + " | ".join(f"{c} × {u}" for c, u in pairs) + " |"
    out = ["", "MCP published upstreams: client × upstream × flow", head, "|---" * (len(pairs) + 1) + "|"]
    for flow in FLOWS:
        cells = [_cell(MATRIX.get((c, u, flow), "-")) for c, u in pairs]
        if all(c == "-" for c in cells):
            continue
        out.append(f"| {flow} | " + " | ".join(cells) + " |")
    fails = [f"{c} × {u} × {f}: {r}" for (c, u, f), r in sorted(MATRIX.items()) if not r.startswith("ok")]
    gaps = {
        f"known gap: {u} × {f}: {why}"
        for (u, f), why in KNOWN_GAPS.items()
        for (_, u2, f2) in MATRIX
        if (u2, f2) == (u, f)
    }
    fails += sorted(gaps)
    return out + fails


KNOWN_GAPS: dict[tuple[str, str], str] = {}
"""(upstream, flow) -> why it fails today. Such a flow is recorded as a known gap and the test is
an expected failure (xfail) with that reason; when the flow passes, the test fails until the
entry is removed. Every other failed flow fails the test."""


def _cell(result: str) -> str:
    if result.startswith("KNOWN"):
        return "known gap"
    return "FAIL" if result.startswith("FAIL") else result


def brief(event: Event) -> str:
    """One line about a client event, for failure messages."""
    what = event.get("event")
    if what == "result":
        return f"result isError={event.get('isError')} {result_text(event)[:300]!r}"
    if what == "error":
        return f"JSON-RPC error {event.get('code')} {str(event.get('message'))[:300]!r}"
    return json.dumps(event)[:300]


class Flows:
    """Checks one pair's flows independently; a failed flow is recorded and reported at the end."""

    def __init__(self, client: str, upstream: str, run: Run) -> None:
        self.client, self.upstream, self.run = client, upstream, run
        self.failed: list[str] = []
        self.known: list[str] = []

    def check(self, flow: str, fn: Callable[[], str | None]) -> None:
        try:
            note = fn() or ""
            MATRIX[(self.client, self.upstream, flow)] = "ok" + (f" ({note})" if note else "")
        except AssertionError as exc:
            why = " ".join(str(exc).split())[:400]
            known = (self.upstream, flow) in KNOWN_GAPS
            MATRIX[(self.client, self.upstream, flow)] = f"{'KNOWN' if known else 'FAIL'}: {why}"
            (self.known if known else self.failed).append(f"{flow}: {why}")

    def done(self) -> None:
        assert not self.failed, f"{self.client} × {self.upstream}: " + "; ".join(self.failed)
        fixed = [
            flow
            for (upstream, flow) in KNOWN_GAPS
            if upstream == self.upstream and MATRIX.get((self.client, upstream, flow), "").startswith("ok")
        ]
        assert not fixed, f"known gaps now pass, remove them from KNOWN_GAPS: {fixed}"
        if self.known:
            reasons = "; ".join(KNOWN_GAPS[(self.upstream, k.split(":")[0])] for k in self.known)
            pytest.xfail(f"{self.client} × {self.upstream}: known gap: {reasons}")


def status(event: Event) -> dict[str, Any]:
    """The JSON status document of a gateway refusal (``{"status": ..., "code": ...}``), or {}."""
    try:
        doc = json.loads(result_text(event))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def replayed(run: Run, first: str, retry: str) -> None:
    """The retry of ``first`` is answered like it (an ok result, structured content included
    when the first had it: a client validates it against the tool's outputSchema)."""
    a, b = run.outcome(first), run.outcome(retry)
    assert ok(b), f"{retry}: {brief(b)}"
    if a.get("structuredContent") is not None:
        assert b.get("structuredContent") is not None, f"{retry}: replay without structuredContent"


def elicited(run: Run, step: str) -> list[Event]:
    return [e for e in run.step(step) if e.get("event") == "elicitation"]


def legal(name: str) -> str:
    """The client-facing name of ``<upstream>.<tool>`` (dots are not legal in MCP tool names)."""
    return name.replace(".", "__")


@dataclass(frozen=True)
class Client:
    """One MCP client implementation (and mode) of the matrix."""

    label: str
    run: Callable[..., Run]
    extra: tuple[tuple[str, str], ...] = ()
    """Scenario members for this client (the Python SDK client's protocol ``python_mode``)."""

    def __call__(self, scenario: dict[str, Any], **kw: Any) -> Run:
        return self.run({**scenario, **dict(self.extra)}, **kw)

    @property
    def n(self) -> int:
        """A small number per client: makes its read arguments its own."""
        return {"python": 1, "python-auto": 2, "ts": 3}[self.label]

    @property
    def who(self) -> str:
        return self.label.replace("python", "py")

    @property
    def modern(self) -> bool:
        """Negotiates 2026-07-28 (the Python SDK's default ``mode="auto"``), where a server
        cannot send a request in the middle of a call: the gateway asks the confirmation through
        the ``InputRequiredResult`` round trip instead (the client's elicitation callback answers
        it, then the SDK retries the call with the answer and the sealed ``requestState``)."""
        return ("python_mode", "auto") in self.extra


PYTHON = Client("python", run_python, (("python_mode", "legacy"),))
"""The Python SDK client with the initialize handshake (2025-11-25), as ``ClientSession`` does."""
PYTHON_AUTO = Client("python-auto", run_python, (("python_mode", "auto"),))
"""The Python SDK client's default mode (negotiates 2026-07-28 with an SDK 2.3 server)."""
TS = Client("ts", run_ts)
"""The TypeScript SDK client (1.32, protocol 2025-11-25), through tests/mcp_node/harness.mjs."""

CLIENTS = [
    pytest.param(PYTHON, id="python"),
    pytest.param(TS, id="ts", marks=pytest.mark.node),
]


def ok(event: Event) -> bool:
    return event.get("event") == "result" and event.get("isError") is False


def refused(event: Event) -> bool:
    """An ``isError`` tool result (a refusal the client can show), not a JSON-RPC error."""
    return event.get("event") == "result" and event.get("isError") is True


# --- git ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", [*CLIENTS, pytest.param(PYTHON_AUTO, id="python-auto")])
def test_git_through_gateway(client: Client, git_env: Published) -> None:
    repo = git_env.data
    who = client.who
    for name in (f"staged-{who}.txt", f"second-{who}.txt", f"derived-{who}.txt"):
        (repo / name).write_text(f"{name}\n")
    before_commits = commits(repo)
    before_branches = set(git(repo, "branch", "--format=%(refname:short)").split())
    rp = str(repo)
    key = f"retry-{who}-{os.getpid()}"
    steps: list[dict[str, Any]] = [
        {"op": "list_tools", "id": "list"},
        {
            "op": "call",
            "id": "read",
            "name": legal("git.git_log"),
            "arguments": {"repo_path": rp, "max_count": client.n},
        },
        {
            "op": "call",
            "id": "add1",
            "name": legal("git.git_add"),
            "arguments": {"repo_path": rp, "files": [f"staged-{who}.txt"]},
        },
        {
            "op": "call",
            "id": "denied",
            "name": legal("git.git_commit"),
            "arguments": {"repo_path": rp, "message": f"forbidden commit {who}"},
        },
        {"op": "call", "id": "schema", "name": legal("git.git_commit"), "arguments": {"repo_path": rp}},
        {
            "op": "call",
            "id": "schema2",
            "name": legal("git.git_add"),
            "arguments": {"repo_path": rp, "files": []},
        },
        {
            "op": "call",
            "id": "confirm-yes",
            "name": legal("git.git_create_branch"),
            "arguments": {"repo_path": rp, "branch_name": f"yes-{who}"},
            "elicitation": "accept",
        },
        {
            "op": "call",
            "id": "confirm-no",
            "name": legal("git.git_create_branch"),
            "arguments": {"repo_path": rp, "branch_name": f"no-{who}"},
            "elicitation": "decline",
        },
        {
            "op": "call",
            "id": "changed",
            "name": legal("git.git_show"),
            "arguments": {"repo_path": rp, "revision": "HEAD"},
        },
        # the retried write: commit, stage something else, the same commit again with the same key
        # (a second run would commit the newly staged file under the same message)
        {
            "op": "call",
            "id": "retry1",
            "name": legal("git.git_commit"),
            "arguments": {"repo_path": rp, "message": f"retry {who}"},
            "meta": {KEY_META: key},
        },
        {
            "op": "call",
            "id": "add2",
            "name": legal("git.git_add"),
            "arguments": {"repo_path": rp, "files": [f"second-{who}.txt"]},
        },
        {
            "op": "call",
            "id": "retry2",
            "name": legal("git.git_commit"),
            "arguments": {"repo_path": rp, "message": f"retry {who}"},
            "meta": {KEY_META: key},
        },
        # the same without a client key: another request, so a new call that runs again
        # (only a retry of the same request is deduplicated: docs/MCP.md, "Idempotency")
        {
            "op": "call",
            "id": "derived1",
            "name": legal("git.git_commit"),
            "arguments": {"repo_path": rp, "message": f"derived {who}"},
        },
        {
            "op": "call",
            "id": "add3",
            "name": legal("git.git_add"),
            "arguments": {"repo_path": rp, "files": [f"derived-{who}.txt"]},
        },
        {
            "op": "call",
            "id": "derived2",
            "name": legal("git.git_commit"),
            "arguments": {"repo_path": rp, "message": f"derived {who}"},
        },
    ]
    run = client({"server": git_env.gateway(), "elicitation": "cancel", "steps": steps}, timeout=240)
    assert run.finished, run.events
    log = git(repo, "log", "--format=%s").splitlines()
    branches = set(git(repo, "branch", "--format=%(refname:short)").split())
    staged = set(git(repo, "diff", "--cached", "--name-only").split())
    f = Flows(client.label, "mcp-server-git", run)

    def listed() -> str:
        names = {t["name"] for t in run.tools()}
        assert legal("git.git_status") in names and legal("git.git_commit") in names, sorted(names)
        assert legal("git.git_show") not in names, "a tool whose definition changed is still listed"
        assert all("." not in n for n in names), sorted(names)
        return f"{len(names)} tools"

    def read() -> None:
        out = run.outcome("read")
        assert ok(out), brief(out)
        assert "Commit history" in result_text(out), brief(out)

    def denied() -> None:
        out = run.outcome("denied")
        assert refused(out) and status(out).get("status") == "denied", brief(out)
        assert status(out).get("reasons") == ["policy_forbid"], out
        assert not any("forbidden" in m for m in log), log

    def schema() -> None:
        for step in ("schema", "schema2"):
            out = run.outcome(step)
            assert refused(out) and status(out).get("code") == "schema_violation", brief(out)

    def confirm_yes() -> str | None:
        asked = elicited(run, "confirm-yes")
        out = run.outcome("confirm-yes")
        assert len(asked) == 1 and asked[0]["action"] == "accept", [brief(e) for e in run.step("confirm-yes")]
        assert f"yes-{who}" in asked[0]["message"], asked[0]["message"]  # the normalized arguments
        assert "digest: sha256:" in asked[0]["message"], asked[0]["message"]
        assert ok(out), brief(out)
        assert f"yes-{who}" in branches, branches
        return "input_required round trip" if client.modern else None

    def confirm_no() -> str | None:
        asked = elicited(run, "confirm-no")
        out = run.outcome("confirm-no")
        assert f"no-{who}" not in branches, branches
        assert len(asked) == 1 and asked[0]["action"] == "decline", [brief(e) for e in run.step("confirm-no")]
        assert refused(out) and status(out).get("code") == "confirmation_declined", brief(out)
        return "input_required round trip" if client.modern else None

    def changed() -> None:
        out = run.outcome("changed")
        assert refused(out) and status(out).get("code") == "upstream_definition_changed", brief(out)

    def retry_key() -> str:
        assert ok(run.outcome("retry1")), brief(run.outcome("retry1"))
        assert log.count(f"retry {who}") == 1, log  # a second run would have committed second-*.txt
        return "1 commit"

    def runs_again() -> str:
        for step in ("derived1", "derived2"):
            assert ok(run.outcome(step)), f"{step}: {brief(run.outcome(step))}"
        assert log.count(f"derived {who}") == 2, log
        assert f"derived-{who}.txt" not in staged, staged  # the second run committed it
        return "2 commits"

    def replay() -> None:
        replayed(run, "retry1", "retry2")

    f.check("list", listed)
    f.check("read allowed", read)
    f.check("write denied", denied)
    f.check("schema rejected", schema)
    f.check("confirm accepted", confirm_yes)
    f.check("confirm declined", confirm_no)
    f.check("definition changed", changed)
    f.check("retry once (key)", retry_key)
    f.check("identical write runs again", runs_again)
    f.check("replay answered", replay)
    new_branches = branches - before_branches
    assert new_branches <= {f"yes-{who}"}, new_branches
    assert commits(repo) - before_commits <= 3, log
    git(repo, "reset", "-q")  # leave nothing staged for the other client
    f.done()


# --- filesystem ---------------------------------------------------------------------------------


@pytest.mark.node
@pytest.mark.parametrize("client", CLIENTS)
def test_filesystem_through_gateway(client: Client, fs_env: Published) -> None:
    root = fs_env.data
    assert fs_env.data2 is not None
    who = client.who
    (root / f"a-{who}.txt").write_text(f"alpha {who}\n")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    key = f"fs-retry-{who}-{os.getpid()}"
    note = str(root / "notes" / f"retry-{who}.txt")
    note2 = str(root / "notes" / f"derived-{who}.txt")
    steps: list[dict[str, Any]] = [
        {"op": "list_tools", "id": "list"},
        {
            "op": "call",
            "id": "read",
            "name": legal("fs.read_text_file"),
            "arguments": {"path": str(root / f"a-{who}.txt")},
        },
        {
            "op": "call",
            "id": "denied",
            "name": legal("fs.write_file"),
            "arguments": {"path": str(root / "notes" / f"forbidden-{who}.txt"), "content": "x"},
        },
        {
            "op": "call",
            "id": "outside",
            "name": legal("fs.write_file"),
            "arguments": {"path": str(root / f"top-{who}.txt"), "content": "x"},
        },
        {"op": "call", "id": "schema", "name": legal("fs.write_file"), "arguments": {"path": note}},
        {
            "op": "call",
            "id": "confirm-yes",
            "name": legal("fs.write_file"),
            "arguments": {"path": str(root / "important" / f"yes-{who}.txt"), "content": "confirmed\n"},
            "elicitation": "accept",
        },
        {
            "op": "call",
            "id": "confirm-no",
            "name": legal("fs.write_file"),
            "arguments": {"path": str(root / "important" / f"no-{who}.txt"), "content": "declined\n"},
            "elicitation": "decline",
        },
        {
            "op": "call",
            "id": "changed",
            "name": legal("fs.get_file_info"),
            "arguments": {"path": str(root / "a.txt")},
        },
        # retried write: "one" (key K), then "two" (another call), then "one" again with key K: a
        # replay leaves "two", a second run would write "one" again
        {
            "op": "call",
            "id": "retry1",
            "name": legal("fs.write_file"),
            "arguments": {"path": note, "content": "one\n"},
            "meta": {KEY_META: key},
        },
        {
            "op": "call",
            "id": "between",
            "name": legal("fs.write_file"),
            "arguments": {"path": note, "content": "two\n"},
        },
        {
            "op": "call",
            "id": "retry2",
            "name": legal("fs.write_file"),
            "arguments": {"path": note, "content": "one\n"},
            "meta": {KEY_META: key},
        },
        {
            "op": "call",
            "id": "derived1",
            "name": legal("fs.write_file"),
            "arguments": {"path": note2, "content": "one\n"},
        },
        {
            "op": "call",
            "id": "between2",
            "name": legal("fs.write_file"),
            "arguments": {"path": note2, "content": "two\n"},
        },
        {
            "op": "call",
            "id": "derived2",
            "name": legal("fs.write_file"),
            "arguments": {"path": note2, "content": "one\n"},
        },
        # the canary: fsec's upstream got it in its environment and serves it in leak.txt
        {
            "op": "call",
            "id": "secret",
            "name": legal("fsec.read_text_file"),
            "arguments": {"path": str(fs_env.data2 / "leak.txt"), "head": client.n},
        },
    ]
    run = client({"server": fs_env.gateway(), "elicitation": "cancel", "steps": steps}, timeout=240)
    assert run.finished, run.events
    after = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    f = Flows(client.label, "server-filesystem", run)

    def listed() -> str:
        names = {t["name"] for t in run.tools()}
        assert legal("fs.read_text_file") in names and legal("fs.write_file") in names, sorted(names)
        assert legal("fs.get_file_info") not in names, "a tool whose definition changed is still listed"
        return f"{len(names)} tools"

    def read() -> None:
        out = run.outcome("read")
        assert ok(out) and f"alpha {who}" in result_text(out), brief(out)

    def denied() -> None:
        out = run.outcome("denied")
        assert refused(out) and status(out).get("status") == "denied", brief(out)
        assert status(out).get("reasons") == ["policy_forbid"], out
        out2 = run.outcome("outside")
        assert refused(out2) and status(out2).get("status") == "denied", brief(out2)
        assert f"notes/forbidden-{who}.txt" not in after and f"top-{who}.txt" not in after, after

    def schema() -> None:
        out = run.outcome("schema")
        assert refused(out) and status(out).get("code") == "schema_violation", brief(out)

    def confirm_yes() -> None:
        asked = elicited(run, "confirm-yes")
        assert len(asked) == 1 and asked[0]["action"] == "accept", [brief(e) for e in run.step("confirm-yes")]
        assert ok(run.outcome("confirm-yes")), brief(run.outcome("confirm-yes"))
        assert (root / "important" / f"yes-{who}.txt").read_text() == "confirmed\n"

    def confirm_no() -> None:
        asked = elicited(run, "confirm-no")
        assert len(asked) == 1 and asked[0]["action"] == "decline", [brief(e) for e in run.step("confirm-no")]
        out = run.outcome("confirm-no")
        assert refused(out) and status(out).get("code") == "confirmation_declined", brief(out)
        assert not (root / "important" / f"no-{who}.txt").exists()

    def changed() -> None:
        out = run.outcome("changed")
        assert refused(out) and status(out).get("code") == "upstream_definition_changed", brief(out)

    def retry_key() -> str:
        for step in ("retry1", "between"):
            assert ok(run.outcome(step)), f"{step}: {brief(run.outcome(step))}"
        assert Path(note).read_text() == "two\n", "the retried write ran again"
        return "ran once"

    def runs_again() -> str:
        for step in ("derived1", "between2", "derived2"):
            assert ok(run.outcome(step)), f"{step}: {brief(run.outcome(step))}"
        assert Path(note2).read_text() == "one\n", "the second identical write did not run"
        return "ran twice"

    def replay() -> None:
        replayed(run, "retry1", "retry2")

    def secret() -> str:
        assert fs_env.data2 is not None
        assert (fs_env.data2.parent / "fsec-got-secret").exists(), "the upstream never got the secret"
        out = run.outcome("secret")
        seen = run.text() + run.stderr
        assert CANARY not in seen, "the canary reached the client"
        return "redacted" if ok(out) else f"refused {status(out).get('code')}"

    f.check("list", listed)
    f.check("read allowed", read)
    f.check("write denied", denied)
    f.check("schema rejected", schema)
    f.check("confirm accepted", confirm_yes)
    f.check("confirm declined", confirm_no)
    f.check("definition changed", changed)
    f.check("retry once (key)", retry_key)
    f.check("identical write runs again", runs_again)
    f.check("replay answered", replay)
    f.check("secret hidden", secret)
    new = set(after) - set(before)
    expected = {f"important/yes-{who}.txt", f"notes/retry-{who}.txt", f"notes/derived-{who}.txt"}
    assert new <= expected, sorted(new - expected)
    f.done()


def test_the_hand_declared_git_actions_are_what_import_generates(git_env: Published) -> None:
    """This module declares its git actions by hand (GIT_ACTIONS), so it never exercised the
    generated declarations: ``git_log``'s ``Optional[str] = None`` arguments (Pydantic's nullable
    ``anyOf``) had no policy type there and the tool was not served without a hand edit. The
    record each pinned ToolSpec generates must be the one written here
    (tests/test_mcp_every_tool.py serves every tool from generated actions only)."""
    from callgate.policy.declare import tool_declaration

    for tool, (_, args) in GIT_ACTIONS.items():
        decl = tool_declaration(git_env.tools_dir / f"git.{tool}@v1.json")
        assert decl.error is None and not decl.unseen, (tool, decl.error, decl.unseen)
        assert decl.args is not None
        assert decl.args.cedar() == "{ " + ", ".join(sorted(a.strip() for a in args.split(", "))) + " }", tool


def test_check_reports_the_changed_pin(git_env: Published) -> None:
    """``callgate mcp check`` names the altered pin and exits non-zero."""
    proc = cli(git_env.base, "mcp", "check", "--config", str(git_env.config))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "changed git.git_show" in proc.stdout, proc.stdout


@pytest.mark.node
def test_ts_client_over_http_gateway(git_env: Published) -> None:
    """The TS client over streamable HTTP to ``callgate mcp serve --transport http`` with its
    bearer token (a request without one never gets a session), fronting mcp-server-git."""
    repo, rp = git_env.data, str(git_env.data)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = git_env.base / "http-gateway.log"
    with log.open("wb") as err:
        gw = subprocess.Popen(
            [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(git_env.config)]
            + ["--transport", "http", "--listen", f"127.0.0.1:{port}"],
            cwd=git_env.base,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert gw.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        anonymous = run_ts({"server": {"url": url}, "steps": [{"op": "list_tools"}]}, check=False)
        assert not anonymous.finished and anonymous.of("connect_error"), anonymous.events
        run = run_ts(
            {
                "server": {"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}},
                "elicitation": "cancel",
                "steps": [
                    {"op": "list_tools", "id": "list"},
                    {
                        "op": "call",
                        "id": "read",
                        "name": legal("git.git_log"),
                        "arguments": {"repo_path": rp, "max_count": 9},
                    },
                    {
                        "op": "call",
                        "id": "denied",
                        "name": legal("git.git_commit"),
                        "arguments": {"repo_path": rp, "message": "forbidden over http"},
                    },
                    {
                        "op": "call",
                        "id": "confirm-yes",
                        "name": legal("git.git_create_branch"),
                        "arguments": {"repo_path": rp, "branch_name": "http-yes"},
                        "elicitation": "accept",
                    },
                    {
                        "op": "call",
                        "id": "confirm-no",
                        "name": legal("git.git_create_branch"),
                        "arguments": {"repo_path": rp, "branch_name": "http-no"},
                        "elicitation": "decline",
                    },
                ],
            },
            timeout=180,
        )
    finally:
        terminate(gw)
    assert run.finished, run.events
    branches = set(git(repo, "branch", "--format=%(refname:short)").split())
    f = Flows("ts-http", "mcp-server-git", run)

    def listed() -> str:
        names = {t["name"] for t in run.tools()}
        assert legal("git.git_log") in names and legal("git.git_show") not in names, sorted(names)
        return f"{len(names)} tools"

    def read() -> None:
        out = run.outcome("read")
        assert ok(out) and "Commit history" in result_text(out), brief(out)

    def denied() -> None:
        out = run.outcome("denied")
        assert refused(out) and status(out).get("reasons") == ["policy_forbid"], brief(out)
        assert "forbidden over http" not in git(repo, "log", "--format=%s")

    def confirm_yes() -> None:
        asked = elicited(run, "confirm-yes")
        assert len(asked) == 1 and asked[0]["action"] == "accept", [brief(e) for e in run.step("confirm-yes")]
        assert ok(run.outcome("confirm-yes")), brief(run.outcome("confirm-yes"))
        assert "http-yes" in branches, branches

    def confirm_no() -> None:
        asked = elicited(run, "confirm-no")
        assert len(asked) == 1 and asked[0]["action"] == "decline", [brief(e) for e in run.step("confirm-no")]
        out = run.outcome("confirm-no")
        assert refused(out) and status(out).get("code") == "confirmation_declined", brief(out)
        assert "http-no" not in branches, branches

    f.check("list", listed)
    f.check("read allowed", read)
    f.check("write denied", denied)
    f.check("confirm accepted", confirm_yes)
    f.check("confirm declined", confirm_no)
    assert TOKEN not in run.text()
    f.done()
