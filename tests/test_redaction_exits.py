"""Redaction at every exit: each executor-supplied string, carrying a known secret in each encoding
the redactor knows, is sent through the real gRPC API; then every exit is read back: the agent's
``GetInvocation`` and ``GetResult``, the executor's answers, the decision log file, every row of
every table of both SQLite files, and the captured logs. None may hold any form of the secret.

The field table this test covers is the one in docs/RESULT-ENCODING.md ("Redaction at every exit").
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from callgate.config import ObservabilityConfig, SecretConfig
from callgate.execute.redaction import Redactor
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import Running, start_sidecar, stop_sidecar
from tests.test_confirmation import error_reason
from tests.test_execution import CANARY, FakeCalendar, prepared_event, run_attempt

SECOND = 's3cr/t+CANARY="q"-77af'
"""A second upstream secret whose JSON-escaped and URL-encoded forms differ from its text."""

FORMS: dict[str, str] = {
    "literal": SECOND,
    "tool_token": CANARY,
    "json_escaped": json.dumps(SECOND)[1:-1].replace("/", "\\/"),
    "url_encoded": urllib.parse.quote(SECOND, safe=""),
    "url_encoded_lower": urllib.parse.quote(SECOND, safe="").lower().replace("canary", "CANARY"),
    "url_plus": urllib.parse.quote_plus(SECOND, safe="/"),
    "hex": SECOND.encode().hex(),
    "hex_upper": SECOND.encode().hex().upper(),
    "base64": base64.b64encode(SECOND.encode()).decode(),
    "base64_url": base64.urlsafe_b64encode(SECOND.encode()).decode(),
    "base64_in_basic_auth": base64.b64encode(b"user:" + SECOND.encode()).decode(),
    # Issue 34: a canary with capitals came back lower-cased (an object key, an error message).
    "lower_cased": SECOND.lower(),
    "upper_cased": SECOND.upper(),
    "title_cased": SECOND.title(),
    "case_folded_token": CANARY.casefold(),
    "html_escaped": html.escape(SECOND),
    "html_escaped_decimal": html.escape(SECOND).replace("&#x27;", "&#39;"),
    "url_encoded_mixed_case": "".join(
        c.lower() if i % 2 else c for i, c in enumerate(urllib.parse.quote(SECOND, safe=""))
    ),
    "base64_unpadded": base64.b64encode(SECOND.encode()).decode().rstrip("="),
    "base64_url_unpadded_lower": base64.urlsafe_b64encode(SECOND.encode()).decode().rstrip("=").lower(),
    "json_escaped_lower": json.dumps(SECOND.lower())[1:-1],
}
"""The canary in the encodings the redactor knows (callgate/execute/redaction.py)."""

FIELDS = (
    "ReportOutcome.external_resource_id",
    "ReportOutcome.commit_time",
    "ReportOutcome.message",
    "ReportOutcome.message(failure)",
    "ReportOutcome.external_resource_id(failure)",
    "Reconcile.external_resource_id",
    "Reconcile.commit_time",
    "Reconcile.message",
    "EncodeResult.value(ok)",
    "EncodeResult.value(error)",
)
"""Every executor-supplied string that is stored or answered (executor_id: refused, see below)."""

DETECTOR = Redactor({"calendar_api_token": CANARY, "second": SECOND}, patterns=())
"""Finds every form of both secrets (the encoder's own final check, without patterns)."""


@pytest.fixture(name="sc")
def _sidecar(tmp_path: Path) -> Iterator[Running]:
    os.environ["CALLGATE_TEST_CALENDAR_TOKEN"] = CANARY
    os.environ["CALLGATE_TEST_SECOND_SECRET"] = SECOND
    running, tmp = start_sidecar(
        secrets=(
            SecretConfig(
                name="calendar_api_token",
                env="CALLGATE_TEST_CALENDAR_TOKEN",
                tools=("calendar.create_event",),
                resources=("calendar:*",),
            ),
            SecretConfig(name="second", env="CALLGATE_TEST_SECOND_SECRET", tools=("calendar.create_event",)),
        ),
        observability=ObservabilityConfig(decision_log=str(tmp_path / "decisions.jsonl")),
    )
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def _clean_ok(sc: Running, inv: str) -> bytes:
    return bytes(
        sc.executor.EncodeResult(
            pb.EncodeResultRequest(invocation_id=inv, status="ok", value=b'{"event_id": "evt_1"}')
        ).SerializeToString()
    )


def _attempt(sc: Running, inv: str) -> pb.BeginAttemptResponse:
    return sc.executor.BeginAttempt(  # type: ignore[no-any-return]
        pb.BeginAttemptRequest(invocation_id=inv, executor_id="calendar-executor")
    )


def _send(sc: Running, field: str, secret: str) -> tuple[str, list[bytes]]:
    """Send ``secret`` in ``field``; the invocation and the executor-side answers."""
    _, resp = prepared_event(sc, key=f"k-{field}")
    inv = resp.invocation_id
    answers: list[bytes] = []

    def report(outcome: int, **kw: object) -> None:
        att = _attempt(sc, inv)
        req = pb.ReportOutcomeRequest(attempt_id=att.attempt_id, outcome=outcome, **kw)  # type: ignore[arg-type]
        answers.append(sc.executor.ReportOutcome(req).SerializeToString())

    def reconcile(**kw: str) -> None:
        run_attempt(sc, FakeCalendar(), inv, lose_answer=True)
        req = pb.ReconcileRequest(invocation_id=inv, finding=pb.RECONCILE_COMMITTED, **kw)
        answers.append(sc.executor.Reconcile(req).SerializeToString())

    rid = f"evt_{secret}"
    sends: dict[str, Callable[[], None]] = {
        "ReportOutcome.external_resource_id": lambda: report(pb.OUTCOME_COMMITTED, external_resource_id=rid),
        "ReportOutcome.commit_time": lambda: report(
            pb.OUTCOME_COMMITTED, external_resource_id="evt_1", commit_time=secret
        ),
        "ReportOutcome.message": lambda: report(
            pb.OUTCOME_COMMITTED, external_resource_id="evt_1", message=f"upstream said: {secret}"
        ),
        "ReportOutcome.message(failure)": lambda: report(
            pb.OUTCOME_FAILED_BEFORE_COMMIT,
            failure_class=pb.BUSINESS_REJECTION,
            http_status=409,
            message=f"409 Conflict: token {secret} not allowed",
        ),  # fmt: skip
        "ReportOutcome.external_resource_id(failure)": lambda: report(
            pb.OUTCOME_FAILED_BEFORE_COMMIT, failure_class=pb.BUSINESS_REJECTION, external_resource_id=rid
        ),
        "Reconcile.external_resource_id": lambda: reconcile(external_resource_id=rid),
        "Reconcile.commit_time": lambda: reconcile(external_resource_id="evt_1", commit_time=secret),
        "Reconcile.message": lambda: reconcile(external_resource_id="evt_1", message=f"GET -> {secret}"),
    }
    if field in sends:
        sends[field]()
        state = sc.gate.GetInvocation(
            pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv)
        ).invocation.state
        if pb.State.Name(state) == "COMMITTED":
            answers.append(_clean_ok(sc, inv))
        return inv, answers
    if field == "EncodeResult.value(ok)":
        run_attempt(sc, FakeCalendar(), inv)
        value = {"event_id": "evt_1", "debug": f"token={secret}"}
        status = "ok"
    else:
        report(pb.OUTCOME_FAILED_BEFORE_COMMIT, failure_class=pb.BUSINESS_REJECTION)
        value = {"code": "rejected", "message": f"bad credential {secret}", "retryable": False}
        status = "error"
    enc = sc.executor.EncodeResult(
        pb.EncodeResultRequest(invocation_id=inv, status=status, value=json.dumps(value).encode())
    )
    assert enc.redactions >= 1
    answers.append(enc.SerializeToString())
    return inv, answers


def _get_result(sc: Running, inv: str) -> str:
    try:
        return str(
            sc.gate.GetResult(
                pb.GetResultRequest(session_id=sc.session_of(inv), invocation_id=inv)
            ).message.decode("latin-1")
        )
    except grpc.RpcError as err:  # a failed attempt without an encoded error: no tool message
        assert error_reason(err) == "result_not_available"
        return str(err.details())


def _rows(path: str) -> str:
    """Every value of every row of every table of a SQLite file, as text (blobs as latin-1), and
    the SQL dump (blobs there as hex)."""
    if not Path(path).exists():  # the keys live in the event database (one commit per answer)
        return ""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: list[str] = []
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # table names come from the file itself
                for value in row:
                    out.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
        out.extend(conn.iterdump())
        return "\n".join(out)
    finally:
        conn.close()


def _assert_clean(where: str, text: str, sent: str) -> None:
    assert CANARY not in text and SECOND not in text, where
    assert sent not in text, where
    assert not DETECTOR.contains_known_secret(text), where


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("field", FIELDS)
def test_each_field_is_redacted_at_every_exit(
    sc: Running, field: str, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = FORMS[form]
    inv, answers = _send(sc, field, secret)

    got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))
    agent = got.SerializeToString().decode("latin-1")
    assert "[REDACTED:" in agent or field.startswith("EncodeResult"), "the field was not recorded"
    exits = {
        "GetInvocation": agent,
        "GetResult": _get_result(sc, inv),
        "executor answers": b"\n".join(answers).decode("latin-1"),
        "decision log": Path(sc.config.observability.decision_log).read_text("utf-8"),
        "callgate.db": _rows(sc.config.store.path),
        "idempotency.db": _rows(sc.config.idempotency.path),
        "logs": caplog.text,
    }
    if not field.startswith("EncodeResult"):  # recorded (redacted), not dropped
        assert "[REDACTED:" in exits["callgate.db"] and '"redactions":' in exits["decision log"]
    for where, text in exits.items():
        _assert_clean(f"{field} / {form}: {where}", text, secret)


@pytest.mark.parametrize("rpc", ["BeginAttempt", "Reconcile"])
def test_executor_id_holding_a_secret_is_refused_not_stored(
    sc: Running, rpc: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An executor id is bound into credentials (their audience): rewriting it would break the
    binding, so one the redactor would change is refused, and the refusal does not repeat it."""
    caplog.set_level(logging.DEBUG)
    _, resp = prepared_event(sc, key=f"k-exec-{rpc}")
    inv = resp.invocation_id
    with pytest.raises(grpc.RpcError) as err:
        if rpc == "BeginAttempt":
            sc.executor.BeginAttempt(pb.BeginAttemptRequest(invocation_id=inv, executor_id=f"exec-{SECOND}"))
        else:
            run_attempt(sc, FakeCalendar(), inv, lose_answer=True)
            sc.executor.Reconcile(
                pb.ReconcileRequest(
                    invocation_id=inv, finding=pb.RECONCILE_NOT_COMMITTED, executor_id=f"exec-{SECOND}"
                )
            )
    assert error_reason(err.value) == "invalid_request"
    text = "\n".join(
        [
            str(err.value.details()),
            str(err.value.trailing_metadata()),
            sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(inv), invocation_id=inv))
            .SerializeToString()
            .decode("latin-1"),
            Path(sc.config.observability.decision_log).read_text("utf-8"),
            _rows(sc.config.store.path),
            _rows(sc.config.idempotency.path),
            caplog.text,
        ]
    )
    _assert_clean(f"executor_id via {rpc}", text, SECOND)
