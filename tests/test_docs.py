"""Docs that must not drift from code."""

from __future__ import annotations

from sidecar.errors import ErrorCode
from sidecar.server.status import STATUS
from tests.conftest import ROOT


def test_errors_doc_lists_every_code_with_its_status() -> None:
    text = (ROOT / "docs" / "ERRORS.md").read_text()
    for code in ErrorCode:
        assert f"| `{code.value}` | `{STATUS[code].name}` |" in text, code
