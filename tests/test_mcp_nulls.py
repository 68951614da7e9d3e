"""A JSON ``null`` an MCP client sends reaches the upstream as ``null`` (tests/mcp_upstreams/nulls.py:
``limit`` absent is 10 results, ``null`` is no limit), is shown in the confirmation question and
bound into the digest as sent; a policy still sees it as absent (docs/MCP.md, "Arguments as
policies see them").

Found by the wild trial: the gateway proposed the arguments after the client library's
null-stripping (meant for OpenAI strict mode, where a model must send null for an optional
member), so ``{"q": "x", "limit": null}`` reached the upstream as ``{"q": "x"}``: 10 results
instead of no limit, and a confirmed call ran with other arguments than the client sent.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.conftest import short_tmpdir
from tests.mcp_env import (
    Published,
    accept,
    cli,
    module_upstream,
    run,
    stdio,
    text_of,
    write_config,
    write_principals,
)

pytestmark = pytest.mark.timeout(240)

UPSTREAM = module_upstream("nul", "tests.mcp_upstreams.nulls")

POLICIES = """
@id("search") permit (principal == User::"alice", action == Action::"mcp.nul.search", resource)
when { context.args.q != "all" };

@id("everything-confirm") @confirm("searching everything needs the user's OK")
permit (principal == User::"alice", action == Action::"mcp.nul.search", resource)
when { context.args.q == "all" };

@id("no-large-limit") forbid (principal, action == Action::"mcp.nul.search", resource)
when { context.args has limit && context.args.limit > 100 };
"""


@pytest.fixture
def folder() -> Iterator[Published]:
    base = short_tmpdir()
    try:
        (base / "policies" / "cedar").mkdir(parents=True)
        (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
        write_principals(base)
        yield Published(base, write_config(base, UPSTREAM), base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_null_argument_reaches_the_upstream_as_null(folder: Published) -> None:
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config))
    assert r.returncode == 0, r.stdout + r.stderr
    elicit = accept(True)

    async def go() -> list[str]:
        async with stdio(folder, elicitation_callback=elicit) as c:
            out = []
            for args in (
                {"q": "x", "limit": None},
                {"q": "x"},
                {"q": "x", "limit": 3},
                {"q": "all", "limit": None},
            ):
                res = await c.call_tool("nul__search", args)
                assert not res.is_error, text_of(res)
                out.append(text_of(res))
            return out

    null, absent, three, confirmed = run(go())
    assert 'got {"limit": null, "q": "x"}' in null, null  # was: got {"q": "x"} (10 results)
    assert 'got {"q": "x"}' in absent, absent
    assert 'got {"limit": 3, "q": "x"}' in three, three
    assert 'got {"limit": null, "q": "all"}' in confirmed, confirmed
    assert len(elicit.asked) == 1 and '"limit": null' in elicit.asked[0], elicit.asked  # type: ignore[attr-defined]
