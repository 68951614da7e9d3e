"""Docs that must not drift from code."""

from __future__ import annotations

from sidecar.docgen import errors_markdown
from sidecar.errors import DESCRIPTION, ErrorCode
from tests.conftest import ROOT


def test_every_code_has_a_description() -> None:
    assert set(DESCRIPTION) == set(ErrorCode)


def test_errors_doc_is_generated_from_code() -> None:
    assert (ROOT / "docs" / "ERRORS.md").read_text() == errors_markdown(), "run scripts/gen-docs"
