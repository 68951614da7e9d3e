"""Typed, frozen configuration loaded from a TOML file (``callgate.toml``).

Every field has a default that runs the embedded setup (Cedar + SQLite on Unix sockets). Paths in
the file are relative to the directory of the file. Unknown keys are an error, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from callgate.base.errors import LoadError, config_invalid
from callgate.policy.engines.registry import ENGINES
from callgate.store.idempotency.registry import IDEMPOTENCY_BACKENDS
from callgate.store.registry import STORES


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """Where one role's gRPC service listens."""

    socket: str = ""
    """Unix socket path ("" = no Unix socket). Mount it only into the container playing the role."""
    tcp: str = ""
    """Optional loopback ``host:port`` ("" = none). Non-loopback addresses are refused at load."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    agent: ListenerConfig = ListenerConfig(socket="var/run/agent.sock")
    """Listener of the agent-facing ``Gate`` service (with health and reflection)."""
    confirmer: ListenerConfig = ListenerConfig(socket="var/run/confirmer.sock")
    """Listener of the ``Confirmations`` service: never reachable from the agent's listener."""
    authorizer: ListenerConfig = ListenerConfig(socket="var/run/authorizer.sock")
    """Listener of the generic ``Authorizer`` decision point for other components."""
    executor: ListenerConfig = ListenerConfig(socket="var/run/executor.sock")
    """Listener of the ``Executor`` service (attempts, credentials, outcomes, secrets)."""
    reflection: bool = True
    """Serve gRPC server reflection on every listener."""
    max_concurrent_rpcs: int = 128
    """Per listener: the most ``callgate.v1`` calls handled at once, the ceiling of the adaptive
    limit below. While the limit is full the listener takes no further call from gRPC core:
    calls beyond it wait in core's queue (``max_pending_rpcs``) and are taken as calls end, or
    dropped there (``CANCELLED``); when nothing ends for ``admission_target_ms`` one is taken
    and refused with gRPC ``RESOURCE_EXHAUSTED`` (code ``overloaded``, with a retry hint).
    Health and reflection are never counted nor held. ``0`` = no ceiling (the adaptive limit
    still applies)."""
    admission_target_ms: int = 50
    """Per listener: latency target of an admitted call, in milliseconds (time in the handler).
    The concurrency limit shrinks by 10% when calls take longer and grows by about one per
    limit's worth of calls that do not (docs/OPERATE.md, "Overload"); a call whose gRPC deadline
    is shorter than the measured service time is refused with ``DEADLINE_EXCEEDED`` (code
    ``deadline_too_short``, with a retry hint). ``0`` turns this admission off: gRPC's own fixed
    limit of ``max_concurrent_rpcs`` (counting health and reflection too, refused without a hint,
    deadlines not consulted), the rule before it existed."""
    admission_min_in_flight: int = 16
    """Per listener: the adaptive limit's floor and starting value (calls in flight)."""
    max_pending_rpcs: int = 64
    """Per listener: calls gRPC core may hold per method before the event loop picks them up
    (channel argument ``grpc.server.max_pending_requests``; refusals start at this many and all
    are refused at twice it). The event loop takes arriving calls one at a time, so a burst of
    parallel calls sits here for a moment even on an idle sidecar: a value below the largest
    burst an agent sends drops calls that would have been served at once (with 4, one in ten of
    a burst of 8 parallel calls). Beyond it gRPC core drops the call before any Python work,
    which keeps refusals cheap under heavy overload; the caller sees ``CANCELLED`` without a
    retry hint (measured with grpcio 1.85 and grpc-go clients), to be treated as overload.
    ``0`` = gRPC's defaults (1,000 / 3,000)."""
    max_streams_per_connection: int = 0
    """Per listener: the most calls (HTTP/2 streams) one client connection may have open at once
    (channel argument ``grpc.max_concurrent_streams``). A client at the limit holds further calls
    in its own process until a stream frees, so they cost the sidecar nothing, but they wait
    there with their deadline running (an open-loop client past capacity then sends calls whose
    deadline is nearly spent). grpc-go clients were answered ``UNAVAILABLE`` even at a quarter of
    capacity with 16 (docs/OPERATE.md, "Overload"): leave it off unless every caller is a grpcio
    client. Every stream counts: health, and each open ``WatchInvocation``. ``0`` = no limit
    (gRPC's default)."""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    engine: str = "cedar"
    """Authorization engine: ``cedar`` (embedded, default), ``rego`` (embedded regopy) or
    ``opa`` (a real OPA server, e.g. the container beside the sidecar)."""
    dir: str = "policies"
    """Directory with ``tools/*.json`` ToolSpecs and the engine's files (``cedar/`` or ``rego/``)."""
    opa_url: str = "http://127.0.0.1:8181"
    """OPA server for ``engine = "opa"`` (loopback in the same pod, or a configured URL)."""
    opa_timeout_ms: int = 250
    """Per-decision deadline for OPA; a timeout is a deny (``engine_timeout``)."""
    opa_upload_policies: bool = False
    """Upload ``rego/`` to an OPA that started empty (else OPA must serve the same files)."""
    watch: bool = True
    """Reload the snapshot when a file under ``dir`` changes (SIGHUP always reloads)."""
    watch_interval_ms: int = 1000
    """How often the policy directory is checked for changes."""
    reload_quiet_ms: int = 300
    """Debounce of a file change: the watcher waits until the directory has not changed for this
    long (a multi-file edit or a ConfigMap swap settles first), then loads the whole set; a set
    that changes while it loads is discarded and loaded again."""
    reload_checks: bool = True
    """Gate every load on the snapshot checks ``callgate check`` runs (unknown files, ToolSpec
    capabilities vs the engine's actions, decision shapes of sample requests, ``tests/``): a set
    that fails them is refused and the serving revision stays (docs/POLICIES.md)."""
    reload_prove: bool = False
    """Gate every hot reload on the ``guard`` properties of ``properties.toml`` (docs/PROVE.md):
    a set that is looser than the serving one within a guarded property's scope, or breaks it, is
    refused like a broken set; so is one the prover cannot decide (unknown, no solver)."""
    list_by_policy: bool = True
    """ListTools (and the MCP gateway's ``tools/list``) shows a subject only the allowlisted tools
    some request of theirs could be allowed or asked to confirm (Cedar; a reading of the policies'
    scopes, then the solver pass below for what it cannot decide; it never hides a usable tool:
    docs/POLICIES.md, "ListTools by policy").
    A Propose for a hidden tool is answered by the engine's deny, marked ``hidden_by_policy`` on its
    event. No effect with Rego or OPA. False: every allowlisted tool."""
    list_by_policy_solver_ms: int = 30_000
    """ListTools by policy: at each snapshot load, the (principal, tool) pairs the reading of the
    scopes cannot decide (conditions, forbids that cover a permit only sometimes) are settled by
    the symbolic compiler (``callgate policy prove``'s prover and solver, scripts/prove and
    scripts/solver) within this many milliseconds in all; proved never allowed nor confirmed:
    hidden. A timeout, an error or no prover on the machine keeps the tool shown (logged). ``0``:
    no solver pass (undecided pairs are shown)."""
    shadow: tuple[str, ...] = ()
    """Policy ids in shadow mode besides those the policy files mark (Cedar ``@shadow``, Rego
    ``data.callgate.shadow``): evaluated and logged on the decision event, never enforced
    (docs/POLICIES.md). Part of the snapshot revision."""


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """``[store.retention]``: how long records are kept (0 = for ever, the default). Past it a
    background task deletes them in small batches, off the request path (callgate/store/retention.py,
    docs/RELIABILITY.md "Retention"); a non-terminal invocation (OUTCOME_UNKNOWN included) and a
    key whose invocation is open are never deleted."""

    invocations_seconds: int = 0
    """A terminal invocation is deleted this long after its last change (``updated_at``: when it
    ended), with its whole trail: events, attempts, tool message, fed-into records. Not while its
    idempotency key is inside its own retention. A tombstone stays for ``explain``."""
    events_seconds: int = 0
    """The events of a terminal invocation are deleted this long after it ended, the invocation
    row kept (shorter than ``invocations_seconds``; 0: the events go with their invocation).
    ``explain`` then says when they went and where they were exported."""
    decisions_seconds: int = 0
    """An ``Authorize`` decision is deleted this long after it was recorded (``at``)."""
    expired_keys_seconds: int = 0
    """Idempotency keys keep their own contract (spec 6.8 item 4: ``idempotency.retention_seconds``,
    then ``idempotency.expired_policy``). With ``expired_policy = new`` (and any retention set here)
    a key is deleted at its expiry (a missing key answers the same). With ``reject`` it is kept this long past its expiry
    to go on refusing, then deleted (a repeat after that is a new call); 0 keeps it for ever."""
    sessions_idle_seconds: int = 0
    """A session's session-window meter totals and its session labels are deleted once no call
    of the session added to them for this long: the session counts as ended (a later call in it
    starts from zero and without labels), so set it longer than any session lives. 0: kept for
    ever (the store has no other session end)."""
    tombstones_seconds: int = 0
    """How long ``explain`` can still say an invocation expired (0: ``invocations_seconds``, or
    ``events_seconds`` when only events expire)."""
    export_path: str = ""
    """A file each deleted invocation (with its trail) and decision is appended to first, one JSON
    line each with the fields ``callgate explain`` reads, synced before the delete commits.
    ``""``: no export (a PostgreSQL store may be kept as the long-term archive instead)."""
    interval_seconds: int = 60
    """Seconds between two retention passes (the first runs at start)."""
    batch: int = 100
    """Records per delete transaction (SQLite: one operation of the writer thread)."""
    max_batches: int = 20
    """Batches of each kind per pass; what is left waits for the next pass."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    backend: str = "sqlite"
    """Event/invocation store: ``sqlite`` (embedded default) or ``postgres`` (every record and
    the idempotency keys in one database shared by several pods). Its schema is versioned and
    migrated at start; a database newer than this callgate is refused."""
    path: str = "var/callgate.db"
    """SQLite database file (WAL mode)."""
    synchronous: str = "full"
    """SQLite: ``full`` asks for records on disk (an fsync) where ``durability`` puts one;
    ``normal`` never fsyncs (a power loss can lose recent answered records, a process crash
    cannot). docs/RELIABILITY.md."""
    durability: str = "barrier"
    """SQLite: ``barrier`` commits each answer (WAL, durable against a process crash) and fsyncs
    once before anything can run: before BeginAttempt hands out a credential, a confirmation is
    accepted, a reconciled outcome or an Authorize allow is answered (one sync covers every
    record before it);
    ``per_answer`` fsyncs before every answer. PostgreSQL: every commit is flushed by the server
    (``synchronous_commit = on``), so both behave as ``per_answer``."""
    dsn_env: str = "CALLGATE_POSTGRES_DSN"
    """``postgres``: environment variable holding the DSN (mounted from a Secret)."""
    dsn_file: str = ""
    """``postgres``: alternatively a file holding the DSN."""
    pool_timeout_seconds: float = 5.0
    """``postgres``: the longest a call waits for a database connection (e.g. during an outage)
    before it is refused with ``store_unavailable``; a call whose own deadline is nearer waits
    only until shortly before it, so the caller gets the refusal, not ``DEADLINE_EXCEEDED``."""
    retention: RetentionConfig = RetentionConfig()
    """How long records are kept: the table ``[store.retention]`` (below)."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_argument_bytes: int = 65536
    """Largest accepted argument document, in bytes (6.4 layer 1)."""
    max_depth: int = 64
    """Deepest accepted nesting of arrays/objects in arguments."""
    max_sessions: int = 100000
    """Sessions kept in memory before the oldest are evicted from the cache (they stay stored)."""


@dataclass(frozen=True, slots=True)
class CoreConfig:
    engine: str = "auto"
    """Which core runs the Propose decision's stages (docs/NATIVE.md): ``auto`` uses the compiled
    core (``callgate._native``, built by ``scripts/native``) when it is importable and the Python
    stages otherwise; ``python`` always runs the Python stages (the reference); ``native``
    requires the compiled core and refuses to start without it. A tool the compiled core does not
    support (a schema outside its subset, a ``decimal`` bound finer than 10^-18) runs the Python stages either
    way; ``callgate serve`` names them at start. With the compiled core, the Cedar engine's
    decisions run in it too (``cedar-policy``, same slices and answers as cedarpy); OPA and Rego
    are unaffected."""


@dataclass(frozen=True, slots=True)
class ConfirmationConfig:
    ttl_seconds: int = 300
    """How long a CONFIRM decision stays pending before it expires (then CANCELLED_BEFORE_COMMIT).
    While parked, this is the invocation's deadline; a confirmation starts the tool's own
    ``timeout_ms`` (docs/OPERATE.md, "Deadlines")."""
    sweep_interval_ms: int = 1000
    """How often the sweeper cancels expired confirmations and invocations past their deadline
    that never started executing (its own task, health service ``callgate.v1.ConfirmationSweeper``;
    the first sweep runs at startup). An expired call is also cancelled when it is next touched
    (confirmed, re-proposed), so this bounds only how long one lingers unseen."""


@dataclass(frozen=True, slots=True)
class CredentialsConfig:
    issuer: str = "callgate"
    """``iss`` of minted credentials."""
    ttl_seconds: int = 60
    """Default credential lifetime (never past the invocation deadline)."""
    max_ttl_seconds: int = 300
    """Hard cap on any credential lifetime."""
    rotation_seconds: int = 3600
    """Signing keys rotate on this schedule (next/current/previous are published)."""
    key_dir: str = ""
    """Directory holding the rotating key ring (PEM, 0600); "" keeps keys in memory only."""
    key_file: str = ""
    """A fixed Ed25519 private key (PKCS#8 PEM, e.g. a mounted Kubernetes Secret) instead of a
    rotating ring; rotate by changing the Secret (next/previous keys below keep both valid)."""
    next_key_file: str = ""
    """Optional next key, published in the JWKS ahead of use."""
    previous_key_files: tuple[str, ...] = ()
    """Retired keys still published until their credentials have expired."""
    executors: tuple[str, ...] = ()
    """Executor identities (credential audiences) allowed to begin attempts; empty = any."""


@dataclass(frozen=True, slots=True)
class IdempotencyConfig:
    backend: str = "sqlite"
    """``sqlite`` (embedded default: the keys live in the event store and are written in the
    transaction of their invocation) or ``postgres`` (a key store of its own shared by several
    pods beside a SQLite event store; written after the event store). With ``store.backend =
    postgres`` the keys always live in that store, whatever this says."""
    path: str = "var/idempotency.db"
    """With ``sqlite`` the keys live in the event store's database (``store.path``) and are
    written in the same transaction as their invocation; this names the separate file older
    versions kept them in, imported once at start when it exists."""
    dsn_env: str = "CALLGATE_POSTGRES_DSN"
    """Environment variable holding the PostgreSQL DSN (mounted from a Secret)."""
    dsn_file: str = ""
    """Alternatively a file holding the DSN."""
    pool_timeout_seconds: float = 5.0
    """``postgres``: as ``[store] pool_timeout_seconds``, for this key store's connections."""
    retention_seconds: int = 86400
    """How long a key's record answers replays; ToolSpecs may set their own."""
    expired_policy: str = "reject"
    """What a key past retention means: ``reject`` or ``new`` (never a guess, 6.8)."""


@dataclass(frozen=True, slots=True)
class BudgetsConfig:
    max_model_calls: int = 50
    """Model calls per session, counted at ``ListTools`` (6.11). Every limit here is the default
    and the ceiling: a session may ask for less at ``OpenSession``, never more."""
    max_tool_calls: int = 100
    """Proposals per session (counted at ``Propose``)."""
    max_wall_clock_seconds: int = 3600
    """Seconds since ``OpenSession`` after which the loop ends."""
    max_result_bytes: int = 10 * 1024 * 1024
    """Cumulative bytes of tool messages encoded for the session."""
    max_external_cost_micros: int = 0
    """Cumulative external cost reported with attempt outcomes; 0 = no limit."""


@dataclass(frozen=True, slots=True)
class SecretConfig:
    name: str = ""
    """Name executors ask for in ``RedeemSecret``."""
    file: str = ""
    """File holding the value (e.g. a mounted Kubernetes Secret key); trailing newline stripped."""
    env: str = ""
    """Or an environment variable holding the value."""
    tools: tuple[str, ...] = ()
    """Tools (``name`` or ``name@version``) whose credentials may redeem it."""
    resources: tuple[str, ...] = ("*",)
    """Resource globs (``calendar:*``) the credential's resource must match."""


# --- observability (metrics, decision log, traces): docs/OPERATE.md -------------------------
@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    """Metrics, decision logs and traces, all fed from the committed event trail (6.13)."""

    metrics_address: str = ""
    """``host:port`` of the Prometheus ``/metrics`` endpoint ("" = off, port 0 = any free port).
    The only listener allowed on a non-loopback address (e.g. ``0.0.0.0:9464`` in a pod, so
    Prometheus can scrape the pod IP): it serves bounded-cardinality counters and histograms,
    never arguments, subjects or free text."""
    decision_log: str = ""
    """Where events are exported as JSON lines: "" (off), ``stdout``, ``stderr`` or a file path
    (appended; relative to the config file)."""
    decision_log_mode: str = "lossless"
    """``lossless``: a line is written before the RPC answers and a failed write fails the RPC
    (``store_unavailable``), so no decision is returned without its log line. ``bounded``: lines
    go through a queue of ``decision_log_queue`` events written in the background; when it is full
    lines are dropped and counted (``callgate_audit_events_dropped_total``), RPCs never wait."""
    decision_log_queue: int = 10000
    """Queue length, in events, of the ``bounded`` mode."""
    decision_log_fsync: bool = False
    """``lossless`` only: fsync the file after each write (durable across a host crash, slower)."""
    decision_log_mask: tuple[str, ...] = ()
    """Argument fields masked in the log, as JSON pointers into the arguments (``/title``,
    ``/attendees/*/email``; ``*`` = every member). Prefix ``name#`` or ``name@version#`` to limit
    one to a tool. Masked values become ``***`` (or ``***:`` + a keyed hash, see below); a resource
    rendered from a masked top-level field is masked too."""
    decision_log_mask_key_env: str = ""
    """Environment variable holding a key: masked values become ``***:<hmac-sha256 prefix>`` so
    equal values can be correlated without being revealed ("" = plain ``***``)."""
    tracing_exporter: str = "none"
    """OpenTelemetry span export: ``none`` (default), ``console`` (stderr), ``otlp`` (OTLP/gRPC;
    needs the ``opentelemetry-exporter-otlp-proto-grpc`` package) or ``memory`` (kept in
    process, for tests)."""
    tracing_endpoint: str = ""
    """OTLP collector endpoint (e.g. ``http://otel-collector:4317``; "" = the exporter's default
    or ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    tracing_sample_ratio: float = 1.0
    """Fraction of traces exported, decided on the trace id (the same calls as other services
    sampling by trace id at the same ratio)."""
    service_name: str = "callgate"
    """``service.name`` resource attribute of exported spans."""


class LogFormat(str, Enum):
    """How ``callgate serve`` writes its own log (stderr)."""

    TEXT = "text"
    """``time LEVEL logger: message``, for people."""
    JSON = "json"
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, ``trace_id``."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    """callgate's own log on stderr (not the decision log: ``[observability] decision_log``)."""

    format: LogFormat = LogFormat.TEXT
    """``text`` (default) or ``json``: one JSON object per line with ``time`` (RFC 3339, UTC,
    milliseconds), ``level``, ``logger``, ``message``, ``trace_id`` (the W3C trace id of the RPC
    being served, ``null`` outside one) and, after an error, ``exception`` (the traceback as one
    string), for log pipelines that expect JSON (the Helm chart sets ``json``). Log messages never
    carry arguments, secret values or credentials, in either format."""


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = ServerConfig()
    policy: PolicyConfig = PolicyConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()
    core: CoreConfig = CoreConfig()
    confirmation: ConfirmationConfig = ConfirmationConfig()
    credentials: CredentialsConfig = CredentialsConfig()
    idempotency: IdempotencyConfig = IdempotencyConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    log: LogConfig = LogConfig()
    secrets: tuple[SecretConfig, ...] = ()
    base_dir: str = "."
    """Directory that relative paths are resolved against (the config file's directory)."""

    def path(self, p: str) -> Path:
        """Resolve a configured path against :attr:`base_dir`."""
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q


ROLES = ("agent", "confirmer", "authorizer", "executor")

EXTENSION_SECTIONS = frozenset({"mcp"})
"""Sections another loader owns: ``[mcp]`` (``callgate mcp``, callgate/mcp/config.py). ``callgate
serve`` accepts the same file and skips them, so one file configures both."""

_SECTIONS: dict[str, type[Any]] = {
    "server": ServerConfig,
    "policy": PolicyConfig,
    "store": StoreConfig,
    "limits": LimitsConfig,
    "core": CoreConfig,
    "confirmation": ConfirmationConfig,
    "credentials": CredentialsConfig,
    "idempotency": IdempotencyConfig,
    "budgets": BudgetsConfig,
    "observability": ObservabilityConfig,
    "log": LogConfig,
}


def key_line(text: str, where: str, key: str) -> int:
    """Best effort: the line of ``key`` in the table ``where`` (``policy.``, ``store.retention.``;
    ``""`` for a section header ``[key]``) of the TOML ``text``, or 0 (tomllib keeps no places)."""
    table = where.rstrip(".")
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
    if not table:
        for n, line in enumerate(text.splitlines(), 1):
            m = header.match(line)
            if m and m.group(1).split(".")[0].strip("\"' ") == key:
                return n
        return 0
    assign = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    current = ""
    for n, line in enumerate(text.splitlines(), 1):
        m = header.match(line)
        if m:
            current = m.group(1).replace(" ", "")
        elif current == table and assign.match(line):
            return n
    return 0


def unknown_name(what: str, name: str, known: Iterable[str], source: str, line: int) -> LoadError:
    """``unknown key 'policy.engin' (did you mean 'engine'?; known: ...)`` at ``file:line``."""
    names = sorted(known)
    close = difflib.get_close_matches(name.rsplit(".", 1)[-1], names, n=1)
    hint = f"did you mean '{close[0]}'?; " if close else ""
    return config_invalid(
        f"unknown {what} {name} ({hint}known: {', '.join(names)})",
        source=f"{source}:{line}" if source and line else source,
    )


def _build(cls: type[Any], data: dict[str, Any], where: str, source: str, text: str = "") -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise unknown_name("key", f"'{where}{key}'", known, source, key_line(text, where, key))
        default = getattr(cls(), key)
        if isinstance(default, (ListenerConfig, RetentionConfig)):
            if not isinstance(value, dict):
                raise config_invalid(f"'{where}{key}' must be a table", source=source)
            kwargs[key] = _build(type(default), value, f"{where}{key}.", source, text)
            continue
        if isinstance(default, tuple) and isinstance(value, list) and all(isinstance(v, str) for v in value):
            kwargs[key] = tuple(value)
            continue
        if isinstance(default, Enum):
            choices = [m.value for m in type(default)]
            if value not in choices:
                raise config_invalid(
                    f"'{where}{key}' must be one of {', '.join(choices)}, got {value!r}", source=source
                )
            kwargs[key] = type(default)(value)
            continue
        if type(value) is not type(default):
            raise config_invalid(
                f"'{where}{key}' must be {type(default).__name__}, got {type(value).__name__}", source=source
            )
        kwargs[key] = value
    return cls(**kwargs)


def check_loopback(addr: str, *, source: str = "") -> tuple[str, int]:
    """Parse ``host:port`` and insist the host is a loopback address (or ``localhost``)."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not port_s.isdigit():
        raise config_invalid(f"tcp address '{addr}' is not host:port", source=source)
    host = host.strip("[]")
    if host != "localhost":
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
        if not ok:
            raise config_invalid(
                f"tcp address '{addr}' is not loopback: callgate only listens on loopback or Unix sockets",
                source=source,
            )
    return host, int(port_s)


def _check_problems(problems: list[str], source: str) -> None:
    """Raise ``config_invalid`` naming every problem a registered factory found."""
    if problems:
        raise config_invalid("; ".join(problems), source=source)


def validate(cfg: Config, *, source: str = "") -> Config:
    """Semantic checks that types alone cannot express. Engine, store and idempotency backend
    names are looked up in their registries (an unknown name is refused with the registered
    choices) and each registration checks its own keys."""
    _check_problems(ENGINES.get(cfg.policy.engine, source=source).validate(cfg.policy), source)
    _check_problems(STORES.get(cfg.store.backend, source=source).validate(cfg.store), source)
    if cfg.policy.reload_quiet_ms < 0:
        raise config_invalid("policy.reload_quiet_ms must be >= 0 (0 = no debounce)", source=source)
    if cfg.policy.reload_prove and cfg.policy.engine != "cedar":
        raise config_invalid(
            "policy.reload_prove proves Cedar policies: it needs engine = 'cedar'", source=source
        )
    if cfg.core.engine not in ("auto", "python", "native"):
        raise config_invalid("core.engine must be 'auto', 'python' or 'native'", source=source)
    if cfg.store.synchronous not in ("full", "normal"):
        raise config_invalid("store.synchronous must be 'full' or 'normal'", source=source)
    if cfg.store.durability not in ("barrier", "per_answer"):
        raise config_invalid("store.durability must be 'barrier' or 'per_answer'", source=source)
    r = cfg.store.retention
    seconds = (r.invocations_seconds, r.events_seconds, r.decisions_seconds, r.expired_keys_seconds)
    if min(*seconds, r.tombstones_seconds, r.sessions_idle_seconds) < 0:
        raise config_invalid("store.retention: the *_seconds must be >= 0 (0 = kept for ever)", source=source)
    if r.events_seconds and r.invocations_seconds and r.events_seconds >= r.invocations_seconds:
        raise config_invalid(
            "store.retention.events_seconds must be shorter than invocations_seconds "
            "(the events go with their invocation)",
            source=source,
        )
    if r.interval_seconds <= 0 or r.batch <= 0 or r.max_batches <= 0:
        raise config_invalid(
            "store.retention: interval_seconds, batch and max_batches must be positive", source=source
        )
    for role in ROLES:
        lc: ListenerConfig = getattr(cfg.server, role)
        if lc.tcp:
            check_loopback(lc.tcp, source=source)
    if cfg.server.max_concurrent_rpcs < 0:
        raise config_invalid("server.max_concurrent_rpcs must be >= 0 (0 = no limit)", source=source)
    if cfg.server.admission_target_ms < 0 or cfg.server.admission_min_in_flight < 1:
        raise config_invalid(
            "server.admission_target_ms must be >= 0 (0 = off) and server.admission_min_in_flight >= 1",
            source=source,
        )
    if cfg.server.max_streams_per_connection < 0:
        raise config_invalid("server.max_streams_per_connection must be >= 0 (0 = no limit)", source=source)
    if cfg.server.max_pending_rpcs < 0:
        raise config_invalid("server.max_pending_rpcs must be >= 0 (0 = gRPC's defaults)", source=source)
    if not cfg.server.agent.socket and not cfg.server.agent.tcp:
        raise config_invalid("server.agent needs a socket or tcp", source=source)
    sockets = [getattr(cfg.server, r).socket for r in ROLES]
    sockets = [s for s in sockets if s]
    if len(set(sockets)) != len(sockets):
        raise config_invalid("each role needs its own socket path", source=source)
    if cfg.limits.max_argument_bytes <= 0 or cfg.limits.max_depth <= 0:
        raise config_invalid("limits must be positive", source=source)
    if cfg.confirmation.ttl_seconds <= 0:
        raise config_invalid("confirmation.ttl_seconds must be positive", source=source)
    if cfg.confirmation.sweep_interval_ms <= 0:
        raise config_invalid("confirmation.sweep_interval_ms must be positive", source=source)
    backend = IDEMPOTENCY_BACKENDS.get(cfg.idempotency.backend, source=source)
    _check_problems(backend.validate(cfg.idempotency), source)
    if cfg.idempotency.expired_policy not in ("reject", "new"):
        raise config_invalid("idempotency.expired_policy must be reject or new", source=source)
    c = cfg.credentials
    if not 0 < c.ttl_seconds <= c.max_ttl_seconds <= 300:
        raise config_invalid("credentials: need 0 < ttl_seconds <= max_ttl_seconds <= 300", source=source)
    if c.key_file and c.key_dir:
        raise config_invalid("credentials: key_file and key_dir exclude each other", source=source)
    if (c.next_key_file or c.previous_key_files) and not c.key_file:
        raise config_invalid("credentials: next/previous key files need key_file", source=source)
    names = [sc.name for sc in cfg.secrets]
    for sc in cfg.secrets:
        if not sc.name or bool(sc.file) == bool(sc.env) or not sc.tools:
            raise config_invalid(
                f"secret '{sc.name}': needs a name, exactly one of file/env, and tools", source=source
            )
    if len(set(names)) != len(names):
        raise config_invalid("secret names must be unique", source=source)
    _validate_observability(cfg.observability, source)
    return cfg


def _validate_observability(oc: ObservabilityConfig, source: str) -> None:
    def bad(message: str) -> LoadError:
        return config_invalid(f"observability.{message}", source=source)

    if oc.metrics_address:
        host, sep, port = oc.metrics_address.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise bad(f"metrics_address '{oc.metrics_address}' is not host:port")
    if oc.decision_log_mode not in ("lossless", "bounded"):
        raise bad("decision_log_mode must be 'lossless' or 'bounded'")
    if oc.decision_log_queue <= 0:
        raise bad("decision_log_queue must be positive")
    for entry in oc.decision_log_mask:
        pointer = entry.partition("#")[2] if "#" in entry else entry
        if not pointer.startswith("/"):
            raise bad(f"decision_log_mask entry '{entry}' is not a JSON pointer ('/field', 'tool#/field')")
    if oc.tracing_exporter not in ("none", "console", "otlp", "memory"):
        raise bad("tracing_exporter must be none, console, otlp or memory")
    if not 0.0 <= oc.tracing_sample_ratio <= 1.0:
        raise bad("tracing_sample_ratio must be within 0..1")


def load_config(path: str | Path) -> Config:
    """Load and validate a TOML config file. Errors name the file (and line for syntax errors)."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise config_invalid("config file not found", source=source) from None
    except IsADirectoryError:
        raise config_invalid("is a directory; --config names the TOML file", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise config_invalid(f"cannot read: {getattr(exc, 'strerror', None) or exc}", source=source) from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib messages end with "(at line L, column C)".
        raise config_invalid(str(exc), source=source) from None
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "secrets":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise config_invalid("[[secrets]] must be an array of tables", source=source)
            kwargs["secrets"] = tuple(_build(SecretConfig, v, "secrets.", source, text) for v in value)
            continue
        if key in EXTENSION_SECTIONS:
            continue  # read and validated by its own loader (callgate/mcp/config.py)
        if key not in _SECTIONS:
            raise unknown_name("section", f"[{key}]", _SECTIONS, source, key_line(text, "", key))
        if not isinstance(value, dict):
            raise config_invalid(f"[{key}] must be a table", source=source)
        kwargs[key] = _build(_SECTIONS[key], value, f"{key}.", source, text)
    cfg = Config(**kwargs, base_dir=str(p.resolve().parent))
    return validate(cfg, source=source)


def with_overrides(cfg: Config, **sections: Any) -> Config:
    """Return a copy with whole sections replaced (used by tests and the CLI)."""
    return validate(replace(cfg, **sections))


__all__ = [
    "Config",
    "key_line",
    "unknown_name",
    "BudgetsConfig",
    "ConfirmationConfig",
    "CredentialsConfig",
    "IdempotencyConfig",
    "ROLES",
    "SecretConfig",
    "LimitsConfig",
    "LogConfig",
    "LogFormat",
    "ObservabilityConfig",
    "ListenerConfig",
    "PolicyConfig",
    "RetentionConfig",
    "ServerConfig",
    "StoreConfig",
    "check_loopback",
    "load_config",
    "with_overrides",
]
