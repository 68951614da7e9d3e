"""The client's sans-I/O core: what the sync client (:mod:`callgate.client.sync`) and the asyncio
client (:mod:`callgate.client.aio`) do alike, written once.

Each operation is a *flow*: a generator that yields every piece of I/O it needs as an effect
(:class:`Rpc`; the executor helper also :class:`Invoke`, :class:`Sleep` and :class:`Announce`)
and is sent back the answer, or thrown the :class:`CallgateClientError` the call failed with. Flows
build the requests, decode the answers, turn errors into answers where the API says so (a
FindInvocation that finds nothing is None) and keep the state (the tools the last ``tools()``
listed, the helper's attempts and stages); they never touch a channel, a clock or an event
loop. A shell drives a flow (:class:`Driven`): ``sync.py`` with blocking gRPC calls and
``time.sleep``, ``aio.py`` with ``grpc.aio`` and awaits. This is httpx's split (``BaseClient``
keeps what ``Client`` and ``AsyncClient`` share) with each step's I/O handed out as a sans-I/O
protocol library hands it (h11): the two clients cannot drift apart.

What stays in the shells differs by nature: the channels and ``close``, the awaits, the
WatchInvocation stream, and the asyncio helper's own hooks (``shield``, ``on_stage``, reporting
a cancelled tool function before the cancellation goes on).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

import grpc
from google.protobuf.message import Message

from callgate.client._wire import (
    PENDING_PAGES_MAX,
    find_request,
    outcome_of,
    own,
    parse_tools,
    pending_of,
)
from callgate.client.errors import (
    CallgateClientError,
    CallRefused,
    DeadlineExceeded,
    MalformedAnswer,
    from_rpc_error,
)
from callgate.client.executor import (
    Committed,
    RetryAfter,
    Stage,
    Stop,
    ToolContext,
    ToolResult,
    after_report,
    attempt_context,
    dumps,
    report_for,
    state_name,
    tool_result,
)
from callgate.client.outcomes import NeedsConfirmation, Outcome, Pending, not_listed
from callgate.client.tools import Dialect, Tool, ToolNames, render
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

T = TypeVar("T")
E = TypeVar("E")
Ch = TypeVar("Ch")
C = TypeVar("C", bound="ClientCore[Any]")

TERMINAL = frozenset(
    {
        "OBSERVED", "PARSE_REJECTED", "VALIDATION_REJECTED", "AUTHORIZATION_REJECTED",
        "CANCELLED_BEFORE_COMMIT", "FAILED_AFTER_COMMIT",
    }
)  # fmt: skip


def target(address: str) -> str:
    """A gRPC target: a filesystem path (absolute or relative) becomes ``unix:<absolute path>``."""
    if address.startswith(("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:")) or (
        ":" in address and not address.startswith((".", "/"))
    ):
        return address
    return "unix:" + os.path.abspath(address)


def failed(err: Exception) -> CallgateClientError:
    """The typed error of a call that raised ``err``: a gRPC error by its status and ErrorInfo
    (:func:`from_rpc_error`); anything else (a TypeError or ValueError: an answer that does not
    decode) :class:`MalformedAnswer`."""
    if isinstance(err, grpc.RpcError):
        return from_rpc_error(err)
    return MalformedAnswer(f"undecodable answer: {type(err).__name__}")


# ---------------------------------------------------------------- effects: the I/O a flow asks for
@dataclass(frozen=True)
class Rpc:
    """A unary call: the stub's ``method`` with ``request`` within ``timeout`` seconds."""

    method: Callable[..., Any] = field(repr=False)
    request: Message
    timeout: float
    traceparent: str | None = None
    shielded: bool = False
    """The executor helper's ReportOutcome: the asyncio helper enters its ``shield()`` around it."""


@dataclass(frozen=True)
class Invoke:
    """Call the tool function with ``ctx``: answered with what it returned, checked to be
    :class:`Committed` (``executor.checked``), or with the ``Exception`` it raised (mapped to an
    outcome, never swallowed into success)."""

    ctx: ToolContext
    report: Callable[..., Any] = field(repr=False)
    """The executor's ReportOutcome (:meth:`interrupted`)."""
    timeout: float

    def interrupted(self, interruption: BaseException) -> Rpc:
        """The report of this attempt when its function was interrupted (the asyncio task
        cancelled): OUTCOME_UNKNOWN, since nobody knows whether it committed."""
        request = report_for(interruption, None, self.ctx.attempt_id)
        return Rpc(self.report, request, self.timeout, shielded=True)


@dataclass(frozen=True)
class Sleep:
    """Wait out the sidecar's retry backoff before the next attempt."""

    seconds: float


@dataclass(frozen=True)
class Announce:
    """The executor helper reached ``stage`` (the asyncio helper's ``on_stage``)."""

    stage: Stage


Effect: TypeAlias = Rpc | Invoke | Sleep | Announce
Calls: TypeAlias = Generator[Rpc, Any, T]
"""A flow of unary calls only, returning a ``T``."""
Flow: TypeAlias = Generator[Effect, Any, T]
"""The executor helper's flow."""


@dataclass(frozen=True)
class Failed:
    """The answer of a call that failed: its error, thrown into the flow at the call."""

    error: CallgateClientError


class Driven(Generic[E, T]):
    """A flow a shell drives: ``effect`` is the I/O it waits for, None once it returned ``value``.
    :meth:`answer` sends that I/O's result in, or throws a :class:`Failed` call's error in (the
    flow answers it, as a FindInvocation that finds nothing is None, or lets it go on to the
    caller)."""

    value: T

    def __init__(self, flow: Generator[E, Any, T]) -> None:
        self._flow = flow
        self.effect: E | None = None
        self._resume(flow.send, None)

    def answer(self, result: Any) -> None:
        if isinstance(result, Failed):
            self._resume(self._flow.throw, result.error)
        else:
            self._resume(self._flow.send, result)

    def _resume(self, how: Callable[[Any], E], arg: Any) -> None:
        try:
            self.effect = how(arg)
        except StopIteration as end:
            self.effect = None
            self.value = end.value


# ---------------------------------------------------------------- the client
class ClientCore(Generic[Ch]):
    """What :class:`callgate.client.Client` and :class:`callgate.client.AsyncClient` share: the
    stubs on their channels (``Ch``: the shell's channel type), the unconfigured listeners'
    errors, OpenSession and the executor helper's flow."""

    def __init__(
        self, agent: str | None = None, *, executor: str | None = None, confirmer: str | None = None,
        timeout: float = 10.0,
    ) -> None:  # fmt: skip
        self.timeout = timeout
        self._channels: list[Ch] = []
        self.gate = pb_grpc.GateStub(self._open(agent)) if agent else None  # type: ignore[no-untyped-call]
        self.executor = pb_grpc.ExecutorStub(self._open(executor)) if executor else None  # type: ignore[no-untyped-call]
        self.confirmations = pb_grpc.ConfirmationsStub(self._open(confirmer)) if confirmer else None  # type: ignore[no-untyped-call]

    def _connect(self, target: str) -> Ch:
        """A channel to ``target`` (the shell's: ``grpc`` or ``grpc.aio``)."""
        raise NotImplementedError

    def _open(self, address: str) -> Ch:
        ch = self._connect(target(address))
        self._channels.append(ch)
        return ch

    def _gate(self) -> pb_grpc.GateStub:
        if self.gate is None:
            raise CallgateClientError("no agent listener configured", code="not_configured")
        return self.gate

    def _executor(self) -> pb_grpc.ExecutorStub:
        if self.executor is None:
            raise CallgateClientError("no executor listener configured", code="not_configured")
        return self.executor

    def _confirmations(self) -> pb_grpc.ConfirmationsStub:
        if self.confirmations is None:
            raise CallgateClientError("no confirmer listener configured", code="not_configured")
        return self.confirmations

    def _session_flow(
        self, tenant: str, subject: str, timezone: str, locale: str, session_id: str,
        tool_allowlist: tuple[str, ...],
    ) -> Calls[str]:  # fmt: skip
        """OpenSession: the session's id."""
        resp = yield Rpc(
            self._gate().OpenSession,
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant=tenant, id=subject), timezone=timezone, locale=locale,
                session_id=session_id, tool_allowlist=list(tool_allowlist),
            ),
            self.timeout,
        )  # fmt: skip
        if not resp.session_id:
            raise MalformedAnswer("OpenSession answered without a session id")
        return str(resp.session_id)

    def _run_flow(
        self, invocation_id: str, executor_id: str, max_attempts: int, drive: Callable[[Calls[bytes]], Any],
        encode: Callable[[Any], bytes] = dumps,
    ) -> Flow[ToolResult]:  # fmt: skip
        """The executor helper (:meth:`callgate.client.Client.run`): BeginAttempt, the function,
        ReportOutcome, again after the advised backoff while the advice says so, then
        EncodeResult; every decision from :mod:`callgate.client.executor`. ``drive`` runs the
        flow of a ``ctx.redeem(name)`` in the shell (awaitable in the asyncio one)."""
        x = self._executor()
        attempts = 0
        while True:
            yield Announce(Stage.ATTEMPT)
            begin = pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor_id)
            att = yield Rpc(x.BeginAttempt, begin, self.timeout)
            attempts += 1
            ctx = attempt_context(invocation_id, att, _redeemer(drive, x, att.credential, self.timeout))
            ended: Committed | Exception = yield Invoke(ctx, x.ReportOutcome, self.timeout)
            done, exc = (ended, None) if isinstance(ended, Committed) else (None, ended)
            report = report_for(exc, done, att.attempt_id)
            rep = yield Rpc(x.ReportOutcome, report, self.timeout, shielded=True)
            step = after_report(invocation_id, attempts, max_attempts, done, exc, rep, encode)
            if isinstance(step, RetryAfter):
                yield Sleep(step.backoff_s)
                continue
            if isinstance(step, Stop):
                raise step.error
            yield Announce(Stage.ENCODE)
            enc = yield Rpc(x.EncodeResult, step.request, self.timeout)
            return tool_result(invocation_id, enc, step.state, attempts, step.request.parts)


def _redeemer(
    drive: Callable[[Calls[bytes]], Any], x: pb_grpc.ExecutorStub, credential: str, timeout: float
) -> Callable[[str], Any]:
    """An attempt's ``ctx.redeem``: RedeemSecret with the attempt's credential, driven by the shell."""

    def redeem(name: str) -> Any:
        return drive(
            _redeem_flow(x, pb.RedeemSecretRequest(credential=credential, secret_name=name), timeout)
        )

    return redeem


def _redeem_flow(x: pb_grpc.ExecutorStub, request: pb.RedeemSecretRequest, timeout: float) -> Calls[bytes]:
    r = yield Rpc(x.RedeemSecret, request, timeout)
    return bytes(r.value)


# ---------------------------------------------------------------- the confirmer
class ConfirmerCore:
    """What :class:`callgate.client.Confirmer` and :class:`callgate.client.AsyncConfirmer` share."""

    def __init__(self, stub: pb_grpc.ConfirmationsStub, timeout: float) -> None:
        self._stub = stub
        self.timeout = timeout

    def _list_pending_flow(self, tenant: str, page_size: int) -> Calls[list[Pending]]:
        """Every page of ListPending; a token that never ends is :class:`MalformedAnswer`."""
        out: list[Pending] = []
        token = ""
        for _ in range(PENDING_PAGES_MAX):
            page = yield Rpc(
                self._stub.ListPending,
                pb.ListPendingRequest(tenant=tenant, page_size=page_size, page_token=token),
                self.timeout,
            )
            out.extend(pending_of(p) for p in page.pending)
            token = page.next_page_token
            if not token:
                return out
        raise MalformedAnswer("ListPending did not end")

    def _confirm_flow(self, invocation_id: str, digest: str, confirmed_by: str) -> Calls[str]:
        request = pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by=confirmed_by)
        return _state_flow(Rpc(self._stub.Confirm, request, self.timeout))

    def _deny_flow(self, invocation_id: str, digest: str, denied_by: str) -> Calls[str]:
        request = pb.DenyRequest(invocation_id=invocation_id, digest=digest, denied_by=denied_by)
        return _state_flow(Rpc(self._stub.Deny, request, self.timeout))


def _state_flow(call: Rpc) -> Calls[str]:
    """A call that answers the state the invocation is now in (Confirm, Deny, Cancel): its name."""
    r = yield call
    return state_name(r.state)


# ---------------------------------------------------------------- the session
class SessionCore(Generic[C]):
    """What :class:`callgate.client.Session` and :class:`callgate.client.AsyncSession` share:
    the session's state (the tools and names the last ``tools()`` listed, the current model
    call) and the flow of each of its calls."""

    def __init__(self, client: C, session_id: str, *, tenant: str = "", subject: str = "") -> None:
        self.client = client
        self.session_id = session_id
        self.tenant = tenant
        """The session's tenant and subject as the runtime opened it ("" when not given)."""
        self.subject = subject
        self.model_call_id = ""
        self.names = ToolNames()
        self._tools: dict[tuple[str, str], Tool] = {}

    def listed(self, name: str, version: str) -> Tool | None:
        """The tool as the last :meth:`tools` listed it (None when it was not listed)."""
        return self._tools.get((name, version))

    def _tools_flow(
        self, model_call_id: str, dialect: Dialect | str, fed_invocation_ids: tuple[str, ...]
    ) -> Calls[list[dict[str, Any]]]:
        """ListTools; the listing becomes the session's current model call, names and tools."""
        d = Dialect(dialect)
        resp = yield Rpc(
            self.client._gate().ListTools,
            pb.ListToolsRequest(
                session_id=self.session_id,
                model_call_id=model_call_id,
                fed_invocation_ids=list(fed_invocation_ids),
            ),
            self.client.timeout,
        )
        tools = parse_tools(resp)
        self.model_call_id = model_call_id
        self.names = ToolNames.build(tools)
        self._tools = {(t.name, t.version): t for t in tools}
        return render(tools, self.names, d)

    def _propose_flow(self, req: pb.ProposeRequest, traceparent: str | None) -> Calls[Outcome]:
        """Propose; a request naming no listed tool (no version: the model named a tool it was
        not shown) is answered here as :func:`not_listed`, without a call (nothing can run)."""
        own(req, self.session_id)
        if not req.tool_version:
            return not_listed(req.proposal_id, req.tool_name, self.names.by_legal)
        resp = yield Rpc(self.client._gate().Propose, req, self.client.timeout, traceparent)
        return outcome_of(resp, req.proposal_id)

    def _get_flow(self, invocation_id: str) -> Calls[pb.GetInvocationResponse]:
        r: pb.GetInvocationResponse = yield Rpc(
            self.client._gate().GetInvocation,
            pb.GetInvocationRequest(invocation_id=invocation_id, session_id=self.session_id),
            self.client.timeout,
        )
        return r

    def _invocation_flow(self, invocation_id: str) -> Calls[pb.Invocation]:
        return (yield from self._get_flow(invocation_id)).invocation

    def _events_flow(self, invocation_id: str) -> Calls[list[pb.Event]]:
        return list((yield from self._get_flow(invocation_id)).events)

    def _list_parked_flow(self) -> Calls[list[pb.Invocation]]:
        r = yield Rpc(
            self.client._gate().ListParked,
            pb.ListParkedRequest(session_id=self.session_id),
            self.client.timeout,
        )
        return list(r.invocations)

    def _find_flow(self, call_id: str, name: str, model_call_id: str) -> Calls[pb.Invocation | None]:
        """FindInvocation of this session's proposal of ``call_id``; None when there is none."""
        req = find_request(self.session_id, model_call_id or self.model_call_id, call_id, name, self.names)
        try:
            r: pb.GetInvocationResponse = yield Rpc(
                self.client._gate().FindInvocation, req, self.client.timeout
            )
        except CallRefused as err:
            if err.code == "invocation_not_found":
                return None
            raise
        return r.invocation

    def _cancel_flow(self, invocation_id: str, reason: str) -> Calls[str]:
        return _state_flow(
            Rpc(
                self.client._gate().Cancel,
                pb.CancelRequest(invocation_id=invocation_id, session_id=self.session_id, reason=reason),
                self.client.timeout,
            )
        )

    def _result_page_flow(self, invocation_id: str, page_token: str = "") -> Calls[pb.GetResultResponse]:
        r: pb.GetResultResponse = yield Rpc(
            self.client._gate().GetResult,
            pb.GetResultRequest(
                invocation_id=invocation_id, page_token=page_token, session_id=self.session_id
            ),
            self.client.timeout,
        )
        return r

    def _result_flow(self, invocation_id: str) -> Calls[str]:
        """The first page's tool message as text (GetResult without a page token)."""
        r = yield from self._result_page_flow(invocation_id)
        return bytes(r.message).decode("utf-8", "replace")

    def _watch_request(self, invocation_id: str, cancel_on_close: bool) -> pb.WatchInvocationRequest:
        return pb.WatchInvocationRequest(
            invocation_id=invocation_id, session_id=self.session_id, cancel_on_close=cancel_on_close
        )


def decided(change: pb.WatchInvocationResponse, pending: NeedsConfirmation) -> bool | None:
    """What one change of a watched parked invocation says: True when it is PREPARED with the
    digest the person saw (confirmed), False when it ended otherwise, None to keep watching."""
    state = pb.State.Name(change.invocation.state)
    if state == "PREPARED" and change.invocation.digest == pending.digest:
        return True
    if change.terminal or state in TERMINAL:
        return False
    return None


def undecided() -> DeadlineExceeded:
    """The error of a watch that ended before a decision (the invocation stays parked)."""
    return DeadlineExceeded("the watch ended before a decision")
