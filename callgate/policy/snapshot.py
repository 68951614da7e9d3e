"""One versioned policy snapshot: ToolSpecs + engine policies, loaded and swapped as a unit.

A request reads the current snapshot reference once and uses it for every stage, so a reload in
the middle of a request can never mix an old ToolSpec with a new policy set.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TypeVar, cast

from callgate.arguments.validate import CompiledSchema
from callgate.base.model import Decision
from callgate.config import Config, PolicyConfig
from callgate.native import compiled_core_runs
from callgate.policy.declare import Problem, ToolTyping, close_objects, tool_typing
from callgate.policy.engines.base import Engine
from callgate.policy.engines.registry import ENGINES
from callgate.policy.meters import labels_used, meter_keeps
from callgate.policy.toolspecs import CompiledTool, ToolRegistry, load_tools

log = logging.getLogger("callgate.policy")

T = TypeVar("T")

SHARED_DECISIONS_MAX = 1024
"""Distinct compiled-core answers whose Decision one snapshot keeps (they are few: effect,
reasons and error per capability); past it the memo starts again."""


@dataclass(slots=True)
class ToolFacts:
    """What every call of one tool reads the same way, found once per tool of a snapshot."""

    tool: CompiledTool
    timeout: timedelta
    """The ToolSpec's execution budget (the deadline of an allowed call)."""
    native_validated: dict[str, object] | None = None
    """The ``validated`` event data when the compiled core validated (every field comes from
    the tool's schema); the trail copies it into each event."""
    reads_session: bool | None = None
    """Whether a policy that could decide one of the tool's actions reads ``context.session``
    (:mod:`callgate.policy.sessionuse`); None until asked."""


class SnapshotMemo:
    """The per-request values one snapshot's requests compute the same way, kept with the
    snapshot (and dropped with it): facts per tool, and the shared Decision (with its stored
    dict) per distinct compiled-core answer. No process-wide cache keyed by ``id()``."""

    __slots__ = ("_decisions", "_forms", "_keeps", "_labels", "_tools")

    def __init__(self) -> None:
        self._tools: dict[str, ToolFacts] = {}
        self._keeps: dict[str, int] | None = None
        self._labels: bool | None = None
        self._decisions: dict[tuple[object, ...], tuple[Decision, dict[str, object]]] = {}
        self._forms: dict[tuple[Callable[[Decision], object], Decision], object] = {}

    def facts(self, tool: CompiledTool) -> ToolFacts:
        """The facts of ``tool`` (a tool of this snapshot; another one is answered, not kept)."""
        hit = self._tools.get(tool.spec.key)
        if hit is not None and hit.tool is tool:
            return hit
        facts = ToolFacts(tool, timedelta(milliseconds=tool.spec.timeout_ms))
        if hit is None:
            self._tools[tool.spec.key] = facts
        return facts

    def meter_keeps(self, tools: Iterable[CompiledTool]) -> dict[str, int]:
        """:func:`~callgate.policy.meters.meter_keeps` of this snapshot's ToolSpecs (``tools``),
        computed once: the longest window any of them declares per meter name."""
        if self._keeps is None:
            self._keeps = meter_keeps(m for t in tools for m in t.meters)
        return self._keeps

    def labels_used(self, tools: Iterable[CompiledTool]) -> bool:
        """Whether any of this snapshot's ToolSpecs (``tools``) declares result labels, once."""
        if self._labels is None:
            self._labels = labels_used(tools)
        return self._labels

    def reads_session(self, tool: CompiledTool, engine: Engine) -> bool:
        """Whether ``tool``'s requests must carry ``context.session`` on ``engine`` (this
        snapshot's): decided once per tool; an engine without a reading says always."""
        facts = self.facts(tool)
        if facts.reads_session is None:
            use = engine.session_use
            facts.reads_session = use is None or use.reads(tool.spec.required_capabilities)
        return facts.reads_session

    def shared_decision(
        self, key: tuple[object, ...], build: Callable[[], tuple[Decision, dict[str, object]]]
    ) -> tuple[Decision, dict[str, object]]:
        """The Decision and its stored dict for the compiled core's answer ``key``, built once."""
        hit = self._decisions.get(key)
        if hit is None:
            hit = build()
            if len(self._decisions) >= SHARED_DECISIONS_MAX:
                self._decisions.clear()
            self._decisions[key] = hit
        return hit

    def decision_form(self, decision: Decision, build: Callable[[Decision], T]) -> T:
        """``build(decision)`` once per distinct decision of this snapshot's calls (the wire
        message of :func:`callgate.server.services.decision_pb`): the compiled core's decisions
        are shared values (:meth:`shared_decision`), so one form serves every call that got an
        equal one. The caller must not change the form (a message passed to a constructor is
        copied). Past :data:`SHARED_DECISIONS_MAX` forms the memo starts again."""
        key = (build, decision)
        try:
            hit = self._forms.get(key)
        except TypeError:  # a decision of another shape (unhashable): built, not remembered
            return build(decision)
        if hit is None:
            hit = build(decision)
            if len(self._forms) >= SHARED_DECISIONS_MAX:
                self._forms.clear()
            self._forms[key] = hit
        return cast(T, hit)


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    tools: ToolRegistry
    engine: Engine
    revision: str
    """``sha256:`` over every ToolSpec digest and the engine's policy revision."""
    refused: tuple[Problem, ...] = ()
    """ToolSpecs refused alone (not in ``tools``): their action has no policy type
    (:func:`callgate.policy.declare.tool_typing`); ``callgate check`` names each."""
    unseen: tuple[Problem, ...] = ()
    """Arguments left out of ``context.args`` (no policy type; the tool serves):
    ``callgate check`` warns of each."""
    memo: SnapshotMemo = field(default_factory=SnapshotMemo, init=False, compare=False, repr=False)
    """Per-request values of this snapshot, built once (:class:`SnapshotMemo`)."""

    def reads_labels(self, tool: CompiledTool) -> bool:
        """Whether ``tool``'s requests carry ``context.session.labels``: a ToolSpec of this
        snapshot declares result labels and a policy that could decide one of the tool's actions
        may read the session (:mod:`callgate.policy.sessionuse`; Rego and OPA: always)."""
        return self.memo.labels_used(self.tools) and self.memo.reads_session(tool, self.engine)

    def meter_keeps(self) -> dict[str, int]:
        """Per meter name, the longest window any ToolSpec of this snapshot declares (a shared
        meter's entries are kept for twice that: docs/POLICIES.md "Shared meters")."""
        return self.memo.meter_keeps(self.tools)

    def hidden_for(self, subject: str) -> frozenset[str]:
        """Keys of the tools no request of ``subject`` could be allowed or confirmed (ListTools by
        policy, :mod:`callgate.policy.reach`; cached per principal); empty when the engine has no
        such reading (Rego, OPA, or ``policy.list_by_policy`` off)."""
        reach = self.engine.reach
        if reach is None:
            return frozenset()
        return reach.hidden(subject, ((t.spec.key, t.spec.required_capabilities) for t in self.tools))


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
    typing = tool_typing(policy_dir, factory.folder)
    tools = _typed(tools, typing, deep=factory.folder.closes_nested)
    h = hashlib.sha256()
    for t in tools:
        h.update(f"{t.spec.key}={t.spec.spec_digest}\n".encode())
    h.update(f"{engine.name}={engine.revision}\n".encode())
    return PolicySnapshot(
        tools=tools,
        engine=engine,
        revision="sha256:" + h.hexdigest(),
        refused=tuple(typing.refused.values()),
        unseen=typing.notes,
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
        unseen = typing.unseen.get(t.spec.source)
        if unseen:
            t = replace(t, unseen=unseen)
        kept[t.spec.key] = t
    for problem in typing.notes:
        log.warning("%s", problem)
    return ToolRegistry(kept)


def compiled_core_serves(cfg: Config) -> bool:
    """Whether the compiled core will serve decisions under ``cfg`` (``[core] engine``: ``python``
    never; ``auto`` and ``native`` when ``callgate._native`` imports), as the core seam decides."""
    return compiled_core_runs(cfg.core.engine)


def load_snapshot_from_config(cfg: Config) -> PolicySnapshot:
    """The snapshot ``cfg`` describes (``policy.engine`` over ``policy.dir``), as the server loads
    it: only the engine form the configured core serves (docs/NATIVE.md)."""
    return load_snapshot(
        cfg.path(cfg.policy.dir),
        cfg.policy.engine,
        policy=cfg.policy,
        compiled_core=compiled_core_serves(cfg),
    )
