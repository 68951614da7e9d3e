"""``callgate --version``: what this installation carries (issue 32, item 3).

One line each: the package version (pyproject.toml's ``[project].version``, the one source the
chart's ``appVersion``, the image tag and the wheel's name follow), the core that runs (the
compiled core's build, or the Python core and why), the proto package of the gRPC API, the store
schema version of each store backend, and the policy engines. In the slim install (no ``sidecar``
extra) the sidecar's lines say so instead of failing.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

DISTRIBUTION: Final = "callgate"
SIDECAR_EXTRA: Final = "sidecar"
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


def installed_from() -> Path | None:
    """The wheel or sdist file this installation was made from (PEP 610 ``direct_url.json``),
    when it was a local file that is still there; None for an index, a folder or an editable."""
    try:
        raw = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    return archive_of(raw)


def archive_of(direct_url: str | None) -> Path | None:
    """The local archive file a PEP 610 ``direct_url.json`` names, if it is still there."""
    try:
        info = json.loads(direct_url) if direct_url else None
    except ValueError:
        return None
    if not isinstance(info, dict) or "archive_info" not in info:
        return None
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file":
        return None
    path = Path(unquote(url.path))
    return path if path.is_file() else None


def install_hint(extra: str) -> str:
    """The pip command that adds ``extra`` to this installation. callgate is installed from its
    wheel (README.md, "Install without a clone"), not from an index: ``callgate[extra]`` would
    ask the index for a distribution of that name, so name the file when it is known."""
    source = installed_from()
    return f"pip install '{source if source is not None else DISTRIBUTION}[{extra}]'"


def not_installed() -> str:
    """``--version``'s sidecar lines in the slim install."""
    return f"not installed ({install_hint(SIDECAR_EXTRA)})"


def store_schema() -> str:
    if missing_sidecar():
        return not_installed()
    return ", ".join(f"{name} {len(importlib.import_module(module).MIGRATIONS)}" for name, module in _STORES)


def engine_names() -> str:
    if missing_sidecar():
        return not_installed()
    from callgate.policy.engines.registry import ENGINES

    return ", ".join(ENGINES.names())


def version_info() -> VersionInfo:
    return VersionInfo(package_version(), core_build(), proto_package(), store_schema(), engine_names())


__all__ = [
    "SIDECAR_EXTRA",
    "VersionInfo",
    "archive_of",
    "install_hint",
    "installed_from",
    "missing_sidecar",
    "not_installed",
    "version_info",
]
