"""Build the event sinks of ``[observability]`` (composition root helper, no globals).

Sink order matters: the decision log comes first, so that in lossless mode a call whose line
cannot be written fails before metrics or traces count a decision that was never returned.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from callgate.base.errors import config_invalid
from callgate.config import ObservabilityConfig
from callgate.observability import EventSink
from callgate.observability.decision_log import DecisionLog, Masker
from callgate.observability.metrics import InvocationLookup, Metrics, MetricsSink


def build_sinks(
    cfg: ObservabilityConfig,
    *,
    base_dir: str | Path = ".",
    lookup: InvocationLookup | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[EventSink], Metrics]:
    """The sinks to wrap the store with (``PublishingStore(store, sinks)``) and the sidecar's
    :class:`Metrics` (always returned, the same calls either way; without ``metrics_address``
    nothing could read them, so its families are inert and ``prometheus_client`` is not imported).

    ``lookup`` reads an invocation by id (the *inner* store's ``get_invocation``), used for events
    appended without their invocation (idempotent replays). Call ``metrics.set_snapshot`` with
    each serving snapshot: it names the known tools (metric labels) and their resource templates
    (masking of rendered resources). Raises :class:`LoadError` for an unusable configuration (e.g. a missing mask key)."""
    env = os.environ if environ is None else environ
    metrics = Metrics(enabled=bool(cfg.metrics_address))
    sinks: list[EventSink] = []
    if cfg.decision_log:
        key: bytes | None = None
        if cfg.decision_log_mask_key_env:
            value = env.get(cfg.decision_log_mask_key_env, "")
            if not value:
                raise config_invalid(
                    f"observability.decision_log_mask_key_env: ${cfg.decision_log_mask_key_env} is not set"
                )
            key = value.encode()
        target = cfg.decision_log if cfg.decision_log in ("stdout", "stderr") else "file"
        path = None
        if target == "file":
            p = Path(cfg.decision_log)
            path = p if p.is_absolute() else Path(base_dir) / p
        try:
            log_sink = DecisionLog(
                target=target,
                path=path,
                mode=cfg.decision_log_mode,
                metrics=metrics,
                masker=Masker(cfg.decision_log_mask, key, metrics.resource_template),
                queue_size=cfg.decision_log_queue,
                fsync=cfg.decision_log_fsync,
                lookup=lookup,
            )
        except OSError as exc:
            raise config_invalid(f"observability.decision_log: cannot open {path}: {exc}") from None
        sinks.append(log_sink)
    if metrics.enabled:
        sinks.append(MetricsSink(metrics, lookup))
    if cfg.tracing_exporter != "none":
        from callgate.observability.tracing import TracingSink, make_exporter

        exporter, batch = make_exporter(cfg.tracing_exporter, cfg.tracing_endpoint)
        sinks.append(
            TracingSink(
                exporter, service_name=cfg.service_name, sample_ratio=cfg.tracing_sample_ratio, batch=batch
            )
        )
        metrics.capture_caller_trace = True
    return sinks, metrics


def observes_rpcs(metrics: Metrics | None) -> bool:
    """Whether the RPC layer should report to ``metrics`` (latency metrics or caller traces)."""
    return metrics is not None and (metrics.enabled or metrics.capture_caller_trace)


__all__ = ["build_sinks", "observes_rpcs"]
