"""The ``[mcp]`` table of the callgate TOML file: the gateway's identity, HTTP bearer validation
and upstream MCP servers (docs/MCP.md). Frozen dataclasses with a docstring per field (rendered
into docs/CONFIG.md by ``scripts/gen-docs``); errors name the file and the key."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any

from callgate.base.errors import LoadError, config_invalid
from callgate.client.names import UPSTREAM_NAME
from callgate.config import Config, check_loopback, key_line, load_config, unknown_name


class UpstreamTransport(str, Enum):
    """How the gateway reaches an upstream MCP server."""

    STDIO = "stdio"
    HTTP = "http"
    SSE = "sse"
    """The legacy HTTP+SSE transport (protocol 2024-11-05: a ``GET`` of ``url`` opens an event
    stream that names the endpoint for the ``POST``s), for servers that speak nothing newer."""


class NoElicitation(str, Enum):
    """What a call that needs a confirmation does when the MCP client cannot be asked (it
    declared no form elicitation: the OpenAI Agents SDK's MCP client, most IDE clients)."""

    REFUSE = "refuse"
    """Refused at once, ``elicitation_unsupported``; the invocation is cancelled."""
    WAIT = "wait"
    """The call waits (up to ``elicitation_timeout_seconds``) while the invocation is parked in
    the sidecar for a person to decide through its confirmer role: the confirmation console
    (docs/CONSOLE.md) or any client of the ``Confirmations`` service."""


class StructuredContent(str, Enum):
    """Whether a tool's ``outputSchema`` and ``structuredContent`` reach MCP clients."""

    PASS = "pass"
    """Listed and sent: ``structuredContent`` is the validated, redacted result without the
    untrusted-data marks (clients check it against ``outputSchema``), beside the marked text."""
    OMIT = "omit"
    """Neither: clients (and the models they feed) get the marked text only; for clients that
    give ``structuredContent`` to the model (pydantic-ai)."""


class SidecarMode(str, Enum):
    """Where the gateway's sidecar runs."""

    EMBEDDED = "embedded"
    EXTERNAL = "external"


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A value taken from a ``[[secrets]]`` entry at call time (``{ secret = "NAME" }``)."""

    secret: str
    """Name of the ``[[secrets]]`` entry, redeemed through the Executor role with the call's
    scoped credential (its ``tools`` must list the upstream's tools)."""


Value = str | SecretRef


@dataclass(frozen=True, slots=True)
class McpIdentityConfig:
    """The subject of a stdio gateway (the user who launched it)."""

    tenant: str = ""
    """Tenant of the subject every stdio session is opened for (required for stdio)."""
    user: str = ""
    """Subject id (the principal ``User::"<user>"`` in policies; roles come from the policy
    folder's ``entities.json``)."""


@dataclass(frozen=True, slots=True)
class McpHttpConfig:
    """Bearer-token validation for ``callgate mcp serve --transport http``: a missing, invalid or
    expired token is answered 401 and never reaches an upstream."""

    listen: str = "127.0.0.1:8765"
    """Loopback ``host:port`` of the MCP endpoint (``/mcp``); ``--listen`` overrides it."""
    tenant: str = ""
    """Tenant of every HTTP subject (the token names the user, not the tenant)."""
    tokens_file: str = ""
    """JSON file of static tokens: ``{"<token>": "<subject>", ...}`` (mode 0600). Each token
    must carry at least 128 bits (16 bytes) of entropy, e.g. ``secrets.token_urlsafe(32)``;
    a weaker one is refused at load, naming its subject."""
    jwks_file: str = ""
    """JSON Web Key Set (RFC 7517) that verifies JWT bearer tokens (joserfc)."""
    jwks_url: str = ""
    """URL of the JSON Web Key Set that verifies JWT bearer tokens (the authorization server's
    ``jwks_uri``); fetched when a token names a key not yet known, at most every
    ``jwks_refresh_seconds``. Instead of, or besides, ``jwks_file``."""
    jwks_refresh_seconds: float = 300.0
    """Least time between two fetches of ``jwks_url``."""
    issuer: str = ""
    """Required ``iss`` of JWT bearer tokens."""
    audience: str = ""
    """Required ``aud`` of JWT bearer tokens (RFC 8707: the resource the token was minted for);
    default: ``resource_url``. A token minted for another audience is refused (no token
    passthrough)."""
    authorization_server: str = ""
    """The OAuth authorization server (its issuer URL, RFC 8414) named in this gateway's
    protected-resource metadata (RFC 9728), where an MCP client obtains a token; default:
    ``issuer``. Without one (static tokens only) no metadata is published and a 401 names none."""
    required_scopes: tuple[str, ...] = ()
    """Scopes every bearer JWT must carry (``scope`` claim); advertised as ``scopes_supported``.
    Missing: 403 ``insufficient_scope``."""
    resource_url: str = ""
    """This gateway's public URL (advertised in the protected-resource metadata); default
    ``http://<listen>/mcp``."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` header values accepted (``host:port``; DNS-rebinding protection, on every bind
    address); default: the listen address and the host of ``resource_url``. Others: 421."""
    allowed_origins: tuple[str, ...] = ()
    """``Origin`` header values accepted (``scheme://host:port``); default: ``http://<listen>``
    and the origin of ``resource_url``. A request without ``Origin`` (not from a browser)
    passes; any other origin: 403."""
    max_sessions: int = 1000
    """Open MCP sessions (streamable HTTP, stateful) across all subjects; beyond it a new
    session is refused with HTTP 503."""
    max_sessions_per_subject: int = 16
    """Open MCP sessions of one subject; beyond it that subject's ``initialize`` is refused with
    HTTP 429 and the JSON-RPC error ``session_limit`` while other subjects keep working."""
    session_idle_minutes: float = 10.0
    """A session without a request in flight (nor an open GET stream) for this long is closed
    and its memory released; the client's next request gets 404 and re-initializes."""


@dataclass(frozen=True, slots=True)
class McpUpstreamConfig:
    """One upstream MCP server; its tools are exposed as ``<name>.<tool>``."""

    name: str = ""
    """Name of the upstream (the prefix of its ToolSpecs: ``<name>.<tool>``): 1-32 letters, digits
    and ``-`` with single ``_`` between them (docs/MCP.md "Tool names")."""
    transport: UpstreamTransport = UpstreamTransport.STDIO
    """``stdio`` (a child process), ``http`` (MCP streamable HTTP) or ``sse`` (the legacy
    HTTP+SSE transport: ``url`` is the event stream, e.g. ``http://127.0.0.1:9000/sse``)."""
    command: str = ""
    """stdio: the executable."""
    args: tuple[str, ...] = ()
    """stdio: its arguments."""
    cwd: str = ""
    """stdio: working directory (relative to the config file)."""
    env: tuple[tuple[str, Value], ...] = ()
    """stdio: extra environment variables; a value may be ``{ secret = "NAME" }``."""
    url: str = ""
    """http, sse: the endpoint, e.g. ``http://127.0.0.1:9000/mcp`` (sse: its event stream,
    often ``/sse``)."""
    headers: tuple[tuple[str, Value], ...] = ()
    """http, sse: request headers; a value may be ``{ secret = "NAME" }``."""
    timeout_seconds: float = 30.0
    """Connect/list timeout, and the call timeout of tools whose ToolSpec has no
    ``timeout_policy``."""
    keep_warm_seconds: float = 0.0
    """Upstreams with secrets: how long the connection built with a call's redeemed secrets
    (a stdio process, an HTTP session) stays open after its last call, for later calls that
    redeem the same values. 0 (the default): a connection per call, the secret exists only while
    an authorized call runs. Every call still redeems the secrets with its own scoped credential
    (docs/MCP.md, "Secrets and warm connections")."""

    @property
    def has_secrets(self) -> bool:
        """Whether a call needs redeemed secrets (then each call gets its own connection, or a
        warm one built with the same values: ``keep_warm_seconds``)."""
        return any(isinstance(v, SecretRef) for _, v in (*self.env, *self.headers))


@dataclass(frozen=True, slots=True)
class McpConfig:
    """The MCP gateway (``callgate mcp``): docs/MCP.md."""

    sidecar: SidecarMode = SidecarMode.EMBEDDED
    """``embedded``: run the sidecar in-process on ``[server]``'s sockets (started in the
    background: ``initialize`` is answered at once, ``tools/list`` and ``tools/call`` wait for
    it); ``external``: use an already-running sidecar at those sockets."""
    executor_id: str = "mcp-gateway"
    """Executor identity (credential audience) the gateway begins attempts as."""
    elicitation_timeout_seconds: float = 120.0
    """How long a confirmation question waits for the user; then the call is cancelled (for a
    2026-07-28 client: how long the parked confirmation waits for its answer)."""
    confirm_without_elicitation: NoElicitation = NoElicitation.REFUSE
    """A call that needs a confirmation from a client that cannot answer an elicitation:
    ``refuse`` (``elicitation_unsupported``, nothing runs) or ``wait`` for a person to decide in
    the confirmation console (``callgate console`` on ``[server] confirmer``) for up to
    ``elicitation_timeout_seconds``; the client gets progress notifications naming the
    invocation while it waits (when it sent a ``progressToken``), and a client that gives up
    cancels the invocation. Its own request timeout must be longer than the wait."""
    structured_content: StructuredContent = StructuredContent.PASS
    """``pass``: a tool's ``outputSchema`` is listed and its results carry ``structuredContent``
    (validated against it and redacted, but without the untrusted-data marks of 6.10, which the
    schema would refuse) beside the marked text; ``omit``: neither is sent, so a client that hands
    ``structuredContent`` to the model (pydantic-ai) gives it the marked text. Results are
    validated against the ToolSpec's ``output_schema`` either way."""
    list_wait_seconds: float = 2.0
    """How long a ``tools/list`` waits for upstreams whose first connect and listing (begun at
    start, all at once) is not done yet; then their tools are shown from their pins (a call still
    waits for the listing and is sent only when the live definition matches the pin) and clients
    are told ``tools/list_changed`` when it is done. Set it above the upstreams' start time to
    only ever show tools already compared with their upstream (clients with a long start-up
    timeout); 0: never wait."""
    progress_after_seconds: float = 0.0
    """Gate-stage progress notifications are sent to clients that asked (``progressToken``) for
    calls still running after this long (0 = at every stage)."""
    identity: McpIdentityConfig = McpIdentityConfig()
    """``[mcp.identity]``."""
    http: McpHttpConfig = McpHttpConfig()
    """``[mcp.http]``."""
    upstreams: tuple[McpUpstreamConfig, ...] = ()
    """``[[mcp.upstreams]]``."""

    def upstream(self, name: str) -> McpUpstreamConfig | None:
        return next((u for u in self.upstreams if u.name == name), None)


def _text(source: str) -> str:
    """The config file's text, for the line of a key (best effort: "" when unreadable)."""
    try:
        return Path(source).read_text(encoding="utf-8") if source else ""
    except (OSError, UnicodeDecodeError):
        return ""


def _scalar(cls: type[Any], data: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    defaults = cls()
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise unknown_name("key", f"'{where}{key}'", known, source, key_line(_text(source), where, key))
        default = getattr(defaults, key)
        if isinstance(default, Enum):
            try:
                out[key] = type(default)(value)
            except ValueError:
                choices = ", ".join(m.value for m in type(default))
                raise config_invalid(f"'{where}{key}' must be one of {choices}", source=source) from None
            continue
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise config_invalid(f"'{where}{key}' must be an array of non-empty strings", source=source)
            out[key] = tuple(value)
            continue
        if isinstance(default, float) and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise config_invalid(
                f"'{where}{key}' must be {type(default).__name__}, got {type(value).__name__}", source=source
            )
        out[key] = value
    return out


def _values(data: Any, where: str, source: str) -> tuple[tuple[str, Value], ...]:
    if not isinstance(data, dict):
        raise config_invalid(f"'{where}' must be a table", source=source)
    out: list[tuple[str, Value]] = []
    for k, v in data.items():
        if isinstance(v, str):
            out.append((k, v))
        elif isinstance(v, dict) and set(v) == {"secret"} and isinstance(v["secret"], str):
            out.append((k, SecretRef(v["secret"])))
        else:
            raise config_invalid(f"'{where}.{k}' must be a string or {{ secret = \"NAME\" }}", source=source)
    return tuple(out)


def _upstream(data: Any, i: int, source: str) -> McpUpstreamConfig:
    where = f"mcp.upstreams[{i}]."
    if not isinstance(data, dict):
        raise config_invalid(f"'{where[:-1]}' must be a table", source=source)
    plain = {k: v for k, v in data.items() if k not in ("env", "headers", "args")}
    kw = _scalar(McpUpstreamConfig, plain, where, source)
    if "args" in data:
        args = data["args"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise config_invalid(f"'{where}args' must be an array of strings", source=source)
        kw["args"] = tuple(args)
    for key in ("env", "headers"):
        if key in data:
            kw[key] = _values(data[key], f"{where}{key}", source)
    up = McpUpstreamConfig(**kw)
    if not UPSTREAM_NAME.fullmatch(up.name) or len(up.name) > 32:
        raise config_invalid(
            f"'{where}name' must be 1-32 letters, digits and '-' with single '_' between them (the "
            'first segment of its tools\' names, docs/MCP.md "Tool names")',
            source=source,
        )
    if up.transport is UpstreamTransport.STDIO and not up.command:
        raise config_invalid(f"'{where}command' is required for a stdio upstream", source=source)
    if up.transport is not UpstreamTransport.STDIO and not up.url.startswith(("http://", "https://")):
        raise config_invalid(
            f"'{where}url' must be an http(s) URL for an {up.transport.value} upstream", source=source
        )
    if up.timeout_seconds <= 0:
        raise config_invalid(f"'{where}timeout_seconds' must be positive", source=source)
    if up.keep_warm_seconds < 0 or up.keep_warm_seconds > 3600:
        raise config_invalid(f"'{where}keep_warm_seconds' must be between 0 and 3600", source=source)
    return up


def parse_mcp(data: Any, source: str) -> McpConfig:
    """Build :class:`McpConfig` from the ``[mcp]`` table (raises ``config_invalid``)."""
    if data is None:
        return McpConfig()
    if not isinstance(data, dict):
        raise config_invalid("[mcp] must be a table", source=source)
    if "dedupe_window_seconds" in data:
        raise config_invalid(
            "'mcp.dedupe_window_seconds' was removed: calls are no longer deduplicated by their "
            "arguments inside a time window, only a retry of the same request is (docs/MCP.md, "
            '"Idempotency"); delete the key',
            source=source,
        )
    plain = {k: v for k, v in data.items() if k not in ("identity", "http", "upstreams")}
    kw = _scalar(McpConfig, plain, "mcp.", source)
    if "identity" in data:
        if not isinstance(data["identity"], dict):
            raise config_invalid("'mcp.identity' must be a table", source=source)
        kw["identity"] = McpIdentityConfig(
            **_scalar(McpIdentityConfig, data["identity"], "mcp.identity.", source)
        )
    if "http" in data:
        if not isinstance(data["http"], dict):
            raise config_invalid("'mcp.http' must be a table", source=source)
        kw["http"] = McpHttpConfig(**_scalar(McpHttpConfig, data["http"], "mcp.http.", source))
    ups = data.get("upstreams", [])
    if not isinstance(ups, list):
        raise config_invalid("[[mcp.upstreams]] must be an array of tables", source=source)
    kw["upstreams"] = tuple(_upstream(u, i, source) for i, u in enumerate(ups))
    cfg = McpConfig(**kw)
    names = [u.name for u in cfg.upstreams]
    if len(set(names)) != len(names):
        raise config_invalid("mcp.upstreams: names must be unique", source=source)
    if cfg.elicitation_timeout_seconds <= 0:
        raise config_invalid("'mcp.elicitation_timeout_seconds' must be positive", source=source)
    if not 0 <= cfg.list_wait_seconds <= 3600:
        raise config_invalid("'mcp.list_wait_seconds' must be between 0 and 3600", source=source)
    if cfg.http.listen:
        check_loopback(cfg.http.listen, source=source)
    _check_http(cfg.http, source)
    return cfg


def _check_http(http: McpHttpConfig, source: str) -> None:
    if http.max_sessions < 1 or http.max_sessions_per_subject < 1:
        raise config_invalid(
            "'mcp.http.max_sessions' and 'max_sessions_per_subject' must be at least 1", source=source
        )
    if http.max_sessions_per_subject > http.max_sessions:
        raise config_invalid(
            "'mcp.http.max_sessions_per_subject' must not exceed 'max_sessions'", source=source
        )
    if not 0 < http.session_idle_minutes <= 24 * 60:
        raise config_invalid(
            "'mcp.http.session_idle_minutes' must be more than 0 and at most 1440", source=source
        )
    if http.jwks_refresh_seconds <= 0:
        raise config_invalid("'mcp.http.jwks_refresh_seconds' must be positive", source=source)
    for key in ("jwks_url", "issuer", "authorization_server", "resource_url"):
        value = getattr(http, key)
        if value and not value.startswith(("http://", "https://")):
            raise config_invalid(f"'mcp.http.{key}' must be an http(s) URL", source=source)
    for origin in http.allowed_origins:
        if not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
            raise config_invalid(
                f"'mcp.http.allowed_origins': '{origin}' is not an origin (scheme://host[:port])",
                source=source,
            )
    for host in http.allowed_hosts:
        if "/" in host or not host.strip():
            raise config_invalid(f"'mcp.http.allowed_hosts': '{host}' is not host[:port]", source=source)


def check_secret_refs(cfg: Config, mcp: McpConfig, source: str) -> None:
    """Every ``{ secret = "NAME" }`` names a ``[[secrets]]`` entry."""
    known = {s.name for s in cfg.secrets}
    for up in mcp.upstreams:
        for key, value in (*up.env, *up.headers):
            if isinstance(value, SecretRef) and value.secret not in known:
                raise config_invalid(
                    f"'mcp.upstreams.{up.name}': '{key}' names secret '{value.secret}', "
                    "which is not a [[secrets]] entry",
                    source=source,
                )


def load_gateway_config(path: str | Path) -> tuple[Config, McpConfig]:
    """The callgate config (``callgate serve``'s settings) and its ``[mcp]`` table."""
    cfg = load_config(path)
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:  # load_config read it a moment ago
        raise config_invalid(str(exc), source=source) from None
    mcp = parse_mcp(data.get("mcp"), source)
    check_secret_refs(cfg, mcp, source)
    return cfg, mcp


__all__ = [
    "LoadError",
    "McpConfig",
    "McpHttpConfig",
    "McpIdentityConfig",
    "McpUpstreamConfig",
    "NoElicitation",
    "SecretRef",
    "SidecarMode",
    "StructuredContent",
    "UpstreamTransport",
    "load_gateway_config",
    "parse_mcp",
]
