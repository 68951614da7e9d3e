"""What the approver sees when the model shapes the arguments (prompt injection): a real
``callgate serve`` and ``callgate console``, the rendered HTML read over HTTP."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.console_fixture import ALICE, EVENT, Console, Sidecar, http, start_console, start_sidecar

UNSEEN = {
    "del": ("a\x7fb", "⟦U+007F⟧"),
    "c1": ("a\x9bb", "⟦U+009B⟧"),
    "annotation": ("x\ufff9y", "⟦U+FFF9 INTERLINEAR ANNOTATION ANCHOR⟧"),
    "blank": ("p\u2800q", "⟦U+2800 BRAILLE PATTERN BLANK⟧"),
    "private": ("a\ue000b", "⟦U+E000⟧"),
    "stack": ("Dentist" + "\u0336" * 40, "⟦40 combining marks, first U+0336 COMBINING LONG STROKE OVERLAY⟧"),
}


@pytest.fixture(scope="module")
def parts() -> Iterator[tuple[Sidecar, Console]]:
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer)
        try:
            yield sc, con
        finally:
            con.stop()
    finally:
        sc.stop()


def _card(page: str, invocation_id: str) -> str:
    start = page.index(f'id="item-{invocation_id}"')
    return page[start : page.index("</article>", start)]


def test_characters_a_browser_draws_as_nothing_are_marked(parts: tuple[Sidecar, Console]) -> None:
    """DEL, C1 controls, other format characters, private-use and blank glyphs, and a stack of
    combining marks drawn over the neighbouring lines never reach the page as such: each is a
    mark with its code point, and the value is listed as hiding characters."""
    sc, con = parts
    sid = sc.session("acme", "alice")
    parked = {k: sc.propose(sid, {**EVENT, "title": title}, f"u-{k}") for k, (title, _) in UNSEEN.items()}
    status, page = http(con.url + "/", token=ALICE)
    assert status == 200
    for key, (title, mark) in UNSEEN.items():
        card = _card(page, parked[key].invocation_id)
        assert ("\u0336" * 4 if key == "stack" else title) not in card, key
        assert card.count(mark) >= 3, key  # both argument boxes and the table
        row = re.search(r'<tr class="flagged" data-pointer="/title">.*?</tr>', card)
        assert row is not None and "hidden characters" in row.group(), key
