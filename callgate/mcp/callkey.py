"""The idempotency key of one MCP ``tools/call`` (spec 6.8; docs/MCP.md, "Idempotency").

A key names one intended call. MCP gives two ways to name it:

1. the client's own key, ``_meta["io.callgate/idempotency-key"]``: the client decides which
   calls are the same (the sidecar scopes it to tenant, subject, tool and version, across
   sessions and transports, like any runtime's key over gRPC);
2. else the request itself: inside one session (a stdio gateway process, or one streamable HTTP
   ``Mcp-Session-Id``) a request is identified by ``_meta["io.callgate/request-id"]`` when the
   client sends one, else by its JSON-RPC ``id``, which MCP forbids reusing within a session. A
   message that repeats a request identity is a retry of that request (a re-sent POST, a
   transport that delivers twice) and is answered from the first one; it is never run twice.

Nothing else is deduplicated: two requests with equal arguments are two calls (a user's second
"toggle" runs again, after its own confirmation where policy says confirm), a request of another
session or transport never shares a result, and a call without a session (stateless HTTP: no
session to scope a request id to) gets no key at all, so it always runs as a new call.
Read-only tools get no derived key either (a repeated read runs again).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

IDEMPOTENCY_META_KEY = "io.callgate/idempotency-key"
"""``_meta`` member of ``tools/call`` with the client's own idempotency key."""

REQUEST_ID_META_KEY = "io.callgate/request-id"
"""``_meta`` member naming this request within its session: a client whose retries go out
under a new JSON-RPC id (a reconnect) sends the same value again."""

DERIVED_PREFIX = "mcpr1-"


class KeySource(str, Enum):
    """Where the key of a call came from (for the log and the tests)."""

    CLIENT = "client"
    """``_meta["io.callgate/idempotency-key"]``."""
    META_REQUEST = "meta_request"
    """``_meta["io.callgate/request-id"]`` within the session."""
    JSONRPC_ID = "jsonrpc_id"
    """The JSON-RPC request id within the session."""
    NONE = "none"
    """No key: a read, a tool without idempotency support, or no session to scope a retry to."""


@dataclass(frozen=True, slots=True)
class CallKey:
    key: str
    source: KeySource


@dataclass(frozen=True, slots=True)
class RequestScope:
    """What identifies one request: the callgate session of the MCP connection (``retries``
    false when the transport has no session, e.g. stateless streamable HTTP) and the request."""

    tenant: str
    subject: str
    session_id: str
    retries: bool
    jsonrpc_id: str | int | None


def _request_identity(scope: RequestScope, meta: Mapping[str, Any]) -> tuple[KeySource, str] | None:
    given = meta.get(REQUEST_ID_META_KEY)
    if isinstance(given, str) and given:
        return KeySource.META_REQUEST, "m:" + given
    rid = scope.jsonrpc_id
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return None
    # 1 and "1" are different JSON-RPC ids: the JSON text keeps them apart
    return KeySource.JSONRPC_ID, "j:" + json.dumps(rid)


def call_key(scope: RequestScope, tool: str, meta: Mapping[str, Any], *, derive: bool) -> CallKey:
    """The key for Propose. ``derive``: the tool is a write whose ToolSpec supports idempotency
    (only those get a key the client did not give)."""
    given = meta.get(IDEMPOTENCY_META_KEY)
    if isinstance(given, str) and given:
        return CallKey(given, KeySource.CLIENT)
    if not derive or not scope.retries:
        return CallKey("", KeySource.NONE)
    identity = _request_identity(scope, meta)
    if identity is None:
        return CallKey("", KeySource.NONE)
    source, request = identity
    material = "\x00".join((scope.tenant, scope.subject, scope.session_id, tool, request))
    return CallKey(DERIVED_PREFIX + hashlib.sha256(material.encode()).hexdigest()[:40], source)


__all__ = [
    "IDEMPOTENCY_META_KEY",
    "REQUEST_ID_META_KEY",
    "CallKey",
    "KeySource",
    "RequestScope",
    "call_key",
]
