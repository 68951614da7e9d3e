"""Docs that must not drift from code."""

from __future__ import annotations

from callgate.cli.docgen import config_markdown, errors_markdown
from callgate.core.errors import DESCRIPTION, ErrorCode
from tests.conftest import ROOT


def test_every_code_has_a_description() -> None:
    assert set(DESCRIPTION) == set(ErrorCode)


def test_errors_doc_is_generated_from_code() -> None:
    assert (ROOT / "docs" / "ERRORS.md").read_text() == errors_markdown(), "run scripts/gen-docs"


def test_config_doc_is_generated_from_code() -> None:
    text = (ROOT / "docs" / "CONFIG.md").read_text()
    assert text == config_markdown(), "run scripts/gen-docs"
    assert "| `metrics_address` |" in text and "| `key_file` |" in text and "## `[[secrets]]`" in text
