"""Per-subject limits on the HTTP gateway's MCP sessions (streamable HTTP, stateful).

The SDK's session manager caps sessions gateway-wide only: one token holder could open them all
and lock every other user out (503). Here each subject (the token's ``sub``) holds at most
``max_sessions_per_subject`` sessions; the opening request of one more is answered HTTP 429 with
the JSON-RPC error ``session_limit`` and never reaches the SDK, while other subjects keep
opening theirs. With ``max_sessions`` gateway-wide and sessions closed after
``session_idle_minutes`` without a request, the memory sessions hold is bounded by the two.

Accounting is exact under concurrency: the gate reserves a place for the subject before the
request reaches the SDK (a check and an increment with no ``await`` between them), the manager
hands the reservation to the session it admits, and the place is given back when that session is
discarded (DELETE, idle timeout, crash) or, when no session was established, when the request
ends.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("callgate.mcp")

SERVER_ERROR = -32000
"""JSON-RPC implementation-defined server error; callgate's stable code is in ``error.data.code``."""


async def send_jsonrpc_error(send: Send, status: int, code: str, message: str, **data: Any) -> None:
    """An HTTP error whose body is a JSON-RPC error (no request id) naming callgate's ``code``."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": SERVER_ERROR, "message": message, "data": {"code": code, **data}},
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class _Reservation:
    subject: str
    session_id: str = ""


_reservation: contextvars.ContextVar[_Reservation | None] = contextvars.ContextVar(
    "callgate_mcp_reservation", default=None
)


class SubjectSessions:
    """Open sessions per subject."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}
        self._owner: dict[str, str] = {}  # session id -> subject

    def count(self, subject: str) -> int:
        return self._open.get(subject, 0)

    def reserve(self, subject: str) -> _Reservation | None:
        """A place for one more session of ``subject``, or None at its limit (synchronous: atomic
        with respect to every other request on the event loop)."""
        n = self._open.get(subject, 0)
        if n >= self.limit:
            return None
        self._open[subject] = n + 1
        return _Reservation(subject)

    def _release(self, subject: str) -> None:
        n = self._open.get(subject, 0) - 1
        if n > 0:
            self._open[subject] = n
        else:
            self._open.pop(subject, None)

    def admitted(self, reservation: _Reservation, session_id: str) -> None:
        """The reserved place now belongs to ``session_id`` (given back by :meth:`ended`)."""
        reservation.session_id = session_id
        self._owner[session_id] = reservation.subject

    def unused(self, reservation: _Reservation) -> None:
        """The request that reserved a place ended without a session: give the place back."""
        if not reservation.session_id:
            self._release(reservation.subject)

    def ended(self, session_id: str) -> None:
        subject = self._owner.pop(session_id, None)
        if subject is not None:
            self._release(subject)


class LimitedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, telling :class:`SubjectSessions` which session each admitted
    reservation became and when a session ends (and ``on_end(session_id)``, so the gateway
    forgets what it kept for that connection)."""

    def __init__(
        self, *args: Any, subjects: SubjectSessions, on_end: Callable[[str], None], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.subjects = subjects
        self._on_end = on_end

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        reservation = _reservation.get()
        if reservation is None:  # the gate reserves for every opening request: fail closed
            return None
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id:
            self.subjects.admitted(reservation, transport.mcp_session_id)
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        known = session_id in self._server_instances
        await super()._discard_session(session_id, transport)
        if known:
            self.subjects.ended(session_id)
            self._on_end(session_id)


def _header(scope: Scope, name: str) -> str | None:
    raw = name.lower().encode("latin-1")
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == raw), None)


def opens_session(scope: Scope) -> bool:
    """Whether the SDK would try to open a stateful session for this request (no session id, a
    handshake-era or absent protocol version: the 2026-07-28 protocol has no sessions)."""
    if scope["type"] != "http" or _header(scope, MCP_SESSION_ID_HEADER) is not None:
        return False
    version = _header(scope, MCP_PROTOCOL_VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


class SubjectGate:
    """ASGI app in front of the session manager: a request that would open a session reserves a
    place for its subject first, or is refused with ``session_limit``."""

    def __init__(self, app: ASGIApp, subjects: SubjectSessions) -> None:
        self.app = app
        self.subjects = subjects
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not opens_session(scope):
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        subject = user.access_token.subject if isinstance(user, AuthenticatedUser) else None
        reservation = self.subjects.reserve(subject) if subject else None
        if reservation is None:
            self.refused += 1
            log.warning(
                "mcp http: refused a new session: its subject has %d open (the limit)", self.subjects.limit
            )
            await send_jsonrpc_error(
                send,
                429,
                "session_limit",
                f"callgate: this subject already has {self.subjects.limit} open MCP sessions (the limit); "
                "end one (HTTP DELETE) or wait until an idle one is closed",
                limit=self.subjects.limit,
            )
            return
        token = _reservation.set(reservation)
        try:
            await self.app(scope, receive, send)
        finally:
            _reservation.reset(token)
            self.subjects.unused(reservation)


__all__ = ["LimitedSessionManager", "SubjectGate", "SubjectSessions", "opens_session", "send_jsonrpc_error"]
