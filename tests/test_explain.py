"""`callgate explain`: the eight questions of spec 6.13, answered from the event store of a real
sidecar after the 6.12 calendar flow (lost answer, same-key retry, commit, tool message)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.cli.explain import SQLiteReader, explain, printable, render_text, to_json
from callgate.config import SecretConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import POLICIES, ROOT, Running, start_sidecar
from tests.test_execution import CANARY, FakeCalendar, propose_event, run_attempt

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


_STOPPED: set[int] = set()


def stop_keeping_files(running: Running) -> None:
    """Stop the sidecar but keep its directory (the CLI reads the stopped sidecar's store)."""
    if id(running) in _STOPPED:
        return
    _STOPPED.add(id(running))
    for ch in running.channels.values():
        ch.close()
    running.call(running.sidecar.stop(0))
    running.loop.call_soon_threadsafe(running.loop.stop)


@pytest.fixture
def flow() -> Iterator[tuple[Running, Path, dict[str, Any]]]:
    """The 6.12 trace: propose (with the caller's traceparent), confirm, attempt 1 loses the
    answer (OUTCOME_UNKNOWN), the runtime re-proposes with the same key (replay), attempt 2 commits
    evt_1, the result is encoded (OBSERVED), then the next model call lists tools."""
    os.environ["CALLGATE_TEST_CALENDAR_TOKEN"] = CANARY
    sc, tmp = start_sidecar(
        secrets=(SecretConfig(name="calendar_api_token", env="CALLGATE_TEST_CALENDAR_TOKEN",
                              tools=("calendar.create_event",), resources=("calendar:*",)),)
    )  # fmt: skip
    try:
        cal = FakeCalendar()
        sid = sc.open_session(subject="alice", tz="Asia/Shanghai")
        sc.list_tools(sid)
        first = sc.propose(
            sid, "calendar.create_event@v1", {"title": "带护照", "start": "2026-07-20T09:00", "duration_minutes": 10},
            idempotency_key="req-42:create-event:1", metadata=(("traceparent", TRACEPARENT),),
        )  # fmt: skip
        inv = first.invocation_id
        sc.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=inv, digest=first.digest, confirmed_by="alice")
        )
        att1, out1 = run_attempt(sc, cal, inv, lose_answer=True)
        again = propose_event(sc, sid, "req-42:create-event:1")
        assert again.idempotent_replay
        sc.clock.advance(out1.retry.backoff_ms / 1000 + 0.001)  # the advised backoff
        att2, out2 = run_attempt(sc, cal, inv)
        assert pb.State.Name(out2.state) == "COMMITTED"
        enc = sc.executor.EncodeResult(
            pb.EncodeResultRequest(
                invocation_id=inv, status="ok", value=json.dumps({"event_id": "evt_1"}).encode()
            )
        )
        sc.clock.advance(5)
        sc.list_tools(sid, model_call_id="mc-2")  # the next model call, with the tool message in context
        facts = {
            "invocation_id": inv, "session_id": sid, "digest": first.digest, "message": enc.message,
            "attempts": (att1.attempt_id, att2.attempt_id),
        }  # fmt: skip
        yield sc, tmp, facts
    finally:
        stop_keeping_files(sc)
        _STOPPED.discard(id(sc))
        shutil.rmtree(tmp, ignore_errors=True)


def check_eight_answers(x: Any, facts: dict[str, Any]) -> None:
    assert x is not None and x.invocation_id == facts["invocation_id"] and x.state == "OBSERVED"
    # 1. the ToolSpec the model saw
    t = x.tool_seen
    assert t.view_recorded and t.shown and t.model_call_id == "mc-1"
    assert t.spec_digest.startswith("sha256:") and t.validated_spec_digest == t.spec_digest
    assert "calendar.create_event@v1" in t.tools and t.tool_set_digest.startswith("sha256:")
    # 2. the raw proposal bytes, exactly
    raw = json.dumps(
        {"title": "带护照", "start": "2026-07-20T09:00", "duration_minutes": 10}, ensure_ascii=False
    ).encode()
    assert (
        x.raw_proposal.raw == raw and x.raw_proposal.matches_event and x.raw_proposal.proposal_id == "call_1"
    )
    # 3. what parser, validator and normalizer produced
    kinds = [s.kind for s in x.stages]
    assert kinds[:7] == [
        "proposed",
        "parsed",
        "validated",
        "normalized",
        "authorized",
        "confirmation_requested",
        "confirmed",
    ]
    validated = next(s for s in x.stages if s.kind == "validated")
    assert (
        validated.output["dialect"].endswith("2020-12/schema")
        and validated.output["format_assertion"] is True
    )
    normalized = next(s for s in x.stages if s.kind == "normalized")
    assert normalized.output["reference_clock"] == "2026-07-19T14:00:00+08:00"
    assert json.loads(x.normalized_arguments) == {
        "calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10,
    }  # fmt: skip
    assert x.digest == facts["digest"] and all(s.duration_us >= 0 for s in x.stages)
    # 4. who authorized with which capability, and the confirmation
    a = x.authorization
    assert a is not None and (a.subject_tenant, a.subject_id) == ("acme", "alice")
    assert a.capabilities == ("calendar.create",) and a.resource == "calendar:primary"
    assert a.effect == "confirm" and a.policy_ids == ("calendar-create-scheduler",) and a.engine == "cedar"
    assert a.confirmation.status == "confirmed" and a.confirmation.confirmed_by == "alice"
    assert a.confirmation.confirmed_digest == x.digest == a.confirmation.requested_digest
    # 5. each attempt
    assert [at.attempt_id for at in x.attempts] == list(facts["attempts"])
    assert [at.outcome for at in x.attempts] == ["OUTCOME_UNKNOWN", "COMMITTED"]
    assert x.attempts[0].retry_reason.startswith("retry:") and x.attempts[1].external_resource_id == "evt_1"
    assert all(at.jti and at.executor_id == "calendar-executor" for at in x.attempts)
    # 6. commit status
    assert (
        x.commit.status == "committed" and x.commit.external_resource_id == "evt_1" and x.commit.commit_time
    )
    assert x.commit.idempotency_key == "req-42:create-event:1"
    # 7. the tool message bytes
    assert x.tool_message is not None and x.tool_message.message == facts["message"]
    assert x.tool_message.status == "ok" and not x.tool_message.truncated
    # 8. the next context and the trace
    assert x.context.tool_message_in_context
    assert [r.proposal_id for r in x.context.replays] == ["call_1"]
    assert x.context.trace_ids[0] == TRACE_ID and x.context.caller_parent_span_id == "00f067aa0ba902b7"
    assert all(s.span_id for s in x.stages) and len({s.span_id for s in x.stages}) == len(x.stages)


def test_explain_answers_the_eight_questions_of_6_13(flow: tuple[Running, Path, dict[str, Any]]) -> None:
    sc, tmp, facts = flow
    # through the live store (what the sidecar itself holds)
    live = sc.call(explain(sc.sidecar.components.store, facts["invocation_id"]))
    check_eight_answers(live, facts)
    # through the read-only reader, while the sidecar runs
    reader = SQLiteReader(sc.db_path)
    try:
        x = asyncio.run(explain(reader, facts["invocation_id"]))
    finally:
        reader.close()
    check_eight_answers(x, facts)
    assert x is not None
    assert [n.model_call_id for n in x.context.next_model_calls] == ["mc-2"]
    assert x.authorization is not None and x.authorization.snapshot is not None
    assert x.authorization.snapshot["engine"] == "cedar"
    text = render_text(x)
    for heading in ("1. ToolSpec", "2. Raw proposal", "3. Stage outputs", "4. Authorization", "5. Attempts",
                    "6. Commit status: COMMITTED", "7. Tool message", "8. Next context and trace"):  # fmt: skip
        assert heading in text, heading
    assert "带护照" in text and "evt_1" in text and "confirmed by alice" in text and TRACE_ID in text
    assert "next model call mc-2" in text
    doc = to_json(x)
    assert json.loads(json.dumps(doc))["raw_proposal"]["raw"]["utf8"] == facts_raw()


def facts_raw() -> str:
    return json.dumps(
        {"title": "带护照", "start": "2026-07-20T09:00", "duration_minutes": 10}, ensure_ascii=False
    )


def write_config(tmp: Path, db: Path) -> Path:
    cfg = tmp / "explain.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n\n[policy]\ndir = "{POLICIES}"\n')
    return cfg


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate", "explain", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_explain_on_the_store_of_a_stopped_sidecar(flow: tuple[Running, Path, dict[str, Any]]) -> None:
    sc, tmp, facts = flow
    stop_keeping_files(sc)
    cfg = write_config(tmp, sc.db_path)
    r = run_cli(facts["invocation_id"], "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"invocation {facts['invocation_id']}  calendar.create_event@v1  state OBSERVED")
    assert "6. Commit status: COMMITTED" in out and "external resource evt_1" in out
    assert "calendar.create_event@v1.json" in out  # the ToolSpec file with the digest the model saw
    assert facts["message"].decode() in out
    r = run_cli(facts["invocation_id"], "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["commit"]["status"] == "committed"
    assert doc["tool_message"]["message"]["utf8"] == facts["message"].decode()
    assert [a["outcome"] for a in doc["attempts"]] == ["OUTCOME_UNKNOWN", "COMMITTED"]
    assert doc["authorization"]["confirmation"]["status"] == "confirmed"
    assert doc["context"]["trace_ids"][0] == TRACE_ID
    # the stopped store was only read: not even WAL side files were created
    assert not any((sc.db_path.parent / (sc.db_path.name + ext)).exists() for ext in ("-wal", "-shm"))


def test_cli_explain_unknown_invocation_exits_1(flow: tuple[Running, Path, dict[str, Any]]) -> None:
    sc, tmp, _ = flow
    stop_keeping_files(sc)
    r = run_cli("inv_does_not_exist", "--config", str(write_config(tmp, sc.db_path)))
    assert r.returncode == 1
    assert "unknown invocation_id 'inv_does_not_exist'" in r.stderr and r.stdout == ""


def test_cli_explain_without_a_store_exits_2(tmp_path: Path) -> None:
    r = run_cli("inv_x", "--config", str(write_config(tmp_path, tmp_path / "missing.db")))
    assert r.returncode == 2 and "cannot open the event store" in r.stderr


def test_cli_explain_refuses_when_it_cannot_read_the_secrets_to_mask(tmp_path: Path) -> None:
    """explain masks each configured secret in the arguments it shows (docs/CONSOLE.md, "Secrets
    are masked"); a secret it cannot read could not be masked, so it shows nothing (exit 2, fail
    closed) and says which, before it opens the store."""
    cfg = write_config(tmp_path, tmp_path / "missing.db")
    cfg.write_text(
        cfg.read_text()
        + '\n[[secrets]]\nname = "calendar_api_token"\nenv = "CALLGATE_TEST_UNSET_SECRET_ENV"\n'
        + 'tools = ["calendar.create_event"]\n'
    )
    r = run_cli("inv_x", "--config", str(cfg))
    assert r.returncode == 2 and r.stdout == ""
    assert "needed to mask them" in r.stderr and "CALLGATE_TEST_UNSET_SECRET_ENV" in r.stderr


def test_explain_a_rejected_proposal_with_hostile_bytes() -> None:
    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        hostile = b'{"city": "\x1b[2J\x1b]0;pwned\x07", "date": "\xff\xfe"}'
        r = sc.propose(sid, "weather.get@v1", hostile)
        assert r.rejection.code == "invalid_utf8"
        x = sc.call(explain(sc.sidecar.components.store, r.invocation_id))
    finally:
        stop_keeping_files(sc)
        _STOPPED.discard(id(sc))
        shutil.rmtree(tmp, ignore_errors=True)
    assert x is not None and x.raw_proposal.raw == hostile
    assert x.authorization is None and x.attempts == () and x.tool_message is None
    assert x.commit.status == "not_committed" and x.state == "PARSE_REJECTED"
    rejected = x.stages[-1]
    assert rejected.kind == "parse_rejected" and rejected.stage == "parse"
    text = render_text(x)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\xff\\xfe" in text
    assert "4. Authorization\n   not reached" in text
    doc = to_json(x)
    assert doc["raw_proposal"]["raw"]["utf8"] is None and doc["raw_proposal"]["raw"]["length"] == len(hostile)


def test_printable_never_raises_and_escapes_controls() -> None:
    assert printable(b"ok \xe5\xb8\xa6\n") == "ok 带\n"
    assert printable(b"\x00\x1b\x7f\xc3") == "\\x00\\x1b\\x7f\\xc3"
    assert printable("a\u202eb".encode()) == "a\\u202eb"  # bidi override
