"""Retention (issue 34 item 1), on SQLite and a real PostgreSQL (a fresh database per test), with
the time given to each pass (a fake clock): terminal invocations past ``[store.retention]`` are
deleted with their whole trail and a tombstone, exported first when asked; open invocations
(OUTCOME_UNKNOWN, EXECUTING, COMMITTED) and those whose key is still inside its retention stay;
decisions expire by their ``at``; idempotency keys keep their 6.8 contract after a purge; the
append-only triggers still refuse any other delete; ``callgate explain`` of a deleted id says it
expired, when, and where it went; a new SQLite file hands freed pages back to the file system."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from callgate.base.clock import FixedClock, rfc3339
from callgate.base.states import State
from callgate.store.base import AttemptRecord, DecisionRecord, InvocationRecord, KeyClaim, ResultRecord, Store
from callgate.store.idempotency.base import ClaimKind, ExpiredPolicy, IdempotencyKey, check_claim
from callgate.store.retention import Purger, RecordKind, RetentionPolicy, cutoff
from tests import test_store_contract as contract
from tests.conftest import POLICIES, ROOT
from tests.test_store_contract import Backend, ev

backend = contract.backend
"""The store contract's fixture: SQLite, and a fresh database of a real PostgreSQL."""

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
OLD = rfc3339(NOW - timedelta(days=3))
"""Three days before NOW: past a one-day retention."""
RECENT = rfc3339(NOW - timedelta(hours=1))
DAY = timedelta(days=1)


def at(t: str) -> datetime:
    return datetime.fromisoformat(t)


def inv(inv_id: str, key: str = "", state: State = State.AUTHORIZED, **kw: Any) -> InvocationRecord:
    return replace(contract.inv(inv_id, key, state), **kw)


def key(name: str) -> IdempotencyKey:
    return IdempotencyKey("acme", "alice", "t", "v1", name)


def decision(did: str, when: str) -> DecisionRecord:
    return DecisionRecord(did, when, "acme", "alice", "files.read", "file:/a", "", (), {"effect": "allow"},
                          "rev", "t" * 32, "s" * 16)  # fmt: skip


def purge(store: Store, now: datetime = NOW, **policy: Any) -> Any:
    return Purger(store, RetentionPolicy(**policy), FixedClock(now)).run_once(now)  # type: ignore[arg-type]


async def put(store: Store, inv_id: str, state: State, updated_at: str, **kw: Any) -> None:
    record = inv(inv_id, state=state, updated_at=updated_at, created_at=updated_at, **kw)
    assert await store.create_invocation(record, [ev(inv_id, 1, None, state, "proposed")]) is None


def test_terminal_invocations_past_retention_go_with_their_trail_exported_first(
    backend: Backend, tmp_path: Path
) -> None:
    export = tmp_path / "audit" / "expired.jsonl"

    async def body(store: Store) -> None:
        await put(store, "old-denied", State.AUTHORIZATION_REJECTED, OLD)
        await put(store, "old-observed", State.OBSERVED, OLD)
        att = AttemptRecord("att-1", "old-observed", 1, "ex", "jti", OLD, OLD, "succeeded", "", OLD, "r-1",
                            200, 0, "", "")  # fmt: skip
        assert await store.begin_attempt(
            inv("old-observed", state=State.OBSERVED, updated_at=OLD, attempts=1), State.OBSERVED, att, []
        )
        assert await store.put_result(
            inv("old-observed", state=State.OBSERVED, updated_at=OLD, attempts=1), State.OBSERVED,
            ResultRecord("old-observed", "ok", b"the tool message", False, b"", "", 0, OLD), [],
        )  # fmt: skip
        await store.redeem_once("att-1", "api-token", OLD)
        await put(store, "old-unknown", State.OUTCOME_UNKNOWN, OLD)  # open: a status answer may come
        await put(store, "old-executing", State.EXECUTING, OLD)
        await put(store, "old-committed", State.COMMITTED, OLD)  # waits for its result
        await put(store, "recent-denied", State.AUTHORIZATION_REJECTED, RECENT)
        await store.record_decision(decision("dec-old", OLD))
        await store.record_decision(decision("dec-recent", RECENT))

        counts = await purge(store, invocations=DAY, decisions=DAY, export_path=str(export), batch=1)
        assert (counts.invocations, counts.decisions) == (2, 1)
        for gone in ("old-denied", "old-observed"):
            assert await store.get_invocation(gone) is None
            assert await store.list_events(gone) == []
            tomb = await store.get_tombstone(gone)  # type: ignore[attr-defined]
            assert tomb is not None and tomb.expired_at == rfc3339(NOW) and tomb.exported_to == str(export)
            assert tomb.updated_at == OLD
        assert (
            await store.list_attempts("old-observed") == [] and await store.get_result("old-observed") is None
        )
        assert await store.get_attempt("att-1") is None
        assert await store.redeem_once("att-1", "api-token", OLD)  # its redemption went with it
        for kept in ("old-unknown", "old-executing", "old-committed", "recent-denied"):
            assert await store.get_invocation(kept) is not None and len(await store.list_events(kept)) == 1
            assert await store.get_tombstone(kept) is None  # type: ignore[attr-defined]
        assert await store.get_decision("dec-old") is None
        assert await store.get_decision("dec-recent") is not None

        lines = [json.loads(x) for x in export.read_text().splitlines()]
        by_id = {
            (x["record"].get("invocation") or x["record"])["invocation_id" if x["kind"] == "invocation"
                                                          else "decision_id"]: x
            for x in lines
        }  # fmt: skip
        assert set(by_id) == {"old-denied", "old-observed", "dec-old"}
        observed = by_id["old-observed"]
        assert observed["kind"] == RecordKind.INVOCATION.value and observed["expired_at"] == rfc3339(NOW)
        rec = observed["record"]
        assert rec["invocation"]["state"] == "OBSERVED" and rec["invocation"]["raw_arguments"]["utf8"] == "{}"
        assert [e["kind"] for e in rec["events"]] == ["proposed"]
        assert rec["attempts"][0]["external_resource_id"] == "r-1"
        assert rec["result"]["message"]["utf8"] == "the tool message"
        assert by_id["dec-old"]["record"]["decision"] == {"effect": "allow"}

        # a second pass finds nothing more; the tombstones go after their own retention
        assert (await purge(store, invocations=DAY, decisions=DAY)).deleted == 0
        later = NOW + timedelta(days=2)
        assert (await purge(store, later, invocations=DAY)).tombstones == 2
        assert await store.get_tombstone("old-denied") is None  # type: ignore[attr-defined]

    backend.run(body)
    # Outside a purge, events and decisions stay append-only.
    for stmt in ("DELETE FROM events", "DELETE FROM decisions"):
        with pytest.raises(Exception, match="append-only"):
            backend.sql(stmt if backend.kind == "sqlite" else stmt.replace("FROM ", "FROM callgate_"))


def test_an_invocation_whose_key_is_still_kept_is_not_deleted(backend: Backend) -> None:
    async def body(store: Store) -> None:
        claimed_at = NOW - timedelta(days=3)
        record = inv("keyed", "k-keyed", state=State.AUTHORIZED, updated_at=rfc3339(claimed_at))
        kc = KeyClaim(key("k-keyed"), "sha256:d", timedelta(days=5), ExpiredPolicy.REJECT, claimed_at)
        assert (
            await store.create_invocation(record, [ev("keyed", 1, None, State.AUTHORIZED)], None, kc) is None
        )
        ended = replace(record, state=State.OBSERVED, updated_at=rfc3339(claimed_at))
        assert await store.transition(
            ended, State.AUTHORIZED, [ev("keyed", 0, State.AUTHORIZED, State.OBSERVED)]
        )
        # the key completed at claimed_at and replays for 5 days: the invocation stays that long
        assert (await purge(store, invocations=DAY)).invocations == 0
        assert await store.get_invocation("keyed") is not None
        assert (await purge(store, NOW + timedelta(days=3), invocations=DAY)).invocations == 1

    backend.run(body)


def test_keys_keep_their_contract_after_a_purge(backend: Backend) -> None:
    """6.8 item 4: a key past its retention answers ``expired_policy``, never a guess. Under
    ``reject`` it is kept (refusing) until ``expired_keys`` past its expiry; under ``new`` it is
    deleted at expiry, which answers the same; a key of an open invocation is never deleted."""

    async def body(store: Store) -> None:
        keys = store.keys()
        claimed_at = NOW - timedelta(days=3)
        for name, end in (("done", State.OBSERVED), ("open", State.COMMITTED), ("running", None)):
            record = inv(name, f"k-{name}", state=State.AUTHORIZED, updated_at=rfc3339(claimed_at))
            kc = KeyClaim(key(f"k-{name}"), "sha256:d", timedelta(hours=1), ExpiredPolicy.REJECT, claimed_at)
            assert (
                await store.create_invocation(record, [ev(name, 1, None, State.AUTHORIZED)], None, kc) is None
            )
            if end is not None:
                moved = replace(record, state=end)
                assert await store.transition(moved, State.AUTHORIZED, [ev(name, 0, State.AUTHORIZED, end)])

        async def claim(name: str, policy: ExpiredPolicy) -> ClaimKind:
            got = await keys.claim(key(f"k-{name}"), "sha256:d", "someone-else", now=NOW,
                                   retention=timedelta(hours=1), expired_policy=policy)  # fmt: skip
            return got.kind

        # reject, kept for ever (expired_keys = 0): nothing is purged, the key still refuses
        assert (await purge(store, invocations=DAY)).keys == 0
        assert await keys.get(key("k-done")) is not None
        # reject, kept 3 days past expiry (it expired 71 h ago): not yet; a day later it goes
        assert (await purge(store, expired_keys=timedelta(days=3))).keys == 0
        assert await claim("done", ExpiredPolicy.REJECT) is ClaimKind.EXPIRED_REJECTED
        assert (await purge(store, NOW + timedelta(days=1), expired_keys=timedelta(days=3))).keys == 1
        assert await keys.get(key("k-done")) is None
        # the open invocations' keys (claimed; completed but COMMITTED) are never deleted
        assert (await purge(store, NOW + timedelta(days=400), keys_expire_new=True)).keys == 0
        assert await keys.get(key("k-open")) is not None and await keys.get(key("k-running")) is not None
        assert await claim("open", ExpiredPolicy.REJECT) is ClaimKind.EXPIRED_REJECTED

    backend.run(body)


def test_under_expired_policy_new_a_purged_key_answers_as_an_expired_one(backend: Backend) -> None:
    async def body(store: Store) -> None:
        keys = store.keys()
        then = NOW - timedelta(hours=3)
        record = inv("n", "k-n", state=State.AUTHORIZED, updated_at=rfc3339(then))
        kc = KeyClaim(key("k-n"), "sha256:d", timedelta(hours=1), ExpiredPolicy.NEW, then)
        assert await store.create_invocation(record, [ev("n", 1, None, State.AUTHORIZED)], None, kc) is None
        assert await store.transition(replace(record, state=State.OBSERVED), State.AUTHORIZED, [])

        async def would() -> ClaimKind:  # what a claim would answer, writing nothing
            found = await check_claim(keys, key("k-n"), "sha256:other", "probe", now=NOW,
                                      retention=timedelta(hours=1), expired_policy=ExpiredPolicy.NEW)  # fmt: skip
            return found.kind

        before = await would()
        assert (await purge(store, keys_expire_new=True)).keys == 1
        assert await keys.get(key("k-n")) is None
        assert before is ClaimKind.NEW and await would() is before

    backend.run(body)


def test_cutoff_is_never_early() -> None:
    now = datetime(2026, 9, 1, 12, 0, 0, 400_000, tzinfo=UTC)
    bound = cutoff(now, DAY)
    just_inside = rfc3339(now - DAY + timedelta(microseconds=1))
    on_the_second = rfc3339((now - DAY).replace(microsecond=0))
    assert not just_inside < bound and not on_the_second < bound
    assert rfc3339(now - DAY - timedelta(seconds=2)) < bound


def _cli_config(tmp: Path, store: str) -> Path:
    toml = tmp / "explain.toml"
    toml.write_text(f'[policy]\ndir = "{POLICIES}"\n[store]\n{store}\n')
    return toml


def test_explain_of_an_expired_invocation_says_when_and_where(backend: Backend, tmp_path: Path) -> None:
    export = tmp_path / "expired.jsonl"

    async def body(store: Store) -> None:
        await put(store, "gone", State.CANCELLED_BEFORE_COMMIT, OLD)
        assert (await purge(store, invocations=DAY, export_path=str(export))).invocations == 1

    backend.run(body)
    env = dict(os.environ)
    if backend.kind == "sqlite":
        cfg = _cli_config(tmp_path, f'path = "{backend.target}"')
    else:
        cfg = _cli_config(tmp_path, 'backend = "postgres"\ndsn_env = "CALLGATE_TEST_RETENTION_DSN"')
        env["CALLGATE_TEST_RETENTION_DSN"] = backend.target

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "callgate", "explain", *args, "--config", str(cfg)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip

    r = cli("gone")
    assert r.returncode == 0, r.stderr
    assert f"invocation gone expired: deleted by retention at {rfc3339(NOW)}" in r.stdout
    assert f"exported before deletion to {export}" in r.stdout and "CANCELLED_BEFORE_COMMIT" in r.stdout
    r = cli("gone", "--json")
    assert json.loads(r.stdout)["expired"]["exported_to"] == str(export)
    r = cli("never-was")
    assert r.returncode == 1 and "unknown invocation_id 'never-was'" in r.stderr


def test_a_new_sqlite_file_hands_freed_pages_back(tmp_path: Path) -> None:
    """``auto_vacuum = INCREMENTAL`` is set before the first table exists; after a purge the
    free pages past the reserve go back to the file system."""
    from callgate.store.sqlite import SQLiteStore

    db = tmp_path / "callgate.db"

    async def body(store: Store) -> tuple[int, int]:
        blob = b'{"x":"' + b"y" * 3000 + b'"}'
        for i in range(3000):
            await put(store, f"i{i}", State.AUTHORIZATION_REJECTED, OLD, raw_arguments=blob)
        await store.barrier()
        full = _pages(store)
        counts = await purge(store, invocations=DAY, batch=500, max_batches=10)
        assert counts.invocations == 3000 and counts.reclaimed_pages > 0
        return full, _pages(store)

    async def main() -> tuple[int, int]:
        store = SQLiteStore(db)
        try:
            return await body(store)
        finally:
            await store.close()

    full, after = asyncio.run(main())
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
    assert after < full / 2, (full, after)


def _pages(store: Store) -> int:
    worker = store.worker  # type: ignore[attr-defined]
    with worker._conn_lock:
        (pages,) = worker._conn.execute("PRAGMA page_count").fetchone()
    return int(pages)


def test_the_sidecar_runs_retention_off_the_request_path(tmp_path: Path) -> None:
    """Configured through ``[store.retention]``, the sidecar's sweep task deletes what is past it
    (the first pass at start, then every ``interval_seconds``), by the sidecar's clock."""
    from callgate.config import RetentionConfig, StoreConfig
    from tests.conftest import start_sidecar, stop_sidecar

    export = tmp_path / "expired.jsonl"
    # one pass at start (nothing is old yet), the next an hour later: this test runs the pass itself
    retention = RetentionConfig(invocations_seconds=86400, export_path=str(export), interval_seconds=3600)
    sc, tmp = start_sidecar(store=StoreConfig(path=str(tmp_path / "callgate.db"), retention=retention))
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        rejected = sc.propose(sid, "weather.get@v1", b"{not json", proposal_id="bad")
        assert rejected.rejection.code
        ok = sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "2026-07-20"}, proposal_id="ok")
        assert not ok.rejection.code
        sweeper = sc.sidecar.sweeper
        assert sweeper is not None
        sc.clock.advance(2 * 86400)
        purger = sweeper._retention
        assert isinstance(purger, Purger)
        assert purger.meter_keeps() == {"deletes": 3_600_000}  # the serving snapshot's (files.delete)
        sc.call(purger.run_once(sc.clock.now()))
        store = sc.sidecar.components.store
        assert purger.totals.invocations == 1  # by this pass (or by the start pass, had it come late)
        assert sc.call(store.get_invocation(rejected.invocation_id)) is None
        assert sc.call(store.get_invocation(ok.invocation_id)) is not None  # not terminal, or just ended
        line = json.loads(export.read_text().splitlines()[-1])
        assert line["record"]["invocation"]["invocation_id"] == rejected.invocation_id
    finally:
        stop_sidecar(sc, tmp)


def test_the_retention_table_is_read_from_toml_and_checked(tmp_path: Path) -> None:
    from callgate.base.errors import CallgateError
    from callgate.config import load_config

    toml = tmp_path / "c.toml"
    toml.write_text('[store.retention]\ninvocations_seconds = 86400\nexport_path = "audit/x.jsonl"\n')
    cfg = load_config(toml)
    assert cfg.store.retention.invocations_seconds == 86400 and cfg.store.path == "var/callgate.db"
    from callgate.store.retention import policy_of

    assert policy_of(cfg).export_path == str(tmp_path / "audit" / "x.jsonl")
    for bad, says in (("decisions_seconds = -1", "must be >= 0"), ("batch = 0", "must be positive"),
                      ("events_seconds = 9\ninvocations_seconds = 9", "shorter than invocations_seconds"),
                      ("keep = 3", "unknown key 'store.retention.keep'")):  # fmt: skip
        toml.write_text(f"[store.retention]\n{bad}\n")
        with pytest.raises(CallgateError, match=says):
            load_config(toml)


def test_events_can_expire_before_their_invocation(backend: Backend, tmp_path: Path) -> None:
    """``events_seconds``: the events of a terminal invocation go (exported first), the
    invocation stays; open invocations keep theirs; the next pass starts after the last one
    done (a mark), and the invocation goes later with its tombstone replaced."""
    export = tmp_path / "expired.jsonl"

    async def body(store: Store) -> None:
        for i in range(5):
            await put(store, f"ended-{i}", State.FAILED_BEFORE_COMMIT, OLD)
        await put(store, "open", State.OUTCOME_UNKNOWN, OLD)
        await put(store, "young", State.FAILED_BEFORE_COMMIT, RECENT)
        counts = await purge(
            store, events=DAY, invocations=timedelta(days=5), export_path=str(export), batch=2
        )
        assert (counts.events, counts.invocations) == (5, 0)
        for i in range(5):
            assert await store.get_invocation(f"ended-{i}") is not None
            assert await store.list_events(f"ended-{i}") == []
            tomb = await store.get_tombstone(f"ended-{i}")  # type: ignore[attr-defined]
            assert tomb is not None and tomb.exported_to == str(export)
        for kept in ("open", "young"):
            assert len(await store.list_events(kept)) == 1
        lines = [json.loads(x) for x in export.read_text().splitlines()]
        assert {x["kind"] for x in lines} == {RecordKind.EVENTS.value} and len(lines) == 5
        assert lines[0]["record"]["events"][0]["kind"] == "proposed"
        # the mark: a second pass exports nothing again
        assert (await purge(store, events=DAY, export_path=str(export))).events == 0
        assert len(export.read_text().splitlines()) == 5
        # the young one's events go a day later; the old invocations after their own retention
        later = NOW + timedelta(days=3)
        counts = await purge(store, later, events=DAY, invocations=timedelta(days=5))
        assert (counts.events, counts.invocations) == (1, 5)
        tomb = await store.get_tombstone("ended-0")  # type: ignore[attr-defined]
        assert tomb is not None and tomb.expired_at == rfc3339(later) and tomb.exported_to == ""
        # a tombstone of a kept invocation stays (explain notes it); of a deleted one, it expires
        assert (await purge(store, NOW + timedelta(days=30), events=DAY)).tombstones == 5
        assert await store.get_tombstone("young") is not None  # type: ignore[attr-defined]

    backend.run(body)


def test_explain_notes_events_deleted_by_retention(tmp_path: Path) -> None:
    from callgate.cli.explain import Explanation, explain_or_expired
    from callgate.store.sqlite import SQLiteStore

    async def main() -> Any:
        store = SQLiteStore(tmp_path / "callgate.db")
        try:
            await put(store, "kept", State.FAILED_BEFORE_COMMIT, OLD)
            await purge(store, events=DAY, export_path=str(tmp_path / "x.jsonl"))
            return await explain_or_expired(store, "kept")
        finally:
            await store.close()

    x = asyncio.run(main())
    assert isinstance(x, Explanation) and x.state == "FAILED_BEFORE_COMMIT"
    assert (
        f"its events were deleted by retention at {rfc3339(NOW)}, exported to {tmp_path / 'x.jsonl'}"
        in x.notes
    )


def test_an_export_that_cannot_be_written_deletes_nothing(tmp_path: Path) -> None:
    from callgate.store.sqlite import SQLiteStore

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the export's directory should be")

    async def main() -> None:
        store = SQLiteStore(tmp_path / "callgate.db")
        try:
            await put(store, "gone?", State.FAILED_BEFORE_COMMIT, OLD)
            await store.record_decision(decision("dec", OLD))
            with pytest.raises(OSError):
                await purge(store, invocations=DAY, export_path=str(blocked / "x.jsonl"))
            with pytest.raises(OSError):
                await purge(store, decisions=DAY, export_path=str(blocked / "x.jsonl"))
            assert await store.get_invocation("gone?") is not None and await store.list_events("gone?")
            assert await store.get_decision("dec") is not None
        finally:
            await store.close()

    asyncio.run(main())


def test_store_compact_converts_an_older_database_and_refuses_a_live_one(tmp_path: Path) -> None:
    """An older file (``auto_vacuum = NONE``) keeps its size after deletions; ``callgate store
    compact`` (sidecar stopped) shrinks it and turns incremental vacuum on; with a ``-wal`` beside
    it (a sidecar may be running) it refuses and changes nothing."""
    db = tmp_path / "var" / "callgate.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as c:  # an older file: no auto_vacuum, pages freed but kept
        c.execute("CREATE TABLE t (x BLOB)")
        c.executemany("INSERT INTO t VALUES (?)", [(b"y" * 4000,) for _ in range(500)])
        c.commit()
        c.execute("DELETE FROM t")
        c.commit()
    big = db.stat().st_size
    cfg = tmp_path / "callgate.toml"
    cfg.write_text(f'[policy]\ndir = "{POLICIES}"\n[store]\npath = "{db}"\n')
    wal = Path(str(db) + "-wal")
    wal.write_bytes(b"")

    def compact() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "callgate", "store", "compact", "--config", str(cfg)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip

    r = compact()
    assert r.returncode == 1 and "stop it first" in r.stdout and db.stat().st_size == big
    wal.unlink()
    r = compact()
    assert r.returncode == 0 and r.stdout.startswith(f"ok: {db} {big} -> "), r.stdout + r.stderr
    assert db.stat().st_size < big / 10
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA auto_vacuum").fetchone()[0] == 2


def test_a_purge_marker_left_behind_is_cleared_at_start(tmp_path: Path) -> None:
    """The SQLite triggers let a DELETE of events through only while ``retention_purging`` holds
    its row (inside a retention transaction); a row found at start is removed."""
    from callgate.store.sqlite import SQLiteStore

    db = tmp_path / "callgate.db"

    async def first() -> None:
        store = SQLiteStore(db)
        await put(store, "a", State.FAILED_BEFORE_COMMIT, OLD)
        await store.close()

    asyncio.run(first())
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO retention_purging VALUES (1)")
    asyncio.run(SQLiteStore(db).close())
    with sqlite3.connect(db) as c, pytest.raises(sqlite3.IntegrityError, match="append-only"):
        c.execute("DELETE FROM events")
