"""The house has no climbs (issue 29 item 5): read from the imports (tests/importgraph.py), no
package imports a package of a higher layer, nothing below them imports ``propose/``,
``server/``, ``mcp/`` or ``console/``, the package graph has no cycle, and the checked-in picture
docs/import-graph.svg is the one the imports draw."""

from __future__ import annotations

import graphlib

import pytest

from tests import importgraph as ig

EDGES = ig.edges()


def _named(edges: list[ig.Edge]) -> list[str]:
    return [f"{e.module.replace('.', '/')}.py:{e.line} imports {e.target}/" for e in edges]


def test_every_package_has_a_layer() -> None:
    ranked = ig.rank()
    packages = {e.source for e in EDGES} | {e.target for e in EDGES}
    assert packages <= set(ranked), f"add to tests/importgraph.py LAYERS: {sorted(packages - set(ranked))}"


def test_no_import_climbs_to_a_higher_layer() -> None:
    climbs = [e for e in ig.upward(EDGES) if (e.module, e.target) not in ig.KNOWN_UPWARD]
    assert not climbs, "imports into a higher layer (tests/importgraph.py LAYERS):\n" + "\n".join(
        _named(climbs)
    )


def test_the_known_climbs_are_still_there() -> None:
    """A leftover that was fixed leaves :data:`KNOWN_UPWARD` (so it cannot come back unseen)."""
    present = {(e.module, e.target) for e in ig.upward(EDGES)}
    assert ig.KNOWN_UPWARD <= present, f"fixed, remove from KNOWN_UPWARD: {sorted(ig.KNOWN_UPWARD - present)}"


@pytest.mark.parametrize("upper", ig.UPPER)
def test_nothing_below_imports(upper: str) -> None:
    ranked = ig.rank()
    below = [e for e in EDGES if e.target == upper and ranked[e.source] <= ranked[upper]]
    assert not below, f"{upper}/ imported from below:\n" + "\n".join(_named(below))


def test_no_package_cycle() -> None:
    graph = ig.package_graph([e for e in EDGES if (e.module, e.target) not in ig.KNOWN_UPWARD])
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        pairs = list(zip(cycle, cycle[1:], strict=False))
        shown = [e for e in EDGES if (e.source, e.target) in pairs]
        pytest.fail("package cycle " + " -> ".join(cycle) + ":\n" + "\n".join(_named(shown)))
    assert set(order) >= set(ig.rank())


def test_the_picture_is_drawn_from_the_imports() -> None:
    checked_in = (ig.ROOT / "docs" / "import-graph.svg").read_text(encoding="utf-8")
    assert checked_in == ig.svg(EDGES), "the package graph changed: run scripts/import-graph"


def test_the_architecture_page_names_every_module() -> None:
    """docs/ARCHITECTURE.md section 1 names every module (by its file name, in its folder's entry)."""
    page = (ig.ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [
        str(path.relative_to(ig.ROOT))
        for _, path in ig.modules()
        if path.name != "__init__.py" and path.name not in page
    ]
    assert not missing, "name these in docs/ARCHITECTURE.md section 1: " + ", ".join(missing)
