"""Text that cannot hide (issue 33 item 1): the text policy of ToolSpec strings, on both cores,
and how a confirmation surface shows what a string hides (callgate/arguments/unitext.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from callgate.arguments import unitext
from callgate.arguments.textpolicy import TextClass, TextPolicy
from callgate.arguments.unitext import Flag
from callgate.base.clock import FixedClock
from callgate.base.errors import ErrorCode, LoadError, RejectedError
from callgate.base.events import EventKind
from callgate.base.model import Proposal, Subject
from callgate.base.trace import TraceContext
from callgate.config import CoreConfig, load_config
from callgate.policy.snapshot import load_snapshot_from_config
from callgate.policy.toolspecs import load_tools
from callgate.propose.gate import SessionSpec
from callgate.server.app import Shared
from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore
from callgate.store.sqlite import SQLiteStore
from tests.conftest import POLICIES, ROOT

BIDI, CYRILLIC, ZERO_WIDTH = "\u202eyramirp\u202c", "prim\u0430ry", "pri\u200bmary\u2060"


def test_what_a_string_hides() -> None:
    assert unitext.flags(BIDI) == {Flag.HIDDEN}
    assert unitext.flags(CYRILLIC) == {Flag.MIXED_SCRIPT}
    assert unitext.flags(ZERO_WIDTH) == {Flag.HIDDEN}
    assert unitext.flags("Team sync" + " " * 120 + "+ x") == {Flag.WHITESPACE_RUN}
    assert unitext.flags("a\u00a0b") == {Flag.WHITESPACE_RUN}  # a no-break space
    assert unitext.flags("a\u00adb") == {Flag.HIDDEN}  # a soft hyphen
    for plain in (
        "primary",
        "Müller-Kalender",
        "東京タワー",
        "日本語テスト",
        "서울 시청",
        "Αθήνα",
        "e\u0301",
    ):
        assert unitext.flags(plain) == frozenset(), plain
    assert unitext.visible(BIDI) == (
        "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧yramirp⟦U+202C POP DIRECTIONAL FORMATTING⟧"
    )
    assert (
        unitext.visible(CYRILLIC)
        == "prim⟦U+0430 CYRILLIC SMALL LETTER A⟧ry ⟦mixed scripts: Latin + Cyrillic⟧"
    )
    assert unitext.visible(ZERO_WIDTH) == "pri⟦U+200B ZERO WIDTH SPACE⟧mary⟦U+2060 WORD JOINER⟧"
    assert unitext.visible("a" + " " * 120 + "b") == "a⟦120 spaces⟧b"
    assert unitext.visible("primary") == "primary"
    assert "Unicode 17" in unitext.SCRIPT_DATA


def test_identifiers_by_default_and_as_declared() -> None:
    tools = load_tools(POLICIES / "tools")
    assert tools.get("calendar.create_event", "v1").text_policy.identifiers == ("/calendar_id",)  # type: ignore[union-attr]
    assert tools.get("files.delete", "v1").text_policy.identifiers == ("/path",)  # type: ignore[union-attr]
    assert tools.get("weather.get", "v1").text_policy.identifiers == ("/city",)  # type: ignore[union-attr]
    schema = {
        "type": "object",
        "properties": {
            "owner_email": {"type": "string"},
            "site": {"type": "string", "format": "uri"},
            "notes": {"type": "string"},
            "recipients": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "properties": {"doc_id": {"type": "string"}}},
        },
    }
    policy = TextPolicy.build(None, schema, ())
    assert policy.identifiers == ("/meta/doc_id", "/owner_email", "/recipients/*", "/site")
    declared = TextPolicy.build({"/notes": "identifier_strip", "/site": "free"}, schema, ())
    assert declared.identifiers == ("/meta/doc_id", "/notes", "/owner_email", "/recipients/*")
    assert declared.declared == {"/notes": TextClass.IDENTIFIER_STRIP, "/site": TextClass.FREE}
    with pytest.raises(RejectedError) as err:
        policy.apply({"recipients": ["bob@example.com", "b\u043eb@example.com"], "notes": BIDI})
    assert err.value.code is ErrorCode.TEXT_REFUSED
    assert [v.pointer for v in err.value.violations] == ["/recipients/1"]  # notes are free text
    with pytest.raises(LoadError) as bad:
        TextPolicy.build({"notes": "identifier", "/x": "secret"}, schema, ())
    assert [v.pointer for v in bad.value.violations] == ["/text_policy/notes", "/text_policy/~1x"]


def _policies_with(tmp: Path, text_policy: dict[str, str]) -> Path:
    shutil.copytree(POLICIES, tmp / "policies")
    path = tmp / "policies" / "tools" / "calendar.create_event@v1.json"
    doc = json.loads(path.read_text())
    doc["text_policy"] = text_policy
    path.write_text(json.dumps(doc))
    return tmp / "policies"


async def _propose(policies: Path, engine: str, args: dict[str, Any]) -> tuple[Any, list[Any]]:
    return (await _propose_all(policies, engine, [json.dumps(_EVENT | args).encode()]))[0]


_EVENT: dict[str, Any] = {"title": "x", "start": "2026-07-20T09:00"}


async def _propose_all(policies: Path, engine: str, raws: list[bytes]) -> list[tuple[Any, list[Any]]]:
    """Each raw argument document proposed (one gate, one session), with its events."""
    base = load_config(ROOT / "callgate.toml")
    cfg = replace(base, core=CoreConfig(engine=engine), policy=replace(base.policy, dir=str(policies)))
    snap = load_snapshot_from_config(cfg)
    store, idem = SQLiteStore(":memory:"), SQLiteIdempotencyStore(":memory:")
    await idem.start()
    try:
        clock = FixedClock(datetime.fromisoformat("2026-07-19T14:00:00+08:00"))
        gate = Shared.build(cfg, snap, store, clock, idem).gate(cfg, store, clock)
        s = await gate.open_session(SessionSpec(subject=Subject(tenant="acme", id="alice"), timezone="UTC"))
        await gate.list_tools(s.session_id, "m")
        found = []
        for n, raw in enumerate(raws):
            out = await gate.propose(
                Proposal(s.session_id, "m", "p", "calendar.create_event", "v1", raw, f"k{n}"),
                TraceContext.from_traceparent(None),
            )
            found.append((out, await store.list_events(out.record.invocation_id)))
        return found
    finally:
        await store.close()
        await idem.close()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_declared_strip_is_a_recorded_normalization(tmp_path: Path, engine: str) -> None:
    policies = _policies_with(tmp_path, {"/calendar_id": "identifier_strip", "/title": "free"})
    out, events = asyncio.run(_propose(policies, engine, {"calendar_id": ZERO_WIDTH}))
    assert out.rejection is None and out.record.state.value == "AUTHORIZED"
    assert json.loads(out.record.normalized_arguments)["calendar_id"] == "primary"
    (normalized,) = [e for e in events if e.kind == EventKind.NORMALIZED.value]
    assert normalized.data["applied"][0] == "text_policy:/calendar_id"
    # Mixed scripts cannot be stripped: refused either way, the pointer named.
    out, _ = asyncio.run(_propose(policies, engine, {"calendar_id": CYRILLIC}))
    assert out.rejection is not None and out.rejection.code == ErrorCode.TEXT_REFUSED.value
    assert [v.pointer for v in out.rejection.violations] == ["/calendar_id"]
    # Declared free: kept as proposed (the console shows it visibly).
    free = _policies_with(tmp_path / "free", {"/calendar_id": "free"})
    out, _ = asyncio.run(_propose(free, engine, {"calendar_id": BIDI}))
    assert out.rejection is None and json.loads(out.record.normalized_arguments)["calendar_id"] == BIDI


HIDDEN_CLASSES = {
    "DEL": "\x7f",
    "C0 control": "\x01",
    "C1 control (CSI)": "\x9b",
    "C1 next line": "\x85",
    "braille pattern blank": "\u2800",
    "interlinear annotation anchor": "\ufff9",
    "interlinear annotation terminator": "\ufffb",
    "private use": "\ue000",
    "supplementary private use": "\U000f0000",
    "unassigned": "\u0378",
    "Hangul filler": "\u3164",
    "halfwidth Hangul filler": "\uffa0",
}


def test_controls_format_private_use_and_unassigned_are_hidden() -> None:
    for name, c in HIDDEN_CLASSES.items():
        if c == "\x85":  # NEXT LINE is whitespace: a whitespace mark, like a tab
            assert unitext.flags(f"a{c}b") == {Flag.WHITESPACE_RUN}
            continue
        assert unitext.hidden_positions(f"pri{c}mary") == [3], name
        assert Flag.HIDDEN in unitext.flags(f"pri{c}mary"), name  # a Hangul filler mixes, too
        assert f"⟦U+{ord(c):04X}" in unitext.visible(f"pri{c}mary"), name
    assert unitext.flags("a\tb\nc") == {Flag.WHITESPACE_RUN}  # whitespace stays whitespace
    assert unitext.hidden_positions("a\tb\r\nc") == []


@pytest.mark.parametrize("engine", ["python", "native"])
def test_identifiers_holding_controls_private_use_or_unassigned_are_refused(
    tmp_path: Path, engine: str
) -> None:
    """Each class raw (DEL is a raw byte JSON allows; the others UTF-8) and escaped (``\\u007f``),
    both cores: refused ``text_refused`` naming the pointer, never parked for confirmation; under
    ``identifier_strip`` removed; as free text kept as proposed."""
    hidden = [c for c in HIDDEN_CLASSES.values() if c != "\x85"]
    raws = [
        json.dumps(_EVENT | {"calendar_id": f"pri{c}mary"}, ensure_ascii=ascii_only).encode()
        for c in hidden
        for ascii_only in (True, False)
    ]
    assert b'"pri\x7fmary"' in raws[1] and b"\\u007f" in raws[0]  # DEL raw and escaped
    for (out, _), raw in zip(asyncio.run(_propose_all(POLICIES, engine, raws)), raws, strict=True):
        assert out.rejection is not None, raw
        assert out.rejection.code == ErrorCode.TEXT_REFUSED.value, raw
        assert [v.pointer for v in out.rejection.violations] == ["/calendar_id"], raw
    strip = _policies_with(tmp_path, {"/calendar_id": "identifier_strip", "/title": "free"})
    stripped = [json.dumps(_EVENT | {"calendar_id": f"pri{c}mary"}).encode() for c in hidden]
    for (out, _), raw in zip(asyncio.run(_propose_all(strip, engine, stripped)), stripped, strict=True):
        assert out.rejection is None, raw
        assert json.loads(out.record.normalized_arguments)["calendar_id"] == "primary", raw
    free = [
        json.dumps(_EVENT | {"title": f"t{c}x", "calendar_id": "primary"}, ensure_ascii=False).encode()
        for c in hidden
    ]
    for (out, _), c in zip(asyncio.run(_propose_all(POLICIES, engine, free)), hidden, strict=True):
        assert out.rejection is None, ascii(c)
        assert json.loads(out.record.normalized_arguments)["title"] == f"t{c}x"


def test_the_mcp_elicitation_shows_what_the_arguments_hide() -> None:
    """The message an MCP client shows its user (callgate/mcp/gateway.py ``_question``)."""
    from callgate.client.outcomes import NeedsConfirmation
    from callgate.mcp.gateway import _question

    args = {"title": BIDI, "calendar_id": "primary", "note": CYRILLIC, "pad": "a" + " " * 120 + "b"}
    out = NeedsConfirmation(
        "inv_1", "sha256:" + "0" * 64, "c1", "2026-12-20T09:00:00Z", json.dumps(args).encode(), ""
    )
    text = _question(out, "calendar.create_event", "v1")
    assert BIDI not in text and "\u202e" not in text and "\u0430" not in text
    assert '"title": "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧yramirp⟦U+202C POP DIRECTIONAL FORMATTING⟧"' in text
    assert "prim⟦U+0430 CYRILLIC SMALL LETTER A⟧ry ⟦mixed scripts: Latin + Cyrillic⟧" in text
    assert '"pad": "a⟦120 spaces⟧b"' in text and '"calendar_id": "primary"' in text
