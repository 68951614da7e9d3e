"""Loading the compiled core ``callgate._native`` (docs/NATIVE.md), once per process.

Two ways it can be missing, told apart because they call for different actions: it was never
built (no Rust toolchain, ``CALLGATE_NATIVE=0``: the Python core is the designed fallback), or a
file is there and does not load (built for another Python or glibc, a library it links is
missing, a half-copied image): ``callgate serve`` then warns with the loader's own message, and
``[core] engine = "native"`` refuses to start with it.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Final

NATIVE_MODULE: Final = "callgate._native"

NOT_BUILT: Final = (
    "not built; scripts/native build builds it in a checkout, the platform wheel carries it (docs/NATIVE.md)"
)
""":func:`native_missing` when there is no compiled core at all."""


@functools.cache
def _imported() -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module(NATIVE_MODULE), ""
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == NATIVE_MODULE:
            return None, NOT_BUILT
        # the file is there: the dynamic loader or the module's init refused it
        return None, f"present but it does not load ({exc}); rebuild it with scripts/native build"


def load_native() -> ModuleType | None:
    """``callgate._native`` when it is built and loads, else None (imported once per process)."""
    return _imported()[0]


def native_missing() -> str:
    """Why the compiled core cannot run in this process: :data:`NOT_BUILT`, or the loader's
    message when a build is there but does not load; ``""`` when it loads."""
    return _imported()[1]


__all__ = ["NATIVE_MODULE", "NOT_BUILT", "load_native", "native_missing"]
