"""Every decision recorded, and 6.13 question 8 answered from a record, through the gRPC API.

* ``Authorizer.Authorize`` (the generic decision point): each answer is a ``decisions`` row in
  the store (before the answer), a decision-log line, ``callgate_authorize_decisions_total`` and a
  span, all with the caller's ``traceparent`` trace id; ``callgate explain --decision`` shows it.
  A store that cannot record it fails the call (``store_unavailable``): no unrecorded decision.
* ``ListToolsRequest.fed_invocation_ids``: the runtime names the tool messages it put into a model
  call; they are checked (same session, a tool message handed out) and stored with the tool view,
  and ``callgate explain`` answers question 8 from that record (else labelled as inferred).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from callgate.arguments.digest import canonicalize
from callgate.cli.explain import ContextSource, SQLiteReader, explain, render_text
from callgate.config import ObservabilityConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.observability.tracing import TracingSink
from callgate.store.base import Usage
from tests.conftest import POLICIES, ROOT, Running, start_sidecar, stop_sidecar
from tests.test_confirmation import error_reason
from tests.test_observability import sample, scrape, sinks_of

TRACE_ID = "5af7651916cd43dd8448eb211c80319d"
CALLER_SPAN = "c7ad6b7169203332"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
SECRET = "sk-CONTEXT-SECRET-0042"
CONTEXT = {"tool": "files.delete@v1", "args": {"path": f"/tmp/{SECRET}"}}
"""An Authorize context whose values must never be stored, logged or traced."""


def authorize(sc: Running, subject: str, capability: str, context: dict[str, Any], **kw: Any) -> Any:
    ctx = struct_pb2.Struct()
    ctx.update(context)
    return sc.authorizer.Authorize(
        pb.AuthorizeRequest(
            subject=pb.Subject(tenant="acme", id=subject), capability=capability, resource="file:/tmp/a",
            context=ctx,
        ),
        **kw,
    )  # fmt: skip


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate", "explain", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_config(tmp: Path, db: Path) -> Path:
    cfg = tmp / "explain.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n\n[policy]\ndir = "{POLICIES}"\n')
    return cfg


# ------------------------------------------------------------------------------- Authorize
def test_authorize_decisions_are_recorded_logged_counted_and_traced(tmp_path: Path) -> None:
    log_path = tmp_path / "decisions.jsonl"
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(
            decision_log=str(log_path), metrics_address="127.0.0.1:0", tracing_exporter="memory"
        )
    )
    try:
        context = CONTEXT
        allow = authorize(sc, "carol", "files.delete", context, metadata=(("traceparent", TRACEPARENT),))
        deny = authorize(sc, "bob", "files.delete", context)
        assert allow.decision.effect == pb.ALLOW and deny.decision.effect == pb.DENY
        assert allow.decision_id.startswith("dec_") and deny.decision_id.startswith("dec_")
        assert allow.decision_id != deny.decision_id

        # the record, in the store
        rec = sc.call(sc.sidecar.components.store.get_decision(allow.decision_id))
        assert rec is not None and (rec.tenant, rec.subject, rec.capability) == (
            "acme",
            "carol",
            "files.delete",
        )
        assert rec.trace_id == TRACE_ID and rec.parent_span_id == CALLER_SPAN and len(rec.span_id) == 16
        assert rec.decision["effect"] == "allow" and rec.decision["policy_ids"] == ["files-delete-admin"]
        assert rec.context_digest == "sha256:" + hashlib.sha256(canonicalize(context)).hexdigest()
        assert rec.context_keys == ("args", "tool") and rec.policy_revision
        other = sc.call(sc.sidecar.components.store.get_decision(deny.decision_id))
        assert other.trace_id != TRACE_ID and other.parent_span_id == ""  # no traceparent: a new trace
        assert SECRET.encode() not in sc.db_path.read_bytes() + _wal(sc.db_path)

        # the metric: its own family; the proposals' series are untouched
        m = scrape(sc)
        A = "callgate_authorize_decisions_total"
        assert sample(m, A, effect="allow", error_code="none") == 1
        assert sample(m, A, effect="deny", error_code="none") == 1
        assert not [k for k in m if k[0] == "callgate_decisions_total"]

        # the span: the record's span id, below the caller's span
        tracer = next(s for s in sinks_of(sc) if isinstance(s, TracingSink))
        spans = [s for s in tracer.finished_spans() if s.name == "callgate.authorize"]
        by_span = {format(s.context.span_id, "016x"): s for s in spans}
        span = by_span[rec.span_id]
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.parent is not None and format(span.parent.span_id, "016x") == CALLER_SPAN
        assert span.attributes["callgate.decision_id"] == allow.decision_id
        assert span.attributes["callgate.decision.effect"] == "allow"
        assert format(by_span[other.span_id].context.trace_id, "032x") == other.trace_id
        assert not any(SECRET in str(v) for s in spans for v in s.attributes.values())
    finally:
        stop_sidecar(sc, tmp)

    # the decision-log line (lossless mode: written before the answer)
    text = log_path.read_text(encoding="utf-8")
    assert SECRET not in text
    lines = {d["decision_id"]: d for d in read_lines_text(text) if d["kind"] == "authorize_decided"}
    line = lines[allow.decision_id]
    assert line["trace_id"] == TRACE_ID and line["parent_span_id"] == CALLER_SPAN
    assert line["span_id"] == rec.span_id and line["context_digest"] == rec.context_digest
    assert line["decision"]["effect"] == "allow" and line["capability"] == "files.delete"
    assert lines[deny.decision_id]["decision"]["effect"] == "deny"


def read_lines_text(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _wal(db: Path) -> bytes:
    wal = db.parent / (db.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""


def test_authorize_without_a_record_is_refused() -> None:
    """A store that cannot write the decision fails the call: no answer without its record."""
    sc, tmp = start_sidecar()
    try:
        ok = authorize(sc, "carol", "files.delete", CONTEXT)
        assert ok.decision.effect == pb.ALLOW
        with sqlite3.connect(sc.db_path) as other:  # the table is gone: every insert fails
            other.execute("DROP TABLE decisions")
        with pytest.raises(grpc.RpcError) as err:
            authorize(sc, "carol", "files.delete", CONTEXT)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_reason(err.value) == "store_unavailable"
    finally:
        stop_sidecar(sc, tmp)
    # a lossless decision log that cannot be written withholds the decision too
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(decision_log="/dev/full", decision_log_mode="lossless")
    )
    try:
        with pytest.raises(grpc.RpcError) as err:
            authorize(sc, "carol", "files.delete", CONTEXT)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_reason(err.value) == "store_unavailable"
    finally:
        stop_sidecar(sc, tmp)


def test_explain_decision_cli_shows_the_record() -> None:
    sc, tmp = start_sidecar()
    try:
        resp = authorize(sc, "carol", "files.delete", CONTEXT, metadata=(("traceparent", TRACEPARENT),))
        unknown = authorize(sc, "carol", "files.nuke", CONTEXT)
        assert unknown.decision.error_code == "policy_evaluation_error"
        cfg = write_config(tmp, sc.db_path)
        r = run_cli("--decision", resp.decision_id, "--config", str(cfg))
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"decision {resp.decision_id}  ALLOW")
        assert "acme/carol asked for files.delete on file:/tmp/a" in r.stdout
        assert f"trace {TRACE_ID}" in r.stdout and f"caller span {CALLER_SPAN}" in r.stdout
        assert "files-delete-admin" in r.stdout and "keys args, tool (values are not recorded)" in r.stdout
        assert SECRET not in r.stdout
        r = run_cli("--decision", unknown.decision_id, "--config", str(cfg), "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["record"]["decision"]["effect"] == "deny"
        assert doc["record"]["decision"]["error_code"] == "policy_evaluation_error"
        assert doc["snapshot"]["engine"] == "cedar"
        r = run_cli("--decision", "dec_nope", "--config", str(cfg))
        assert r.returncode == 1 and "unknown decision_id 'dec_nope'" in r.stderr
        r = run_cli("--config", str(cfg))
        assert r.returncode == 2 and "one of them" in r.stderr
    finally:
        stop_sidecar(sc, tmp)


# ------------------------------------------------------------------------------- question 8
def observed_weather(
    sc: Running, sid: str, proposal_id: str, model_call_id: str = "mc-1"
) -> tuple[str, bytes]:
    """A weather.get invocation run to OBSERVED; its id and tool message."""
    resp = sc.propose(
        sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id=proposal_id,
        model_call_id=model_call_id,
    )  # fmt: skip
    att = sc.executor.BeginAttempt(pb.BeginAttemptRequest(invocation_id=resp.invocation_id, executor_id="w"))
    sc.executor.ReportOutcome(
        pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED)
    )
    enc = sc.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=resp.invocation_id, status="ok", value=b'{"summary": "sunny"}')
    )
    return resp.invocation_id, bytes(enc.message)


def list_tools(sc: Running, sid: str, model_call_id: str, fed: list[str]) -> pb.ListToolsResponse:
    return sc.gate.ListTools(
        pb.ListToolsRequest(session_id=sid, model_call_id=model_call_id, fed_invocation_ids=fed)
    )


def test_fed_results_are_recorded_and_explain_answers_question_8_from_them() -> None:
    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        fed_inv, message = observed_weather(sc, sid, "p1")
        unfed_inv, _ = observed_weather(sc, sid, "p2")
        sc.clock.advance(2)
        view = list_tools(sc, sid, "mc-2", [fed_inv, fed_inv])  # a repeated id counts once
        assert view.tool_set_digest.startswith("sha256:")
        store = sc.sidecar.components.store
        fed = sc.call(store.list_fed(fed_inv))
        assert [(f.model_call_id, f.session_id) for f in fed] == [("mc-2", sid)]
        assert fed[0].message_sha256 == hashlib.sha256(message).hexdigest()

        x = sc.call(explain(store, fed_inv))
        assert x is not None and x.context.source is ContextSource.RECORDED
        assert [f.model_call_id for f in x.context.fed_into] == ["mc-2"] and x.context.fed_into[
            0
        ].matches_message
        assert x.context.next_model_calls == ()  # no inference when the runtime recorded it
        text = render_text(x)
        assert f"fed into model call mc-2 at {fed[0].at} (the tool message above)" in text
        assert "INFERRED" not in text

        # the read-only reader (the CLI's) sees the same record; without a record for an
        # invocation, question 8 falls back to the old inference, labelled as such
        reader = SQLiteReader(sc.db_path)
        try:
            assert [f.model_call_id for f in asyncio.run(reader.list_fed(fed_inv))] == ["mc-2"]
            y = asyncio.run(explain(reader, unfed_inv))
        finally:
            reader.close()
        assert y is not None and y.context.source is ContextSource.INFERRED and not y.context.fed_into
        assert [n.model_call_id for n in y.context.next_model_calls] == ["mc-2"]
        assert "INFERRED" in render_text(y) and "next model call mc-2" in render_text(y)
        r = run_cli(fed_inv, "--config", str(write_config(tmp, sc.db_path)))
        assert r.returncode == 0, r.stderr
        assert "fed into model call mc-2" in r.stdout
    finally:
        stop_sidecar(sc, tmp)


def test_fed_ids_that_are_not_delivered_results_of_the_session_refuse_the_whole_call() -> None:
    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        good, _ = observed_weather(sc, sid, "p1")
        prepared = sc.propose(sid, "weather.get@v1", {"city": "Rome", "date": "tomorrow"}, proposal_id="p2")
        other_sid = sc.open_session(subject="bob")
        sc.list_tools(other_sid)
        foreign, _ = observed_weather(sc, other_sid, "p3")
        store = sc.sidecar.components.store
        usage_before = used(sc, sid)
        for bad, why in (
            ("inv_does_not_exist", "no invocation of this session"),
            (foreign, "no invocation of this session"),  # another session's result
            (prepared.invocation_id, "has no tool message handed out"),
            ("", "must be 1..256"),
        ):
            with pytest.raises(grpc.RpcError) as err:
                list_tools(sc, sid, "mc-9", [good, bad])
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
            assert error_reason(err.value) == "invalid_request" and why in (err.value.details() or ""), bad
        # nothing half-recorded: no tool view, no fed record, no model call counted
        assert sc.call(store.get_tool_view(sid, "mc-9")) is None
        assert sc.call(store.list_fed(good)) == []
        assert used(sc, sid) == usage_before
        with pytest.raises(grpc.RpcError) as unlisted:  # the runtime's error (docs/ERRORS.md)
            sc.propose(sid, "weather.get@v1", {"city": "Rome", "date": "tomorrow"}, model_call_id="mc-9")
        assert error_reason(unlisted.value) == "tools_not_listed"
    finally:
        stop_sidecar(sc, tmp)


def used(sc: Running, sid: str) -> Usage:
    """The session's counted usage, once every pending increment is written."""
    sc.call(sc.sidecar.components.gate.drain_usage())
    usage: Usage = sc.call(sc.sidecar.components.store.add_usage(sid, Usage()))
    return usage


def test_a_cancelled_after_commit_result_cannot_be_claimed_as_fed() -> None:
    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        resp = sc.propose(sid, "weather.get@v1", {"city": "Oslo", "date": "tomorrow"})
        att = sc.executor.BeginAttempt(
            pb.BeginAttemptRequest(invocation_id=resp.invocation_id, executor_id="w")
        )
        sc.gate.Cancel(
            pb.CancelRequest(
                session_id=sc.session_of(resp.invocation_id),
                invocation_id=resp.invocation_id,
                reason="user left",
            )
        )
        sc.executor.ReportOutcome(
            pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED)
        )
        with pytest.raises(grpc.RpcError) as err:
            list_tools(sc, sid, "mc-2", [resp.invocation_id])
        assert error_reason(err.value) == "invalid_request"
    finally:
        stop_sidecar(sc, tmp)


def test_bounded_decision_log_writes_authorize_lines_off_the_call(tmp_path: Path) -> None:
    """In ``bounded`` mode the decision line is queued and written by the background writer."""
    from callgate.observability.decision_log import DecisionLog
    from callgate.observability.metrics import Metrics
    from callgate.store.base import DecisionRecord

    path = tmp_path / "bounded.jsonl"
    record = DecisionRecord(
        decision_id="dec_1", at="2026-07-19T06:00:00Z", tenant="acme", subject="carol",
        capability="files.delete", resource="file:/tmp/a", context_digest="sha256:00",
        context_keys=("args",), decision={"effect": "deny", "error_code": ""}, policy_revision="r1",
        trace_id=TRACE_ID, span_id="1b6e0c4f2a9d7e35",
    )  # fmt: skip

    async def run() -> None:
        log = DecisionLog(target="file", path=path, mode="bounded", metrics=Metrics(enabled=False))
        await log.publish_decision(record)
        await log.close()

    asyncio.run(run())
    (line,) = [json.loads(t) for t in path.read_text().splitlines()]
    assert line["kind"] == "authorize_decided" and line["decision_id"] == "dec_1"
    assert line["trace_id"] == TRACE_ID and line["decision"]["effect"] == "deny"
