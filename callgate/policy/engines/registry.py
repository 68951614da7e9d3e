"""The policy engines, registered by name (``policy.engine`` in the config).

Config validation (:func:`callgate.config.validate`), ``callgate policy test --engine``, snapshot
loading (:mod:`callgate.policy.snapshot`) and the policy lifecycle read :data:`ENGINES`; adding an
engine is one :meth:`~callgate.core.registry.Registry.register` call here with an
:class:`EngineFactory`. Engine modules are imported only when their engine is loaded, so the
Cedar default needs neither regopy nor the OPA client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from callgate.core.registry import Registry
from callgate.policy.engines.base import Engine

if TYPE_CHECKING:
    from callgate.config import PolicyConfig


def _no_problems(policy: PolicyConfig) -> list[str]:
    return []


def _never(policy: PolicyConfig) -> bool:
    return False


def _no_warnings(policy_dir: Path) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class EngineFactory:
    """How to validate the config of, and load, one engine."""

    name: str
    """The ``policy.engine`` value (also :attr:`Engine.name` of what :attr:`load` returns)."""
    doc: str
    """One line for ``--help`` and docs."""
    load: Callable[[Path, PolicyConfig], Engine]
    """``(policy_dir, policy) -> engine`` over the engine's files under the resolved
    ``policy.dir``. Raises :class:`~callgate.core.errors.LoadError` (or ValueError)."""
    validate: Callable[[PolicyConfig], list[str]] = _no_problems
    """Problems with the engine's own ``[policy]`` keys, each naming its key; ``[]`` = fine."""
    uploads_policies: Callable[[PolicyConfig], bool] = _never
    """Whether the lifecycle calls :meth:`Engine.load_policies` before a snapshot serves."""
    warnings: Callable[[Path], list[str]] = _no_warnings
    """``callgate check`` warnings about the files under ``policy_dir`` (not errors)."""
    load_for_core: Callable[[Path, PolicyConfig, bool], Engine] | None = None
    """Like :attr:`load`, told whether the compiled core serves decisions (``[core] engine``):
    an engine with a compiled form then prepares only the form that serves (Cedar, docs/NATIVE.md).
    None: :attr:`load` either way."""


# -- cedar ------------------------------------------------------------------------------------


def _load_cedar(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir

    return CedarEngine(
        load_cedar_dir(policy_dir / "cedar", shadow=policy.shadow, reach=policy.list_by_policy)
    )


def _load_cedar_for_core(policy_dir: Path, policy: PolicyConfig, compiled: bool) -> Engine:
    from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir

    cores = SnapshotCores.NATIVE if compiled else SnapshotCores.PYTHON
    return CedarEngine(
        load_cedar_dir(policy_dir / "cedar", shadow=policy.shadow, cores=cores, reach=policy.list_by_policy)
    )


def _cedar_warnings(policy_dir: Path) -> list[str]:
    from callgate.policy.engines.cedar import entities_size_warning

    entities = policy_dir / "cedar" / "entities.json"
    if not entities.is_file():
        return []
    warning = entities_size_warning(entities.stat().st_size, str(entities))
    return [warning] if warning else []


# -- rego (embedded regopy) -------------------------------------------------------------------


def _load_rego(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.rego import RegoEngine

    return RegoEngine.from_dir(policy_dir / "rego", shadow=policy.shadow)


# -- opa (a real OPA server) ------------------------------------------------------------------


def _load_opa(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.opa import OpaEngine

    return OpaEngine.from_dir(
        policy_dir / "rego", shadow=policy.shadow, url=policy.opa_url, timeout=policy.opa_timeout_ms / 1000
    )


def _validate_opa(policy: PolicyConfig) -> list[str]:
    from callgate.policy.engines.opa import parse_url

    problems: list[str] = []
    try:
        parse_url(policy.opa_url)
    except ValueError as exc:
        problems.append(f"policy.opa_url: {exc}")
    if policy.opa_timeout_ms <= 0:
        problems.append("policy.opa_timeout_ms must be positive")
    return problems


def _opa_uploads(policy: PolicyConfig) -> bool:
    return policy.opa_upload_policies


ENGINES: Registry[EngineFactory] = Registry("policy engine", "policy.engine")
"""Every engine, by ``policy.engine`` name; the first (``cedar``) is the default."""

ENGINES.register(
    EngineFactory(
        name="cedar",
        doc="embedded Cedar (cedarpy), the default; files in <policy dir>/cedar/",
        load=_load_cedar,
        warnings=_cedar_warnings,
        load_for_core=_load_cedar_for_core,
    )
)
ENGINES.register(
    EngineFactory(
        name="rego",
        doc="embedded Rego (regopy, rego-cpp); files in <policy dir>/rego/",
        load=_load_rego,
    )
)
ENGINES.register(
    EngineFactory(
        name="opa",
        doc="a real OPA server at policy.opa_url serving <policy dir>/rego/",
        load=_load_opa,
        validate=_validate_opa,
        uploads_policies=_opa_uploads,
    )
)

__all__ = ["ENGINES", "EngineFactory"]
