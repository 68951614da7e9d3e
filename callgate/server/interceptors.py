"""The one ``grpc.aio`` server interceptor of the callgate services: trace, metrics, errors.

For every RPC of a ``callgate.v1`` service (health and reflection pass through untouched),
:class:`CallgateInterceptor` wraps the handler's behaviour so that

* the caller's W3C ``traceparent`` metadata becomes a :class:`~callgate.base.trace.TraceContext`
  (a new trace when absent or invalid), which the handler reads with :func:`current_trace`
  (a ``ContextVar`` set for the duration of the call: no global state);
* the caller's deadline is set for the call (:mod:`callgate.base.deadline`), so waits made on
  its behalf (a PostgreSQL pool during an outage) refuse with ``store_unavailable`` before it;
* the listener's :class:`~callgate.server.admission.Admission` admits the call or refuses it at
  once (``overloaded`` / ``deadline_too_short`` with a retry hint), before the handler runs;
* the :class:`RpcObserver` (the sidecar's :class:`~callgate.observability.metrics.Metrics`, when
  RPC metrics or caller traces are on) is told when the RPC starts and how it ended;
* a :class:`~callgate.base.errors.CallgateError` becomes its gRPC status with ``ErrorInfo``
  (:func:`callgate.server.status.to_status`, the one mapping), and any other exception becomes
  ``internal`` with the details only in the sidecar log.

The servicers in :mod:`callgate.server.services` stay thin: proto <-> types and one call.
``callgate.v1`` methods are unary-unary or server-streaming (``WatchInvocation``); both kinds are
wrapped (:meth:`CallgateInterceptor._guard`, :meth:`CallgateInterceptor._guard_stream`), any other
kind would need its own wrapper here before it could be served. A stream holds its admission slot
only until its first message (a long watch is not load), and is observed once, when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any, Protocol

import grpc

from callgate.base import deadline
from callgate.base.errors import RETRY_AFTER_MS, CallgateError, ErrorCode, internal
from callgate.base.trace import TraceContext
from callgate.server.admission import Admission
from callgate.server.status import to_status

log = logging.getLogger("callgate.server")

SERVICE_PREFIX = "/callgate.v1."
"""Methods under this prefix are intercepted; others (health, reflection) pass through."""

OK = "ok"
"""Result label of an RPC that returned a response."""
CANCELLED = "cancelled"
"""Result label of an RPC whose handler was cancelled (the client went away)."""
ABORTED = "aborted"
"""Result label of an RPC whose handler aborted the call itself."""

_TRACE: ContextVar[TraceContext | None] = ContextVar("callgate_rpc_trace", default=None)

Behaviour = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
StreamBehaviour = Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]


class RpcObserver(Protocol):
    """Told about every intercepted RPC (implemented by the sidecar's metrics)."""

    def rpc_started(self, trace: TraceContext) -> object:
        """The RPC starts; ``trace`` is the caller's context (``parent_span_id`` empty when the
        caller sent none). Returns a token handed back to :meth:`rpc_finished`."""
        ...

    def rpc_finished(self, token: object, service: str, method: str, code: str) -> None:
        """The RPC ended with ``code``: ``ok``, ``cancelled``, ``aborted`` or an error code."""
        ...


def current_trace() -> TraceContext:
    """The trace context of the RPC being served (set by :class:`CallgateInterceptor`); outside
    an intercepted call, a new trace."""
    trace = _TRACE.get()
    return trace if trace is not None else TraceContext.from_traceparent(None)


def rpc_trace() -> TraceContext | None:
    """The trace context of the RPC being served, or None outside one (the JSON log's
    ``trace_id``, :mod:`callgate.observability.logs`)."""
    return _TRACE.get()


def caller_trace(metadata: Iterable[tuple[str, str | bytes]] | None) -> TraceContext:
    """The caller's ``traceparent`` from gRPC metadata; a new trace when absent or invalid."""
    for key, value in metadata or ():
        if key == "traceparent":
            return TraceContext.from_traceparent(value if isinstance(value, str) else value.decode())
    return TraceContext.from_traceparent(None)


def _past_deadline(context: grpc.aio.ServicerContext, remaining: float | None) -> bool:
    """Whether a call that had a deadline (``remaining`` at its start) answers after it."""
    if remaining is None:
        return False
    left: float | None = context.time_remaining()
    return left is not None and left <= 0


class CallgateInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Trace extraction, RPC observation and error mapping for the ``callgate.v1`` services of
    one server. Wrapped handlers are built once per method and reused."""

    def __init__(self, observer: RpcObserver | None = None, admission: Admission | None = None) -> None:
        self._observer = observer
        self._admission = admission
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._early: dict[str, grpc.RpcMethodHandler] = {}
        """Per unary ``callgate.v1`` method: the handler that refuses ``overloaded`` without
        decoding the request (no deserializer: gRPC hands it the bytes, which it never reads)."""
        self._statuses: dict[tuple[ErrorCode, str], grpc.Status] = {}
        """The refusals' statuses by code and retry hint, built once each (:meth:`_refuse`)."""

    def _status(self, err: CallgateError) -> grpc.Status:
        key = (err.code, err.metadata.get(RETRY_AFTER_MS, ""))
        status = self._statuses.get(key)
        if status is None:
            if len(self._statuses) >= 4096:  # two codes x hints of 5..1000 ms: bounded anyway
                self._statuses.clear()
            status = self._statuses[key] = to_status(err)
        return status

    def _refuse(self, full_method: str) -> Behaviour:
        """The behaviour of an early refusal (:meth:`intercept_service` found the limit full):
        ``deadline_too_short`` or ``overloaded`` with the retry hint, as :meth:`Admission.admit`
        would answer, told to the observer like any other refusal; the request is never read."""
        service, _, name = full_method[1:].rpartition("/")
        observer = self._observer
        admission = self._admission
        assert admission is not None

        async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> Any:
            err = admission.refuse_early(context.time_remaining())
            if observer is not None:
                token = observer.rpc_started(caller_trace(context.invocation_metadata()))
                observer.rpc_finished(token, service, name, err.code.value)
            await context.abort_with_status(self._status(err))

        return refuse

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """Return the guarded handler of a ``callgate.v1`` unary or server-streaming method;
        anything else as is."""
        method: str = handler_call_details.method
        admission = self._admission
        if admission is not None and method.startswith(SERVICE_PREFIX):
            admission.seen()  # taken from gRPC core by the intake (server/intake.py)
        if admission is not None and admission.full():
            early = self._early.get(method)
            if early is not None:  # a unary callgate.v1 method seen before: refused undecoded
                return early
        handler = await continuation(handler_call_details)
        if handler is None or not method.startswith(SERVICE_PREFIX):
            return handler
        if handler.unary_unary is None and handler.unary_stream is None:
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._guard(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
            if admission is not None:
                self._early[method] = grpc.unary_unary_rpc_method_handler(self._refuse(method))
        else:
            wrapped = grpc.unary_stream_rpc_method_handler(
                self._guard_stream(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _guard(self, full_method: str, behaviour: Behaviour) -> Behaviour:
        service, _, name = full_method[1:].rpartition("/")
        observer = self._observer
        admission = self._admission
        if observer is None:
            return self._guard_unobserved(name, behaviour)

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            trace = caller_trace(context.invocation_metadata())
            trace_token = _TRACE.set(trace)
            token = observer.rpc_started(trace) if observer is not None else None
            code = CANCELLED  # stays so only if the handler is cancelled (client went away)
            observed = False

            def finish(result: str) -> None:
                # Observed before the status leaves: abort_with_status sends it before it raises,
                # and a caller that reads the metrics right after its answer must see this call.
                nonlocal observed
                if observer is not None and not observed:
                    observed = True
                    observer.rpc_finished(token, service, name, result)

            started: float | None = None
            remaining = context.time_remaining()
            deadline_token = deadline.enter(remaining)
            answered = False
            try:
                if admission is not None:
                    started = admission.admit(remaining)
                response = await behaviour(request, context)
                answered = True
                code = OK
                finish(code)
                return response
            except CallgateError as err:
                answered = True
                code = err.code.value
                finish(code)
                await context.abort_with_status(to_status(err))
            except grpc.aio.AbortError:
                code = ABORTED
                raise
            except Exception:
                answered = True
                code = ErrorCode.INTERNAL.value
                log.exception("unhandled error in %s", name)
                finish(code)
                await context.abort_with_status(to_status(internal()))
            finally:
                if started is not None and admission is not None:
                    admission.release(started, answered and _past_deadline(context, remaining))
                _TRACE.reset(trace_token)
                deadline.leave(deadline_token)
                finish(code)
            raise AssertionError("unreachable")  # abort_with_status always raises

        return guarded

    def _guard_unobserved(self, name: str, behaviour: Behaviour) -> Behaviour:
        """:meth:`_guard` without an observer (RPC metrics and caller traces off, the default):
        the same trace, admission and error mapping, without building the observation's
        closure and state on every call."""
        admission = self._admission

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            trace_token = _TRACE.set(caller_trace(context.invocation_metadata()))
            started: float | None = None
            remaining = context.time_remaining()
            deadline_token = deadline.enter(remaining)
            answered = False
            try:
                if admission is not None:
                    started = admission.admit(remaining)
                response = await behaviour(request, context)
                answered = True
                return response
            except CallgateError as err:
                answered = True
                await context.abort_with_status(to_status(err))
            except grpc.aio.AbortError:
                raise
            except Exception:
                answered = True
                log.exception("unhandled error in %s", name)
                await context.abort_with_status(to_status(internal()))
            finally:
                if started is not None and admission is not None:
                    admission.release(started, answered and _past_deadline(context, remaining))
                _TRACE.reset(trace_token)
                deadline.leave(deadline_token)
            raise AssertionError("unreachable")  # abort_with_status always raises

        return guarded

    def _guard_stream(self, full_method: str, behaviour: StreamBehaviour) -> StreamBehaviour:
        """The server-streaming counterpart of :meth:`_guard`: the same trace, admission,
        observation and error mapping around an async generator of responses."""
        service, _, name = full_method[1:].rpartition("/")
        observer = self._observer
        admission = self._admission

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            trace = caller_trace(context.invocation_metadata())
            trace_token = _TRACE.set(trace)
            token = observer.rpc_started(trace) if observer is not None else None
            code = CANCELLED
            observed = False

            def finish(result: str) -> None:
                nonlocal observed
                if observer is not None and not observed:
                    observed = True
                    observer.rpc_finished(token, service, name, result)

            started: float | None = None

            def release() -> None:
                nonlocal started
                if started is not None and admission is not None:
                    admission.release(started)
                started = None

            try:
                if admission is not None:
                    started = admission.admit(context.time_remaining())
                async for response in behaviour(request, context):
                    release()  # the slot covers opening the stream, not the wait
                    _TRACE.set(trace)
                    yield response
                code = OK
                finish(code)
                return
            except CallgateError as err:
                code = err.code.value
                finish(code)
                await context.abort_with_status(to_status(err))
            except grpc.aio.AbortError:
                code = ABORTED
                raise
            except Exception:
                code = ErrorCode.INTERNAL.value
                log.exception("unhandled error in %s", name)
                finish(code)
                await context.abort_with_status(to_status(internal()))
            finally:
                release()
                try:
                    _TRACE.reset(trace_token)
                except ValueError:  # resumed in another context (a generator may be)
                    pass
                finish(code)

        return guarded


__all__ = ["CallgateInterceptor", "RpcObserver", "caller_trace", "current_trace", "rpc_trace"]
