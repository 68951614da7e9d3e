"""The published MCP servers and both MCP clients, without the gateway (issue 11, upstream sanity).

The MCP gateway tests (tests/test_mcp_published.py) put ``callgate mcp serve`` between a client
and these upstreams; this module proves the parts themselves are installed and driven correctly,
so a failure there points at the gateway and not at the harness:

* ``mcp-server-git`` (PyPI, the venv's console script) on a temporary repository: its tools are
  listed, a read runs, and ``git_add`` + ``git_commit`` make one real commit;
* ``@modelcontextprotocol/server-filesystem`` (npm, its installed ``dist/index.js`` run with node)
  on a temporary folder: a read and a write, the file appears;
* a small SDK server that asks for confirmation (tests/data/mcp/elicit_server.py): each client
  answers elicitation per its scripted choice (accept runs the action, decline does not), over
  stdio and over streamable HTTP.

Each runs with the official Python SDK client and with the TypeScript SDK client (the node
harness, marker ``node``; server-filesystem needs node too).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mcp_clients import Run, filesystem_server, git_server, result_text, run_python, run_ts
from tests.mcp_env import terminate

DATA = Path(__file__).resolve().parent / "data" / "mcp"

CLIENT_PARAMS = [
    pytest.param(run_python, id="python"),
    pytest.param(run_ts, id="ts", marks=pytest.mark.node),
]

GIT_TOOLS = {"git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_commit", "git_add"}
FS_TOOLS = {"read_text_file", "write_file", "edit_file", "list_directory", "move_file"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@callgate.invalid")
    git(path, "config", "user.name", "callgate test")
    (path / "README").write_text("seed\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "seed")
    return path


def commits(repo: Path) -> int:
    return int(git(repo, "rev-list", "--count", "HEAD"))


@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_git_upstream_direct(client: Callable[..., Run], tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "new.txt").write_text("hello\n")
    run = client(
        {
            "server": git_server(repo),
            "steps": [
                {"op": "list_tools"},
                {"op": "call", "id": "status", "name": "git_status", "arguments": {"repo_path": str(repo)}},
                {
                    "op": "call",
                    "id": "add",
                    "name": "git_add",
                    "arguments": {"repo_path": str(repo), "files": ["new.txt"]},
                },
                {
                    "op": "call",
                    "id": "commit",
                    "name": "git_commit",
                    "arguments": {"repo_path": str(repo), "message": "from mcp"},
                },
                {"op": "call", "id": "bad", "name": "git_status", "arguments": {}},
            ],
        }
    )
    assert run.finished, run.events
    tools = {t["name"]: t for t in run.tools()}
    assert GIT_TOOLS <= set(tools), sorted(tools)
    assert all("repo_path" in t["inputSchema"]["properties"] for t in tools.values())
    assert tools["git_status"]["annotations"]["readOnlyHint"] is True
    status = run.outcome("status")
    assert status["event"] == "result" and not status["isError"] and "new.txt" in result_text(status)
    assert not run.outcome("add")["isError"] and not run.outcome("commit")["isError"]
    assert commits(repo) == 2 and git(repo, "log", "-1", "--format=%s") == "from mcp"
    assert run.outcome("bad")["isError"] is True  # the upstream itself rejects a missing repo_path


@pytest.mark.node
@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_filesystem_upstream_direct(client: Callable[..., Run], tmp_path: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    outside = tmp_path / "outside.txt"
    run = client(
        {
            "server": filesystem_server(root),
            "steps": [
                {"op": "list_tools"},
                {
                    "op": "call",
                    "id": "read",
                    "name": "read_text_file",
                    "arguments": {"path": str(root / "a.txt")},
                },
                {
                    "op": "call",
                    "id": "write",
                    "name": "write_file",
                    "arguments": {"path": str(root / "b.txt"), "content": "beta\n"},
                },
                {
                    "op": "call",
                    "id": "escape",
                    "name": "write_file",
                    "arguments": {"path": str(outside), "content": "no\n"},
                },
            ],
        }
    )
    assert run.finished, run.events
    tools = {t["name"]: t for t in run.tools()}
    assert FS_TOOLS <= set(tools), sorted(tools)
    assert tools["write_file"]["annotations"]["destructiveHint"] is True
    assert tools["read_text_file"]["outputSchema"]["type"] == "object"
    read = run.outcome("read")
    assert not read["isError"] and read["structuredContent"] == {"content": "alpha\n"}
    assert not run.outcome("write")["isError"] and (root / "b.txt").read_text() == "beta\n"
    assert run.outcome("escape")["isError"] is True and not outside.exists()  # its own root check
    assert sorted(p.name for p in root.iterdir()) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("choice", ["accept", "decline"])
@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_clients_answer_elicitation(client: Callable[..., Run], choice: str) -> None:
    run = client(
        {
            "server": {"command": sys.executable, "args": [str(DATA / "elicit_server.py")]},
            "elicitation": choice,
            "steps": [{"op": "call", "id": "act", "name": "act", "arguments": {"what": "x"}}],
        }
    )
    asked = run.of("elicitation")
    assert len(asked) == 1 and asked[0]["action"] == choice and asked[0]["step"] == 0, run.events
    assert "confirm" in asked[0]["requestedSchema"]["properties"]
    text = result_text(run.outcome("act"))
    assert text == ("done x" if choice == "accept" else "not done x (decline)")


@pytest.fixture(scope="module")
def elicit_http() -> Iterator[str]:
    """tests/data/mcp/elicit_server.py over streamable HTTP; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, str(DATA / "elicit_server.py"), "--http", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        terminate(proc)


@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_clients_over_streamable_http(client: Callable[..., Run], elicit_http: str) -> None:
    """Both clients reach a streamable HTTP server (with request headers, as a bearer token
    would be sent) and answer its elicitation there too."""
    run = client(
        {
            "server": {"url": elicit_http, "headers": {"Authorization": "Bearer test-token"}},
            "elicitation": "accept",
            "steps": [
                {"op": "list_tools"},
                {"op": "call", "id": "act", "name": "act", "arguments": {"what": "y"}},
            ],
        }
    )
    assert [t["name"] for t in run.tools()] == ["act"]
    assert [e["action"] for e in run.of("elicitation")] == ["accept"]
    assert result_text(run.outcome("act")) == "done y"
