"""The stage events of a new invocation stored as one row (issue 34 item 2).

A ``Propose`` that runs straight through writes its stage events (``proposed`` → ``parsed`` →
``validated`` → ``normalized`` → ``authorized`` → ``prepared``, or to a refusal) in the same
transaction that creates the invocation. They share the invocation, the time (``at``) and the
trace, are numbered 1..N with ids ``<invocation>.<seq>``, and each one's ``from_state`` is the
``to_state`` before it. Stored as N rows they cost N rows in three B-trees (the table, its
``(invocation_id, seq)`` key, the unique ``event_id``) and repeat every shared column; stored as
one they cost one. The one row is an ordinary ``events`` row:

* ``kind`` = :data:`PACKED_KIND`, ``seq`` = N (the last stage's number, so the next event
  appended is N + 1 as before), ``event_id`` = the last stage's id, ``at`` and ``trace_id``
  shared, ``from_state`` NULL, ``to_state`` the last stage's;
* ``data``: :data:`FORMAT_V1` then the raw-deflate (:data:`DICTIONARY_V1` preset) of the JSON
  list ``[[kind, to_state, span_id, data], ...]`` (bytes in SQLite; standard base64 text in
  PostgreSQL, whose column is text).

Every read of the events expands it (:func:`unpack`), so the event API (``events``,
``WatchInvocation``, ``explain``, retention's export, the 6.13 questions) answers what the N rows
answered: the same ids, numbers, states, spans and data. Events that do not fit the shape above
are stored one row each, as before. The dictionary and the format byte are part of the stored
record: never change them; a new layout takes a new format byte (and keeps reading the old).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from callgate.core.jsontext import compact_sorted
from callgate.core.states import State
from callgate.store.base import EventRecord

PACKED_KIND: Final = "stages"
"""The ``kind`` of a row that holds a new invocation's stage events (never an event's kind)."""

PACKED_MIGRATION: Final = (
    "events: a new invocation's stage events as one packed row (no DDL: marks the format)"
)
"""The migration that starts writing packed rows (SQLite 5, PostgreSQL 4). It changes no table:
it is a version step so that an older callgate, which would read a packed row as one event of
an unknown kind, refuses the database instead (``too_new``)."""

FORMAT_V1: Final = b"\x01"
"""First byte of a packed row's data: raw deflate with :data:`DICTIONARY_V1`, of UTF-8 JSON."""

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
    """:data:`FORMAT_V1` and the compressed stages."""

    def text(self) -> str:
        """``data`` as stored in a text column (PostgreSQL): base64."""
        return base64.b64encode(self.data).decode("ascii")


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


def pack(events: Sequence[EventRecord]) -> PackedRow:
    """The one row of ``events`` (:func:`packable` must hold)."""
    last = events[-1]
    stages = [[e.kind, e.to_state.value, e.span_id, dict(e.data)] for e in events]
    z = zlib.compressobj(1, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1)
    body = z.compress(compact_sorted(stages).encode("utf-8")) + z.flush()
    return PackedRow(
        last.invocation_id, last.seq, last.event_id, last.at, last.to_state, last.trace_id, FORMAT_V1 + body
    )


def unpack(
    invocation_id: str, seq: int, at: str, trace_id: str, data: bytes | str, where: str
) -> list[EventRecord]:
    """The events of a packed row (``data`` as stored: bytes, or base64 text). ``where`` names
    the row in the error raised for data that is not a packed row of a known format."""
    raw = base64.b64decode(data) if isinstance(data, str) else bytes(data)
    if raw[:1] != FORMAT_V1:
        raise ValueError(f"{where}: packed stage events of unknown format {raw[:1]!r}")
    z = zlib.decompressobj(_WBITS, zdict=DICTIONARY_V1)
    stages: list[list[Any]] = json.loads(z.decompress(raw[1:]) + z.flush())
    if len(stages) != seq:
        raise ValueError(f"{where}: {len(stages)} packed stage events for seq {seq}")
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


__all__ = ["PACKED_KIND", "PACKED_MIGRATION", "PackedRow", "pack", "packable", "unpack"]
