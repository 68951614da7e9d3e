"""Issue 34 item 5: databases written by earlier versions open through the real start-up and migrate.

``tests/data/upgrade/<name>/`` holds a database each, written by a real sidecar of that version
(``tests/data/upgrade/make_fixture.py`` run in a checkout of it) with calls in every state a
database keeps, and ``manifest.json`` naming them:

* ``sqlite-unversioned``: main before versioned migrations (commit 8035fce): no ``schema_version``
  table, idempotency keys in a separate ``idempotency.db``;
* ``sqlite-v3``, ``sqlite-v4``, ``sqlite-v5``: schema versions 3, 4 (retention) and 5 (packed stage events), so that the next migration is tested against a
  database this version really wrote. When ``MIGRATIONS`` grows, freeze a ``sqlite-v<N>`` fixture
  of the version before it (the last test fails until one exists).

Each is copied, opened by a real sidecar (start-up migration and key import), and every invocation
is read back through the gRPC API in its state with its events; the open ones go on: the parked
call is confirmed, the executing attempt reports its outcome, a completed key replays.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.base.states import State
from callgate.config import ConfirmationConfig, IdempotencyConfig, StoreConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.store.sqlite import MIGRATIONS, stored_events
from tests.conftest import Running, short_tmpdir, start_sidecar, stop_sidecar

UPGRADE = Path(__file__).parent / "data" / "upgrade"
FIXTURES = sorted(p.name for p in UPGRADE.iterdir() if (p / "manifest.json").is_file())
SLOW = ConfirmationConfig(sweep_interval_ms=3_600_000)  # the fixtures' clock: nothing expires


@pytest.fixture(params=FIXTURES)
def upgraded(request: pytest.FixtureRequest) -> Iterator[tuple[Running, dict[str, str], Path]]:
    data = short_tmpdir()
    src = UPGRADE / request.param
    for f in src.iterdir():
        if f.suffix == ".db":
            shutil.copy(f, data / f.name)
    manifest = json.loads((src / "manifest.json").read_text())
    running, tmp = start_sidecar(
        confirmation=SLOW,
        store=StoreConfig(path=str(data / "callgate.db")),
        idempotency=IdempotencyConfig(path=str(data / "idempotency.db")),
    )
    try:
        yield running, manifest, data
    finally:
        stop_sidecar(running, tmp)
        shutil.rmtree(data, ignore_errors=True)


def _inv(sc: Running, iid: str, sid: str) -> pb.GetInvocationResponse:
    return sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sid, invocation_id=iid))


def test_every_invocation_reads_back_in_its_state_after_the_upgrade(
    upgraded: tuple[Running, dict[str, str], Path],
) -> None:
    sc, manifest, data = upgraded
    with sqlite3.connect(data / "callgate.db") as c:
        assert max(v for (v,) in c.execute("SELECT version FROM schema_version")) == len(MIGRATIONS)
    for state, iid in manifest.items():
        if state == "sessions":
            continue
        got = _inv(sc, iid, sc.session_of(iid))
        assert pb.State.Name(got.invocation.state) == state, (state, iid)
        assert got.events and got.events[0].kind == "proposed"
        assert pb.State.Name(got.events[-1].to_state) == state


def test_open_calls_go_on_after_the_upgrade(upgraded: tuple[Running, dict[str, str], Path]) -> None:
    sc, manifest, _ = upgraded
    parked = manifest["AUTHORIZED"]
    sid = sc.session_of(parked)
    digest = _inv(sc, parked, sid).invocation.digest
    ok = sc.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=parked, digest=digest, confirmed_by="alice")
    )
    assert pb.State.Name(ok.state) == "PREPARED"
    executing = manifest["EXECUTING"]
    attempts = [
        e for e in _inv(sc, executing, sc.session_of(executing)).events if e.kind == "attempt_started"
    ]
    out = sc.executor.ReportOutcome(
        pb.ReportOutcomeRequest(
            attempt_id=attempts[-1].data["attempt_id"],
            outcome=pb.OUTCOME_COMMITTED,
            external_resource_id="evt_2",
        )
    )
    assert pb.State.Name(out.state) == "COMMITTED"
    # The completed key (in the separate file before versioning: imported) replays the original.
    committed = manifest["COMMITTED"]
    alice = sc.session_of(committed)
    sc.list_tools(alice, model_call_id="mc-after")
    replay = sc.propose(
        alice,
        "calendar.create_event@v1",
        {"title": "带护照", "start": "2026-07-23T09:00", "duration_minutes": 10},
        idempotency_key="k-committed",
        model_call_id="mc-after",
        proposal_id="c3-again",
    )
    assert replay.idempotent_replay and replay.invocation_id == committed


def test_the_version_before_the_current_schema_has_a_fixture() -> None:
    """A new migration must come with a database written by the version before it."""
    latest = len(MIGRATIONS)
    assert f"sqlite-v{latest}" in FIXTURES or f"sqlite-v{latest - 1}" in FIXTURES, (
        f"freeze tests/data/upgrade/sqlite-v{latest - 1} with make_fixture.py in a checkout of that version"
    )


# ----------------------------------------------------------------------------- online backup
def test_an_online_backup_under_load_is_consistent_and_restores(tmp_path: Path) -> None:
    """``callgate store backup`` while proposals keep committing: the copy is intact, holds no
    invocation without its events and no event or key without its invocation, and a sidecar
    started on it (the restore) serves what it holds."""
    import subprocess
    import sys
    import threading

    data = short_tmpdir()
    db = data / "callgate.db"
    running, tmp = start_sidecar(confirmation=SLOW, store=StoreConfig(path=str(db)))
    stop = threading.Event()
    proposed: list[str] = []
    try:
        sid = running.open_session(subject="bob")
        running.list_tools(sid)
        first = running.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"}, proposal_id="p0")

        failures: list[BaseException] = []

        def load() -> None:
            n = 0
            try:
                while not stop.is_set() and n < 2000:
                    if n % 50 == 0:  # within a session's tool-call budget
                        s = running.open_session(subject="bob")
                        running.list_tools(s)
                    n += 1
                    args = {"city": f"C{n}", "date": "today"}
                    proposed.append(
                        running.propose(s, "weather.get@v1", args, proposal_id=f"p{n}").invocation_id
                    )
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)

        worker = threading.Thread(target=load)
        worker.start()
        while len(proposed) < 20:  # the load is running
            worker.join(0.01)
        cfg = tmp_path / "callgate.toml"
        cfg.write_text(f'[store]\npath = "{db}"\n')
        target = tmp_path / "backup.db"
        r = subprocess.run(
            [sys.executable, "-m", "callgate", "store", "backup", str(target), "--config", str(cfg)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        during = len(proposed)
        stop.set()
        worker.join()
        assert not failures, failures
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith(f"ok: {target}") and f"schema version {len(MIGRATIONS)}" in r.stdout
        assert len(proposed) > during or len(proposed) >= 20  # writes went on around the copy
    finally:
        stop.set()
        stop_sidecar(running, tmp)
    with sqlite3.connect(target) as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        ids = {i for (i,) in c.execute("SELECT invocation_id FROM invocations")}
        assert first.invocation_id in ids and len(ids) >= 20
        firsts = {i: stored_events(c, i)[0].kind for i in ids if stored_events(c, i)}
        assert set(firsts) == ids and set(firsts.values()) == {"proposed"}  # none without events
        orphans = c.execute(
            "SELECT count(*) FROM events WHERE invocation_id NOT IN (SELECT invocation_id FROM invocations)"
        )
        assert orphans.fetchone() == (0,)
    # Restore: a sidecar on the copy serves what it holds.
    restored = short_tmpdir()
    shutil.copy(target, restored / "callgate.db")
    again, tmp2 = start_sidecar(confirmation=SLOW, store=StoreConfig(path=str(restored / "callgate.db")))
    try:
        got = _inv(again, first.invocation_id, sid)
        assert pb.State.Name(got.invocation.state) == "PREPARED"
    finally:
        stop_sidecar(again, tmp2)
        shutil.rmtree(restored, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)


def test_a_backup_never_overwrites_and_names_a_missing_store(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "callgate.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "none.db"}"\n')
    target = tmp_path / "exists.db"
    target.write_bytes(b"keep")
    r = subprocess.run(
        [sys.executable, "-m", "callgate", "store", "backup", str(tmp_path / "b.db"), "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "none.db" in r.stdout and "no SQLite store" in r.stdout, r.stdout
    assert not (tmp_path / "b.db").exists()
    (tmp_path / "none.db").write_bytes(b"")  # a store now; the target's folder is missing
    nowhere = tmp_path / "no-such-dir" / "b.db"
    r = subprocess.run(
        [sys.executable, "-m", "callgate", "store", "backup", str(nowhere), "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"error: {nowhere}: config_invalid: the backup target's folder does not exist" in r.stdout, (
        r.stdout
    )


# ----------------------------------------------------------------------------- PostgreSQL
PG_DUMP_FIXTURE = UPGRADE / "postgres-v2.sql"
"""``pg_dump --no-owner`` of a PostgreSQL store at schema version 2 (the current one), written by
:func:`_pg_records`: the next PostgreSQL migration is tested against it."""


def _pg_bin(name: str) -> str:
    """A PostgreSQL client program of the server scripts/postgres installed."""
    import subprocess

    from tests.conftest import ROOT

    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "postgres"), "install"], capture_output=True, text=True, timeout=1800
    )
    return str(Path(out.stdout.strip().splitlines()[-1]) / name)


async def _pg_records(dsn: str) -> None:
    """A session, an invocation with its events and a claimed key, through the real store."""
    from dataclasses import replace

    from callgate.store.postgres import PostgresStore
    from tests.test_store_contract import NOW, claim, ev, inv

    store = PostgresStore(dsn)
    await store.start()
    try:
        await store.create_invocation(
            replace(inv("pg-1", "k-pg"), deadline="2026-07-19T07:00:00Z"),
            [ev("pg-1", 1, None, State.AUTHORIZED, "proposed")],
            claim=claim("k-pg"),
        )
        assert NOW is not None
    finally:
        await store.close()


async def _pg_read_back(dsn: str) -> None:
    from callgate.store.idempotency.base import IdempotencyKey
    from callgate.store.postgres import MIGRATIONS as PG_MIGRATIONS
    from callgate.store.postgres import PostgresStore

    store = PostgresStore(dsn)
    await store.start()  # the real start-up: version checked, migrations applied, keys repaired
    try:
        got = await store.get_invocation("pg-1")
        assert got is not None and got.state is State.AUTHORIZED and got.idempotency_key == "k-pg"
        assert [e.kind for e in await store.list_events("pg-1")] == ["proposed"]
        key = await store.keys().get(IdempotencyKey("acme", "alice", "t", "v1", "k-pg"))
        assert key is not None and key.invocation_id == "pg-1"
        async with store._tx() as conn:
            cur = await conn.execute("SELECT max(version) FROM callgate_schema_version")
            assert (await cur.fetchone())[0] == len(PG_MIGRATIONS)
    finally:
        await store.close()


def _psql_restore(dump: Path, dsn: str) -> None:
    import subprocess

    r = subprocess.run(
        [_pg_bin("psql"), "--quiet", "-v", "ON_ERROR_STOP=1", "--dbname", dsn, "-f", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_the_postgres_store_comes_back_from_pg_dump_and_psql(postgres_dsn: str, tmp_path: Path) -> None:
    """The backup path docs/OPERATE.md gives for PostgreSQL: pg_dump, then psql into a new
    database, then a sidecar's start-up on it."""
    import asyncio
    import subprocess

    from tests.test_store_contract import fresh_pg_database

    src = fresh_pg_database(postgres_dsn)
    asyncio.run(_pg_records(src))
    dump = tmp_path / "callgate.sql"
    r = subprocess.run(
        [_pg_bin("pg_dump"), "--no-owner", "--dbname", src, "-f", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    dst = fresh_pg_database(postgres_dsn)
    _psql_restore(dump, dst)
    asyncio.run(_pg_read_back(dst))


def test_a_checked_in_postgres_dump_opens_through_the_start_up(postgres_dsn: str) -> None:
    import asyncio

    from tests.test_store_contract import fresh_pg_database

    dst = fresh_pg_database(postgres_dsn)
    _psql_restore(PG_DUMP_FIXTURE, dst)
    asyncio.run(_pg_read_back(dst))


PG_V7_FIXTURE = UPGRADE / "postgres-v7"
"""``make_pg_fixture.py`` run in a checkout at PostgreSQL schema version 7 (main before migration
8 stored ``digest`` and ``policy_revision`` as bytes): ``.sql`` (the dump) and ``.json`` (each
invocation's ``GetInvocation`` answer as that version gave it)."""


ADDED_SINCE_V7 = ("maskedArguments",)
"""``Invocation`` fields v7's code did not have (``masked_arguments``: the arguments of a parked
call as a person may see them, 2026-12-07): compared on their own, the rest as v7 answered."""


def test_a_postgres_store_at_version_7_migrates_with_every_answer_unchanged(postgres_dsn: str) -> None:
    """The dump of a v7 store, written by a real sidecar of that version with calls in every state,
    opened by a sidecar of this code: the start-up migrates it (digests and revisions become
    bytes) and every ``GetInvocation`` answer, record and events, equals the one v7 gave (hex on
    the wire, as before); the calls go on."""
    import os

    import psycopg
    from google.protobuf import json_format

    from callgate.store.postgres import MIGRATIONS as PG_MIGRATIONS
    from tests.test_store_contract import fresh_pg_database

    manifest = json.loads(PG_V7_FIXTURE.with_suffix(".json").read_text())
    dst = fresh_pg_database(postgres_dsn)
    _psql_restore(PG_V7_FIXTURE.with_suffix(".sql"), dst)
    env = "CALLGATE_TEST_UPGRADE_PG_DSN"
    os.environ[env] = dst
    try:
        sc, tmp = start_sidecar(store=StoreConfig(backend="postgres", dsn_env=env), confirmation=SLOW)
    finally:
        del os.environ[env]
    try:
        for state, want in manifest["answers"].items():
            iid = manifest["ids"][state]
            got = sc.gate.GetInvocation(
                pb.GetInvocationRequest(session_id=sc.session_of(iid), invocation_id=iid)
            )
            answer = json_format.MessageToDict(got)
            added = {k: answer["invocation"].pop(k) for k in ADDED_SINCE_V7 if k in answer["invocation"]}
            assert answer == want, state
            if state == "AUTHORIZED" or "maskedArguments" in added:  # asked for a confirmation:
                masked = json.loads(base64.b64decode(added["maskedArguments"]))  # no secret in them
                assert masked == json.loads(base64.b64decode(want["invocation"]["normalizedArguments"]))
        parked = manifest["answers"]["AUTHORIZED"]["invocation"]
        done = sc.confirmations.Confirm(
            pb.ConfirmRequest(
                invocation_id=parked["invocationId"], digest=parked["digest"], confirmed_by="alice"
            )
        )
        assert pb.State.Name(done.state) == "PREPARED"
    finally:
        stop_sidecar(sc, tmp)
    with psycopg.connect(dst) as c:
        version = c.execute("SELECT max(version) FROM callgate_schema_version").fetchone()
        assert version is not None and version[0] == len(PG_MIGRATIONS) >= 8
        types = dict(
            c.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                "'callgate_invocations' AND column_name IN ('digest', 'policy_revision')"
            ).fetchall()
        )
        assert types == {"digest": "bytea", "policy_revision": "bytea"}
        sizes = c.execute(
            "SELECT DISTINCT octet_length(digest), octet_length(policy_revision) FROM callgate_invocations "
            "WHERE state <> 'PARSE_REJECTED'"
        ).fetchall()
        assert sizes == [(32, 32)]
