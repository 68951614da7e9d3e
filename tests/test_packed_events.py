"""Issue 34 item 2: a new invocation's stage events are stored as one row (callgate/store/packed.py)
and every read answers what the old one-row-per-event trail answered.

Every case of tests/data/gate_cases.json (allowed, parked, denied, refused at parse, schema and
normalization) goes through a real sidecar; the events the gate handed to ``create_invocation``
(the multi-row trail) are kept. Each trail is then written into a fresh store of each backend
twice, packed (as the sidecar does) and one row per event (the layout before), and ``list_events``
of both must be identical, and equal to what the sidecar itself answers over gRPC.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from callgate.cli.evalcases import case_arguments
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.store import packed
from callgate.store.base import EventRecord, InvocationRecord, Store, with_arguments
from tests.conftest import DATA, start_sidecar, stop_sidecar
from tests.test_gate_cases import propose_recorded
from tests.test_store_contract import Backend

_DOC = json.loads((DATA / "gate_cases.json").read_text(encoding="utf-8"))
CASES = [{**_DOC["defaults"], **c} for c in _DOC["cases"]]

Trail = tuple[InvocationRecord, list[EventRecord], list[Any]]
"""The invocation as created, the events handed to the store, and the gRPC answer's events."""


@pytest.fixture(scope="module")
def trails() -> Iterator[list[Trail]]:
    """Every gate case through a real sidecar, with the trail each Propose handed to its store."""
    running, tmp = start_sidecar()
    store = running.sidecar.components.store
    inner = getattr(store, "inner", store)
    handed: dict[str, tuple[InvocationRecord, list[EventRecord]]] = {}
    write = inner.create_invocation

    async def spy(record: InvocationRecord, events: Sequence[EventRecord], *a: Any, **kw: Any) -> Any:
        handed[record.invocation_id] = (record, list(events))
        return await write(record, events, *a, **kw)

    inner.create_invocation = spy
    out: list[Trail] = []
    try:
        for case in CASES:
            sid = running.open_session(
                tenant=case["subject"]["tenant"], subject=case["subject"]["id"], tz=case["timezone"]
            )
            running.list_tools(sid)
            key = case.get("idempotency_key", "")
            resp, _ = propose_recorded(
                running,
                sid,
                case["tool"],
                case_arguments(case),
                idempotency_key=f"{sid}:{key}" if key else "",
            )
            got = running.gate.GetInvocation(
                pb.GetInvocationRequest(invocation_id=resp.invocation_id, session_id=sid)
            )
            record, events = handed[resp.invocation_id]
            out.append((record, events, [json_format.MessageToDict(e) for e in got.events]))
        yield out
    finally:
        inner.create_invocation = write
        stop_sidecar(running, tmp)


def _write_and_read(backend: Backend, trails: list[Trail], *, pack: bool) -> list[list[EventRecord]]:
    async def body(store: Store) -> list[list[EventRecord]]:
        for record, events, _ in trails:
            await store.create_invocation(record, events)
        return [await store.list_events(record.invocation_id) for record, _, _ in trails]

    if pack:
        return backend.run(body)
    real = packed.packable
    try:  # the layout before: one row per event
        for module in _packing_modules():
            module.packable = lambda events: False  # type: ignore[attr-defined]
        return backend.run(body)
    finally:
        for module in _packing_modules():
            module.packable = real  # type: ignore[attr-defined]


def _packing_modules() -> list[Any]:
    return [packed]  # both backends build their rows there


def test_every_gate_case_is_packed_and_answers_the_same_events(trails: list[Trail], tmp_path: Path) -> None:
    """SQLite: the packed and the one-row-per-event layouts read back the same events, which are
    the events the gate handed over (with the arguments put back in ``normalized``)."""
    packed_db, rows_db = Backend("sqlite", str(tmp_path / "p.db")), Backend("sqlite", str(tmp_path / "r.db"))
    got = _write_and_read(packed_db, trails, pack=True)
    old = _write_and_read(rows_db, trails, pack=False)
    assert got == old
    for (record, events, _), read in zip(trails, got, strict=True):
        assert read == with_arguments(events, record.normalized_arguments)
    kinds = {(record.state.value, len(events)) for record, events, _ in trails}
    assert ("PREPARED", 6) in kinds and any(s.endswith("_REJECTED") for s, _ in kinds)  # both shapes ran
    # Stored: one packed row per trail of two or more events, one row per event in the other.
    for target, rows_per_trail in ((packed_db.target, None), (rows_db.target, 0)):
        with sqlite3.connect(target) as c:
            for record, events, _ in trails:
                stored = c.execute(
                    "SELECT kind, seq FROM events WHERE invocation_id=?", (record.invocation_id,)
                ).fetchall()
                if rows_per_trail is None and len(events) > 1:
                    assert stored == [(packed.PACKED_KIND, len(events))]
                else:
                    assert len(stored) == len(events)


def test_the_sidecar_answers_the_events_it_was_handed(trails: list[Trail]) -> None:
    """Through gRPC (``GetInvocation``), each case's events are the handed trail, field by field."""
    for record, events, answered in trails:
        expected = with_arguments(events, record.normalized_arguments)
        assert [(int(a["seq"]), a["kind"], a.get("spanId", "")) for a in answered] == [
            (e.seq, e.kind, e.span_id) for e in expected
        ]
        assert [a["kind"] for a in answered] != [packed.PACKED_KIND]


@pytest.mark.postgres
def test_every_gate_case_is_packed_and_answers_the_same_events_on_postgres(
    trails: list[Trail], postgres_dsn: str
) -> None:
    from tests.test_store_contract import fresh_pg_database

    got = _write_and_read(Backend("postgres", fresh_pg_database(postgres_dsn)), trails, pack=True)
    old = _write_and_read(Backend("postgres", fresh_pg_database(postgres_dsn)), trails, pack=False)
    assert got == old
    for (record, events, _), read in zip(trails, got, strict=True):
        assert read == with_arguments(events, record.normalized_arguments)


def test_events_appended_after_a_packed_row_are_numbered_after_it(tmp_path: Path) -> None:
    """The packed row's ``seq`` is its last stage's, so a later event (a Confirm, a sweep) gets
    the next number and the trail reads in order."""
    from callgate.base.states import State
    from tests.test_store_contract import ev, inv

    backend = Backend("sqlite", str(tmp_path / "a.db"))
    first = [
        ev("inv-1", 1, None, State.PROPOSED, "proposed"),
        ev("inv-1", 2, State.PROPOSED, State.PARSED, "parsed"),
        ev("inv-1", 3, State.PARSED, State.VALIDATED, "validated"),
    ]
    later = ev("inv-1", 0, State.VALIDATED, State.AUTHORIZED, "authorized")

    async def body(store: Store) -> list[EventRecord]:
        await store.create_invocation(inv("inv-1", state=State.VALIDATED), first)
        await store.append_events([later])
        return await store.list_events("inv-1")

    read = backend.run(body)
    assert [(e.seq, e.kind) for e in read] == [
        (1, "proposed"),
        (2, "parsed"),
        (3, "validated"),
        (4, "authorized"),
    ]
    assert read[:3] == first and read[3] == replace(later, seq=4)


def test_a_packed_row_of_an_unknown_format_is_refused_naming_the_row() -> None:
    with pytest.raises(ValueError, match="row inv-9.2: packed stage events of unknown format"):
        packed.unpack("inv-9", 2, "t", "tr", b"\x07junk", "row inv-9.2")


def test_events_that_do_not_fit_one_row_are_stored_one_row_each() -> None:
    from callgate.base.states import State
    from tests.test_store_contract import ev

    chain = [ev("i", 1, None, State.PROPOSED), ev("i", 2, State.PROPOSED, State.PARSED)]
    assert packed.packable(chain)
    assert not packed.packable(chain[:1])  # one event: nothing to share
    assert not packed.packable([chain[0], replace(chain[1], at="other")])  # two times
    assert not packed.packable([chain[0], replace(chain[1], from_state=None)])  # not a chain
    assert not packed.packable([chain[0], replace(chain[1], event_id="x")])  # an id of its own
    assert not packed.packable([replace(e, seq=0) for e in chain])  # appended, not new


def test_a_packed_allowed_propose_is_less_than_half_its_rows_data(trails: list[Trail]) -> None:
    """The six stages of an allowed Propose, as the gate hands them over: the packed row's data
    is under half of the six rows' JSON data alone (docs/BENCHMARKS.md has the bytes on disk)."""
    from callgate.base.jsontext import compact_sorted

    record, events, _ = next(t for t in trails if t[0].state.value == "PREPARED" and len(t[1]) == 6)
    assert packed.packable(events)
    one = packed.pack(events)
    assert len(one.data) * 2 < sum(len(compact_sorted(dict(e.data)).encode()) for e in events)


def _doc(data: bytes) -> Any:
    import zlib

    z = zlib.decompressobj(-12, zdict=packed.DICTIONARY_V1)
    return json.loads(z.decompress(data[1:]) + z.flush())


def test_a_packed_row_stores_once_what_its_invocation_holds(trails: list[Trail], tmp_path: Path) -> None:
    """Schema SQLite 7: an allowed Propose's packed row has no ``event_id`` or ``at`` of its own
    (NULL: ``<invocation>.<seq>`` and the invocation's ``created_at``) and leaves out the
    digest, policy revision and decision the invocation row holds; reading puts them back."""
    backend = Backend("sqlite", str(tmp_path / "p.db"))
    got = _write_and_read(backend, trails, pack=True)
    allowed = [(t, read) for t, read in zip(trails, got, strict=True) if t[0].state.value == "PREPARED"]
    assert allowed
    with sqlite3.connect(backend.target) as c:
        for (record, events, _), read in allowed:
            event_id, at, data = c.execute(
                "SELECT event_id, at, data FROM events WHERE invocation_id=?", (record.invocation_id,)
            ).fetchone()
            assert (event_id, at, data[:1]) == (None, None, packed.FORMAT_V2)
            stages, refs = _doc(data)
            assert {key for _, key in refs} == set(packed.REFERENCED)
            assert all(stages[n][3][key] is None for n, key in refs)
            assert read == with_arguments(events, record.normalized_arguments)


def test_a_packed_row_that_refers_to_a_missing_invocation_is_refused_naming_the_row() -> None:
    from callgate.base.states import State
    from tests.test_store_contract import ev, inv

    record = inv("inv-7")
    events = [
        replace(ev("inv-7", 1, None, State.PROPOSED, "proposed"), data={"digest": record.digest}),
        ev("inv-7", 2, State.PROPOSED, State.PARSED, "parsed"),
    ]
    row = packed.pack(events, record)
    assert _doc(row.data)[1] == [[0, "digest"]]
    with pytest.raises(ValueError, match="row inv-7.2: packed stage data refers to"):
        packed.unpack("inv-7", 2, "t", "tr", row.data, "row inv-7.2")
    owner = packed.Owner(None, None, None, None)
    with pytest.raises(ValueError, match="row inv-7.2: .* invocation's 'digest', which it lacks"):
        packed.unpack("inv-7", 2, "t", "tr", row.data, "row inv-7.2", owner)
    owner = packed.Owner("t", record.digest, "", None)
    assert packed.unpack("inv-7", 2, events[0].at, events[0].trace_id, row.data, "", owner)[0] == events[0]


def _v1(events: Sequence[EventRecord]) -> bytes:
    """A packed row's data as schema SQLite 5-6 / PostgreSQL 4-5 wrote it (format 1)."""
    import zlib

    from callgate.base.jsontext import compact_sorted

    stages = [[e.kind, e.to_state.value, e.span_id, dict(e.data)] for e in events]
    z = zlib.compressobj(1, zlib.DEFLATED, -12, 4, zlib.Z_DEFAULT_STRATEGY, packed.DICTIONARY_V1)
    return packed.FORMAT_V1 + z.compress(compact_sorted(stages).encode()) + z.flush()


def test_rows_of_format_1_still_read(trails: list[Trail]) -> None:
    for _record, events, _ in trails:
        if packed.packable(events):
            last = events[-1]
            data = _v1(events)
            assert packed.unpack(last.invocation_id, last.seq, last.at, last.trace_id, data, "") == events


@pytest.mark.postgres
def test_postgres_rows_of_schema_5_read_the_same_after_the_migration(
    trails: list[Trail], postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL migration 6 turns ``data`` into bytes (a packed row's base64 text decoded) and
    drops the ``event_id`` index: trails written by schema 5 (packed, base64) read the same."""
    import asyncio
    import base64

    from callgate.store import postgres
    from callgate.store.postgres import PostgresStore
    from tests.test_store_contract import fresh_pg_database

    dsn = fresh_pg_database(postgres_dsn)
    latest = postgres.MIGRATIONS
    assert latest[5].version == 6

    async def at_five() -> None:
        monkeypatch.setattr(postgres, "MIGRATIONS", latest[:5])
        store = PostgresStore(dsn)
        await store.start()
        try:
            async with store._tx() as conn:
                for record, events, _ in trails:
                    await conn.execute(postgres._INSERT_INVOCATION, postgres._INVOCATIONS.row(record))
                    if packed.packable(events):
                        last = events[-1]
                        rows: list[tuple[Any, ...]] = [
                            (last.invocation_id, last.seq, last.event_id, last.at, packed.PACKED_KIND, None,
                             last.to_state.value, last.trace_id, "", base64.b64encode(_v1(events)).decode())
                        ]  # fmt: skip
                    else:
                        rows = [
                            (e.invocation_id, e.seq, e.event_id, e.at, e.kind,
                             e.from_state.value if e.from_state else None, e.to_state.value, e.trace_id,
                             e.span_id, json.dumps(dict(e.data)))
                            for e in events
                        ]  # fmt: skip
                    for r in rows:
                        await conn.execute(
                            f"INSERT INTO callgate_events ({packed.EVENT_COLUMNS}) VALUES "
                            "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                            r,
                        )
        finally:
            await store.close()
        monkeypatch.setattr(postgres, "MIGRATIONS", latest)

    async def read() -> list[list[EventRecord]]:
        store = PostgresStore(dsn)
        await store.start()  # migrates 5 -> 6
        try:
            return [await store.list_events(record.invocation_id) for record, _, _ in trails]
        finally:
            await store.close()

    asyncio.run(at_five())
    got = asyncio.run(read())
    for (record, events, _), read_back in zip(trails, got, strict=True):
        assert read_back == with_arguments(events, record.normalized_arguments)
