"""The asyncio client: :class:`AsyncClient`, :class:`AsyncSession`, :class:`AsyncConfirmer` and
the asyncio executor helper :meth:`AsyncClient.run` (same rules as :mod:`callgate.client.sync`;
both helpers take their decisions from the one state machine in :mod:`callgate.client.executor`).

A shell over :mod:`callgate.client._core`, as the sync client is: the core's flows, each effect
awaited here (a ``grpc.aio`` call, the sleep, the tool function, ``on_stage``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import grpc

from callgate.client._core import (
    Announce,
    ClientCore,
    ConfirmerCore,
    Driven,
    Effect,
    Failed,
    Invoke,
    Rpc,
    SessionCore,
    Sleep,
    decided,
    failed,
    undecided,
)
from callgate.client._wire import ToolCall, parked, prepare, trace_metadata
from callgate.client.errors import CallgateClientError, from_rpc_error
from callgate.client.executor import Committed, Stage, ToolContext, ToolResult, checked, dumps
from callgate.client.outcomes import NeedsConfirmation, Outcome, Pending
from callgate.client.tools import Dialect
from callgate.gen.v1 import callgate_pb2 as pb

T = TypeVar("T")
E = TypeVar("E")


async def _call(
    fn: Callable[..., Awaitable[T]], request: Any, timeout: float, traceparent: str | None = None
) -> T:
    try:
        return await _cancellable(fn(request, timeout=timeout, metadata=trace_metadata(traceparent)))
    except (grpc.RpcError, TypeError, ValueError) as err:  # TypeError, ValueError: undecodable
        raise failed(err) from None


async def _cancellable(call: Awaitable[T]) -> T:
    """Await a ``grpc.aio`` call so that cancelling the awaiting task raises the canceller's own
    ``CancelledError`` (its message kept) and cancels the RPC. Awaited directly, a call cancelled
    in flight raises a new, message-less ``CancelledError`` of grpc's; a canceller that knows its
    cancellation by its message (anyio's cancel scopes, e.g. the MCP SDK's scope of one request)
    takes it for someone else's and lets it through: it ended the whole MCP gateway."""
    rpc = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(rpc)
    except asyncio.CancelledError:
        rpc.cancel()
        rpc.add_done_callback(_retrieved)
        raise


def _retrieved(rpc: asyncio.Future[Any]) -> None:
    """Collects the outcome of an RPC whose awaiter was cancelled (nobody else will)."""
    if not rpc.cancelled():
        rpc.exception()


async def _rpc(call: Rpc) -> Any:
    """``call`` made: its answer, or its error as :class:`Failed` (for the flow to answer)."""
    try:
        return await _call(call.method, call.request, call.timeout, call.traceparent)
    except CallgateClientError as err:
        return Failed(err)


async def _drive(flow: Generator[E, Any, T], perform: Callable[[E], Awaitable[Any]]) -> T:
    """Runs ``flow`` to its end, each of its effects awaited from ``perform``."""
    d = Driven(flow)
    while d.effect is not None:
        d.answer(await perform(d.effect))
    return d.value


class AsyncClient(ClientCore[grpc.aio.Channel]):
    """``grpc.aio`` channels to the sidecar's listeners (paths or gRPC targets); use
    ``async with`` or :meth:`close`."""

    def _connect(self, target: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(target)

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def confirmer(self) -> AsyncConfirmer:
        """The confirmer listener's calls (list, confirm, deny)."""
        return AsyncConfirmer(self._confirmations(), self.timeout)

    async def session(
        self, tenant: str, subject: str, *, timezone: str = "UTC", locale: str = "en", session_id: str = "",
        tool_allowlist: tuple[str, ...] = (),
    ) -> AsyncSession:  # fmt: skip
        """OpenSession (:meth:`Client.session`: a ``session_id`` opens it the first time and
        reopens it afterwards, for the same tenant and subject only)."""
        flow = self._session_flow(tenant, subject, timezone, locale, session_id, tool_allowlist)
        return AsyncSession(self, await _drive(flow, _rpc), tenant=tenant, subject=subject)

    # ---------------------------------------------------------------- executor helper
    async def run(
        self, invocation_id: str, fn: Callable[[ToolContext], Awaitable[Committed]], *, executor_id: str,
        max_attempts: int = 10,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        encode: Callable[[Any], bytes] = dumps,
        shield: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
        on_stage: Callable[[Stage], Awaitable[None]] | None = None,
    ) -> ToolResult:  # fmt: skip
        """:meth:`Client.run` for an async tool function: BeginAttempt -> ``await fn(ctx)`` ->
        ReportOutcome, again while the retry advice says so, then EncodeResult. ``ctx.redeem`` is
        a coroutine function here (``await ctx.redeem("name")``).

        ``fn`` cancelled (``CancelledError``): the attempt is reported OUTCOME_UNKNOWN (nobody
        knows whether it committed), then the cancellation goes on. ``shield()`` is entered
        around every ReportOutcome (e.g. ``anyio.CancelScope(shield=True)`` under anyio, which
        cancels again at each await); ``encode`` gives the JSON bytes of the result or error;
        ``on_stage`` is awaited before each BeginAttempt and before EncodeResult."""

        async def redeem(flow: Generator[Rpc, Any, bytes]) -> bytes:
            return await _drive(flow, _rpc)

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Invoke):
                try:
                    return checked(await fn(effect.ctx))
                except Exception as e:  # mapped to an outcome, never swallowed into success
                    return e
                except BaseException as cancelled:  # cancelled mid-call: reported, then re-raised
                    with shield():
                        await _rpc(effect.interrupted(cancelled))  # its failure is dropped
                    raise
            if isinstance(effect, Sleep):
                return await sleep(effect.seconds)
            if isinstance(effect, Announce):
                return None if on_stage is None else await on_stage(effect.stage)
            with shield() if effect.shielded else contextlib.nullcontext():
                return await _rpc(effect)

        flow = self._run_flow(invocation_id, executor_id, max_attempts, redeem, encode)
        return await _drive(flow, perform)


class AsyncConfirmer(ConfirmerCore):
    """:class:`callgate.client.Confirmer` for asyncio."""

    async def list_pending(self, tenant: str, *, page_size: int = 0) -> list[Pending]:
        return await _drive(self._list_pending_flow(tenant, page_size), _rpc)

    async def confirm(self, invocation_id: str, digest: str, *, confirmed_by: str) -> str:
        return await _drive(self._confirm_flow(invocation_id, digest, confirmed_by), _rpc)

    async def deny(self, invocation_id: str, digest: str, *, denied_by: str) -> str:
        return await _drive(self._deny_flow(invocation_id, digest, denied_by), _rpc)


class AsyncSession(SessionCore[AsyncClient]):
    """:class:`callgate.client.Session` for asyncio."""

    def __init__(self, client: AsyncClient, session_id: str, *, tenant: str = "", subject: str = "") -> None:
        super().__init__(client, session_id, tenant=tenant, subject=subject)

    async def tools(
        self,
        model_call_id: str,
        dialect: Dialect | str = Dialect.OPENAI,
        *,
        fed_invocation_ids: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        return await _drive(self._tools_flow(model_call_id, dialect, fed_invocation_ids), _rpc)

    async def propose(self, call: ToolCall, *, traceparent: str | None = None) -> Outcome:
        return await self.propose_prepared(self.prepare(call), traceparent=traceparent)

    def prepare(self, call: ToolCall) -> pb.ProposeRequest:
        """What :meth:`propose` sends (see :meth:`Session.prepare`)."""
        return prepare(self.session_id, self.model_call_id, call, self.names, self._tools)

    async def propose_prepared(self, req: pb.ProposeRequest, *, traceparent: str | None = None) -> Outcome:
        """Propose a request made by :meth:`prepare` (this session's only)."""
        return await _drive(self._propose_flow(req, traceparent), _rpc)

    async def invocation(self, invocation_id: str) -> pb.Invocation:
        return await _drive(self._invocation_flow(invocation_id), _rpc)

    async def events(self, invocation_id: str) -> list[pb.Event]:
        return await _drive(self._events_flow(invocation_id), _rpc)

    async def list_parked(self) -> list[pb.Invocation]:
        """This session's invocations waiting for a confirmation now, oldest first (``ListParked``;
        ``proposal_id`` is the model's tool call id): what a process resuming the session's runs
        elsewhere may have to cancel."""
        return await _drive(self._list_parked_flow(), _rpc)

    async def find(self, call_id: str, name: str, *, model_call_id: str = "") -> pb.Invocation | None:
        """:meth:`Session.find`: the invocation of this session's proposal of ``call_id``, or None."""
        return await _drive(self._find_flow(call_id, name, model_call_id), _rpc)

    async def result(self, invocation_id: str) -> str:
        """The tool message of an observed invocation (GetResult)."""
        return await _drive(self._result_flow(invocation_id), _rpc)

    async def parked(self, invocation_id: str, tool_call_id: str = "") -> NeedsConfirmation | None:
        return parked(await self.invocation(invocation_id), tool_call_id)

    async def cancel(self, invocation_id: str, *, reason: str = "") -> str:
        return await _drive(self._cancel_flow(invocation_id, reason), _rpc)

    async def result_page(self, invocation_id: str, page_token: str = "") -> pb.GetResultResponse:
        """One page of an observed invocation's tool message (GetResult; this session's only):
        ``message``, ``truncated``, ``next_page_token``."""
        return await _drive(self._result_page_flow(invocation_id, page_token), _rpc)

    async def wait_confirmed(
        self, pending: NeedsConfirmation, *, timeout: float, cancel_on_close: bool = False
    ) -> bool:
        """:meth:`Session.wait_confirmed` (``cancel_on_close``: a wait abandoned before its
        deadline, e.g. the task cancelled, cancels the parked invocation)."""
        stream = self.client._gate().WatchInvocation(
            self._watch_request(pending.invocation_id, cancel_on_close),
            timeout=timeout,
            metadata=trace_metadata(),
        )
        try:
            async for change in stream:
                verdict = decided(change, pending)
                if verdict is not None:
                    return verdict
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            stream.cancel()
        raise undecided()


__all__ = ["AsyncClient", "AsyncConfirmer", "AsyncSession"]
