"""The stub of the compiled core (callgate/_native.pyi, issue 29) names exactly what the built
module exports: every function and class, and every method of each class, so mypy's checks of
the calls through callgate.native are checks of the real surface."""

from __future__ import annotations

import ast
import inspect

from callgate.native import load_native
from tests.conftest import ROOT

STUB = ast.parse((ROOT / "callgate" / "_native.pyi").read_text(encoding="utf-8"))


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    functions: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in STUB.body:
        if isinstance(node, ast.FunctionDef):
            functions.add(node.name)
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__new__"}
    return functions, classes


def test_the_stub_names_the_built_modules_surface() -> None:
    native = load_native()
    assert native is not None, "scripts/test builds the compiled core (a missing build fails, never skips)"
    functions, classes = _stub_names()
    public = {n for n in dir(native) if not n.startswith("_")}
    built_classes = {n for n in public if inspect.isclass(getattr(native, n))}
    assert public - built_classes == functions
    assert built_classes == set(classes)
    for name, methods in classes.items():
        cls = getattr(native, name)
        assert {m for m in vars(cls) if not m.startswith("_")} == methods, name
