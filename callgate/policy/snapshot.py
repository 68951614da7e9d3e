"""One versioned policy snapshot: ToolSpecs + engine policies, loaded and swapped as a unit.

A request reads the current snapshot reference once and uses it for every stage, so a reload in
the middle of a request can never mix an old ToolSpec with a new policy set.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from callgate.config import Config, PolicyConfig
from callgate.policy.declare import ENGINE_FOLDERS, Problem, ToolTyping, close_objects, tool_typing
from callgate.policy.engines.base import Engine
from callgate.policy.engines.registry import ENGINES
from callgate.policy.toolspecs import ToolRegistry, load_tools
from callgate.propose.validate import CompiledSchema

log = logging.getLogger("callgate.policy")


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    tools: ToolRegistry
    engine: Engine
    revision: str
    """``sha256:`` over every ToolSpec digest and the engine's policy revision."""
    refused: tuple[Problem, ...] = ()
    """ToolSpecs refused alone (not in ``tools``): their action has no policy type
    (:func:`callgate.policy.declare.tool_typing`); ``callgate check`` names each."""


def load_snapshot(
    policy_dir: Path,
    engine_name: str = "cedar",
    *,
    policy: PolicyConfig | None = None,
    compiled_core: bool | None = None,
) -> PolicySnapshot:
    """Load ``tools/`` and the files of the engine registered as ``engine_name``
    (:data:`~callgate.policy.engines.registry.ENGINES`) from ``policy_dir``. Raises LoadError
    (an unregistered engine name too). ``compiled_core``: whether the compiled core will serve
    decisions (the engine then prepares only the form that serves); None prepares every form
    (the parity suite compares them)."""
    tools = load_tools(policy_dir / "tools")
    factory = ENGINES.get(engine_name)
    if compiled_core is not None and factory.load_for_core is not None:
        engine = factory.load_for_core(policy_dir, policy or PolicyConfig(), compiled_core)
    else:
        engine = factory.load(policy_dir, policy or PolicyConfig())
    typing = tool_typing(policy_dir, engine_name)
    tools = _typed(tools, typing, deep=ENGINE_FOLDERS.get(engine_name) == "cedar")
    h = hashlib.sha256()
    for t in tools:
        h.update(f"{t.spec.key}={t.spec.spec_digest}\n".encode())
    h.update(f"{engine.name}={engine.revision}\n".encode())
    return PolicySnapshot(
        tools=tools, engine=engine, revision="sha256:" + h.hexdigest(), refused=tuple(typing.refused.values())
    )


def _typed(tools: ToolRegistry, typing: ToolTyping, *, deep: bool) -> ToolRegistry:
    """``tools`` without the refused ones; a tool typed by its own generated action and without a
    ``normalized_schema`` checks its normalized arguments against its closed ``input_schema``
    (an undeclared argument is a ``schema_violation`` naming it, not a Cedar or Rego request
    error)."""
    kept = {}
    for t in tools:
        problem = typing.refused.get(t.spec.source)
        if problem is not None:
            log.warning("%s", problem)
            continue
        if t.spec.source in typing.own_record and t.normalized_schema is t.schema:
            closed = copy.deepcopy(dict(t.spec.input_schema))
            close_objects(closed, deep=deep)
            if closed != t.spec.input_schema:
                t = replace(
                    t,
                    normalized_schema=CompiledSchema.compile(
                        closed, source=t.spec.source, dialect=t.spec.schema_dialect
                    ),
                )
        kept[t.spec.key] = t
    return ToolRegistry(kept)


def compiled_core_serves(cfg: Config) -> bool:
    """Whether the compiled core will serve decisions under ``cfg`` (``[core] engine``: ``python``
    never; ``auto`` and ``native`` when ``callgate._native`` imports), as the core seam decides."""
    from callgate.propose.core import CoreEngine, load_native

    return CoreEngine(cfg.core.engine) is not CoreEngine.PYTHON and load_native() is not None


def load_snapshot_from_config(cfg: Config) -> PolicySnapshot:
    """The snapshot ``cfg`` describes (``policy.engine`` over ``policy.dir``), as the server loads
    it: only the engine form the configured core serves (docs/NATIVE.md)."""
    return load_snapshot(
        cfg.path(cfg.policy.dir),
        cfg.policy.engine,
        policy=cfg.policy,
        compiled_core=compiled_core_serves(cfg),
    )
