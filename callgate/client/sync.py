"""The synchronous client: :class:`Client`, :class:`Session` and the executor helper.

A shell over :mod:`callgate.client._core`: each call's flow (requests, answers, state) is the
core's; here each effect is done blocking (a gRPC call, ``time.sleep``, the tool function)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

import grpc

from callgate.client._core import TERMINAL as TERMINAL  # importable from here, as before the split
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
    target,
    undecided,
)
from callgate.client._wire import ToolCall, parked, prepare, trace_metadata
from callgate.client.errors import CallgateClientError, ExecutionError, from_rpc_error
from callgate.client.executor import Committed, ToolContext, ToolResult, checked
from callgate.client.outcomes import NeedsConfirmation, Outcome, Pending
from callgate.client.tools import Dialect
from callgate.gen.v1 import callgate_pb2 as pb

T = TypeVar("T")
E = TypeVar("E")


def _call(fn: Callable[..., T], request: Any, timeout: float, traceparent: str | None = None) -> T:
    try:
        return fn(request, timeout=timeout, metadata=trace_metadata(traceparent))
    except (grpc.RpcError, TypeError, ValueError) as err:  # TypeError, ValueError: undecodable
        raise failed(err) from None


def _rpc(call: Rpc) -> Any:
    """``call`` made: its answer, or its error as :class:`Failed` (for the flow to answer)."""
    try:
        return _call(call.method, call.request, call.timeout, call.traceparent)
    except CallgateClientError as err:
        return Failed(err)


def _drive(flow: Generator[E, Any, T], perform: Callable[[E], Any]) -> T:
    """Runs ``flow`` to its end, each of its effects done by ``perform`` (blocking)."""
    d = Driven(flow)
    while d.effect is not None:
        d.answer(perform(d.effect))
    return d.value


class Client(ClientCore[grpc.Channel]):
    """Channels to the sidecar's listeners (paths or gRPC targets); ``timeout`` in seconds per
    call. Use as a context manager or call :meth:`close`."""

    def _connect(self, target: str) -> grpc.Channel:
        return grpc.insecure_channel(target)

    def close(self) -> None:
        for ch in self._channels:
            ch.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def confirmer(self) -> Confirmer:
        """The confirmer listener's calls (a confirmer UI: list, confirm, deny)."""
        return Confirmer(self._confirmations(), self.timeout)

    def session(
        self, tenant: str, subject: str, *, timezone: str = "UTC", locale: str = "en", session_id: str = "",
        tool_allowlist: tuple[str, ...] = (),
    ) -> Session:  # fmt: skip
        """OpenSession for the runtime's authenticated user (never an identity the model named)."""
        flow = self._session_flow(tenant, subject, timezone, locale, session_id, tool_allowlist)
        return Session(self, _drive(flow, _rpc), tenant=tenant, subject=subject)

    # ---------------------------------------------------------------- executor helper
    def run(
        self, invocation_id: str, fn: Callable[[ToolContext], Committed], *, executor_id: str,
        max_attempts: int = 10,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ToolResult:  # fmt: skip
        """BeginAttempt -> ``fn`` -> ReportOutcome, again while the retry advice says so (after
        its backoff, within the deadline), then EncodeResult: the model-facing tool message.
        ``sleep`` waits out the advised backoff (tests pass one that moves the sidecar's clock)."""

        def redeem(flow: Generator[Rpc, Any, bytes]) -> bytes:
            return _drive(flow, _rpc)

        def perform(effect: Effect) -> Any:
            if isinstance(effect, Invoke):
                try:
                    return checked(fn(effect.ctx))
                except Exception as e:  # mapped to an outcome, never swallowed into success
                    return e
            if isinstance(effect, Sleep):
                return sleep(effect.seconds)
            if isinstance(effect, Announce):  # the sync helper has no on_stage
                return None
            return _rpc(effect)

        return _drive(self._run_flow(invocation_id, executor_id, max_attempts, redeem), perform)


class Confirmer(ConfirmerCore):
    """A confirmer's calls on the confirmer listener: what waits for a person, and their answer,
    always bound to the digest the person saw (6.6, 6.11). ``Client(confirmer=...).confirmer()``."""

    def list_pending(self, tenant: str, *, page_size: int = 0) -> list[Pending]:
        """Every parked invocation of ``tenant``, oldest first (all pages of ListPending)."""
        return _drive(self._list_pending_flow(tenant, page_size), _rpc)

    def confirm(self, invocation_id: str, digest: str, *, confirmed_by: str) -> str:
        """Approve exactly ``digest`` (another digest cancels the invocation and raises
        ``confirmation_digest_mismatch``); the state it is now in (PREPARED)."""
        return _drive(self._confirm_flow(invocation_id, digest, confirmed_by), _rpc)

    def deny(self, invocation_id: str, digest: str, *, denied_by: str) -> str:
        """Refuse it: CANCELLED_BEFORE_COMMIT, nothing runs; the state it is now in."""
        return _drive(self._deny_flow(invocation_id, digest, denied_by), _rpc)


class Session(SessionCore[Client]):
    """One agent session: list tools per model call, propose the model's calls."""

    def __init__(self, client: Client, session_id: str, *, tenant: str = "", subject: str = "") -> None:
        super().__init__(client, session_id, tenant=tenant, subject=subject)

    def tools(
        self,
        model_call_id: str,
        dialect: Dialect | str = Dialect.OPENAI,
        *,
        fed_invocation_ids: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """ListTools for this model call, in ``dialect`` (``openai``, ``anthropic``, ``mcp``)."""
        return _drive(self._tools_flow(model_call_id, dialect, fed_invocation_ids), _rpc)

    def propose(self, call: ToolCall, *, traceparent: str | None = None) -> Outcome:
        """Propose one tool call of the current model call; a typed outcome (or a typed error)."""
        return self.propose_prepared(self.prepare(call), traceparent=traceparent)

    def prepare(self, call: ToolCall) -> pb.ProposeRequest:
        """What :meth:`propose` sends for ``call`` of the current model call: names resolved,
        the nulls a strict schema forced stripped, the derived idempotency key. Kept (e.g. in a
        checkpoint), it is proposed again byte for byte from another process by
        :meth:`propose_prepared`, so the sidecar answers with the idempotent replay (6.8)."""
        return prepare(self.session_id, self.model_call_id, call, self.names, self._tools)

    def propose_prepared(self, req: pb.ProposeRequest, *, traceparent: str | None = None) -> Outcome:
        """Propose a request made by :meth:`prepare` (this session's only)."""
        return _drive(self._propose_flow(req, traceparent), _rpc)

    def watch(
        self, invocation_id: str, *, timeout: float | None = None, cancel_on_close: bool = False
    ) -> Iterator[pb.WatchInvocationResponse]:
        """The invocation's changes (WatchInvocation) until a terminal state or ``timeout``.
        ``cancel_on_close``: closing the stream before its deadline (or this process going away)
        cancels the invocation if it is still parked: the caller gave it up."""
        stream = self.client._gate().WatchInvocation(
            self._watch_request(invocation_id, cancel_on_close),
            timeout=timeout if timeout is not None else self.client.timeout,
            metadata=trace_metadata(),
        )
        try:
            yield from stream
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            stream.cancel()

    def wait_confirmed(
        self, pending: NeedsConfirmation, *, timeout: float, cancel_on_close: bool = False
    ) -> bool:
        """Wait (no polling) until the parked invocation is confirmed (True: PREPARED, hand it to
        the executor) or ends otherwise (False: expired or cancelled). A deadline passing raises
        :class:`DeadlineExceeded` (the invocation stays parked). ``cancel_on_close``: if the wait
        is abandoned otherwise (interrupted, the process dies), the sidecar cancels the parked
        invocation at once (:meth:`watch`)."""
        for change in self.watch(pending.invocation_id, timeout=timeout, cancel_on_close=cancel_on_close):
            verdict = decided(change, pending)
            if verdict is not None:
                return verdict
        raise undecided()

    def invocation(self, invocation_id: str) -> pb.Invocation:
        """The invocation as it now is (GetInvocation; only this session's)."""
        return _drive(self._invocation_flow(invocation_id), _rpc)

    def events(self, invocation_id: str) -> list[pb.Event]:
        """The invocation's event trail (6.13), oldest first."""
        return _drive(self._events_flow(invocation_id), _rpc)

    def list_parked(self) -> list[pb.Invocation]:
        """This session's invocations waiting for a confirmation now, oldest first (``ListParked``;
        ``proposal_id`` is the model's tool call id): what a process resuming the session's runs
        elsewhere may have to cancel."""
        return _drive(self._list_parked_flow(), _rpc)

    def find(self, call_id: str, name: str, *, model_call_id: str = "") -> pb.Invocation | None:
        """The invocation this session's proposal of tool call ``call_id`` made (``FindInvocation``,
        by the tool and the derived idempotency key; ``name``: legal or callgate name,
        ``model_call_id``: default the current one), or None when no proposal of this session
        used that key. For a process that holds a tool call id but no invocation id (a run state
        restored elsewhere): :meth:`parked` / :meth:`cancel` follow."""
        return _drive(self._find_flow(call_id, name, model_call_id), _rpc)

    def parked(self, invocation_id: str, tool_call_id: str = "") -> NeedsConfirmation | None:
        """The invocation as a :class:`NeedsConfirmation` while it waits for a confirmer (e.g. a
        :class:`Replayed` in state AUTHORIZED after a restart), else None."""
        return parked(self.invocation(invocation_id), tool_call_id)

    def cancel(self, invocation_id: str, *, reason: str = "") -> str:
        """Cancel (idempotent on every state): before the commit boundary the invocation becomes
        CANCELLED_BEFORE_COMMIT; after it, the result is withheld from the model (6.7, 6.12).
        The state it is now in."""
        return _drive(self._cancel_flow(invocation_id, reason), _rpc)

    def result(self, invocation_id: str) -> str:
        """The tool message of an observed invocation (GetResult)."""
        return _drive(self._result_flow(invocation_id), _rpc)

    def result_page(self, invocation_id: str, page_token: str = "") -> pb.GetResultResponse:
        """One page of the tool message (GetResult): ``message``, ``truncated``, ``next_page_token``."""
        return _drive(self._result_page_flow(invocation_id, page_token), _rpc)


__all__ = ["Client", "Confirmer", "ExecutionError", "Session", "ToolCall", "target"]
