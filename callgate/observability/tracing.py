"""OpenTelemetry spans rebuilt from the committed events, one span per stage.

Every event already carries the caller's W3C trace id (``traceparent`` metadata, or a new one) and
its own span id (spec 6.13). The sink turns each event into a span with *that* trace id and *that*
span id, so a span found in a tracing backend and the event in the store (``callgate explain``)
name each other. The parent is the caller's span: taken from the ``traceparent`` of the RPC being
served (any RPC: Propose, Confirm, BeginAttempt, ...) or, for Propose, from the ``proposed``
event's ``parent_span_id``; without one the spans are roots of the event's trace.

Timing: a stage span lasts the event's ``duration_us``; the spans of one call are laid end to end,
the last one ending when the events were committed. Spans are built from that record on a
background thread (the OpenTelemetry SDK costs ~30 µs per span), so an RPC only pays for a queue
put; when the queue (``QUEUE_MAX`` calls) is full, the call's spans are dropped and counted.

The tracer provider belongs to the sidecar (never the global one) and exports through the
configured exporter (``none`` = this sink is not built at all).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from callgate.base.errors import config_invalid
from callgate.base.events import EventKind
from callgate.base.trace import TraceContext
from callgate.observability.metrics import CALLER_TRACE, event_stages
from callgate.store.base import DecisionRecord, EventRecord, InvocationRecord

log = logging.getLogger("callgate.tracing")

INSTRUMENTATION = "callgate"
QUEUE_MAX = 10000
"""Calls (event batches) waiting to become spans before new ones are dropped."""

_Item = tuple[Sequence[EventRecord], "InvocationRecord | None", "TraceContext | None", int]


_FAILED = frozenset(
    {EventKind.FAILED_BEFORE_COMMIT, EventKind.FAILED_AFTER_COMMIT, EventKind.OUTCOME_UNKNOWN}
)
"""Event kinds after which the tool call counts as failed (the span's status is ERROR)."""


class EventIdGenerator(IdGenerator):
    """Hands out the ids of the event being turned into a span (else random ones).

    Used only on the event loop thread, immediately around ``start_span``."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.next_trace_id = 0
        self.next_span_id = 0

    def generate_span_id(self) -> int:
        v, self.next_span_id = self.next_span_id, 0
        return v or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        v, self.next_trace_id = self.next_trace_id, 0
        return v or self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return True


def _hex(value: str, bits: int) -> int:
    try:
        n = int(value, 16)
    except ValueError:
        return 0
    return n if 0 < n < (1 << bits) else 0


def _attributes(e: EventRecord, inv: InvocationRecord | None, stage: str) -> dict[str, Any]:
    """Span attributes: identifiers, states and codes only; never argument values."""
    data: Mapping[str, Any] = e.data
    attrs: dict[str, Any] = {
        "callgate.invocation_id": e.invocation_id,
        "callgate.event_id": e.event_id,
        "callgate.event.kind": e.kind,
        "callgate.stage": stage,
        "callgate.state.to": e.to_state.value,
    }
    if e.from_state is not None:
        attrs["callgate.state.from"] = e.from_state.value
    if inv is not None:
        attrs["callgate.tool"] = f"{inv.tool_name}@{inv.tool_version}"
        attrs["callgate.session_id"] = inv.session_id
    dur = data.get("duration_us")
    if isinstance(dur, int):
        attrs["callgate.duration_us"] = dur
    rej = data.get("rejection")
    if isinstance(rej, Mapping) and isinstance(rej.get("code"), str):
        attrs["callgate.rejection.code"] = rej["code"]
    dec = data.get("decision")
    if isinstance(dec, Mapping):
        attrs["callgate.decision.effect"] = str(dec.get("effect", ""))
        if dec.get("error_code"):
            attrs["callgate.decision.error_code"] = str(dec["error_code"])
        if isinstance(dec.get("policy_ids"), list):
            attrs["callgate.decision.policy_ids"] = [str(p) for p in dec["policy_ids"]]
    for key in ("digest", "attempt_id", "outcome", "policy_revision", "tool_spec_digest", "tool_set_digest"):
        v = data.get(key)
        if isinstance(v, (str, int)) and v != "":
            attrs[f"callgate.{key}"] = v
    if isinstance(data.get("attempt"), int):
        attrs["callgate.attempt"] = data["attempt"]
    return attrs


class TracingSink:
    """:class:`~callgate.observability.EventSink` that exports one span per event."""

    def __init__(self, exporter: SpanExporter, *, service_name: str = "callgate", sample_ratio: float = 1.0,
                 batch: bool = True) -> None:  # fmt: skip
        self.exporter = exporter
        self._ids = EventIdGenerator()
        self.provider = TracerProvider(
            sampler=TraceIdRatioBased(sample_ratio),
            resource=Resource.create({"service.name": service_name}),
            id_generator=self._ids,
            shutdown_on_exit=False,
        )
        processor: SpanProcessor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer(INSTRUMENTATION)
        self.dropped = 0
        """Calls whose spans were dropped because the queue was full."""
        self._q: queue.Queue[_Item | tuple[DecisionRecord, int] | threading.Event | None] = queue.Queue(
            QUEUE_MAX
        )
        self._thread = threading.Thread(target=self._run, name="callgate-tracing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                if isinstance(item[0], DecisionRecord):
                    self._decision_span(item[0], item[1])
                else:
                    self._spans(*item)
            except Exception:
                log.exception("tracing: cannot build spans")

    def _parent(self, e: EventRecord, first: EventRecord, caller: TraceContext | None) -> tuple[Context, int]:
        """(parent context, forced trace id for a root span)."""
        trace_id = _hex(e.trace_id, 128)
        parent_span = 0
        if caller is not None and caller.trace_id == e.trace_id:
            parent_span = _hex(caller.parent_span_id, 64)
        if not parent_span and first.kind == EventKind.PROPOSED:
            parent_span = _hex(str(first.data.get("parent_span_id", "")), 64)
        if trace_id and parent_span:
            sc = trace_api.SpanContext(
                trace_id=trace_id,
                span_id=parent_span,
                is_remote=True,
                trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED),
            )
            return trace_api.set_span_in_context(trace_api.NonRecordingSpan(sc), Context()), 0
        return Context(), trace_id

    async def publish(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        if not events:
            return
        try:
            self._q.put_nowait((tuple(events), invocation, CALLER_TRACE.get(), time.time_ns()))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("tracing: span queue full, %d call(s) not traced", self.dropped)

    def _spans(
        self,
        events: Sequence[EventRecord],
        invocation: InvocationRecord | None,
        caller: TraceContext | None,
        end_ns: int,
    ) -> None:
        stages = event_stages(events)
        durations = [max(0, int(e.data.get("duration_us", 0) or 0)) * 1000 for e in events]
        t = end_ns - sum(durations)
        first = events[0]
        for e, stage, dur in zip(events, stages, durations, strict=False):
            ctx, root_trace = self._parent(e, first, caller)
            self._ids.next_trace_id = root_trace
            self._ids.next_span_id = _hex(e.span_id, 64)
            span = self._tracer.start_span(
                f"callgate.{stage}",
                context=ctx,
                kind=trace_api.SpanKind.INTERNAL,
                attributes=_attributes(e, invocation, stage),
                start_time=t,
            )
            self._ids.next_trace_id = self._ids.next_span_id = 0
            if e.kind in _FAILED:  # the tool call failed
                span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, e.kind))
            t += dur
            span.end(end_time=t)

    async def publish_decision(self, record: DecisionRecord) -> None:
        try:
            self._q.put_nowait((record, time.time_ns()))
        except queue.Full:
            self.dropped += 1

    def _decision_span(self, d: DecisionRecord, end_ns: int) -> None:
        """One ``callgate.authorize`` span with the record's trace and span ids, below the
        caller's span when it sent a ``traceparent``."""
        trace_id, parent = _hex(d.trace_id, 128), _hex(d.parent_span_id, 64)
        ctx = Context()
        if trace_id and parent:
            sc = trace_api.SpanContext(
                trace_id=trace_id,
                span_id=parent,
                is_remote=True,
                trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED),
            )
            ctx = trace_api.set_span_in_context(trace_api.NonRecordingSpan(sc), Context())
        self._ids.next_trace_id = 0 if parent else trace_id
        self._ids.next_span_id = _hex(d.span_id, 64)
        attrs: dict[str, Any] = {
            "callgate.decision_id": d.decision_id,
            "callgate.event.kind": EventKind.AUTHORIZE_DECIDED.value,
            "callgate.stage": "authorize",
            "callgate.capability": d.capability,
            "callgate.decision.effect": str(d.decision.get("effect", "")),
            "callgate.policy_revision": d.policy_revision,
        }
        if d.decision.get("error_code"):
            attrs["callgate.decision.error_code"] = str(d.decision["error_code"])
        span = self._tracer.start_span(
            "callgate.authorize", context=ctx, kind=trace_api.SpanKind.INTERNAL, attributes=attrs,
            start_time=end_ns,
        )  # fmt: skip
        self._ids.next_trace_id = self._ids.next_span_id = 0
        span.end(end_time=end_ns)

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until the spans of every call published so far are built (not exported)."""
        if not self._thread.is_alive():
            return True
        done = threading.Event()
        self._q.put(done)
        return done.wait(timeout)

    def finished_spans(self) -> tuple[Any, ...]:
        """Spans kept by the ``memory`` exporter (tests, debugging), after a :meth:`flush`."""
        self.flush()
        if isinstance(self.exporter, InMemorySpanExporter):
            return tuple(self.exporter.get_finished_spans())
        return ()

    def _shutdown(self) -> None:
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout=10)
        self.provider.shutdown()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)


def make_exporter(kind: str, endpoint: str = "") -> tuple[SpanExporter, bool]:
    """(exporter, batch?) for ``observability.tracing_exporter``."""
    if kind == "console":
        return ConsoleSpanExporter(out=sys.stderr), True
    if kind == "memory":
        return InMemorySpanExporter(), False
    if kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise config_invalid(
                "observability.tracing_exporter = otlp needs the opentelemetry-exporter-otlp-proto-grpc package"
            ) from None
        exporter: SpanExporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        return exporter, True
    raise config_invalid(f"observability.tracing_exporter '{kind}' is not supported")


__all__ = ["EventIdGenerator", "TracingSink", "make_exporter"]
