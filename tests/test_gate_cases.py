"""Data-driven proposals through a real sidecar over gRPC (Unix socket).

Cases live in tests/data/gate_cases.json (the same format `callgate eval` runs offline, so policy
authors and the suite share one table). Covers the 6.14 rows that belong to parse, schema,
normalization and authorization: unknown tool version, extra field, date format, admin claim.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from callgate.cli.evalcases import case_arguments, mismatches
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.server.status import for_model
from tests.conftest import DATA, Running

_DOC = json.loads((DATA / "gate_cases.json").read_text(encoding="utf-8"))
CASES = [{**_DOC["defaults"], **c} for c in _DOC["cases"]]


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, "callgate errors carry a google.rpc.Status"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError("no ErrorInfo detail")


def propose_recorded(
    server: Running, sid: str, *args: Any, **kw: Any
) -> tuple[pb.ProposeResponse | pb.Invocation, grpc.RpcError | None]:
    """Propose; a refusal for the runtime (a gRPC error, the rule in server/status.py) is read
    back from its record, which the error names. (answer or record, the error if any)."""
    try:
        return server.propose(sid, *args, **kw), None
    except grpc.RpcError as err:
        info = error_info(err)
        if "invocation_id" not in info.metadata:
            raise
        got = server.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=info.metadata["invocation_id"], session_id=sid)
        )
        inv = got.invocation
        assert info.reason == inv.rejection.code and not for_model(info.reason)  # one code string
        assert info.metadata["state"] == pb.State.Name(inv.state)
        return inv, err


def result_of(resp: Message) -> dict[str, Any]:
    """The gRPC answer (or a refusal's record) in `callgate eval`'s result shape."""
    d = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    decision = d.get("decision")
    if decision:
        decision["effect"] = decision["effect"].lower()
    return {
        "state": pb.State.Name(resp.state),
        "decision": decision,
        "rejection": d.get("rejection"),
        "normalized_arguments": json.loads(resp.normalized_arguments) if resp.normalized_arguments else None,
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(shared_server: Running, case: dict[str, Any]) -> None:
    assert case["reference_clock"] == "2026-07-19T14:00:00+08:00"  # the shared server's clock
    sid = shared_server.open_session(
        tenant=case["subject"]["tenant"], subject=case["subject"]["id"], tz=case["timezone"]
    )
    shared_server.list_tools(sid)
    resp, _ = propose_recorded(
        shared_server,
        sid,
        case["tool"],
        case_arguments(case),
        idempotency_key=f"{sid}:{case.get('idempotency_key', '')}" if case.get("idempotency_key") else "",
    )
    assert mismatches(result_of(resp), case["expect"]) == []
    # Every answer is backed by a stored invocation with its ordered events (6.13).
    got = shared_server.gate.GetInvocation(
        pb.GetInvocationRequest(invocation_id=resp.invocation_id, session_id=sid)
    )
    assert got.invocation.state == resp.state
    assert [e.seq for e in got.events] == list(range(1, len(got.events) + 1))
    assert got.events[-1].to_state == resp.state
    assert got.invocation.raw_arguments == case_arguments(case)


def test_proposal_for_unlisted_model_call_is_rejected(shared_server: Running) -> None:
    sid = shared_server.open_session()
    shared_server.list_tools(sid, model_call_id="mc-listed")
    resp, err = propose_recorded(
        shared_server,
        sid,
        "weather.get@v1",
        {"city": "Paris", "date": "2026-07-20"},
        model_call_id="mc-other",
    )
    # The runtime's mistake, not the model's: a gRPC error naming the recorded refusal.
    assert err is not None and err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert pb.State.Name(resp.state) == "PARSE_REJECTED"
    assert resp.rejection.code == "tools_not_listed"


def test_tool_outside_session_allowlist_is_unknown(shared_server: Running) -> None:
    sid = shared_server.open_session(tool_allowlist=["weather.get"])
    listed = shared_server.list_tools(sid)
    assert [t.name for t in listed.tools] == ["weather.get"]
    resp = shared_server.propose(sid, "files.delete@v1", {"path": "/tmp/x"})
    assert resp.rejection.code == "unknown_tool_version"


def test_canary_in_arguments_never_in_rejection(shared_server: Running) -> None:
    canary = "CANARY-7f3e-SECRET"
    sid = shared_server.open_session()
    shared_server.list_tools(sid)
    for raw in (
        f'{{"city": "{canary}", "city": "x", "date": "2026-07-20"}}',
        f'{{"city": 5, "date": "{canary}"}}',
        f'{{"city": "x", "date": "{canary}"}}',
    ):
        resp = shared_server.propose(sid, "weather.get@v1", raw)
        assert resp.rejection.code, raw
        text = resp.rejection.SerializeToString().decode("utf-8", "replace")
        assert canary not in text, text  # values never; property *names* may be named (pointers)


@pytest.fixture(scope="module", params=["rego", pytest.param("opa", marks=pytest.mark.opa)])
def engine_server(request: pytest.FixtureRequest) -> Any:
    """The same sidecar pipeline on the embedded Rego engine and on a real OPA server."""
    from callgate.config import PolicyConfig
    from tests.conftest import start_sidecar, stop_sidecar
    from tests.opa_fixture import shared_opa

    policy = PolicyConfig(engine=request.param)
    if request.param == "opa":
        policy = PolicyConfig(engine="opa", opa_url=shared_opa().url)
    running, tmp = start_sidecar(policy=policy)
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_same_answer_on_rego_and_opa(engine_server: Running, case: dict[str, Any]) -> None:
    """One decision contract (issue 4): the whole pipeline gives the table's answers on every engine."""
    test_case(engine_server, case)
    assert engine_server.sidecar.components.gate.snapshot.engine.name in ("rego", "opa")


def test_shadow_decision_reaches_the_event(tmp_path: Any) -> None:
    """A policy in shadow mode (config) is logged on the decision event, never enforced."""
    import shutil

    from callgate.config import PolicyConfig
    from tests.conftest import POLICIES, start_sidecar, stop_sidecar

    pdir = tmp_path / "policies"
    shutil.copytree(POLICIES, pdir, ignore=shutil.ignore_patterns("tests"))
    pol = pdir / "cedar" / "policies.cedar"
    pol.write_text(
        pol.read_text()
        + '\n@id("no-weather-in-paris")\nforbid (principal, action == Action::"weather.read", resource) when { resource.name == "Paris" };\n'
    )
    sc, tmp = start_sidecar(pdir, policy=PolicyConfig(shadow=("no-weather-in-paris",)))
    try:
        sid = sc.open_session(subject="bob")
        sc.list_tools(sid)
        resp = sc.propose(sid, "weather.get@v1", {"city": "Paris", "date": "today"})
        assert resp.decision.effect == pb.ALLOW  # enforced answer ignores the shadow policy
        got = sc.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=resp.invocation_id, session_id=sid))
        authorized = next(e for e in got.events if e.kind == "authorized")
        shadow = json_format.MessageToDict(authorized.data)["decision"]["shadow"]
        assert shadow == {"effect": "deny", "policy_ids": ["no-weather-in-paris"]}
    finally:
        stop_sidecar(sc, tmp)


def test_tool_views_beyond_the_cache_are_read_back_from_the_store(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    import callgate.propose.sessions as sessions_module

    monkeypatch.setattr(sessions_module, "VIEW_CACHE_MAX", 3)
    sid = server.open_session()
    for i in range(6):
        server.list_tools(sid, model_call_id=f"mc-{i}")
    gate = server.sidecar.components.gate
    assert gate.sessions.cached_views <= 3  # bounded apart from the session cache
    resp = server.propose(
        sid, "weather.get@v1", {"city": "Paris", "date": "2026-07-20"}, model_call_id="mc-0"
    )
    assert pb.State.Name(resp.state) == "PREPARED"  # the oldest view came back from SQLite
