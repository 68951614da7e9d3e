"""The raw JSON-RPC message before the SDK parses it (spec 6.3, 6.4 layer 1, 6.14).

The MCP SDK decodes every message with a lenient JSON parser (a duplicate key keeps its last
value, ``NaN`` is a number), so what reaches a ``tools/call`` handler is not the text the client
sent. The gateway therefore reads each message itself first (:func:`screen`):

* the bytes of ``params.arguments`` are cut out of the message exactly as sent and handed to the
  sidecar's strict parser (:class:`WireCall`), so duplicate keys, lone surrogates, ``NaN``,
  overflow, excess depth and size are refused with the very codes a gRPC proposal gets;
* the rest of the message (the envelope, with ``arguments`` replaced by ``{}``) is parsed by the
  same strict parser; a malformed envelope is answered with a JSON-RPC error (``-32700``, the
  callgate code in ``error.data.code``) and never reaches the SDK;
* a message whose envelope is sound but whose arguments the SDK cannot decode (a lone
  surrogate) is given to the SDK with ``arguments: {}``: the handler still proposes the raw
  bytes, which the sidecar refuses, so the client gets the same refusal as over gRPC.

Both transports use it: :func:`strict_stdio_server` (the stdio transport, one message per line;
the SDK's own drops an unparsable line without an answer) and :class:`StrictBody` (an ASGI
wrapper of the streamable HTTP endpoint, after bearer authentication). The handler finds the
:class:`WireCall` with :func:`wire_call_of`.
"""

from __future__ import annotations

import json
import json.decoder
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, cast

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage

from callgate.arguments.parse import ParseLimits, parse_json_document
from callgate.base.errors import CallgateError

log = logging.getLogger("callgate.mcp")

MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
"""Largest JSON-RPC message read (a stdio line, an HTTP body); larger ones are answered with an
error and not parsed. Arguments have their own, smaller limit in the sidecar (``too_large``)."""
ENVELOPE_LIMITS: Final = ParseLimits(max_bytes=MAX_MESSAGE_BYTES, max_depth=64)
WIRE_SCOPE_KEY: Final = "callgate.wire"
"""ASGI scope member holding the :class:`WireCall` of an HTTP request."""

_scanstring = cast(Callable[[str, int, bool], tuple[str, int]], getattr(json.decoder, "scanstring"))  # noqa: B009
_WS: Final = re.compile(r"[ \t\n\r]*")
_SCALAR: Final = re.compile(r"-?(?:Infinity|NaN|[0-9][0-9.eE+\-]*)|true|false|null|NaN|Infinity")


@dataclass(frozen=True, slots=True)
class WireCall:
    """A ``tools/call`` as it came over the wire."""

    request_id: str | int | None
    arguments: bytes | None
    """The exact bytes of ``params.arguments``; ``None`` when the member is absent."""


@dataclass(frozen=True, slots=True)
class Screened:
    """What to do with one message: give ``forward`` to the SDK, or answer ``error`` at once."""

    forward: bytes | None
    error: types.JSONRPCError | None = None
    call: WireCall | None = None
    request_id: str | int | None = None
    """The message's ``id`` when it has exactly one, a string or an integer."""


class _Malformed(ValueError):
    pass


def _skip_value(text: str, i: int) -> int:
    """The offset after the JSON value at ``i`` (whitespace skipped), without recursion and
    without judging it: the strict parser does that on the bytes cut out."""
    depth = 0
    while True:
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        ch = text[i : i + 1]
        if ch == '"':
            _, i = _scanstring(text, i + 1, False)
        elif ch in ("{", "["):
            depth += 1
            i += 1
            continue
        elif ch in ("}", "]"):
            if depth == 0:
                raise _Malformed("unbalanced")
            depth -= 1
            i += 1
        elif ch in (",", ":") and depth > 0:
            i += 1
            continue
        else:
            m = _SCALAR.match(text, i)
            if m is None or m.end() == i:
                raise _Malformed("not a JSON value")
            i = m.end()
        if depth == 0:
            return i


def _members(text: str, i: int) -> tuple[list[tuple[str, int, int]], int]:
    """``(key, value start, value end)`` of the object at ``i`` and the offset after it."""
    i = _WS.match(text, i).end()  # type: ignore[union-attr]
    if text[i : i + 1] != "{":
        raise _Malformed("not an object")
    out: list[tuple[str, int, int]] = []
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    if text[i : i + 1] == "}":
        return out, i + 1
    while True:
        if text[i : i + 1] != '"':
            raise _Malformed("expected a key")
        key, i = _scanstring(text, i + 1, False)
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text[i : i + 1] != ":":
            raise _Malformed("expected ':'")
        start = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        end = _skip_value(text, start)
        out.append((key, start, end))
        i = _WS.match(text, end).end()  # type: ignore[union-attr]
        if text[i : i + 1] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            continue
        if text[i : i + 1] == "}":
            return out, i + 1
        raise _Malformed("expected ',' or '}'")


def _one(members: list[tuple[str, int, int]], key: str) -> tuple[int, int] | None:
    found = [(s, e) for k, s, e in members if k == key]
    return found[0] if len(found) == 1 else None


def _request_id(text: str, members: list[tuple[str, int, int]]) -> str | int | None:
    span = _one(members, "id")
    if span is None:
        return None
    try:
        value = json.loads(text[span[0] : span[1]])
    except ValueError:
        return None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _string_member(text: str, members: list[tuple[str, int, int]], key: str) -> str | None:
    span = _one(members, key)
    if span is None:
        return None
    try:
        value = json.loads(text[span[0] : span[1]])
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _error(rpc_code: int, message: str, request_id: str | int | None, code: str = "") -> types.JSONRPCError:
    """A JSON-RPC error; ``code`` (callgate's stable code) goes in ``error.data.code``."""
    data = {"code": code} if code else None
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=rpc_code, message=message, data=data)
    )


def screen(raw: bytes) -> Screened:
    """Judge one JSON-RPC message (module docstring). Never raises."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return Screened(None, _error(types.INVALID_REQUEST, "message too large", None, code="too_large"))
    text = raw.decode("utf-8", "surrogateescape")  # invalid bytes survive the cut unchanged
    try:
        top, end = _members(text, 0)
        if _WS.match(text, end).end() != len(text):  # type: ignore[union-attr]
            raise _Malformed("data after the message")
    except (_Malformed, ValueError, IndexError):
        try:  # valid JSON that is not one object (a batch: MCP has none since 2025-06-18)
            parse_json_document(raw, ENVELOPE_LIMITS)
        except CallgateError as exc:
            return Screened(
                None, _error(types.PARSE_ERROR, f"Parse error: {exc.message}", None, code=exc.code.value)
            )
        return Screened(
            None,
            _error(
                types.INVALID_REQUEST, "Invalid request: not one JSON-RPC message", None, code="not_an_object"
            ),
        )
    # a response's id is the gateway's own request: an error about it is not an answer to it
    request_id = _request_id(text, top) if _one(top, "method") is not None else None
    call: WireCall | None = None
    envelope = raw
    params = _one(top, "params")
    if _string_member(text, top, "method") == "tools/call" and params is not None:
        try:
            inner, _ = _members(text, params[0])
        except (_Malformed, ValueError, IndexError):
            inner = []
        args = [(s, e) for k, s, e in inner if k == "arguments"]
        if len(args) == 1:
            s, e = args[0]
            call = WireCall(request_id, text[s:e].encode("utf-8", "surrogateescape"))
            envelope = (text[:s] + "{}" + text[e:]).encode("utf-8", "surrogateescape")
        elif not args:
            call = WireCall(request_id, None)
    try:
        parse_json_document(envelope, ENVELOPE_LIMITS)
    except CallgateError as exc:  # messages give positions and pointers, never the bytes
        return Screened(
            None, _error(types.PARSE_ERROR, f"Parse error: {exc.message}", request_id, code=exc.code.value)
        )
    if call is None or envelope is raw:
        return Screened(raw, None, call, request_id)
    if not (call.arguments or b"").startswith(b"{"):  # the SDK refuses a non-object: the parser says why
        return Screened(envelope, None, call, request_id)
    try:
        types.jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValueError:  # the SDK cannot decode the arguments: it gets {} and the handler the bytes
        return Screened(envelope, None, call, request_id)
    return Screened(raw, None, call, request_id)


def wire_call_of(ctx: Any) -> WireCall | None:
    """The :class:`WireCall` of the request being handled (stdio: the request context; HTTP:
    the ASGI scope), when its id is this request's."""
    request = getattr(ctx, "request", None)
    call = request if isinstance(request, WireCall) else None
    if call is None:
        scope = getattr(request, "scope", None)
        found = scope.get(WIRE_SCOPE_KEY) if isinstance(scope, dict) else None
        call = found if isinstance(found, WireCall) else None
    if call is None or call.request_id != getattr(ctx, "request_id", None):
        return None
    return call


def wire_arguments(call: WireCall | None, parsed: Mapping[str, Any] | None) -> bytes:
    """The bytes to propose: the wire's when the transport screened the message (absent
    arguments are ``{}``), else the SDK's decoded value re-encoded (an unscreened transport)."""
    if call is not None:
        return call.arguments if call.arguments is not None else b"{}"
    return json.dumps(dict(parsed or {}), ensure_ascii=False).encode()


# ---------------------------------------------------------------------------------------- stdio
def _claim_stdio() -> tuple[BinaryIO, BinaryIO, Callable[[], None]]:
    """The wire on private descriptors; fd 0 reads the null device and fd 1 writes to stderr
    while serving, so nothing else in the process (a library's print) can corrupt the wire."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)

    return os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb"), restore


@asynccontextmanager
async def strict_stdio_server(
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Any], MemoryObjectSendStream[SessionMessage]]]:
    """The MCP stdio transport (newline-delimited JSON-RPC) with every message screened: the
    drop-in for the SDK's ``stdio_server()``."""
    restore: Callable[[], None] | None = None
    if stdin is None or stdout is None:
        stdin, stdout, restore = _claim_stdio()
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    lock = anyio.Lock()

    async def emit(message: types.JSONRPCMessage) -> None:
        data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        async with lock:
            await anyio.to_thread.run_sync(_write, stdout, data)

    async def read_lines() -> None:
        async with read_send:
            while True:
                line = await anyio.to_thread.run_sync(
                    stdin.readline, MAX_MESSAGE_BYTES + 1, abandon_on_cancel=True
                )
                if not line:
                    return
                if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # drop the rest of the line
                        line = await anyio.to_thread.run_sync(stdin.readline, 1 << 20, abandon_on_cancel=True)
                    line = b"x" * (MAX_MESSAGE_BYTES + 1)
                raw = line.rstrip(b"\r\n")
                if not raw.strip():
                    continue
                try:
                    screened = screen(raw)
                except Exception as exc:  # a bug of ours must not end the session unanswered
                    log.warning("could not screen an MCP message: %s", type(exc).__name__)
                    screened = Screened(
                        None, _error(types.PARSE_ERROR, "Parse error", None, code="invalid_json")
                    )
                await _deliver(screened, read_send, emit)

    async def write_lines() -> None:
        async with write_recv:
            async for session_message in write_recv:
                await emit(session_message.message)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_lines)
            yield read_recv, write_send
            tg.cancel_scope.cancel()
    finally:
        if restore is not None:
            restore()


def _write(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


async def _deliver(
    s: Screened, read_send: MemoryObjectSendStream[Any], emit: Callable[[types.JSONRPCMessage], Any]
) -> None:
    if s.error is not None or s.forward is None:
        err = s.error or _error(types.PARSE_ERROR, "Parse error", None)
        log.info("refused a malformed MCP message: %s", (err.error.data or {}).get("code", err.error.code))
        await emit(err)
        return
    try:
        message = types.jsonrpc_message_adapter.validate_json(s.forward, by_name=False)
    except ValueError:
        await emit(_error(types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message", s.request_id))
        return
    metadata = ServerMessageMetadata(request_context=s.call) if s.call is not None else None
    await read_send.send(SessionMessage(message, metadata=metadata))


# ----------------------------------------------------------------------------------------- HTTP
class StrictBody:
    """ASGI wrapper of the streamable HTTP endpoint: an authenticated POST's body is screened;
    a malformed one is answered ``400`` with the JSON-RPC error, a sound one goes on (with
    ``arguments: {}`` where the SDK could not decode them) and its :class:`WireCall` in the
    scope. Requests without an authenticated user pass untouched to the SDK's bearer check."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        user = scope.get("user")
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or getattr(user, "access_token", None) is None
        ):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                return
            body += event.get("body", b"")
            if len(body) > MAX_MESSAGE_BYTES:
                await _answer(
                    send, 413, _error(types.INVALID_REQUEST, "message too large", None, code="too_large")
                )
                return
            if not event.get("more_body", False):
                break
        s = screen(bytes(body))
        if s.error is not None or s.forward is None:
            err = s.error or _error(types.PARSE_ERROR, "Parse error", None)
            await _answer(send, 400, err)
            return
        forward = s.forward
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": forward, "more_body": False}
            return cast(dict[str, Any], await receive())  # then the disconnect, when it comes

        inner = dict(scope)
        if s.call is not None:
            inner[WIRE_SCOPE_KEY] = s.call
        await self.app(inner, replay, send)


async def _answer(send: Any, status: int, err: types.JSONRPCError) -> None:
    data = err.model_dump_json(by_alias=True, exclude_unset=True).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def guard_endpoint(app: Any, path: str) -> None:
    """Wrap the Starlette route serving ``path`` (the SDK's streamable HTTP app) in
    :class:`StrictBody`."""
    for route in getattr(app, "routes", []):
        if getattr(route, "path", None) == path:
            route.app = StrictBody(route.app)
            return
    raise LookupError(f"no route {path}")


__all__ = [
    "MAX_MESSAGE_BYTES",
    "Screened",
    "StrictBody",
    "WireCall",
    "guard_endpoint",
    "screen",
    "strict_stdio_server",
    "wire_arguments",
    "wire_call_of",
]
