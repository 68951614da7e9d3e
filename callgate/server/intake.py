"""A ``grpc.aio`` server whose event loop stops taking ``callgate.v1`` calls while the admission
is full: the excess waits in gRPC core or is dropped there, before any Python runs.

grpc.aio's server loop keeps one request armed in gRPC core per registered method and arms the
next as soon as a call arrives, so under a flood the event loop takes every call core hands it
as fast as it can turn, and each call it takes costs grpc.aio's per-call Python (its state, two
tasks, three batches through core) whether the admission then serves it or refuses it
``overloaded``: measured ~350 µs of the event loop per refusal against ~1 ms per served Propose
(docs/BENCHMARKS.md, "Issue 34 item 7"), so at 2-5x capacity most of the loop went to refusals.

Here the server asks the listener's :class:`~callgate.server.admission.Admission` before it arms
the next request of a ``callgate.v1`` method: while :meth:`Admission.intake_open` is false the
request is armed only once a call in flight ends (:meth:`Admission.wait_intake`). Calls arriving
meanwhile wait in gRPC core's queue of unrequested calls, bounded per method by
``server.max_pending_rpcs`` (beyond it core drops them, ~60 µs each and none of it on the event
loop; the caller sees ``CANCELLED``) and by their own deadline. Health, reflection and any
unregistered method keep their request armed: a health probe is never held behind the flood.
The admission's own refusals (``overloaded``, ``deadline_too_short``) still answer what slips
through (one call per method between two turns).

This relies on grpc.aio internals (``grpc.aio._server.Server``, ``cygrpc.AioServer`` and its
``_make_request_call_future``, checked against grpcio 1.85); when they are not as expected the
plain server is built and a warning logged (:func:`build_server`), and
``tests/test_intake.py`` fails, so an upgrade of grpcio that changes them is seen.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any

import grpc

from callgate.server.admission import Admission

log = logging.getLogger("callgate.server")

SERVICE_PREFIX = b"/callgate.v1."
"""Requests of these methods wait for the admission; others (health, reflection) never do."""


@functools.cache
def _gated_class() -> type[Any] | None:
    """The server classes over grpc.aio's internals, or None when they are not there."""
    try:
        from grpc._cython import cygrpc
        from grpc.aio import _server as aio_server

        base: Any = cygrpc.AioServer
        augment: Any = aio_server._augment_channel_arguments
        server_base: Any = aio_server.Server
        getattr(base, "_make_request_call_future")  # noqa: B009 (fails loudly when renamed)
    except (ImportError, AttributeError) as exc:
        log.warning("grpc.aio internals not as expected (%s): calls are taken without the admission", exc)
        return None

    class GatedAioServer(base):  # type: ignore[misc]
        """grpc.aio's core server loop, arming ``callgate.v1`` requests only when the admission
        takes calls."""

        def __init__(self, admission: Admission, *args: Any) -> None:
            super().__init__(*args)
            self._callgate_admission = admission

        def _make_request_call_future(self, method_bytes: bytes | None) -> Any:
            admission: Admission = self._callgate_admission
            if method_bytes is None or not method_bytes.startswith(SERVICE_PREFIX):
                return base._make_request_call_future(self, method_bytes)
            if admission.intake_open():
                return self._counted(base._make_request_call_future(self, method_bytes))
            return asyncio.get_running_loop().create_task(self._request_when_open(method_bytes))

        def _counted(self, request: asyncio.Future[Any]) -> asyncio.Future[Any]:
            admission: Admission = self._callgate_admission

            def took(done: asyncio.Future[Any]) -> None:
                if not done.cancelled() and done.exception() is None:
                    admission.taken()

            request.add_done_callback(took)  # before the server loop's: counted before it re-arms
            return request

        async def _request_when_open(self, method_bytes: bytes) -> Any:
            await self._callgate_admission.wait_intake()
            # awaiting the inner task: cancelling this one (server stop) cancels it too
            return await self._counted(base._make_request_call_future(self, method_bytes))

    class GatedServer(server_base):  # type: ignore[misc]
        """``grpc.aio.Server`` over :class:`GatedAioServer` (its ``__init__`` as grpcio's)."""

        def __init__(
            self,
            admission: Admission,
            interceptors: Sequence[grpc.aio.ServerInterceptor],
            options: Sequence[tuple[str, Any]],
            maximum_concurrent_rpcs: int | None,
        ) -> None:
            self._loop = cygrpc.get_working_loop()
            self._server = GatedAioServer(
                admission,
                self._loop,
                None,
                (),
                tuple(interceptors),
                augment(tuple(options), None),
                maximum_concurrent_rpcs,
            )

    return GatedServer


def build_server(
    admission: Admission | None,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor],
    options: Sequence[tuple[str, Any]],
    maximum_concurrent_rpcs: int | None,
) -> grpc.aio.Server:
    """A ``grpc.aio`` server for one listener: with an admission, one that holds its intake of
    ``callgate.v1`` calls while the admission is full (see the module docstring); without one,
    or when grpc.aio's internals differ, ``grpc.aio.server`` as is."""
    if admission is not None:
        gated = _gated_class()
        if gated is not None:
            try:
                server: grpc.aio.Server = gated(admission, interceptors, options, maximum_concurrent_rpcs)
                return server
            except TypeError as exc:  # a constructor of another shape
                log.warning(
                    "grpc.aio internals not as expected (%s): calls are taken without the admission", exc
                )
    return grpc.aio.server(
        options=options, interceptors=interceptors, maximum_concurrent_rpcs=maximum_concurrent_rpcs
    )


__all__ = ["build_server"]
