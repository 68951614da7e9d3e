"""docs/POLICIES.md's worked examples of the constraint kinds of spec 6.6 (amount, rate, quantity,
time range) and of session labels are the policies the suite decides (issue 30 item 6).

Every Cedar policy and every Rego rule shown in the sections "Time" and "Meters and labels" must
appear, up to whitespace, in a fixture whose policies the engines decide in tests:
tests/data/time_context/ (tests/test_time_context.py), tests/data/meters/
(tests/test_meters_parity.py, tests/test_meters.py) or the example folder policies/
(policies/tests, tests/test_engines_parity.py, tests/test_example_meters.py). A doc example
edited away from its fixture, or a fixture changed under its doc, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "POLICIES.md"
SECTIONS = ("## Time: dates, deadlines and durations", "## Meters and labels")
FIXTURES = {
    "cedar": [
        ROOT / "tests/data/time_context/cedar/policies.cedar",
        ROOT / "tests/data/meters/cedar/policies.cedar",
        ROOT / "policies/cedar/policies.cedar",
    ],
    "rego": [
        ROOT / "tests/data/time_context/rego/time.rego",
        ROOT / "tests/data/meters/rego/meters.rego",
        ROOT / "policies/rego/policies.rego",
    ],
}


def squeeze(text: str) -> str:
    """``text`` without comments, with every run of whitespace as one space."""
    text = re.sub(r"(//|#)[^\n\"]*$", "", text, flags=re.MULTILINE)
    return " ".join(text.split())


def blocks(lang: str) -> list[str]:
    """The ``lang`` code blocks of the sections named in SECTIONS."""
    doc = DOC.read_text(encoding="utf-8")
    out: list[str] = []
    for title in SECTIONS:
        start = doc.index(title)
        end = doc.find("\n## ", start + 1)
        section = doc[start : end if end > 0 else len(doc)]
        out += re.findall(rf"```{lang}\n(.*?)```", section, flags=re.DOTALL)
    return out


def cedar_policies(block: str) -> list[str]:
    """The policies of a Cedar block (each from its first annotation to its ``;``)."""
    return [p.strip() + ";" for p in re.split(r";\s*(?=@|$)", block.strip()) if p.strip()]


def rego_rules(block: str) -> list[str]:
    """The rules of a Rego block (separated by blank lines)."""
    return [r for r in re.split(r"\n\s*\n", block.strip()) if r.strip()]


EXAMPLES = [("cedar", p) for b in blocks("cedar") for p in cedar_policies(b)] + [
    ("rego", r) for b in blocks("rego") for r in rego_rules(b)
]


def test_every_constraint_kind_and_labels_have_an_example() -> None:
    text = " ".join(squeeze(p) for _, p in EXAMPLES)
    assert "context.usage.refunded" in text  # amount: a decimal sum
    assert 'context.usage.sends["1h"]' in text  # rate: calls per window
    assert 'context.usage.deletes["24h"]' in text  # quantity: calls per subject and day
    assert "context.now" in text  # time range
    assert "context.session.labels" in text  # labels
    assert len(EXAMPLES) >= 8


@pytest.mark.parametrize(
    "lang,example", EXAMPLES, ids=[f"{lang}-{i}" for i, (lang, _) in enumerate(EXAMPLES)]
)
def test_the_example_is_a_tested_fixture(lang: str, example: str) -> None:
    fixtures = " ".join(squeeze(p.read_text(encoding="utf-8")) for p in FIXTURES[lang])
    assert squeeze(example) in fixtures, (
        f"docs/POLICIES.md example not in {[str(p) for p in FIXTURES[lang]]}:\n{example}"
    )
