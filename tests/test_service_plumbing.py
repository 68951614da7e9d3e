"""Health, reflection, the Authorizer decision point, error mapping and stub freshness."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from callgate.base.errors import CallgateError, ErrorCode
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.server.status import STATUS, to_status
from tests.conftest import ROOT, Running


@pytest.mark.parametrize(
    "role,service",
    [
        ("agent", "callgate.v1.Gate"),
        ("confirmer", "callgate.v1.Confirmations"),
        ("authorizer", "callgate.v1.Authorizer"),
    ],
)
def test_health_and_reflection_per_listener(shared_server: Running, role: str, service: str) -> None:
    ch = shared_server.channels[role]
    hs = health_pb2_grpc.HealthStub(ch)
    for name in ("", service):
        assert (
            hs.Check(health_pb2.HealthCheckRequest(service=name)).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    stub = reflection_pb2_grpc.ServerReflectionStub(ch)
    answers = list(
        stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    )
    names = {s.name for s in answers[0].list_services_response.service}
    assert service in names
    assert (
        not ({"callgate.v1.Gate", "callgate.v1.Confirmations", "callgate.v1.Authorizer"} - {service}) & names
    )


class ReflectionClient(ProtoReflectionDescriptorDatabase):
    """grpcio-reflection's Python client (a protobuf descriptor database) speaking ``service``:
    the library's own client asks only v1alpha; v1 has the same messages on another path."""

    def __init__(self, channel: grpc.Channel, service: str) -> None:
        super().__init__(channel)
        self._stub = _Stub(channel, service)


class _Stub:
    def __init__(self, channel: grpc.Channel, service: str) -> None:
        self.ServerReflectionInfo = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )


ROLE_SERVICE = {
    "agent": "Gate", "executor": "Executor", "confirmer": "Confirmations", "authorizer": "Authorizer"
}  # fmt: skip


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
@pytest.mark.parametrize("role", sorted(ROLE_SERVICE))
def test_reflection_v1_and_v1alpha_on_every_listener(shared_server: Running, role: str, version: str) -> None:
    """issue 28 item 5: current grpcurl and Postman ask grpc.reflection.v1 first (it answered
    UNIMPLEMENTED); both versions list the same services and describe every method, and the
    reflection services themselves."""
    db = ReflectionClient(shared_server.channels[role], f"grpc.reflection.{version}.ServerReflection")
    services = set(db.get_services())
    own = f"callgate.v1.{ROLE_SERVICE[role]}"
    assert {
        own,
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= services
    pool = descriptor_pool.DescriptorPool(db)
    for name in services:  # what `grpcurl describe` (no symbol) does: every listed service resolves
        assert pool.FindServiceByName(name).full_name == name
    svc = pool.FindServiceByName(own)
    for m in svc.methods:
        assert db.FindFileContainingSymbol(f"{own}.{m.name}").name == "callgate/v1/callgate.proto"
    v1 = pool.FindServiceByName("grpc.reflection.v1.ServerReflection").methods_by_name["ServerReflectionInfo"]
    assert v1.input_type.full_name == "grpc.reflection.v1.ServerReflectionRequest"
    assert [f.number for f in v1.input_type.fields] == [
        f.number for f in reflection_pb2.ServerReflectionRequest.DESCRIPTOR.fields
    ]


def test_authorizer_decision_point(shared_server: Running) -> None:
    ctx = struct_pb2.Struct()
    ctx.update({"tool": "files.delete@v1", "args": {"path": "/tmp/a"}})
    allow = shared_server.authorizer.Authorize(
        pb.AuthorizeRequest(
            subject=pb.Subject(tenant="acme", id="carol"),
            capability="files.delete",
            resource="file:/tmp/a",
            context=ctx,
        )
    )
    assert allow.decision.effect == pb.ALLOW and list(allow.decision.policy_ids) == ["files-delete-admin"]
    deny = shared_server.authorizer.Authorize(
        pb.AuthorizeRequest(
            subject=pb.Subject(tenant="acme", id="bob"),
            capability="files.delete",
            resource="file:/tmp/a",
            context=ctx,
        )
    )
    assert deny.decision.effect == pb.DENY
    # An unknown capability is not in the Cedar schema: fail closed with an error code.
    unknown = shared_server.authorizer.Authorize(
        pb.AuthorizeRequest(
            subject=pb.Subject(tenant="acme", id="carol"),
            capability="files.nuke",
            resource="file:/",
            context=ctx,
        )
    )
    assert unknown.decision.effect == pb.DENY and unknown.decision.error_code == "policy_evaluation_error"
    with pytest.raises(grpc.RpcError) as err:
        shared_server.authorizer.Authorize(pb.AuthorizeRequest())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_every_error_code_is_mapped_once() -> None:
    assert set(STATUS) == set(ErrorCode)
    for code in ErrorCode:
        st = to_status(CallgateError(code=code, message="m"))
        assert st.code == STATUS[code]
        assert st.code != grpc.StatusCode.OK


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto"), str(out)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    committed = ROOT / "callgate" / "gen" / "v1"
    fresh = out / "v1"
    names = sorted(p.name for p in fresh.glob("*.py*"))
    assert names == sorted(p.name for p in committed.glob("*.py*"))
    match, mismatch, errors = filecmp.cmpfiles(committed, fresh, names, shallow=False)
    assert not mismatch and not errors, f"stale generated stubs: {mismatch or errors}; run scripts/gen-proto"


def test_negative_concurrency_limit_is_a_config_error(tmp_path: Path) -> None:
    from callgate.base.errors import LoadError
    from callgate.config import load_config

    p = tmp_path / "c.toml"
    p.write_text("[server]\nmax_concurrent_rpcs = -1\n")
    with pytest.raises(LoadError, match="max_concurrent_rpcs"):
        load_config(p)
    for line, key in (
        ("admission_target_ms = -1", "admission_target_ms"),
        ("admission_min_in_flight = 0", "admission_min_in_flight"),
        ("max_pending_rpcs = -1", "max_pending_rpcs"),
    ):
        p.write_text(f"[server]\n{line}\n")
        with pytest.raises(LoadError, match=key):
            load_config(p)


def test_serving_runtime_settings_and_refreeze() -> None:
    import gc

    from callgate.server.app import GIL_SWITCH_INTERVAL_S, refreeze, tune_runtime

    before = (gc.get_threshold(), sys.getswitchinterval())
    try:
        tune_runtime()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == 10_000
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL_S)
        import weakref

        class Box:
            pass

        b = Box()
        b.self = b  # type: ignore[attr-defined]  # a cycle alive when the sidecar froze
        ref = weakref.ref(b)
        gc.freeze()
        del b
        gc.collect()
        assert ref() is not None  # ... frozen cycles are not collected
        fresh = [[] for _ in range(100)]  # lists are always tracked by the collector
        ids = {id(x) for x in fresh}
        assert sum(id(o) in ids for o in gc.get_objects()) == len(fresh)  # in the collector's generations
        refreeze()
        # a reload freezes what is alive now, without a full collection on the event loop (it was
        # the longest stall of a reload, docs/LIMITS.md): frozen cycles stay
        assert ref() is not None
        # frozen: moved to the permanent generation, out of every generation the collector walks
        # (not a freeze count: another test's thread freeing frozen objects lowers that count)
        assert not any(id(o) in ids for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.set_threshold(*before[0])
        sys.setswitchinterval(before[1])
