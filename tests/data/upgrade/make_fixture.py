"""Write a store fixture with the code of the checkout it runs in (tests/test_upgrades.py).

    cd <a checkout of the version to freeze> && python <this file> OUT_DIR

Runs a real sidecar of that checkout (its own ``tests.conftest.start_sidecar``, a FixedClock)
with its SQLite store in OUT_DIR and drives calls into every state a database keeps: OBSERVED
(a weather read run and encoded), AUTHORIZED (a calendar write parked for confirmation), EXECUTING
(confirmed, an attempt begun), COMMITTED (a second write committed, not yet encoded), PREPARED (a
delete), AUTHORIZATION_REJECTED and PARSE_REJECTED. It prints the invocation ids by state as JSON
(``manifest.json`` beside the database): the upgrade test reads each back after migrating.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))

from callgate.config import IdempotencyConfig, StoreConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import start_sidecar, stop_sidecar


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    running, tmp = start_sidecar(
        store=StoreConfig(path=str(out / "callgate.db")),
        idempotency=IdempotencyConfig(path=str(out / "idempotency.db")),
    )
    try:
        ids = drive(running)
    finally:
        stop_sidecar(running, tmp)
    for extra in ("callgate.db-wal", "callgate.db-shm", "idempotency.db-wal", "idempotency.db-shm"):
        (out / extra).unlink(missing_ok=True)
    (out / "manifest.json").write_text(json.dumps(ids, indent=1, sort_keys=True) + "\n")
    print(json.dumps(ids))
    shutil.rmtree(tmp, ignore_errors=True)


def drive(sc: Any) -> dict[str, str]:
    """Calls into every state a database keeps, through the running sidecar ``sc``: the
    invocation ids by state (and the sessions, as JSON, under ``"sessions"``)."""
    ids: dict[str, str] = {}
    bob = sc.open_session(subject="bob")
    sc.list_tools(bob)
    w = sc.propose(bob, "weather.get@v1", {"city": "Paris", "date": "today"}, proposal_id="w1")
    att = sc.executor.BeginAttempt(
        pb.BeginAttemptRequest(invocation_id=w.invocation_id, executor_id="weather")
    )
    sc.executor.ReportOutcome(
        pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED)
    )
    sc.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=w.invocation_id, status="ok", value=b'{"summary": "sunny"}')
    )
    ids["OBSERVED"] = w.invocation_id
    ids["PARSE_REJECTED"] = sc.propose(bob, "weather.get@v1", b'{"city": ', proposal_id="w2").invocation_id

    alice = sc.open_session(subject="alice", tz="Asia/Shanghai")
    sc.list_tools(alice)

    def event(key: str, start: str, pid: str) -> pb.ProposeResponse:
        return sc.propose(
            alice,
            "calendar.create_event@v1",
            {"title": "带护照", "start": start, "duration_minutes": 10},
            idempotency_key=key,
            proposal_id=pid,
        )

    parked = event("k-parked", "2026-07-21T09:00", "c1")
    ids["AUTHORIZED"] = parked.invocation_id
    for name, key, start, pid in (
        ("EXECUTING", "k-executing", "2026-07-22T09:00", "c2"),
        ("COMMITTED", "k-committed", "2026-07-23T09:00", "c3"),
    ):
        r = event(key, start, pid)
        sc.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=r.invocation_id, digest=r.digest, confirmed_by="alice")
        )
        a = sc.executor.BeginAttempt(
            pb.BeginAttemptRequest(invocation_id=r.invocation_id, executor_id="calendar-executor")
        )
        if name == "COMMITTED":
            sc.executor.ReportOutcome(
                pb.ReportOutcomeRequest(
                    attempt_id=a.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id="evt_1"
                )
            )
        ids[name] = r.invocation_id
    denied = sc.propose(
        alice,
        "calendar.create_event@v1",
        {"title": "x", "start": "2026-07-20T09:00", "duration_minutes": 500},
        idempotency_key="k-denied",
        proposal_id="c4",
    )
    ids["AUTHORIZATION_REJECTED"] = denied.invocation_id
    carol = sc.open_session(subject="carol")
    sc.list_tools(carol)
    ids["PREPARED"] = sc.propose(carol, "files.delete@v1", {"path": "/tmp/a"}, proposal_id="f1").invocation_id
    ids["sessions"] = json.dumps({"bob": bob, "alice": alice, "carol": carol})
    for state, iid in ids.items():
        if state == "sessions":
            continue
        got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(iid), invocation_id=iid))
        assert pb.State.Name(got.invocation.state) == state, (state, pb.State.Name(got.invocation.state))
    return ids


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
