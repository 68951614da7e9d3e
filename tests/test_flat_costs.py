"""Issue 15 A: costs that do not grow with what a request does not touch (a real sidecar).

ListTools answers from a view built once per snapshot and visible set; the answer is the same
listing a per-call build gave, and a reload or another allowlist gives another one."""

from __future__ import annotations

import shutil
from pathlib import Path

from callgate.config import PolicyConfig
from tests.conftest import POLICIES, start_sidecar, stop_sidecar


def test_listtools_is_prebuilt_per_snapshot_and_visible_set(tmp_path: Path) -> None:
    pdir = tmp_path / "policies"
    shutil.copytree(POLICIES, pdir, ignore=shutil.ignore_patterns("tests"))
    # every allowlisted tool (bob would see one tool by policy: tests/test_list_by_policy.py)
    sc, tmp = start_sidecar(pdir, policy=PolicyConfig(watch=False, list_by_policy=False))
    try:
        a, b = sc.open_session(), sc.open_session(subject="bob")
        first = sc.list_tools(a, "mc-1")
        again = sc.list_tools(b, "mc-1")
        assert first == again and [t.name for t in first.tools] == sorted(t.name for t in first.tools)
        assert len(first.tools) == 3
        only = sc.open_session(tool_allowlist=["weather.get"])
        narrow = sc.list_tools(only, "mc-1")
        assert [t.name for t in narrow.tools] == ["weather.get"]
        assert narrow.tool_set_digest != first.tool_set_digest
        # every call is still recorded as its own tool view (6.13 question 1)
        view = sc.call(sc.sidecar.components.store.get_tool_view(a, "mc-1"))
        assert view is not None and view.tool_set_digest == first.tool_set_digest
        assert list(view.tools) == [f"{t.name}@{t.version}" for t in first.tools]
        # a changed ToolSpec is a new snapshot, hence a new listing
        spec = pdir / "tools" / "weather.get@v1.json"
        spec.write_text(spec.read_text().replace('"description": "', '"description": "Now: ', 1))
        assert sc.sidecar.lifecycle is not None
        assert sc.call(sc.sidecar.lifecycle.reload("test")) is True
        after = sc.list_tools(a, "mc-2")
        assert after.tool_set_digest != first.tool_set_digest
        assert any(t.description.startswith("Now: ") for t in after.tools)
    finally:
        stop_sidecar(sc, tmp)


def test_cached_sessions_share_their_repeated_parts() -> None:
    """Issue 15 A6: a cached session holds only what is its own (id, subject, opening time);
    budgets, allowlist, tenant, zone and locale are shared, and the limits are computed per
    distinct budgets, not kept per session."""
    sc, tmp = start_sidecar()
    try:
        ids = [sc.open_session(subject=f"u{i}") for i in range(20)]
        for sid in ids:
            sc.list_tools(sid)
        gate = sc.sidecar.components.gate
        records = [sc.call(gate.sessions.get(sid)) for sid in ids]
        assert len({id(r.budgets) for r in records}) == 1
        assert len({id(r.tool_allowlist) for r in records}) == 1
        assert len({id(r.timezone) for r in records}) == 1
        assert len(gate.usage._limits) == 1
    finally:
        stop_sidecar(sc, tmp)


def test_propose_can_answer_with_the_digest_only() -> None:
    """Issue 15 A5: ``omit_normalized_arguments`` keeps large arguments out of the answer; the
    digest names them exactly and the invocation still has them."""
    import json

    from callgate.gen.v1 import callgate_pb2 as pb

    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session(subject="bob")
        sc.list_tools(sid)
        args = json.dumps({"city": "Paris", "date": "2026-07-20"}).encode()

        def propose(pid: str, omit: bool) -> pb.ProposeResponse:
            return sc.gate.Propose(
                pb.ProposeRequest(
                    session_id=sid,
                    model_call_id="mc-1",
                    proposal_id=pid,
                    tool_name="weather.get",
                    tool_version="v1",
                    arguments=args,
                    omit_normalized_arguments=omit,
                )
            )

        full, short = propose("call_1", False), propose("call_2", True)
        assert full.normalized_arguments and not short.normalized_arguments
        assert short.digest == full.digest and pb.State.Name(short.state) == "PREPARED"
        inv = sc.gate.GetInvocation(
            pb.GetInvocationRequest(invocation_id=short.invocation_id, session_id=sid)
        )
        assert inv.invocation.normalized_arguments == full.normalized_arguments
    finally:
        stop_sidecar(sc, tmp)


def test_large_arguments_are_stored_once_and_the_trail_shows_them() -> None:
    """Issue 15 A5: the normalized arguments are stored once, in the invocation row; the
    ``normalized`` event is written without them (its digest names them) and every reader of
    the trail (GetInvocation, ``callgate explain`` live and on the file) sees the event as it
    was recorded, with the arguments."""
    import asyncio
    import json
    import sqlite3

    from callgate.cli.explain import explain, to_json
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.store.sqlite import SQLiteReader, stored_events

    sc, tmp = start_sidecar()
    try:
        sid = sc.open_session(subject="bob")
        sc.list_tools(sid)
        marker = "Paris-" + "x" * 90
        args = {"city": marker, "date": "2026-07-20"}
        resp = sc.gate.Propose(
            pb.ProposeRequest(session_id=sid, model_call_id="mc-1", proposal_id="call_big", tool_name="weather.get",
                              tool_version="v1", arguments=json.dumps(args).encode(), omit_normalized_arguments=True)
        )  # fmt: skip
        assert pb.State.Name(resp.state) == "PREPARED" and not resp.normalized_arguments
        inv_id = resp.invocation_id
        db = sqlite3.connect(f"file:{sc.db_path}?mode=ro", uri=True)
        try:
            as_stored = stored_events(db, inv_id)  # the packed stage row expanded, nothing put back
            (data,) = [e.data for e in as_stored if e.kind == "normalized"]
            (column,) = db.execute(
                "SELECT normalized_arguments FROM invocations WHERE invocation_id=?", (inv_id,)
            ).fetchone()
            datas = [json.dumps(e.data, ensure_ascii=False) for e in as_stored]
        finally:
            db.close()
        assert "normalized_arguments" not in data and data["digest"] == resp.digest
        assert json.loads(column) == args and len(datas) >= 4
        # the events hold no copy (the city is in them only as the rendered resource)
        assert all(d.count(marker) == d.count("weather:" + marker) for d in datas)
        assert not any("normalized_arguments" in json.loads(d) for d in datas)
        got = sc.gate.GetInvocation(pb.GetInvocationRequest(invocation_id=inv_id, session_id=sid))
        (normalized,) = [e for e in got.events if e.kind == "normalized"]
        assert normalized.data["normalized_arguments"] == column.decode()
        assert got.invocation.normalized_arguments == column
        live = sc.call(explain(sc.sidecar.components.store, inv_id))
        reader = SQLiteReader(sc.db_path)
        try:
            on_file = asyncio.run(explain(reader, inv_id))
        finally:
            reader.close()
        assert live is not None and on_file is not None
        assert to_json(live)["stages"] == to_json(on_file)["stages"]
        assert to_json(live)["normalized_arguments"] == to_json(on_file)["normalized_arguments"]
        stage = next(s for s in live.stages if s.kind == "normalized")
        assert stage.output["normalized_arguments"] == column.decode()
        assert live.normalized_arguments == column
    finally:
        stop_sidecar(sc, tmp)


def test_gate_service_registers_every_generated_method_and_listtools_sends_kept_bytes() -> None:
    """ListTools answers its listing's kept wire bytes (serialized once per tool set); the Gate
    service is otherwise registered exactly as the generated code registers it."""
    from typing import Any

    import grpc

    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
    from callgate.server.services import add_gate_service

    class Recorder:
        def __init__(self) -> None:
            self.generic: list[Any] = []
            self.registered: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            self.generic.extend(handlers)

        def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
            self.registered[service] = handlers

    servicer: Any = pb_grpc.GateServicer()
    ours, generated = Recorder(), Recorder()
    add_gate_service(servicer, ours)  # type: ignore[arg-type]
    pb_grpc.add_GateServicer_to_server(servicer, generated)  # type: ignore[no-untyped-call]
    assert ours.registered.keys() == generated.registered.keys() == {"callgate.v1.Gate"}
    mine, theirs = ours.registered["callgate.v1.Gate"], generated.registered["callgate.v1.Gate"]
    assert mine.keys() == theirs.keys() and len(ours.generic) == 1
    for name, h in theirs.items():
        assert mine[name].request_deserializer == h.request_deserializer
        assert mine[name].unary_unary == h.unary_unary and mine[name].unary_stream == h.unary_stream
        if name != "ListTools":
            assert mine[name].response_serializer == h.response_serializer
    listing = pb.ListToolsResponse(tools=[pb.ToolSpec(name="a", version="v1")], tool_set_digest="sha256:x")
    wire = listing.SerializeToString()
    serialize = mine["ListTools"].response_serializer
    assert serialize(wire) is wire  # kept bytes go out as they are
    assert serialize(listing) == wire  # a message (any other servicer) is serialized as before
