"""The store contract: sessions, tool views, invocations and their append-only events.

Every method is async and durable when it returns: the gate answers an RPC only after the
events describing it are stored (spec 6.13). ``transition`` is a compare-and-set on the state so
that two racing callers (two ``Confirm`` calls, ``Cancel`` vs ``Confirm``) cannot both win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.states import State


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    tenant: str
    subject: str
    timezone: str
    locale: str
    budgets: Mapping[str, int]
    tool_allowlist: tuple[str, ...]
    opened_at: str


@dataclass(frozen=True, slots=True)
class ToolViewRecord:
    """Which ToolSpecs were shown to the model for one model call (6.13 question 1)."""

    session_id: str
    model_call_id: str
    tools: tuple[str, ...]
    """``name@version`` keys shown."""
    spec_digests: Mapping[str, str]
    tool_set_digest: str
    created_at: str


@dataclass(frozen=True, slots=True)
class InvocationRecord:
    invocation_id: str
    session_id: str
    model_call_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    tenant: str
    subject: str
    state: State
    raw_arguments: bytes
    digest: str = ""
    normalized_arguments: bytes = b""
    decision: Mapping[str, Any] | None = None
    rejection: Mapping[str, Any] | None = None
    idempotency_key: str = ""
    deadline: str = ""
    confirmation_expires_at: str = ""
    policy_revision: str = ""
    created_at: str = ""
    updated_at: str = ""


@dataclass(frozen=True, slots=True)
class EventRecord:
    event_id: str
    invocation_id: str
    seq: int
    at: str
    kind: str
    from_state: State | None
    to_state: State
    trace_id: str
    span_id: str
    data: Mapping[str, Any] = field(default_factory=dict)


class Store(Protocol):
    async def put_session(self, session: SessionRecord) -> None: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def put_tool_view(self, view: ToolViewRecord) -> None: ...

    async def get_tool_view(self, session_id: str, model_call_id: str) -> ToolViewRecord | None: ...

    async def create_invocation(self, record: InvocationRecord, events: Sequence[EventRecord]) -> None:
        """Insert a new invocation with its first events, atomically."""
        ...

    async def transition(
        self, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
    ) -> bool:
        """Replace the invocation row with ``record`` and append ``events`` iff its stored state
        is still ``expected``. Returns False (and writes nothing) when another writer won."""
        ...

    async def get_invocation(self, invocation_id: str) -> InvocationRecord | None: ...

    async def list_events(self, invocation_id: str) -> list[EventRecord]: ...

    async def list_pending(self, tenant: str) -> list[InvocationRecord]:
        """Invocations parked for confirmation (state AUTHORIZED with a pending confirmation)."""
        ...

    async def close(self) -> None: ...
