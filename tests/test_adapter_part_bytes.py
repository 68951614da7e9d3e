"""A configured secret the tool never redeemed, inside the bytes of an image or file part, never
reaches the model (spec 6.10), through the real OpenAI Agents SDK and LangGraph (the sync client
and ``AsyncClient``) against a real sidecar: the client sends each non-text part's canonical
JSON with ``EncodeResult`` (``parts``), the sidecar checks it for its known secrets
(:mod:`callgate.execute.partcheck`) and answers a verdict per part; a part holding the canary
(its raw bytes, base64 of it inside the bytes, its upper-case hex, the upper-cased text), or a
credential a secret pattern describes (an ``sk-...`` key in an env file, a PEM private key), is
answered as a ``callgate_withheld`` text part, a clean image passes as given. The sidecar keeps
none of the parts' bytes: the SQLite files (database and WAL) hold neither the canary in any form
the redactor knows nor the images' own filler bytes; the event names the withheld positions.
Fail closed: a part that was not checked (past the client's size limit) is withheld too; data
that does not match its descriptor is refused (``invalid_request``) before anything is stored."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from agents import Agent, Runner, ToolOutputFileContent, ToolOutputImage, function_tool
from agents.testing import ScriptedModel as AgentsModel
from agents.testing import assistant_message, function_call
from google.protobuf.json_format import MessageToDict
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

import callgate.adapters.parts as parts_module
from callgate.adapters.langgraph import CallgateTools
from callgate.adapters.openai_agents import Gate
from callgate.adapters.parts import UNCHECKED, canonical, encoded_value
from callgate.client import AsyncClient, CallgateClientError, Client, Committed, ToolCall
from callgate.client.outcomes import Allowed
from callgate.execute.redaction import Redactor, holds_secret
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, calendar_secret, start_sidecar, stop_sidecar
from tests.langgraph_app import VAULT_CANARY, build, cfg
from tests.openai_agents_app import RUN

CANARY = VAULT_CANARY.encode()
FORMS = Redactor([VAULT_CANARY], patterns=())
"""Finds the canary in any form the sidecar's redactor knows."""
FILLER = hashlib.sha256(b"partbytes: the image's own bytes").digest() * 2
"""Bytes of every image here: the store must not hold them in any form (raw, base64, hex)."""
FILLER_FORMS = Redactor([FILLER], patterns=())


def png(*tail: bytes) -> str:
    """Base64 of PNG-looking bytes: the signature, the filler, then ``tail``."""
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + FILLER + b"".join(tail)).decode()


HIDDEN = [
    png(b"tEXt", CANARY),  # the canary's bytes as they are
    png(b"k=", base64.b64encode(b"user:" + CANARY)),  # its base64 inside the bytes
    png(CANARY.hex().upper().encode()),  # upper-case hex
    png(CANARY.upper()),  # another letter case
]
CLEAN = png(b"IEND")
PEM = (
    b"-----BEGIN " + b"PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END " + b"PRIVATE KEY-----\n"
)
PATTERNED = [
    base64.b64encode(b"# deploy.env\nOPENAI_API_KEY=sk-" + b"partbytesQ7vX2mL9pR4tY8wZ1\n").decode(),
    base64.b64encode(PEM).decode(),
]
"""Files holding credentials no one configured that a secret pattern describes (``api_key``,
``private_key``): the sidecar's check applies its patterns to the bytes too."""
PATTERN_FORMS = Redactor(["sk-partbytesQ7vX2mL9pR4tY8wZ1", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"], patterns=())


@pytest.fixture(scope="module")
def vault() -> Iterator[Running]:
    """A sidecar whose one configured secret is the canary, bound to the calendar tool only: the
    weather tool that answers with it never redeems it."""
    running, tmp = start_sidecar(secrets=(calendar_secret("CALLGATE_TEST_PARTBYTES_TOKEN", VAULT_CANARY),))
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def store_bytes(server: Running) -> str:
    """Every SQLite file of the sidecar's store (database, WAL), read as Latin-1."""
    files = sorted(server.db_path.parent.glob(server.db_path.name + "*"))
    assert files, server.db_path
    return "".join(f.read_bytes().decode("latin-1") for f in files)


def assert_not_stored(server: Running) -> None:
    blob = store_bytes(server)
    assert FILLER.decode("latin-1") not in blob and not FILLER_FORMS.contains_known_secret(blob)
    assert VAULT_CANARY not in blob and not FORMS.contains_known_secret(blob)


def events(server: Running, invocation_id: str) -> list[dict[str, Any]]:
    session_id = server.session_of(invocation_id)
    inv = server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=invocation_id, session_id=session_id)
    )
    return [MessageToDict(e.data) for e in inv.events]


def note(part: dict[str, Any], key: str = "text") -> str:
    """The message of a ``callgate_withheld`` part ("" for any other part)."""
    try:
        doc = json.loads(part[key])
    except (KeyError, ValueError, TypeError):
        return ""
    return str(doc["message"]) if isinstance(doc, dict) and doc.get("type") == "callgate_withheld" else ""


def held(part: dict[str, Any]) -> bool:
    return note(part).endswith("it contained a secret.")


def test_the_sidecar_finds_what_the_client_finds_for_redeemed_values() -> None:
    """:meth:`Redactor.holds_known_secret` (configured secrets, the sidecar) and
    :func:`holds_secret` (redeemed values, the client) search the same views of a part's string."""
    binary = bytes(range(256)) * 2  # a secret that is not UTF-8
    red = Redactor([VAULT_CANARY, binary], patterns=())
    forms = [
        *HIDDEN,
        png(quote(VAULT_CANARY, safe="").encode()),
        png(json.dumps({"k": VAULT_CANARY + "\n"}).encode()),
        "data:image/png;base64," + png(binary),
        base64.b64encode(b"x" + CANARY).decode(),  # base64 text whose bytes hold it
        "name-" + VAULT_CANARY.swapcase(),  # not base64: the text itself
    ]
    for form in forms:
        assert red.holds_known_secret(form) and holds_secret(form, [VAULT_CANARY, binary]), form
    for clean in (CLEAN, "data:image/png;base64," + CLEAN, "radar.png", VAULT_CANARY[:-1]):
        assert not red.holds_known_secret(clean) and not holds_secret(clean, [VAULT_CANARY, binary])


# ---------------------------------------------------------------- LangGraph


@tool
def get_weather(city: str, date: str) -> Any:
    """The forecast for a city on a date (with the radar images a tool read from disk)."""
    return [
        *({"type": "image", "base64": b, "mime_type": "image/png"} for b in HIDDEN[:2]),
        {"type": "file", "base64": HIDDEN[2], "mime_type": "application/octet-stream"},
        {"type": "image", "base64": HIDDEN[3], "mime_type": "image/png"},
        {"type": "file", "base64": PATTERNED[0], "mime_type": "text/plain"},
        {"type": "file", "base64": PATTERNED[1], "mime_type": "application/x-pem-file"},
        {"type": "image", "base64": CLEAN, "mime_type": "image/png"},
    ]


def _langgraph(server: Running, *, aio: bool, thread: str) -> ToolMessage:
    a = server.sidecar.addresses
    tools = {"weather.get": get_weather}

    async def run_aio() -> Any:
        cg = AsyncClient(a["agent"][0], executor=a["executor"][0])
        try:
            session = await cg.session("acme", "alice", timezone="Asia/Shanghai")
            graph = build(
                CallgateTools(cg, session, tools, executor_id="lg"), InMemorySaver(), asynchronous=True
            )
            return await graph.ainvoke({"messages": [HumanMessage("vault")]}, cfg(thread))
        finally:
            await cg.close()

    if aio:
        out = asyncio.run(run_aio())
    else:
        with Client(a["agent"][0], executor=a["executor"][0]) as cg:
            session = cg.session("acme", "alice", timezone="Asia/Shanghai")
            graph = build(CallgateTools(cg, session, tools, executor_id="lg"), InMemorySaver())
            out = graph.invoke({"messages": [HumanMessage("vault")]}, cfg(thread))
    (msg,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return msg


@pytest.mark.parametrize("path", ["sync", "aio"])
def test_langgraph_withholds_a_configured_secret_in_part_bytes(vault: Running, path: str) -> None:
    msg = _langgraph(vault, aio=path == "aio", thread=f"t-bytes-{path}")
    blocks = msg.content
    assert isinstance(blocks, list) and len(blocks) == 8, len(blocks) if isinstance(blocks, list) else 0
    shown = json.dumps(blocks, ensure_ascii=False)
    clean = not FORMS.contains_known_secret(shown) and not PATTERN_FORMS.contains_known_secret(shown)
    assert clean  # a bool: a failure never prints what was shown
    assert [held(b) for b in blocks[1:7]] == [True] * 6, [note(b) for b in blocks]
    assert blocks[7] == {"type": "image", "base64": CLEAN, "mime_type": "image/png"}
    invocation_id = json.loads(blocks[0]["text"])["invocation_id"]
    (done,) = [e for e in events(vault, invocation_id) if "parts_checked" in e]
    assert done["parts_checked"] == 7 and done["parts_withheld"] == [0, 1, 2, 3, 4, 5], done
    assert_not_stored(vault)


def test_a_part_too_large_to_check_is_withheld(vault: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a part past the client's limit is not sent, so it has no verdict: withheld
    with the unchecked reason (as with an older sidecar that answers no verdicts)."""
    monkeypatch.setattr(parts_module, "MAX_CHECKED_BYTES", 64)  # every part here is larger
    blocks = _langgraph(vault, aio=False, thread="t-bytes-big").content
    assert isinstance(blocks, list) and len(blocks) == 8, len(blocks) if isinstance(blocks, list) else 0
    assert [note(b).endswith(UNCHECKED + ".") for b in blocks[1:]] == [True] * 7, [note(b) for b in blocks]


def test_the_value_and_the_parts_sent_stay_within_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parts sent and the value's JSON (text parts included) share the limit, so a long
    text beside an image cannot push ``EncodeResult`` past gRPC's message limit."""
    image = {"type": "image", "base64": CLEAN, "mime_type": "image/png"}
    size = len(canonical(image))
    monkeypatch.setattr(parts_module, "MAX_CHECKED_BYTES", 6 * size)
    assert [i for i, _ in parts_module.committed([image, image]).parts] == [0, 1]
    text = {"type": "text", "text": "\u00e9" * size}  # 6 bytes a character in the value's JSON
    done = parts_module.committed([text, image, image])
    assert done.parts == () and len(done.result["mcp_content"]) == 3


# ---------------------------------------------------------------- OpenAI Agents SDK


@function_tool
def radar(city: str, date: str) -> list[Any]:
    """Weather radar for a city on one day.

    Args:
        city: The city, e.g. Paris.
        date: The day, YYYY-MM-DD.
    """
    return [
        ToolOutputImage(image_url="data:image/png;base64," + HIDDEN[0]),
        ToolOutputFileContent(file_data=HIDDEN[1], filename="radar.bin"),
        ToolOutputImage(image_url="data:image/png;base64," + HIDDEN[2]),
        ToolOutputFileContent(file_data="data:image/png;base64," + HIDDEN[3], filename="radar.png"),
        ToolOutputFileContent(file_data=PATTERNED[0], filename="deploy.env"),
        ToolOutputImage(image_url="data:image/png;base64," + CLEAN),
    ]


def test_agents_withhold_a_configured_secret_in_part_bytes(vault: Running) -> None:
    a = vault.sidecar.addresses
    with Client(a["agent"][0], executor=a["executor"][0], timeout=5) as cg:
        model = AgentsModel(
            [[function_call("weather__get", {"city": "Paris", "date": "2026-07-20"}, call_id="r1")],
             [assistant_message("done")]]
        )  # fmt: skip
        g = Gate({"weather.get": radar}, client=cg, session=cg.session("acme", "alice"), executor_id="x")
        agent = Agent(name="a", model=model, tools=g.tools, hooks=g.hooks())
        result = Runner.run_sync(agent, "radar", context={}, run_config=RUN)
    (item,) = [
        i
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem" and isinstance(i.raw_item, dict)
    ]
    sent = item.raw_item["output"]
    assert isinstance(sent, list) and len(sent) == 7, len(sent) if isinstance(sent, list) else 0
    shown = json.dumps(sent, ensure_ascii=False)
    clean = not FORMS.contains_known_secret(shown) and not PATTERN_FORMS.contains_known_secret(shown)
    assert clean  # a bool: a failure never prints what was shown
    assert [held(p) for p in sent[1:6]] == [True] * 5, [note(p) for p in sent]
    assert sent[6]["type"] == "input_image" and sent[6]["image_url"] == "data:image/png;base64," + CLEAN
    invocation_id = item.custom_data["callgate"]["invocation_id"]
    (done,) = [e for e in events(vault, invocation_id) if "parts_checked" in e]
    assert done["parts_withheld"] == [0, 1, 2, 3, 4], done
    assert_not_stored(vault)


# ---------------------------------------------------------------- the sidecar's refusals


def test_data_that_does_not_match_its_descriptor_is_refused(vault: Running) -> None:
    """The digest the trail keeps must name what was checked: data that differs from what its
    descriptor covers, or names a text part, is ``invalid_request`` (nothing is stored)."""
    a = vault.sidecar.addresses
    image = {"type": "image", "base64": HIDDEN[0], "mime_type": "image/png"}
    value = encoded_value([{"type": "text", "text": "radar"}, image])
    with Client(a["agent"][0], executor=a["executor"][0], timeout=5) as cg:
        session = cg.session("acme", "alice")
        session.tools("mc-1")
        for n, bogus in enumerate(
            [(1, canonical({**image, "base64": CLEAN})), (0, canonical(image)), (7, canonical(image))]
        ):
            out = session.propose(ToolCall(f"m{n}", "weather__get", '{"city":"Paris","date":"2026-07-20"}'))
            assert isinstance(out, Allowed), out
            with pytest.raises(CallgateClientError) as err:
                cg.run(out.invocation_id, lambda ctx, b=bogus: Committed(value, parts=(b,)), executor_id="x")
            assert err.value.code == "invalid_request" and "parts[0]" in err.value.message, err.value
            assert not any("parts_checked" in e for e in events(vault, out.invocation_id))
    assert_not_stored(vault)
