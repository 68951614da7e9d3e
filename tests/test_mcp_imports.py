"""The MCP gateway talks to the sidecar only through the public client API: nothing under
callgate/mcp imports a private client module (``callgate.client._wire``...) or a client name that
``callgate/client/__init__.py`` does not export in ``__all__`` (``callgate.client.aio._call``,
``callgate.client.sync.target``, ``callgate.client.tools.render``...), nor the generated gRPC
stubs the client wraps. A public name may be imported from the public module that defines it
(``callgate.client.names`` is pure: the config and the importer use it without grpc).

Read from the source (AST), so an import inside a function or under TYPE_CHECKING counts too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MCP = ROOT / "callgate/mcp"
CLIENT = "callgate.client"


def public_client_names() -> frozenset[str]:
    """``__all__`` of callgate/client/__init__.py, read from its source."""
    tree = ast.parse((ROOT / "callgate/client/__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError("callgate/client/__init__.py has no __all__")


def violations(source: str, where: str, public: frozenset[str]) -> list[str]:
    """Each import in ``source`` that reaches past the public client API, as ``where:line: why``."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("callgate.gen"):
                    out.append(f"{where}:{node.lineno}: imports {alias.name} (the client wraps the stubs)")
                elif alias.name == CLIENT or alias.name.startswith(CLIENT + "."):
                    out.append(
                        f"{where}:{node.lineno}: `import {alias.name}` (use `from callgate.client import ...`)"
                    )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module.startswith("callgate.gen"):
                out.append(f"{where}:{node.lineno}: imports {module} (the client wraps the stubs)")
                continue
            if module != CLIENT and not module.startswith(CLIENT + "."):
                continue
            private = [part for part in module.split(".") if part.startswith("_")]
            if private:
                out.append(f"{where}:{node.lineno}: imports the private module {module}")
                continue
            for alias in node.names:
                if alias.name not in public:
                    out.append(
                        f"{where}:{node.lineno}: imports {module}.{alias.name}, not in callgate.client.__all__"
                    )
    return out


def test_the_gateway_uses_only_the_public_client_api() -> None:
    public = public_client_names()
    files = sorted(MCP.rglob("*.py"))
    assert len(files) > 10
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)), public)]
    assert found == []


def test_the_check_bites() -> None:
    """Each way past the public API is found (the check is not vacuous)."""
    public = public_client_names()
    source = "\n".join(
        (
            "from callgate.client._wire import outcome_of",
            "from callgate.client.aio import _call",
            "from callgate.client.sync import target",
            "from callgate.client.tools import Dialect, render",
            "from callgate.client import AsyncClient, parse_tools",
            "import callgate.client.aio",
            "from callgate.gen.v1 import callgate_pb2 as pb",
            "def late():",
            "    from callgate.client._wire import propose_request",
        )
    )
    found = violations(source, "x.py", public)
    assert [v.split(":")[1] for v in found] == ["1", "2", "3", "4", "5", "6", "7", "9"]
    assert "x.py:4: imports callgate.client.tools.render" in found[3]
    assert violations("from callgate.client import AsyncClient, Dialect\n", "y.py", public) == []
    assert violations("from callgate.client.names import import_name\n", "y.py", public) == []
