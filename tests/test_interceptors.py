"""The server interceptor: trace context, RPC observation and error mapping in one place."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from callgate.base.errors import ErrorCode, invalid_request
from callgate.base.trace import TraceContext
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.server.interceptors import CallgateInterceptor, current_trace

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class Recorder:
    """An RpcObserver that remembers what it was told."""

    def __init__(self) -> None:
        self.started: list[TraceContext] = []
        self.finished: list[tuple[str, str, str]] = []

    def rpc_started(self, trace: TraceContext) -> object:
        self.started.append(trace)
        return len(self.started)

    def rpc_finished(self, token: object, service: str, method: str, code: str) -> None:
        assert token == len(self.started)
        self.finished.append((service, method, code))


class Authorizer(pb_grpc.AuthorizerServicer):
    """Answers by capability: raise a callgate error, raise a bug, abort, or echo the trace."""

    async def Authorize(
        self, request: pb.AuthorizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.AuthorizeResponse:
        if request.capability == "callgate_error":
            raise invalid_request("subject.tenant, subject.id and capability are required")
        if request.capability == "bug":
            raise RuntimeError("secret detail that must stay in the log")
        if request.capability == "abort":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "handler aborted")
        tc = current_trace()
        return pb.AuthorizeResponse(decision=pb.Decision(engine=f"{tc.trace_id}/{tc.parent_span_id}"))


async def _serve(recorder: Recorder | None) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=[CallgateInterceptor(recorder)])
    pb_grpc.add_AuthorizerServicer_to_server(Authorizer(), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _reason(err: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info) and info.domain == "callgate.dev"
    return str(info.reason)


def test_every_callgate_method_is_unary_unary_or_server_streaming() -> None:
    # The interceptor wraps unary-unary and server-streaming behaviours only (WatchInvocation and
    # the console's WatchPending are the streams): a client-streaming RPC would need its own wrapper.
    streams = set()
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            assert not method.client_streaming, method.full_name
            if method.server_streaming:
                streams.add(method.full_name)
    assert streams == {"callgate.v1.Gate.WatchInvocation", "callgate.v1.Confirmations.WatchPending"}


def test_interceptor_maps_errors_passes_trace_and_observes(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        server, port = await _serve(recorder)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pb_grpc.AuthorizerStub(ch)
                ok = await stub.Authorize(
                    pb.AuthorizeRequest(capability="echo"), metadata=(("traceparent", TRACEPARENT),)
                )
                assert ok.decision.engine == f"{TRACE_ID}/00f067aa0ba902b7"
                fresh = await stub.Authorize(pb.AuthorizeRequest(capability="echo"))
                trace_id, parent = fresh.decision.engine.split("/")
                assert len(trace_id) == 32 and trace_id != TRACE_ID and parent == ""
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Authorize(pb.AuthorizeRequest(capability="callgate_error"))
                assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert _reason(err.value) == ErrorCode.INVALID_REQUEST.value
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Authorize(pb.AuthorizeRequest(capability="bug"))
                assert err.value.code() is grpc.StatusCode.INTERNAL
                assert err.value.details() == "internal error (details in the sidecar log)"
                assert _reason(err.value) == ErrorCode.INTERNAL.value
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Authorize(pb.AuthorizeRequest(capability="abort"))
                assert err.value.code() is grpc.StatusCode.UNAVAILABLE
                # health is not a callgate service: neither observed nor mapped
                check = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
                assert check.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await server.stop(None)

    with caplog.at_level(logging.ERROR, logger="callgate.server"):
        asyncio.run(scenario())
    assert "secret detail that must stay in the log" in caplog.text
    assert "unhandled error in Authorize" in caplog.text
    service, method = "callgate.v1.Authorizer", "Authorize"
    assert recorder.finished == [
        (service, method, "ok"),
        (service, method, "ok"),
        (service, method, "invalid_request"),
        (service, method, "internal"),
        (service, method, "aborted"),
    ]
    assert recorder.started[0] == TraceContext(TRACE_ID, "00f067aa0ba902b7")
    assert recorder.started[1].parent_span_id == ""


def test_interceptor_without_observer_still_maps_errors() -> None:
    async def scenario() -> grpc.StatusCode:
        server, port = await _serve(None)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                try:
                    await pb_grpc.AuthorizerStub(ch).Authorize(pb.AuthorizeRequest(capability="bug"))
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
                raise AssertionError("the call should fail")
        finally:
            await server.stop(None)

    assert asyncio.run(scenario()) is grpc.StatusCode.INTERNAL


def test_current_trace_outside_a_call_is_a_new_trace() -> None:
    a, b = current_trace(), current_trace()
    assert a.trace_id != b.trace_id and a.parent_span_id == ""
