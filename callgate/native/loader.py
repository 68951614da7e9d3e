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
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

if TYPE_CHECKING:
    from callgate._native import CedarSnapshot, Tool, Vocab, Zone

NATIVE_MODULE: Final = "callgate._native"


class CoreEngine(StrEnum):
    """``[core] engine``: which core runs the front of Propose (docs/NATIVE.md)."""

    AUTO = "auto"
    PYTHON = "python"
    NATIVE = "native"


NOT_BUILT: Final = (
    "not built; scripts/native build builds it in a checkout, the platform wheel carries it (docs/NATIVE.md)"
)
""":func:`native_missing` when there is no compiled core at all."""


class NativeModule(Protocol):
    """The typed call surface of ``callgate._native`` (its stub: ``callgate/_native.pyi``): what
    :func:`load_native` returns, so every call into the compiled core is checked by mypy."""

    @property
    def __version__(self) -> str: ...
    def __hash__(self) -> int: ...
    @property
    def Tool(self) -> type[Tool]: ...
    @property
    def CedarSnapshot(self) -> type[CedarSnapshot]: ...
    @property
    def Zone(self) -> type[Zone]: ...
    @property
    def Vocab(self) -> type[Vocab]: ...
    def parse_code(
        self, raw: bytes, max_bytes: int, max_depth: int, document: bool = False
    ) -> str | None: ...
    def parse_value(self, raw: bytes, max_bytes: int, max_depth: int) -> tuple[str | None, Any]: ...
    def canonical_of(self, raw: bytes, max_bytes: int, max_depth: int) -> tuple[str | None, bytes]: ...
    def format_number(self, f: float) -> str: ...
    def invocation_digest(self, tenant: str, tool_name: str, tool_version: str, canonical: bytes) -> str: ...
    def cedar_context_of(self, raw: bytes) -> str | None: ...
    def render_resource(self, template: str, raw: bytes) -> str | None: ...
    def set_text_table(
        self, ranges: list[tuple[int, int]], mapped: dict[str, tuple[str, str, str]]
    ) -> bool: ...


@functools.cache
def _imported() -> tuple[NativeModule | None, str]:
    try:
        return cast(NativeModule, importlib.import_module(NATIVE_MODULE)), ""
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == NATIVE_MODULE:
            return None, NOT_BUILT
        # the file is there: the dynamic loader or the module's init refused it
        return None, (
            f"present but it does not load ({exc}); rebuild it with scripts/native build in a "
            "checkout, or install the wheel built for this platform (docs/NATIVE.md)"
        )


def load_native() -> NativeModule | None:
    """``callgate._native`` when it is built and loads, else None (imported once per process)."""
    return _imported()[0]


def native_missing() -> str:
    """Why the compiled core cannot run in this process: :data:`NOT_BUILT`, or the loader's
    message when a build is there but does not load; ``""`` when it loads."""
    return _imported()[1]


def compiled_core_runs(engine: CoreEngine | str) -> bool:
    """Whether the compiled core runs under ``[core] engine`` = ``engine``: ``python`` never;
    ``auto`` and ``native`` when ``callgate._native`` loads."""
    return CoreEngine(engine) is not CoreEngine.PYTHON and load_native() is not None


__all__ = [
    "NATIVE_MODULE",
    "CoreEngine",
    "compiled_core_runs",
    "NOT_BUILT",
    "NativeModule",
    "load_native",
    "native_missing",
]
