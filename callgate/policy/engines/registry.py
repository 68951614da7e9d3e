"""The policy engines, registered by name (``policy.engine`` in the config).

Config validation (:func:`callgate.config.validate`), ``callgate policy test --engine``, snapshot
loading (:mod:`callgate.policy.snapshot`), the policy lifecycle, ``callgate check``
(:mod:`callgate.policy.check`), the declarations (:mod:`callgate.policy.declare`) and ``callgate
new tool`` read :data:`ENGINES` and name no engine. Adding an engine is one module with its
:class:`~callgate.policy.engines.factory.EngineFactory` (and its
:class:`~callgate.policy.engines.factory.PolicyFolder`, or a registered engine's) and one
:meth:`~callgate.base.registry.Registry.register` call here. Engine modules are imported only
when their engine is loaded, so the Cedar default needs neither regopy nor the OPA client.
"""

from __future__ import annotations

from callgate.base.registry import Registry
from callgate.policy.engines.cedar_factory import CEDAR
from callgate.policy.engines.factory import EngineFactory, PolicyFolder
from callgate.policy.engines.opa_factory import OPA
from callgate.policy.engines.rego_factory import REGO

ENGINES: Registry[EngineFactory] = Registry("policy engine", "policy.engine")
"""Every engine, by ``policy.engine`` name; the first (``cedar``) is the default."""

ENGINES.register(CEDAR)
ENGINES.register(REGO)
ENGINES.register(OPA)


def policy_folders(registry: Registry[EngineFactory] = ENGINES) -> tuple[PolicyFolder, ...]:
    """The engines' policy folders, each once (two engines may read one), in registration order."""
    seen: dict[str, PolicyFolder] = {}
    for factory in registry:
        seen.setdefault(factory.folder.name, factory.folder)
    return tuple(seen.values())


__all__ = ["ENGINES", "EngineFactory", "policy_folders"]
