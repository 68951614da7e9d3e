"""The asyncio client: :class:`AsyncClient`, :class:`AsyncSession`, :class:`AsyncConfirmer` and
the asyncio executor helper :meth:`AsyncClient.run` (same rules as :mod:`callgate.client.sync`;
both helpers take their decisions from the one state machine in :mod:`callgate.client.executor`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from callgate.client._wire import (
    PENDING_PAGES_MAX,
    ToolCall,
    outcome_of,
    own,
    parked,
    parse_tools,
    pending_of,
    prepare,
    trace_metadata,
)
from callgate.client.errors import CallgateClientError, DeadlineExceeded, MalformedAnswer, from_rpc_error
from callgate.client.executor import (
    Committed,
    RetryAfter,
    Stage,
    Stop,
    ToolContext,
    ToolResult,
    after_report,
    attempt_context,
    checked,
    dumps,
    report_for,
    state_name,
    tool_result,
)
from callgate.client.outcomes import NeedsConfirmation, Outcome, Pending
from callgate.client.sync import TERMINAL, target
from callgate.client.tools import Dialect, Tool, ToolNames, render
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

T = TypeVar("T")


async def _call(
    fn: Callable[..., Awaitable[T]], request: Any, timeout: float, traceparent: str | None = None
) -> T:
    try:
        return await fn(request, timeout=timeout, metadata=trace_metadata(traceparent))
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None
    except (TypeError, ValueError) as err:
        raise MalformedAnswer(f"undecodable answer: {type(err).__name__}") from None


class AsyncClient:
    """``grpc.aio`` channels to the sidecar's listeners (paths or gRPC targets); use
    ``async with`` or :meth:`close`."""

    def __init__(
        self, agent: str | None = None, *, executor: str | None = None, confirmer: str | None = None,
        timeout: float = 10.0,
    ) -> None:  # fmt: skip
        self.timeout = timeout
        self._channels: list[grpc.aio.Channel] = []
        self.gate = pb_grpc.GateStub(self._open(agent)) if agent else None  # type: ignore[no-untyped-call]
        self.executor = pb_grpc.ExecutorStub(self._open(executor)) if executor else None  # type: ignore[no-untyped-call]
        self.confirmations = pb_grpc.ConfirmationsStub(self._open(confirmer)) if confirmer else None  # type: ignore[no-untyped-call]

    def _open(self, address: str) -> grpc.aio.Channel:
        ch = grpc.aio.insecure_channel(target(address))
        self._channels.append(ch)
        return ch

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _gate(self) -> pb_grpc.GateStub:
        if self.gate is None:
            raise CallgateClientError("no agent listener configured", code="not_configured")
        return self.gate

    def _executor(self) -> pb_grpc.ExecutorStub:
        if self.executor is None:
            raise CallgateClientError("no executor listener configured", code="not_configured")
        return self.executor

    def confirmer(self) -> AsyncConfirmer:
        """The confirmer listener's calls (list, confirm, deny)."""
        if self.confirmations is None:
            raise CallgateClientError("no confirmer listener configured", code="not_configured")
        return AsyncConfirmer(self.confirmations, self.timeout)

    async def session(
        self, tenant: str, subject: str, *, timezone: str = "UTC", locale: str = "en"
    ) -> AsyncSession:
        resp = await _call(
            self._gate().OpenSession,
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant=tenant, id=subject), timezone=timezone, locale=locale
            ),
            self.timeout,
        )
        if not resp.session_id:
            raise MalformedAnswer("OpenSession answered without a session id")
        return AsyncSession(self, resp.session_id)

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
        x = self._executor()
        attempts = 0
        while True:
            if on_stage is not None:
                await on_stage(Stage.ATTEMPT)
            att = await _call(
                x.BeginAttempt,
                pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor_id),
                self.timeout,
            )
            attempts += 1

            async def redeem(name: str, _cred: str = att.credential) -> bytes:
                r = await _call(
                    x.RedeemSecret, pb.RedeemSecretRequest(credential=_cred, secret_name=name), self.timeout
                )
                return bytes(r.value)

            ctx = attempt_context(invocation_id, att, redeem)
            done: Committed | None = None
            exc: BaseException | None = None
            try:
                done = checked(await fn(ctx))
            except Exception as e:  # mapped to an outcome, never swallowed into success
                exc = e
            except BaseException as cancelled:  # cancelled mid-call: reported, then re-raised
                with shield(), contextlib.suppress(CallgateClientError):
                    await _call(x.ReportOutcome, report_for(cancelled, None, att.attempt_id), self.timeout)
                raise
            with shield():
                rep = await _call(x.ReportOutcome, report_for(exc, done, att.attempt_id), self.timeout)
            step = after_report(invocation_id, attempts, max_attempts, done, exc, rep, encode)
            if isinstance(step, RetryAfter):
                await sleep(step.backoff_s)
                continue
            if isinstance(step, Stop):
                raise step.error
            if on_stage is not None:
                await on_stage(Stage.ENCODE)
            enc = await _call(x.EncodeResult, step.request, self.timeout)
            return tool_result(invocation_id, enc, step.state, attempts)


class AsyncConfirmer:
    """:class:`callgate.client.Confirmer` for asyncio."""

    def __init__(self, stub: pb_grpc.ConfirmationsStub, timeout: float) -> None:
        self._stub = stub
        self.timeout = timeout

    async def list_pending(self, tenant: str, *, page_size: int = 0) -> list[Pending]:
        out: list[Pending] = []
        token = ""
        for _ in range(PENDING_PAGES_MAX):
            page = await _call(
                self._stub.ListPending,
                pb.ListPendingRequest(tenant=tenant, page_size=page_size, page_token=token),
                self.timeout,
            )
            out.extend(pending_of(p) for p in page.pending)
            token = page.next_page_token
            if not token:
                return out
        raise MalformedAnswer("ListPending did not end")

    async def confirm(self, invocation_id: str, digest: str, *, confirmed_by: str) -> str:
        r = await _call(
            self._stub.Confirm,
            pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by=confirmed_by),
            self.timeout,
        )
        return state_name(r.state)

    async def deny(self, invocation_id: str, digest: str, *, denied_by: str) -> str:
        r = await _call(
            self._stub.Deny,
            pb.DenyRequest(invocation_id=invocation_id, digest=digest, denied_by=denied_by),
            self.timeout,
        )
        return state_name(r.state)


class AsyncSession:
    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.model_call_id = ""
        self.names = ToolNames()
        self._tools: dict[tuple[str, str], Tool] = {}

    async def tools(
        self, model_call_id: str, dialect: Dialect | str = Dialect.OPENAI
    ) -> list[dict[str, Any]]:
        d = Dialect(dialect)
        resp = await _call(
            self.client._gate().ListTools,
            pb.ListToolsRequest(session_id=self.session_id, model_call_id=model_call_id),
            self.client.timeout,
        )
        tools = parse_tools(resp)
        self.model_call_id = model_call_id
        self.names = ToolNames.build(tools)
        self._tools = {(t.name, t.version): t for t in tools}
        return render(tools, self.names, d)

    async def propose(self, call: ToolCall, *, traceparent: str | None = None) -> Outcome:
        return await self.propose_prepared(self.prepare(call), traceparent=traceparent)

    def prepare(self, call: ToolCall) -> pb.ProposeRequest:
        """What :meth:`propose` sends (see :meth:`Session.prepare`)."""
        return prepare(self.session_id, self.model_call_id, call, self.names, self._tools)

    async def propose_prepared(self, req: pb.ProposeRequest, *, traceparent: str | None = None) -> Outcome:
        """Propose a request made by :meth:`prepare` (this session's only)."""
        resp = await _call(
            self.client._gate().Propose, own(req, self.session_id), self.client.timeout, traceparent
        )
        return outcome_of(resp, req.proposal_id)

    async def _get(self, invocation_id: str) -> pb.GetInvocationResponse:
        return await _call(
            self.client._gate().GetInvocation,
            pb.GetInvocationRequest(invocation_id=invocation_id, session_id=self.session_id),
            self.client.timeout,
        )

    async def invocation(self, invocation_id: str) -> pb.Invocation:
        return (await self._get(invocation_id)).invocation

    async def events(self, invocation_id: str) -> list[pb.Event]:
        return list((await self._get(invocation_id)).events)

    async def parked(self, invocation_id: str, tool_call_id: str = "") -> NeedsConfirmation | None:
        return parked(await self.invocation(invocation_id), tool_call_id)

    async def cancel(self, invocation_id: str, *, reason: str = "") -> str:
        r = await _call(
            self.client._gate().Cancel,
            pb.CancelRequest(invocation_id=invocation_id, session_id=self.session_id, reason=reason),
            self.client.timeout,
        )
        return state_name(r.state)

    async def result_page(self, invocation_id: str, page_token: str = "") -> pb.GetResultResponse:
        """One page of an observed invocation's tool message (GetResult; this session's only):
        ``message``, ``truncated``, ``next_page_token``."""
        return await _call(
            self.client._gate().GetResult,
            pb.GetResultRequest(
                invocation_id=invocation_id, page_token=page_token, session_id=self.session_id
            ),
            self.client.timeout,
        )

    def listed(self, name: str, version: str) -> Tool | None:
        """The tool as the last :meth:`tools` listed it (None when it was not listed)."""
        return self._tools.get((name, version))

    async def wait_confirmed(self, pending: NeedsConfirmation, *, timeout: float) -> bool:
        stream = self.client._gate().WatchInvocation(
            pb.WatchInvocationRequest(invocation_id=pending.invocation_id, session_id=self.session_id),
            timeout=timeout,
            metadata=trace_metadata(),
        )
        try:
            async for change in stream:
                state = pb.State.Name(change.invocation.state)
                if state == "PREPARED" and change.invocation.digest == pending.digest:
                    return True
                if change.terminal or state in TERMINAL:
                    return False
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            stream.cancel()
        raise DeadlineExceeded("the watch ended before a decision")


__all__ = ["AsyncClient", "AsyncConfirmer", "AsyncSession"]
