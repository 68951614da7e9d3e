"""The confirmer listener's calls (grpc.aio, ``Confirmations`` service) and the values the pages
show: a pending item with its arguments as proposed and as normalized, and what normalization
changed between the two (by JSON pointer)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from callgate.arguments import unitext
from callgate.arguments.unitext import Flag
from callgate.client.visible import MASK_MARK
from callgate.console.render import unseen
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

ABSENT = object()


@dataclass(frozen=True, slots=True)
class Change:
    """One place where normalization changed the proposal (6.4, 6.5)."""

    pointer: str
    raw: str
    """The proposed value as JSON, or ``(absent)``."""
    normalized: str
    """The normalized value as JSON, or ``(removed)``."""


class ConsoleFlag(Enum):
    """What the console lists beside :class:`~callgate.arguments.unitext.Flag`."""

    MASKED_SECRET = "masked_secret"
    """The value holds a secret the sidecar masked (``⟦masked <name>⟧``): what runs is the
    secret itself."""


@dataclass(frozen=True, slots=True)
class Flagged:
    """A string value the person should look at closely (:mod:`callgate.arguments.unitext`)."""

    pointer: str
    value: str
    """The value as JSON."""
    flags: tuple[Flag | ConsoleFlag, ...]


def flagged(value: Any, pointer: str = "") -> list[Flagged]:
    """Every string of ``value`` (objects and arrays walked) with hidden characters, mixed
    scripts or whitespace runs, or holding a secret the sidecar masked."""
    if isinstance(value, dict):
        return [f for k in sorted(value) for f in flagged(value[k], f"{pointer}/{_escape(k)}")]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in flagged(v, f"{pointer}/{i}")]
    if isinstance(value, str):
        found = unitext.flags(value) | ({Flag.HIDDEN} if unseen(value) else set())
        masked = (ConsoleFlag.MASKED_SECRET,) if MASK_MARK.search(value) else ()
        if found or masked:
            ordered = (*masked, *(f for f in Flag if f in found))
            return [Flagged(pointer or "/", json.dumps(value, ensure_ascii=False), ordered)]
    return []


@dataclass(frozen=True, slots=True)
class Reason:
    code: str
    policy_id: str
    message: str


@dataclass(frozen=True, slots=True)
class PendingItem:
    """A parked invocation as the console shows it."""

    invocation_id: str
    tenant: str
    subject: str
    tool_name: str
    tool_version: str
    digest: str
    expires_at: str
    created_at: str
    normalized_pretty: str
    raw_pretty: str
    changes: tuple[Change, ...]
    reasons: tuple[Reason, ...]
    flagged: tuple[Flagged, ...] = ()
    """Values that will run with hidden characters, mixed scripts or whitespace runs."""

    def seconds_left(self, now: datetime) -> int:
        return max(0, int((datetime.fromisoformat(self.expires_at) - now).total_seconds()))


@dataclass(frozen=True, slots=True)
class TrailEvent:
    seq: int
    at: str
    kind: str
    from_state: str
    to_state: str
    data: str
    """The event's data as indented JSON (canonical values only; no secrets are ever on events)."""


@dataclass(frozen=True, slots=True)
class Trail:
    """An invocation and its whole event trail (GetTenantInvocation)."""

    invocation_id: str
    tenant: str
    subject: str
    tool: str
    state: str
    digest: str
    normalized_pretty: str
    events: tuple[TrailEvent, ...]
    pending: PendingItem | None
    """Set while the invocation waits for a confirmation (AUTHORIZED with an expiry)."""


class ConsoleCallError(Exception):
    """A refusal of the sidecar, with its stable callgate code (``google.rpc.ErrorInfo.reason``)."""

    def __init__(self, code: str, message: str, status: grpc.StatusCode | None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def _ints(value: Any) -> Any:
    """Integral floats back to ints (a protobuf Struct holds every number as a double)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number as written (``1e2``, ``100.00``): shown as its text, never re-printed from a
    float (``100.0`` would hide what the model proposed, or what will run)."""

    text: str


def _dumps(value: Any, pad: str | None) -> str:
    """JSON text like ``json.dumps(sort_keys=True, ensure_ascii=False)``, indented by two spaces
    when ``pad`` is not None, each :class:`Number` as its own text."""
    if isinstance(value, Number):
        return value.text
    inner = None if pad is None else pad + "  "
    sep, end = (", ", "") if inner is None else (",\n" + inner, "\n" + (pad or ""))
    start = "" if inner is None else "\n" + inner
    if isinstance(value, dict) and value:
        body = sep.join(
            f"{json.dumps(k, ensure_ascii=False)}: {_dumps(value[k], inner)}" for k in sorted(value)
        )
        return "{" + start + body + end + "}"
    if isinstance(value, list) and value:
        return "[" + start + sep.join(_dumps(v, inner) for v in value) + end + "]"
    return json.dumps(value, ensure_ascii=False)


def _pretty(value: Any) -> str:
    return _dumps(value, "")


def _parsed(data: bytes) -> Any:
    """Arguments (JSON text) with each number kept as written."""
    try:
        return json.loads(data, parse_float=Number, parse_int=Number, parse_constant=Number)
    except (ValueError, UnicodeDecodeError):
        return ABSENT


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def changes(raw: Any, normalized: Any, pointer: str = "") -> list[Change]:
    """Where ``normalized`` differs from ``raw`` (objects compared key by key, recursively)."""
    if isinstance(raw, dict) and isinstance(normalized, dict):
        out: list[Change] = []
        for key in sorted(set(raw) | set(normalized)):
            out += changes(raw.get(key, ABSENT), normalized.get(key, ABSENT), f"{pointer}/{_escape(key)}")
        return out
    if raw is not ABSENT and normalized is not ABSENT and raw == normalized and type(raw) is type(normalized):
        return []
    return [
        Change(
            pointer or "/",
            "(absent)" if raw is ABSENT else _dumps(raw, None),
            "(removed)" if normalized is ABSENT else _dumps(normalized, None),
        )
    ]


def item_of(p: pb.PendingConfirmation) -> PendingItem:
    raw, norm = _parsed(p.raw_arguments), _parsed(p.normalized_arguments)
    raw_text = _pretty(raw) if raw is not ABSENT else p.raw_arguments.decode("utf-8", "replace")
    return PendingItem(
        invocation_id=p.invocation_id,
        tenant=p.subject.tenant,
        subject=p.subject.id,
        tool_name=p.tool_name,
        tool_version=p.tool_version,
        digest=p.digest,
        expires_at=p.expires_at,
        created_at=p.created_at,
        normalized_pretty=_pretty(norm) if norm is not ABSENT else "",
        raw_pretty=raw_text,
        changes=tuple(changes(raw, norm)) if raw is not ABSENT and norm is not ABSENT else (),
        reasons=tuple(Reason(r.code, r.policy_id, r.message) for r in p.reasons),
        flagged=tuple(flagged(norm)) if norm is not ABSENT else (),
    )


def _error(err: grpc.aio.AioRpcError) -> ConsoleCallError:
    status = rpc_status.from_call(err)
    if status is not None:
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return ConsoleCallError(str(info.reason), status.message, err.code())
    return ConsoleCallError("unavailable", err.details() or "the sidecar did not answer", err.code())


class SidecarLink:
    """One channel to a sidecar's confirmer listener."""

    def __init__(self, target: str, timeout_s: float) -> None:
        self._target = target
        self._channel: grpc.aio.Channel | None = None
        self.timeout = timeout_s

    @property
    def _stub(self) -> pb_grpc.ConfirmationsStub:
        # Opened on first use, inside the serving event loop (a grpc.aio channel is bound to it).
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._target)
        return pb_grpc.ConfirmationsStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def pending(self, tenant: str) -> list[PendingItem]:
        try:
            resp = await self._stub.ListPending(
                pb.ListPendingRequest(tenant=tenant, page_size=500), timeout=self.timeout
            )
        except grpc.aio.AioRpcError as err:
            raise _error(err) from None
        return [item_of(p) for p in resp.pending]

    async def watch(self, tenant: str) -> AsyncIterator[list[PendingItem]]:
        """WatchPending: the whole list, then after each change (``ConsoleCallError`` on failure)."""
        call = self._stub.WatchPending(pb.WatchPendingRequest(tenant=tenant))
        try:
            async for msg in call:
                yield [item_of(p) for p in msg.pending]
        except grpc.aio.AioRpcError as err:
            raise _error(err) from None
        finally:
            call.cancel()

    async def confirm(self, tenant: str, invocation_id: str, digest: str, who: str, note: str) -> str:
        req = pb.ConfirmRequest(
            invocation_id=invocation_id, digest=digest, confirmed_by=who, tenant=tenant, note=note
        )
        try:
            resp = await self._stub.Confirm(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise _error(err) from None
        return str(pb.State.Name(resp.state))

    async def deny(self, tenant: str, invocation_id: str, digest: str, who: str, note: str) -> str:
        req = pb.DenyRequest(
            invocation_id=invocation_id, digest=digest, denied_by=who, tenant=tenant, note=note
        )
        try:
            resp = await self._stub.Deny(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise _error(err) from None
        return str(pb.State.Name(resp.state))

    async def trail(self, tenant: str, invocation_id: str) -> Trail:
        req = pb.GetTenantInvocationRequest(invocation_id=invocation_id, tenant=tenant)
        try:
            resp = await self._stub.GetTenantInvocation(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise _error(err) from None
        inv = resp.invocation
        pending = None
        if inv.state == pb.AUTHORIZED and inv.confirmation_expires_at:
            pending = item_of(
                pb.PendingConfirmation(
                    invocation_id=inv.invocation_id,
                    digest=inv.digest,
                    tool_name=inv.tool_name,
                    tool_version=inv.tool_version,
                    subject=inv.subject,
                    normalized_arguments=inv.normalized_arguments,
                    expires_at=inv.confirmation_expires_at,
                    reasons=list(inv.decision.reasons),
                    raw_arguments=inv.raw_arguments,
                    created_at=inv.created_at,
                )
            )
        norm = _parsed(inv.normalized_arguments)
        return Trail(
            invocation_id=inv.invocation_id,
            tenant=inv.subject.tenant,
            subject=inv.subject.id,
            tool=f"{inv.tool_name}@{inv.tool_version}",
            state=str(pb.State.Name(inv.state)),
            digest=inv.digest,
            normalized_pretty=_pretty(norm) if norm is not ABSENT else "",
            events=tuple(
                TrailEvent(
                    seq=e.seq,
                    at=e.at,
                    kind=e.kind,
                    from_state=str(pb.State.Name(e.from_state)),
                    to_state=str(pb.State.Name(e.to_state)),
                    data=_pretty(_ints(json_format.MessageToDict(e.data))) if e.data.fields else "",
                )
                for e in resp.events
            ),
            pending=pending,
        )


__all__ = [
    "Change",
    "ConsoleFlag",
    "ConsoleCallError",
    "Flagged",
    "Number",
    "PendingItem",
    "SidecarLink",
    "Trail",
    "TrailEvent",
    "changes",
    "flagged",
    "item_of",
]
