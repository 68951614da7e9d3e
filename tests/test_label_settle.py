"""Labels are recorded with the outcome that makes a labelled result exist (issue 30 item 4,
callgate/store/labels.py), on real ``callgate serve`` processes over SQLite and PostgreSQL.

The example folder (policies/) labels ``weather.get@v1``'s results ``untrusted``; an admin's
delete in a session that observed one needs confirmation (``files-delete-after-untrusted``). A
copy of the folder adds one forbid so that a weather read can be denied. In one session a read
is denied, one is proposed and left PREPARED, one fails before the commit boundary and one is
cancelled: none labels the session, and the delete is allowed. Then one read commits: the delete
needs confirmation. After a SIGKILL and a restart the committed label is still there, and a
session whose only read was left PREPARED at the crash is still unlabelled.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.base.meters import RESULT_LABELS_KEY
from callgate.base.states import State
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.store.base import EventRecord, InvocationRecord
from tests.conftest import POLICIES
from tests.test_crash_consistency import Pod, make_pod
from tests.test_meters import _store, admitted
from tests.test_store_contract import fresh_pg_database

PG_STORE = '[store]\nbackend = "postgres"\ndsn_env = "CALLGATE_TEST_STORE_DSN"\n[confirmation]\nsweep_interval_ms = 200'
SQLITE_STORE = '[store]\npath = "{tmp}/callgate.db"\n[confirmation]\nsweep_interval_ms = 200'
AT = "2026-07-20T10:00:00Z"
FORBID = """
@id("weather-nowhere")
forbid (principal, action == Action::"weather.read", resource)
when { context.args.city == "Nowhere" };
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("label-settle") / "policies"
    shutil.copytree(POLICIES, root)
    with open(root / "cedar" / "policies.cedar", "a") as f:
        f.write(FORBID)
    return root


def pod_for(folder: Path, store: str, env: dict[str, str]) -> Pod:
    pod = make_pod(store, env)
    text = pod.toml.read_text()
    assert f'dir = "{POLICIES}"' in text
    pod.toml.write_text(text.replace(f'dir = "{POLICIES}"', f'dir = "{folder}"'))
    return pod


class Agent:
    """One session of carol (an admin) on a pod, over gRPC."""

    def __init__(self, channel: grpc.Channel, sid: str = "") -> None:
        self.gate = pb_grpc.GateStub(channel)
        self.sid = (
            sid
            or self.gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="carol"), timezone="UTC")
            ).session_id
        )
        self.mc = 0

    def propose(self, tool: str, args: dict[str, Any]) -> Any:
        self.mc += 1
        mc = f"m{self.mc}"
        self.gate.ListTools(pb.ListToolsRequest(session_id=self.sid, model_call_id=mc))
        name, _, version = tool.partition("@")
        req = pb.ProposeRequest(
            session_id=self.sid, model_call_id=mc, proposal_id=f"p{self.mc}", tool_name=name,
            tool_version=version, arguments=json.dumps(args).encode(),
        )  # fmt: skip
        return admitted(lambda: self.gate.Propose(req, timeout=30))

    def read(self, city: str = "Paris") -> Any:
        return self.propose("weather.get@v1", {"city": city, "date": "2026-07-20"})

    def delete(self) -> int:
        """The effect a delete gets now (it is left PREPARED or parked: it never runs)."""
        return int(self.propose("files.delete@v1", {"path": "/tmp/b"}).decision.effect)


def run(execu: pb_grpc.ExecutorStub, invocation_id: str, outcome: int, **kw: Any) -> int:
    att = execu.BeginAttempt(pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id="weather"))
    got = execu.ReportOutcome(pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=outcome, **kw))
    return int(got.state)


def labels_flow(pod: Pod) -> None:
    channel = pod.start()
    execu = pb_grpc.ExecutorStub(grpc.insecure_channel(f"unix:{pod.tmp}/executor.sock"))
    a = Agent(channel)
    assert a.read("Nowhere").decision.effect == pb.DENY
    left = a.read()  # proposed (PREPARED), never run
    assert left.decision.effect == pb.ALLOW and left.state == pb.PREPARED
    failed = a.read()
    assert run(
        execu, failed.invocation_id, pb.OUTCOME_FAILED_BEFORE_COMMIT, failure_class=pb.BUSINESS_REJECTION
    ) == (pb.FAILED_BEFORE_COMMIT)
    cancelled = a.read()
    a.gate.Cancel(pb.CancelRequest(invocation_id=cancelled.invocation_id, reason="no", session_id=a.sid))
    assert a.delete() == pb.ALLOW  # nothing labelled has been observed yet
    ok = a.read()
    assert run(execu, ok.invocation_id, pb.OUTCOME_COMMITTED) == pb.COMMITTED
    got = a.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=ok.invocation_id, session_id=a.sid))
    (committed,) = [e for e in got.events if e.kind == "committed"]
    assert list(committed.data["result_labels"]) == ["untrusted"]
    assert a.delete() == pb.CONFIRM
    b = Agent(channel)  # its only read is left PREPARED when the sidecar dies
    assert b.read().decision.effect == pb.ALLOW
    channel.close()
    pod.kill()
    channel = pod.start()
    assert Agent(channel, a.sid).delete() == pb.CONFIRM  # the committed label survived
    assert Agent(channel, b.sid).delete() == pb.ALLOW
    assert Agent(channel).delete() == pb.ALLOW  # a new session
    channel.close()


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    made: list[Pod] = []
    yield made
    for p in made:
        p.stop()
        shutil.rmtree(p.tmp, ignore_errors=True)


def test_labels_settle_with_the_outcome_sqlite(folder: Path, pods: list[Pod]) -> None:
    pods.append(pod_for(folder, SQLITE_STORE, {}))
    labels_flow(pods[0])


@pytest.mark.postgres
def test_labels_settle_with_the_outcome_postgres(folder: Path, pods: list[Pod], postgres_dsn: str) -> None:
    pods.append(pod_for(folder, PG_STORE, {"CALLGATE_TEST_STORE_DSN": fresh_pg_database(postgres_dsn)}))
    labels_flow(pods[0])


# --------------------------------------------------------------------------- OUTCOME_UNKNOWN, Reconcile
def _event(inv: str, seq: int, to: State, data: dict[str, Any] | None = None) -> EventRecord:
    return EventRecord(
        f"{inv}.{seq}" if seq else "",
        inv,
        seq,
        AT,
        to.value.lower(),
        None,
        to,
        "t" * 32,
        "s" * 16,
        data or {},
    )


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_unknown_outcome_labels_until_reconciled_not_committed(
    kind: str, tmp_path: Path, request: Any
) -> None:
    """A labelled write that ends OUTCOME_UNKNOWN labels its session (it may have run); a Reconcile
    that finds it not committed takes the label back out, one that finds it committed keeps it
    (counted once); a move that names labels but does not make the result exist writes none."""
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""
    named = {RESULT_LABELS_KEY: ["untrusted"]}

    async def run() -> None:
        store, _ = await _store(kind, tmp_path, dsn)
        meters = store.meters()

        async def move(
            inv: InvocationRecord, to: State, data: dict[str, Any] | None = None
        ) -> InvocationRecord:
            new = replace(inv, state=to, updated_at=AT)
            assert await store.transition(new, inv.state, [_event(inv.invocation_id, 0, to, data)])
            return new

        async def executing(n: int) -> InvocationRecord:
            rec = InvocationRecord(
                f"inv_{n}", "ses_1", "m", f"p{n}", "w.write", "v1", "acme", "carol", State.EXECUTING, b"{}",
                created_at=AT, updated_at=AT,
            )  # fmt: skip
            await store.create_invocation(rec, [_event(rec.invocation_id, 1, State.EXECUTING)])
            return rec

        one = await move(await executing(1), State.OUTCOME_UNKNOWN, named)
        assert await meters.labels("acme", "ses_1") == ("untrusted",)
        assert await meters.labels("acme", "ses_2") == ()
        await move(one, State.FAILED_BEFORE_COMMIT)  # reconciled: not committed
        assert await meters.labels("acme", "ses_1") == ()
        two = await move(await executing(2), State.OUTCOME_UNKNOWN, named)
        two = await move(two, State.COMMITTED, named)  # reconciled: committed (named again: not twice)
        await move(two, State.OBSERVED, named)
        three = await move(await executing(3), State.OUTCOME_UNKNOWN, named)
        await move(three, State.FAILED_BEFORE_COMMIT)  # takes back its own one only
        assert await meters.labels("acme", "ses_1") == ("untrusted",)
        await move(await executing(4), State.FAILED_BEFORE_COMMIT, named)  # no result: no label
        await move(await executing(5), State.EXECUTING, named)
        four = InvocationRecord(
            "inv_9", "ses_3", "m", "p9", "w.write", "v1", "acme", "carol", State.EXECUTING, b"{}"
        )
        await store.create_invocation(four, [_event("inv_9", 1, State.EXECUTING)])
        await move(four, State.FAILED_BEFORE_COMMIT, named)
        assert await meters.labels("acme", "ses_3") == ()
        await store.close()

    asyncio.run(run())
