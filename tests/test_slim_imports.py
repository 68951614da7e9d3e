"""The slim install stays slim (issue 32, item 2): ``callgate.client`` and each adapter import
with every distribution that only the ``sidecar`` extra brings made unimportable, and load none of
callgate's sidecar modules.

Each check runs in a fresh interpreter of the development venv (which has everything installed)
with a meta-path finder that refuses the top-level modules of those distributions, as a venv of
``pip install 'callgate[openai-agents]'`` would: the distributions in the closure of the
``sidecar`` extra that are not in the closure of the base dependencies plus the adapter's own
extra, read from the installed metadata. A framework's optional import of such a module (the
``openai`` package tries ``aiohttp``) then fails as it would there, and callgate's own code must
not need it. tests/test_dist.py runs the same imports in a real slim venv made from the wheel.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CLIENT_SIDE = ("callgate.client", "callgate.gen", "callgate.adapters")
"""The callgate packages an agent application loads (plus ``callgate`` itself)."""
SLIM_MODULES = {  # module -> the extra its framework comes with
    "callgate.client": None,
    "callgate.adapters.openai_agents": "openai-agents",
    "callgate.adapters.langgraph": "langgraph",
    "callgate.adapters.langchain_agent": "langchain",
}

PROBE = r"""
import importlib, importlib.abc, json, sys
blocked = frozenset(json.loads(sys.argv[1]))
refused = []
class NotInTheSlimInstall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInTheSlimInstall())
importlib.import_module(sys.argv[2])
print(json.dumps({"modules": sorted(sys.modules), "refused": refused}))
"""


def _closure(requirements: Iterable[str]) -> set[str]:
    """Every distribution these requirements install (their extras followed), by canonical name."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not for this platform or Python (its marker said so)
        for text in requires:
            dep = Requirement(text)
            wanted = dep.marker is None or any(
                Marker(str(dep.marker)).evaluate({"extra": extra}) for extra in ["", *req.extras]
            )
            if wanted:
                todo.append(dep)
    return {key.partition("[")[0] for key in seen}


def sidecar_only_distributions(extra: str | None) -> frozenset[str]:
    """The distributions that ``pip install 'callgate[sidecar]'`` installs and ``pip install
    'callgate[<extra>]'`` (or plain ``callgate``) does not, by canonical name."""
    optional = PROJECT["optional-dependencies"]
    slim = _closure([*PROJECT["dependencies"], *(optional[extra] if extra else [])])
    return frozenset(_closure(optional["sidecar"]) - slim)


def _sidecar_only_modules(extra: str | None) -> frozenset[str]:
    sidecar_only = sidecar_only_distributions(extra)
    return frozenset(
        module
        for module, dists in metadata.packages_distributions().items()
        if all(canonicalize_name(d) in sidecar_only for d in dists)
    )


@pytest.mark.parametrize("module", sorted(SLIM_MODULES))
def test_client_and_adapters_import_without_the_sidecar(module: str) -> None:
    blocked = _sidecar_only_modules(SLIM_MODULES[module])
    # the check bites (psycopg is not here: the langgraph extra's PostgreSQL checkpointer needs it)
    assert {"cedarpy", "regopy", "prometheus_client", "joserfc"} <= blocked
    run = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(sorted(blocked)), module],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, f"{module} needs a module of the sidecar extra:\n{run.stderr[-3000:]}"
    loaded = json.loads(run.stdout)["modules"]
    assert not sidecar_modules(loaded), f"importing {module} loads the sidecar's modules"
    assert not blocked & {m.partition(".")[0] for m in loaded}


def sidecar_modules(loaded: Iterable[str]) -> list[str]:
    """callgate's modules among ``loaded`` that are not the client's, the stubs or an adapter."""
    return [m for m in loaded if m.startswith("callgate.") and not m.startswith(CLIENT_SIDE)]
