"""SQLite store rows: the invocation and attempt records are mapped to their tables from the
dataclass fields (one list, so a new field cannot be forgotten in one direction), every field
round-trips through the store and through the read-only :class:`SQLiteReader`."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pytest

from callgate.base.states import State
from callgate.store.base import AttemptRecord, EventRecord, InvocationRecord, ResultRecord, ToolViewRecord
from callgate.store.sqlite import SQLiteReader, SQLiteStore, _RowMapping

# Every field differs from its default (so a field the mapping dropped would read back wrong).
INVOCATION = InvocationRecord(
    invocation_id="inv-1",
    session_id="ses-1",
    model_call_id="mc-1",
    proposal_id="prop-1",
    tool_name="calendar.create_event",
    tool_version="v1",
    tenant="acme",
    subject="alice",
    state=State.AUTHORIZED,
    raw_arguments=b'{"title": "x\\u0000"}',
    digest="sha256:" + "ab" * 32,
    normalized_arguments=b'{"title":"x"}',
    decision={"effect": "allow", "reasons": [{"code": "ok", "policy_id": "p1"}]},
    rejection={"code": "schema_invalid", "violations": []},
    idempotency_key="idem-1",
    deadline="2026-07-19T06:10:00Z",
    confirmation_expires_at="2026-07-19T06:05:00Z",
    policy_revision="sha256:rev",
    created_at="2026-07-19T06:00:00Z",
    updated_at="2026-07-19T06:00:01Z",
    attempts=1,
    external_resource_id="evt-9",
    commit_time="2026-07-19T06:00:02Z",
    cancel_requested_at="2026-07-19T06:00:03Z",
)
ATTEMPT = AttemptRecord(
    attempt_id="att-1",
    invocation_id="inv-1",
    number=1,
    executor_id="spiffe://acme/executor",
    jti="jti-1",
    started_at="2026-07-19T06:00:01Z",
    credential_expires_at="2026-07-19T06:01:01Z",
    outcome="succeeded",
    failure_class="none",
    finished_at="2026-07-19T06:00:02Z",
    external_resource_id="evt-9",
    http_status=201,
    cost_micros=1500,
    retry_reason="rate_limited",
    retry_after="2026-07-19T06:00:30Z",
)
EVENT = EventRecord(
    event_id="ev-1",
    invocation_id="inv-1",
    seq=1,
    at="2026-07-19T06:00:00Z",
    kind="authorized",
    from_state=None,
    to_state=State.AUTHORIZED,
    trace_id="t" * 32,
    span_id="s" * 16,
    data={"k": "v"},
)


def _defaults_differ(record: object) -> None:
    for f in fields(record):  # type: ignore[arg-type]
        assert getattr(record, f.name) != f.default, f"set {f.name} in the test record"


def test_test_records_set_every_field() -> None:
    _defaults_differ(INVOCATION)
    _defaults_differ(ATTEMPT)


def test_columns_are_the_fields_in_schema_order(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        await store.close()

    asyncio.run(main())
    with sqlite3.connect(tmp_path / "s.db") as c:
        for table, record in (("invocations", InvocationRecord), ("attempts", AttemptRecord)):
            schema = tuple(r[1] for r in c.execute(f"PRAGMA table_info({table})"))
            assert schema == tuple(f.name for f in fields(record)) == _RowMapping.of(record).columns


def test_every_field_round_trips_through_store_and_reader(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    finished = ATTEMPT
    started = replace(ATTEMPT, outcome="", failure_class="", finished_at="", external_resource_id="",
                      http_status=0, cost_micros=0, retry_reason="", retry_after="")  # fmt: skip
    created = replace(INVOCATION, attempts=0)
    result = ResultRecord("inv-1", "ok", b"msg", True, b"rest", "page-1", 2, "2026-07-19T06:00:04Z", "n1")
    view = ToolViewRecord(
        "ses-1", "mc-1", ("calendar.create_event@v1",), {"calendar.create_event@v1": "d"}, "ts", "c"
    )

    async def main() -> None:
        store = SQLiteStore(path)
        try:
            await store.create_invocation(created, [EVENT])
            assert await store.get_invocation("inv-1") == created
            assert await store.begin_attempt(INVOCATION, State.AUTHORIZED, started, [])
            assert await store.get_invocation("inv-1") == INVOCATION
            assert await store.get_attempt("att-1") == started
            assert await store.finish_attempt(INVOCATION, State.AUTHORIZED, finished, [])
            assert await store.get_attempt("att-1") == finished
            assert await store.list_attempts("inv-1") == [finished]
            assert await store.put_result(INVOCATION, State.AUTHORIZED, result, [])
            await store.put_tool_view(view)
            assert await store.get_result("inv-1") == result
            assert await store.get_tool_view("ses-1", "mc-1") == view
        finally:
            await store.close()

        reader = SQLiteReader(path)
        try:
            assert await reader.get_invocation("inv-1") == INVOCATION
            assert await reader.get_invocation("nope") is None
            assert await reader.list_attempts("inv-1") == [finished]
            assert await reader.list_events("inv-1") == [EVENT]
            assert await reader.get_result("inv-1") == result
            assert await reader.get_tool_view("ses-1", "mc-1") == view
            assert await reader.list_tool_views("ses-1") == [view]
            assert await reader.get_snapshot("sha256:rev") is None
        finally:
            reader.close()

    asyncio.run(main())


def test_reader_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def main() -> None:
        await SQLiteStore(path).close()

    asyncio.run(main())
    reader = SQLiteReader(path)
    try:
        with pytest.raises(sqlite3.DatabaseError):
            reader._conn.execute("DELETE FROM invocations")
    finally:
        reader.close()
    with pytest.raises(FileNotFoundError):
        SQLiteReader(tmp_path / "missing.db")


def test_a_field_type_without_a_conversion_is_refused() -> None:
    @dataclass(frozen=True, slots=True)
    class Odd:
        when: float

    with pytest.raises(TypeError, match="Odd.when: no SQLite conversion"):
        _RowMapping.of(Odd)  # type: ignore[type-var]


def test_keyless_invocations_of_one_batch_are_one_statement_per_table(tmp_path: Path) -> None:
    """Issue 15 item 10: the writer runs the keyless ``create_invocation`` of one batch as one
    INSERT per table (and one usage upsert per session); when that merged run fails (here a
    duplicate invocation id), it is rolled back and each runs alone: only the bad one fails."""
    import threading

    from callgate.base.errors import CallgateError
    from callgate.store.base import Usage

    def record(n: int) -> tuple[InvocationRecord, list[EventRecord]]:
        inv = replace(INVOCATION, invocation_id=f"inv-{n}", idempotency_key="", attempts=0)
        evs = [replace(EVENT, event_id=f"ev-{n}-{k}", invocation_id=f"inv-{n}", seq=k) for k in (1, 2)]
        return inv, evs

    async def batch(store: SQLiteStore, ns: list[int], usage: dict[str, Usage]) -> list[object]:
        hold = threading.Event()
        blocked = asyncio.ensure_future(store.worker.run(lambda c: hold.wait(10)))
        await asyncio.sleep(0.05)  # the worker holds the blocker: what follows queues as one batch
        calls = [store.create_invocation(*record(n), usage) for n in ns]
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0.05)
        hold.set()
        await blocked
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        statements: list[str] = []
        try:
            await store.worker.run(lambda c: c.set_trace_callback(statements.append))
            one = {"ses-1": Usage(tool_calls=1)}
            assert await batch(store, [1, 2, 3, 4], one) == [None] * 4
            assert sum(s.startswith("INSERT INTO invocations") for s in statements) == 1
            assert sum(s.startswith("INSERT INTO events") for s in statements) == 1
            assert sum(s.startswith("INSERT INTO usage") for s in statements) == 1
            assert not any(s.startswith("SAVEPOINT op") for s in statements)
            got = await batch(store, [5, 2, 6], one)  # inv-2 exists: the merged run fails
            assert got[0] is None and got[2] is None
            assert isinstance(got[1], CallgateError) and got[1].code.value == "store_unavailable"
            for n in (1, 2, 3, 4, 5, 6):
                inv = await store.get_invocation(f"inv-{n}")
                assert inv is not None and len(await store.list_events(f"inv-{n}")) == 2
            total = await store.worker.run(lambda c: c.execute("SELECT tool_calls FROM usage").fetchone()[0])
            assert total == 6  # 4 + the two of the second batch that were written
        finally:
            await store.close()

    asyncio.run(main())


def test_the_views_of_one_shown_set_reuse_its_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 A4, without an ``id()``-keyed cache (issue 29 item 4): the shown set of
    ``propose/sessions.py`` makes its JSON once and every tool view recorded from it carries
    that text, which the store writes as it is; a view without it gets its JSON made; every
    view reads back as written. Through a real sidecar: two ListTools of one session hand the
    store views sharing one text object."""
    import callgate.store.sqlite as sqlite_store
    from tests.conftest import start_sidecar, stop_sidecar

    made: list[object] = []
    dump = sqlite_store._dump

    def counting(v: object) -> str | None:
        made.append(v)
        return dump(v)

    monkeypatch.setattr(sqlite_store, "_dump", counting)
    keys = tuple(f"t{i}@v1" for i in range(3))
    digests = {k: f"sha256:{i}" for i, k in enumerate(keys)}
    keys_json, digests_json = dump(list(keys)), dump(digests)
    assert keys_json is not None and digests_json is not None
    other = ("t0@v1",)

    async def main() -> list[ToolViewRecord | None]:
        store = SQLiteStore(tmp_path / "s.db")
        try:
            for n in range(5):
                await store.put_tool_view(
                    ToolViewRecord(
                        "ses-1", f"mc-{n}", keys, digests, "sha256:set", "t", keys_json, digests_json
                    )
                )
            await store.put_tool_view(
                ToolViewRecord("ses-1", "mc-x", other, {"t0@v1": "sha256:0"}, "sha256:o", "t")
            )
            return [await store.get_tool_view("ses-1", m) for m in ("mc-0", "mc-4", "mc-x")]
        finally:
            await store.close()

    first, last, lone = asyncio.run(main())
    assert len(made) == 2  # only the view without its texts: its two
    assert first is not None and last is not None and lone is not None
    assert first.tools == last.tools == keys and dict(last.spec_digests) == digests
    assert lone.tools == other

    running, tmp = start_sidecar()
    store = running.sidecar.components.store
    inner = getattr(store, "inner", store)
    handed: list[ToolViewRecord] = []
    put = inner.put_tool_view

    async def spy(v: ToolViewRecord) -> None:
        handed.append(v)
        await put(v)

    inner.put_tool_view = spy
    try:
        sid = running.open_session()
        running.list_tools(sid, model_call_id="mc-1")
        running.list_tools(sid, model_call_id="mc-2")
    finally:
        inner.put_tool_view = put
        stop_sidecar(running, tmp)
    one, two = handed
    assert one.tools_json and one.tools_json is two.tools_json
    assert one.spec_digests_json and one.spec_digests_json is two.spec_digests_json
    assert one.tools_json == dump(list(one.tools)) and one.spec_digests_json == dump(dict(one.spec_digests))
