"""A small OAuth 2.1 authorization server for the HTTP gateway's tests, run as its own process:
``python -m tests.oauth_as --port P --subject alice``.

Built on the official MCP SDK's authorization-server routes (``mcp.server.auth.routes.
create_auth_routes``: RFC 8414 metadata, dynamic client registration, ``/authorize`` with PKCE,
``/token``) with a provider that signs the access tokens as JWTs (Ed25519, joserfc) whose ``aud``
is the RFC 8707 ``resource`` the client asked for, plus its JWKS at ``/jwks``. The resource
owner is ``--subject``, already signed in: ``/authorize`` redirects straight back with a code.
"""

from __future__ import annotations

import argparse
import secrets
import time
from typing import Any

import uvicorn
from joserfc import jwt
from joserfc.jwk import KeySet, OKPKey
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCOPE = "mcp"


class JwtProvider:
    """``OAuthAuthorizationServerProvider`` issuing JWT access tokens (no refresh tokens)."""

    def __init__(self, issuer: str, subject: str) -> None:
        self.issuer = issuer
        self.subject = subject
        self.key = OKPKey.generate_key("Ed25519", parameters={"kid": secrets.token_hex(8)})
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=self.subject,
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, code: str
    ) -> AuthorizationCode | None:
        found = self.codes.get(code)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(code.code, None)
        if not code.resource:
            raise TokenError("invalid_target", "a resource indicator (RFC 8707) is required")
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": code.subject,
            "aud": code.resource,
            "client_id": client.client_id,
            "scope": " ".join(code.scopes),
            "iat": now,
            "exp": now + 300,
        }
        header = {"alg": "EdDSA", "kid": self.key.kid}
        token = jwt.encode(header, claims, self.key, algorithms=["EdDSA"])
        return OAuthToken(
            access_token=token, token_type="Bearer", expires_in=300, scope=" ".join(code.scopes)
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        raise TokenError("invalid_grant", "no refresh tokens here")

    async def load_access_token(self, token: str) -> AccessToken | None:
        return None

    async def revoke_token(self, token: Any) -> None:
        return None


def build_app(port: int, subject: str, scopes: tuple[str, ...] = (SCOPE,)) -> Starlette:
    issuer = f"http://127.0.0.1:{port}"
    provider = JwtProvider(issuer, subject)

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse(KeySet([provider.key]).as_dict(private=False))

    routes = create_auth_routes(
        provider,
        TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True)).validate_python(issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=list(scopes), default_scopes=[SCOPE]
        ),
    )
    return Starlette(routes=[*routes, Route("/jwks", jwks)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--subject", default="alice")
    ap.add_argument("--scopes", default=SCOPE, help="the scopes a client may ask for, space-separated")
    args = ap.parse_args()
    app = build_app(args.port, args.subject, tuple(args.scopes.split()))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
