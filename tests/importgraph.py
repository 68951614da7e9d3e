"""The package dependency graph of ``callgate``, read from the imports (issue 29 item 5).

Every ``import callgate.x...`` / ``from callgate.x... import`` counts, at module level or inside a
function (a function-level import is a dependency all the same), except those under
``if TYPE_CHECKING:`` (annotations only: nothing is loaded). ``callgate._native`` (the compiled
module) counts as ``native``, its one bridge.

:data:`LAYERS` is the house drawn bottom to top; a package may import its own layer's and lower
layers' packages only, and the graph has no cycle (tests/test_layers.py). ``scripts/import-graph``
writes the picture docs/import-graph.svg from the same graph.

    .venv/bin/python -m tests.importgraph docs/import-graph.svg
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "callgate"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("base", "gen", "native"),
    ("arguments", "client"),
    ("store", "credentials"),
    ("policy",),
    ("config",),
    ("observability", "execute"),
    ("propose",),
    ("server", "console", "adapters"),
    ("mcp",),
    ("cli",),
)
"""Bottom to top. ``config`` sits above ``policy`` and ``store``: it checks its keys against their
registries (``policy.engine``, ``store.backend``, ``idempotency.backend``)."""

KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset({("callgate.policy.snapshot", "config")})
"""Module -> package imports against :data:`LAYERS` still in the code, each a known leftover:
``load_snapshot`` builds a default ``PolicyConfig()`` when called without one (the tests do).
Nothing else may climb; a fix removes its entry (tests/test_layers.py then insists)."""

UPPER = ("propose", "server", "mcp", "console")
"""The pipeline and the apps: nothing below them imports them (issue 29)."""


@dataclass(frozen=True, slots=True)
class Edge:
    module: str
    """The importing module, e.g. ``callgate.policy.snapshot``."""
    line: int
    source: str
    """Its package (the first name under ``callgate``)."""
    target: str
    """The imported package."""


def package_of(dotted: str) -> str | None:
    """``callgate.x.y`` -> ``x`` (``_native`` -> ``native``); None outside callgate."""
    parts = dotted.split(".")
    if parts[0] != "callgate" or len(parts) < 2:
        return None
    name = parts[1]
    return "native" if name == "_native" else name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, module: str) -> Iterator[tuple[str, int]]:
    """Every imported callgate name under ``node``, skipping ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield from _imports(sub, module)
            continue
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield alias.name, child.lineno
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                anchor = module.split(".")[: -child.level]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "callgate":
                for alias in child.names:
                    yield f"callgate.{alias.name}", child.lineno
            else:
                yield base, child.lineno
        yield from _imports(child, module)


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if len(parts) < 2 or parts[1] == "gen" or parts[1] == "__main__":
            continue
        yield ".".join(parts), path


def edges() -> list[Edge]:
    """Every import from one callgate package into another."""
    found: list[Edge] = []
    for module, path in modules():
        source = package_of(module)
        assert source is not None
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, line in _imports(tree, module):
            target = package_of(name)
            if target is not None and target != source:
                found.append(Edge(module, line, source, target))
    return found


def rank() -> dict[str, int]:
    return {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def package_graph(found: list[Edge] | None = None) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {pkg: set() for layer in LAYERS for pkg in layer}
    for e in found if found is not None else edges():
        graph.setdefault(e.source, set()).add(e.target)
    return graph


def upward(found: list[Edge]) -> list[Edge]:
    """The imports into a higher layer (known leftovers included)."""
    r = rank()
    return [e for e in found if r.get(e.target, -1) > r.get(e.source, len(LAYERS))]


# -- the picture ------------------------------------------------------------------------------


def reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The transitive reduction of an acyclic ``graph``: ``a -> b`` kept only when no longer path
    leads from ``a`` to ``b`` (every dependency is still read off the picture, following arrows)."""

    def reach(start: str, skip: str) -> set[str]:
        seen: set[str] = set()
        todo = [t for t in graph.get(start, ()) if t != skip]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(graph.get(n, ()))
        return seen

    return {a: {b for b in targets if b not in reach(a, b)} for a, targets in graph.items()}


def _label(pkg: str) -> str:
    return f"{pkg}.py" if (PACKAGE / f"{pkg}.py").exists() else f"{pkg}/"


_W, _H, _GAP_X, _GAP_Y, _MARGIN = 120, 34, 40, 56, 30


def svg(found: list[Edge] | None = None) -> str:
    """docs/import-graph.svg: one row per layer (bottom layer at the bottom), an arrow per package
    dependency; a known climb (:data:`KNOWN_UPWARD`) in red, dashed."""
    found = edges() if found is None else found
    climbs = {(e.source, e.target) for e in upward(found)}
    graph = reduced(package_graph([e for e in found if (e.source, e.target) not in climbs]))
    for src, dst in climbs:
        graph[src].add(dst)
    widest = max(len(layer) for layer in LAYERS)
    width = 2 * _MARGIN + widest * _W + (widest - 1) * _GAP_X
    height = 2 * _MARGIN + len(LAYERS) * _H + (len(LAYERS) - 1) * _GAP_Y + 20
    pos: dict[str, tuple[float, float]] = {}
    for i, layer in enumerate(LAYERS):
        y = height - _MARGIN - 20 - (i + 1) * _H - i * _GAP_Y
        row = len(layer) * _W + (len(layer) - 1) * _GAP_X
        x0 = (width - row) / 2
        for j, pkg in enumerate(layer):
            pos[pkg] = (x0 + j * (_W + _GAP_X), y)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">'
        ),
        "<title>callgate: package dependencies (generated by scripts/import-graph)</title>",
        (
            '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#667"/></marker>'
            '<marker id="r" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c22"/></marker></defs>'
        ),
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            if src not in pos or dst not in pos:
                continue
            (sx, sy), (dx, dy) = pos[src], pos[dst]
            x1, x2 = sx + _W / 2, dx + _W / 2
            if sy == dy:  # same layer: a curve above the row
                y1 = y2 = sy
                mid = sy - _GAP_Y / 2
                d = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}"
            else:
                y1, y2 = (sy + _H, dy) if sy < dy else (sy, dy + _H)
                d = f"M{x1:.0f},{y1:.0f} L{x2:.0f},{y2:.0f}"
            if (src, dst) in climbs:
                style = 'stroke="#c22" stroke-dasharray="5,3" marker-end="url(#r)"'
            else:
                style = 'stroke="#99a" stroke-opacity="0.7" marker-end="url(#a)"'
            out.append(f'<path d="{d}" fill="none" stroke-width="1.2" {style}/>')
    for pkg, (x, y) in sorted(pos.items()):
        fill = "#e8f0fe" if pkg in UPPER else "#f4f4f4"
        out.append(
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{_W}" height="{_H}" rx="6" fill="{fill}" stroke="#445"/>'
            f'<text x="{x + _W / 2:.0f}" y="{y + _H / 2 + 5:.0f}" text-anchor="middle">{escape(_label(pkg))}</text>'
        )
    out.append(
        f'<text x="{_MARGIN}" y="{height - 12}" fill="#555" font-size="11">Bottom to top: tests/importgraph.py '
        "LAYERS. Arrow: imports (transitive ones implied; TYPE_CHECKING-only excluded). Red dashed: a known climb.</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    target = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "import-graph.svg"
    target.write_text(svg(), encoding="utf-8")
    print(f"{target}: {sum(len(v) for v in package_graph().values())} package dependencies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
