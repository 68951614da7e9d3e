"""Bearer tokens for the HTTP gateway (MCP authorization: the gateway is an OAuth resource server).

The gateway validates the token it is given *for itself* and takes the subject from it; the
token is never forwarded to an upstream (upstream headers come only from the upstream's own
config). Two sources, tried in order: a file of static tokens (``{"<token>": "<subject>"}``,
each of at least 128 bits of entropy) and JWTs verified against a JWKS (a file and/or the
authorization server's ``jwks_uri``) with a pinned issuer and audience (RFC 8707: a token minted
for another resource is refused, so a token meant for an upstream or another service cannot be
passed through). Anything missing, malformed, expired or unknown is ``None``: the SDK's bearer
middleware answers 401.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.provider import AccessToken

from callgate.base.errors import config_invalid
from callgate.base.tokenstrength import weakness
from callgate.mcp.config import McpHttpConfig

log = logging.getLogger("callgate.mcp")

JWT_ALGORITHMS = ["EdDSA", "Ed25519", "ES256", "RS256", "PS256"]
"""Asymmetric algorithms accepted for JWT bearer tokens (never ``none`` nor HMAC); ``Ed25519``
is RFC 9864's name for EdDSA over Ed25519 (joserfc's default)."""


def _read_json(path: Path, key: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise config_invalid(f"mcp.http.{key}: cannot read {path} ({type(exc).__name__})") from None


def load_static_tokens(path: Path) -> dict[bytes, str]:
    """``{sha256(token): subject}`` from a tokens file; a weak token is refused, naming its subject."""
    data = _read_json(path, "tokens_file")
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in data.items()
    ):
        raise config_invalid(f'mcp.http.tokens_file: {path} must be a JSON object {{"<token>": "<subject>"}}')
    out: dict[bytes, str] = {}
    for token, subject in data.items():
        why = weakness(token)
        if why is not None:
            raise config_invalid(
                f"mcp.http.tokens_file: {path}: the token of subject '{subject}' is too weak ({why}); "
                "generate one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        out[hashlib.sha256(token.encode()).digest()] = subject
    return out


@dataclass
class Jwks:
    """The keys that verify JWTs: a file's, and the URL's (fetched when a token names a key not
    yet known, at most every ``refresh_seconds``; a failed fetch keeps the keys held)."""

    file_keys: tuple[dict[str, Any], ...] = ()
    url: str = ""
    refresh_seconds: float = 300.0
    _url_keys: tuple[dict[str, Any], ...] = ()
    _fetched_at: float = -1e18
    _keys: KeySet | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        keys: list[Any] = [*self.file_keys, *self._url_keys]
        self._keys = KeySet.import_key_set({"keys": keys}) if keys else None

    @property
    def keys(self) -> KeySet | None:
        return self._keys

    async def refresh(self) -> None:
        if not self.url:
            return
        async with self._lock:
            if time.monotonic() - self._fetched_at < self.refresh_seconds:
                return
            self._fetched_at = time.monotonic()
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
                    async with http.get(self.url) as resp:
                        resp.raise_for_status()
                        doc = await resp.json(content_type=None)
                KeySet.import_key_set(doc)  # refuse a malformed set before keeping it
                self._url_keys = tuple(doc["keys"])
                self._rebuild()
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError, JoseError) as exc:
                log.warning(
                    "mcp.http.jwks_url: cannot fetch the JWKS (%s); keeping the keys held", type(exc).__name__
                )


@dataclass(frozen=True)
class BearerVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over static tokens and/or JWTs."""

    tokens: dict[bytes, str]
    jwks: Jwks | None
    issuer: str
    audience: str
    """The resource this gateway accepts tokens for (``aud``; RFC 8707)."""
    static_scopes: tuple[str, ...] = ()
    """Scopes a static token grants (``required_scopes``: static tokens are not scoped)."""

    @staticmethod
    def load(cfg: McpHttpConfig, base_dir: Path, resource: str) -> BearerVerifier:
        def path(p: str) -> Path:
            q = Path(p)
            return q if q.is_absolute() else base_dir / q

        tokens = load_static_tokens(path(cfg.tokens_file)) if cfg.tokens_file else {}
        jwks: Jwks | None = None
        if cfg.jwks_file or cfg.jwks_url:
            if not cfg.issuer:
                raise config_invalid("mcp.http: jwks_file/jwks_url need issuer")
            file_keys: tuple[dict[str, Any], ...] = ()
            if cfg.jwks_file:
                doc = _read_json(path(cfg.jwks_file), "jwks_file")
                try:
                    KeySet.import_key_set(doc)  # type: ignore[arg-type]
                    file_keys = tuple(doc["keys"])  # type: ignore[index]
                except (ValueError, KeyError, TypeError, JoseError) as exc:
                    raise config_invalid(f"mcp.http.jwks_file: cannot load ({type(exc).__name__})") from None
            jwks = Jwks(file_keys, cfg.jwks_url, cfg.jwks_refresh_seconds)
        if not tokens and jwks is None:
            raise config_invalid("mcp.http: an HTTP gateway needs tokens_file and/or jwks_file/jwks_url")
        if not cfg.tenant:
            raise config_invalid("mcp.http.tenant is required for the HTTP gateway")
        return BearerVerifier(tokens, jwks, cfg.issuer, cfg.audience or resource, cfg.required_scopes)

    def static_subject(self, token: str) -> str | None:
        """The subject of a static token, or None (every entry compared, in constant time)."""
        want = hashlib.sha256(token.encode()).digest()
        found: str | None = None
        for digest, subject in self.tokens.items():
            if hmac.compare_digest(digest, want):
                found = subject
        return found

    def _decode(self, token: str) -> jwt.Token | None:
        keys = self.jwks.keys if self.jwks is not None else None
        if keys is None:
            return None
        try:
            return jwt.decode(token, keys, algorithms=JWT_ALGORITHMS)
        except (JoseError, ValueError, TypeError, KeyError):
            return None

    async def jwt_token(self, token: str) -> AccessToken | None:
        """The access token a JWT stands for, or None (bad signature, issuer, audience, expiry)."""
        if self.jwks is None or token.count(".") != 2:
            return None
        decoded = self._decode(token)
        if decoded is None and self.jwks.url:
            await self.jwks.refresh()  # an unknown (rotated) key: fetch the set again
            decoded = self._decode(token)
        if decoded is None:
            return None
        claims = decoded.claims
        try:
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True},
                sub={"essential": True},
            ).validate(claims)
        except (JoseError, ValueError, TypeError):
            return None
        sub, scope, client = claims.get("sub"), claims.get("scope", ""), claims.get("client_id")
        if not isinstance(sub, str) or not sub or not isinstance(scope, str):
            return None
        return AccessToken(
            token="",
            client_id=client if isinstance(client, str) and client else sub,
            scopes=scope.split(),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=sub,
            claims={"iss": self.issuer},
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token:
            return None
        subject = self.static_subject(token)
        if subject is not None:
            return AccessToken(token="", client_id=subject, scopes=list(self.static_scopes), subject=subject)
        return await self.jwt_token(token)


__all__ = ["JWT_ALGORITHMS", "BearerVerifier", "Jwks", "load_static_tokens"]
