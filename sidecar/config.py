"""Typed, frozen configuration loaded from a TOML file (``callgate.toml``).

Every field has a default that runs the embedded setup (Cedar + SQLite on Unix sockets). Paths in
the file are relative to the directory of the file. Unknown keys are an error, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sidecar.errors import ErrorCode, LoadError


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
    """Listener of the agent-facing ``Gate`` service (plus Authorizer, health, reflection)."""
    confirmer: ListenerConfig = ListenerConfig(socket="var/run/confirmer.sock")
    """Listener of the ``Confirmations`` service: never reachable from the agent's listener."""
    authorizer: ListenerConfig = ListenerConfig(socket="var/run/authorizer.sock")
    """Listener of the generic ``Authorizer`` decision point for other components."""
    reflection: bool = True
    """Serve gRPC server reflection on every listener."""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    engine: str = "cedar"
    """Authorization engine: ``cedar`` (embedded, default)."""
    dir: str = "policies"
    """Directory with ``tools/*.json`` ToolSpecs and the engine's policy files (``cedar/``)."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    backend: str = "sqlite"
    """Event/invocation store: ``sqlite`` (embedded default)."""
    path: str = "var/callgate.db"
    """SQLite database file (WAL mode)."""
    synchronous: str = "full"
    """SQLite ``synchronous`` pragma: ``full`` makes every event durable before the RPC answers."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_argument_bytes: int = 65536
    """Largest accepted argument document, in bytes (6.4 layer 1)."""
    max_depth: int = 64
    """Deepest accepted nesting of arrays/objects in arguments."""
    max_sessions: int = 100000
    """Sessions kept in memory before the oldest are evicted from the cache (they stay stored)."""


@dataclass(frozen=True, slots=True)
class ConfirmationConfig:
    ttl_seconds: int = 300
    """How long a CONFIRM decision stays pending before it expires (then CANCELLED_BEFORE_COMMIT)."""


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = ServerConfig()
    policy: PolicyConfig = PolicyConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()
    confirmation: ConfirmationConfig = ConfirmationConfig()
    base_dir: str = "."
    """Directory that relative paths are resolved against (the config file's directory)."""

    def path(self, p: str) -> Path:
        """Resolve a configured path against :attr:`base_dir`."""
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q


_SECTIONS: dict[str, type[Any]] = {
    "server": ServerConfig,
    "policy": PolicyConfig,
    "store": StoreConfig,
    "limits": LimitsConfig,
    "confirmation": ConfirmationConfig,
}


def _build(cls: type[Any], data: dict[str, Any], where: str, source: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise LoadError(
                code=ErrorCode.CONFIG_INVALID,
                message=f"unknown key '{where}{key}' (known: {', '.join(sorted(known))})",
                source=source,
            )
        default = getattr(cls(), key)
        if isinstance(default, ListenerConfig):
            if not isinstance(value, dict):
                raise LoadError(
                    code=ErrorCode.CONFIG_INVALID,
                    message=f"'{where}{key}' must be a table",
                    source=source,
                )
            kwargs[key] = _build(ListenerConfig, value, f"{where}{key}.", source)
            continue
        if type(value) is not type(default):
            raise LoadError(
                code=ErrorCode.CONFIG_INVALID,
                message=f"'{where}{key}' must be {type(default).__name__}, got {type(value).__name__}",
                source=source,
            )
        kwargs[key] = value
    return cls(**kwargs)


def check_loopback(addr: str, *, source: str = "") -> tuple[str, int]:
    """Parse ``host:port`` and insist the host is a loopback address (or ``localhost``)."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not port_s.isdigit():
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID, message=f"tcp address '{addr}' is not host:port", source=source
        )
    host = host.strip("[]")
    if host != "localhost":
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
        if not ok:
            raise LoadError(
                code=ErrorCode.CONFIG_INVALID,
                message=f"tcp address '{addr}' is not loopback: callgate only listens on loopback or Unix sockets",
                source=source,
            )
    return host, int(port_s)


def validate(cfg: Config, *, source: str = "") -> Config:
    """Semantic checks that types alone cannot express."""
    if cfg.policy.engine != "cedar":
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID,
            message=f"policy.engine '{cfg.policy.engine}' is not supported (supported: cedar)",
            source=source,
        )
    if cfg.store.backend != "sqlite":
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID,
            message=f"store.backend '{cfg.store.backend}' is not supported (supported: sqlite)",
            source=source,
        )
    if cfg.store.synchronous not in ("full", "normal"):
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID, message="store.synchronous must be 'full' or 'normal'", source=source
        )
    for role in ("agent", "confirmer", "authorizer"):
        lc: ListenerConfig = getattr(cfg.server, role)
        if lc.tcp:
            check_loopback(lc.tcp, source=source)
    if not cfg.server.agent.socket and not cfg.server.agent.tcp:
        raise LoadError(code=ErrorCode.CONFIG_INVALID, message="server.agent needs a socket or tcp", source=source)
    sockets = [getattr(cfg.server, r).socket for r in ("agent", "confirmer", "authorizer")]
    sockets = [s for s in sockets if s]
    if len(set(sockets)) != len(sockets):
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID, message="each role needs its own socket path", source=source
        )
    if cfg.limits.max_argument_bytes <= 0 or cfg.limits.max_depth <= 0:
        raise LoadError(code=ErrorCode.CONFIG_INVALID, message="limits must be positive", source=source)
    if cfg.confirmation.ttl_seconds <= 0:
        raise LoadError(
            code=ErrorCode.CONFIG_INVALID, message="confirmation.ttl_seconds must be positive", source=source
        )
    return cfg


def load_config(path: str | Path) -> Config:
    """Load and validate a TOML config file. Errors name the file (and line for syntax errors)."""
    p = Path(path)
    source = str(p)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LoadError(code=ErrorCode.CONFIG_INVALID, message="config file not found", source=source) from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib messages end with "(at line L, column C)".
        raise LoadError(code=ErrorCode.CONFIG_INVALID, message=str(exc), source=source) from None
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _SECTIONS:
            raise LoadError(
                code=ErrorCode.CONFIG_INVALID,
                message=f"unknown section [{key}] (known: {', '.join(sorted(_SECTIONS))})",
                source=source,
            )
        if not isinstance(value, dict):
            raise LoadError(code=ErrorCode.CONFIG_INVALID, message=f"[{key}] must be a table", source=source)
        kwargs[key] = _build(_SECTIONS[key], value, f"{key}.", source)
    cfg = Config(**kwargs, base_dir=str(p.resolve().parent))
    return validate(cfg, source=source)


def with_overrides(cfg: Config, **sections: Any) -> Config:
    """Return a copy with whole sections replaced (used by tests and the CLI)."""
    return validate(replace(cfg, **sections))


__all__ = [
    "Config",
    "ConfirmationConfig",
    "LimitsConfig",
    "ListenerConfig",
    "PolicyConfig",
    "ServerConfig",
    "StoreConfig",
    "check_loopback",
    "load_config",
    "with_overrides",
]
