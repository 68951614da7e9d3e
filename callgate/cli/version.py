"""``callgate --version``: what this installation carries (issue 32, item 3).

One line each: the package version (pyproject.toml's ``[project].version``, the one source the
chart's ``appVersion``, the image tag and the wheel's name follow), the core that runs (the
compiled core's build, or the Python core and why), the proto package of the gRPC API, the store
schema version of each store backend, and the policy engines. In the slim install (no ``sidecar``
extra) the sidecar's lines say so instead of failing.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Final

DISTRIBUTION: Final = "callgate"
SIDECAR_EXTRA: Final = "sidecar"
NOT_INSTALLED: Final = f"not installed (pip install 'callgate[{SIDECAR_EXTRA}]')"
_STORES: Final = (("sqlite", "callgate.store.sqlite"), ("postgresql", "callgate.store.postgres"))
"""(backend, the module whose ``MIGRATIONS`` numbers its schema)."""
_EXTRA_MARKER: Final = f'extra=="{SIDECAR_EXTRA}"'
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class VersionInfo:
    version: str
    """The installed distribution's version."""
    core: str
    """``native`` and the compiled core's build, or ``python core`` and why."""
    proto: str
    """The protobuf package of the API (``callgate.v1``)."""
    store_schema: str
    """``sqlite N, postgresql M``: the schema version each backend migrates to."""
    engines: str
    """The registered policy engines."""

    def render(self) -> str:
        return (
            f"callgate {self.version}\n"
            f"core: {self.core}\n"
            f"proto: {self.proto}\n"
            f"store schema: {self.store_schema}\n"
            f"policy engines: {self.engines}\n"
        )


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def core_build() -> str:
    from callgate.native import load_native, native_missing

    native = load_native()
    if native is None:
        return f"python core (the compiled core callgate._native is {native_missing()})"
    build = getattr(native, "__build__", "")
    return f"native (callgate-core {native.__version__}{', ' + build if build else ''})"


def proto_package() -> str:
    from callgate.gen.v1 import callgate_pb2

    return str(callgate_pb2.DESCRIPTOR.package)


def missing_sidecar() -> tuple[str, ...]:
    """The distributions of the ``sidecar`` extra that are not installed (none in a full
    install), read from the installed distribution's metadata (``Requires-Dist: cedarpy ...;
    extra == "sidecar"``)."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return ()
    missing: list[str] = []
    for text in requires:
        requirement, _, marker = text.partition(";")
        if _EXTRA_MARKER not in marker.replace("'", '"').replace(" ", ""):
            continue
        name = _NAME.match(requirement.strip())
        if name is None:
            continue
        try:
            metadata.distribution(name.group(0))
        except metadata.PackageNotFoundError:
            missing.append(name.group(0))
    return tuple(missing)


def store_schema() -> str:
    if missing_sidecar():
        return NOT_INSTALLED
    return ", ".join(f"{name} {len(importlib.import_module(module).MIGRATIONS)}" for name, module in _STORES)


def engine_names() -> str:
    if missing_sidecar():
        return NOT_INSTALLED
    from callgate.policy.engines.registry import ENGINES

    return ", ".join(ENGINES.names())


def version_info() -> VersionInfo:
    return VersionInfo(package_version(), core_build(), proto_package(), store_schema(), engine_names())


__all__ = ["NOT_INSTALLED", "SIDECAR_EXTRA", "VersionInfo", "missing_sidecar", "version_info"]
