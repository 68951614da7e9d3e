"""Which tools a subject could ever be allowed (or asked to confirm): ListTools by policy.

A conservative static reading of the Cedar policies' scopes (Cedar's JSON form, read once per
snapshot). For one principal and one action it answers *never* only when it is sure every request
of that principal for that action is denied whatever its resource and context (the arguments
are unknown at listing time):

* no enforcing ``permit`` (``@confirm`` ones included) whose scope could match the principal and
  the action, or
* an enforcing ``forbid`` whose conditions surely hold (none, or ``when { true }``) and whose scope
  surely covers the principal, the action and every ``Resource``.

A policy whose conditions surely fail (``when { false }``, ``unless { true }``) never applies and is
left out. The reading also knows when a pair is *surely shown*: a permit whose scope surely matches
and whose conditions surely hold, and no forbid that could match. The pairs it cannot decide either
way (any other condition, a scope shape it does not know, a membership it cannot resolve) are
*undecided*: shown, unless the solver pass at snapshot build (:mod:`callgate.policy.reach_solve`,
the symbolic compiler) proves them never allowed nor confirmed (:meth:`Reach.settle`); a timeout, a
missing solver or any error keeps them shown. A shown tool is still authorized call by call, so
showing is safe, while hiding a tool some request could use would be the bug. Shadow policies decide
nothing and are left out. Principal membership (``principal in Role::"x"``) is resolved against the snapshot's
entity set (``parents``, transitively); a principal the set does not hold has no parents (the
engine adds it bare). Other engines (Rego) have no reach: every allowlisted tool is shown.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from callgate.policy.reach_solve import SolverPass

Uid = tuple[str, str]
ClassKey = tuple[str | None, frozenset[Uid]]
"""A principal class: the principal's id when a policy names it (else None), and its ancestors.
Principals of one class get the same answers (the solver pass decides per class)."""

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
    """Its conditions surely hold (none, or only ``when { true }`` / ``unless { false }``)."""
    literals: frozenset[Uid] = frozenset()
    """The entity literals of its scopes and conditions."""


def _conditions(raw: Any) -> bool | None:
    """True: the conditions surely hold; False: they surely fail; None: the reading cannot tell."""
    if raw == []:
        return True
    if not isinstance(raw, list):
        return None
    sure = True
    for c in raw:
        body = c.get("body") if isinstance(c, Mapping) else None
        value = body.get("Value") if isinstance(body, Mapping) and len(body) == 1 else None
        if not isinstance(value, bool):
            sure = False
            continue
        holds = value if c.get("kind") == "when" else not value
        if not holds:
            return False
    return True if sure else None


def _literals(node: Any, out: set[Uid]) -> None:
    """Every entity literal in a policy's JSON form (scopes and conditions)."""
    if isinstance(node, Mapping):
        uid = _uid(node)
        if uid is not None:
            out.add(uid)
            return
        for v in node.values():
            _literals(v, out)
    elif isinstance(node, list):
        for v in node:
            _literals(v, out)


def _member_type(scope: Any) -> str | None:
    """The entity type a principal scope tests membership of (``in`` / ``is ... in``), if any."""
    if not isinstance(scope, Mapping):
        return None
    inner = scope if scope.get("op") == "in" else scope.get("in") if scope.get("op") == "is" else None
    uid = _uid(inner.get("entity")) if isinstance(inner, Mapping) else None
    return uid[0] if uid is not None else None


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
    named: frozenset[str] = frozenset()
    """Ids of the principals some policy names (each its own :data:`ClassKey`)."""
    literals: frozenset[Uid] = frozenset()
    """The entity literals of the enforcing policies (memberships the solver pass pins)."""
    member_types: frozenset[str] = frozenset()
    """Entity types the principal scopes test membership of (``in``)."""
    proved: Mapping[ClassKey, frozenset[str]] = field(default_factory=dict)
    """Per principal class, the undecided actions the solver pass proved never allowed nor
    confirmed (:meth:`settle`); read together with the reading's own answers."""
    solver: SolverPass | None = None
    """What the solver pass did (None: it did not run)."""
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
        literals: set[Uid] = set()
        for pid in enforcing:
            body = static[pid]
            holds = _conditions(body.get("conditions"))
            if holds is False:
                continue  # never applies: decides nothing
            mine: set[Uid] = set()
            _literals(body, mine)
            literals |= mine
            actions, sure = action_scope(body.get("action"), action_type, descendants)
            scoped.append(
                _Scoped(
                    permit=body.get("effect") == "permit",
                    principal=body.get("principal"),
                    actions=actions,
                    action_sure=sure,
                    resource_all=_resource_all(body.get("resource"), resource_type),
                    unconditional=holds is True,
                    literals=frozenset(mine),
                )
            )
        named = frozenset(i for t, i in literals if t == principal_type)
        others = frozenset(u for u in literals if u[0] not in (principal_type, action_type))
        member_types = frozenset(_member_type(s.principal) for s in scoped) - {None}
        return cls(
            tuple(scoped),
            entity_parents(entities_json),
            principal_type,
            named,
            others,
            frozenset(t for t in member_types if t is not None),
        )

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

    def class_key(self, principal_id: str, ancestors: frozenset[Uid] | None = None) -> ClassKey | None:
        """The principal's class (None when its memberships cannot be read)."""
        if ancestors is None:
            ancestors = self._ancestors((self.principal_type, principal_id))
        if ancestors is None:
            return None
        return (principal_id if principal_id in self.named else None, ancestors)

    def assess(self, principal_id: str, actions: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
        """Of ``actions``: (never allowed nor confirmed, surely shown), by the reading alone; the
        rest are undecided (shown unless :meth:`settle` proved them never)."""
        return self._assess(
            principal_id, frozenset(actions), self._ancestors((self.principal_type, principal_id))
        )

    def _assess(
        self, principal_id: str, wanted: frozenset[str], ancestors: frozenset[Uid] | None
    ) -> tuple[frozenset[str], frozenset[str]]:
        me = (self.principal_type, principal_id)
        could: set[str] = set()
        any_action = False
        blocked: set[str] = set()
        block_all = False
        sure: set[str] = set()
        sure_all = False
        forbids: set[str] = set()
        forbid_all = False
        for p in self.policies:
            m = self._principal(p.principal, me, ancestors)
            if m is Match.NO:
                continue
            if p.permit:
                if p.actions is None:
                    any_action = True
                else:
                    could |= p.actions
                if m is Match.YES and p.unconditional and p.resource_all and p.action_sure:
                    if p.actions is None:
                        sure_all = True
                    else:
                        sure |= p.actions
                continue
            if p.actions is None:
                forbid_all = True
            else:
                forbids |= p.actions
            if m is Match.YES and p.unconditional and p.resource_all and p.action_sure:
                if p.actions is None:
                    block_all = True
                else:
                    blocked |= p.actions
        if block_all:
            return wanted, frozenset()
        never = frozenset(a for a in wanted if a in blocked or (not any_action and a not in could))
        if forbid_all:
            return never, frozenset()
        shown = frozenset(a for a in wanted - never if (sure_all or a in sure) and a not in forbids)
        return never, shown

    def never(self, principal_id: str, actions: Iterable[str]) -> frozenset[str]:
        """Of ``actions``, those no request of this principal can be allowed or confirmed: the
        reading's answer and what the solver pass proved for the principal's class."""
        wanted = frozenset(actions)
        ancestors = self._ancestors((self.principal_type, principal_id))
        out, _ = self._assess(principal_id, wanted, ancestors)
        if self.proved and ancestors is not None:
            key = self.class_key(principal_id, ancestors)
            extra = self.proved.get(key) if key is not None else None
            if extra:
                out |= wanted & extra
        return out

    def literals_for(self, action: str) -> frozenset[Uid]:
        """The entity literals of the policies whose action scope could match ``action`` (the only
        ones that can decide its requests)."""
        out: set[Uid] = set()
        for p in self.policies:
            if p.actions is None or action in p.actions:
                out |= p.literals
        return frozenset(out)

    def classes(self) -> dict[ClassKey, str]:
        """Every principal class the snapshot can meet -> one principal id of it: each principal of
        the entity set, each principal a policy names, and one the set does not hold (no roles)."""
        if self.parents is None:
            return {}
        ids = {i for t, i in self.parents if t == self.principal_type} | set(self.named)
        out: dict[ClassKey, str] = {}
        for pid in sorted(ids):
            key = self.class_key(pid)
            if key is not None:
                out.setdefault(key, pid)
        bare = "callgate:reach:unnamed"
        while bare in ids:
            bare += "_"
        out.setdefault((None, frozenset()), bare)
        return out

    def settle(self, proved: Mapping[ClassKey, frozenset[str]]) -> None:
        """Record the solver pass's answers (before the snapshot serves: answers are per snapshot)."""
        self.proved = {k: v for k, v in proved.items() if v}
        self._cache.clear()

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


__all__ = ["REACH_CACHE_MAX", "ClassKey", "Match", "Reach", "action_scope", "entity_parents"]
