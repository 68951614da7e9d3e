"""Prometheus metrics, fed by the committed event trail and by the RPC layer.

Each sidecar owns its own :class:`~prometheus_client.CollectorRegistry` (never the process-wide
default), so several sidecars can run in one process (tests) without sharing counters. Without a
metrics endpoint nothing can read them: the families are inert and ``prometheus_client`` is not
imported (with the ``http.server``, ``wsgiref`` and ``urllib.request`` it pulls in, ~2.3 MiB of a
sidecar's RSS).

Labels have bounded cardinality by construction: tool names come from the loaded ToolSpecs (a name
the model invented is counted as ``unknown``), codes from :class:`~callgate.base.errors.ErrorCode`,
states and stages from fixed tables. Argument values, subjects, resources and free text never
become labels. The list of metrics is in ``docs/OPERATE.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from callgate.base.errors import ErrorCode
from callgate.base.events import CONFIRMATION_ANSWERS, OUTCOMES, REJECTIONS, EventKind, stage_of
from callgate.base.states import TERMINAL, State
from callgate.base.trace import TraceContext
from callgate.store.base import DecisionRecord, EventRecord, InvocationRecord

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from callgate.policy.snapshot import PolicySnapshot

log = logging.getLogger("callgate.metrics")

STAGE_BUCKETS = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
"""10 µs .. 1 s: a pipeline stage is tens of microseconds; an engine call may take milliseconds."""
RPC_BUCKETS = (
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

UNKNOWN = "unknown"
"""Label value for a tool name that is not (and never was) in a loaded snapshot."""

PIPELINE_STAGES = ("lookup", "parse", "validate", "normalize", "idempotency", "authorize")
"""Stages whose ``duration_us`` measures real work (the Propose pipeline)."""

_CODES = frozenset(c.value for c in ErrorCode)
_RPC_STAGE_NAMES: frozenset[str] = frozenset(PIPELINE_STAGES)


def event_stages(events: Sequence[EventRecord]) -> list[str]:
    """The pipeline stage each event closes, e.g. ``parse_rejected`` after a failed lookup is
    ``lookup`` and ``validation_rejected`` after ``normalized`` is ``idempotency``.

    ``duration_us`` of an event is the time since the previous event of the same call, so for
    ``authorized`` it covers the idempotency claim too when a key was given."""
    out: list[str] = []
    prev = ""
    for e in events:
        stage = stage_of(e.kind, prev, _rejection_code(e.data))
        out.append(stage.value if stage is not None else "other")
        prev = e.kind
    return out


def _rejection_code(data: Mapping[str, Any]) -> str:
    rej = data.get("rejection")
    code = rej.get("code", "") if isinstance(rej, Mapping) else ""
    return code if isinstance(code, str) else ""


def _code_label(code: object) -> str:
    """An error code as a label: only known codes, ``none`` for empty, else ``other``."""
    if not code:
        return "none"
    return code if isinstance(code, str) and code in _CODES else "other"


CALLER_TRACE: ContextVar[TraceContext | None] = ContextVar("callgate_caller_trace", default=None)
"""The caller's ``traceparent`` of the RPC being served (set by the RPC observer when tracing is
on), so spans built from events can hang below the caller's span on every RPC, not only Propose."""


@dataclass(frozen=True, slots=True)
class _RpcToken:
    started: float
    trace_token: Token[TraceContext | None] | None


class _Unread:
    """A metric family (or the registry) of a sidecar without a metrics endpoint: nothing can
    read it, so nothing is kept."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def labels(self, *values: object, **kwargs: object) -> _Unread:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def remove(self, *values: object) -> None:
        pass


_UNREAD = SimpleNamespace(
    CollectorRegistry=_Unread, Counter=_Unread, Gauge=_Unread, Histogram=_Unread, ProcessCollector=_Unread
)


class AdmissionFigures(Protocol):
    """What :meth:`Metrics.watch_admission` reads of a listener's admission (its
    ``AdmissionState``, ``callgate/server/admission.py``)."""

    @property
    def limit(self) -> float: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def admitted(self) -> int: ...
    @property
    def refused_overloaded(self) -> int: ...
    @property
    def refused_deadline(self) -> int: ...
    @property
    def answered_late(self) -> int: ...
    @property
    def seconds_counts(self) -> tuple[int, ...]: ...
    @property
    def seconds_sum(self) -> float: ...


class _AdmissionCollector:
    """The ``callgate_admission_*`` families, read from each listener's admission at scrape time
    (nothing is done per call)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.listeners: dict[str, Callable[[], AdmissionFigures]] = {}

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        lb = ["listener"]
        limit = GaugeMetricFamily("callgate_admission_limit", "The adaptive concurrency limit.", labels=lb)
        flight = GaugeMetricFamily("callgate_admission_in_flight", "Admitted calls in flight.", labels=lb)
        admitted = CounterMetricFamily("callgate_admission_admitted", "Admitted calls.", labels=lb)
        refused = CounterMetricFamily(
            "callgate_admission_refused",
            "Calls refused by the admission in Python, by code (gRPC core's drops are not seen).",
            labels=[*lb, "code"],
        )
        late = CounterMetricFamily(
            "callgate_admission_late_answers", "Admitted calls answered after their deadline.", labels=lb
        )
        seconds = HistogramMetricFamily(
            "callgate_admission_seconds",
            "Admitted calls' time from acceptance (the admission) to the end of the handler.",
            labels=lb,
        )
        for name, read in self.listeners.items():
            st = read()
            limit.add_metric([name], st.limit)
            flight.add_metric([name], st.in_flight)
            admitted.add_metric([name], st.admitted)
            refused.add_metric([name, ErrorCode.OVERLOADED.value], st.refused_overloaded)
            refused.add_metric([name, ErrorCode.DEADLINE_TOO_SHORT.value], st.refused_deadline)
            late.add_metric([name], st.answered_late)
            running, buckets = 0, []
            for bound, count in zip((*map(str, self.bounds), "+Inf"), st.seconds_counts, strict=True):
                running += count
                buckets.append((bound, running))
            seconds.add_metric([name], buckets, st.seconds_sum)
        return [limit, flight, admitted, refused, late, seconds]


def _prometheus() -> Any:
    """``prometheus_client``, imported only by a sidecar that serves metrics."""
    import prometheus_client

    return prometheus_client


class Metrics:
    """The metric families of one sidecar, its registry and the RPC observer.

    With ``enabled=False`` (no endpoint configured) every family is inert (:class:`_Unread`):
    the same calls, nothing counted, ``prometheus_client`` never imported."""

    registry: CollectorRegistry
    decisions: Counter
    rejections: Counter
    stage_duration: Histogram
    rpc_duration: Histogram
    reloads: Counter
    snapshot_info: Gauge
    audit_dropped: Counter
    audit_write_failures: Counter
    credentials_issued: Counter
    idempotency_replays: Counter
    attempt_outcomes: Counter
    confirmations: Counter
    terminal: Counter
    events: Counter
    authorize_decisions: Counter
    core_info: Gauge
    core_python_path: Counter

    def __init__(self, *, enabled: bool = True, process_metrics: bool = True) -> None:
        self.enabled = enabled
        """Collect event and RPC metrics (False when no endpoint is configured)."""
        self._admission: _AdmissionCollector | None = None
        self.capture_caller_trace = False
        """Set by :func:`~callgate.observability.build.build_sinks` when tracing is on."""
        p = _prometheus() if enabled else _UNREAD
        self.registry = p.CollectorRegistry(auto_describe=True)
        r = self.registry
        if process_metrics:
            p.ProcessCollector(registry=r)
        self.decisions = p.Counter(
            "callgate_decisions_total",
            "Authorization decisions of proposals, by effect (allow/deny/confirm), tool and engine error code.",
            ["effect", "tool", "error_code"],
            registry=r,
        )
        self.rejections = p.Counter(
            "callgate_proposals_rejected_total",
            "Proposals refused before authorization, by stage (lookup, parse, validate, normalize, idempotency), code and tool.",
            ["stage", "code", "tool"],
            registry=r,
        )
        self.stage_duration = p.Histogram(
            "callgate_stage_duration_seconds",
            "Time spent in each Propose pipeline stage (from the events' duration_us).",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.rpc_duration = p.Histogram(
            "callgate_rpc_duration_seconds",
            "gRPC handling time by service, method and result code ('ok' or the callgate error code).",
            ["service", "method", "code"],
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.reloads = p.Counter(
            "callgate_policy_reloads_total",
            "Policy reloads after start (file change, SIGHUP, retry): success = a new snapshot serves, failure = files rejected.",
            ["result"],
            registry=r,
        )
        self.snapshot_info = p.Gauge(
            "callgate_policy_snapshot_info",
            "The serving policy snapshot (value 1): revision and engine.",
            ["revision", "engine"],
            registry=r,
        )
        self.audit_dropped = p.Counter(
            "callgate_audit_events_dropped_total",
            "Decision-log lines lost in bounded mode, by reason (queue_full, write_failed).",
            ["reason"],
            registry=r,
        )
        self.audit_write_failures = p.Counter(
            "callgate_audit_write_failures_total",
            "Failed decision-log writes (lossless mode: the RPC failed with store_unavailable).",
            registry=r,
        )
        self.credentials_issued = p.Counter(
            "callgate_credentials_issued_total",
            "Scoped credentials minted for attempts, by tool.",
            ["tool"],
            registry=r,
        )
        self.idempotency_replays = p.Counter(
            "callgate_idempotency_replays_total",
            "Proposals answered from an earlier invocation with the same idempotency key and digest, by tool.",
            ["tool"],
            registry=r,
        )
        self.attempt_outcomes = p.Counter(
            "callgate_attempt_outcomes_total",
            "Reported attempt outcomes (committed, attempt_failed, failed_before_commit, outcome_unknown, failed_after_commit), by tool.",
            ["outcome", "tool"],
            registry=r,
        )
        self.confirmations = p.Counter(
            "callgate_confirmations_total",
            "Confirmation results (confirmed, rejected = digest mismatch, expired), by tool.",
            ["result", "tool"],
            registry=r,
        )
        self.terminal = p.Counter(
            "callgate_invocations_terminal_total",
            "Invocations that reached a terminal state (or OUTCOME_UNKNOWN), by state.",
            ["state"],
            registry=r,
        )
        self.events = p.Counter(
            "callgate_events_total",
            "Committed events by kind.",
            ["kind"],
            registry=r,
        )
        self.authorize_decisions = p.Counter(
            "callgate_authorize_decisions_total",
            "Decisions of the generic decision point (Authorizer.Authorize, not proposals), by effect and engine error code.",
            ["effect", "error_code"],
            registry=r,
        )
        self.core_info = p.Gauge(
            "callgate_core_info",
            "The core that runs Propose's front stages (value 1): native (callgate._native) or python.",
            ["core"],
            registry=r,
        )
        self.core_python_path = p.Counter(
            "callgate_core_python_path_total",
            "Proposals answered by the Python stages while the native core runs, by reason "
            "(unsupported_tool, deferred, locale, mismatch).",
            ["reason"],
            registry=r,
        )
        for reason in ("queue_full", "write_failed"):  # series exist (at 0) before the first drop
            self.audit_dropped.labels(reason)
        for result in ("success", "failure"):
            self.reloads.labels(result)
        self._known_tools: set[str] = set()
        self._templates: dict[str, str] = {}
        self._snapshot_labels: tuple[str, str] | None = None

    def watch_admission(
        self, listener: str, read: Callable[[], AdmissionFigures], bounds: Sequence[float]
    ) -> None:
        """Serve a listener's admission as ``callgate_admission_*`` (limit, in flight, admitted,
        refused by code, late answers, the histogram of admitted calls' time from acceptance with
        upper ``bounds``), read at scrape time. Nothing without an endpoint."""
        if not self.enabled:
            return
        if self._admission is None:
            self._admission = _AdmissionCollector(bounds)
            self.registry.register(self._admission)
        self._admission.listeners[listener] = read

    # ------------------------------------------------------------------ snapshot / reloads
    def set_snapshot(self, snapshot: PolicySnapshot | None) -> None:
        """Record the serving snapshot: its tools become valid ``tool`` label values."""
        if snapshot is None:
            return
        for t in snapshot.tools:
            self._known_tools.add(t.spec.key)
            self._templates[t.spec.key] = t.spec.resource_template
        labels = (snapshot.revision, snapshot.engine.name)
        if labels != self._snapshot_labels:
            if self._snapshot_labels is not None:
                try:
                    self.snapshot_info.remove(*self._snapshot_labels)
                except KeyError:
                    pass
            self.snapshot_info.labels(*labels).set(1)
            self._snapshot_labels = labels

    def policy_reload(self, ok: bool, snapshot: PolicySnapshot | None) -> None:
        self.reloads.labels("success" if ok else "failure").inc()
        if ok:
            self.set_snapshot(snapshot)

    def resource_template(self, tool_key: str) -> str | None:
        """The resource template of ``name@version`` in the newest snapshot that had it."""
        return self._templates.get(tool_key)

    def tool_label(self, name: str, version: str) -> str:
        key = f"{name}@{version}"
        return key if key in self._known_tools else UNKNOWN

    # ------------------------------------------------------------------ audit
    def audit_dropped_events(self, n: int, reason: str) -> None:
        self.audit_dropped.labels(reason).inc(n)

    def audit_write_failed(self) -> None:
        self.audit_write_failures.inc()

    # ------------------------------------------------------------------ RPC observer (server.interceptors)
    def rpc_started(self, trace: TraceContext) -> object:
        """An RPC starts: note the time and, when tracing is on and the caller sent a valid
        ``traceparent``, make its span the parent of the spans built from this call's events."""
        trace_token = None
        if self.capture_caller_trace and trace.parent_span_id:
            trace_token = CALLER_TRACE.set(trace)
        return _RpcToken(time.perf_counter(), trace_token)

    def rpc_finished(self, token: object, service: str, method: str, code: str) -> None:
        """An RPC ended: reset the caller's trace and observe its duration by result ``code``."""
        assert isinstance(token, _RpcToken)
        if token.trace_token is not None:
            CALLER_TRACE.reset(token.trace_token)
        if self.enabled:
            label = code if code in ("ok", "cancelled", "aborted") else _code_label(code)
            self.rpc_duration.labels(service, method, label).observe(time.perf_counter() - token.started)

    # ------------------------------------------------------------------ events
    def observe_events(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        tool = self.tool_label(invocation.tool_name, invocation.tool_version) if invocation else UNKNOWN
        stages = event_stages(events)
        for e, stage in zip(events, stages, strict=False):
            kind = e.kind
            data = e.data
            self.events.labels(kind).inc()
            dur = data.get("duration_us")
            if stage in _RPC_STAGE_NAMES and isinstance(dur, int):
                self.stage_duration.labels(stage).observe(dur / 1e6)
            if kind in (EventKind.AUTHORIZED, EventKind.AUTHORIZATION_REJECTED):
                d = data.get("decision")
                d = d if isinstance(d, Mapping) else {}
                effect = str(d.get("effect", ""))
                effect = effect if effect in ("allow", "deny", "confirm") else "other"
                self.decisions.labels(effect, tool, _code_label(d.get("error_code", ""))).inc()
            elif kind in REJECTIONS:
                self.rejections.labels(stage, _code_label(_rejection_code(data)), tool).inc()
            elif kind == EventKind.ATTEMPT_STARTED:
                self.credentials_issued.labels(tool).inc()
            elif kind == EventKind.IDEMPOTENT_REPLAY:
                self.idempotency_replays.labels(tool).inc()
            elif kind in CONFIRMATION_ANSWERS:
                self.confirmations.labels(CONFIRMATION_ANSWERS[EventKind(kind)], tool).inc()
            if kind in OUTCOMES:
                self.attempt_outcomes.labels(kind, tool).inc()
            to = e.to_state
            if to is not e.from_state and (to in TERMINAL or to is State.OUTCOME_UNKNOWN):
                self.terminal.labels(to.value).inc()

    def observe_decision(self, record: DecisionRecord) -> None:
        """Count one recorded ``Authorize`` decision (its own family: proposals' series unchanged)."""
        effect = str(record.decision.get("effect", ""))
        effect = effect if effect in ("allow", "deny", "confirm") else "other"
        self.authorize_decisions.labels(effect, _code_label(record.decision.get("error_code", ""))).inc()

    # ------------------------------------------------------------------ exposition
    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition (Prometheus text, or OpenMetrics when ``accept`` asks for it)."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


InvocationLookup = Callable[[str], Awaitable[InvocationRecord | None]]


class MetricsSink:
    """:class:`~callgate.observability.EventSink` that counts committed events."""

    def __init__(self, metrics: Metrics, lookup: InvocationLookup | None = None) -> None:
        self._m = metrics
        self._lookup = lookup

    async def publish(self, events: Sequence[EventRecord], invocation: InvocationRecord | None) -> None:
        if not events:
            return
        if invocation is None and self._lookup is not None:
            # appended events (an idempotent replay) come without their invocation: one read
            invocation = await self._lookup(events[0].invocation_id)
        try:
            self._m.observe_events(events, invocation)
        except Exception:
            log.exception("metrics: cannot observe events")

    async def publish_decision(self, record: DecisionRecord) -> None:
        try:
            self._m.observe_decision(record)
        except Exception:
            log.exception("metrics: cannot observe a decision")

    async def close(self) -> None:
        return None


class MetricsServer:
    """``GET /metrics`` over HTTP (aiohttp) on the sidecar's event loop."""

    def __init__(self, metrics: Metrics, address: str) -> None:
        self._metrics = metrics
        self._address = address
        self._runner: Any = None
        self.bound = ""
        """``host:port`` actually bound (the real port when the configured one is 0)."""

    @property
    def url(self) -> str:
        host, _, port = self.bound.rpartition(":")
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/metrics"

    async def start(self) -> str:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            body, content_type = self._metrics.render(request.headers.get("Accept", ""))
            return web.Response(body=body, headers={"Content-Type": content_type})

        app = web.Application()
        app.router.add_get("/metrics", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        host, _, port = self._address.rpartition(":")
        site = web.TCPSite(runner, host.strip("[]"), int(port), reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        addrs = runner.addresses
        real = addrs[0] if addrs else (host, int(port))
        self.bound = f"{real[0]}:{real[1]}"
        log.info("metrics on %s", self.url)
        return self.bound

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


__all__ = [
    "CALLER_TRACE",
    "PIPELINE_STAGES",
    "Metrics",
    "MetricsServer",
    "MetricsSink",
    "UNKNOWN",
    "event_stages",
]
