"""Who is asking, which tenants they may approve, and CSRF tokens.

* **Static tokens** (one machine): a JSON file of tokens (re-read when it changes: a token taken
  out of it is revoked, with every session it opened); a client sends one as ``Authorization:
  Bearer <token>``, a browser signs in once with the form and then holds only a server-side
  session id (:mod:`callgate.console.sessions`) in a ``__Host-`` cookie.
* **OIDC** (an ingress such as oauth2-proxy in front): a JWT in a header, verified with joserfc
  against the issuer's JWKS (file or URL), ``iss``, ``aud``, ``exp``/``nbf`` checked; the person is
  the identity claim, their groups the groups claim.

Anything missing, malformed, expired or unknown is ``None`` (the app answers 401). Tenants come
only from the config (``[[console.tenants]]``): identities and groups map to tenants.

CSRF: every form carries a synchronizer token: a browser session's own random token, or (a
client sending its token in a header) an HMAC of the person's identity under the console's key (a
page of another origin can neither read nor compute either); the login form, before anyone is
known, uses a double-submit cookie. Cookies are ``SameSite=Strict`` and ``HttpOnly``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from callgate.base.errors import CallgateError, config_invalid
from callgate.console.config import AuthMode, ConsoleConfig
from callgate.console.sessions import SessionStore

log = logging.getLogger("callgate.console.auth")

SESSION_COOKIE = "__Host-cg_session"
"""The browser's session id (static mode): ``Secure``, ``Path=/``, no ``Domain``, HttpOnly,
SameSite=Strict. Only this name is read: a cookie without the prefix is ignored."""
DEV_SESSION_COOKIE = "cg_session"
"""The session cookie's name with ``cookie_secure = false`` (plain-HTTP development only)."""
LOGIN_CSRF_COOKIE = "__Host-cg_login_csrf"
"""The login form's double-submit cookie."""
DEV_LOGIN_CSRF_COOKIE = "cg_login_csrf"


def cookie_names(cfg: ConsoleConfig) -> tuple[str, str]:
    """(session cookie, login CSRF cookie) for this config."""
    if cfg.cookie_secure:
        return SESSION_COOKIE, LOGIN_CSRF_COOKIE
    return DEV_SESSION_COOKIE, DEV_LOGIN_CSRF_COOKIE


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated person: the name recorded on their decisions, and their groups."""

    name: str
    groups: tuple[str, ...] = ()
    csrf: str = ""
    """The browser session's CSRF token; empty for a token sent in a header (:class:`Csrf`)."""
    session: str = ""
    """The browser session's id (sign-out ends it); empty for a token sent in a header."""


def unreadable(exc: Exception) -> str:
    """Why a secret-holding file could not be read, never a byte of it: the OS's reason, or
    where its JSON breaks."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def _bearer(value: str) -> str:
    scheme, _, rest = value.strip().partition(" ")
    if rest and scheme.lower() == "bearer":
        return rest.strip()
    return value.strip() if not rest else ""


class StaticTokens:
    """The configured token list (``tokens_file``)."""

    def __init__(self, entries: dict[str, Identity], path: Path | None = None, stamp: object = None) -> None:
        # Keyed by the token's SHA-256: lookups compare digests, never the token text itself.
        self._by_digest = {hashlib.sha256(t.encode()).digest(): who for t, who in entries.items()}
        self._path = path
        self._stamp = stamp

    @staticmethod
    def _stamp_of(path: Path) -> object:
        st = path.stat()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def refresh(self) -> bool:
        """Re-read the file if it changed (True then). A file that no longer loads keeps no
        token at all (fail closed) until it loads again; the reason is logged."""
        if self._path is None:
            return False
        try:
            stamp = self._stamp_of(self._path)
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self._by_digest = StaticTokens(StaticTokens._read(self._path))._by_digest
        except CallgateError as exc:
            log.warning("console: the token list does not load (%s); no token is valid", exc.message)
            self._by_digest = {}
        return True

    def alive(self, digest: bytes) -> bool:
        """Whether the token of this SHA-256 is still in the list."""
        return digest in self._by_digest

    @staticmethod
    def load(cfg: ConsoleConfig) -> StaticTokens:
        path = cfg.path(cfg.auth.tokens_file)
        try:
            stamp = StaticTokens._stamp_of(path)
        except OSError:
            stamp = None
        return StaticTokens(StaticTokens._read(path), path, stamp)

    @staticmethod
    def _read(path: Path) -> dict[str, Identity]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise config_invalid(
                f"console.auth.tokens_file {path}: cannot read ({unreadable(exc)})"
            ) from None
        if not isinstance(data, dict) or not data:
            raise config_invalid("console.auth.tokens_file must be a non-empty JSON object")
        entries: dict[str, Identity] = {}
        for token, who in data.items():
            if isinstance(who, str) and who:
                entries[token] = Identity(who)
            elif (
                isinstance(who, dict)
                and isinstance(who.get("identity"), str)
                and who["identity"]
                and all(isinstance(g, str) for g in who.get("groups", []))
            ):
                entries[token] = Identity(who["identity"], tuple(who.get("groups", [])))
            else:
                raise config_invalid(
                    'console.auth.tokens_file: each value is "<identity>" or {"identity": ..., "groups": [...]}'
                )
            if len(token) < 16:
                raise config_invalid("console.auth.tokens_file: tokens must have at least 16 characters")
        return entries

    def verify(self, token: str) -> Identity | None:
        found = self.lookup(token)
        return found[0] if found is not None else None

    def lookup(self, token: str) -> tuple[Identity, bytes] | None:
        """The person and the token's SHA-256, or None."""
        if not token:
            return None
        want = hashlib.sha256(token.encode()).digest()
        found: tuple[Identity, bytes] | None = None
        for digest, who in self._by_digest.items():
            if hmac.compare_digest(digest, want):
                found = (who, digest)
        return found


class OidcVerifier:
    """JWTs of one issuer and audience, keys from a JWKS file or URL."""

    def __init__(self, cfg: ConsoleConfig, keys: KeySet | None) -> None:
        self._cfg = cfg.auth
        self._keys = keys
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    @staticmethod
    def load(cfg: ConsoleConfig) -> OidcVerifier:
        keys = None
        if cfg.auth.jwks_file:
            try:
                keys = KeySet.import_key_set(
                    json.loads(cfg.path(cfg.auth.jwks_file).read_text(encoding="utf-8"))
                )
            except (OSError, ValueError, JoseError) as exc:
                raise config_invalid(f"console.auth.jwks_file: cannot load ({type(exc).__name__})") from None
        return OidcVerifier(cfg, keys)

    async def _refresh(self) -> None:
        """Fetch ``jwks_url`` (at most every ``jwks_refresh_s``); a failure keeps the old keys."""
        if not self._cfg.jwks_url:
            return
        async with self._lock:
            if self._keys is not None and time.monotonic() - self._fetched_at < self._cfg.jwks_refresh_s:
                return
            self._fetched_at = time.monotonic()
            try:
                timeout = aiohttp.ClientTimeout(total=5)
                async with aiohttp.ClientSession(timeout=timeout) as http:
                    async with http.get(self._cfg.jwks_url) as resp:
                        resp.raise_for_status()
                        self._keys = KeySet.import_key_set(await resp.json(content_type=None))
            except (aiohttp.ClientError, TimeoutError, ValueError, JoseError) as exc:
                log.warning(
                    "console: cannot fetch the JWKS (%s); keeping the keys I have", type(exc).__name__
                )

    def _decode(self, token: str) -> jwt.Token | None:
        if self._keys is None:
            return None
        try:
            return jwt.decode(token, self._keys, algorithms=list(self._cfg.algorithms))
        except (JoseError, ValueError, TypeError, KeyError):
            return None

    async def verify(self, token: str) -> Identity | None:
        if not token or token.count(".") != 2:
            return None
        if self._keys is None:
            await self._refresh()
        tok = self._decode(token)
        if tok is None and self._cfg.jwks_url:
            await self._refresh()  # a rotated key: fetch again (at most every jwks_refresh_s)
            tok = self._decode(token)
        if tok is None:
            return None
        claims = tok.claims
        reg = jwt.JWTClaimsRegistry(
            leeway=self._cfg.leeway_s,
            iss={"essential": True, "value": self._cfg.issuer},
            aud={"essential": True, "value": self._cfg.audience},
            exp={"essential": True},
        )
        try:
            reg.validate(claims)
        except JoseError:
            return None
        name = claims.get(self._cfg.identity_claim)
        groups = claims.get(self._cfg.groups_claim, [])
        if not isinstance(name, str) or not name:
            return None
        if not isinstance(groups, list):
            groups = []
        return Identity(name, tuple(g for g in groups if isinstance(g, str)))


class Authenticator:
    """The request's person, from the configured source (``None``: 401)."""

    def __init__(self, cfg: ConsoleConfig) -> None:
        self.cfg = cfg
        self.mode = cfg.auth.mode
        self._static = StaticTokens.load(cfg) if cfg.auth.mode is AuthMode.STATIC else None
        self._oidc = OidcVerifier.load(cfg) if cfg.auth.mode is AuthMode.OIDC else None
        self.sessions = SessionStore(cfg.session_ttl_s, cfg.session_idle_s)
        self.session_cookie, self.login_csrf_cookie = cookie_names(cfg)

    def presented(self, headers: Any) -> bool:
        """Whether the request carries a token in the header (then no redirect to sign-in)."""
        return bool(_bearer(headers.get(self.cfg.auth.header, "") or ""))

    def _tokens(self) -> StaticTokens:
        assert self._static is not None
        if self._static.refresh():
            gone = self.sessions.revoke(self._static.alive)
            if gone:
                log.info("console: the token list changed; %d session(s) of revoked tokens ended", gone)
        return self._static

    async def identify(self, headers: Any, cookies: dict[str, str]) -> Identity | None:
        token = _bearer(headers.get(self.cfg.auth.header, "") or "")
        if self._static is not None:
            tokens = self._tokens()
            if token:
                return tokens.verify(token)
            sid = cookies.get(self.session_cookie, "")
            s = self.sessions.get(sid, tokens.alive)
            return None if s is None else Identity(s.identity, s.groups, s.csrf, sid)
        assert self._oidc is not None
        return await self._oidc.verify(token)

    def sign_in(self, identity: str, token: str, replaces: str = "") -> str | None:
        """The login form (static mode): a new session id when ``token`` is the token of
        ``identity``, else None. The session presented (``replaces``) ends either way."""
        if replaces:
            self.sessions.close(replaces)
        if self._static is None:
            return None
        found = self._tokens().lookup(token)
        if found is None or not hmac.compare_digest(found[0].name.encode(), identity.encode()):
            return None
        who, digest = found
        return self.sessions.open(who.name, who.groups, digest)

    def sign_out(self, who: Identity) -> None:
        if who.session:
            self.sessions.close(who.session)


class Tenants:
    """``[[console.tenants]]``: which tenants a person may see and decide."""

    def __init__(self, cfg: ConsoleConfig) -> None:
        self.all = tuple(t.name for t in cfg.tenants)
        self._access = cfg.tenants

    def of(self, who: Identity) -> tuple[str, ...]:
        return tuple(
            t.name for t in self._access if who.name in t.identities or any(g in t.groups for g in who.groups)
        )


def _key_bytes(raw: bytes) -> bytes:
    """The console's key from its file: a text key (base64, hex) without the whitespace around it
    (the newline an editor or ``echo`` adds); raw random bytes (``head -c 32 /dev/urandom``) as
    they are when taking the whitespace off their ends would leave fewer than 32 of them (a raw
    key ends in a whitespace byte about 5% of the time: it was refused)."""
    text = raw.strip()
    return text if len(text) >= 32 or len(raw) < 32 else raw


class Csrf:
    """Synchronizer tokens bound to the person (HMAC under the console's key)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @staticmethod
    def load(cfg: ConsoleConfig) -> Csrf:
        if not cfg.secret_file:
            return Csrf(secrets.token_bytes(32))
        path = cfg.path(cfg.secret_file)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise config_invalid(f"console.secret_file {path}: cannot read ({unreadable(exc)})") from None
        key = _key_bytes(raw)
        if len(key) < 32:
            raise config_invalid("console.secret_file must hold at least 32 bytes")
        return Csrf(key)

    def token(self, who: Identity) -> str:
        if who.csrf:
            return who.csrf
        return hmac.new(self._key, b"csrf\x00" + who.name.encode(), hashlib.sha256).hexdigest()

    def valid(self, who: Identity, presented: str) -> bool:
        return bool(presented) and hmac.compare_digest(self.token(who).encode(), presented.encode())


__all__ = [
    "DEV_LOGIN_CSRF_COOKIE",
    "DEV_SESSION_COOKIE",
    "LOGIN_CSRF_COOKIE",
    "SESSION_COOKIE",
    "cookie_names",
    "Authenticator",
    "Csrf",
    "Identity",
    "OidcVerifier",
    "StaticTokens",
    "Tenants",
]
