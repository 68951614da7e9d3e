"""Every tool of seven published MCP servers, imported as a new user would and called once through
the real gateway (docs/MCP.md, "Arguments as policies see them"; "Upstream × MCP feature").

Upstreams: PyPI ``mcp-server-git`` (FastMCP/Pydantic: ``Optional[str] = None`` arguments are a
nullable ``anyOf``), ``mcp-server-fetch`` (on a page a local HTTP server of this test serves) and
``mcp-server-time`` from the venv; npm ``server-filesystem``, ``server-everything``,
``server-memory`` and ``server-sequential-thinking`` (tests/mcp_node; its ``outputSchema`` and
structured result pass through). ``callgate mcp import --accept-proposed`` then ``callgate
check``: no hand edit, no hand-written schema (every action generated), no "not generated", and
no warning but three: sequential-thinking's booleans are zod's ``type: ["boolean", "string"]``, a
union of two policy types, each left out of ``context.args`` with one warning (before, three git
tools were "not generated" and not served). Then one session of the official MCP
Python SDK client over stdio to ``callgate mcp serve``: every imported tool is in tools/list and
is called once (writes in this test's folders), never refused by the gateway.

And ``git_log`` decided by a policy that reads ``context.args has start_timestamp``: given, the
forbid denies it; ``null`` or absent, the policy sees no ``start_timestamp`` and the log runs.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import short_tmpdir
from tests.mcp_clients import FILESYSTEM_JS, NODE_DIR
from tests.mcp_env import Published, cli, payload, run, stdio_gateway, text_of, write_config, write_principals
from tests.test_mcp_upstreams import git, make_repo

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent
MODULES = NODE_DIR / "node_modules" / "@modelcontextprotocol"
EVERYTHING_JS = MODULES / "server-everything" / "dist" / "index.js"
MEMORY_JS = MODULES / "server-memory" / "dist" / "index.js"
THINK_JS = MODULES / "server-sequential-thinking" / "dist" / "index.js"
# sequential-thinking's booleans are zod's ``type: ["boolean", "string"]`` (it accepts "true"):
# a union of two policy types, left out of context.args (a warning each), the tool still served
LEFT_OUT = ("isRevision", "needsMoreThoughts", "nextThoughtNeeded")
# a 1x1 PNG (read_media_file)
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

POLICIES = """
@id("alice-all")
permit (principal == User::"alice", action, resource);

@id("no-log-window")
forbid (principal, action == Action::"mcp.git.git_log", resource)
when { context.args has start_timestamp };

@id("no-long-thinking")
forbid (principal, action == Action::"mcp.think.sequentialthinking", resource)
when { context.args.totalThoughts > 50 };
"""


@pytest.fixture(scope="module")
def page() -> Iterator[str]:
    """A local page for ``fetch`` (the test runs offline)."""
    root = short_tmpdir()
    (root / "page.html").write_text("<html><body><h1>callgate fetch page</h1><p>hello</p></body></html>")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def wild() -> Iterator[Published]:
    for js in (FILESYSTEM_JS, EVERYTHING_JS, MEMORY_JS, THINK_JS):
        assert js.is_file(), f"{js} missing: run scripts/mcp-node install"
    base = short_tmpdir()
    repo = make_repo(base / "repo")
    files = base / "files"
    files.mkdir()
    (files / "a.txt").write_text("alpha\nbeta\n")
    (files / "pic.png").write_bytes(PNG)
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
    write_principals(base)
    config = write_config(
        base,
        f"""
[[mcp.upstreams]]
name = "git"
command = {json.dumps(str(BIN / "mcp-server-git"))}
args = ["--repository", {json.dumps(str(repo))}]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "fetch"
command = {json.dumps(str(BIN / "mcp-server-fetch"))}
args = ["--ignore-robots-txt", "--allow-private-ips"]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "time"
command = {json.dumps(str(BIN / "mcp-server-time"))}
args = ["--local-timezone", "Europe/Oslo"]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "fs"
command = "node"
args = [{json.dumps(str(FILESYSTEM_JS))}, {json.dumps(str(files))}]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "everything"
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "memory"
command = "node"
args = [{json.dumps(str(MEMORY_JS))}]
env = {{ MEMORY_FILE_PATH = {json.dumps(str(base / "memory.jsonl"))} }}
timeout_seconds = 30.0

[[mcp.upstreams]]
name = "think"
command = "node"
args = [{json.dumps(str(THINK_JS))}]
timeout_seconds = 30.0
""",
    )
    env = Published(base, config, repo, files)
    out = env.import_pins(declare_rest=False)
    assert "pinned git.git_log@v1" in out and "pinned everything.get-sum@v1" in out, out
    r = cli(base, "check", "--config", str(config), "--offline")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    # every action generated, every tool served: no "not generated", no argument left out but
    # sequential-thinking's three boolean-or-string ones
    warned = [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warned) == len(LEFT_OUT) and "not generated" not in text, text
    for arg, line in zip(LEFT_OUT, sorted(warned, key=lambda ln: ln.split("properties/")[1]), strict=True):
        assert f"/normalized_schema/properties/{arg}: tool think.sequentialthinking@v1" in line, line
        assert f"argument '{arg}' is left out of context.args" in line, line
    assert f"ok: {len(list(env.tools_dir.glob('*.json')))} tools" in text, text
    yield env
    shutil.rmtree(base, ignore_errors=True)


def calls(env: Published, page: str) -> list[tuple[str, dict[str, Any]]]:
    """One call per imported tool, in an order where each succeeds (writes after their reads)."""
    repo, files = str(env.data), env.data2
    assert files is not None
    (env.data / "new.txt").write_text("new\n")
    f = str(files)
    return [
        ("git.git_status", {"repo_path": repo}),
        ("git.git_log", {"repo_path": repo, "max_count": 5}),
        ("git.git_show", {"repo_path": repo, "revision": "HEAD"}),
        ("git.git_branch", {"repo_path": repo, "branch_type": "local", "contains": None}),
        ("git.git_diff_unstaged", {"repo_path": repo}),
        ("git.git_diff_staged", {"repo_path": repo, "context_lines": 1}),
        ("git.git_diff", {"repo_path": repo, "target": "HEAD"}),
        ("git.git_create_branch", {"repo_path": repo, "branch_name": "feature", "base_branch": "main"}),
        ("git.git_checkout", {"repo_path": repo, "branch_name": "feature"}),
        ("git.git_add", {"repo_path": repo, "files": ["new.txt"]}),
        ("git.git_commit", {"repo_path": repo, "message": "add new.txt"}),
        ("git.git_reset", {"repo_path": repo}),
        ("fetch.fetch", {"url": page, "max_length": 2000}),
        ("time.get_current_time", {"timezone": "Europe/Oslo"}),
        ("time.convert_time", {"source_timezone": "Europe/Oslo", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        ("fs.list_allowed_directories", {}),
        ("fs.list_directory", {"path": f}),
        ("fs.list_directory_with_sizes", {"path": f, "sortBy": "size"}),
        ("fs.directory_tree", {"path": f}),
        ("fs.get_file_info", {"path": f"{f}/a.txt"}),
        ("fs.read_text_file", {"path": f"{f}/a.txt", "head": 1}),
        ("fs.read_file", {"path": f"{f}/a.txt"}),
        ("fs.read_multiple_files", {"paths": [f"{f}/a.txt"]}),
        ("fs.read_media_file", {"path": f"{f}/pic.png"}),
        ("fs.search_files", {"path": f, "pattern": "*.txt"}),
        ("fs.create_directory", {"path": f"{f}/sub"}),
        ("fs.write_file", {"path": f"{f}/sub/b.txt", "content": "beta\n"}),
        ("fs.edit_file", {"path": f"{f}/sub/b.txt", "edits": [{"oldText": "beta", "newText": "gamma"}]}),
        ("fs.move_file", {"source": f"{f}/sub/b.txt", "destination": f"{f}/sub/c.txt"}),
        ("everything.echo", {"message": "hi"}),
        ("everything.get-annotated-message", {"messageType": "success", "includeImage": False}),
        ("everything.get-env", {}),
        ("everything.get-resource-links", {"count": 2}),
        ("everything.get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
        ("everything.get-structured-content", {"location": "Chicago"}),
        ("everything.get-sum", {"a": 1.5, "b": 2}),
        ("everything.get-tiny-image", {}),
        ("everything.gzip-file-as-resource", {"name": "hi.txt.gz", "data": "data:text/plain;base64,aGkK"}),
        ("everything.toggle-simulated-logging", {}),
        ("everything.toggle-subscriber-updates", {}),
        ("everything.trigger-long-running-operation", {"duration": 1, "steps": 1}),
        ("memory.create_entities", {"entities": [
            {"name": n, "entityType": "person", "observations": [f"{n} likes tea"]} for n in ("alice", "bob")
        ]}),
        ("memory.create_relations", {"relations": [{"from": "alice", "to": "bob", "relationType": "knows"}]}),
        ("memory.add_observations", {"observations": [{"entityName": "alice", "contents": ["likes jazz"]}]}),
        ("memory.read_graph", {}),
        ("memory.search_nodes", {"query": "tea"}),
        ("memory.open_nodes", {"names": ["alice"]}),
        ("memory.delete_observations", {"deletions": [{"entityName": "alice", "observations": ["likes jazz"]}]}),
        ("memory.delete_relations", {"relations": [{"from": "alice", "to": "bob", "relationType": "knows"}]}),
        ("memory.delete_entities", {"entityNames": ["bob"]}),
        ("think.sequentialthinking", {"thought": "first", "nextThoughtNeeded": "true", "thoughtNumber": 1,
                                      "totalThoughts": 2, "isRevision": False}),
    ]  # fmt: skip


def test_every_imported_tool_is_listed_and_called_once(wild: Published, page: str) -> None:
    """Then, in the same session, git_log decided by a policy reading ``context.args has
    start_timestamp`` (a nullable ``anyOf`` argument): given, denied by the forbid; ``null`` and
    absent, no ``start_timestamp`` in ``context.args``, and the upstream answers with the log."""
    pinned = {p.stem.removesuffix("@v1") for p in wild.tools_dir.glob("*.json")}
    plan = calls(wild, page)
    assert {name for name, _ in plan} == pinned  # the table covers every imported tool
    repo = str(wild.data)
    log = [{"repo_path": repo, "start_timestamp": "2000-01-01"}, {"repo_path": repo, "start_timestamp": None},
           {"repo_path": repo}, {"repo_path": repo, "start_timestamp": 5}]  # fmt: skip

    async def go() -> tuple[dict[str, str], list[Any]]:
        failed: dict[str, str] = {}
        async with stdio_gateway(wild) as (s, _):
            listed = {t.name for t in (await s.list_tools()).tools}
            names = {n.replace("__", ".", 1): n for n in listed}
            assert pinned <= set(names), sorted(pinned - set(names))
            for spec, args in plan:
                r = await s.call_tool(names[spec], args)
                if r.is_error:
                    failed[spec] = text_of(r)[:300]
            long = {"thought": "t", "nextThoughtNeeded": False, "thoughtNumber": 1, "totalThoughts": 99}
            tail = [await s.call_tool("git__git_log", args) for args in log]
            return failed, [*tail, await s.call_tool("think__sequentialthinking", long)]

    failed, (given, null, absent, wrong, long) = run(go(), 240)
    assert not failed, json.dumps(failed, indent=1)
    assert git(wild.data, "log", "-1", "--format=%s", "feature").strip() == "add new.txt"  # the writes ran
    assert (wild.data2 / "sub" / "c.txt").read_text() == "gamma\n"  # type: ignore[operator]

    head = git(wild.data, "log", "-1", "--format=%H").strip()
    assert given.is_error and payload(given)["status"] == "denied", text_of(given)
    assert payload(given)["reasons"] == ["policy_forbid"], text_of(given)
    for r in (null, absent):
        assert not r.is_error and head in text_of(r), text_of(r)
    # still validated against its schema: a number is neither a string nor null
    assert wrong.is_error and payload(wrong)["code"] == "schema_violation", text_of(wrong)
    assert "start_timestamp" in text_of(wrong), text_of(wrong)
    # sequential-thinking: its integers reach the policy (the same tool passed with totalThoughts 2)
    assert long.is_error and payload(long)["reasons"] == ["policy_forbid"], text_of(long)
