"""Sessions and tool views (spec 6.1, 6.2 invariant 2): who proposes, and what the model saw.

A session is opened by the runtime with its own authenticated subject; every model call's tool
listing is recorded as a tool view, and a proposal must name a tool of its model call's view.
Both are cached in memory (bounded) and read back from the store on a miss.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from callgate.arguments.normalize import load_zone
from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import invalid_request, session_not_found
from callgate.base.jsontext import compact_sorted
from callgate.base.lru import remember
from callgate.config import Config
from callgate.execute.budgets import effective_limits
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.toolspecs import CompiledTool
from callgate.propose.outcome import SessionSpec, ToolView
from callgate.store.base import HIDDEN_BY_POLICY, FedResultRecord, SessionRecord, Store, ToolViewRecord

VIEW_CACHE_MAX = 1024
"""Tool views (one per model call, each naming every tool shown) kept in memory: a Propose names
its own turn's model call, so the recent ones are enough; older ones are read from the store.
(Bounded apart from ``limits.max_sessions``: a long-lived agent makes a model call per turn, and
100,000 views of 50 tools would be about a gigabyte.)"""


def check_id(name: str, value: str, max_len: int = 256) -> None:
    """Refuse an empty, over-long or NUL-carrying identifier with ``invalid_request``."""
    if not value or len(value) > max_len or "\x00" in value:
        raise invalid_request(f"{name} must be 1..{max_len} characters without NUL")


class Sessions:
    """Opens sessions, records tool views, and finds both again (cache first, then the store)."""

    def __init__(self, *, config: Config, store: Store, clock: Clock) -> None:
        self._cfg = config
        self._store = store
        self._clock = clock
        self._sessions: OrderedDict[str, SessionRecord] = OrderedDict()
        self._views: OrderedDict[tuple[str, str], ToolViewRecord] = OrderedDict()
        self._cache_max = config.limits.max_sessions
        self._visible: OrderedDict[
            tuple[int, tuple[str, ...], frozenset[str]], tuple[PolicySnapshot, _Visible]
        ] = OrderedDict()

    async def open(self, spec: SessionSpec) -> SessionRecord:
        check_id("subject.tenant", spec.subject.tenant)
        check_id("subject.id", spec.subject.id)
        if load_zone(spec.timezone) is None:
            raise invalid_request("timezone must be an IANA zone name, e.g. Europe/Paris")
        session_id = spec.session_id or "ses_" + uuid.uuid4().hex
        check_id("session_id", session_id)
        record = compact(
            SessionRecord(
                session_id=session_id,
                tenant=spec.subject.tenant,
                subject=spec.subject.id,
                timezone=spec.timezone,
                locale=spec.locale or "en",
                budgets=effective_limits(spec.budgets, self._cfg.budgets).as_dict(),
                tool_allowlist=tuple(spec.tool_allowlist),
                opened_at=rfc3339(self._clock.now()),
            )
        )
        if spec.session_id:
            known = await self._store.get_session(session_id)
            if known is not None:
                return self._reopened(known, record)
        await self._store.put_session(record)
        remember(self._sessions, session_id, record, self._cache_max)
        return record

    def _reopened(self, known: SessionRecord, asked: SessionRecord) -> SessionRecord:
        """A client-chosen id opened again (a runtime restarted, a graph resumed in another
        process): the same session, as first opened (its zone, locale, budgets, allowlist and
        usage stay), for the same tenant and subject only; another subject is refused."""
        if (known.tenant, known.subject) != (asked.tenant, asked.subject):
            raise invalid_request("session_id already exists for another subject")
        record = compact(known)
        remember(self._sessions, record.session_id, record, self._cache_max)
        return record

    def cached(self, session_id: str) -> SessionRecord | None:
        """The session if it is in memory (what :meth:`get` answers without awaiting)."""
        return self._sessions.get(session_id)

    def cached_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        """The tool view if it is in memory (what :meth:`view` answers without awaiting)."""
        return self._views.get((session_id, model_call_id))

    async def get(self, session_id: str) -> SessionRecord:
        """The session, or ``session_not_found``."""
        s = self._sessions.get(session_id)
        if s is None:
            s = await self._store.get_session(session_id)
            if s is None:
                raise session_not_found("unknown session_id")
            s = compact(s)
            remember(self._sessions, session_id, s, self._cache_max)
        return s

    async def view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None:
        """The tools shown for this model call, or None when no ListTools was recorded."""
        key = (session_id, model_call_id)
        v = self._views.get(key)
        if v is None:
            v = await self._store.get_tool_view(session_id, model_call_id)
            if v is not None:
                remember(self._views, key, v, VIEW_CACHE_MAX)
        return v

    @property
    def cached_views(self) -> int:
        """How many tool views are held in memory (bounded by :data:`VIEW_CACHE_MAX`)."""
        return len(self._views)

    async def show(
        self,
        session: SessionRecord,
        model_call_id: str,
        snap: PolicySnapshot,
        fed: Sequence[FedResultRecord] = (),
    ) -> ToolView:
        """Record the tools of ``snap`` this session may see as the view of ``model_call_id``,
        with the tool messages ``fed`` into that model call (checked by the caller) in the same
        write."""
        vis = self._visible_of(session, snap)
        view = ToolViewRecord(
            session_id=session.session_id,
            model_call_id=model_call_id,
            tools=vis.keys,
            spec_digests=vis.digests,
            tool_set_digest=vis.tool_set_digest,
            created_at=rfc3339(self._clock.now()),
            tools_json=vis.keys_json,
            spec_digests_json=vis.digests_json,
        )
        if fed:
            await self._store.put_tool_view_fed(view, fed)
        else:
            await self._store.put_tool_view(view)
        remember(self._views, (session.session_id, model_call_id), view, VIEW_CACHE_MAX)
        return ToolView(tools=vis.tools, tool_set_digest=view.tool_set_digest)

    def _visible_of(self, session: SessionRecord, snap: PolicySnapshot) -> _Visible:
        """The tools a session's allowlist shows from ``snap``, built once per snapshot and
        allowlist (issue 15 A4: ListTools no longer filters, sorts and digests per call)."""
        hidden = snap.hidden_for(session.subject) if self._cfg.policy.list_by_policy else frozenset()
        key = (id(snap), session.tool_allowlist, hidden)
        hit = self._visible.get(key)
        if hit is not None and hit[0] is snap:
            self._visible.move_to_end(key)
            return hit[1]
        listed = [t for t in snap.tools if session.allows(t.spec.key, t.spec.name)]
        tools = tuple(t for t in listed if t.spec.key not in hidden)
        digests = {t.spec.key: t.spec.spec_digest for t in tools}
        h = hashlib.sha256("".join(f"{k}={v}\n" for k, v in sorted(digests.items())).encode())
        keys = tuple(sorted(digests))
        if len(tools) < len(listed):  # a Propose for a hidden one gets the engine's deny (steps.lookup)
            digests[HIDDEN_BY_POLICY] = snap.revision
        vis = _Visible(
            tools,
            keys,
            digests,
            "sha256:" + h.hexdigest(),
            compact_sorted(list(keys)),
            compact_sorted(digests),
        )
        remember(self._visible, key, (snap, vis), VISIBLE_CACHE_MAX)
        return vis


_SHARED_MAX = 4096
_shared_budgets: dict[tuple[tuple[str, int], ...], Mapping[str, int]] = {}
_shared_allowlists: dict[tuple[str, ...], tuple[str, ...]] = {}


def compact(record: SessionRecord) -> SessionRecord:
    """The same session with its repeated parts shared (issue 15 A6: memory per cached session).

    Budgets and allowlists are usually the deployment's defaults, and tenants, zones and locales
    few: one object each instead of one per session. The shared budget mappings are never
    mutated (records are frozen; every reader copies with ``dict(...)``)."""
    key = tuple(sorted(record.budgets.items()))
    budgets = _shared_budgets.get(key)
    if budgets is None:
        budgets = dict(record.budgets)
        if len(_shared_budgets) < _SHARED_MAX:
            _shared_budgets[key] = budgets
    allow = _shared_allowlists.get(record.tool_allowlist)
    if allow is None:
        allow = record.tool_allowlist
        if len(_shared_allowlists) < _SHARED_MAX:
            _shared_allowlists[allow] = allow
    return SessionRecord(
        session_id=record.session_id,
        tenant=sys.intern(record.tenant),
        subject=record.subject,
        timezone=sys.intern(record.timezone),
        locale=sys.intern(record.locale),
        budgets=budgets,
        tool_allowlist=allow,
        opened_at=record.opened_at,
    )


VISIBLE_CACHE_MAX = 256
"""Visible tool sets kept (one per snapshot and distinct allowlist; a reload starts new ones)."""


@dataclass(frozen=True, slots=True)
class _Visible:
    tools: tuple[CompiledTool, ...]
    keys: tuple[str, ...]
    digests: Mapping[str, str]
    """Shared by the views recorded from this set: never mutated."""
    tool_set_digest: str
    keys_json: str
    """``keys`` as the stored JSON text, made once for every view of this set."""
    digests_json: str


__all__ = ["VIEW_CACHE_MAX", "Sessions", "check_id", "compact"]
