"""The asyncio client: :class:`AsyncClient` and :class:`AsyncSession` (same rules as
:mod:`callgate.client.sync`; the executor helper is synchronous only for now)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from callgate.client._wire import ToolCall, outcome_of, parse_tools, propose_request, trace_metadata
from callgate.client.errors import CallgateClientError, DeadlineExceeded, MalformedAnswer, from_rpc_error
from callgate.client.outcomes import NeedsConfirmation, Outcome
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
    """``grpc.aio`` channels to the agent listener; use ``async with`` or :meth:`close`."""

    def __init__(self, agent: str, *, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(target(agent))
        self.gate = pb_grpc.GateStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def session(
        self, tenant: str, subject: str, *, timezone: str = "UTC", locale: str = "en"
    ) -> AsyncSession:
        resp = await _call(
            self.gate.OpenSession,
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant=tenant, id=subject), timezone=timezone, locale=locale
            ),
            self.timeout,
        )
        if not resp.session_id:
            raise MalformedAnswer("OpenSession answered without a session id")
        return AsyncSession(self, resp.session_id)


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
            self.client.gate.ListTools,
            pb.ListToolsRequest(session_id=self.session_id, model_call_id=model_call_id),
            self.client.timeout,
        )
        tools = parse_tools(resp)
        self.model_call_id = model_call_id
        self.names = ToolNames.build(tools)
        self._tools = {(t.name, t.version): t for t in tools}
        return render(tools, self.names, d)

    async def propose(self, call: ToolCall, *, traceparent: str | None = None) -> Outcome:
        if not self.model_call_id:
            raise CallgateClientError("call tools() for this model call first", code="tools_not_listed")
        req = propose_request(self.session_id, self.model_call_id, call, self.names, self._tools)
        resp = await _call(self.client.gate.Propose, req, self.client.timeout, traceparent)
        return outcome_of(resp, call.id)

    async def wait_confirmed(self, pending: NeedsConfirmation, *, timeout: float) -> bool:
        stream = self.client.gate.WatchInvocation(
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


__all__ = ["AsyncClient", "AsyncSession"]
