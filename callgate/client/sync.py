"""The synchronous client: :class:`Client`, :class:`Session` and the executor helper."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from callgate.client._wire import ToolCall, outcome_of, parse_tools, propose_request, trace_metadata
from callgate.client.errors import (
    CallgateClientError,
    DeadlineExceeded,
    ExecutionError,
    MalformedAnswer,
    from_rpc_error,
)
from callgate.client.executor import Committed, ToolContext, ToolFailure, ToolResult, report_for
from callgate.client.outcomes import NeedsConfirmation, Outcome
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
        return Session(self, resp.session_id)

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
        error: dict[str, Any] = {}
        state = ""
        while True:
            att = _call(
                x.BeginAttempt,
                pb.BeginAttemptRequest(invocation_id=invocation_id, executor_id=executor_id),
                self.timeout,
            )
            attempts += 1
            if not att.attempt_id or not att.credential:
                raise MalformedAnswer("BeginAttempt answered without an attempt or credential")
            try:
                arguments = json.loads(att.normalized_arguments)
            except ValueError:
                raise MalformedAnswer("BeginAttempt answered arguments that are not JSON") from None
            credential = att.credential

            def redeem(name: str, _cred: str = credential) -> bytes:
                r = _call(
                    x.RedeemSecret, pb.RedeemSecretRequest(credential=_cred, secret_name=name), self.timeout
                )
                return bytes(r.value)

            ctx = ToolContext(
                invocation_id,
                att.attempt_number,
                credential,
                arguments,
                att.idempotency_key,
                att.deadline,
                redeem,
            )
            done: Committed | None = None
            exc: BaseException | None = None
            try:
                done = fn(ctx)
                if not isinstance(done, Committed):
                    raise TypeError("the tool function must return Committed")
            except Exception as e:  # mapped to an outcome, never swallowed into success
                exc, done = e, None
            rep = _call(x.ReportOutcome, report_for(exc, done, att.attempt_id), self.timeout)
            state = pb.State.Name(rep.state) if rep.state in pb.State.values() else ""
            if done is not None:
                value = pb.EncodeResultRequest(
                    invocation_id=invocation_id, status="ok", value=json.dumps(done.result).encode()
                )
                break
            error = {"code": type(exc).__name__, "message": "the tool failed", "retryable": rep.retry.retry}
            if not isinstance(exc, ToolFailure) and not (rep.retry.retry and attempts < max_attempts):
                # nobody knows whether it committed: no error message for the model, a typed stop
                raise ExecutionError(
                    "outcome unknown: reconcile with a status query (docs/IDEMPOTENCY.md)",
                    code="outcome_unknown",
                    state=state,
                )
            if not (rep.retry.retry and attempts < max_attempts):
                value = pb.EncodeResultRequest(
                    invocation_id=invocation_id, status="error", value=json.dumps(error).encode()
                )
                break
            sleep(rep.retry.backoff_ms / 1000)
        enc = _call(x.EncodeResult, value, self.timeout)
        final = pb.State.Name(enc.state) if enc.state in pb.State.values() else state
        return ToolResult(
            invocation_id,
            enc.message.decode("utf-8", "replace"),
            final,
            attempts,
            enc.truncated,
            enc.withheld,
        )


class Session:
    """One agent session: list tools per model call, propose the model's calls."""

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
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

    def propose(self, call: ToolCall, *, traceparent: str | None = None) -> Outcome:
        """Propose one tool call of the current model call; a typed outcome (or a typed error)."""
        if not self.model_call_id:
            raise CallgateClientError("call tools() for this model call first", code="tools_not_listed")
        req = propose_request(self.session_id, self.model_call_id, call, self.names, self._tools)
        resp = _call(self.client._gate().Propose, req, self.client.timeout, traceparent)
        return outcome_of(resp, call.id)

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

    def result(self, invocation_id: str) -> str:
        """The tool message of an observed invocation (GetResult)."""
        r = _call(
            self.client._gate().GetResult,
            pb.GetResultRequest(invocation_id=invocation_id, session_id=self.session_id),
            self.client.timeout,
        )
        return bytes(r.message).decode("utf-8", "replace")


__all__ = ["Client", "ExecutionError", "Session", "ToolCall", "target"]
