"""Issue 31 item 4 through the MCP gateway: ``tools/list`` is the subject's ListTools by policy.

A real ``callgate mcp serve`` (streamable HTTP, two bearer tokens: alice, a writer, and bob, no
role) in front of the SDK upstream of tests/mcp_upstreams/server.py, the official MCP Python SDK
client on each token. alice sees ``up__write_note``, bob does not; bob calling it anyway gets the
gateway's documented answer for a name not listed (``unknown_tool_version``, nothing ran), while
``policy.list_by_policy`` is left at its default (on).
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import short_tmpdir
from tests.mcp_env import (
    ROOT,
    Published,
    http_client,
    http_gateway,
    run,
    text_of,
    write_config,
    write_policies,
)

pytestmark = pytest.mark.timeout(240)

ALICE, BOB = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
POLICIES = """
@id("lookup-all")
permit (principal, action == Action::"mcp.up.lookup", resource)
when { principal.tenant == context.tenant };

@id("notes-writers")
permit (principal in Role::"writer", action == Action::"mcp.up.write_note", resource)
when { principal.tenant == context.tenant };
"""
ENTITIES = [
    {"uid": {"type": "Role", "id": "writer"}, "attrs": {}, "parents": []},
    {
        "uid": {"type": "User", "id": "alice"},
        "attrs": {"tenant": "acme"},
        "parents": [{"type": "Role", "id": "writer"}],
    },
    {"uid": {"type": "User", "id": "bob"}, "attrs": {"tenant": "acme"}, "parents": []},
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[Published]:
    base = short_tmpdir()
    state = base / "state"
    state.mkdir()
    write_policies(
        base, {"up": {"lookup": ("read", "city: String"), "write_note": ("create", "text: String")}}, POLICIES
    )
    (base / "policies" / "cedar" / "entities.json").write_text(json.dumps(ENTITIES))
    py, root, st = json.dumps(sys.executable), json.dumps(str(ROOT)), json.dumps(str(state))
    config = write_config(
        base,
        f'[[mcp.upstreams]]\nname = "up"\ncommand = {py}\n'
        f'args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]\ncwd = {root}\n'
        f"env = {{ PYTHONPATH = {root} }}\n",
        tokens={ALICE: "alice", BOB: "bob"},
    )
    env = Published(base, config, state)
    env.import_pins()
    yield env


def test_two_subjects_see_different_tools_and_a_hidden_call_is_refused(gateway: Published) -> None:
    async def go(port: int) -> None:
        async with http_client(port, ALICE) as alice, http_client(port, BOB) as bob:
            seen_a = {t.name for t in (await alice.list_tools()).tools}
            seen_b = {t.name for t in (await bob.list_tools()).tools}
            assert {"up__lookup", "up__write_note"} <= seen_a, seen_a
            assert "up__lookup" in seen_b and "up__write_note" not in seen_b, seen_b
            # tools no policy permits to anyone (crash, hang, ...) are shown to neither
            assert "up__crash" not in seen_a | seen_b
            r = await bob.call_tool("up__write_note", {"text": "hi"})
            assert r.is_error
            assert json.loads(text_of(r))["code"] == "unknown_tool_version", text_of(r)
            ok = await alice.call_tool("up__write_note", {"text": "hi"})
            assert not ok.is_error, text_of(ok)

    with http_gateway(gateway) as port:
        run(go(port), timeout=200)
    effects = (gateway.data / "effects.jsonl").read_text().splitlines()
    assert len(effects) == 1  # alice's note only: bob's call never reached the upstream
