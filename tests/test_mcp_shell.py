"""PyPI ``mcp-shell-server`` (1.1.14, built on mcp 1.x; a venv of its own from
tests/mcp_pyvenv/shell.txt, scripts/mcp-pyvenv) behind ``callgate mcp serve``.

Its one tool's description lists the allowed commands from a Python set, so the text is in
another order in every process (hash randomization): pinned by one ``import``, it differs at the
gateway's start and the tool is refused ``upstream_definition_changed``, every time. Found by
the wild trial (docs/MCP.md "Tested with"). The pin stays strict; ``import`` now says that only
the order of words changed and names the fix, a fixed ``PYTHONHASHSEED`` in the upstream's env.
The seeds are given here so the two orders are known to differ.

Then, with a fixed seed, the flow of a new user: a Cedar policy on the argv (reads permitted,
``rm`` confirmed, a working directory outside the folder forbidden), ``callgate check``, calls
through the official Python SDK client with unicode, stdin and an error.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.mcp.importing import REORDERED_NOTE
from tests.conftest import ROOT, short_tmpdir
from tests.mcp_env import Published, accept, cli, run, stdio_gateway, text_of, write_config, write_principals

SHELL_SERVER = ROOT / ".cache" / "mcp-venvs" / "shell" / "bin" / "mcp-shell-server"

pytestmark = [pytest.mark.node, pytest.mark.timeout(240)]

POLICIES = """
@id("reads")
permit (principal == User::"alice", action == Action::"mcp.sh.shell_execute", resource)
when { context.args.command.containsAny(["cat", "wc", "ls"]) && !context.args.command.contains("rm") };

@id("rm-needs-user")
@confirm("removing files needs the user's OK")
permit (principal == User::"alice", action == Action::"mcp.sh.shell_execute", resource)
when { context.args.command.contains("rm") };

@id("stay-in-work")
forbid (principal, action == Action::"mcp.sh.shell_execute", resource)
when { context.args has directory && !(context.args.directory like "{work}*") };
"""


def upstream(work: Path, seed: str) -> str:
    return f"""
[[mcp.upstreams]]
name = "sh"
command = {json.dumps(str(SHELL_SERVER))}
cwd = {json.dumps(str(work))}
env = {{ ALLOW_COMMANDS = "cat,ls,rm,wc", PATH = "/usr/bin:/bin", PYTHONHASHSEED = "{seed}" }}
timeout_seconds = 30.0
"""


@pytest.fixture
def folder() -> Iterator[Published]:
    assert SHELL_SERVER.is_file(), f"{SHELL_SERVER} missing: run scripts/mcp-pyvenv install"
    base = short_tmpdir()
    try:
        work = base / "work"
        work.mkdir()
        (work / "note.txt").write_text("h\u00e9llo w\u00f6rld \u65e5\u672c\n")
        (base / "policies" / "cedar").mkdir(parents=True)
        (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES.replace("{work}", str(work)))
        write_principals(base)
        yield Published(base, write_config(base, upstream(work, "1")), work)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_mcp_shell_server_through_the_gateway(folder: Published) -> None:
    work = folder.data
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config), "--accept-proposed")
    assert r.returncode == 0, r.stdout + r.stderr
    # another process, another order of the allowed commands: the pin does not match
    head = folder.config.read_text().split("[[mcp.upstreams]]")[0]
    folder.config.write_text(head + upstream(work, "2"))
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config), "--accept-proposed")
    said = r.stdout + r.stderr
    assert r.returncode == 1 and "changed sh.shell_execute" in said, said
    assert REORDERED_NOTE.strip() in said, said
    folder.config.write_text(head + upstream(work, "1"))
    r = cli(folder.base, "check", "--config", str(folder.config))
    assert r.returncode == 0 and "ok: 1 tools" in r.stdout, r.stdout + r.stderr
    yes = accept(True)

    async def go() -> None:
        async with stdio_gateway(folder, yes) as (s, _):
            assert "sh__shell_execute" in {t.name for t in (await s.list_tools()).tools}

            async def sh(args: dict[str, object]) -> tuple[bool, str]:
                res = await s.call_tool("sh__shell_execute", args)
                return bool(res.is_error), text_of(res)

            err, out = await sh({"command": ["cat", "note.txt"]})
            assert not err and "h\u00e9llo w\u00f6rld \u65e5\u672c" in out, out
            err, out = await sh({"command": ["wc", "-c"], "stdin": "\u00fc" * 5000})
            assert not err and "10000" in out, out  # bytes: two per \u00fc
            err, out = await sh({"command": ["cat", "missing.txt"]})
            assert err and payload_code(out) == "upstream_tool_error", out
            err, out = await sh({"command": ["ls"], "directory": "/etc"})
            assert err and json.loads(out)["reasons"] == ["policy_forbid"], out
            err, out = await sh({"command": ["cat", "/etc/hostname"], "directory": "/"})
            assert err and json.loads(out)["reasons"] == ["policy_forbid"], out
            err, out = await sh({"command": "ls"})
            assert err and json.loads(out)["code"] == "schema_violation", out
            assert (work / "note.txt").exists()
            err, out = await sh({"command": ["rm", "note.txt"]})
            assert not err, out
            assert len(yes.asked) == 1 and "note.txt" in yes.asked[0]  # type: ignore[attr-defined]
            assert not (work / "note.txt").exists()

    run(go())


def payload_code(text: str) -> str:
    doc = json.loads(text)
    return str(doc.get("error", {}).get("code") or doc.get("code"))
