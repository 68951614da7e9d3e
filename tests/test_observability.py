"""Metrics, decision logs and traces against a running sidecar (docs/OPERATE.md).

Metrics are scraped over HTTP from the sidecar's own ``/metrics`` endpoint and parsed with
prometheus_client's parser; decision logs are read back from their file; spans come from the
``memory`` exporter of the sidecar's own tracer provider.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from callgate.base.errors import LoadError
from callgate.config import ObservabilityConfig, load_config
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.observability.decision_log import DecisionLog, Masker
from callgate.observability.metrics import Metrics
from callgate.observability.tracing import TracingSink
from tests.conftest import POLICIES, Running, start_sidecar, stop_sidecar
from tests.test_confirmation import error_reason

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


# ------------------------------------------------------------------------------- helpers
def scrape(sc: Running) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """All samples of the sidecar's /metrics as {(name, sorted labels): value}."""
    server = sc.sidecar.metrics_server
    assert server is not None
    with urllib.request.urlopen(server.url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def names_with(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, label: str
) -> set[str]:
    return {dict(lbls)[label] for (n, lbls) in samples if n == name and label in dict(lbls)}


def sinks_of(sc: Running) -> list[Any]:
    return list(getattr(sc.sidecar.components.store, "sinks", []))


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CAL = "calendar.create_event@v1"


@pytest.fixture
def metered() -> Iterator[Running]:
    running, tmp = start_sidecar(observability=ObservabilityConfig(metrics_address="127.0.0.1:0"))
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


# ------------------------------------------------------------------------------- metrics
def test_metrics_endpoint_counts_decisions_rejections_stages_and_execution(metered: Running) -> None:
    sc = metered
    sid = sc.open_session(subject="alice")
    sc.list_tools(sid)
    allow = sc.propose(sid, "weather.get@v1", {"city": "Shanghai", "date": "tomorrow"}, proposal_id="p1")
    assert allow.decision.effect == pb.ALLOW
    deny = sc.propose(sid, CAL, {"title": "x", "start": "2026-07-20T09:00", "duration_minutes": 600},
                      idempotency_key="k-deny", proposal_id="p2")  # fmt: skip
    assert deny.decision.effect == pb.DENY
    bad = sc.propose(sid, "weather.get@v1", b'{"city": "A", "city": "B"}', proposal_id="p3")
    assert bad.rejection.code == "duplicate_key"
    schema = sc.propose(
        sid, "weather.get@v1", {"city": "Shanghai", "date": "tomorrow", "x": 1}, proposal_id="p4"
    )
    assert schema.rejection.code == "schema_violation"
    unknown = sc.propose(sid, "weather.get@v9", {}, proposal_id="p5")
    assert unknown.rejection.code == "unknown_tool_version"
    confirm = sc.propose(sid, CAL, {"title": "带护照", "start": "2026-07-20T09:00", "duration_minutes": 10},
                         idempotency_key="k-1", proposal_id="p6")  # fmt: skip
    assert confirm.decision.effect == pb.CONFIRM
    sc.confirmations.Confirm(
        pb.ConfirmRequest(invocation_id=confirm.invocation_id, digest=confirm.digest, confirmed_by="alice")
    )
    att = sc.executor.BeginAttempt(
        pb.BeginAttemptRequest(invocation_id=confirm.invocation_id, executor_id="cal")
    )
    sc.executor.ReportOutcome(
        pb.ReportOutcomeRequest(
            attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id="evt_1"
        )
    )
    replay = sc.propose(sid, CAL, {"title": "带护照", "start": "2026-07-20T09:00", "duration_minutes": 10},
                        idempotency_key="k-1", proposal_id="p7")  # fmt: skip
    assert replay.idempotent_replay
    with pytest.raises(grpc.RpcError):
        sc.gate.GetInvocation(pb.GetInvocationRequest(invocation_id="inv_nope", session_id=sid))

    m = scrape(sc)
    D = "callgate_decisions_total"
    assert sample(m, D, effect="allow", tool="weather.get@v1", error_code="none") == 1
    assert sample(m, D, effect="deny", tool=CAL, error_code="none") == 1
    assert sample(m, D, effect="confirm", tool=CAL, error_code="none") == 1
    R = "callgate_proposals_rejected_total"
    assert sample(m, R, stage="parse", code="duplicate_key", tool="weather.get@v1") == 1
    assert sample(m, R, stage="validate", code="schema_violation", tool="weather.get@v1") == 1
    assert sample(m, R, stage="lookup", code="unknown_tool_version", tool="unknown") == 1
    for stage in ("parse", "validate", "normalize", "authorize"):
        assert sample(m, "callgate_stage_duration_seconds_count", stage=stage) >= 3, stage
        assert sample(m, "callgate_stage_duration_seconds_bucket", stage=stage, le="+Inf") >= 3
    assert sample(m, "callgate_stage_duration_seconds_bucket", stage="parse", le="1e-05") is not None
    assert sample(m, "callgate_credentials_issued_total", tool=CAL) == 1
    assert sample(m, "callgate_attempt_outcomes_total", outcome="committed", tool=CAL) == 1
    assert sample(m, "callgate_idempotency_replays_total", tool=CAL) == 1
    assert sample(m, "callgate_confirmations_total", result="confirmed", tool=CAL) == 1
    assert sample(m, "callgate_invocations_terminal_total", state="AUTHORIZATION_REJECTED") == 1
    assert sample(m, "callgate_invocations_terminal_total", state="PARSE_REJECTED") == 2
    assert sample(m, "callgate_invocations_terminal_total", state="VALIDATION_REJECTED") == 1
    RPC = "callgate_rpc_duration_seconds_count"
    assert sample(m, RPC, service="callgate.v1.Gate", method="Propose", code="ok") == 7
    assert sample(m, RPC, service="callgate.v1.Confirmations", method="Confirm", code="ok") == 1
    assert sample(m, RPC, service="callgate.v1.Executor", method="BeginAttempt", code="ok") == 1
    assert (
        sample(m, RPC, service="callgate.v1.Gate", method="GetInvocation", code="invocation_not_found") == 1
    )
    assert sample(m, "callgate_audit_events_dropped_total", reason="queue_full") == 0
    assert sample(m, "callgate_audit_write_failures_total") == 0
    revision = sc.sidecar.components.gate.snapshot.revision
    assert sample(m, "callgate_policy_snapshot_info", revision=revision, engine="cedar") == 1
    assert ("process_cpu_seconds_total", ()) in m


def test_invented_tool_names_never_become_labels(metered: Running) -> None:
    sid = metered.open_session()
    metered.list_tools(sid)
    for i in range(20):
        r = metered.propose(sid, f"invented.by.model.{i}@v{i}", {"a": i}, proposal_id=f"p{i}")
        assert r.rejection.code == "unknown_tool_version"
    m = scrape(metered)
    tools = set()
    for name in ("callgate_proposals_rejected_total", "callgate_decisions_total"):
        tools |= names_with(m, name, "tool")
    assert tools == {"unknown"}
    assert (
        sample(
            m,
            "callgate_proposals_rejected_total",
            stage="lookup",
            code="unknown_tool_version",
            tool="unknown",
        )
        == 20
    )
    assert not any("invented" in str(k) for k in m)


def test_two_sidecars_in_one_process_have_separate_registries(metered: Running) -> None:
    other, tmp = start_sidecar(observability=ObservabilityConfig(metrics_address="127.0.0.1:0"))
    try:
        sid = other.open_session()
        other.list_tools(sid)
        other.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"})
        assert (
            sample(
                scrape(other),
                "callgate_decisions_total",
                effect="allow",
                tool="weather.get@v1",
                error_code="none",
            )
            == 1
        )
        assert (
            sample(
                scrape(metered),
                "callgate_decisions_total",
                effect="allow",
                tool="weather.get@v1",
                error_code="none",
            )
            == 0
        )
    finally:
        stop_sidecar(other, tmp)


def test_policy_reloads_are_counted_and_the_snapshot_info_follows(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    sc, tmp = start_sidecar(policies, observability=ObservabilityConfig(metrics_address="127.0.0.1:0"))
    try:
        before = sc.sidecar.components.gate.snapshot.revision
        cedar = policies / "cedar" / "policies.cedar"
        good = cedar.read_text()
        cedar.write_text(good + "\npermit (principal, action, resource) when { nonsense };\n")
        assert sc.call(sc.sidecar.reload()) is False
        cedar.write_text(
            good
            + '\n@id("extra")\nforbid (principal, action == Action::"weather.read", resource) when { false };\n'
        )
        assert sc.call(sc.sidecar.reload()) is True
        after = sc.sidecar.components.gate.snapshot.revision
        assert after != before
        m = scrape(sc)
        assert sample(m, "callgate_policy_reloads_total", result="failure") >= 1
        assert sample(m, "callgate_policy_reloads_total", result="success") >= 1
        assert sample(m, "callgate_policy_snapshot_info", revision=after, engine="cedar") == 1
        assert ("callgate_policy_snapshot_info", (("engine", "cedar"), ("revision", before))) not in m
    finally:
        stop_sidecar(sc, tmp)


def test_no_observability_configured_means_no_sinks_and_no_endpoint() -> None:
    sc, tmp = start_sidecar()
    try:
        # only the WatchInvocation wake-up sink (callgate/server/watch.py): no observability sink
        assert sinks_of(sc) == [sc.sidecar.components.watch]
        assert sc.sidecar.metrics_server is None
        sid = sc.open_session()
        sc.list_tools(sid)
        assert (
            sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}).decision.effect
            == pb.ALLOW
        )
    finally:
        stop_sidecar(sc, tmp)


# ------------------------------------------------------------------------------- decision log
def test_decision_log_lines_with_masking_and_keyed_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CG_TEST_MASK_KEY", "k3y")
    log_path = tmp_path / "decisions.jsonl"
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(
            decision_log=str(log_path),
            decision_log_mask=("/title", "calendar.create_event#/calendar_id"),
            decision_log_mask_key_env="CG_TEST_MASK_KEY",
        )
    )
    try:
        sid = sc.open_session(subject="alice")
        sc.list_tools(sid)
        args = {
            "title": "带护照 secret-title",
            "start": "2026-07-20T09:00",
            "calendar_id": "private-cal",
            "duration_minutes": 10,
        }
        r = sc.propose(sid, CAL, args, idempotency_key="k-1")
        again = sc.propose(sid, CAL, args, idempotency_key="k-1", proposal_id="call_2")
        assert again.idempotent_replay
        w = sc.propose(sid, "weather.get@v1", {"city": "Shanghai", "date": "tomorrow"}, proposal_id="w1")
        stored = sc.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=r.invocation_id, session_id=sid)
        ).events
    finally:
        stop_sidecar(sc, tmp)
    text = log_path.read_text(encoding="utf-8")
    assert "secret-title" not in text and "private-cal" not in text
    lines = read_lines(log_path)
    mine = [ln for ln in lines if ln["invocation_id"] == r.invocation_id]
    assert [ln["kind"] for ln in mine] == [e.kind for e in stored]
    assert [ln["event_id"] for ln in mine] == [e.event_id for e in stored]
    assert [ln["trace_id"] for ln in mine] == [e.trace_id for e in stored]  # the replay came on its own trace
    assert all(ln["tool"] == CAL for ln in mine)
    assert all(ln["tenant"] == "acme" and ln["subject"] == "alice" and ln["session_id"] == sid for ln in mine)
    normalized = next(ln for ln in mine if ln["kind"] == "normalized")
    masked = json.loads(normalized["data"]["normalized_arguments"])
    assert masked["title"].startswith("***:") and masked["calendar_id"].startswith("***:")
    assert masked["start"] == "2026-07-20T09:00:00+08:00" and masked["duration_minutes"] == 10
    assert normalized["data"]["digest"] == r.digest  # the digest is of the real arguments
    authorized = next(ln for ln in mine if ln["kind"] == "authorized")
    assert authorized["data"]["resource"].startswith("calendar:***:")
    assert authorized["data"]["decision"]["effect"] == "confirm"
    replay = next(ln for ln in mine if ln["kind"] == "idempotent_replay")  # appended: looked up
    assert replay["tool"] == CAL and replay["seq"] == 0
    weather = [ln for ln in lines if ln["invocation_id"] == w.invocation_id]
    assert (
        json.loads(next(ln for ln in weather if ln["kind"] == "normalized")["data"]["normalized_arguments"])[
            "city"
        ]
        == "Shanghai"
    )


def test_lossless_decision_log_withholds_the_decision_when_it_cannot_write() -> None:
    if not Path("/dev/full").exists():
        pytest.fail("this test needs /dev/full (present on every Linux machine of this kind)")
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(
            decision_log="/dev/full", decision_log_mode="lossless", metrics_address="127.0.0.1:0"
        )
    )
    try:
        sid = sc.open_session()  # no event: still works
        sc.list_tools(sid)
        with pytest.raises(grpc.RpcError) as err:
            sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"})
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_reason(err.value) == "store_unavailable"
        m = scrape(sc)
        assert sample(m, "callgate_audit_write_failures_total") == 1
        assert (
            sample(m, "callgate_decisions_total", effect="allow", tool="weather.get@v1", error_code="none")
            == 0
        )
        assert sample(m, "callgate_rpc_duration_seconds_count", service="callgate.v1.Gate", method="Propose",
                      code="store_unavailable") == 1  # fmt: skip
    finally:
        stop_sidecar(sc, tmp)


def test_bounded_decision_log_drops_and_counts_instead_of_failing(tmp_path: Path) -> None:
    log_path = tmp_path / "bounded.jsonl"
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(
            decision_log=str(log_path),
            decision_log_mode="bounded",
            decision_log_queue=1,
            metrics_address="127.0.0.1:0",
        )
    )
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        for i in range(3):  # each Propose publishes 6 events at once: the 1-slot queue overflows
            r = sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}, proposal_id=f"p{i}")
            assert r.decision.effect == pb.ALLOW
        m = scrape(sc)
        dropped = sample(m, "callgate_audit_events_dropped_total", reason="queue_full")
    finally:
        stop_sidecar(sc, tmp)  # flushes what is queued
    written = read_lines(log_path)
    assert dropped >= 3
    assert written and len(written) + dropped == 18


def test_bounded_decision_log_write_failures_never_fail_rpcs() -> None:
    if not Path("/dev/full").exists():
        pytest.fail("this test needs /dev/full (present on every Linux machine of this kind)")
    sc, tmp = start_sidecar(
        observability=ObservabilityConfig(
            decision_log="/dev/full", decision_log_mode="bounded", metrics_address="127.0.0.1:0"
        )
    )
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        assert (
            sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"}).decision.effect
            == pb.ALLOW
        )
        log_sink = next(s for s in sinks_of(sc) if isinstance(s, DecisionLog))
        sc.call(log_sink.flush())
        m = scrape(sc)
        assert sample(m, "callgate_audit_write_failures_total") >= 1
        assert sample(m, "callgate_audit_events_dropped_total", reason="write_failed") == 6
    finally:
        stop_sidecar(sc, tmp)


def test_decision_log_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    sc, tmp = start_sidecar(observability=ObservabilityConfig(decision_log="stdout"))
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        r = sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"})
    finally:
        stop_sidecar(sc, tmp)
    out = capfd.readouterr().out
    kinds = [
        json.loads(ln)["kind"] for ln in out.splitlines() if ln.startswith('{"v":1') and r.invocation_id in ln
    ]
    assert kinds == ["proposed", "parsed", "validated", "normalized", "authorized", "prepared"]


def test_masker_pointers() -> None:
    m = Masker(["/a/*/secret", "/list/1", "t@v2#/only_v2", "/x~1y"])
    doc = {
        "a": {"p": {"secret": 1, "k": 2}, "q": {"secret": [1]}},
        "list": [0, 1, 2],
        "only_v2": "s",
        "x/y": "z",
    }
    assert m.mask_arguments(doc, "t", "v1") == {
        "a": {"p": {"secret": "***", "k": 2}, "q": {"secret": "***"}}, "list": [0, "***", 2], "only_v2": "s", "x/y": "***",
    }  # fmt: skip
    assert m.mask_arguments(doc, "t", "v2")["only_v2"] == "***"
    assert doc["a"]["p"]["secret"] == 1  # a copy is masked, never the original
    keyed = Masker(["/s"], key=b"k")
    one, two = keyed.mask_arguments({"s": "same"}, "t", "v"), keyed.mask_arguments({"s": "same"}, "t", "v")
    assert one == two and one["s"].startswith("***:") and len(one["s"]) == 4 + 16
    assert keyed.mask_arguments({"s": "other"}, "t", "v") != one


# ------------------------------------------------------------------------------- traces
def test_stage_spans_carry_the_callers_trace_and_the_events_span_ids() -> None:
    sc, tmp = start_sidecar(observability=ObservabilityConfig(tracing_exporter="memory"))
    try:
        sid = sc.open_session(subject="alice")
        sc.list_tools(sid)
        r = sc.propose(sid, CAL, {"title": "secret-title-42", "start": "2026-07-20T09:00"}, idempotency_key="k-t",
                       metadata=(("traceparent", TRACEPARENT),))  # fmt: skip
        confirm_span = "00f067aa0ba902b7"
        sc.confirmations.Confirm(
            pb.ConfirmRequest(invocation_id=r.invocation_id, digest=r.digest, confirmed_by="alice"),
            metadata=(("traceparent", f"00-{TRACE_ID}-{confirm_span}-01"),),
        )
        events = sc.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=r.invocation_id, session_id=sid)
        ).events
        tracer = next(s for s in sinks_of(sc) if isinstance(s, TracingSink))
        spans = tracer.finished_spans()
    finally:
        stop_sidecar(sc, tmp)
    by_name = {s.name: s for s in spans}
    for stage in (
        "callgate.parse",
        "callgate.validate",
        "callgate.normalize",
        "callgate.authorize",
        "callgate.confirm",
    ):
        assert stage in by_name, sorted(by_name)
    assert {format(s.context.trace_id, "032x") for s in spans} == {TRACE_ID}
    assert all(e.trace_id == TRACE_ID for e in events)
    by_span = {format(s.context.span_id, "016x"): s for s in spans}
    for e in events:  # every event is a span with the event's own span id
        assert e.span_id in by_span, e.kind
        assert by_span[e.span_id].attributes["callgate.event.kind"] == e.kind
    propose_spans = [by_span[e.span_id] for e in events if e.kind != "confirmed"]
    assert {format(s.parent.span_id, "016x") for s in propose_spans} == {CALLER_SPAN}
    confirmed = next(e for e in events if e.kind == "confirmed")
    assert format(by_span[confirmed.span_id].parent.span_id, "016x") == confirm_span
    authorize = by_name["callgate.authorize"]
    assert authorize.attributes["callgate.decision.effect"] == "confirm"
    assert authorize.attributes["callgate.tool"] == CAL
    assert authorize.end_time >= authorize.start_time
    assert not any(
        "secret-title-42" in str(v) for s in spans for v in s.attributes.values()
    )  # no argument values


def test_spans_without_traceparent_use_the_events_new_trace() -> None:
    sc, tmp = start_sidecar(observability=ObservabilityConfig(tracing_exporter="memory"))
    try:
        sid = sc.open_session()
        sc.list_tools(sid)
        r = sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "tomorrow"})
        events = sc.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=r.invocation_id, session_id=sid)
        ).events
        tracer = next(s for s in sinks_of(sc) if isinstance(s, TracingSink))
        spans = tracer.finished_spans()
    finally:
        stop_sidecar(sc, tmp)
    assert {format(s.context.trace_id, "032x") for s in spans} == {events[0].trace_id}
    assert all(s.parent is None for s in spans)


# ------------------------------------------------------------------------------- config
def test_observability_config_section(tmp_path: Path) -> None:
    cfg_file = tmp_path / "callgate.toml"
    cfg_file.write_text(
        '[observability]\nmetrics_address = "0.0.0.0:9464"\ndecision_log = "var/decisions.jsonl"\n'
        'decision_log_mode = "bounded"\ndecision_log_mask = ["/title"]\ntracing_exporter = "console"\n'
        "tracing_sample_ratio = 0.25\n"
    )
    cfg = load_config(cfg_file)
    oc = cfg.observability
    assert oc.metrics_address == "0.0.0.0:9464" and oc.decision_log_mode == "bounded"
    assert oc.decision_log_mask == ("/title",) and oc.tracing_sample_ratio == 0.25
    for bad in (
        'decision_log_mode = "sometimes"',
        'metrics_address = "9464"',
        'tracing_exporter = "zipkin"',
        'decision_log_mask = ["title"]',
        "tracing_sample_ratio = 2.0",
        "decision_log_queue = 0",
        "nope = 1",
    ):
        cfg_file.write_text(f"[observability]\n{bad}\n")
        with pytest.raises(LoadError):
            load_config(cfg_file)


def test_missing_mask_key_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CG_TEST_ABSENT_KEY", raising=False)
    with pytest.raises(LoadError, match="CG_TEST_ABSENT_KEY"):
        start_sidecar(
            observability=ObservabilityConfig(
                decision_log="stdout", decision_log_mask_key_env="CG_TEST_ABSENT_KEY"
            )
        )


def test_metrics_object_is_per_instance() -> None:
    a, b = Metrics(), Metrics()
    a.audit_write_failed()
    assert a.registry.get_sample_value("callgate_audit_write_failures_total") == 1
    assert b.registry.get_sample_value("callgate_audit_write_failures_total") == 0
