"""``callgate mcp import --side-effect PATTERN=CLASS`` (docs/MCP.md, "Five minutes" step 2): glob
patterns on ``<upstream>.<tool>`` and on the bare tool name, their precedence (exact name, then the
longest literal prefix counted in the full name, then the first given), the error for a pattern
that matches no listed tool and for an exact name that names none (with the closest names), the refusal to class a ``destructiveHint: true`` tool below ``modify``
by pattern, and ``--accept-proposed`` for what no name or pattern matches.

Each test runs one import against the real SDK upstream ``tests/mcp_upstreams/server.py`` over
stdio: ``lookup``, ``rug_pull``, ``forecast``, ``hang``, ``crash``, ``echo_env`` read-only hinted;
``slow_note``, ``write_note`` ``destructiveHint: false``; ``remove`` ``destructiveHint: true``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from callgate.mcp.cli import _pattern_for
from callgate.mcp.pins import SideEffect
from tests.conftest import short_tmpdir
from tests.mcp_env import ROOT, cli, write_config, write_policies, write_principals

UPSTREAM = """
[[mcp.upstreams]]
name = "up"
command = {py}
args = ["-m", "tests.mcp_upstreams.server", "--state", {st}]
cwd = {root}
env = {{ PYTHONPATH = {root} }}
timeout_seconds = 20.0
"""


class Folder:
    def __init__(self) -> None:
        self.base = short_tmpdir()
        state = self.base / "state"
        state.mkdir()
        write_policies(self.base, {}, "")
        write_principals(self.base)
        q = json.dumps
        self.config = write_config(
            self.base, UPSTREAM.format(py=q(sys.executable), st=q(str(state)), root=q(str(ROOT)))
        )
        self.tools = self.base / "policies" / "tools"

    def import_(self, *args: str) -> Any:
        return cli(self.base, "mcp", "import", "--config", str(self.config), *args)

    def cls(self, tool: str) -> str:
        return str(json.loads((self.tools / f"up.{tool}@v1.json").read_text())["side_effect_class"])

    def written(self) -> list[Path]:
        return list(self.tools.glob("*.json"))


@pytest.fixture
def folder() -> Folder:
    return Folder()


def test_precedence_rule_without_an_upstream() -> None:
    pats = [("up.*", SideEffect.DELETE), ("*_note", SideEffect.CREATE), ("slow_*", SideEffect.MODIFY)]
    # "*_note" matches "up.slow_note" itself: literal prefix 0; "slow_*" only the bare name: "up." + 5
    assert _pattern_for("up", "slow_note", pats) == ("slow_*", SideEffect.MODIFY)
    assert _pattern_for("up", "write_note", pats) == ("up.*", SideEffect.DELETE)  # 3 beats 0
    tie = [("up.e*", SideEffect.CREATE), ("e*", SideEffect.MODIFY)]  # both "up.e": the first given
    assert _pattern_for("up", "echo_env", tie) == ("up.e*", SideEffect.CREATE)
    assert _pattern_for("up", "echo_env", tie[::-1]) == ("e*", SideEffect.MODIFY)
    assert _pattern_for("other", "echo_env", [("up.*", SideEffect.CREATE)]) is None
    assert _pattern_for("up", "Echo_env", [("up.e*", SideEffect.CREATE)]) is None  # case-sensitive


@pytest.mark.timeout(120)
def test_patterns_and_their_precedence_are_pinned_and_said(folder: Folder) -> None:
    r = folder.import_(
        "--side-effect", "up.*=delete",          # every tool, read-only hinted ones too (prefix "up.")
        "--side-effect", "*_note=read_only",     # matches "up.slow_note" as written: prefix "", loses
        "--side-effect", "slow_*=create",        # the bare name only: counted as "up.slow_", wins
        "--side-effect", "up.write_*=modify",    # loses to the exact name below
        "--side-effect", "write_note=create",
        "--side-effect", "up.e?ho_env=create",   # "up.e" ties with the next: the first given wins
        "--side-effect", "up.e*=modify",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert folder.cls("slow_note") == "create" and "up.slow_note@v1 create (pattern 'slow_*')" in r.stdout
    assert folder.cls("write_note") == "create" and "up.write_note@v1 create (given)" in r.stdout
    assert folder.cls("echo_env") == "create" and "up.echo_env@v1 create (pattern 'up.e?ho_env')" in r.stdout
    assert folder.cls("remove") == "delete" and "up.remove@v1 delete (pattern 'up.*')" in r.stdout
    assert folder.cls("lookup") == "delete" and "up.lookup@v1 delete (pattern 'up.*')" in r.stdout
    assert r.stdout.count("pinned up.") == 9 and "ok: 9 tools pinned" in r.stdout


@pytest.mark.timeout(120)
def test_a_pattern_that_matches_no_tool_is_an_error(folder: Folder) -> None:
    r = folder.import_(
        "--accept-proposed", "--side-effect", "up.*_note=create", "--side-effect", "up.rmove*=delete"
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "'up.rmove*'" in r.stdout and "match no tool listed" in r.stdout and "'up.*_note'" not in r.stdout
    assert not folder.written(), "nothing written"


@pytest.mark.timeout(120)
def test_an_exact_name_that_names_no_tool_is_an_error_with_the_closest_names(folder: Folder) -> None:
    """A typo in an exact name (no glob character) was silently ignored: with ``--accept-proposed``
    the tool the operator meant got the proposal (``up.remove``: ``modify``, not ``delete``)."""
    r = folder.import_(
        "--accept-proposed", "--side-effect", "up.rmove=delete", "--side-effect", "wirte_note=create",
        "--side-effect", "up.write_note=create", "--side-effect", "no_such_thing=modify",
        "--side-effect", "up.nope*=modify",
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    first = r.stdout.splitlines()
    names = next(line for line in first if line.startswith("error: --side-effect name(s)"))
    assert "'up.rmove' (closest: 'up.remove'" in names, names
    assert "'wirte_note' (closest: 'write_note'" in names, names
    assert "'no_such_thing' match" in names, names
    assert names.count("'up.write_note'") == 1, names  # a known name: only among the closest
    assert names.endswith("match no tool listed by upstream(s) up; nothing written"), names
    assert any("pattern(s) 'up.nope*' match no tool listed" in line for line in first), r.stdout
    assert not folder.written(), "nothing written"
    assert not (folder.tools / ".mcp-import.lock").exists()


@pytest.mark.timeout(120)
def test_exact_names_in_every_form_are_known(folder: Folder) -> None:
    """``<upstream>.<tool>``, the bare tool name: both name a listed tool (no error)."""
    r = folder.import_(
        "--accept-proposed", "--side-effect", "up.remove=delete", "--side-effect", "slow_note=modify"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert folder.cls("remove") == "delete" and folder.cls("slow_note") == "modify"


@pytest.mark.timeout(180)
def test_an_exact_name_for_a_tool_already_pinned_is_said_not_applied(folder: Folder) -> None:
    """A known name whose tool is pinned already: not an error, but the file's class stands and
    import says so (it used to pass in silence, as if the tool had been classed)."""
    assert folder.import_("--accept-proposed").returncode == 0
    assert folder.cls("remove") == "modify"
    r = folder.import_("--side-effect", "up.remove=delete", "--side-effect", "write_note=create")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "note: --side-effect delete for up.remove not applied: it is pinned already as modify, the class in "
        "up.remove@v1.json stands" in r.stdout
    ), r.stdout  # fmt: skip
    assert "for up.write_note" not in r.stdout, r.stdout  # given as it is pinned: nothing to say
    assert folder.cls("remove") == "modify"


@pytest.mark.timeout(120)
def test_a_pattern_never_classes_a_destructive_hinted_tool_below_modify(folder: Folder) -> None:
    r = folder.import_("--accept-proposed", "--side-effect", "up.*=create")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "up.remove (create by pattern 'up.*')" in r.stdout
    assert "up.write_note" not in r.stdout.split("may not class")[1]  # destructiveHint: false: create is fine
    assert "nothing written" in r.stdout and not folder.written()


@pytest.mark.timeout(120)
def test_accept_proposed_takes_what_no_name_or_pattern_matches(folder: Folder) -> None:
    r = folder.import_(
        "--accept-proposed", "--side-effect", "up.*_note=modify", "--side-effect", "write_note=delete"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert folder.cls("slow_note") == "modify" and "up.slow_note@v1 modify (pattern 'up.*_note')" in r.stdout
    assert folder.cls("write_note") == "delete" and "up.write_note@v1 delete (given)" in r.stdout
    assert folder.cls("remove") == "modify" and "up.remove@v1 modify (accepted proposal)" in r.stdout
    assert folder.cls("lookup") == "read_only" and "up.lookup@v1 read_only (readOnlyHint)" in r.stdout


@pytest.mark.timeout(120)
def test_without_accept_proposed_a_tool_no_pattern_matches_stays_unconfirmed(folder: Folder) -> None:
    r = folder.import_("--side-effect", "*_note=create")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "up.remove (proposed: modify)" in r.stdout and "up.write_note (proposed" not in r.stdout
    assert "nothing written" in r.stdout and not folder.written()
