"""An upstream tool whose ``inputSchema`` is not JSON Schema 2020-12 (draft-04's boolean
``exclusiveMinimum``, as npm ``@sylphlab/pdf-reader-mcp`` 0.3.23 lists ``read_pdf``;
tests/mcp_upstreams/draft04.py) is skipped by ``callgate mcp import``, naming the tool and the
schema problem, and never written (``callgate mcp check`` names it ``unservable``, not a ``new``
pin to make): the other tools of the upstream are pinned, ``callgate check``
passes and ``callgate mcp serve`` serves them.

Found by the wild trial: before, import wrote the ToolSpec, ``callgate check`` refused it
(``toolspec_invalid: True is not of type 'number'``) and the gateway's sidecar never became ready
(every ``tools/list`` of every upstream: ``not_ready``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mcp_env import Published, cli, module_upstream, permit_all_folder, run, stdio, text_of

pytestmark = pytest.mark.timeout(240)

UPSTREAM = module_upstream("draft", "tests.mcp_upstreams.draft04")


@pytest.fixture
def folder() -> Iterator[Published]:
    with permit_all_folder(UPSTREAM) as published:
        yield published


def test_a_tool_with_a_schema_that_is_not_2020_12_is_skipped_and_the_rest_served(folder: Published) -> None:
    r = cli(folder.base, "mcp", "import", "--config", str(folder.config))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped draft.read_pdf: toolspec_invalid:" in r.stdout, r.stdout
    assert "exclusiveMinimum" in r.stdout, r.stdout  # where, in the upstream's schema
    assert sorted(p.name for p in folder.tools_dir.glob("*.json")) == ["draft.echo@v1.json"]

    r = cli(folder.base, "mcp", "check", "--config", str(folder.config))  # named, not a pin to make
    assert r.returncode == 0 and "unservable draft.read_pdf: toolspec_invalid:" in r.stdout, (
        r.stdout + r.stderr
    )
    assert "new draft.read_pdf" not in r.stdout, r.stdout

    r = cli(folder.base, "check", "--config", str(folder.config), "--offline")
    assert r.returncode == 0 and "ok: 1 tools" in r.stdout, r.stdout + r.stderr

    async def go() -> None:
        async with stdio(folder) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert "draft__echo" in names and "draft__read_pdf" not in names, names
            res = await c.call_tool("draft__echo", {"text": "still served"})
            assert not res.is_error and "still served" in text_of(res), text_of(res)

    run(go())
