"""callgate's PEP 517 build backend (``[build-system]`` in pyproject.toml, docs/NATIVE.md,
"Wheels and the sdist"): maturin when a Rust toolchain is there, setuptools when it is not.

* ``build_wheel``: with ``cargo`` on ``PATH``, maturin builds the abi3 wheel of the mixed project
  (``callgate/`` + the compiled core ``callgate._native`` from ``native/``, ``[tool.maturin]``),
  tagged manylinux at :data:`MANYLINUX` unless ``maturin.build-args`` says otherwise; maturin
  refuses to tag it when the module needs a newer glibc. Without cargo (or with
  ``CALLGATE_NATIVE=0``) it says so on stderr and setuptools builds a pure-Python wheel: the
  package then runs its Python core, which ``callgate --version`` and ``callgate serve``'s
  start-up line report. A Rust build that fails is an error, never a quiet fallback.
* ``build_sdist``: maturin's (the package, the crate, its ``Cargo.lock`` and this backend), so a
  wheel built from it takes the same two roads.
* ``build_editable``: setuptools, always. ``scripts/bootstrap`` installs the checkout editable
  (``--no-build-isolation``) and ``scripts/native`` puts the compiled core beside the sources,
  rebuilt only when its stamp changes; maturin's editable build would compile the crate on every
  install and fail without Rust.

Why not maturin's own fallback: without cargo its hooks ask for ``puccinialin``, which downloads
a Rust toolchain from outside the package index at build time.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any, Final

MANYLINUX: Final = "manylinux_2_34"
"""The wheel's platform tag: the glibc the compiled core needs at least (its newest versioned
symbol, read by ``auditwheel show`` in tests/test_dist.py; glibc 2.34 moved the pthread symbols
into libc, and a toolchain on a newer glibc links those)."""

NO_RUST: Final = (
    "callgate: no Rust toolchain (cargo) on PATH: building a pure-Python wheel without the "
    "compiled core callgate._native; callgate will run its Python core (slower, same answers). "
    "For the compiled core, install Rust (https://rustup.rs) and build again, or install the "
    "platform wheel (docs/NATIVE.md)."
)
SKIPPED: Final = "callgate: CALLGATE_NATIVE=0: building a pure-Python wheel (the Python core runs)"

Settings = Mapping[str, Any] | None


def _maturin() -> Any:
    """maturin's own PEP 517 module, which runs the ``maturin`` program by name: the scripts
    folder of this interpreter goes first on ``PATH`` (a build without isolation, such as
    scripts/dist's, runs from a virtualenv that is not activated), and maturin never downloads a
    Rust toolchain (``MATURIN_NO_INSTALL_RUST``: without cargo this backend takes setuptools)."""
    scripts = sysconfig.get_path("scripts")
    os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
    import maturin

    return maturin


def _native_wanted() -> bool:
    if os.environ.get("CALLGATE_NATIVE", "1") == "0":
        print(SKIPPED, file=sys.stderr)
        return False
    if shutil.which("cargo") is None:
        print(NO_RUST, file=sys.stderr)
        return False
    return True


def _maturin_settings(config_settings: Settings) -> dict[str, Any]:
    """``config_settings`` with ``--compatibility`` :data:`MANYLINUX` added to maturin's build
    arguments (maturin's own PEP 517 default is ``off``: a ``linux_x86_64`` tag, which no index
    accepts) unless the caller chose a compatibility itself."""
    settings = dict(config_settings or {})
    key = "maturin.build-args"
    given = settings.get(key, settings.get("build-args", os.environ.get("MATURIN_PEP517_ARGS", "")))
    args = given.split() if isinstance(given, str) else list(given)
    if not any(a in ("--compatibility", "--manylinux") or a.startswith("--compatibility=") for a in args):
        args = ["--compatibility", MANYLINUX, *args]
    settings.pop("build-args", None)
    settings[key] = args
    return settings


def get_requires_for_build_wheel(config_settings: Settings = None) -> list[str]:
    if _native_wanted():
        return list(_maturin().get_requires_for_build_wheel(_maturin_settings(config_settings)))
    from setuptools import build_meta

    return list(build_meta.get_requires_for_build_wheel(config_settings))


def build_wheel(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: str | None = None
) -> str:
    # no prepare_metadata_for_build_wheel hook: the frontend reads the metadata from this wheel,
    # so it is always the metadata of the road taken
    if _native_wanted():
        return str(_maturin().build_wheel(wheel_directory, _maturin_settings(config_settings)))
    from setuptools import build_meta

    return str(build_meta.build_wheel(wheel_directory, config_settings))


def get_requires_for_build_sdist(config_settings: Settings = None) -> list[str]:
    return []


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    if shutil.which("cargo") is None:  # maturin lists the crate's files with cargo
        raise RuntimeError("callgate: building the sdist needs cargo (a Rust toolchain) on PATH")
    return str(_maturin().build_sdist(sdist_directory, config_settings))


def get_requires_for_build_editable(config_settings: Settings = None) -> list[str]:
    from setuptools import build_meta

    return list(build_meta.get_requires_for_build_editable(config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Settings = None) -> str:
    from setuptools import build_meta

    return str(build_meta.prepare_metadata_for_build_editable(metadata_directory, config_settings))


def build_editable(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: str | None = None
) -> str:
    from setuptools import build_meta

    return str(build_meta.build_editable(wheel_directory, config_settings, metadata_directory))
