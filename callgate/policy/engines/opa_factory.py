"""The OPA engine's registration: a real OPA server (``policy.opa_url``) serving the Rego policy
folder (:data:`callgate.policy.engines.rego_factory.REGO_FOLDER`, the files embedded Rego reads).

The engine itself is :mod:`callgate.policy.engines.opa`, imported only when it is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from callgate.policy.engines.base import Engine
from callgate.policy.engines.factory import EngineFactory
from callgate.policy.engines.rego_factory import REGO, REGO_FOLDER

if TYPE_CHECKING:
    from callgate.config import PolicyConfig

ENGINE: Final = "opa"


def _load(policy_dir: Path, policy: PolicyConfig) -> Engine:
    from callgate.policy.engines.opa import OpaEngine

    return OpaEngine.from_dir(
        policy_dir / REGO_FOLDER.name,
        shadow=policy.shadow,
        url=policy.opa_url,
        timeout=policy.opa_timeout_ms / 1000,
    )


def _validate(policy: PolicyConfig) -> list[str]:
    from callgate.policy.engines.opa import parse_url

    problems: list[str] = []
    try:
        parse_url(policy.opa_url)
    except ValueError as exc:
        problems.append(f"policy.opa_url: {exc}")
    if policy.opa_timeout_ms <= 0:
        problems.append("policy.opa_timeout_ms must be positive")
    return problems


def _uploads(policy: PolicyConfig) -> bool:
    return policy.opa_upload_policies


OPA: Final = EngineFactory(
    name=ENGINE,
    doc="a real OPA server at policy.opa_url serving <policy dir>/rego/",
    load=_load,
    folder=REGO_FOLDER,
    validate=_validate,
    uploads_policies=_uploads,
    checked_on=REGO.name,
)
"""Registered in :mod:`callgate.policy.engines.registry`. ``callgate check`` runs its samples and
policy tests on embedded Rego over the same files (the server may still serve the previous
revision)."""

__all__ = ["OPA"]
