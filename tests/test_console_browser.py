"""The confirmation console end to end in a real browser (issue 13): Debian's headless Chromium
driven by Playwright (``executable_path``, no browser download) against a real ``callgate serve``
and a real ``callgate console`` started here. A proposal that needs confirmation appears live and
is approved (the invocation becomes PREPARED, the event names the person); another is denied; a
replaced-arguments proposal cannot be approved from the old page; an expired one leaves the list;
a confirmer of another tenant never sees it; a form without its CSRF token and a bad token are
refused. Screenshots of the list and of an item page are saved (CALLGATE_CONSOLE_SCREENSHOTS, else
a temporary directory) for docs/CONSOLE.md."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import ROOT
from tests.console_fixture import ALICE, EVENT, GINA, Console, Sidecar, http, start_console, start_sidecar

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

WAIT_MS = 15_000


def chromium_path() -> str:
    """Debian's chromium, installed by scripts/chromium (tests/markers.py runs it first)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/chromium"), "path"], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        pytest.fail("chromium is missing: run scripts/chromium install (apt-get install chromium)")
    return out.stdout.strip()


@pytest.fixture(scope="module")
def shots() -> Path:
    where = os.environ.get("CALLGATE_CONSOLE_SCREENSHOTS") or tempfile.mkdtemp(prefix="cg-console-shots-")
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


CONSOLE_SECRET = "calendar-" + "tok-5Jf8Qw2Zr7Kp"
"""The sidecar's ``calendar_api_token`` (a configured upstream secret)."""
PATTERN_KEY = "sk-" + "consoleKeyA1b2C3d4E5f6G7h8"
"""A key no one configured that the ``api_key`` secret pattern describes."""


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Sidecar, Console]]:
    sc = start_sidecar(secret=CONSOLE_SECRET)
    try:
        con = start_console(sc.confirmer)
        try:
            yield sc, con
        finally:
            con.stop()
    finally:
        sc.stop()


IDENTITIES = {ALICE: "alice@acme.example", GINA: "gina@globex.example"}


def sign_in(page: Page, token: str) -> None:
    """Fill and send the sign-in form the page shows."""
    if page.query_selector("input[name=identity]") is not None:
        page.fill("input[name=identity]", IDENTITIES[token])
    page.fill("input[name=token]", token)
    page.click("form.login button[type=submit]")


def login(browser: Browser, url: str, token: str, width: int = 1200) -> Page:
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    page = ctx.new_page()
    page.goto(url + "/login")
    sign_in(page, token)
    page.wait_for_url(url + "/")
    page.wait_for_selector("#live:not([hidden])", timeout=WAIT_MS)  # the SSE stream is open
    return page


def approve(page: Page, scope: str = "") -> None:
    """The two clicks of an approval: open the card's approval step, confirm the digest it names."""
    page.click(f"{scope} summary.approve".strip())
    page.click(f"{scope} button.confirm-approve".strip())


def test_approve_deny_replace_tenants_csrf_and_tokens(
    stack: tuple[Sidecar, Console], browser: Browser, shots: Path
) -> None:
    sc, con = stack
    page = login(browser, con.url, ALICE)
    assert "alice@acme.example" in page.inner_text("#who")
    sid = sc.session("acme", "alice")

    # A proposal appears without a reload, with what the person must see.
    first = sc.propose(sid, EVENT, "p1")
    card = page.wait_for_selector(f"#item-{first.invocation_id}", timeout=WAIT_MS)
    text = card.inner_text()
    assert first.digest in text and "calendar.create_event" in text and "alice" in text
    assert "calendar-create-scheduler" in text  # the policy that asked for a confirmation
    assert "/calendar_id" in card.inner_text()  # what normalization changed: "main" -> "primary"
    assert '"primary"' in card.query_selector(".normalized").inner_text()
    assert '"main"' in card.query_selector(".raw").inner_text()
    second = sc.propose(sid, {**EVENT, "title": "Team lunch"}, "p2")
    page.wait_for_selector(f"#item-{second.invocation_id}", timeout=WAIT_MS)
    ids = page.eval_on_selector_all(".card", "cs => cs.map(c => c.dataset.invocation)")
    assert ids[:2] == [second.invocation_id, first.invocation_id]  # newest first
    page.screenshot(path=str(shots / "console-list.png"), full_page=True)

    # Approve the first with a note: PREPARED, the trail names the person.
    page.fill(f"#item-{first.invocation_id} input[name=note]", "checked with Bob")
    assert first.digest[:19] in (page.text_content(f"#item-{first.invocation_id} .confirm-box") or "")
    approve(page, f"#item-{first.invocation_id}")
    page.wait_for_selector("#done", timeout=WAIT_MS)
    assert page.inner_text("#state") == "PREPARED"
    trail = page.inner_text("#trail")
    assert "confirmed" in trail and "alice@acme.example" in trail and "checked with Bob" in trail
    assert sc.state(sid, first.invocation_id) == "PREPARED"
    page.screenshot(path=str(shots / "console-item.png"), full_page=True)

    # Deny the second from the list; the approved one has left it.
    page.goto(con.url + "/")
    page.wait_for_selector(f"#item-{second.invocation_id}", timeout=WAIT_MS)
    assert page.query_selector(f"#item-{first.invocation_id}") is None
    page.click(f"#item-{second.invocation_id} button.deny")
    page.wait_for_selector("#done", timeout=WAIT_MS)
    assert page.inner_text("#state") == "CANCELLED_BEFORE_COMMIT"
    assert "confirmation_rejected" in page.inner_text("#trail")
    assert sc.state(sid, second.invocation_id) == "CANCELLED_BEFORE_COMMIT"

    # Replaced arguments: the page shows the original; the agent cancels it and proposes other
    # arguments under the same key. The old page's approval is refused and approves nothing.
    shown = sc.propose(sid, EVENT, "p3", key="k-replace")
    page.goto(con.url + f"/t/acme/i/{shown.invocation_id}")
    sc.gate.Cancel(
        pb.CancelRequest(invocation_id=shown.invocation_id, reason="arguments replaced", session_id=sid)
    )
    replaced = sc.propose(sid, {**EVENT, "title": "Dentist (moved)"}, "p4", key="k-replace")
    assert replaced.invocation_id != shown.invocation_id and replaced.digest != shown.digest
    approve(page)
    page.wait_for_selector("#refusal", timeout=WAIT_MS)
    assert "confirmation_not_pending" in page.inner_text("#refusal")
    assert sc.state(sid, shown.invocation_id) == "CANCELLED_BEFORE_COMMIT"
    assert sc.state(sid, replaced.invocation_id) == "AUTHORIZED"  # still waits for its own approval
    # A page whose digest is not the parked one (stale arguments on screen): the sidecar refuses
    # the approval and cancels the invocation; the console shows the refusal.
    page.goto(con.url + f"/t/acme/i/{replaced.invocation_id}")
    page.eval_on_selector("input[name=digest]", f"e => e.value = {shown.digest!r}")
    page.eval_on_selector("button.confirm-approve", f"e => e.value = {shown.digest[:19]!r}")
    approve(page)
    page.wait_for_selector("#refusal", timeout=WAIT_MS)
    assert "confirmation_digest_mismatch" in page.inner_text("#refusal")
    assert sc.state(sid, replaced.invocation_id) == "CANCELLED_BEFORE_COMMIT"

    # A confirmer of another tenant never sees acme's items, not even by URL.
    waiting = sc.propose(sid, {**EVENT, "title": "Quarterly review"}, "p5")
    page.goto(con.url + "/")
    page.wait_for_selector(f"#item-{waiting.invocation_id}", timeout=WAIT_MS)
    gina_ctx = browser.new_context(extra_http_headers={"Authorization": f"Bearer {GINA}"})
    gina = gina_ctx.new_page()
    gina.goto(con.url + "/")
    assert "gina@globex.example" in gina.inner_text("#who")
    assert gina.query_selector(".card") is None and waiting.invocation_id not in gina.content()
    resp = gina.goto(con.url + f"/t/acme/i/{waiting.invocation_id}")
    assert resp is not None and resp.status == 404
    assert waiting.invocation_id not in gina.content()
    gina_ctx.close()

    # CSRF: the form without its token is refused, nothing is approved.
    page.eval_on_selector(f"#item-{waiting.invocation_id} input[name=csrf_token]", "e => e.remove()")
    with page.expect_navigation():
        approve(page, f"#item-{waiting.invocation_id}")
    assert "CSRF" in page.inner_text("#denied")
    assert sc.state(sid, waiting.invocation_id) == "AUTHORIZED"
    status, _ = http(
        con.url + f"/t/acme/i/{waiting.invocation_id}/approve", token=ALICE, data={"digest": waiting.digest}
    )
    assert status == 403 and sc.state(sid, waiting.invocation_id) == "AUTHORIZED"

    # A bad token: 401.
    bad_ctx = browser.new_context(extra_http_headers={"Authorization": "Bearer not-a-known-token-000"})
    resp = bad_ctx.new_page().goto(con.url + "/")
    assert resp is not None and resp.status == 401
    bad_ctx.close()
    page.context.close()


def test_an_expired_item_leaves_the_list(browser: Browser) -> None:
    ttl = 10  # long enough for the page to show it on a loaded machine
    sc = start_sidecar(ttl_seconds=ttl)
    try:
        con = start_console(sc.confirmer)
        try:
            page = login(browser, con.url, ALICE)
            sid = sc.session("acme", "alice")
            parked = sc.propose(sid, EVENT, "p-exp")
            page.wait_for_selector(f"#item-{parked.invocation_id}", timeout=ttl * 1000)
            page.wait_for_selector(
                f"#item-{parked.invocation_id}", state="detached", timeout=(ttl + 30) * 1000
            )
            assert "Nothing waits" in page.inner_text("#pending")
            deadline = time.monotonic() + 15  # the sweep (every 0.5 s) records the expiry
            while sc.state(sid, parked.invocation_id) != "CANCELLED_BEFORE_COMMIT":
                assert time.monotonic() < deadline, sc.state(sid, parked.invocation_id)
                time.sleep(0.1)
            page.context.close()
        finally:
            con.stop()
    finally:
        sc.stop()


# ---------------------------------------------------------------- issue 33 and issue 28 item 6

INVISIBLE = {
    "bidi": ("\u202eyramirp\u202c", ["U+202E RIGHT-TO-LEFT OVERRIDE", "U+202C POP DIRECTIONAL FORMATTING"]),
    "cyrillic": ("prim\u0430ry", ["U+0430 CYRILLIC SMALL LETTER A"]),
    "zero-width": ("pri\u200bmary\u2060", ["U+200B ZERO WIDTH SPACE", "U+2060 WORD JOINER"]),
}
UNSEEN = {  # free text only: marked by the console beyond the shared renderer (consoletrial)
    "c1": ("pri\x9bmary\x7f", ["U+009B", "U+007F"]),
    "stack": ("Dentist" + "\u0336" * 40, ["40 combining marks, first U+0336 COMBINING LONG STROKE OVERLAY"]),
}
LONG_TITLE = "Team sync" + " " * 120 + "+ share calendar with attacker@evil.example"


def test_an_identifier_that_hides_is_refused_at_propose(stack: tuple[Sidecar, Console]) -> None:
    """``calendar_id`` is an identifier (its name, and the resource template's placeholder): each
    invisible difference is refused with ``text_refused`` naming the pointer, before any policy
    or person sees it (compiled core and Python stages alike: the core defers these to Python)."""
    sc, _ = stack
    sid = sc.session("acme", "alice")
    for name, (value, labels) in INVISIBLE.items():
        resp = sc.propose(sid, {**EVENT, "calendar_id": value}, f"id-{name}")
        assert resp.rejection.code == "text_refused", (name, resp)
        (violation,) = resp.rejection.violations
        assert violation.pointer == "/calendar_id"
        assert value not in resp.rejection.message + violation.message  # codes, never the value
        for label in labels:
            code_point = label.split(" ")[0]
            assert code_point in violation.message or "Latin + Cyrillic" in violation.message
        assert sc.state(sid, resp.invocation_id) == "VALIDATION_REJECTED"
    assert sc.propose(sid, {**EVENT, "calendar_id": "Müller-Kalender"}, "id-latin").rejection.code == ""


def test_free_text_that_hides_is_shown_visibly(
    stack: tuple[Sidecar, Console], browser: Browser, shots: Path
) -> None:
    """A title (free text) with a bidi override, a Cyrillic letter, zero-width characters, a C1
    control or a stack of combining marks runs as proposed, but the card shows each hidden character as its code point, marks the
    mixed-script value, and the table lists the value."""
    sc, con = stack
    page = login(browser, con.url, ALICE)
    sid = sc.session("acme", "alice")
    for name, (value, labels) in (INVISIBLE | UNSEEN).items():
        parked = sc.propose(sid, {**EVENT, "calendar_id": "primary", "title": value}, f"inv-{name}")
        card = page.wait_for_selector(f"#item-{parked.invocation_id}", timeout=WAIT_MS)
        for box in (".normalized", ".raw"):
            shown = card.query_selector(box).inner_text()
            assert '"primary"' in shown  # the calendar is plain
            for label in labels:
                assert f"⟦{label}⟧" in shown, (name, box, shown)
            assert value not in shown  # the hidden characters themselves never reach the page
        row = card.query_selector('table.changes tr.flagged[data-pointer="/title"]')
        assert row is not None, name
        if name == "cyrillic":
            assert card.query_selector(".normalized .mixed[data-scripts='Latin + Cyrillic']") is not None
            assert card.query_selector(".normalized mark.foreign") is not None
            assert "mixed scripts: Latin + Cyrillic" in card.query_selector(".normalized").inner_text()
            assert "mixed script" in row.inner_text()
        else:
            assert card.query_selector(".normalized .cp.hidden") is not None
            assert "hidden characters" in row.inner_text()
    page.screenshot(path=str(shots / "console-invisible.png"), full_page=True)
    page.context.close()


def _holds_a_secret(text: str) -> list[str]:
    """Which of the two secrets ``text`` shows in clear (names only: a failure prints no secret)."""
    folded = text.casefold()
    return [
        n for n, v in (("configured", CONSOLE_SECRET), ("pattern", PATTERN_KEY)) if v.casefold() in folded
    ]


def test_a_secret_in_the_arguments_is_masked_for_the_approver(
    stack: tuple[Sidecar, Console], browser: Browser, shots: Path
) -> None:
    """Old main showed an argument that is a credential in clear: in both argument boxes, the
    table, the trail, the Confirmations answers and ``callgate explain``. Now the sidecar masks
    each secret before it leaves for a person (the configured secret by its name, the pattern's
    match with its last four characters), the card marks it and lists the value as holding a
    masked secret, and the approval still binds the exact arguments: the digest is the one of
    the unmasked arguments, and what runs holds the secret."""
    sc, con = stack
    page = login(browser, con.url, ALICE)
    sid = sc.session("acme", "alice")
    title = f"rotate {PATTERN_KEY} then {CONSOLE_SECRET} done"
    parked = sc.propose(sid, {**EVENT, "calendar_id": "primary", "title": title}, "p-secret")
    card = page.wait_for_selector(f"#item-{parked.invocation_id}", timeout=WAIT_MS)
    tail = PATTERN_KEY[-4:]
    for box in (".normalized", ".raw"):
        shown = card.query_selector(box).inner_text()
        marked = "⟦masked calendar_api_token⟧" in shown and f"⟦masked api_key …{tail}⟧" in shown
        assert marked and "rotate" in shown and "done" in shown, box
        assert card.query_selector(f"{box} .cp.masked[data-secret='calendar_api_token']") is not None, box
        assert card.query_selector(f"{box} .cp.masked[data-secret='api_key']") is not None, box
    row = card.query_selector('table.changes tr.flagged[data-pointer="/title"]')
    assert row is not None and "masked secret" in row.inner_text()
    assert _holds_a_secret(page.content()) == []
    page.screenshot(path=str(shots / "console-masked.png"), full_page=True)

    # The confirmer's gRPC answers carry the masks, never the secret; the digest is unchanged.
    pending = [
        p for p in sc.confirmations.ListPending(pb.ListPendingRequest(tenant="acme")).pending
        if p.invocation_id == parked.invocation_id
    ]  # fmt: skip
    assert len(pending) == 1 and pending[0].digest == parked.digest
    answered = (pending[0].normalized_arguments + pending[0].raw_arguments).decode()
    assert _holds_a_secret(answered) == [] and "⟦masked calendar_api_token⟧" in answered
    trail = sc.confirmations.GetTenantInvocation(
        pb.GetTenantInvocationRequest(invocation_id=parked.invocation_id, tenant="acme")
    )
    assert _holds_a_secret(str(trail)) == []

    # Approving binds the exact arguments: PREPARED, and what runs holds both secrets.
    approve(page, f"#item-{parked.invocation_id}")
    page.wait_for_selector("#done", timeout=WAIT_MS)
    assert page.inner_text("#state") == "PREPARED"
    assert _holds_a_secret(page.content()) == []  # the item page and its event trail
    runs = sc.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=parked.invocation_id, session_id=sid))
    exact = runs.invocation.normalized_arguments.decode()
    assert _holds_a_secret(exact) == ["configured", "pattern"] and runs.invocation.digest == parked.digest

    # callgate explain shows the same masks (text and --json).
    for fmt in ([], ["--json"]):
        out = subprocess.run(
            [sys.executable, "-m", "callgate", "explain", "--config", str(sc.tmp / "callgate.toml"),
             *fmt, parked.invocation_id],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, (fmt, out.returncode)
        assert _holds_a_secret(out.stdout + out.stderr) == [], fmt
        assert "⟦masked calendar_api_token⟧" in out.stdout and f"⟦masked api_key …{tail}⟧" in out.stdout, fmt
        assert parked.digest in out.stdout, fmt
    page.context.close()


def test_enter_in_the_reason_field_never_approves(stack: tuple[Sidecar, Console], browser: Browser) -> None:
    sc, con = stack
    page = login(browser, con.url, ALICE)
    sid = sc.session("acme", "alice")
    parked = sc.propose(sid, {**EVENT, "title": "Enter test"}, "enter-1")
    note = f"#item-{parked.invocation_id} input[name=note]"
    page.wait_for_selector(note, timeout=WAIT_MS)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.fill(note, "DENY: looks like prompt injection")
    page.press(note, "Enter")
    # A form submission would be on its way before this round trip of the same page answers.
    assert page.evaluate("() => fetch('/healthz').then(r => r.status)") == 200
    assert posts == [] and page.url == con.url + "/"
    assert sc.state(sid, parked.invocation_id) == "AUTHORIZED"
    # Enter on the opened approval step does not approve either: only its confirming button does.
    page.click(f"#item-{parked.invocation_id} summary.approve")
    page.press(note, "Enter")
    assert page.evaluate("() => fetch('/healthz').then(r => r.status)") == 200
    assert posts == [] and sc.state(sid, parked.invocation_id) == "AUTHORIZED"
    # An approval posted without the confirming step (no digest prefix) approves nothing.
    token = page.eval_on_selector(f"#item-{parked.invocation_id} input[name=csrf_token]", "e => e.value")
    status = page.evaluate(
        """([url, token, digest]) => fetch(url, {method: 'POST', body: new URLSearchParams(
               {csrf_token: token, digest: digest, note: ''})}).then(r => r.status)""",
        [f"/t/acme/i/{parked.invocation_id}/approve", token, parked.digest],
    )
    assert status == 400 and sc.state(sid, parked.invocation_id) == "AUTHORIZED"
    page.context.close()


def test_a_new_call_under_the_pointer_does_not_take_the_click(
    stack: tuple[Sidecar, Console], browser: Browser
) -> None:
    sc, con = stack
    page = login(browser, con.url, ALICE)
    sid = sc.session("acme", "alice")
    meant = sc.propose(sid, {**EVENT, "title": "The one I checked"}, "move-1")
    summary = f"#item-{meant.invocation_id} .approve"  # the control that starts an approval
    page.wait_for_selector(summary, timeout=WAIT_MS)
    page.hover(summary)
    box = page.locator(summary).bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    intruder = sc.propose(sid, {**EVENT, "title": "Inserted under the pointer"}, "move-2")
    page.wait_for_selector(f"#item-{intruder.invocation_id}", timeout=WAIT_MS)
    page.mouse.click(x, y)  # the person clicks where the pointer rests
    page.wait_for_selector("details.approve-step[open], #done", timeout=WAIT_MS)
    # The click approved nothing; it opened one card's confirmation, which names that card's digest.
    assert sc.state(sid, meant.invocation_id) == "AUTHORIZED"
    assert sc.state(sid, intruder.invocation_id) == "AUTHORIZED"
    opened = page.eval_on_selector("details.approve-step[open]", "d => d.closest('.card').dataset.invocation")
    digest = meant.digest if opened == meant.invocation_id else intruder.digest
    assert digest[:19] in page.inner_text(f"#item-{opened} .confirm-box")
    assert page.locator("#announce").inner_text().startswith("1 new call")
    # The deliberate second click approves exactly the card it is in.
    page.click(f"#item-{opened} button.confirm-approve")
    page.wait_for_selector("#done", timeout=WAIT_MS)
    other = intruder if opened == meant.invocation_id else meant
    assert sc.state(sid, opened) == "PREPARED" and sc.state(sid, other.invocation_id) == "AUTHORIZED"
    page.context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_long_values_are_whole_at_common_widths(
    stack: tuple[Sidecar, Console], browser: Browser, shots: Path, width: int
) -> None:
    sc, con = stack
    page = login(browser, con.url, ALICE, width=width)
    sid = sc.session("acme", "alice")
    parked = sc.propose(sid, {**EVENT, "title": LONG_TITLE}, f"long-{width}")
    for url in (con.url + "/", con.url + f"/t/acme/i/{parked.invocation_id}"):
        page.goto(url)
        card = f"#item-{parked.invocation_id}"
        page.wait_for_selector(card, timeout=WAIT_MS)
        for box in (".normalized", ".raw"):
            text = page.inner_text(f"{card} {box}")
            assert "Team sync⟦120 spaces⟧+ share calendar with attacker@evil.example" in text, text
            # Nothing of the box is out of view: no sideways scrolling, inside the viewport.
            fits = page.eval_on_selector(
                f"{card} {box}",
                """(e) => { const r = e.getBoundingClientRect();
                     return [e.scrollWidth <= e.clientWidth, r.left >= 0, r.right <= window.innerWidth]; }""",
            )
            assert fits == [True, True, True], (url, box, fits)
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(shots / f"console-long-{width}.png"), full_page=True)
    page.context.close()


def test_a_page_without_a_session_signs_in_and_comes_back(
    stack: tuple[Sidecar, Console], browser: Browser
) -> None:
    sc, con = stack
    sid = sc.session("acme", "alice")
    parked = sc.propose(sid, {**EVENT, "title": "Follow the link"}, "redirect-1")
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(con.url + f"/t/acme/i/{parked.invocation_id}")
    assert page.url.startswith(con.url + "/login?next=")
    sign_in(page, ALICE)
    page.wait_for_url(con.url + f"/t/acme/i/{parked.invocation_id}")
    assert parked.digest in page.inner_text(f"#item-{parked.invocation_id}")
    page.goto(con.url + "/login?next=https://evil.example/")
    sign_in(page, ALICE)
    page.wait_for_url(con.url + "/")  # never to another origin
    ctx.close()
