"""Composition root: config -> components -> gRPC servers. No globals.

Each role gets its own ``grpc.aio`` server bound only to that role's listeners, so a service is
reachable only where it is registered: the agent's socket does not serve ``Confirmations``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from callgate.base.clock import Clock, SystemClock
from callgate.base.errors import CallgateError, LoadError, config_invalid
from callgate.config import ROLES, Config, ListenerConfig, ServerConfig
from callgate.credentials.issuer import KeyRing
from callgate.execute.execution import Execution
from callgate.execute.redaction import Redactor
from callgate.execute.secrets import SecretStore
from callgate.execute.usage import UsageMeter
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.native import NOT_BUILT, native_missing
from callgate.observability import PublishingStore
from callgate.observability.build import build_sinks, observes_rpcs
from callgate.observability.metrics import Metrics, MetricsServer
from callgate.policy.lifecycle import SNAPSHOT_HEALTH_SERVICE, PolicyLifecycle, load_off_the_loop
from callgate.policy.serving import ServingSnapshot
from callgate.policy.snapshot import PolicySnapshot, load_snapshot_from_config
from callgate.propose.gate import Gate
from callgate.propose.idempotency import IdempotencyFlow
from callgate.server.admission import SECONDS_BUCKETS, Admission, AdmissionSettings
from callgate.server.intake import build_server
from callgate.server.interceptors import CallgateInterceptor
from callgate.server.reflect import enable_reflection
from callgate.server.services import (
    AuthorizerService,
    ConfirmationsService,
    ExecutorService,
    GateService,
    PolicyStatusService,
    add_gate_service,
)
from callgate.server.sweeper import SWEEPER_HEALTH_SERVICE, ConfirmationSweeper
from callgate.server.watch import InvocationWatch
from callgate.store.base import Store
from callgate.store.idempotency.base import IdempotencyStore
from callgate.store.idempotency.registry import IDEMPOTENCY_BACKENDS
from callgate.store.registry import STORES
from callgate.store.retention import purger_of

log = logging.getLogger("callgate")

POLICY_STATUS_SERVICE = "callgate.v1.PolicyStatus"
"""On every listener: the serving revision and the newest files' problems (``callgate status``)."""

ROLE_SERVICES = {
    "agent": "callgate.v1.Gate",
    "confirmer": "callgate.v1.Confirmations",
    "authorizer": "callgate.v1.Authorizer",
    "executor": "callgate.v1.Executor",
}


@dataclass(frozen=True, slots=True)
class Shared:
    """What both halves read, built once here and handed to :class:`Gate` and
    :class:`Execution`: the serving snapshot, the idempotency flow and the usage meter."""

    serving: ServingSnapshot
    keys: IdempotencyFlow
    usage: UsageMeter

    @classmethod
    def build(
        cls,
        cfg: Config,
        snapshot: PolicySnapshot | None,
        store: Store,
        clock: Clock,
        idempotency: IdempotencyStore,
    ) -> Shared:
        return cls(
            serving=ServingSnapshot(snapshot),
            keys=IdempotencyFlow(backend=idempotency, store=store, clock=clock, config=cfg.idempotency),
            usage=UsageMeter(
                store=store, clock=clock, defaults=cfg.budgets, cache_max=cfg.limits.max_sessions
            ),
        )

    def gate(self, cfg: Config, store: Store, clock: Clock) -> Gate:
        """The agent- and confirmer-facing half over these parts."""
        return Gate(
            config=cfg, serving=self.serving, store=store, clock=clock, keys=self.keys, usage=self.usage
        )


@dataclass
class Components:
    """Everything the servers need, built once from the config and passed in."""

    config: Config
    clock: Clock
    store: Store
    idempotency: IdempotencyStore
    gate: Gate
    execution: Execution
    metrics: Metrics | None = None
    """Prometheus metrics of this sidecar (docs/OPERATE.md); served when configured."""
    watch: InvocationWatch | None = None
    """Wakes ``WatchInvocation`` streams on committed events (an event sink of the store)."""
    masker: Redactor | None = None
    """The configured secrets by name and the secret patterns: what the confirmer listener's
    answers mask for a person (``⟦masked <name>⟧``; None: the patterns only)."""

    async def close(self) -> None:
        await self.gate.drain_usage()
        await self.store.close()
        await self.idempotency.close()
        snap = self.gate.snapshot_or_none
        if snap is not None:
            await snap.engine.close()


async def build_idempotency(cfg: Config) -> IdempotencyStore:
    """Open and start the idempotency backend registered as ``idempotency.backend``
    (:data:`~callgate.store.idempotency.registry.IDEMPOTENCY_BACKENDS`; DSNs from the process
    environment). Raises LoadError / CallgateError."""
    return await IDEMPOTENCY_BACKENDS.get(cfg.idempotency.backend).open(cfg, os.environ)


async def build_components(
    cfg: Config,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    snapshot: PolicySnapshot | None = None,
    idempotency: IdempotencyStore | None = None,
    environ: Mapping[str, str] | None = None,
    tolerate_bad_policies: bool = False,
    load_in_thread: bool = False,
) -> Components:
    """Load the policy snapshot, secrets and keys; open the stores. Raises LoadError /
    CallgateError. With ``tolerate_bad_policies`` (``callgate serve``) a policy set that does not
    load leaves the gate NOT_READY instead of failing: the lifecycle retries until it loads.
    ``load_in_thread``: the snapshot is loaded in a worker thread (the event loop goes on
    answering meanwhile: the MCP gateway's embedded sidecar)."""
    clock = clock or SystemClock()
    if snapshot is None:
        try:
            snapshot = await load_off_the_loop(cfg) if load_in_thread else load_snapshot_from_config(cfg)
        except LoadError as exc:
            if not tolerate_bad_policies:
                raise
            log.error("policies do not load; serving NOT_READY until they do: %s", exc)
    secrets = SecretStore.load(cfg.secrets, Path(cfg.base_dir), environ)
    if store is None:
        store = await STORES.get(cfg.store.backend).open(cfg, os.environ)
    # observability: committed events fan out to the decision log, metrics and traces
    sinks, metrics = build_sinks(
        cfg.observability, base_dir=cfg.base_dir, lookup=store.get_invocation, environ=environ
    )
    metrics.set_snapshot(snapshot)
    watch = InvocationWatch()  # WatchInvocation streams wake on committed events
    store = PublishingStore(store, [*sinks, watch])
    if idempotency is None:
        # sqlite: the keys live in the event store and follow its transactions (one commit per
        # answer); another backend (postgres shared by pods) is a store of its own.
        in_store = cfg.store.backend == "postgres" or cfg.idempotency.backend == "sqlite"
        idempotency = store.keys() if in_store else await build_idempotency(cfg)
    shared = Shared.build(cfg, snapshot, store, clock, idempotency)
    gate = shared.gate(cfg, store, clock)
    try:
        redactor = Redactor(secrets=secrets.values())
        masker = Redactor(secrets=secrets.named())
    except ValueError as exc:
        raise config_invalid(f"secrets: {exc}") from None
    cc = cfg.credentials
    if cc.key_file:
        try:
            keyring = KeyRing.from_private_pem(
                cfg.path(cc.key_file).read_bytes(),
                now=clock.now(),
                next_pem=cfg.path(cc.next_key_file).read_bytes() if cc.next_key_file else None,
                previous_pems=[cfg.path(p).read_bytes() for p in cc.previous_key_files],
            )
        except OSError as exc:
            raise config_invalid(f"credentials key file: {exc.strerror}") from None
    else:
        keyring = KeyRing(
            clock.now(),
            key_dir=cfg.path(cc.key_dir) if cc.key_dir else None,
            rotation_interval=timedelta(seconds=cc.rotation_seconds),
        )
    execution = Execution(
        config=cfg,
        serving=shared.serving,
        store=store,
        clock=clock,
        keyring=keyring,
        keys=shared.keys,
        usage=shared.usage,
        secrets=secrets,
        redactor=redactor,
    )
    return Components(
        config=cfg, clock=clock, store=store, idempotency=idempotency, gate=gate, execution=execution,
        metrics=metrics, watch=watch, masker=masker,
    )  # fmt: skip


PRIVATE_DIR_PREFIX = "callgate-sidecar-"
"""``$TMPDIR/callgate-sidecar-<pid>-<random>``: the private sockets of a sidecar whose configured
ones another process serves (:attr:`Sidecar.private_when_taken`)."""


def _sweep_private_dirs() -> None:
    """Remove the private socket folders of processes that are gone (killed before they could
    remove their own: an MCP client stops its gateway with ``SIGKILL`` after a short grace)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PRIVATE_DIR_PREFIX}*-*"):
        pid = folder.name[len(PRIVATE_DIR_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.lstat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive under another user, or unreadable: not ours to remove
            continue


def _served(path: Path) -> bool:
    """A live process accepts connections on the Unix socket ``path`` (not a stale file)."""
    if not path.is_socket():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
    except OSError:  # refused: nobody listens (a file left by a process that died)
        return False
    finally:
        probe.close()
    return True


@dataclass
class Sidecar:
    components: Components
    servers: dict[str, grpc.aio.Server] = field(default_factory=dict)
    health: dict[str, health.aio.HealthServicer] = field(default_factory=dict)
    addresses: dict[str, list[str]] = field(default_factory=dict)
    """Bound addresses per role (``unix:/path`` or ``127.0.0.1:PORT`` with the real port)."""
    lifecycle: PolicyLifecycle | None = None
    metrics_server: MetricsServer | None = None
    """The ``/metrics`` endpoint when ``observability.metrics_address`` is set (``.url``)."""
    sweeper: ConfirmationSweeper | None = None
    """The confirmation-expiry task (health service ``callgate.v1.ConfirmationSweeper``)."""
    admission: dict[str, Admission] = field(default_factory=dict)
    """Per role, the listener's admission rule (``server/admission.py``)."""
    private_when_taken: bool = False
    """Embedded in a process of its own per MCP client (``callgate mcp serve``), where several
    processes of one config run at once: a configured listener another live process serves is
    left to it and the role listens on a Unix socket in a private folder of this process
    instead (:attr:`private_dir`; the embedding process reaches its sidecar at
    :attr:`addresses`). Else (``callgate serve``) a configured socket path is taken over, as
    before."""
    private_dir: Path | None = None
    """The private folder (mode 0700, removed at :meth:`stop`) when a listener was taken."""

    def _private_socket(self, role: str) -> Path:
        if self.private_dir is None:
            _sweep_private_dirs()
            self.private_dir = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{os.getpid()}-"))
        return self.private_dir / f"{role}.sock"

    def _socket_path(self, role: str, listener: ListenerConfig) -> Path:
        """Where ``role`` binds its Unix socket: the configured path, unless another live process
        serves it and :attr:`private_when_taken` (then a private one). gRPC unlinks the path
        before it binds it and again when the server stops, so two processes on one path take
        it from each other and the first to stop leaves the other without it."""
        path = self.components.config.path(listener.socket).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.private_when_taken and _served(path):
            private = self._private_socket(role)
            log.info("%s socket %s is served by another process; this one listens on %s", role, path, private)
            return private
        if path.exists() or path.is_socket():
            path.unlink()
        return path

    def _add_role(self, role: str, listener: ListenerConfig, socket_path: Path | None = None) -> None:
        if not listener.socket and not listener.tcp:
            return
        gate = self.components.gate
        sc = self.components.config.server
        metrics = self.components.metrics
        admission = (
            Admission(
                AdmissionSettings(
                    target_s=sc.admission_target_ms / 1000,
                    min_limit=sc.admission_min_in_flight,
                    max_limit=sc.max_concurrent_rpcs,
                )
            )
            if sc.admission_target_ms
            else None
        )
        options: list[tuple[str, int]] = [("grpc.so_reuseport", 0)]
        if sc.max_pending_rpcs:
            options += [
                ("grpc.server.max_pending_requests", sc.max_pending_rpcs),
                ("grpc.server.max_pending_requests_hard_limit", 2 * sc.max_pending_rpcs),
            ]
        if sc.max_streams_per_connection:
            options.append(("grpc.max_concurrent_streams", sc.max_streams_per_connection))
        server = build_server(
            admission,
            options=options,
            # admission off (target 0): gRPC's own fixed limit, counting every call, as before
            maximum_concurrent_rpcs=None if admission is not None else sc.max_concurrent_rpcs or None,
            interceptors=[CallgateInterceptor(metrics if observes_rpcs(metrics) else None, admission)],
        )
        execution = self.components.execution
        servicer: object
        if role == "agent":
            servicer = GateService(gate, execution, self.components.watch, self.components.masker)
            add_gate_service(servicer, server)
        elif role == "confirmer":
            servicer = ConfirmationsService(gate, self.components.watch, self.components.masker)
            pb_grpc.add_ConfirmationsServicer_to_server(servicer, server)
        elif role == "executor":
            servicer = ExecutorService(execution)
            pb_grpc.add_ExecutorServicer_to_server(servicer, server)
        else:
            servicer = AuthorizerService(gate)
            pb_grpc.add_AuthorizerServicer_to_server(servicer, server)
        hs = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        pb_grpc.add_PolicyStatusServicer_to_server(PolicyStatusService(gate, lambda: self.lifecycle), server)
        if self.components.config.server.reflection:
            names = (
                pb.DESCRIPTOR.services_by_name[ROLE_SERVICES[role].split(".")[-1]].full_name,
                POLICY_STATUS_SERVICE,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            )
            enable_reflection(names, server)
        bound: list[str] = []
        if socket_path is not None:
            server.add_insecure_port(f"unix:{socket_path}")
            bound.append(f"unix:{socket_path}")
        if listener.tcp:
            host, _, port = listener.tcp.rpartition(":")
            try:
                real = server.add_insecure_port(listener.tcp)
            except RuntimeError:  # the port is taken
                if not self.private_when_taken:
                    raise
                log.info("%s port %s is taken; this process listens on a private socket", role, listener.tcp)
                if socket_path is None:
                    private = self._private_socket(role)
                    server.add_insecure_port(f"unix:{private}")
                    bound.append(f"unix:{private}")
            else:
                bound.append(f"{host}:{real}")
        self.servers[role] = server
        if admission is not None:
            self.admission[role] = admission
            if metrics is not None:
                metrics.watch_admission(role, admission.state, SECONDS_BUCKETS)
        self.health[role] = hs
        self.addresses[role] = bound

    async def _set_health(self, ready: bool, files_ok: bool) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        for role, hs in self.health.items():
            await hs.set("", serving if ready else not_serving)
            await hs.set(ROLE_SERVICES[role], serving if ready else not_serving)
            await hs.set(SNAPSHOT_HEALTH_SERVICE, serving if files_ok and ready else not_serving)

    async def _set_sweeper_health(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for hs in self.health.values():
            await hs.set(SWEEPER_HEALTH_SERVICE, status)

    async def start(self) -> None:
        s = self.components.config.server
        async with self._claim(s):
            for role in ROLES:
                listener = getattr(s, role)
                if not listener.socket and not listener.tcp:
                    continue
                path = await asyncio.to_thread(self._socket_path, role, listener) if listener.socket else None
                self._add_role(role, listener, path)
            for role, server in self.servers.items():
                await server.start()
                for addr in self.addresses[role]:
                    if addr.startswith("unix:"):
                        os.chmod(addr[5:], 0o660)
        await self._set_health(False, False)  # NOT_SERVING until a good snapshot is ready
        c = self.components
        self.lifecycle = PolicyLifecycle(
            config=c.config, serving=c.gate.serving, store=c.store, clock=c.clock, set_health=self._set_health
        )
        await self.lifecycle.start()
        self.sweeper = ConfirmationSweeper(
            c.gate,
            c.clock,
            interval=c.config.confirmation.sweep_interval_ms / 1000,
            set_health=self._set_sweeper_health,
            execution=c.execution,
            retention=purger_of(c.config, c.store, c.clock, lambda: _meter_keeps(c.gate.snapshot_or_none)),
        )
        await self.sweeper.start()
        if c.metrics is not None:  # count reloads from now on (file change, SIGHUP, retry)
            metrics = c.metrics
            metrics.set_snapshot(c.gate.snapshot_or_none)
            metrics.core_info.labels(c.gate.core.kind.value).set(1)
            c.gate.core.observer = lambda reason: metrics.core_python_path.labels(reason).inc()
            self.lifecycle.on_reload = lambda ok: metrics.policy_reload(ok, c.gate.snapshot_or_none)
            if c.config.observability.metrics_address:
                self.metrics_server = MetricsServer(metrics, c.config.observability.metrics_address)
                await self.metrics_server.start()
        snap = c.gate.snapshot_or_none
        log.info(
            "callgate listening: %s; policy revision %s; %s",
            ", ".join(f"{r}={a}" for r, addrs in self.addresses.items() for a in addrs),
            snap.revision if snap else "-",
            "ready" if self.lifecycle.last_error == "" and snap else "NOT READY",
        )
        core = c.gate.core
        python_tools = core.prepare(snap, eager=True) if snap else {}
        cedar = core.cedar_core(snap) if snap else None
        if core.native_unavailable and native_missing() != NOT_BUILT:
            log.warning("%s: the Python core runs", core.native_unavailable)  # there, does not load
        log.info(
            "core: %s%s%s%s",
            core.kind.value,
            f" ({core.native_unavailable})" if core.native_unavailable else "",
            f"; Cedar decisions: {cedar.value}" if cedar is not None else "",
            f"; {len(python_tools)} tool(s) on the Python stages: "
            + ", ".join(f"{k} ({why})" for k, why in sorted(python_tools.items()))
            if python_tools
            else "",
        )

    async def reload(self) -> bool:
        """Load a new snapshot and swap it in; on any error keep serving the old one."""
        if self.lifecycle is None:
            raise RuntimeError("sidecar not started")
        return await self.lifecycle.reload("signal")

    async def stop(self, grace: float = 2.0) -> None:
        for role, adm in self.admission.items():
            st = adm.state()
            if st.admitted or st.refused_overloaded or st.refused_deadline:
                log.info(
                    "admission %s: limit %.1f, expected %.1f ms, admitted %d, refused %d overloaded, "
                    "%d deadline_too_short, %d answered after their deadline",
                    role, st.limit, st.expected_s * 1000, st.admitted, st.refused_overloaded,
                    st.refused_deadline, st.answered_late,
                )  # fmt: skip
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.lifecycle is not None:
            await self.lifecycle.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        for hs in self.health.values():
            await hs.enter_graceful_shutdown()
        await asyncio.gather(*(s.stop(grace) for s in self.servers.values()))
        await self.components.close()
        for addrs in self.addresses.values():
            for a in addrs:
                if a.startswith("unix:"):
                    Path(a[5:]).unlink(missing_ok=True)
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)

    @asynccontextmanager
    async def _claim(self, s: ServerConfig) -> AsyncIterator[None]:
        """With :attr:`private_when_taken`: an exclusive lock (``flock``) on a file beside each
        configured socket, held from the check that its path is free until the servers listen,
        so that two such processes starting together never both take one path."""
        if not self.private_when_taken:
            yield
            return
        import fcntl  # POSIX; only the embedding gateway asks for it

        folders = sorted({
            self.components.config.path(getattr(s, role).socket).resolve().parent
            for role in ROLES if getattr(s, role).socket
        })  # fmt: skip
        held: list[int] = []
        try:
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(folder / ".callgate-sockets.lock", os.O_RDWR | os.O_CREAT, 0o600)
                held.append(fd)
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            for fd in held:
                os.close(fd)  # releases the lock


GIL_SWITCH_INTERVAL_S = 0.001
"""``sys.setswitchinterval`` for ``callgate serve`` (CPython's default is 5 ms). The SQLite writer
thread releases the GIL around every statement and must get it back while the event loop is busy;
1 ms lets it in sooner: ~+7% Propose throughput at 16 calls in flight (docs/BENCHMARKS.md)."""


def tune_runtime() -> None:
    """Process-wide settings for the serving process, applied once everything is loaded.

    ``gc.freeze()`` moves the objects of startup (policies, schemas, modules) out of the
    collector's sight so collections only walk what requests allocate, and a larger first
    generation makes them rarer: fewer and shorter pauses in the tail latency. Not applied when
    callgate is used as a library."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def refreeze() -> None:
    """After a policy reload: freeze what is alive now (the new snapshot; the lifecycle already
    froze what its load left). No full collection: ``gc.unfreeze(); gc.collect()`` walked every
    object of the process on the event loop at the swap, the longest health check of a reload
    (~170-200 ms at 10,000 policies, docs/LIMITS.md). A retired snapshot is freed by reference
    counting; what it holds in reference cycles stays frozen (measured: 9 objects for the example
    policies, none for 10,000 policies and 200 tools)."""
    gc.freeze()


async def serve(cfg: Config) -> int:
    """Run until SIGINT/SIGTERM. SIGHUP reloads policies and ToolSpecs atomically."""
    try:
        components = await build_components(cfg, tolerate_bad_policies=True)
    except CallgateError as exc:
        log.error("cannot start: %s", exc)
        return 2
    sidecar = Sidecar(components)
    await sidecar.start()
    tune_runtime()
    if sidecar.lifecycle is not None:
        told = sidecar.lifecycle.on_reload

        def on_reload(ok: bool) -> None:
            told(ok)
            if ok:
                refreeze()

        sidecar.lifecycle.on_reload = on_reload
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(sidecar.reload()))
    await stop.wait()
    log.info("shutting down")
    await sidecar.stop()
    return 0


def _meter_keeps(snapshot: PolicySnapshot | None) -> dict[str, int]:
    """The serving snapshot's longest window per meter (none before the first snapshot): what
    the retention pass keeps of a shared meter's entries."""
    return snapshot.meter_keeps() if snapshot is not None else {}
