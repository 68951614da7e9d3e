"""Which session an invocation belongs to, checked the same way by both halves (the agent's
GetInvocation, GetResult and Cancel, and the executor half's reads for a session)."""

from __future__ import annotations

import hmac

from callgate.base.errors import invocation_not_found
from callgate.store.base import InvocationRecord, Store


async def owned_invocation(store: Store, invocation_id: str, session_id: str) -> InvocationRecord:
    """The invocation ``invocation_id`` if it belongs to the session ``session_id``, for the
    agent's RPCs that take an invocation id (GetInvocation, GetResult, Cancel). A missing session
    id, an unknown invocation and another session's invocation all raise the same
    ``invocation_not_found`` (one code, one message), so existence does not leak across sessions."""
    inv = await store.get_invocation(invocation_id) if session_id and invocation_id else None
    if inv is None or not hmac.compare_digest(inv.session_id.encode(), session_id.encode()):
        raise invocation_not_found("unknown invocation_id")
    return inv


__all__ = ["owned_invocation"]
