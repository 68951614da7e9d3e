"""What the approver sees when the model shapes the arguments (prompt injection): a real
``callgate serve`` and ``callgate console``, the rendered HTML read over HTTP."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from callgate.gen.v1 import callgate_pb2 as pb
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


def _post(url: str, data: dict[str, str], headers: dict[str, str]) -> int:
    req = urllib.request.Request(
        url, data=urllib.parse.urlencode(data).encode(), method="POST",
        headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/x-www-form-urlencoded", **headers},
    )  # fmt: skip

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: object, **k: object) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=15) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_a_form_posted_from_another_site_changes_nothing(parts: tuple[Sidecar, Console]) -> None:
    """Even with a valid CSRF token, a POST whose browser names another origin (or a sibling host
    of the same site) is refused (403) and approves nothing; the console's own origin approves."""
    sc, con = parts
    sid = sc.session("acme", "alice")
    parked = sc.propose(sid, {**EVENT, "title": "cross-site"}, "x1")
    page = http(con.url + "/", token=ALICE)[1]
    form = {
        "csrf_token": re.search(r'name="csrf_token" value="([^"]+)"', page).group(1),  # type: ignore[union-attr]
        "digest": parked.digest,
        "confirm": parked.digest[: len("sha256:") + 12],
    }
    approve = f"{con.url}/t/acme/i/{parked.invocation_id}/approve"
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": con.url, "Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        assert _post(approve, form, headers) == 403, headers
        assert sc.state(sid, parked.invocation_id) == "AUTHORIZED", headers
    # the console's own forms carry its origin: a page under no-referrer would send Origin: null
    req = urllib.request.Request(con.url + "/", headers={"Authorization": f"Bearer {ALICE}"})
    with urllib.request.urlopen(req, timeout=15) as r:
        assert r.headers["Referrer-Policy"] == "same-origin"
    assert _post(approve, form, {"Origin": con.url, "Sec-Fetch-Site": "same-origin"}) == 303
    assert sc.state(sid, parked.invocation_id) == "PREPARED"


@pytest.mark.parametrize("number", ["1e2", "100.00", "100.000000000000000000"])
def test_a_number_is_shown_as_the_model_wrote_it(parts: tuple[Sidecar, Console], number: str) -> None:
    """The raw column shows a number as proposed (not re-printed from a float as ``100.0``), the
    normalized one as it will run (``100``), and the table names the change."""
    sc, con = parts
    sid = sc.session("acme", "alice")
    raw = '{"title": "T", "start": "2026-12-20T09:00:00", "calendar_id": "main", "duration_minutes": %s}'
    parked = sc.gate.Propose(
        pb.ProposeRequest(
            session_id=sid, model_call_id="m", proposal_id=f"n-{number}", tool_name="calendar.create_event",
            tool_version="v1", arguments=(raw % number).encode(), idempotency_key=f"k-n-{number}",
        )
    )  # fmt: skip
    assert pb.State.Name(parked.state) == "AUTHORIZED"
    card = _card(http(f"{con.url}/t/acme/i/{parked.invocation_id}", token=ALICE)[1], parked.invocation_id)
    assert f'"duration_minutes": {number},\n' in card.split('<pre class="raw">')[1].split("</pre>")[0]
    assert '"duration_minutes": 100,\n' in card.split('<pre class="normalized">')[1].split("</pre>")[0]
    assert (
        f"<td><code>/duration_minutes</code></td><td><code>{number}</code></td><td><code>100</code></td>"
        in card
    )


def test_a_number_finer_than_a_double_never_reaches_the_approver(parts: tuple[Sidecar, Console]) -> None:
    """``100.0000000000000000001`` would run as 100, not as the model wrote it: the strict parse
    refuses it (``number_overflow``), so no card shows one number and runs another."""
    sc, _ = parts
    sid = sc.session("acme", "alice")
    raw = b'{"title": "T", "start": "2026-12-20T09:00:00", "calendar_id": "main", "duration_minutes": 100.0000000000000000001}'
    resp = sc.gate.Propose(
        pb.ProposeRequest(
            session_id=sid, model_call_id="m", proposal_id="n-fine", tool_name="calendar.create_event",
            tool_version="v1", arguments=raw, idempotency_key="k-n-fine",
        )
    )  # fmt: skip
    assert resp.rejection.code == "number_overflow", resp
