"""The synchronous client: :class:`Client`, :class:`Session` and the executor helper."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
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
from callgate.client.errors import (
    CallgateClientError,
    DeadlineExceeded,
    ExecutionError,
    MalformedAnswer,
    from_rpc_error,
)
from callgate.client.executor import (
    Committed,
    RetryAfter,
    Stop,
    ToolContext,
    ToolResult,
    after_report,
    attempt_context,
    checked,
    report_for,
    state_name,
    tool_result,
)
from callgate.client.outcomes import NeedsConfirmation, Outcome, Pending
from callgate.client.tools import Dialect, Tool, ToolNames, render
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

T = TypeVar("T")

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


def _call(fn: Callable[..., T], request: Any, timeout: float, traceparent: str | None = None) -> T:
    try:
        return fn(request, timeout=timeout, metadata=trace_metadata(traceparent))
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None
    except (TypeError, ValueError) as err:  # an answer that does not decode
        raise MalformedAnswer(f"undecodable answer: {type(err).__name__}") from None


class Client:
    """Channels to the sidecar's listeners (paths or gRPC targets); ``timeout`` in seconds per
    call. Use as a context manager or call :meth:`close`."""

    def __init__(
        self, agent: str | None = None, *, executor: str | None = None, confirmer: str | None = None,
        timeout: float = 10.0,
    ) -> None:  # fmt: skip
        self.timeout = timeout
        self._channels: list[grpc.Channel] = []
        self.gate = pb_grpc.GateStub(self._open(agent)) if agent else None  # type: ignore[no-untyped-call]
        self.executor = pb_grpc.ExecutorStub(self._open(executor)) if executor else None  # type: ignore[no-untyped-call]
        self.confirmations = pb_grpc.ConfirmationsStub(self._open(confirmer)) if confirmer else None  # type: ignore[no-untyped-call]

    def _open(self, address: str) -> grpc.Channel:
        ch = grpc.insecure_channel(target(address))
        self._channels.append(ch)
        return ch

    def close(self) -> None:
        for ch in self._channels:
            ch.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _gate(self) -> pb_grpc.GateStub:
        if self.gate is None:
            raise CallgateClientError("no agent listener configured", code="not_configured")
        return self.gate

    def _executor(self) -> pb_grpc.ExecutorStub:
        if self.executor is None:
            raise CallgateClientError("no executor listener configured", code="not_configured")
        return self.executor

    def confirmer(self) -> Confirmer:
        """The confirmer listener's calls (a confirmer UI: list, confirm, deny)."""
        if self.confirmations is None:
            raise CallgateClientError("no confirmer listener configured", code="not_configured")
        return Confirmer(self.confirmations, self.timeout)

    def session(
        self, tenant: str, subject: str, *, timezone: str = "UTC", locale: str = "en", session_id: str = "",
        tool_allowlist: tuple[str, ...] = (),
    ) -> Session:  # fmt: skip
        """OpenSession for the runtime's authenticated user (never an identity the model named)."""
        resp = _call(
            self._gate().OpenSession,
            pb.OpenSessionRequest(
                subject=pb.Subject(tenant=tenant, id=subject), timezone=timezone, locale=locale,
                session_id=session_id, tool_allowlist=list(tool_allowlist),
            ),
            self.timeout,
        )  # fmt: skip
        if not resp.session_id:
            raise MalformedAnswer("OpenSession answered without a session id")
        return Session(self, resp.session_id, tenant=tenant, subject=subject)

    # ---------------------------------------------------------------- executor helper
    def run(
        self, invocation_id: str, fn: Callable[[ToolContext], Committed], *, executor_id: str,
        max_attempts: int = 10,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ToolResult:  # fmt: skip
        """BeginAttempt -> ``fn`` -> ReportOutcome, again while the retry advice says so (after
        its backoff, within the deadline), then EncodeResult: the model-facing tool message.
        ``sleep`` waits out the advised backoff (tests pass one that moves the sidecar's clock)."""
        x = self._executor()
        attempts = 0
        while True:
            att = _call(
                x.BeginAttempt,
                pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor_id),
                self.timeout,
            )
            attempts += 1

            def redeem(name: str, _cred: str = att.credential) -> bytes:
                r = _call(
                    x.RedeemSecret, pb.RedeemSecretRequest(credential=_cred, secret_name=name), self.timeout
                )
                return bytes(r.value)

            ctx = attempt_context(invocation_id, att, redeem)
            done: Committed | None = None
            exc: BaseException | None = None
            try:
                done = checked(fn(ctx))
            except Exception as e:  # mapped to an outcome, never swallowed into success
                exc = e
            rep = _call(x.ReportOutcome, report_for(exc, done, att.attempt_id), self.timeout)
            step = after_report(invocation_id, attempts, max_attempts, done, exc, rep)
            if isinstance(step, RetryAfter):
                sleep(step.backoff_s)
                continue
            if isinstance(step, Stop):
                raise step.error
            enc = _call(x.EncodeResult, step.request, self.timeout)
            return tool_result(invocation_id, enc, step.state, attempts)


class Confirmer:
    """A confirmer's calls on the confirmer listener: what waits for a person, and their answer,
    always bound to the digest the person saw (6.6, 6.11). ``Client(confirmer=...).confirmer()``."""

    def __init__(self, stub: pb_grpc.ConfirmationsStub, timeout: float) -> None:
        self._stub = stub
        self.timeout = timeout

    def list_pending(self, tenant: str, *, page_size: int = 0) -> list[Pending]:
        """Every parked invocation of ``tenant``, oldest first (all pages of ListPending)."""
        out: list[Pending] = []
        token = ""
        for _ in range(PENDING_PAGES_MAX):
            page = _call(
                self._stub.ListPending,
                pb.ListPendingRequest(tenant=tenant, page_size=page_size, page_token=token),
                self.timeout,
            )
            out.extend(pending_of(p) for p in page.pending)
            token = page.next_page_token
            if not token:
                return out
        raise MalformedAnswer("ListPending did not end")

    def confirm(self, invocation_id: str, digest: str, *, confirmed_by: str) -> str:
        """Approve exactly ``digest`` (another digest cancels the invocation and raises
        ``confirmation_digest_mismatch``); the state it is now in (PREPARED)."""
        r = _call(
            self._stub.Confirm,
            pb.ConfirmRequest(invocation_id=invocation_id, digest=digest, confirmed_by=confirmed_by),
            self.timeout,
        )
        return state_name(r.state)

    def deny(self, invocation_id: str, digest: str, *, denied_by: str) -> str:
        """Refuse it: CANCELLED_BEFORE_COMMIT, nothing runs; the state it is now in."""
        r = _call(
            self._stub.Deny,
            pb.DenyRequest(invocation_id=invocation_id, digest=digest, denied_by=denied_by),
            self.timeout,
        )
        return state_name(r.state)


class Session:
    """One agent session: list tools per model call, propose the model's calls."""

    def __init__(self, client: Client, session_id: str, *, tenant: str = "", subject: str = "") -> None:
        self.client = client
        self.session_id = session_id
        self.tenant = tenant
        """The session's tenant and subject as the runtime opened it ("" when not given)."""
        self.subject = subject
        self.model_call_id = ""
        self.names = ToolNames()
        self._tools: dict[tuple[str, str], Tool] = {}

    def tools(
        self,
        model_call_id: str,
        dialect: Dialect | str = Dialect.OPENAI,
        *,
        fed_invocation_ids: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """ListTools for this model call, in ``dialect`` (``openai``, ``anthropic``, ``mcp``)."""
        d = Dialect(dialect)
        resp = _call(
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

    def listed(self, name: str, version: str) -> Tool | None:
        """The tool as the last :meth:`tools` listed it (None when it was not listed)."""
        return self._tools.get((name, version))

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
        resp = _call(self.client._gate().Propose, own(req, self.session_id), self.client.timeout, traceparent)
        return outcome_of(resp, req.proposal_id)

    def watch(
        self, invocation_id: str, *, timeout: float | None = None
    ) -> Iterator[pb.WatchInvocationResponse]:
        """The invocation's changes (WatchInvocation) until a terminal state or ``timeout``."""
        stream = self.client._gate().WatchInvocation(
            pb.WatchInvocationRequest(invocation_id=invocation_id, session_id=self.session_id),
            timeout=timeout if timeout is not None else self.client.timeout,
            metadata=trace_metadata(),
        )
        try:
            yield from stream
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            stream.cancel()

    def wait_confirmed(self, pending: NeedsConfirmation, *, timeout: float) -> bool:
        """Wait (no polling) until the parked invocation is confirmed (True: PREPARED, hand it to
        the executor) or ends otherwise (False: expired or cancelled). A deadline passing raises
        :class:`DeadlineExceeded`."""
        for change in self.watch(pending.invocation_id, timeout=timeout):
            state = pb.State.Name(change.invocation.state)
            if state == "PREPARED" and change.invocation.digest == pending.digest:
                return True
            if change.terminal or state in TERMINAL:
                return False
        raise DeadlineExceeded("the watch ended before a decision")

    def _get(self, invocation_id: str) -> pb.GetInvocationResponse:
        r: pb.GetInvocationResponse = _call(
            self.client._gate().GetInvocation,
            pb.GetInvocationRequest(invocation_id=invocation_id, session_id=self.session_id),
            self.client.timeout,
        )
        return r

    def invocation(self, invocation_id: str) -> pb.Invocation:
        """The invocation as it now is (GetInvocation; only this session's)."""
        return self._get(invocation_id).invocation

    def events(self, invocation_id: str) -> list[pb.Event]:
        """The invocation's event trail (6.13), oldest first."""
        return list(self._get(invocation_id).events)

    def parked(self, invocation_id: str, tool_call_id: str = "") -> NeedsConfirmation | None:
        """The invocation as a :class:`NeedsConfirmation` while it waits for a confirmer (e.g. a
        :class:`Replayed` in state AUTHORIZED after a restart), else None."""
        return parked(self.invocation(invocation_id), tool_call_id)

    def cancel(self, invocation_id: str, *, reason: str = "") -> str:
        """Cancel (idempotent on every state): before the commit boundary the invocation becomes
        CANCELLED_BEFORE_COMMIT; after it, the result is withheld from the model (6.7, 6.12).
        The state it is now in."""
        r = _call(
            self.client._gate().Cancel,
            pb.CancelRequest(invocation_id=invocation_id, session_id=self.session_id, reason=reason),
            self.client.timeout,
        )
        return state_name(r.state)

    def result(self, invocation_id: str) -> str:
        """The tool message of an observed invocation (GetResult)."""
        r = _call(
            self.client._gate().GetResult,
            pb.GetResultRequest(invocation_id=invocation_id, session_id=self.session_id),
            self.client.timeout,
        )
        return bytes(r.message).decode("utf-8", "replace")

    def result_page(self, invocation_id: str, page_token: str = "") -> pb.GetResultResponse:
        """One page of the tool message (GetResult): ``message``, ``truncated``, ``next_page_token``."""
        r: pb.GetResultResponse = _call(
            self.client._gate().GetResult,
            pb.GetResultRequest(
                invocation_id=invocation_id, page_token=page_token, session_id=self.session_id
            ),
            self.client.timeout,
        )
        return r


__all__ = ["Client", "Confirmer", "ExecutionError", "Session", "ToolCall", "target"]
