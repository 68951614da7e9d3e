"""Which actions' policies read ``context.session`` (issue 30: labels cost only where read).

Once a ToolSpec declares ``result_labels``, a request may carry ``context.session.labels``, the
labels of results its session has observed (:mod:`callgate.policy.meters`). Reading them costs a
store read per Propose and takes the decision out of the compiled core's one call
(docs/NATIVE.md), so Propose builds ``context.session`` only for a tool one of whose actions
could be decided by a policy that reads it. This module says which, from the Cedar policies'
JSON form, read once at load (the scope reading of :mod:`callgate.policy.reach`):

* a policy could apply to an action when its action scope is unconstrained, names the action
  (``==``) or one of its ancestors (``in``, the schema's action groups), or has a shape the
  reading does not know;
* its conditions read the session when an expression ``context.session...`` or ``context has
  session`` occurs anywhere in them, or ``context`` occurs in any other way than as the root of an
  attribute chain or a ``has`` test (e.g. ``context == {...}``): the same walk as the compiled
  core's context projection (``native/src/project.rs``);
* the session can be left out of an action's requests only when its schema declares
  ``session`` optional (``session?:``, as the example schema does); a required one (the generated
  schema: ``session: {labels: Set<String>}``), an undeclared one or a context this reading cannot
  parse counts as read (the request then carries it, as before).

Shadow policies count like enforcing ones (their decisions are recorded). Anything the reading
cannot decide counts as *reads*: the call then carries the session, which is always correct, only
slower. Rego and OPA have no such reading: every request carries the session there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from callgate.policy.reach import action_scope

__all__ = ["SESSION_ATTR", "SessionUse", "conditions_read"]

SESSION_ATTR: Final = "session"
"""``context.session`` (:data:`callgate.policy.meters.SESSION_KEY`)."""


def _chain(v: Any) -> list[str] | None:
    """``{"Var": "context"}`` followed by ``.attr`` steps: the path (``[]`` for the bare
    ``context``), or None."""
    if not isinstance(v, Mapping) or len(v) != 1:
        return None
    if "Var" in v:
        return [] if v["Var"] == "context" else None
    dot = v.get(".")
    if not isinstance(dot, Mapping) or len(dot) != 2 or not isinstance(dot.get("attr"), str):
        return None
    path = _chain(dot.get("left"))
    if path is None:
        return None
    return [*path, dot["attr"]]


def _reads(path: list[str]) -> bool:
    """Whether reading (or testing the presence of) ``context.<path>`` can see the session: the
    bare ``context`` or anything under ``context.session``."""
    return not path or path[0] == SESSION_ATTR


def conditions_read(est: Any) -> bool:
    """Whether the EST fragment ``est`` (a policy's ``conditions``) may read ``context.session``."""
    if isinstance(est, list):
        return any(conditions_read(x) for x in est)
    if not isinstance(est, Mapping):
        return False  # a bare "context" string outside {"Var": ..} is no variable (ids, names)
    if len(est) == 1:
        if "Value" in est:
            return False  # a literal: no expression inside
        path = _chain(est)
        if path is not None:
            return _reads(path)
        has = est.get("has")
        if isinstance(has, Mapping) and len(has) == 2 and isinstance(has.get("attr"), str):
            left = _chain(has.get("left"))
            if left is not None:
                return _reads([*left, has["attr"]])
    return any(conditions_read(x) for x in est.values())


def _omissible(record: Any) -> bool:
    """Whether a schema's context record (:class:`callgate.policy.declare.ArgType`) declares
    ``session`` optional."""
    fields = getattr(record, "fields", None)
    if record is None or getattr(record, "kind", None) != "Record" or fields is None:
        return False
    return any(name == SESSION_ATTR and not required for name, _, required in fields)


@dataclass(frozen=True, slots=True)
class SessionUse:
    """The reading of one Cedar snapshot: which actions' requests must carry ``context.session``."""

    readers: tuple[frozenset[str] | None, ...]
    """The action scopes of the policies whose conditions may read the session (None: any
    action, or a scope shape not recognised)."""
    omissible: frozenset[str]
    """The actions whose schema declares ``session`` optional."""

    @classmethod
    def build(
        cls,
        static: Mapping[str, Any],
        descendants: Mapping[str, set[str]],
        contexts: Mapping[str, Any],
        *,
        action_type: str,
    ) -> SessionUse:
        """From every policy's JSON form (``static``: id -> body; enforcing and shadow), the
        action hierarchy (action -> its descendants) and the schema's contexts (action ->
        :class:`callgate.policy.declare.ActionContext`)."""
        readers = []
        for body in static.values():
            if not isinstance(body, Mapping) or conditions_read(body.get("conditions", [])):
                actions, _ = action_scope(
                    body.get("action") if isinstance(body, Mapping) else None, action_type, descendants
                )
                readers.append(actions)
        omissible = frozenset(a for a, c in contexts.items() if _omissible(getattr(c, "record", None)))
        return cls(tuple(readers), omissible)

    def reads(self, actions: Iterable[str]) -> bool:
        """Whether a request for any of ``actions`` (a tool's required capabilities) must carry
        ``context.session``."""
        for a in actions:
            if a not in self.omissible:
                return True
            if any(scope is None or a in scope for scope in self.readers):
                return True
        return False
