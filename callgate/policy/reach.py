"""Which tools a subject could ever be allowed (or asked to confirm): ListTools by policy.

A conservative static reading of the Cedar policies' scopes (Cedar's JSON form, read once per
snapshot). For one principal and one action it answers *never* only when it is sure every request
of that principal for that action is denied whatever its resource and context (the arguments
are unknown at listing time):

* no enforcing ``permit`` (``@confirm`` ones included) whose scope could match the principal and
  the action, or
* an enforcing ``forbid`` without ``when``/``unless`` whose scope surely covers the principal, the
  action and every ``Resource``.

Anything it cannot decide (a scope shape it does not know, a membership it cannot resolve, any
condition) counts as *could*: a shown tool is still authorized call by call, so showing is safe,
while hiding a tool some request could use would be the bug. Shadow policies decide nothing and are
left out. Principal membership (``principal in Role::"x"``) is resolved against the snapshot's
entity set (``parents``, transitively); a principal the set does not hold has no parents (the
engine adds it bare). Other engines (Rego) have no reach: every allowlisted tool is shown.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

Uid = tuple[str, str]

REACH_CACHE_MAX = 4096
"""Principals whose answers are kept per snapshot (a reload starts a new reach)."""


class Match(Enum):
    YES = "yes"
    NO = "no"
    MAYBE = "maybe"


def _uid(value: Any) -> Uid | None:
    """``{"type","id"}`` or Cedar's ``{"__entity": {...}}`` escape; None for any other shape."""
    if isinstance(value, Mapping) and "__entity" in value:
        value = value["__entity"]
    if isinstance(value, Mapping) and isinstance(value.get("type"), str) and isinstance(value.get("id"), str):
        return (value["type"], value["id"])
    return None


def entity_parents(entities_json: str) -> dict[Uid, tuple[Uid, ...]] | None:
    """Entity -> its direct parents, from Cedar's entity JSON; None when any part is unreadable
    (memberships are then unknown, never assumed absent)."""
    try:
        doc = json.loads(entities_json)
    except ValueError:
        return None
    if not isinstance(doc, list):
        return None
    out: dict[Uid, tuple[Uid, ...]] = {}
    for e in doc:
        if not isinstance(e, Mapping):
            return None
        uid = _uid(e.get("uid"))
        raw = e.get("parents", [])
        if uid is None or not isinstance(raw, list):
            return None
        parents = tuple(_uid(p) for p in raw)
        if any(p is None for p in parents):
            return None
        out[uid] = tuple(p for p in parents if p is not None)
    return out


@dataclass(frozen=True, slots=True)
class _Scoped:
    """One enforcing policy's scope, as far as the reading goes."""

    permit: bool
    principal: Any
    actions: frozenset[str] | None
    """Actions the scope can match; None = any action (or a shape not recognised)."""
    action_sure: bool
    """Whether :attr:`actions` is exact (a recognised shape), so a forbid surely covers them."""
    resource_all: bool
    """The resource scope admits every ``Resource`` (unconstrained, or ``is Resource``)."""
    unconditional: bool


def action_scope(
    scope: Any, action_type: str, descendants: Mapping[str, set[str]]
) -> tuple[frozenset[str] | None, bool]:
    """The actions a policy's action scope (Cedar's JSON form) can match, ``in`` closed over the
    action hierarchy (``descendants``), and whether that set is exact; None: any action (an
    unconstrained scope, or a shape not recognised). Also read by :mod:`callgate.policy.sessionuse`."""
    if not isinstance(scope, Mapping):
        return None, False
    op = scope.get("op")
    if op == "All":
        return None, True
    if op not in ("==", "in"):
        return None, False
    raw = [scope["entity"]] if "entity" in scope else scope.get("entities")
    if not isinstance(raw, list):
        return None, False
    out: set[str] = set()
    for e in raw:
        uid = _uid(e)
        if uid is None:
            return None, False
        if uid[0] != action_type:
            continue
        out.add(uid[1])
        if op == "in":
            out |= descendants.get(uid[1], set())
    return frozenset(out), True


def _resource_all(scope: Any, resource_type: str) -> bool:
    if not isinstance(scope, Mapping):
        return False
    op = scope.get("op")
    return op == "All" or (op == "is" and scope.get("entity_type") == resource_type and "in" not in scope)


@dataclass
class Reach:
    """The reading of one Cedar snapshot; answers are cached per principal (bounded LRU)."""

    policies: tuple[_Scoped, ...]
    parents: Mapping[Uid, tuple[Uid, ...]] | None
    principal_type: str
    _cache: OrderedDict[str, frozenset[str]] = field(default_factory=OrderedDict, repr=False)
    _by_cap: dict[str, frozenset[str]] | None = field(default=None, repr=False)
    """Capability -> keys of the snapshot's tools that require it (built at the first call)."""

    @classmethod
    def build(
        cls,
        static: Mapping[str, Any],
        enforcing: Iterable[str],
        descendants: Mapping[str, set[str]],
        entities_json: str,
        *,
        principal_type: str,
        resource_type: str,
        action_type: str,
    ) -> Reach:
        scoped = []
        for pid in enforcing:
            body = static[pid]
            actions, sure = action_scope(body.get("action"), action_type, descendants)
            scoped.append(
                _Scoped(
                    permit=body.get("effect") == "permit",
                    principal=body.get("principal"),
                    actions=actions,
                    action_sure=sure,
                    resource_all=_resource_all(body.get("resource"), resource_type),
                    unconditional=body.get("conditions") == [],
                )
            )
        return cls(tuple(scoped), entity_parents(entities_json), principal_type)

    def _ancestors(self, principal: Uid) -> frozenset[Uid] | None:
        if self.parents is None:
            return None
        seen: set[Uid] = set()
        todo = list(self.parents.get(principal, ()))
        while todo:
            u = todo.pop()
            if u not in seen:
                seen.add(u)
                todo.extend(self.parents.get(u, ()))
        return frozenset(seen)

    def _principal(self, scope: Any, me: Uid, ancestors: frozenset[Uid] | None) -> Match:
        if not isinstance(scope, Mapping):
            return Match.MAYBE
        op = scope.get("op")
        if op == "All":
            return Match.YES
        if op == "==":
            uid = _uid(scope.get("entity"))
            return Match.MAYBE if uid is None else Match.YES if uid == me else Match.NO
        if op == "in":
            return self._within(scope, me, ancestors)
        if op == "is":
            if scope.get("entity_type") != me[0]:
                return Match.NO if isinstance(scope.get("entity_type"), str) else Match.MAYBE
            inner = scope.get("in")
            return Match.YES if inner is None else self._within(inner, me, ancestors)
        return Match.MAYBE

    @staticmethod
    def _within(scope: Any, me: Uid, ancestors: frozenset[Uid] | None) -> Match:
        uid = _uid(scope.get("entity")) if isinstance(scope, Mapping) else None
        if uid is None:
            return Match.MAYBE
        if uid == me:
            return Match.YES
        if ancestors is None:
            return Match.MAYBE
        return Match.YES if uid in ancestors else Match.NO

    def never(self, principal_id: str, actions: Iterable[str]) -> frozenset[str]:
        """Of ``actions``, those no request of this principal can be allowed or confirmed."""
        wanted = frozenset(actions)
        me = (self.principal_type, principal_id)
        ancestors = self._ancestors(me)
        could: set[str] = set()
        any_action = False
        blocked: set[str] = set()
        block_all = False
        for p in self.policies:
            m = self._principal(p.principal, me, ancestors)
            if m is Match.NO:
                continue
            if p.permit:
                if p.actions is None:
                    any_action = True
                else:
                    could |= p.actions
            elif m is Match.YES and p.unconditional and p.resource_all and p.action_sure:
                if p.actions is None:
                    block_all = True
                else:
                    blocked |= p.actions
        if block_all:
            return wanted
        return frozenset(a for a in wanted if a in blocked or (not any_action and a not in could))

    def hidden(self, principal_id: str, tools: Iterable[tuple[str, tuple[str, ...]]]) -> frozenset[str]:
        """Keys of the tools (key, required capabilities) this principal could never call: one
        capability that is never allowed denies the whole call. ``tools`` is the snapshot's set,
        read once (the first call indexes it by capability); answers are cached per principal."""
        hit = self._cache.get(principal_id)
        if hit is not None:
            self._cache.move_to_end(principal_id)
            return hit
        if self._by_cap is None:
            by_cap: dict[str, set[str]] = {}
            for key, caps in tools:
                for c in caps:
                    by_cap.setdefault(c, set()).add(key)
            self._by_cap = {c: frozenset(keys) for c, keys in by_cap.items()}
        never = self.never(principal_id, self._by_cap)
        out = frozenset().union(*(self._by_cap[c] for c in never))
        self._cache[principal_id] = out
        if len(self._cache) > REACH_CACHE_MAX:
            self._cache.popitem(last=False)
        return out


__all__ = ["REACH_CACHE_MAX", "Match", "Reach", "action_scope", "entity_parents"]
