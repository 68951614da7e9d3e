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
    sc, tmp = start_sidecar(pdir, policy=PolicyConfig(watch=False))
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
