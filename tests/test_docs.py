"""Docs that must not drift from code (generated docs, and the repository paths they name)."""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from pathlib import Path

from callgate.base.errors import DESCRIPTION, ErrorCode
from callgate.cli.docgen import config_markdown, errors_markdown
from tests.conftest import ROOT


def test_every_code_has_a_description() -> None:
    assert set(DESCRIPTION) == set(ErrorCode)


def test_errors_doc_is_generated_from_code() -> None:
    assert (ROOT / "docs" / "ERRORS.md").read_text() == errors_markdown(), "run scripts/gen-docs"


def test_config_doc_is_generated_from_code() -> None:
    text = (ROOT / "docs" / "CONFIG.md").read_text()
    assert text == config_markdown(), "run scripts/gen-docs"
    assert "| `metrics_address` |" in text and "| `key_file` |" in text and "## `[[secrets]]`" in text


# -- repository paths named in docs and code must exist ----------------------------------------------

_PATH = re.compile(
    r"(?<![\w./~@-])("
    r"callgate/[\w./-]*?\.py"  # modules
    r"|tests/[\w./-]*?\.py"
    r"|scripts/[\w-]+"
    r"|docs/[\w.-]*?\.md"
    r"|sidecar/(?:[\w./-]*\w)?"  # the package's old name: never a path any more
    r"|-m sidecar"
    r")(?![\w-])"
)
_MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _python_comments_and_docstrings(text: str) -> str:
    """Comments and string literals of a module (docstrings among them), one per line."""
    out: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            out.append(tok.string)
    return "\n".join(out)


def _sources() -> list[tuple[Path, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    code = [p for p in sorted((ROOT / "callgate").rglob("*.py")) if "gen" not in p.relative_to(ROOT).parts]
    code += sorted((ROOT / "bench").glob("*.py"))
    return [(p, p.read_text(encoding="utf-8")) for p in docs] + [
        (p, _python_comments_and_docstrings(p.read_text(encoding="utf-8"))) for p in code
    ]


def test_repository_paths_in_docs_and_code_exist() -> None:
    """``callgate/...py``, ``tests/...py``, ``scripts/...``, ``docs/...md`` named in README.md,
    docs/*.md and the comments and docstrings of callgate/ and bench/ exist, and the relative
    links of the Markdown files resolve: a moved or renamed file cannot leave a stale reference
    behind. ``sidecar/`` (the package's old name) is always stale."""
    stale: list[str] = []
    for path, text in _sources():
        rel = path.relative_to(ROOT)
        for m in _PATH.finditer(text):
            if m.group(1).startswith(("sidecar", "-m")) or not (ROOT / m.group(1)).exists():
                stale.append(f"{rel}: {m.group(1)}")
        if path.suffix == ".md":
            for m in _MD_LINK.finditer(text):
                target = m.group(1)
                if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not (path.parent / target).exists():
                    stale.append(f"{rel}: link ({target})")
    assert not stale, "stale references:\n" + "\n".join(stale)


def test_the_path_check_finds_stale_references() -> None:
    found = [
        m.group(1)
        for m in _PATH.finditer("see sidecar/app.py, `callgate/x.py`, scripts/test; /etc/callgate/a.py")
    ]
    assert found == ["sidecar/app.py", "callgate/x.py", "scripts/test"]


_WHEEL = re.compile(r"callgate-([0-9][\w.+]*)-cp311-abi3-manylinux_2_34_x86_64\.whl")


def test_the_wheel_the_docs_install_is_this_version() -> None:
    """callgate is installed from its wheel file (no index publishes it), so README.md and docs/
    name the file in their ``pip install '<wheel>[extra]'`` lines: each must be the wheel
    scripts/dist builds now, pyproject.toml's version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    named = [
        (path.relative_to(ROOT), m.group(1))
        for path, text in _sources()
        if path.suffix == ".md"
        for m in _WHEEL.finditer(text)
    ]
    assert len(named) >= 5, named  # README.md, docs/DEPLOY.md, docs/CLIENTS.md, docs/CONSOLE.md
    assert [(p, v) for p, v in named if v != version] == []
