"""Decision log: committed events exported as JSON lines (a file, stdout or stderr).

One line per event::

    {"v":1,"event_id":"inv_...1","invocation_id":"inv_...","seq":1,"at":"...","kind":"proposed",
     "from_state":null,"to_state":"PROPOSED","trace_id":"...","span_id":"...","session_id":"ses_...",
     "tenant":"acme","subject":"alice","tool":"calendar.create_event@v1","data":{...}}

An ``Authorizer.Authorize`` decision (no invocation) is one line of kind ``authorize_decided``::

    {"v":1,"kind":"authorize_decided","decision_id":"dec_...","at":"...","trace_id":"...",
     "span_id":"...","parent_span_id":"...","tenant":"acme","subject":"carol",
     "capability":"files.delete","resource":"file:/tmp/a","context_digest":"sha256:...",
     "context_keys":["args","tool"],"policy_revision":"...","decision":{"effect":"allow",...}}

The request context never appears in the line, only its digest and top-level key names (its values
may hold secrets); the same record is in the store (``callgate explain --decision``).

``seq`` is 0 for events appended to an existing invocation (the store numbers them in the same
transaction; ``callgate explain`` shows the stored numbers). Configured argument fields are masked
before a line is built (:class:`Masker`).

Two explicit modes (``observability.decision_log_mode``):

* ``lossless``: the lines of a call are written (and optionally fsynced) before the RPC answers;
  a failed write fails the RPC with ``store_unavailable`` and counts
  ``callgate_audit_write_failures_total``. No decision is handed out without its line. The events
  are in the store already (the store commits first), so ``callgate explain`` still shows them.
* ``bounded``: lines go into a queue drained by a background writer; when the queue is full the
  line is dropped and counted in ``callgate_audit_events_dropped_total{reason="queue_full"}``,
  a failed write drops its batch (``reason="write_failed"``). RPCs never wait for the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from callgate.base import jsonpointer
from callgate.base.errors import store_unavailable
from callgate.base.events import EventKind
from callgate.observability.metrics import InvocationLookup, Metrics
from callgate.store.base import DecisionRecord, EventRecord, InvocationRecord, needs_arguments, with_arguments

log = logging.getLogger("callgate.decision_log")

MASK = "***"
_ABSENT = object()

_Item = tuple[EventRecord, InvocationRecord | None] | DecisionRecord
"""What waits to become a line: an event with its invocation, or an ``Authorize`` decision."""


# ------------------------------------------------------------------------------- masking
class Masker:
    """Replaces configured argument fields (JSON pointers, ``*`` = every member) by ``***``.

    An entry ``/title`` applies to every tool; ``calendar.create_event#/title`` to every version
    of that tool, ``calendar.create_event@v1#/title`` to that version only. With a key, masked
    values become ``***:`` + the first 16 hex digits of HMAC-SHA256(key, canonical JSON value),
    so equal values can be correlated across lines without being revealed.
    """

    def __init__(
        self,
        entries: Sequence[str],
        key: bytes | None = None,
        resource_template: Callable[[str], str | None] | None = None,
    ) -> None:
        self._global: list[list[str]] = []
        self._by_tool: dict[str, list[list[str]]] = {}
        for entry in entries:
            scope, _, pointer = entry.partition("#") if "#" in entry else ("", "", entry)
            segments = [jsonpointer.unescape(s) for s in pointer.split("/")[1:]]
            if scope:
                self._by_tool.setdefault(scope, []).append(segments)
            else:
                self._global.append(segments)
        self._key = key
        self._template = resource_template

    @property
    def active(self) -> bool:
        return bool(self._global or self._by_tool)

    def pointers_for(self, tool_name: str, tool_version: str) -> list[list[str]]:
        return (
            self._global
            + self._by_tool.get(tool_name, [])
            + self._by_tool.get(f"{tool_name}@{tool_version}", [])
        )

    def masked_value(self, value: Any) -> str:
        if self._key is None:
            return MASK
        canon = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return f"{MASK}:{hmac.new(self._key, canon.encode('utf-8', 'surrogatepass'), hashlib.sha256).hexdigest()[:16]}"

    def _mask(self, node: Any, segments: Sequence[str]) -> int:
        if not segments:
            return 0
        head, rest = segments[0], segments[1:]
        if isinstance(node, dict):
            keys = list(node) if head == "*" else ([head] if head in node else [])
            count = 0
            for k in keys:
                if rest:
                    count += self._mask(node[k], rest)
                else:
                    node[k] = self.masked_value(node[k])
                    count += 1
            return count
        if isinstance(node, list):
            if head == "*":
                idx = list(range(len(node)))
            elif head.isdigit() and int(head) < len(node):
                idx = [int(head)]
            else:
                idx = []
            count = 0
            for i in idx:
                if rest:
                    count += self._mask(node[i], rest)
                else:
                    node[i] = self.masked_value(node[i])
                    count += 1
            return count
        return 0

    def mask_arguments(self, value: Any, tool_name: str, tool_version: str) -> Any:
        """A masked deep copy of an arguments document."""
        pointers = self.pointers_for(tool_name, tool_version)
        if not pointers:
            return value
        doc = json.loads(json.dumps(value))
        for segments in pointers:
            self._mask(doc, segments)
        return doc

    def mask_event_data(
        self, kind: str, data: Mapping[str, Any], tool_name: str, tool_version: str
    ) -> Mapping[str, Any]:
        """Event data with argument values masked (normalized arguments, rendered resource)."""
        pointers = self.pointers_for(tool_name, tool_version)
        if not pointers:
            return data
        out = dict(data)
        args = out.get("normalized_arguments")
        if isinstance(args, str):
            try:
                parsed = json.loads(args)
            except ValueError:
                out["normalized_arguments"] = MASK
            else:
                masked = self.mask_arguments(parsed, tool_name, tool_version)
                out["normalized_arguments"] = json.dumps(
                    masked, sort_keys=True, separators=(",", ":"), ensure_ascii=False
                )
        if isinstance(out.get("resource"), str) and self._resource_uses_masked(
            tool_name, tool_version, pointers
        ):
            resource = str(out["resource"])
            prefix, sep, rest = resource.partition(":")
            out["resource"] = f"{prefix}:{self.masked_value(rest)}" if sep else self.masked_value(resource)
        return out

    def _resource_uses_masked(self, tool_name: str, tool_version: str, pointers: list[list[str]]) -> bool:
        template = self._template(f"{tool_name}@{tool_version}") if self._template else None
        if template is None:
            return True  # unknown template: mask to be safe
        return any(p and (p[0] == "*" or "{" + p[0] + "}" in template) for p in pointers)


# ------------------------------------------------------------------------------- lines
def event_line(e: EventRecord, inv: InvocationRecord | None, masker: Masker | None = None) -> dict[str, Any]:
    tool_name = inv.tool_name if inv else ""
    tool_version = inv.tool_version if inv else ""
    if inv is not None and needs_arguments(e):  # stored once, in the invocation: the line shows them
        (e,) = with_arguments((e,), inv.normalized_arguments)
    data: Mapping[str, Any] = e.data
    if masker is not None and masker.active:
        data = masker.mask_event_data(e.kind, data, tool_name, tool_version)
    return {
        "v": 1,
        "event_id": e.event_id,
        "invocation_id": e.invocation_id,
        "seq": e.seq,
        "at": e.at,
        "kind": e.kind,
        "from_state": e.from_state.value if e.from_state else None,
        "to_state": e.to_state.value,
        "trace_id": e.trace_id,
        "span_id": e.span_id,
        "session_id": inv.session_id if inv else "",
        "tenant": inv.tenant if inv else "",
        "subject": inv.subject if inv else "",
        "tool": f"{tool_name}@{tool_version}" if inv else "",
        "data": dict(data),
    }


def decision_line(d: DecisionRecord) -> dict[str, Any]:
    """The line of one ``Authorize`` decision: identifiers, the context's digest, the decision."""
    return {
        "v": 1,
        "kind": EventKind.AUTHORIZE_DECIDED.value,
        "decision_id": d.decision_id,
        "at": d.at,
        "trace_id": d.trace_id,
        "span_id": d.span_id,
        "parent_span_id": d.parent_span_id,
        "tenant": d.tenant,
        "subject": d.subject,
        "capability": d.capability,
        "resource": d.resource,
        "context_digest": d.context_digest,
        "context_keys": list(d.context_keys),
        "policy_revision": d.policy_revision,
        "decision": dict(d.decision),
    }


def encode_line(obj: Mapping[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.encode("utf-8", "backslashreplace") + b"\n"


# ------------------------------------------------------------------------------- output
class _Output:
    """Appends bytes to a file descriptor (a file opened O_APPEND, or stdout/stderr)."""

    def __init__(self, target: str, path: Path | None, fsync: bool) -> None:
        self.target = target
        self._fsync = fsync
        self._fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(
                path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o640
            )

    def write(self, data: bytes) -> None:
        if self._fd is None:
            stream = sys.stdout if self.target == "stdout" else sys.stderr
            stream.flush()
            buf = getattr(stream, "buffer", None)
            if buf is not None:
                buf.write(data)
                buf.flush()
            else:
                stream.write(data.decode("utf-8", "replace"))
                stream.flush()
            return
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class DecisionLog:
    """:class:`~callgate.observability.EventSink` writing JSON lines, lossless or bounded."""

    def __init__(
        self,
        *,
        target: str,
        path: Path | None,
        mode: str,
        metrics: Metrics,
        masker: Masker | None = None,
        queue_size: int = 10000,
        fsync: bool = False,
        lookup: InvocationLookup | None = None,
    ) -> None:
        if mode not in ("lossless", "bounded"):
            raise ValueError(f"decision log mode {mode!r}")
        self.mode = mode
        self._out = _Output(target, path, fsync and mode == "lossless")
        self._metrics = metrics
        self._masker = masker
        self._lookup = lookup
        self._queue: asyncio.Queue[_Item] | None = asyncio.Queue(queue_size) if mode == "bounded" else None
        """Bounded mode: events wait here; lines are built and written off the event loop."""
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    async def _invocation(
        self, events: Sequence[EventRecord], inv: InvocationRecord | None
    ) -> InvocationRecord | None:
        if inv is None and self._lookup is not None and events:
            inv = await self._lookup(events[0].invocation_id)
        return inv

    def _encode(self, items: Sequence[_Item]) -> bytes:
        return b"".join(
            encode_line(decision_line(i) if isinstance(i, DecisionRecord) else event_line(*i, self._masker))
            for i in items
        )

    async def publish_decision(self, record: DecisionRecord) -> None:
        """One ``Authorize`` decision: written before the answer (lossless) or queued (bounded)."""
        if self._queue is None:
            self._write_lossless([record])
            return
        if self._writer is None and not self._closed:
            self._writer = asyncio.ensure_future(self._drain())
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self._metrics.audit_dropped_events(1, "queue_full")

    async def publish(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        if not events:
            return
        if self._queue is None:
            await self._publish_lossless(events, invocation)
            return
        try:
            inv = await self._invocation(events, invocation)
        except Exception:
            log.exception("decision log: cannot read the invocation of appended events")
            inv = None
        if self._writer is None and not self._closed:
            self._writer = asyncio.ensure_future(self._drain())
        dropped = 0
        for e in events:
            try:
                self._queue.put_nowait((e, inv))
            except asyncio.QueueFull:
                dropped += 1
        if dropped:
            self._metrics.audit_dropped_events(dropped, "queue_full")

    async def _publish_lossless(
        self, events: Sequence[EventRecord], invocation: InvocationRecord | None
    ) -> None:
        try:
            inv = await self._invocation(events, invocation)
        except (OSError, ValueError) as exc:
            self._fail_lossless(exc)
        self._write_lossless([(e, inv) for e in events])

    def _write_lossless(self, items: Sequence[_Item]) -> None:
        try:
            self._out.write(self._encode(items))
        except (OSError, ValueError) as exc:
            self._fail_lossless(exc)

    def _fail_lossless(self, exc: Exception) -> NoReturn:
        self._metrics.audit_write_failed()
        log.error("decision log write failed (lossless: the call fails): %s", exc)
        raise store_unavailable(
            "the decision log cannot be written (lossless mode); the decision is withheld"
        ) from None

    async def _drain(self) -> None:
        assert self._queue is not None
        q = self._queue
        loop = asyncio.get_running_loop()
        while True:
            first = await q.get()
            batch = [first]
            while len(batch) < 512:
                try:
                    batch.append(q.get_nowait())
                except asyncio.QueueEmpty:
                    break
            try:
                await loop.run_in_executor(None, self._write_batch, batch)
            except Exception as exc:
                self._metrics.audit_write_failed()
                self._metrics.audit_dropped_events(len(batch), "write_failed")
                log.warning("decision log write failed, %d line(s) dropped: %s", len(batch), exc)
            finally:
                for _ in batch:
                    q.task_done()

    def _write_batch(self, batch: Sequence[_Item]) -> None:
        self._out.write(self._encode(batch))

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the bounded queue is written (or ``timeout``)."""
        if self._queue is not None and self._writer is not None:
            try:
                await asyncio.wait_for(self._queue.join(), timeout)
            except TimeoutError:
                log.warning("decision log: %d line(s) not written at flush", self._queue.qsize())

    async def close(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        if self._writer is not None:
            self._writer.cancel()
            try:
                await self._writer
            except asyncio.CancelledError:
                pass
            self._writer = None
        self._out.close()


__all__ = ["DecisionLog", "MASK", "Masker", "decision_line", "encode_line", "event_line"]
