"""docs/CLIENTS.md "The loop": both code blocks (sync ``Client``, asyncio ``AsyncClient``) run as
written against a real sidecar. Only what the reader supplies is defined here: the sockets, the
user, ``model`` (two calls: one allowed, one that needs a person), ``tool_fn`` and
``send_to_model``; a person confirms in the console (the confirmer listener) while the loop waits."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from callgate.client import Client, Committed, ToolContext
from tests.conftest import ROOT, Running, start_sidecar, stop_sidecar

DOC = ROOT / "docs" / "CLIENTS.md"


def loop_blocks() -> list[str]:
    section = DOC.read_text(encoding="utf-8").split("## The loop\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


CALLS = [
    Call("c1", "weather__get", '{"city":"Paris","date":"2026-07-20"}'),
    Call("c2", "calendar__create_event",
         '{"title":"Standup","start":"2026-07-20T09:00:00+08:00","duration_minutes":15,"calendar_id":null}'),
]  # fmt: skip


@pytest.fixture
def sidecar() -> Iterator[Running]:
    running, tmp = start_sidecar()
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def console(server: Running, stop: threading.Event) -> None:
    """A person in the console: confirms what waits."""
    with Client(confirmer=server.sidecar.addresses["confirmer"][0]) as cg:
        while not stop.is_set():
            for p in cg.confirmer().list_pending("acme"):
                cg.confirmer().confirm(p.invocation_id, p.digest, confirmed_by="bob@console")
            time.sleep(0.05)


@pytest.mark.parametrize("which", ["sync", "asyncio"])
def test_the_documented_loop_runs_as_written(sidecar: Running, which: str) -> None:
    sync_block, async_block = loop_blocks()
    block = sync_block if which == "sync" else async_block
    for role in ("agent", "executor"):
        block = block.replace(f"var/run/{role}.sock", sidecar.sidecar.addresses[role][0])
    ran: list[dict[str, Any]] = []
    sent: dict[str, Any] = {}

    def tool(ctx: ToolContext) -> Committed:
        ran.append(dict(ctx.arguments))
        return Committed({"ok": True}, "evt_1" if "title" in ctx.arguments else "")

    async def atool(ctx: ToolContext) -> Committed:
        return tool(ctx)

    def model(tools: list[dict[str, Any]]) -> list[Call]:
        assert {t["function"]["name"] for t in tools} >= {c.name for c in CALLS}
        return CALLS

    names = {
        "user_id": "alice",
        "model": model,
        "tool_fn": tool if which == "sync" else atool,
        "send_to_model": lambda call_id, answer: sent.__setitem__(call_id, json.loads(answer)),
    }
    stop = threading.Event()
    person = threading.Thread(target=console, args=(sidecar, stop), daemon=True)
    person.start()
    try:
        if which == "asyncio":  # the block calls asyncio.run itself: not from this test's loop
            assert "asyncio.run(main())" in block
        exec(compile(block, f"docs/CLIENTS.md ({which})", "exec"), names)
    finally:
        stop.set()
        person.join()
    assert [r.get("city", r.get("title")) for r in ran] == ["Paris", "Standup"]
    assert {k: v["content"]["status"] for k, v in sent.items()} == {"c1": "ok", "c2": "ok"}
