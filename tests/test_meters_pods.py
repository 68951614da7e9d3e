"""Issue 30 item 3 on real processes: meters shared by two ``callgate serve`` sharing PostgreSQL
or one SQLite file, and a SIGKILL with reservations open.

* 64 concurrent proposals split across two sidecars on one PostgreSQL, against a limit of 5:
  exactly 5 are allowed, every round, with replays mixed in (a replay answers its original).
* The same on one SQLite file shared by two sidecars (several ``callgate mcp serve`` spawned by
  MCP clients with one config, or a rolling restart on one volume): a reservation is a row
  written in a transaction, so the other process sees it.
* Crash: calls left committed, unknown, failed before commit and merely prepared, then SIGKILL
  and a restart; once the deadlines passed and the sweep ran, the meter a new call reads equals
  the number of COMMITTED + OUTCOME_UNKNOWN invocations in the event trail (both backends).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from callgate.base.states import State
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import POLICIES
from tests.test_crash_consistency import Pod, make_pod
from tests.test_meters import admitted, meter_folder
from tests.test_store_contract import fresh_pg_database

RACERS = 64
LIMIT = 5
ROUNDS = 40  # 20 rounds of distinct keys and 20 with replays mixed in, alternating
SQLITE_ROUNDS = 8  # two processes on one file serialise on its write lock: fewer rounds
PG_STORE = '[store]\nbackend = "postgres"\ndsn_env = "CALLGATE_TEST_STORE_DSN"\n[confirmation]\nsweep_interval_ms = 200'
SQLITE_STORE = '[store]\npath = "{tmp}/callgate.db"\n[confirmation]\nsweep_interval_ms = 200'


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return meter_folder(tmp_path_factory, "meters-pods")


def pod_for(folder: Path, store: str, env: dict[str, str]) -> Pod:
    pod = make_pod(store, env)
    text = pod.toml.read_text()
    assert f'dir = "{POLICIES}"' in text
    pod.toml.write_text(text.replace(f'dir = "{POLICIES}"', f'dir = "{folder}"'))
    return pod


def propose(gate: pb_grpc.GateStub, sid: str, tool: str, to: str, key: str, pid: str) -> Any:
    name, _, version = tool.partition("@")
    req = pb.ProposeRequest(
        session_id=sid, model_call_id="m", proposal_id=pid, tool_name=name, tool_version=version,
        arguments=json.dumps({"to": to}).encode(), idempotency_key=key,
    )  # fmt: skip
    return admitted(lambda: gate.Propose(req, timeout=30))


@pytest.fixture
def two_pods(folder: Path, postgres_dsn: str) -> Iterator[list[pb_grpc.GateStub]]:
    dsn = fresh_pg_database(postgres_dsn)
    pods = [pod_for(folder, PG_STORE, {"CALLGATE_TEST_STORE_DSN": dsn}) for _ in range(2)]
    try:
        yield [pb_grpc.GateStub(p.start()) for p in pods]
    finally:
        for p in pods:
            p.stop()
            shutil.rmtree(p.tmp, ignore_errors=True)


@pytest.fixture
def two_pods_one_sqlite_file(folder: Path, tmp_path: Path) -> Iterator[list[pb_grpc.GateStub]]:
    store = SQLITE_STORE.replace("{tmp}", str(tmp_path))
    pods = [pod_for(folder, store, {}) for _ in range(2)]
    try:
        yield [pb_grpc.GateStub(p.start()) for p in pods]
    finally:
        for p in pods:
            p.stop()
            shutil.rmtree(p.tmp, ignore_errors=True)


def race(pods: list[pb_grpc.GateStub], rounds: int, name: str) -> None:
    """``rounds`` rounds of 64 concurrent proposals split across ``pods``, against the limit of 5;
    odd rounds mix replays in."""
    for r in range(rounds):
        replays = r % 2 == 1
        sid = (
            pods[0]
            .OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id=f"{name}-{r}"), timezone="UTC")
            )
            .session_id
        )
        for g in pods:
            g.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))

        def one(i: int, sid: str = sid, replays: bool = replays) -> Any:
            n = i % 40 if replays else i
            return propose(pods[i % 2], sid, "mail.send@v1", f"x{n}@example.com", f"k{n}", f"p{i}")

        with ThreadPoolExecutor(max_workers=RACERS) as pool:
            answers = list(pool.map(one, range(RACERS)))
        allowed = {a.invocation_id for a in answers if a.decision.effect == pb.ALLOW}
        assert len(allowed) == LIMIT, (r, replays, len(allowed))
        assert not replays or any(a.idempotent_replay for a in answers), r


@pytest.mark.postgres
def test_64_proposals_across_two_sidecars_sharing_postgres(two_pods: list[pb_grpc.GateStub]) -> None:
    race(two_pods, ROUNDS, "pg-racer")


def test_64_proposals_across_two_sidecars_sharing_one_sqlite_file(
    two_pods_one_sqlite_file: list[pb_grpc.GateStub],
) -> None:
    race(two_pods_one_sqlite_file, SQLITE_ROUNDS, "sqlite-racer")


# --------------------------------------------------------------------------- kill -9
def usage_seen(gate: pb_grpc.GateStub, sid: str, key: str) -> Any:
    r = propose(gate, sid, "sms.send@v1", "probe", key, key)
    got = gate.GetInvocation(pb.GetInvocationRequest(invocation_id=r.invocation_id, session_id=sid))
    (event,) = [e for e in got.events if e.kind == "authorized"]
    gate.Cancel(pb.CancelRequest(invocation_id=r.invocation_id, reason="probe", session_id=sid))
    return int(json_format.MessageToDict(event.data)["usage"]["texts"]["24h"]["before"])


def crash_and_count(pod: Pod, counted: Callable[[], int]) -> None:
    channel = pod.start()
    gate = pb_grpc.GateStub(channel)
    execu = pb_grpc.ExecutorStub(grpc.insecure_channel(f"unix:{pod.tmp}/executor.sock"))
    sid = gate.OpenSession(
        pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="crash"), timezone="UTC")
    ).session_id
    gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))
    for i in range(16):
        r = propose(gate, sid, "sms.send@v1", f"+{i}", f"c{i}", f"c{i}")
        assert r.decision.effect == pb.ALLOW
        how = ("committed", "unknown", "failed", "prepared")[i % 4]
        if how == "prepared":
            continue  # reserved, never run: released at its deadline
        att = execu.BeginAttempt(pb.BeginAttemptRequest(invocation_id=r.invocation_id, executor_id="sms"))
        outcome = {
            "committed": pb.OUTCOME_COMMITTED,
            "unknown": pb.OUTCOME_UNKNOWN_COMMIT,
            "failed": pb.OUTCOME_FAILED_BEFORE_COMMIT,
        }[how]
        if how == "committed":
            report = pb.ReportOutcomeRequest(
                attempt_id=att.attempt_id, outcome=outcome, external_resource_id=f"m{i}"
            )
        else:
            report = pb.ReportOutcomeRequest(
                attempt_id=att.attempt_id, outcome=outcome, failure_class=pb.NOT_REACHED
            )
        execu.ReportOutcome(report)
    # committed, unknown and prepared count; failed before commit was released at once
    assert usage_seen(gate, sid, "before-crash") == 12
    channel.close()
    pod.kill()  # reservations open: the 4 prepared calls
    gate = pb_grpc.GateStub(pod.start())
    time.sleep(2.5)  # the 2 s deadlines pass; the sweep (200 ms) ends what was open
    deadline = time.monotonic() + 20
    while True:
        seen = usage_seen(gate, sid, f"after-{time.monotonic_ns()}")
        want = counted()
        if seen == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    pod.stop()
    assert want == 8 and seen == want, (seen, want)


def counted_in(rows: list[tuple[str, str]]) -> int:
    """COMMITTED + OUTCOME_UNKNOWN invocations, from their events in order (the trail's last state)."""
    last = {iid: st for iid, st in rows}
    return sum(st in ("COMMITTED", "OUTCOME_UNKNOWN") for st in last.values())


def crash_pod(pod: Pod, rows: Callable[[], list[tuple[str, str]]]) -> None:
    try:
        crash_and_count(pod, lambda: counted_in(rows()))
    finally:
        pod.stop()
        shutil.rmtree(pod.tmp, ignore_errors=True)


TRAIL = (
    "SELECT e.invocation_id, e.to_state FROM {events} e JOIN {invocations} i USING (invocation_id) "
    "WHERE i.tool_name='sms.send' ORDER BY e.invocation_id, e.seq"
)


def test_kill_9_with_open_reservations_sqlite(folder: Path) -> None:
    pod = pod_for(folder, SQLITE_STORE, {})

    def rows() -> list[tuple[str, str]]:
        with sqlite3.connect(pod.tmp / "callgate.db") as c:
            return c.execute(TRAIL.format(events="events", invocations="invocations")).fetchall()

    crash_pod(pod, rows)


@pytest.mark.postgres
def test_kill_9_with_open_reservations_postgres(folder: Path, postgres_dsn: str) -> None:
    import psycopg

    dsn = fresh_pg_database(postgres_dsn)
    pod = pod_for(folder, PG_STORE, {"CALLGATE_TEST_STORE_DSN": dsn})

    def rows() -> list[tuple[str, str]]:
        with psycopg.connect(dsn) as c:
            query = TRAIL.format(events="callgate_events", invocations="callgate_invocations")
            return [(str(a), str(b)) for a, b in c.execute(query).fetchall()]  # type: ignore[arg-type]

    crash_pod(pod, rows)


# --------------------------------------------------------------------------- Reconcile
def reconcile_and_count(pod: Pod) -> None:
    """Two calls end OUTCOME_UNKNOWN (they count), one COMMITTED. A Reconcile that finds the
    first not committed (FAILED_BEFORE_COMMIT) takes its contribution back; one that finds the
    second committed keeps it."""
    gate = pb_grpc.GateStub(pod.start())
    execu = pb_grpc.ExecutorStub(grpc.insecure_channel(f"unix:{pod.tmp}/executor.sock"))
    sid = gate.OpenSession(
        pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="rec"), timezone="UTC")
    ).session_id
    gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))
    ids = []
    for i, outcome in enumerate((pb.OUTCOME_UNKNOWN_COMMIT, pb.OUTCOME_UNKNOWN_COMMIT, pb.OUTCOME_COMMITTED)):
        r = propose(gate, sid, "sms.send@v1", f"+{i}", f"r{i}", f"r{i}")
        att = execu.BeginAttempt(pb.BeginAttemptRequest(invocation_id=r.invocation_id, executor_id="sms"))
        extra = (
            {"external_resource_id": f"m{i}"}
            if outcome == pb.OUTCOME_COMMITTED
            else {"failure_class": pb.NOT_REACHED}
        )
        execu.ReportOutcome(pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=outcome, **extra))
        ids.append(r.invocation_id)
    assert usage_seen(gate, sid, "q0") == 3
    out = execu.Reconcile(pb.ReconcileRequest(invocation_id=ids[0], finding=pb.RECONCILE_NOT_COMMITTED))
    assert pb.State.Name(out.state) == "FAILED_BEFORE_COMMIT"
    assert usage_seen(gate, sid, "q1") == 2
    out = execu.Reconcile(
        pb.ReconcileRequest(invocation_id=ids[1], finding=pb.RECONCILE_COMMITTED, external_resource_id="m1")
    )
    assert pb.State.Name(out.state) == "COMMITTED"
    assert usage_seen(gate, sid, "q2") == 2
    # a second Reconcile of the same finding changes nothing
    assert execu.Reconcile(
        pb.ReconcileRequest(invocation_id=ids[0], finding=pb.RECONCILE_NOT_COMMITTED)
    ).already_recorded
    assert usage_seen(gate, sid, "q3") == 2


def test_reconciled_not_committed_releases_its_count_sqlite(folder: Path) -> None:
    pod = pod_for(folder, SQLITE_STORE, {})
    try:
        reconcile_and_count(pod)
    finally:
        pod.stop()
        shutil.rmtree(pod.tmp, ignore_errors=True)


@pytest.mark.postgres
def test_reconciled_not_committed_releases_its_count_postgres(folder: Path, postgres_dsn: str) -> None:
    pod = pod_for(folder, PG_STORE, {"CALLGATE_TEST_STORE_DSN": fresh_pg_database(postgres_dsn)})
    try:
        reconcile_and_count(pod)
    finally:
        pod.stop()
        shutil.rmtree(pod.tmp, ignore_errors=True)


# --------------------------------------------------------------------------- one commit (PostgreSQL)
@pytest.mark.postgres
def test_a_reservation_commits_with_its_invocation_or_not_at_all(folder: Path, postgres_dsn: str) -> None:
    """Issue 30 item 3 ("reserved atomically with the idempotency claim"), on a real sidecar. The
    invocation's write is held back (another transaction holds the invocations table in SHARE
    mode, so the INSERT waits): while it waits no reservation is visible, since it is in the same
    uncommitted transaction (a reservation committed on its own would count here, and would stay
    if the write then failed). The lock wait ends within the call's deadline: the Propose is
    refused ``store_unavailable`` (not DEADLINE_EXCEEDED) and neither the reservation nor the
    invocation exists. Once the table is free, an allowed call commits both together."""
    import psycopg

    from tests.test_confirmation import error_reason

    dsn = fresh_pg_database(postgres_dsn)
    pod = pod_for(folder, PG_STORE, {"CALLGATE_TEST_STORE_DSN": dsn})
    try:
        gate = pb_grpc.GateStub(pod.start())
        sid = gate.OpenSession(
            pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="atomic"), timezone="UTC")
        ).session_id
        gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="m"))
        req = pb.ProposeRequest(
            session_id=sid, model_call_id="m", proposal_id="a1", tool_name="sms.send", tool_version="v1",
            arguments=json.dumps({"to": "+1"}).encode(), idempotency_key="a1",
        )  # fmt: skip
        with psycopg.connect(dsn, autocommit=True) as watch, psycopg.connect(dsn) as holder:
            holder.execute("LOCK TABLE callgate_invocations IN SHARE MODE")
            with ThreadPoolExecutor(max_workers=1) as pool:
                call = pool.submit(lambda: admitted(lambda: gate.Propose(req, timeout=4)))
                for _ in range(400):  # until the invocation's INSERT waits for the table
                    waiting = watch.execute(
                        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                        "WHERE NOT l.granted AND c.relname = 'callgate_invocations'"
                    ).fetchone()
                    if waiting and waiting[0]:
                        break
                    time.sleep(0.02)
                else:
                    raise AssertionError("the Propose never reached the invocation's write")
                seen = watch.execute("SELECT count(*) FROM callgate_meter_reservations").fetchone()
                assert seen == (0,), "a reservation was committed before its invocation"
                with pytest.raises(grpc.RpcError) as err:
                    call.result()
            holder.rollback()
            assert err.value.code() is not grpc.StatusCode.DEADLINE_EXCEEDED
            assert error_reason(err.value) == "store_unavailable"
            assert watch.execute("SELECT count(*) FROM callgate_meter_reservations").fetchone() == (0,)
            assert watch.execute("SELECT count(*) FROM callgate_invocations").fetchone() == (0,)
            ok = propose(gate, sid, "sms.send@v1", "+2", "a2", "a2")
            assert ok.decision.effect == pb.ALLOW
            rows = watch.execute(
                "SELECT r.invocation_id, i.state FROM callgate_meter_reservations r "
                "JOIN callgate_invocations i USING (invocation_id)"
            ).fetchall()
            assert rows == [(ok.invocation_id, "PREPARED")]
    finally:
        pod.stop()
        shutil.rmtree(pod.tmp, ignore_errors=True)


@pytest.mark.postgres
def test_a_claim_lost_at_the_write_rolls_its_reservation_back_before_the_replay(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """In the held transaction, a claim that finds the key taken at the write (another call
    claimed it after this one's look-up) rolls the transaction back at once: the reservation and
    the meter locks go before the replay locks the original's row, and what the block writes
    next (the replay's event) still commits."""
    import asyncio

    from callgate.policy.meters import Contribution, Window
    from callgate.store.idempotency.base import ClaimKind
    from tests.test_meters import _store
    from tests.test_store_contract import NOW, claim, ev, inv

    hour = Window("1h", 3_600_000)

    async def run() -> None:
        store, _ = await _store("postgres", tmp_path, postgres_dsn)
        meters = store.meters()
        k = Contribution("sends", "acme\x1fs:ana", 1, (hour,), 0)
        await store.create_invocation(inv("i1", "k"), [ev("i1", 1, None, State.AUTHORIZED)], claim=claim("k"))
        async with store.transaction():
            (seen,) = await meters.reserve("i2", "s1", [k], NOW, NOW + timedelta(minutes=1))
            assert seen.before == 0
            lost = await store.create_invocation(
                inv("i2", "k"), [ev("i2", 1, None, State.AUTHORIZED)], claim=claim("k")
            )
            assert lost is not None and lost.kind is ClaimKind.IN_PROGRESS
            async with store._tx() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                )
                assert await cur.fetchone() == (0,)  # the meter's lock went with the rollback
            await store.append_events([ev("i1", 0, State.AUTHORIZED, State.AUTHORIZED)])
        assert await store.get_invocation("i2") is None
        assert [e.seq for e in await store.list_events("i1")] == [1, 2]
        assert await meters.totals("sends", "acme\x1fs:ana", hour, "s1", NOW) == 0
        await store.close()

    asyncio.run(run())
