"""PyPI ``mcp-server-sqlite`` (2025.4.25, built on mcp 1.x) behind ``callgate mcp serve``, as a new
user would take it: the server runs from a venv of its own (scripts/mcp-pyvenv: the dev extra has
mcp 2.x, which it cannot import), ``callgate mcp import --accept-proposed`` and ``callgate check``
with no hand edit, then each of its six tools called once through the gateway by the official
Python SDK client (2025-11-25 handshake), with one policy deny. The database file shows what ran.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, short_tmpdir
from tests.mcp_env import Published, cli, payload, run, stdio, text_of, write_config, write_principals

SQLITE_SERVER = ROOT / ".cache" / "mcp-venvs" / "sqlite" / "bin" / "mcp-server-sqlite"

pytestmark = [pytest.mark.node, pytest.mark.timeout(240)]

POLICIES = """
@id("sqlite-all") permit (principal == User::"alice", action, resource);

@id("sqlite-no-drop")
forbid (principal, action == Action::"mcp.sqlite.write_query", resource)
when { context.args.query like "*DROP*" };
"""


@pytest.fixture
def folder() -> Iterator[Published]:
    assert SQLITE_SERVER.is_file(), f"{SQLITE_SERVER} missing: run scripts/mcp-pyvenv install"
    base = short_tmpdir()
    try:
        db = base / "shop.db"
        (base / "policies" / "cedar").mkdir(parents=True)
        (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
        write_principals(base)
        config = write_config(
            base,
            f"""
[[mcp.upstreams]]
name = "sqlite"
command = {json.dumps(str(SQLITE_SERVER))}
args = ["--db-path", {json.dumps(str(db))}]
timeout_seconds = 30.0
""",
        )
        yield Published(base, config, db)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as c:
        return list(c.execute("SELECT id, name FROM items ORDER BY id"))


def test_every_tool_of_mcp_server_sqlite_through_the_gateway(folder: Published) -> None:
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config), "--accept-proposed")
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli(folder.base, "check", "--config", str(folder.config), "--offline")
    assert r.returncode == 0 and "ok: 6 tools" in r.stdout, r.stdout + r.stderr
    assert "warning" not in r.stdout + r.stderr, r.stdout + r.stderr

    async def go() -> None:
        async with stdio(folder) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {f"sqlite__{t}" for t in TOOLS} <= names, names

            async def call(tool: str, args: dict[str, object]) -> str:
                res = await c.call_tool(f"sqlite__{tool}", args)
                assert not res.is_error, text_of(res)
                return text_of(res)

            await call("create_table", {"query": "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"})
            await call("write_query", {"query": "INSERT INTO items (name) VALUES ('lamp'), ('desk')"})
            assert "items" in await call("list_tables", {})
            assert "name" in await call("describe_table", {"table_name": "items"})
            assert "desk" in await call("read_query", {"query": "SELECT name FROM items ORDER BY id"})
            await call("append_insight", {"insight": "two items"})
            denied = await c.call_tool("sqlite__write_query", {"query": "DROP TABLE items"})
            assert denied.is_error and payload(denied)["status"] == "denied", text_of(denied)
            assert payload(denied)["reasons"] == ["policy_forbid"], text_of(denied)

    run(go())
    assert rows(folder.data) == [(1, "lamp"), (2, "desk")]  # the DROP never reached the server


TOOLS = ("read_query", "write_query", "create_table", "list_tables", "describe_table", "append_insight")
