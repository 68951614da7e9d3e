"""Edges beside the happy path of the Python client, with a real sidecar: a tool name the model
was not shown (hallucinated, stale, or the callgate name instead of the legal one) is a
model-facing :class:`Rejected` in the sidecar's own shape and code, never an exception that ends
the agent loop, and nothing is proposed; arguments the sidecar's strict parse refuses stay
refused whatever the client does to strict mode's nulls; a result in parts is rebuilt only from a
complete `ok` message. The SDK adapters' edges are in
tests/test_adapter_openai_agents.py and tests/test_adapter_langgraph.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from callgate.adapters.parts import UNCHECKED, answer_parts, encoded_value
from callgate.client import AsyncClient, Client, Rejected, ToolCall
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running

WEATHER = '{"city":"Paris","date":"2026-07-20"}'
LISTED = "available: calendar__create_event, weather__get."


def proposals(server: Running, session_id: str) -> list[str]:
    """The proposal ids the sidecar recorded for the session (its own SQLite store)."""
    with sqlite3.connect(server.db_path) as db:
        rows = db.execute("SELECT proposal_id FROM invocations WHERE session_id = ?", (session_id,))
        return [str(r[0]) for r in rows]


def content(message: str) -> dict[str, Any]:
    doc = json.loads(message)
    assert doc["role"] == "tool"
    got: dict[str, Any] = doc["content"]
    return got


def test_a_tool_the_model_was_not_shown_is_a_rejection_in_the_sidecars_shape(shared_server: Running) -> None:
    """User trial: a hallucinated name was proposed with ``tool_version=""`` and raised
    ``CallRefused(invalid_request)``, which ended the agent's loop."""
    a = shared_server.sidecar.addresses
    with Client(a["agent"][0], executor=a["executor"][0]) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        # what the sidecar answers for a real name at a version it did not show
        stale = s.prepare(ToolCall("c0", "weather__get", WEATHER))
        stale.tool_version = "0.0.0-stale"
        sidecar_says = s.propose_prepared(stale)
        assert isinstance(sidecar_says, Rejected) and sidecar_says.code == "unknown_tool_version"
        for name in ("send_money", "weather.get", "x" * 300):
            out = s.propose(ToolCall("c1", name, WEATHER))
            assert isinstance(out, Rejected), out
            assert out.code == sidecar_says.code and out.invocation_id == "" and out.violations == ()
            got = content(out.message)
            assert list(got) == list(content(sidecar_says.message))  # the same shape
            assert got["status"] == "rejected" and got["code"] == "unknown_tool_version"
            assert got["message"].startswith(f'No tool named "{name[:100]}') and LISTED in got["message"]
    assert proposals(shared_server, s.session_id) == ["c0"]  # only the stale one reached the sidecar


def test_the_async_client_answers_an_unknown_name_the_same_way(shared_server: Running) -> None:
    a = shared_server.sidecar.addresses

    async def main() -> Rejected:
        async with AsyncClient(a["agent"][0], executor=a["executor"][0]) as cg:
            s = await cg.session("acme", "alice")
            await s.tools("mc-1")
            out = await s.propose(ToolCall("c1", "get_stock_price", "{}"))
            assert isinstance(out, Rejected)
            return out

    out = asyncio.run(main())
    assert out.code == "unknown_tool_version" and LISTED in content(out.message)["message"]


def test_a_repeated_key_stays_refused_where_a_strict_null_is_dropped(shared_server: Running) -> None:
    """Dropping strict mode's null re-serializes the arguments, which kept the last of two
    duplicate keys: the sidecar's ``duplicate_key`` refusal was bypassed."""
    a = shared_server.sidecar.addresses
    event = '"start":"2026-07-20T09:00:00+08:00","duration_minutes":15'
    with Client(a["agent"][0], executor=a["executor"][0]) as cg:
        s = cg.session("acme", "alice", timezone="Asia/Shanghai")
        s.tools("mc-1")
        dup = s.propose(
            ToolCall(
                "c1", "calendar__create_event", '{"title":"A","title":"B",' + event + ',"calendar_id":null}'
            )
        )
        assert isinstance(dup, Rejected) and dup.code == "duplicate_key", dup
        nested = s.propose(
            ToolCall(
                "c2", "calendar__create_event", '{"title":"A",' + event + ',"calendar_id":null,"title":"B"}'
            )
        )
        assert isinstance(nested, Rejected) and nested.code == "duplicate_key", nested
        ok = s.propose(
            ToolCall("c3", "calendar__create_event", '{"title":"A",' + event + ',"calendar_id":null}')
        )
        assert not isinstance(ok, Rejected), ok  # the null alone is still dropped


def test_a_result_in_parts_falls_back_to_the_encoded_text_unless_complete_and_ok() -> None:
    """:mod:`callgate.adapters.parts`: only a complete ``ok`` message with one encoded descriptor
    per part is rebuilt into parts; an error, a truncated result or a mismatch stays the text."""
    parts = [{"type": "text", "text": "hi"}, {"type": "image", "image_url": "data:image/png;base64,AAAA"}]
    value = encoded_value(parts)
    assert value["mcp_content"][1]["type"] == "image" and "AAAA" not in json.dumps(value)

    def message(**content: Any) -> str:
        return json.dumps({"role": "tool", "tool_call_id": "c", "content": content})

    image = value["mcp_content"][1]  # its descriptor as the sidecar keeps it (strings unchanged)
    ok = message(status="ok", nonce="n", truncated=False, data={"mcp_content": [{"text": "⟦m⟧hi"}, image]})
    shown = answer_parts(ok, parts, verdicts=[(1, pb.PART_CLEAN)])  # the sidecar found no secret
    assert shown is not None and shown[1:] == [{"type": "text", "text": "⟦m⟧hi"}, parts[1]]
    for verdicts in ([], [(1, pb.PART_VERDICT_UNSPECIFIED)], [(0, pb.PART_CLEAN)]):  # not checked
        unchecked = answer_parts(ok, parts, verdicts=verdicts)
        assert unchecked is not None and json.loads(unchecked[2]["text"])["type"] == "callgate_withheld"
        assert UNCHECKED in unchecked[2]["text"]
    held = answer_parts(ok, parts, verdicts=[(1, pb.PART_HOLDS_SECRET)])
    assert held is not None and "it contained a secret" in held[2]["text"]
    assert json.loads(shown[0]["text"]) == {"status": "ok", "nonce": "n", "truncated": False}
    for bad in (
        message(status="ok", truncated=True, data={"mcp_content": [{"text": "hi"}, {}]}),
        message(status="error", error={"code": "x"}),
        message(status="ok", data={"mcp_content": [{"text": "hi"}]}),  # one part short
        message(status="ok", data={"mcp_content": [{"type": "text"}, {}]}),  # a text part without text
        "not json",
    ):
        assert answer_parts(bad, parts) is None
