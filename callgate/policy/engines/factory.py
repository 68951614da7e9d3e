"""What one engine's registration carries: how to validate its config and load it, and what it
owns in a policy folder (in the style of OPA's plugin ``Factory{Validate, New}`` and Cerbos's
storage drivers).

:class:`EngineFactory` is registered by name in :mod:`callgate.policy.engines.registry`. Its
:class:`PolicyFolder` is everything the engine-neutral callers need to know of the engine's files:
the folder it reads and which files in it, the actions its hand-written schema declares, the
principals its entity data names, the rules ``callgate check`` runs on its files, the rules
``callgate new tool`` writes there. ``callgate check`` (:mod:`callgate.policy.check`), the
declarations (:mod:`callgate.policy.declare`), the snapshot load and ``callgate new tool``
(:mod:`callgate.cli.newtool`) iterate the registry and name no engine, so an engine is one module
(its factory, e.g. :mod:`callgate.policy.engines.cedar_factory`) and one registration.

This module imports no engine: a factory module imports its engine's heavy libraries only when
the engine is loaded (the Cedar default needs neither regopy nor the OPA client).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from callgate.base.model import Subject
from callgate.policy.engines.base import Engine

if TYPE_CHECKING:
    from callgate.config import PolicyConfig
    from callgate.policy.declare import Problem, ToolDecl


@dataclass(frozen=True, slots=True)
class SchemaActions:
    """The actions of the schema an engine loads (hand-written plus generated), and its file."""

    actions: frozenset[str] | None
    """None: the schema does not read (the engine's load reports it), nothing to check."""
    file: Path
    """The file a message names (``cedar/schema.cedarschema``, ``rego/data.json``)."""


@dataclass(frozen=True, slots=True)
class NewTool:
    """What ``callgate new tool`` asks an engine's folder to scaffold."""

    name: str
    """Dotted tool name (``payments.refund``), also its capability."""
    version: str
    role: str
    """The role the written rules permit (the name's first segment)."""
    stem: str
    """The name as a file stem (``payments_refund``)."""
    policy_id: str
    """The policy id the rules carry (the same in every engine's folder)."""


@dataclass(frozen=True, slots=True)
class Scaffolded:
    """What an engine's folder writes for a new tool: files to create, text to append to a file
    that may exist, and a conflict that refuses the whole scaffold (nothing written)."""

    created: tuple[tuple[Path, str], ...] = ()
    appended: tuple[tuple[Path, str], ...] = ()
    conflict: str = ""


TypeRules = Callable[[Path, Sequence["ToolDecl"], Mapping[str, str]], list["Problem"]]
"""``(policy_dir, ToolSpec declarations, ToolSpec file -> text) -> problems``: the ToolSpecs'
argument types against what the folder declares by hand; each problem names the ToolSpec file and
``line N`` (:func:`callgate.policy.declare.arg_place`)."""


def _no_warnings(policy_dir: Path) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class PolicyFolder:
    """An engine's subfolder of the policy folder and the rules of its files (two engines may
    share one: ``rego`` and ``opa`` read ``rego/``)."""

    name: str
    """The subfolder (``<policy dir>/<name>/``)."""
    reads: Callable[[str], bool]
    """Whether the engine reads the file at this path relative to the subfolder (``callgate
    check``'s inventory refuses the others by name)."""
    reads_text: str
    """What it reads, for the refusal (``it reads *.rego files and data.json``)."""
    hand_declared: Callable[[Path], frozenset[str]]
    """``policy_dir -> `` the actions its hand-written schema declares (none when it has none or
    it does not read: the engine's load reports that); the others are generated from the
    ToolSpecs (:func:`callgate.policy.declare.tool_typing`)."""
    schema_actions: Callable[[Path], SchemaActions]
    """``policy_dir ->`` the actions of the schema the engine loads (``callgate check``: every
    capability a ToolSpec requires must be one)."""
    principals: Callable[[Path, int], list[Subject]]
    """``(policy_dir, at most) ->`` the principals its entity data names, in file order (the
    sample requests of ``callgate check``)."""
    type_rules: TypeRules
    """``callgate check``'s rules on the ToolSpecs' argument types against the folder's
    hand-written declarations."""
    scaffold: Callable[[Path, NewTool], Scaffolded]
    """``(policy_dir, tool) ->`` the rules ``callgate new tool`` writes (nothing when the
    subfolder does not exist)."""
    value_places: Callable[[Path, str], list[str]] | None = None
    """``(policy_dir, JSON text of a value) -> ['file:line:col', ...]`` where a policy writes a
    decision value (``callgate check`` locates an effect outside the contract there); None: the
    engine cannot write one (Cedar's effects are its syntax)."""
    closes_nested: bool = False
    """Whether a generated action's argument record is checked at every depth (Cedar's records),
    so a ToolSpec's nested objects are closed too (:func:`callgate.policy.declare.close_objects`);
    else the top level only (the Rego contract)."""


def _no_problems(policy: PolicyConfig) -> list[str]:
    return []


def _never(policy: PolicyConfig) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class EngineFactory:
    """How to validate the config of, and load, one engine, and the policy folder it owns."""

    name: str
    """The ``policy.engine`` value (also :attr:`Engine.name` of what :attr:`load` returns)."""
    doc: str
    """One line for ``--help`` and docs."""
    load: Callable[[Path, PolicyConfig], Engine]
    """``(policy_dir, policy) -> engine`` over the engine's files under the resolved
    ``policy.dir``. Raises :class:`~callgate.base.errors.LoadError` (or ValueError)."""
    folder: PolicyFolder
    """Its files in the policy folder and their rules (:class:`PolicyFolder`)."""
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
    checked_on: str = ""
    """The registered engine ``callgate check`` runs sample requests and policy tests on
    (embedded, over the same files) when this one cannot be trusted to serve the files being
    checked (``opa``: the server may still serve the previous revision); "" = this engine."""


__all__ = ["EngineFactory", "NewTool", "PolicyFolder", "SchemaActions", "Scaffolded", "TypeRules"]
