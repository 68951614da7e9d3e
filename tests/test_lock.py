"""requirements.lock (written by scripts/lock, installed by scripts/bootstrap) must match
pyproject.toml: every dependency of the project, of the ``sidecar`` and ``dev`` extras and of the
build system is pinned there, at a version its specifier allows, with hashes. Run ``scripts/lock``
after changing dependencies."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

LOCK = ROOT / "requirements.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;[^\\]*)?\s*\\?$")
ENV = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux"}


def _locked() -> dict[str, tuple[Version, int]]:
    """name -> (version, number of hashes) for every pin in the lock."""
    pins: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if m:
            name = canonicalize_name(m.group(1))
            assert name not in pins, f"{name} pinned twice"
            pins[name] = (Version(m.group(2)), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, n = pins[name]
            pins[name] = (version, n + 1)
    return pins


def _wanted() -> list[Requirement]:
    project = PYPROJECT["project"]
    texts = [
        *project["dependencies"],
        *project["optional-dependencies"]["sidecar"],
        *project["optional-dependencies"]["dev"],
        *PYPROJECT["build-system"]["requires"],
    ]
    return [Requirement(t) for t in texts]


def _extra_requirements(req: Requirement) -> list[Requirement]:
    """What ``req``'s extras add (``psycopg[binary,pool]`` -> psycopg-binary, psycopg-pool),
    read from the installed distribution's metadata."""
    out: list[Requirement] = []
    if not req.extras:
        return out
    for text in metadata.requires(req.name) or []:
        dep = Requirement(text)
        if dep.marker is None:
            continue
        for extra in req.extras:
            if Marker(str(dep.marker)).evaluate({**ENV, "extra": extra}):
                out.append(dep)
                break
    return out


def test_lock_pins_every_dependency_of_pyproject() -> None:
    pins = _locked()
    problems: list[str] = []
    for req in _wanted():
        if req.marker is not None and not req.marker.evaluate({**ENV, "extra": ""}):
            continue  # not for CPython 3.11 on Linux
        for r in [req, *_extra_requirements(req)]:
            name = canonicalize_name(r.name)
            if name not in pins:
                problems.append(f"{r} (from {req}) is not in requirements.lock")
            elif not r.specifier.contains(pins[name][0], prereleases=True):
                problems.append(f"requirements.lock pins {name}=={pins[name][0]}, pyproject wants {r}")
    assert not problems, "run scripts/lock:\n" + "\n".join(problems)


def test_every_pin_has_hashes() -> None:
    unhashed = [name for name, (_, hashes) in _locked().items() if hashes == 0]
    assert not unhashed, f"pins without --hash (pip --require-hashes refuses them): {unhashed}"


def test_optional_extras_are_not_locked() -> None:
    """The otlp extra is opt-in (scripts/lock's header): the lock must not pull it in."""
    pins = _locked()
    otlp = [Requirement(t) for t in PYPROJECT["project"]["optional-dependencies"]["otlp"]]
    assert all(canonicalize_name(r.name) not in pins for r in otlp)


def test_lock_is_written_by_scripts_lock() -> None:
    head = LOCK.read_text(encoding="utf-8").splitlines()[:2]
    assert head[1].strip("# ") == "scripts/lock", head
