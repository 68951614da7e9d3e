"""The console's own TOML file (``callgate console --config console.toml``): a ``[console]``
table with ``[console.auth]``, ``[console.notify]`` and ``[[console.tenants]]``. Every field has
a docstring (docs/CONSOLE.md lists them); unknown keys are refused, as in callgate.toml."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from callgate.base.errors import config_invalid


class AuthMode(str, Enum):
    """How the console learns who is asking."""

    STATIC = "static"
    """A configured token list (one machine): a bearer token or the login form's cookie."""
    OIDC = "oidc"
    """OIDC ID/access tokens (JWT) put in a header by the ingress (e.g. oauth2-proxy)."""


@dataclass(frozen=True, slots=True)
class AuthConfig:
    mode: AuthMode = AuthMode.STATIC
    """``static`` (tokens_file) or ``oidc`` (issuer, audience, jwks_file or jwks_url)."""
    tokens_file: str = ""
    """static: JSON file ``{"<token>": "<identity>"}`` or ``{"<token>": {"identity": ..., "groups":
    [...]}}``; tokens are compared in constant time and never logged."""
    issuer: str = ""
    """oidc: the required ``iss`` claim."""
    audience: str = ""
    """oidc: the required ``aud`` claim (the console's client id)."""
    jwks_file: str = ""
    """oidc: the issuer's JWKS as a file (read at start)."""
    jwks_url: str = ""
    """oidc: the issuer's JWKS URL (fetched at start, again at most every ``jwks_refresh_s`` for
    an unknown ``kid``)."""
    jwks_refresh_s: float = 300.0
    """oidc: the least time between two fetches of ``jwks_url``."""
    header: str = "Authorization"
    """The request header carrying the token (``Bearer <jwt>`` or the bare token, e.g.
    ``X-Forwarded-Access-Token``)."""
    identity_claim: str = "email"
    """oidc: the claim naming the person (recorded as ``confirmed_by`` / ``denied_by``)."""
    groups_claim: str = "groups"
    """oidc: the claim listing the person's groups (matched against ``tenants[].groups``)."""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA", "PS256")
    """oidc: accepted JWS algorithms (never ``none`` nor HMAC)."""
    leeway_s: int = 30
    """oidc: clock skew allowed on ``exp``/``nbf``."""


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    webhook_url: str = ""
    """A Slack-compatible incoming webhook: ``{"text": ...}`` for each new pending item, with a
    link to it. Empty: no notifications. Failures are logged and never block anything."""
    webhook_url_env: str = ""
    """Name of an environment variable holding the webhook URL (a Slack URL is a secret);
    wins over ``webhook_url``."""
    timeout_s: float = 5.0
    """Timeout of one webhook POST."""


@dataclass(frozen=True, slots=True)
class TenantAccess:
    name: str = ""
    """The tenant (``Subject.tenant``) whose confirmations these people may approve."""
    identities: tuple[str, ...] = ()
    """Identities (static token identity or the OIDC identity claim) allowed for the tenant."""
    groups: tuple[str, ...] = ()
    """Groups (static token groups or the OIDC groups claim) allowed for the tenant."""


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    listen: str = "127.0.0.1:8765"
    """``host:port`` of the HTTP listener (behind an ingress that terminates TLS)."""
    confirmer: str = "unix:var/run/confirmer.sock"
    """gRPC target of a sidecar's confirmer listener (``unix:PATH``; a relative path is relative
    to this file). With the PostgreSQL store any pod's listener serves the whole fleet."""
    public_url: str = ""
    """The console's external URL, for links in notifications (default ``http://<listen>``)."""
    secret_file: str = ""
    """A file with the key that signs CSRF tokens (32+ bytes); empty: a random key per process
    (tokens of open pages then end with a restart)."""
    cookie_secure: bool = True
    """The session cookie is ``__Host-cg_session`` (``Secure``, ``Path=/``, no ``Domain``); false
    only for plain-HTTP development on a host other than localhost: then it is ``cg_session``,
    without the prefix and ``Secure`` (browsers refuse a ``Secure`` cookie over plain HTTP)."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` header values served (``name`` or ``name:port``), besides the ``listen`` address
    and ``public_url``'s host, which are always allowed; any other answers 421 (a DNS-rebinding
    page cannot reach the console). ``/healthz`` is exempt."""
    session_ttl_s: float = 43200.0
    """A sign-in session ends this long after sign-in (static mode)."""
    session_idle_s: float = 3600.0
    """A sign-in session ends after this long without a request (static mode)."""
    login_max_failures: int = 5
    """Failed sign-ins of one client address, or for one identity, within ``login_window_s``
    that lock it out."""
    login_window_s: float = 300.0
    """The window in which failed sign-ins are counted."""
    login_lockout_s: float = 300.0
    """How long a locked client or identity is refused (every attempt, even a right token)."""
    rpc_timeout_s: float = 5.0
    """Deadline of each unary call to the confirmer listener."""
    auth: AuthConfig = AuthConfig()
    notify: NotifyConfig = NotifyConfig()
    tenants: tuple[TenantAccess, ...] = ()
    """Who may approve which tenant; a person sees and decides only these tenants' items."""
    base_dir: str = field(default=".", metadata={"internal": True})
    """Directory of the config file (relative paths are resolved against it)."""

    def path(self, p: str) -> Path:
        q = Path(p)
        return q if q.is_absolute() else Path(self.base_dir) / q

    @property
    def confirmer_target(self) -> str:
        if self.confirmer.startswith("unix:") and not self.confirmer.startswith("unix:/"):
            return "unix:" + str(self.path(self.confirmer[len("unix:") :]))
        return self.confirmer

    @property
    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit():
            raise config_invalid(f"console.listen must be host:port, not {self.listen!r}")
        return host.strip("[]") or "127.0.0.1", int(port)

    @property
    def hosts(self) -> frozenset[str]:
        """The ``Host`` values served (lower case): ``allowed_hosts``, ``listen``, ``public_url``."""
        host, port = self.host_port
        names = {f"{host}:{port}", f"[{host}]:{port}"} if ":" in host else {f"{host}:{port}"}
        if self.public_url:
            names.add(urlsplit(self.public_url).netloc.rpartition("@")[2])
        names.update(self.allowed_hosts)
        return frozenset(n.lower() for n in names if n)

    @property
    def link_base(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host, port = self.host_port
        return f"http://{host}:{port}"


def _build(cls: type[Any], data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise config_invalid(f"{where} must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise config_invalid(f"{where}: unknown keys {unknown} (known: {sorted(fields)})")
    kw: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        key = f"{where}.{name}"
        if isinstance(default, Enum):
            try:
                kw[name] = type(default)(value)
            except ValueError:
                raise config_invalid(f"{key} must be one of {[m.value for m in type(default)]}") from None
        elif dataclasses.is_dataclass(default):
            kw[name] = _build(type(default), value, key)
        elif name == "tenants":
            if not isinstance(value, list):
                raise config_invalid(f"{key} must be an array of tables")
            kw[name] = tuple(_build(TenantAccess, t, f"{key}[{i}]") for i, t in enumerate(value))
        elif isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise config_invalid(f"{key} must be an array of non-empty strings")
            kw[name] = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise config_invalid(f"{key} must be true or false")
            kw[name] = value
        elif isinstance(default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise config_invalid(f"{key} must be a non-negative number")
            kw[name] = type(default)(value)
        else:
            if not isinstance(value, str):
                raise config_invalid(f"{key} must be a string")
            kw[name] = value
    return cls(**kw)


def check(cfg: ConsoleConfig) -> ConsoleConfig:
    """Refuse a config the console cannot serve safely."""
    cfg.host_port  # noqa: B018 (parses listen)
    a = cfg.auth
    if a.mode is AuthMode.STATIC and not a.tokens_file:
        raise config_invalid("console.auth.tokens_file is required with mode = 'static'")
    if a.mode is AuthMode.OIDC:
        if not a.issuer or not a.audience:
            raise config_invalid("console.auth: mode = 'oidc' needs issuer and audience")
        if bool(a.jwks_file) == bool(a.jwks_url):
            raise config_invalid("console.auth: mode = 'oidc' needs exactly one of jwks_file, jwks_url")
        bad = [x for x in a.algorithms if x.upper().startswith("HS") or x.lower() == "none"]
        if bad or not a.algorithms:
            raise config_invalid(f"console.auth.algorithms: asymmetric algorithms only (not {bad})")
    names = [t.name for t in cfg.tenants]
    if not names or not all(names) or len(set(names)) != len(names):
        raise config_invalid("console.tenants: one entry per tenant, each with a name (at least one)")
    if cfg.rpc_timeout_s <= 0 or cfg.notify.timeout_s <= 0:
        raise config_invalid("console: timeouts must be positive")
    if min(cfg.session_ttl_s, cfg.session_idle_s, cfg.login_window_s, cfg.login_lockout_s) <= 0:
        raise config_invalid("console: session and sign-in times must be positive")
    if cfg.login_max_failures < 1:
        raise config_invalid("console.login_max_failures must be at least 1")
    return cfg


def load(path: str | Path) -> ConsoleConfig:
    """Read, type and check the console's TOML file (``config_invalid`` on any problem)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise config_invalid(f"{p}: cannot read ({exc})") from None
    unknown = sorted(set(data) - {"console"})
    if unknown:
        raise config_invalid(f"{p}: unknown tables {unknown} (only [console])")
    cfg = _build(ConsoleConfig, data.get("console", {}), "console")
    return check(dataclasses.replace(cfg, base_dir=str(p.resolve().parent)))


__all__ = ["AuthConfig", "AuthMode", "ConsoleConfig", "NotifyConfig", "TenantAccess", "check", "load"]
