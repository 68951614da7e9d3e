"""Bearer tokens for the HTTP gateway (MCP authorization: the gateway is a resource server).

The gateway validates the token it is given *for itself* and takes the subject from it; the
token is never forwarded to an upstream (upstream headers come only from the upstream's own
config). Two sources, tried in order: a file of static tokens (``{"<token>": "<subject>"}``) and
JWTs verified against a JWKS file with a pinned issuer and audience (joserfc). Anything missing,
malformed, expired or unknown is ``None``: the SDK's bearer middleware answers 401.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.provider import AccessToken

from callgate.core.errors import config_invalid
from callgate.mcp.config import McpHttpConfig

JWT_ALGORITHMS = ["EdDSA", "ES256", "RS256", "PS256"]
"""Asymmetric algorithms accepted for JWT bearer tokens (never ``none`` nor HMAC)."""


@dataclass(frozen=True)
class BearerVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over static tokens and/or a JWKS."""

    tokens: tuple[tuple[str, str], ...]
    keys: KeySet | None
    issuer: str
    audience: str

    @staticmethod
    def load(cfg: McpHttpConfig, base_dir: Path) -> BearerVerifier:
        def path(p: str) -> Path:
            q = Path(p)
            return q if q.is_absolute() else base_dir / q

        tokens: list[tuple[str, str]] = []
        if cfg.tokens_file:
            try:
                data = json.loads(path(cfg.tokens_file).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise config_invalid(f"mcp.http.tokens_file: cannot read ({type(exc).__name__})") from None
            if not isinstance(data, dict) or not all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in data.items()
            ):
                raise config_invalid('mcp.http.tokens_file must be a JSON object {"<token>": "<subject>"}')
            tokens = sorted(data.items())
        keys: KeySet | None = None
        if cfg.jwks_file:
            if not cfg.issuer or not cfg.audience:
                raise config_invalid("mcp.http: jwks_file needs issuer and audience")
            try:
                keys = KeySet.import_key_set(json.loads(path(cfg.jwks_file).read_text(encoding="utf-8")))
            except (OSError, ValueError, JoseError) as exc:
                raise config_invalid(f"mcp.http.jwks_file: cannot load ({type(exc).__name__})") from None
        if not tokens and keys is None:
            raise config_invalid("mcp.http: an HTTP gateway needs tokens_file and/or jwks_file")
        if not cfg.tenant:
            raise config_invalid("mcp.http.tenant is required for the HTTP gateway")
        return BearerVerifier(tuple(tokens), keys, cfg.issuer, cfg.audience)

    def subject_of(self, token: str) -> str | None:
        """The subject a token authenticates, or None."""
        if not token:
            return None
        found: str | None = None
        for known, subject in self.tokens:  # constant time per entry, every entry compared
            if hmac.compare_digest(known.encode(), token.encode()):
                found = subject
        if found is not None:
            return found
        if self.keys is None or token.count(".") != 2:
            return None
        try:
            decoded = jwt.decode(token, self.keys, algorithms=JWT_ALGORITHMS)
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True},
                sub={"essential": True},
            ).validate(decoded.claims)
        except (JoseError, ValueError, TypeError):
            return None
        sub = decoded.claims.get("sub")
        return sub if isinstance(sub, str) and sub else None

    async def verify_token(self, token: str) -> AccessToken | None:
        subject = self.subject_of(token)
        if subject is None:
            return None
        return AccessToken(token="", client_id=subject, scopes=[], subject=subject)


__all__ = ["JWT_ALGORITHMS", "BearerVerifier"]
