"""Issue 33 item 1: the one renderer of every confirmation surface (callgate/client/visible.py).

The slim client's renderer (the standard library's Unicode data) is held to the sidecar's (the
``regex`` package's properties and ``disarm``'s UTS #39 scripts, what the console and the MCP
elicitation show): the same marks on the issue's values and a table of others, never a hidden
character or a mixed-script string the sidecar marks left unmarked (every code point checked),
and the adapters' own prompts (LangChain HITL and Agent Inbox descriptions) show them.
"""

from __future__ import annotations

import json
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.adapters.hitl import Ask, HITLFormat, request
from callgate.arguments import unitext
from callgate.client.visible import STDLIB, SegKind

ISSUE = {
    "bidi override": "\u202eyramirp\u202c",
    "Cyrillic a": "prim\u0430ry",
    "zero-width": "pri\u200bmary\u2060",
    "120 spaces": "Team sync" + " " * 120 + "+ share calendar with attacker@example.com",
}
SAME = [
    *ISSUE.values(),
    "東京タワー Müller",
    "Αθήνα",
    "서울 漢字",
    "ｶﾀｶﾅ 漢字 ひらがな",
    "Ｈｅｌｌｏ",
    "a\tb\nc\u00a0d\u3000e",
    "x\u00ady",
    "e\u0301",
    "\U000e0041tag",
    "\ufe0f\u034f\u115f",
    "a\x7fb\x9bc\x01d\u2800e\ue000f\ufff9g\u0378",
    "Ωmega Ω",
    "pаypаl",
    "",
    "plain",
]


def test_same_marks_as_the_sidecar() -> None:
    for text in SAME:
        assert STDLIB.visible(text) == unitext.visible(text), ascii(text)
        assert STDLIB.segments(text) == unitext.segments(text), ascii(text)


def test_the_issue_values_are_marked() -> None:
    shown = {k: STDLIB.visible(v) for k, v in ISSUE.items()}
    assert (
        shown["bidi override"] == "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧yramirp⟦U+202C POP DIRECTIONAL FORMATTING⟧"
    )
    assert shown["Cyrillic a"] == "prim⟦U+0430 CYRILLIC SMALL LETTER A⟧ry ⟦mixed scripts: Latin + Cyrillic⟧"
    assert shown["zero-width"] == "pri⟦U+200B ZERO WIDTH SPACE⟧mary⟦U+2060 WORD JOINER⟧"
    assert shown["120 spaces"].startswith("Team sync⟦120 spaces⟧+ share")


def test_no_hidden_character_the_sidecar_marks_is_missed() -> None:
    """Every code point: what the sidecar shows as a hidden character or a whitespace mark, the
    standard library's renderer marks too (it may mark more: controls, unassigned code points)."""
    missed = []
    for o in range(sys.maxunicode + 1):
        c = chr(o)
        if 0xD800 <= o <= 0xDFFF:
            continue
        sidecar = unitext.RENDERER.hidden(c) or unitext.RENDERER.other_space(c)
        if sidecar and not (STDLIB.hidden(c) or STDLIB.other_space(c)):
            missed.append(f"U+{o:04X}")
    assert not missed, missed[:20]


LETTERS = st.sampled_from(
    "abcdefghijklmnopqrstuvwxyzABCXYZäéßñøł"  # Latin
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАВЕКМНОРСТХ"  # Cyrillic
    "αβγδεζηθικλμνξοπρστυφχψωΑΒΕΗΙΚΜΝΟΡΤΥΧ"  # Greek
    "漢字東京ひらがなカタカナ한국어ㄅㄆ"  # Han, kana, Hangul, Bopomofo
    "אבגدرس"  # Hebrew, Arabic
    "0123 -_.,"
)


@settings(max_examples=400, deadline=None)
@given(st.text(LETTERS, max_size=12))
def test_mixed_scripts_agree(text: str) -> None:
    assert bool(STDLIB.mixed_scripts(text)) == bool(unitext.mixed_scripts(text))
    assert STDLIB.visible(text) == unitext.visible(text)


def _ask(arguments: dict[str, str]) -> Ask:
    return Ask(
        "calendar__create_event", arguments, "calendar.create_event", "call_1", "inv_1",
        "sha256:" + "ab" * 32, "2026-07-20T09:00:00Z",
    )  # fmt: skip


def test_adapter_prompts_show_the_marks() -> None:
    """LangChain's HITL request and Agent Inbox's: the description a person reads carries the
    arguments with the marks; ``args`` stay the exact values (an edit starts from them)."""
    args = {"calendar_id": "primary", "title": ISSUE["Cyrillic a"], "notes": ISSUE["120 spaces"]}
    lc = request([_ask(args)], HITLFormat.LANGCHAIN, "resume")
    assert isinstance(lc, dict)
    action = lc["action_requests"][0]
    assert action["args"] == args
    text = action["description"]
    assert '"title": "prim⟦U+0430 CYRILLIC SMALL LETTER A⟧ry ⟦mixed scripts: Latin + Cyrillic⟧"' in text
    assert "Team sync⟦120 spaces⟧+ share calendar" in text
    assert "sha256:" + "ab" * 32 in text
    inbox = request([_ask({"title": ISSUE["bidi override"]})], HITLFormat.AGENT_INBOX, "console")
    assert isinstance(inbox, list)
    assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧yramirp" in inbox[0]["description"]
    assert "\u202e" not in inbox[0]["description"]
    assert json.loads(json.dumps(inbox))[0]["action_request"]["args"]["title"] == ISSUE["bidi override"]


def test_segments_kinds() -> None:
    kinds = [s.kind for s in STDLIB.segments("a  b\u200bc\u0430")]
    assert kinds == [SegKind.TEXT, SegKind.SPACE, SegKind.TEXT, SegKind.HIDDEN, SegKind.TEXT, SegKind.FOREIGN]
