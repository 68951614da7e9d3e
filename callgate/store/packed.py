"""The stage events of a new invocation stored as one row (issue 34 item 2).

A ``Propose`` that runs straight through writes its stage events (``proposed`` → ``parsed`` →
``validated`` → ``normalized`` → ``authorized`` → ``prepared``, or to a refusal) in the same
transaction that creates the invocation. They share the invocation, the time (``at``) and the
trace, are numbered 1..N with ids ``<invocation>.<seq>``, and each one's ``from_state`` is the
``to_state`` before it. Stored as N rows they cost N rows in three B-trees (the table, its
``(invocation_id, seq)`` key, the unique ``event_id``) and repeat every shared column; stored as
one they cost one. The one row is an ordinary ``events`` row:

* ``kind`` = :data:`PACKED_KIND`, ``seq`` = N (the last stage's number, so the next event
  appended is N + 1 as before), ``event_id`` the last stage's id (stored NULL since schema
  SQLite 7 / PostgreSQL 6, below), ``at`` and ``trace_id`` shared, ``from_state`` NULL,
  ``to_state`` the last stage's;
* ``data``: :data:`FORMAT_V2` then the raw-deflate (:data:`DICTIONARY_V1` preset) of the JSON
  ``[stages, refs]``: ``stages`` the list ``[[kind, to_state, span_id, data], ...]``, ``refs``
  the ``[stage number, key]`` of each data value left as ``null`` because it is the invocation's
  own (:data:`REFERENCED`: the digest, the policy revision, the decision), put back on reading.
  Rows written before (:data:`FORMAT_V1`: the stages alone) still read.

Every events row (packed or not, both backends) is built by :func:`new_event_rows` /
:func:`event_row` and read by :func:`read_rows`, from the columns of :func:`select_events`: the
row joined with its invocation, so that what a row shares with it is stored once (issue 34 item
2, schema SQLite 7 / PostgreSQL 6): ``event_id`` is NULL when it is ``<invocation>.<seq>``,
``at`` NULL when it is the invocation's ``created_at``.

Every read of the events expands a packed row (:func:`unpack`), so the event API (``events``,
``WatchInvocation``, ``explain``, retention's export, the 6.13 questions) answers what the N rows
answered: the same ids, numbers, states, spans and data. Events that do not fit the shape above
are stored one row each, as before. The dictionary and the format byte are part of the stored
record: never change them; a new layout takes a new format byte (and keeps reading the old).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from callgate.base.jsontext import compact_sorted
from callgate.base.states import State
from callgate.store.base import EventRecord, InvocationRecord

PACKED_KIND: Final = "stages"
"""The ``kind`` of a row that holds a new invocation's stage events (never an event's kind)."""

PACKED_MIGRATION: Final = (
    "events: a new invocation's stage events as one packed row (no DDL: marks the format)"
)
"""The migration that starts writing packed rows (SQLite 5, PostgreSQL 4). It changes no table:
it is a version step so that an older callgate, which would read a packed row as one event of
an unknown kind, refuses the database instead (``too_new``)."""

FORMAT_V1: Final = b"\x01"
"""First byte of a packed row's data: raw deflate with :data:`DICTIONARY_V1`, of UTF-8 JSON
(the stages alone). Written before schema SQLite 7 / PostgreSQL 6; read, never written."""

FORMAT_V2: Final = b"\x02"
"""First byte of a packed row's data: raw deflate with :data:`DICTIONARY_V1`, of UTF-8 JSON
``[stages, refs]`` (the invocation's own values left out, :data:`REFERENCED`)."""

REFERENCED: Final = ("decision", "digest", "policy_revision")
"""Stage data keys whose value, when it is the invocation's field of the same name, a packed
row leaves as ``null`` and names in its ``refs`` (the invocation's are never changed after it
is created)."""

EVENTS_MIGRATION: Final = (
    "events: one B-tree (WITHOUT ROWID on SQLite), no event_id index; event_id and at left NULL "
    "when they are the invocation's; packed stages leave out the invocation's own values"
)
"""The migration of the smaller events rows (SQLite 7, PostgreSQL 6)."""

DICTIONARY_V1: Final = (
    b'"applied":["relative_date:/date"],"capabilities":["confirmation":"not_required",'
    b'"decision":{"effect":"allow","engine":"cedar","error_code":"","policy_ids":['
    b'"reasons":[{"code":"policy_permit","message":"","policy_id":"dialect":'
    b'"https://json-schema.org/draft/2020-12/schema","format_assertion":true,"locale":"en",'
    b'"model_call_id":"parent_span_id":"","policy_revision":"sha256:","proposal_id":"raw_len":'
    b'"raw_sha256":"reference_clock":"resource":"subject":{"id":"tenant":"timezone":'
    b'"tool":"tool_set_digest":"sha256:"tool_spec_digest":"sha256:"top_level_keys":'
    b'"validator":"python-jsonschema","validator_version":"digest":"sha256:"duration_us":'
    b'"rejection":{"code":"message":"violations":[["parse_rejected","PARSE_REJECTED",'
    b'["validation_rejected","VALIDATION_REJECTED",["authorization_rejected","AUTHORIZATION_REJECTED",'
    b'["confirmation_requested","AUTHORIZED",[["proposed","PROPOSED","'
    b'],["parsed","PARSED","],["validated","VALIDATED","],["normalized","VALIDATED","'
    b'],["authorized","AUTHORIZED","],["prepared","PREPARED","'
)
"""The preset dictionary of format 1: the keys and values the stage events of a Propose repeat.
Frozen: rows written with it must stay readable."""

_WBITS: Final = -12
"""A 4 KiB raw-deflate window: the dictionary and a Propose's stages fit in it, and the
compressor's state is ~20 KiB rather than ~256 KiB (its set-up dominated at the default)."""
_MEM_LEVEL: Final = 4
_LEVEL: Final = 9
"""Deflate's best: on a Propose's ~1.3 KB of stages ~25 bytes smaller than level 1, for a few
microseconds more."""


@dataclass(frozen=True, slots=True)
class PackedRow:
    """The one ``events`` row of a new invocation's stage events (:func:`pack`)."""

    invocation_id: str
    seq: int
    event_id: str
    at: str
    to_state: State
    trace_id: str
    data: bytes
    """:data:`FORMAT_V2` and the compressed stages."""


def packable(events: Sequence[EventRecord]) -> bool:
    """Whether ``events`` are a new invocation's stages that one row can hold exactly: at least
    two, numbered 1..N with ids ``<invocation>.<seq>``, one time and trace, a chain of states
    starting from none, and JSON-object data."""
    if len(events) < 2:
        return False
    first = events[0]
    inv, at, trace = first.invocation_id, first.at, first.trace_id
    before: State | None = None
    for n, e in enumerate(events, 1):
        if (
            e.seq != n
            or e.invocation_id != inv
            or e.event_id != f"{inv}.{n}"
            or e.at != at
            or e.trace_id != trace
            or e.from_state is not before
            or e.kind == PACKED_KIND
        ):
            return False
        before = e.to_state
    return True


def _own(inv: InvocationRecord, key: str, value: Any) -> bool:
    """Whether ``value`` (a stage's data under ``key``) is the invocation's own field ``key``."""
    mine = getattr(inv, key)
    if mine is None:
        return False
    if value is mine:
        return True
    if key == "decision":
        return isinstance(value, Mapping) and compact_sorted(dict(value)) == compact_sorted(dict(mine))
    return isinstance(value, str) and value == mine


def pack(events: Sequence[EventRecord], inv: InvocationRecord | None = None) -> PackedRow:
    """The one row of ``events`` (:func:`packable` must hold); the data values that are
    ``inv``'s own (:data:`REFERENCED`) are left out."""
    last = events[-1]
    stages: list[list[Any]] = []
    refs: list[list[Any]] = []
    for n, e in enumerate(events):
        data = dict(e.data)
        if inv is not None:
            for key in REFERENCED:
                if key in data and _own(inv, key, data[key]):
                    data[key] = None
                    refs.append([n, key])
        stages.append([e.kind, e.to_state.value, e.span_id, data])
    z = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1)
    body = z.compress(compact_sorted([stages, refs]).encode("utf-8")) + z.flush()
    return PackedRow(
        last.invocation_id, last.seq, last.event_id, last.at, last.to_state, last.trace_id, FORMAT_V2 + body
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """The invocation's columns an events row is read with (:func:`select_events`), as stored."""

    created_at: str | None
    digest: str | None
    policy_revision: str | None
    decision: str | None
    """Compact sorted JSON text, or NULL."""

    def value(self, key: str, where: str) -> Any:
        """The invocation's field ``key`` (:data:`REFERENCED`), as the stage data held it."""
        found: Any = getattr(self, key) if key in REFERENCED else None
        if found is None:
            raise ValueError(f"{where}: packed stage data refers to the invocation's {key!r}, which it lacks")
        return json.loads(found) if key == "decision" else found


def unpack(
    invocation_id: str, seq: int, at: str, trace_id: str, data: bytes, where: str, owner: Owner | None = None
) -> list[EventRecord]:
    """The events of a packed row (``data`` as stored). ``where`` names the row in the error
    raised for data that is not a packed row of a known format; ``owner``: the invocation's
    values a :data:`FORMAT_V2` row refers to."""
    raw = bytes(data)
    fmt = raw[:1]
    if fmt not in (FORMAT_V1, FORMAT_V2):
        raise ValueError(f"{where}: packed stage events of unknown format {fmt!r}")
    z = zlib.decompressobj(_WBITS, zdict=DICTIONARY_V1)
    doc: Any = json.loads(z.decompress(raw[1:]) + z.flush())
    stages: list[list[Any]] = doc if fmt == FORMAT_V1 else doc[0]
    if len(stages) != seq:
        raise ValueError(f"{where}: {len(stages)} packed stage events for seq {seq}")
    if fmt == FORMAT_V2:
        for n, key in doc[1]:
            if owner is None:
                raise ValueError(f"{where}: packed stage data refers to an invocation not read with it")
            stages[n][3][key] = owner.value(key, where)
    out: list[EventRecord] = []
    before: State | None = None
    for n, (kind, to, span_id, payload) in enumerate(stages, 1):
        state = State(to)
        out.append(
            EventRecord(
                event_id=f"{invocation_id}.{n}",
                invocation_id=invocation_id,
                seq=n,
                at=at,
                kind=kind,
                from_state=before,
                to_state=state,
                trace_id=trace_id,
                span_id=span_id,
                data=payload,
            )  # fmt: skip
        )
        before = state
    return out


# --------------------------------------------------------------------------- rows, both backends
EVENT_COLUMNS: Final = "invocation_id, seq, event_id, at, kind, from_state, to_state, trace_id, span_id, data"
"""The columns of an ``events`` row, in the order of :func:`event_row`."""
EVENT_WIDTH: Final = 10


def event_row(
    e: EventRecord, inv: InvocationRecord | None = None, *, binary: bool = False
) -> tuple[Any, ...]:
    """The ``events`` row of one event: ``event_id`` NULL when it is ``<invocation>.<seq>``,
    ``at`` NULL when it is ``inv``'s ``created_at``; ``data`` compact sorted JSON (UTF-8 bytes
    with ``binary``: PostgreSQL's ``bytea`` column)."""
    text = compact_sorted(dict(e.data))
    return (
        e.invocation_id, e.seq, None if e.event_id == f"{e.invocation_id}.{e.seq}" else e.event_id,
        None if inv is not None and e.at == inv.created_at else e.at, e.kind,
        e.from_state.value if e.from_state else None, e.to_state.value, e.trace_id, e.span_id,
        text.encode("utf-8") if binary else text,
    )  # fmt: skip


def packed_row(p: PackedRow, inv: InvocationRecord | None = None) -> tuple[Any, ...]:
    """The ``events`` row of a packed row (its ``event_id`` is always ``<invocation>.<seq>``)."""
    at = None if inv is not None and p.at == inv.created_at else p.at
    return (p.invocation_id, p.seq, None, at, PACKED_KIND, None, p.to_state.value, p.trace_id, "", p.data)


def new_event_rows(
    events: Sequence[EventRecord], inv: InvocationRecord | None = None, *, binary: bool = False
) -> list[tuple[Any, ...]]:
    """The ``events`` rows of a new invocation's first events (``inv``: the invocation created
    with them): one packed row when they fit it (:func:`packable`), else one row each."""
    if packable(events):
        return [packed_row(pack(events, inv), inv)]
    return [event_row(e, inv, binary=binary) for e in events]


def select_events(prefix: str, placeholder: str | None) -> str:
    """The ``SELECT`` of one invocation's events rows in order, with the invocation's columns
    :func:`read_rows` reads them with (``prefix``: the tables' name prefix; ``placeholder``
    ``None``: every invocation's, by invocation and sequence)."""
    where = (
        f"WHERE e.invocation_id={placeholder} ORDER BY e.seq"
        if placeholder
        else "ORDER BY e.invocation_id, e.seq"
    )
    return (
        "SELECT e.event_id, e.invocation_id, e.seq, e.at, e.kind, e.from_state, e.to_state, e.trace_id, "
        "e.span_id, e.data, i.created_at, i.digest, i.policy_revision, i.decision "
        f"FROM {prefix}events e LEFT JOIN {prefix}invocations i ON i.invocation_id = e.invocation_id {where}"
    )


def read_rows(rows: Sequence[Sequence[Any]], table: str) -> list[EventRecord]:
    """The events of rows selected with :func:`select_events` (a packed row reads as the events
    it holds); ``table`` names a row in errors."""
    events: list[EventRecord] = []
    for r in rows:
        inv_id, seq = r[1], int(r[2])
        event_id = r[0] or f"{inv_id}.{seq}"
        at = r[3] if r[3] is not None else r[10]
        if at is None:
            raise ValueError(f"{table} row {event_id}: no time, and no invocation to take it from")
        if r[4] == PACKED_KIND:
            owner = Owner(r[10], r[11], r[12], r[13])
            events += unpack(inv_id, seq, at, r[7], r[9], f"{table} row {event_id}", owner)
            continue
        events.append(
            EventRecord(
                event_id=event_id,
                invocation_id=inv_id,
                seq=seq,
                at=at,
                kind=r[4],
                from_state=State(r[5]) if r[5] else None,
                to_state=State(r[6]),
                trace_id=r[7],
                span_id=r[8],
                data=json.loads(r[9]),
            )  # fmt: skip
        )
    return events


__all__ = [
    "EVENTS_MIGRATION",
    "EVENT_COLUMNS",
    "PACKED_KIND",
    "PACKED_MIGRATION",
    "Owner",
    "PackedRow",
    "event_row",
    "new_event_rows",
    "pack",
    "packable",
    "packed_row",
    "read_rows",
    "select_events",
    "unpack",
]
