"""Versioned schema migrations (issue 9): a database written by the version before migrations
(its schema frozen in ``tests/data/schema/``) is adopted and upgraded at start with its data
intact, the keys of its separate idempotency file are imported once (orphans released), and a
database newer than the code is refused."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from callgate.base.errors import CallgateError, ErrorCode
from callgate.base.states import State
from callgate.store.base import Usage
from callgate.store.idempotency.base import IdempotencyKey
from callgate.store.sqlite import MIGRATIONS, SQLiteReader, SQLiteStore

SCHEMAS = Path(__file__).parent / "data" / "schema"
AT = "2026-07-19T06:00:00.000000Z"


def v1_databases(tmp: Path) -> tuple[Path, Path]:
    """An event database and a separate idempotency file as the previous version left them."""
    db, idem = tmp / "callgate.db", tmp / "idempotency.db"
    with sqlite3.connect(db) as c:
        c.executescript((SCHEMAS / "store_v1_sqlite.sql").read_text())
        c.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)",
            ("s1", "acme", "alice", "UTC", "en", '{"max_tool_calls":5}', '["calendar.create_event"]', AT),
        )
        for inv, state in (("inv_1", "AUTHORIZED"), ("inv_3", "COMMITTED")):
            c.execute(
                "INSERT INTO invocations (invocation_id, session_id, model_call_id, proposal_id, tool_name, "
                "tool_version, tenant, subject, state, raw_arguments, digest, normalized_arguments, decision, "
                "rejection, idempotency_key, deadline, confirmation_expires_at, policy_revision, created_at, "
                "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (inv, "s1", "m", "p", "calendar.create_event", "v1", "acme", "alice", state, b"{}", "sha256:d",
                 b"{}", '{"effect":"confirm"}', None, f"k-{inv}", "", "", "rev1", AT, AT),
            )  # fmt: skip
            c.execute(
                "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)",
                (inv, 1, f"{inv}.1", AT, "proposed", None, "PROPOSED", "t", "s", "{}"),
            )
        c.execute("INSERT INTO usage VALUES ('s1', 1, 2, 3, 4)")
        c.execute("INSERT INTO snapshots (revision, at, detail) VALUES ('rev1', ?, '{}')", (AT,))
    with sqlite3.connect(idem) as c:
        c.executescript((SCHEMAS / "idempotency_v1_sqlite.sql").read_text())
        for key, inv, state, outcome in (
            ("k-inv_1", "inv_1", "claimed", ""),
            ("k-inv_2", "inv_2", "claimed", ""),  # the crash of issue 9: the invocation never written
            ("k-inv_3", "inv_3", "completed", "COMMITTED"),
        ):
            c.execute(
                "INSERT INTO idempotency_keys VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                ("acme", "alice", "calendar.create_event", "v1", key, "sha256:d", inv, state, outcome, None, "",
                 AT, AT, "2026-07-20T06:00:00.000000Z", 86_400_000_000),
            )  # fmt: skip
    return db, idem


def key(name: str) -> IdempotencyKey:
    return IdempotencyKey("acme", "alice", "calendar.create_event", "v1", name)


def versions(db: Path) -> list[int]:
    with sqlite3.connect(db) as c:
        return [r[0] for r in c.execute("SELECT version FROM schema_version ORDER BY version")]


def test_previous_schema_is_migrated_with_its_data_intact(tmp_path: Path) -> None:
    db, idem = v1_databases(tmp_path)

    async def body() -> None:
        store = SQLiteStore(db, legacy_keys=idem)
        try:
            session = await store.get_session("s1")
            assert session is not None and session.budgets == {"max_tool_calls": 5}
            inv = await store.get_invocation("inv_1")
            assert inv is not None and inv.state is State.AUTHORIZED and inv.idempotency_key == "k-inv_1"
            assert [e.kind for e in await store.list_events("inv_3")] == ["proposed"]
            assert await store.add_usage("s1", Usage()) == Usage(1, 2, 3, 4)
            keys = store.keys()
            k1, k2, k3 = [await keys.get(key(f"k-inv_{i}")) for i in (1, 2, 3)]
            assert k1 is not None and k1.state == "claimed" and k1.invocation_id == "inv_1"
            assert k2 is not None and k2.state == "released"  # orphan released at start
            assert k3 is not None and k3.state == "completed" and k3.outcome == "COMMITTED"
        finally:
            await store.close()

    asyncio.run(body())
    assert versions(db) == [m.version for m in MIGRATIONS]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT model_calls, tool_calls FROM usage").fetchone() == (1, 2)
        assert c.execute("SELECT keys FROM key_imports").fetchall() == [(3,)]
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    # a second start migrates nothing and imports nothing again
    async def reopen() -> None:
        await SQLiteStore(db, legacy_keys=idem).close()

    asyncio.run(reopen())
    assert versions(db) == [m.version for m in MIGRATIONS]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM key_imports").fetchone() == (1,)


def test_fresh_database_gets_every_migration(tmp_path: Path) -> None:
    async def body() -> None:
        await SQLiteStore(tmp_path / "new.db").close()

    asyncio.run(body())
    assert versions(tmp_path / "new.db") == list(range(1, len(MIGRATIONS) + 1))


def test_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "callgate.db"

    async def create() -> None:
        await SQLiteStore(db).close()

    asyncio.run(create())
    newer = len(MIGRATIONS) + 1
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO schema_version VALUES (?, 'from the future', ?)", (newer, AT))
    with pytest.raises(CallgateError) as ei:
        SQLiteStore(db)
    assert ei.value.code is ErrorCode.STORE_UNAVAILABLE and f"schema version {newer}" in ei.value.message
    with pytest.raises(CallgateError):
        SQLiteReader(db)  # explain refuses too rather than misread it
    assert versions(db)[-1] == newer  # untouched
