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


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Sidecar, Console]]:
    sc = start_sidecar()
    try:
        con = start_console(sc.confirmer)
        try:
            yield sc, con
        finally:
            con.stop()
    finally:
        sc.stop()


def login(browser: Browser, url: str, token: str) -> Page:
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    page = ctx.new_page()
    page.goto(url + "/login")
    page.fill("input[name=token]", token)
    page.click("form.login button[type=submit]")
    page.wait_for_url(url + "/")
    page.wait_for_selector("#live:not([hidden])", timeout=WAIT_MS)  # the SSE stream is open
    return page


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
    page.click(f"#item-{first.invocation_id} button.approve")
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
    page.click("button.approve")
    page.wait_for_selector("#refusal", timeout=WAIT_MS)
    assert "confirmation_not_pending" in page.inner_text("#refusal")
    assert sc.state(sid, shown.invocation_id) == "CANCELLED_BEFORE_COMMIT"
    assert sc.state(sid, replaced.invocation_id) == "AUTHORIZED"  # still waits for its own approval
    # A page whose digest is not the parked one (stale arguments on screen): the sidecar refuses
    # the approval and cancels the invocation; the console shows the refusal.
    page.goto(con.url + f"/t/acme/i/{replaced.invocation_id}")
    page.eval_on_selector("input[name=digest]", f"e => e.value = {shown.digest!r}")
    page.click("button.approve")
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
        page.click(f"#item-{waiting.invocation_id} button.approve")
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
