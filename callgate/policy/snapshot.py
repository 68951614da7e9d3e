"""One versioned policy snapshot: ToolSpecs + engine policies, loaded and swapped as a unit.

A request reads the current snapshot reference once and uses it for every stage, so a reload in
the middle of a request can never mix an old ToolSpec with a new policy set.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from callgate.config import Config, PolicyConfig
from callgate.policy.engines.base import Engine
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir
from callgate.policy.toolspecs import ToolRegistry, load_tools


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    tools: ToolRegistry
    engine: Engine
    revision: str
    """``sha256:`` over every ToolSpec digest and the engine's policy revision."""


def load_snapshot(
    policy_dir: Path, engine_name: str = "cedar", *, policy: PolicyConfig | None = None
) -> PolicySnapshot:
    """Load ``tools/`` and the engine's files from ``policy_dir``. Raises LoadError."""
    tools = load_tools(policy_dir / "tools")
    engine: Engine
    if engine_name == "cedar":
        engine = CedarEngine(load_cedar_dir(policy_dir / "cedar", shadow=(policy or PolicyConfig()).shadow))
    elif engine_name == "rego":
        from callgate.policy.engines.rego import RegoEngine

        engine = RegoEngine.from_dir(policy_dir / "rego", shadow=(policy or PolicyConfig()).shadow)
    elif engine_name == "opa":
        from callgate.policy.engines.opa import OpaEngine

        pc = policy or PolicyConfig()
        engine = OpaEngine.from_dir(
            policy_dir / "rego", shadow=pc.shadow, url=pc.opa_url, timeout=pc.opa_timeout_ms / 1000
        )
    else:  # config validation keeps this unreachable; fail loudly if it is reached
        raise ValueError(f"unknown engine {engine_name}")
    h = hashlib.sha256()
    for t in tools:
        h.update(f"{t.spec.key}={t.spec.spec_digest}\n".encode())
    h.update(f"{engine.name}={engine.revision}\n".encode())
    return PolicySnapshot(tools=tools, engine=engine, revision="sha256:" + h.hexdigest())


def load_snapshot_from_config(cfg: Config) -> PolicySnapshot:
    return load_snapshot(cfg.path(cfg.policy.dir), cfg.policy.engine, policy=cfg.policy)
