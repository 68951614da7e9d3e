"""Retention: records past their retention are deleted in small batches, off the request path.

What a record's age is (``[store.retention]``, docs/RELIABILITY.md "Retention"):

* an **invocation** is aged from its ``updated_at`` once it is in a terminal state (the time of
  its last change, i.e. when it ended). A non-terminal one (OUTCOME_UNKNOWN included: a status
  answer may still resolve it; COMMITTED waiting for its result) is never deleted, whatever its
  age, and neither is one whose idempotency key is still inside its own retention (a replay
  needs it). It goes with its whole trail: events, attempts, tool message, fed-into records,
  secret redemptions; a small tombstone row stays (``callgate explain`` says it expired, when,
  and where it was exported) and is itself deleted ``tombstones_seconds`` later;
* its **events** alone (``events_seconds``, shorter than ``invocations_seconds``) are aged like
  it; the invocation row stays, a tombstone records when they went, and a mark (the last
  ``(updated_at, id)`` done) makes the next pass start after it;
* a **decision** (``Authorizer.Authorize``) is aged from its ``at``;
* an **idempotency key** keeps its own contract (spec 6.8 item 4): past its ``expires_at`` it
  answers ``idempotency.expired_policy``. Under ``new`` a missing key answers like an expired
  one, so it is deleted at expiry (once any retention is configured: nothing is deleted unasked); under ``reject`` it is kept ``expired_keys_seconds`` past its
  expiry to go on refusing (0: kept for ever, the exact contract). A ``claimed`` key, or one
  whose invocation is still open, is never deleted.

Each batch is one transaction (SQLite: one operation of the writer thread, queued beside the
calls' own writes and group-committed with them); the purge task runs at most ``max_batches``
of them per pass. With ``export_path`` every invocation and decision is appended to that file
as one JSON line (the fields ``callgate explain`` reads) and the file is synced **before** the
transaction that deletes it; a record changed meanwhile is not deleted (it is exported again
later: in the file the last line of an id wins). After a pass that deleted something, the SQLite
store hands free pages back to the file system (``PRAGMA incremental_vacuum``, keeping a reserve
for the next inserts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, runtime_checkable

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import config_invalid
from callgate.base.jsonable import jsonable
from callgate.base.states import TERMINAL
from callgate.store.base import (
    AttemptRecord,
    DecisionRecord,
    EventRecord,
    FedResultRecord,
    InvocationRecord,
    ResultRecord,
)
from callgate.store.idempotency.base import ExpiredPolicy
from callgate.store.meters import START, Mark, MeterStore, meters_of

if TYPE_CHECKING:
    from callgate.config import Config

log = logging.getLogger("callgate.retention")
R = TypeVar("R", "Trail", DecisionRecord)

TERMINAL_SQL: Final = "(" + ", ".join(f"'{s.value}'" for s in sorted(TERMINAL)) + ")"
"""The terminal states as an SQL list (the states an invocation may be deleted in)."""

RECLAIM_RESERVE_PAGES: Final = 1024
"""Free pages (4 MiB at SQLite's default page size) kept in the file after a pass, for the next
inserts; the rest go back to the file system (``PRAGMA incremental_vacuum``)."""


@dataclass(frozen=True, slots=True)
class PurgeSql:
    """The retention statements, written once for both backends: ``prefix`` is the table name
    prefix (PostgreSQL's ``callgate_``), ``p`` the driver's placeholder (``?`` or ``%s``)."""

    prefix: str
    p: str
    keys_table: str

    def expired_invocations(self, columns: str) -> str:
        """Terminal, ``updated_at`` below the bound, no key still kept (bound, key now, limit)."""
        return (
            f"SELECT {columns} FROM {self.prefix}invocations i WHERE state IN {TERMINAL_SQL} "
            f"AND updated_at < {self.p} AND NOT EXISTS (SELECT 1 FROM {self.keys_table} k "
            f"WHERE k.invocation_id = i.invocation_id AND k.expires_at > {self.p}) "
            f"ORDER BY updated_at LIMIT {self.p}"
        )

    @property
    def delete_invocation(self) -> str:
        """Still terminal and unchanged since listed (invocation id, updated_at)."""
        return (
            f"DELETE FROM {self.prefix}invocations WHERE invocation_id={self.p} AND updated_at={self.p} "
            f"AND state IN {TERMINAL_SQL}"
        )

    @property
    def delete_trail(self) -> tuple[str, ...]:
        """What hangs off a deleted invocation (each takes its id)."""
        pre, p = self.prefix, self.p
        return (
            (
                f"DELETE FROM {pre}redemptions WHERE attempt_id IN "
                f"(SELECT attempt_id FROM {pre}attempts WHERE invocation_id={p})"
            ),
            *(
                f"DELETE FROM {pre}{t} WHERE invocation_id={p}"
                for t in ("events", "attempts", "results", "fed_results")
            ),
        )

    @property
    def put_tombstone(self) -> str:
        return (
            f"INSERT INTO {self.prefix}expired_invocations VALUES ({', '.join([self.p] * 7)}) "
            "ON CONFLICT (invocation_id) DO UPDATE SET expired_at=excluded.expired_at, "
            "exported_to=excluded.exported_to"
        )

    @property
    def get_tombstone(self) -> str:
        return (
            "SELECT invocation_id, tenant, tool_name, state, updated_at, expired_at, exported_to "
            f"FROM {self.prefix}expired_invocations WHERE invocation_id={self.p}"
        )

    @property
    def purge_tombstones(self) -> str:
        """(bound, limit)."""
        t = f"{self.prefix}expired_invocations"
        return (
            f"DELETE FROM {t} WHERE invocation_id IN (SELECT invocation_id FROM {t} x "
            f"WHERE expired_at < {self.p} AND NOT EXISTS (SELECT 1 FROM {self.prefix}invocations i "
            f"WHERE i.invocation_id = x.invocation_id) ORDER BY expired_at LIMIT {self.p})"
        )

    @property
    def expired_decisions(self) -> str:
        """(bound, limit)."""
        return (
            f"SELECT decision_id FROM {self.prefix}decisions WHERE at < {self.p} ORDER BY at LIMIT {self.p}"
        )

    def events_due(self, columns: str) -> str:
        """Terminal invocations after the mark, ``updated_at`` below the bound, in (updated_at,
        id) order: (bound, mark at, mark at, mark id, limit)."""
        p = self.p
        return (
            f"SELECT {columns} FROM {self.prefix}invocations WHERE state IN {TERMINAL_SQL} "
            f"AND updated_at < {p} AND (updated_at > {p} OR (updated_at = {p} AND invocation_id > {p})) "
            f"ORDER BY updated_at, invocation_id LIMIT {p}"
        )

    @property
    def delete_events(self) -> str:
        """The events of one invocation still terminal and unchanged (id, id, updated_at)."""
        pre, p = self.prefix, self.p
        return (
            f"DELETE FROM {pre}events WHERE invocation_id={p} AND EXISTS (SELECT 1 FROM {pre}invocations "
            f"WHERE invocation_id={p} AND updated_at={p} AND state IN {TERMINAL_SQL})"
        )

    @property
    def get_mark(self) -> str:
        return f"SELECT updated_at, invocation_id FROM {self.prefix}retention_marks WHERE kind={self.p}"

    @property
    def put_mark(self) -> str:
        return (
            f"INSERT INTO {self.prefix}retention_marks VALUES ({self.p}, {self.p}, {self.p}) ON CONFLICT (kind) "
            "DO UPDATE SET updated_at=excluded.updated_at, invocation_id=excluded.invocation_id"
        )

    def purge_keys(self, row: str, lock: str = "") -> str:
        """(expired before, limit); ``row`` is the row id column (``rowid``, ``ctid``)."""
        t = self.keys_table
        return (
            f"DELETE FROM {t} WHERE {row} IN (SELECT k.{row} FROM {t} k WHERE k.expires_at <= {self.p} "
            f"AND k.state != 'claimed' AND NOT EXISTS (SELECT 1 FROM {self.prefix}invocations i WHERE "
            f"i.invocation_id = k.invocation_id AND i.state NOT IN {TERMINAL_SQL}) "
            f"ORDER BY k.expires_at LIMIT {self.p}{lock})"
        )


def tombstone_row(inv: InvocationRecord, expired_at: str, exported_to: str) -> tuple[str, ...]:
    return (
        inv.invocation_id,
        inv.tenant,
        inv.tool_name,
        inv.state.value,
        inv.updated_at,
        expired_at,
        exported_to,
    )


class RecordKind(str, Enum):
    """What an export line holds."""

    INVOCATION = "invocation"
    EVENTS = "events"
    """The events of an invocation that is kept (``events_seconds``): the trail as it was."""
    DECISION = "decision"


@dataclass(frozen=True, slots=True)
class Trail:
    """An invocation and everything hanging off it: what ``callgate explain`` reads."""

    invocation: InvocationRecord
    events: Sequence[EventRecord] = ()
    attempts: Sequence[AttemptRecord] = ()
    result: ResultRecord | None = None
    fed: Sequence[FedResultRecord] = ()


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of an invocation deleted by retention."""

    invocation_id: str
    tenant: str
    tool_name: str
    state: str
    """The terminal state it had."""
    updated_at: str
    """Its last change (the time its age was counted from)."""
    expired_at: str
    """When retention deleted it."""
    exported_to: str
    """The export file its records were appended to (``""``: not exported)."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """``[store.retention]`` as durations (zero: that kind is never deleted)."""

    invocations: timedelta = timedelta(0)
    events: timedelta = timedelta(0)
    """Zero: the events go with their invocation."""
    decisions: timedelta = timedelta(0)
    tombstones: timedelta = timedelta(0)
    """Zero: as long as ``invocations`` (or ``events``)."""
    expired_keys: timedelta = timedelta(0)
    sessions_idle: timedelta = timedelta(0)
    """Session meter totals and labels idle this long go (zero: kept)."""
    keys_expire_new: bool = False
    """``idempotency.expired_policy = new``: a key is deleted at its expiry."""
    batch: int = 100
    max_batches: int = 20
    interval: float = 60.0
    export_path: str = ""

    @property
    def enabled(self) -> bool:
        """Whether the sidecar runs passes at all: some retention is configured (``expired_policy =
        new`` alone deletes nothing: off by default means nothing is ever deleted unasked)."""
        return bool(
            self.invocations or self.events or self.decisions or self.expired_keys or self.sessions_idle
        )

    @property
    def tombstone_retention(self) -> timedelta:
        return self.tombstones or self.invocations or self.events


def policy_of(cfg: Config) -> RetentionPolicy:
    """The policy ``[store.retention]`` and ``idempotency.expired_policy`` configure."""
    r = cfg.store.retention
    return RetentionPolicy(
        invocations=timedelta(seconds=r.invocations_seconds),
        events=timedelta(seconds=r.events_seconds),
        decisions=timedelta(seconds=r.decisions_seconds),
        tombstones=timedelta(seconds=r.tombstones_seconds),
        expired_keys=timedelta(seconds=r.expired_keys_seconds),
        sessions_idle=timedelta(seconds=r.sessions_idle_seconds),
        keys_expire_new=cfg.idempotency.expired_policy == ExpiredPolicy.NEW.value,
        batch=r.batch,
        max_batches=r.max_batches,
        interval=float(r.interval_seconds),
        export_path=str(cfg.path(r.export_path)) if r.export_path else "",
    )


def purger_of(
    cfg: Config, store: object, clock: Clock, meter_keeps: Callable[[], Mapping[str, int]] = dict
) -> Purger | None:
    """The purge task's work for the sidecar's store, or None when nothing is ever deleted (or
    the store cannot delete: then the policy is refused at start rather than ignored)."""
    policy = policy_of(cfg)
    if not policy.enabled:
        return None
    while not isinstance(store, RetainingStore) and hasattr(store, "inner"):
        store = store.inner  # a wrapper (callgate.observability.PublishingStore): deletes publish nothing
    if not isinstance(store, RetainingStore):
        raise config_invalid(f"store.retention: the {cfg.store.backend} store cannot delete records")
    return Purger(store, policy, clock, meter_keeps)


def cutoff(now: datetime, age: timedelta) -> str:
    """The RFC 3339 bound a record's time must be below (``<``) to be ``age`` old at ``now``.
    Record times are RFC 3339 strings with optional fractions, which compare as text only up to
    the second ("…:00.5Z" < "…:00Z"), so the bound is a whole second before: a record is deleted
    at most about a second late, never early."""
    return rfc3339((now - age).replace(microsecond=0) - timedelta(seconds=1))


@runtime_checkable
class RetainingStore(Protocol):
    """What the purge needs from a store (both backends have it)."""

    async def expired_trails(self, before: str, now: datetime, limit: int, *, full: bool) -> list[Trail]:
        """Terminal invocations whose ``updated_at`` is below ``before`` and whose key (if any
        is kept here) has expired at ``now``, oldest first, at most ``limit``; with ``full``
        their whole trail, else the invocation alone."""
        ...

    async def delete_trails(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """Delete each invocation (still terminal, ``updated_at`` unchanged) with its trail and
        leave its tombstone, in one transaction; how many were deleted."""
        ...

    async def events_due(self, before: str, limit: int, *, full: bool) -> list[Trail]:
        """Terminal invocations past the events mark whose ``updated_at`` is below ``before``,
        in (updated_at, id) order, at most ``limit``; with ``full`` their trails."""
        ...

    async def delete_events(self, trails: Sequence[Trail], expired_at: str, exported_to: str) -> int:
        """Delete the events of each (still terminal and unchanged) invocation, leave its
        tombstone, move the events mark past the last one, in one transaction; how many
        invocations lost their events."""
        ...

    async def expired_decisions(self, before: str, limit: int) -> list[DecisionRecord]: ...

    async def delete_decisions(self, ids: Sequence[str]) -> int: ...

    async def purge_keys(self, expired_before: datetime, limit: int) -> int:
        """Delete keys whose ``expires_at`` is at or before ``expired_before``, not claimed and
        whose invocation is not open; how many."""
        ...

    async def purge_tombstones(self, before: str, limit: int) -> int: ...

    async def get_tombstone(self, invocation_id: str) -> Tombstone | None: ...

    async def reclaim(self, reserve_pages: int) -> int:
        """Hand free space back to the file system; pages freed (0 where the server does it)."""
        ...


@dataclass(slots=True)
class PassCounts:
    invocations: int = 0
    events: int = 0
    """Invocations whose events were deleted (the invocation kept)."""
    decisions: int = 0
    keys: int = 0
    tombstones: int = 0
    meters: int = 0
    """Rows of the meter tables (entries, totals, reconcile records, stale reservations)."""
    reclaimed_pages: int = 0

    @property
    def deleted(self) -> int:
        return self.invocations + self.events + self.decisions + self.keys + self.tombstones + self.meters


def export_line(kind: RecordKind, record: Trail | DecisionRecord, expired_at: str) -> str:
    """One JSON line of the export file (``json.loads`` gives the fields ``explain`` reads)."""
    return json.dumps(
        {"kind": kind.value, "expired_at": expired_at, "record": jsonable(record)},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )


def append_synced(path: Path, lines: Sequence[str]) -> None:
    """Append ``lines`` to ``path`` and fsync it (raises ``OSError``: then nothing is deleted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())


@dataclass
class Purger:
    """Runs retention passes over ``store`` (a task calls :meth:`maybe_run`; tests call
    :meth:`run_once` with the time they want)."""

    store: RetainingStore
    policy: RetentionPolicy
    clock: Clock
    meter_keeps: Callable[[], Mapping[str, int]] = dict
    """The serving snapshot's longest window per meter (a meter's entries are kept twice that)."""
    totals: PassCounts = field(default_factory=PassCounts)
    _last: float = field(default=-1e18)
    _meter_mark: Mark = START
    """Where the last pass's scan of the meters' timed totals stopped (the next one goes on)."""

    async def maybe_run(self) -> PassCounts | None:
        """A pass if ``policy.interval`` seconds passed since the last one (monotonic time)."""
        if not self.policy.enabled or time.monotonic() - self._last < self.policy.interval:
            return None
        self._last = time.monotonic()
        return await self.run_once(self.clock.now())

    async def run_once(self, now: datetime) -> PassCounts:
        """One pass at ``now``: at most ``max_batches`` batches of each kind."""
        p, counts = self.policy, PassCounts()
        expired_at = rfc3339(now)
        export = Path(p.export_path) if p.export_path else None
        exported_to = str(export) if export else ""
        if p.events:
            counts.events += await self._batches(
                RecordKind.EVENTS, export, expired_at,
                lambda n: self.store.events_due(cutoff(now, p.events), n, full=export is not None),
                lambda trails: self.store.delete_events(trails, expired_at, exported_to),
            )  # fmt: skip
        if p.invocations:
            counts.invocations += await self._batches(
                RecordKind.INVOCATION, export, expired_at,
                lambda n: self.store.expired_trails(cutoff(now, p.invocations), now, n, full=export is not None),
                lambda trails: self.store.delete_trails(trails, expired_at, exported_to),
            )  # fmt: skip
        if p.invocations or p.events:
            counts.tombstones += await self._each(
                lambda n: self.store.purge_tombstones(cutoff(now, p.tombstone_retention), n)
            )
        if p.decisions:
            counts.decisions += await self._batches(
                RecordKind.DECISION, export, expired_at,
                lambda n: self.store.expired_decisions(cutoff(now, p.decisions), n),
                lambda found: self.store.delete_decisions([d.decision_id for d in found]),
            )  # fmt: skip
        if p.keys_expire_new or p.expired_keys:
            grace = timedelta(0) if p.keys_expire_new else p.expired_keys
            counts.keys += await self._each(lambda n: self.store.purge_keys(now - grace, n))
        meters = meters_of(self.store)
        if meters is not None:  # entries past twice the longest window, and what no call can use
            counts.meters += await self._meters(meters, now)
        if counts.deleted:
            counts.reclaimed_pages = await self.store.reclaim(RECLAIM_RESERVE_PAGES)
            log.info(
                "retention at %s: deleted %d invocation(s), the events of %d, %d decision(s), %d key(s), "
                "%d tombstone(s), %d meter row(s); %d page(s) reclaimed",
                expired_at, counts.invocations, counts.events, counts.decisions, counts.keys,
                counts.tombstones, counts.meters, counts.reclaimed_pages,
            )  # fmt: skip
        for name in ("invocations", "events", "decisions", "keys", "tombstones", "meters", "reclaimed_pages"):
            setattr(self.totals, name, getattr(self.totals, name) + getattr(counts, name))
        return counts

    async def _batches(
        self,
        kind: RecordKind,
        export: Path | None,
        expired_at: str,
        due: Callable[[int], Awaitable[list[R]]],
        delete: Callable[[list[R]], Awaitable[int]],
    ) -> int:
        """Batches of ``due`` records, each exported (synced) then deleted; how many deleted."""
        total = 0
        for _ in range(self.policy.max_batches):
            trails = await due(self.policy.batch)
            if not trails:
                break
            if export is not None:
                lines = [export_line(kind, t, expired_at) for t in trails]
                await asyncio.to_thread(append_synced, export, lines)
            total += await delete(trails)
            if len(trails) < self.policy.batch:
                break
        return total

    async def _meters(self, meters: MeterStore, now: datetime) -> int:
        """Batches of the meter tables, going on from where the last pass stopped, until the scan
        of the timed totals reaches their end (the next pass starts over) or ``max_batches``."""
        total, keeps = 0, self.meter_keeps()
        idle_ms = int(self.policy.sessions_idle.total_seconds() * 1000)
        for _ in range(self.policy.max_batches):
            n, mark = await meters.purge(now, keeps, self.policy.batch, self._meter_mark, idle_ms)
            total += n
            self._meter_mark = START if mark is None else mark
            if mark is None:
                break
        return total

    async def _each(self, delete: Callable[[int], Awaitable[int]]) -> int:
        total = 0
        for _ in range(self.policy.max_batches):
            n = await delete(self.policy.batch)
            total += n
            if n < self.policy.batch:
                break
        return total


__all__ = [
    "RECLAIM_RESERVE_PAGES",
    "TERMINAL_SQL",
    "PassCounts",
    "PurgeSql",
    "Purger",
    "RecordKind",
    "RetainingStore",
    "RetentionPolicy",
    "Tombstone",
    "Trail",
    "append_synced",
    "cutoff",
    "export_line",
    "policy_of",
    "tombstone_row",
    "purger_of",
]
