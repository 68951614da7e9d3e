"""The README's client loop ("Using it from an agent runtime") as an agent application runs it:
tests/test_dist.py starts it with the Python of a venv made by ``pip install
'<wheel>[openai-agents]'`` (no clone, no Rust), in the folder where ``callgate serve --example``
put its sockets (``var/run``), with a scripted model. Prints the answers handed back to the model
as JSON (call id -> text).
"""

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from callgate.client import Allowed, Client, Committed, NeedsConfirmation, ToolCall, ToolContext


def model(tools: list[dict[str, Any]]) -> Iterator[SimpleNamespace]:  # a scripted model
    shown = {t["function"]["name"] for t in tools}
    assert {"weather__get", "calendar__create_event"} <= shown, shown
    yield SimpleNamespace(id="c1", name="weather__get", arguments='{"city": "Paris", "date": "2026-07-20"}')
    yield SimpleNamespace(id="c2", name="weather__get", arguments='{"city": 7}')  # the schema refuses it


def tool_fn(ctx: ToolContext) -> Committed:  # your tool; ctx.credential is its scoped credential
    return Committed({"city": ctx.arguments["city"], "forecast": "sunny"})


answers: dict[str, str] = {}
with Client("var/run/agent.sock", executor="var/run/executor.sock") as cg:
    s = cg.session("acme", "alice")  # the subject comes from your auth, never from the model
    tools = s.tools("mc-1", "openai")
    for call in model(tools):
        out = s.propose(ToolCall(call.id, call.name, call.arguments))
        if isinstance(out, NeedsConfirmation) and s.wait_confirmed(out, timeout=60):
            out = Allowed(out.invocation_id, out.digest, out.tool_call_id, out.normalized_arguments)
        if isinstance(out, Allowed):  # only this runs: the scoped credential, then the result
            answer = cg.run(out.invocation_id, tool_fn, executor_id="my-executor").message
        else:
            answer = out.message  # denied / rejected / replayed: text for the model
        answers[call.id] = answer
print(json.dumps(answers))
