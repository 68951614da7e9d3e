"""The Python client's model-facing messages, byte for byte those of the TypeScript client: both
test suites read tests/data/client-messages.json (clients/ts/test/messages.test.mjs is the other)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from callgate.client.outcomes import confirm_message, denied_message, not_listed, rejected_message
from tests.conftest import DATA

CASES: list[dict[str, Any]] = json.loads((DATA / "client-messages.json").read_text(encoding="utf-8"))["cases"]


def message_of(case: dict[str, Any]) -> str:
    if case["kind"] == "denied":
        return denied_message(case["tool_call_id"], tuple(case["reasons"]), case["error_code"])
    if case["kind"] == "needs_confirmation":
        return confirm_message(case["tool_call_id"], case["expires_at"])
    if case["kind"] == "not_listed":  # a name the model was not shown, answered by the client
        return not_listed(case["tool_call_id"], case["name"], case["available"]).message
    assert case["kind"] == "rejected"
    violations = tuple((v["pointer"], v["message"]) for v in case["violations"])
    return rejected_message(case["tool_call_id"], case["code"], case["message"], violations)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['kind']}-{c['tool_call_id']}" for c in CASES])
def test_message_matches_the_shared_fixture(case: dict[str, Any]) -> None:
    text = message_of(case)
    assert text == case["expected"]
    doc = json.loads(text)
    assert doc["role"] == "tool" and doc["tool_call_id"] == case["tool_call_id"]  # the sidecar's shape


def test_fixture_covers_every_outcome_with_a_message() -> None:
    assert {c["kind"] for c in CASES} == {"denied", "needs_confirmation", "not_listed", "rejected"}
