"""An upstream whose ``tools/list`` comes in pages (MCP pagination: ``nextCursor``), the SDK's
low-level server of tests/mcp_upstreams/paged.py: every page is read by ``callgate mcp import``,
``callgate mcp check`` and ``callgate mcp serve`` (the official Python SDK client lists and calls a
tool of the last page); a listing that cannot be taken as complete (a cursor answered again, a
tool named twice) is refused, naming the upstream and why, never pinned or served in part.

Found by the edge trial: before, a repeated cursor was followed 1,000 times and whatever those
pages held was taken as the upstream's listing (``import`` "ok: 3 tools pinned", ``check`` "ok");
a tool listed twice was pinned and served with one of its two definitions.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import short_tmpdir
from tests.mcp_env import (
    Published,
    cli,
    module_upstream,
    run,
    stdio,
    stdio_gateway,
    text_of,
    write_config,
    write_principals,
)

pytestmark = pytest.mark.timeout(240)

IMPORT = ("mcp", "import", "--side-effect", "t1=delete")
"""``t1`` says ``destructiveHint: false``; the operator classes it ``delete`` all the same."""


def upstream(mode: str = "") -> str:
    return module_upstream("paged", "tests.mcp_upstreams.paged", env={"PAGED_MODE": mode})


def make_folder(base: Path) -> Published:
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "cedar" / "policies.cedar").write_text(
        '@id("reads") permit (principal == User::"alice", action, resource);\n'
    )
    write_principals(base)
    return Published(base, write_config(base, upstream()), base)


@pytest.fixture
def folder() -> Iterator[Published]:
    base = short_tmpdir()
    try:
        yield make_folder(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def pins() -> Iterator[Path]:
    """``policies/tools`` of one ``callgate mcp import`` (:data:`IMPORT`) of the well-paged
    listing, in a folder of its own: the tests that start from it pinned copy it into their fresh
    folder instead of importing the same listing again (a pin names no path of its folder);
    :func:`test_every_page_is_pinned_listed_and_callable` still imports and checks it itself."""
    base = short_tmpdir()
    try:
        published = make_folder(base)
        r = cli(base, *IMPORT, "--config", str(published.config))
        assert r.returncode == 0, r.stdout + r.stderr
        assert pinned(base) == [f"paged.t{i}@v1.json" for i in range(7)]
        yield base / "policies" / "tools"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def imported(folder: Published, pins: Path) -> Published:
    """``folder`` pinned from the well-paged listing (what ``callgate mcp import`` writes)."""
    shutil.copytree(pins, folder.base / "policies" / "tools", dirs_exist_ok=True)
    return folder


def pinned(base: Path) -> list[str]:
    return sorted(p.name for p in (base / "policies" / "tools").glob("*.json"))


def test_every_page_is_pinned_listed_and_callable(folder: Published) -> None:
    """Also: ``t1`` (``destructiveHint: false`` upstream, classed ``delete`` at import) is listed
    with ``destructiveHint: true``; before, the upstream's ``false`` was shown for it."""
    r = cli(folder.base, *IMPORT, "--config", str(folder.config))
    assert r.returncode == 0, r.stdout + r.stderr
    assert pinned(folder.base) == [f"paged.t{i}@v1.json" for i in range(7)]  # 3 pages: 3 + 3 + 1
    r = cli(folder.base, "mcp", "check", "--config", str(folder.config))
    assert r.returncode == 0 and "ok: 7 pins match" in r.stdout, r.stdout + r.stderr

    async def go() -> None:
        async with stdio(folder) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}
            assert {f"paged__t{i}" for i in range(7)} <= set(listed), listed
            # the hints are callgate's class: a tool it classes delete is never shown additive
            t0, t1 = listed["paged__t0"].annotations, listed["paged__t1"].annotations
            assert t0 is not None and t0.read_only_hint is True
            assert t1 is not None and t1.read_only_hint is False and t1.destructive_hint is True, t1
            assert t1.idempotent_hint is True  # the upstream's other hints pass
            res = await c.call_tool("paged__t6", {"text": "last page"})  # a tool of the third page
            assert not res.is_error and "t6: last page" in text_of(res), text_of(res)

    run(go())


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("loop", "answered the cursor of an earlier page again (page 2): its listing never ends"),
        ("dup", "names the tool 't0' twice (page 3)"),
    ],
)
def test_a_listing_that_is_not_complete_is_refused_by_import_and_check(
    imported: Published, mode: str, why: str
) -> None:
    folder = imported  # pinned from the well-paged listing
    folder.config.write_text(folder.config.read_text().replace(upstream(), upstream(mode)))
    r = cli(folder.base, "mcp", "check", "--config", str(folder.config))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"unreachable paged: ListingInvalid: tools/list {why}" in r.stdout, r.stdout
    shutil.rmtree(folder.base / "policies" / "tools")
    r = cli(folder.base, *IMPORT, "--config", str(folder.config))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: upstream paged: cannot list tools (ListingInvalid: tools/list {why})" in r.stdout, (
        r.stdout
    )
    assert not (folder.base / "policies" / "tools").exists() or pinned(folder.base) == []  # nothing written


def test_a_client_cursor_is_refused_and_the_first_page_is_complete(imported: Published) -> None:
    """The gateway's own ``tools/list`` is one page (no ``nextCursor``): a client that pages gets
    every tool at once; a cursor the gateway never issued is refused with -32602 (MCP
    pagination), never answered with the full list again (a client appending pages would see
    every tool twice). Found by the edge trial: the cursor was ignored and the list repeated."""
    folder = imported

    async def go() -> None:
        async with stdio(folder) as c:
            first = await c.list_tools()
            assert first.next_cursor is None
            assert {f"paged__t{i}" for i in range(7)} <= {t.name for t in first.tools}
            with pytest.raises(MCPError) as raised:
                await c.list_tools(cursor="again")  # the high-level Client
            assert raised.value.code == types.INVALID_PARAMS, raised.value
            assert "unknown cursor" in raised.value.message, raised.value.message
        async with stdio_gateway(folder) as (session, _):
            whole = await session.list_tools()
            assert whole.next_cursor is None and len(whole.tools) == len(first.tools)
            with pytest.raises(MCPError) as raised:  # the raw ListToolsRequest with a cursor
                await session.send_request(
                    types.ListToolsRequest(params=types.PaginatedRequestParams(cursor="page-2")),
                    types.ListToolsResult,
                )
            assert raised.value.code == types.INVALID_PARAMS, raised.value
            res = await session.call_tool("paged__t0", {"text": "still served"})  # the session lives on
            assert not res.is_error and "t0: still served" in text_of(res), text_of(res)

    run(go())
