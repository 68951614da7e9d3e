"""Scoped invocation credentials: short-lived Ed25519-signed JWTs bound to one executor, one tool
``name@version``, one attempt and the digest of the arguments (``docs/CREDENTIALS.md``).

Two halves and the format they share:

* :mod:`callgate.credentials.claims` -- the format: the wire constants (``alg``, ``typ``,
  lifetimes), the refusal codes and :class:`CredentialError`, and the claim set declared once:
  :class:`Grant` (what a credential authorizes) and :class:`CredentialClaims` (the grant plus the
  registered claims, to and from the JWT payload). Standard library only.
* :mod:`callgate.credentials.issuer` -- the sidecar's half: the Ed25519 :class:`KeyRing`
  (next/current/previous, JWKS, rotation, persistence) and :class:`CredentialIssuer` (minting).
* :mod:`callgate.credentials.verifier` -- the executor's half (the sidecar's ``RedeemSecret``
  uses it too): :class:`CredentialVerifier` (offline, no gRPC, no network) returning a
  :class:`VerifiedCredential`, and the :class:`ReplayCache` for single use of ``jti``.

The names below are re-exported lazily, so importing one half (e.g. an executor's
``import callgate.credentials.verifier``) does not load the other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from callgate.credentials.claims import (
        ALG,
        AUTHORIZATION_DETAILS_TYPE,
        CODES,
        HARD_MAX_TTL_S,
        MAX_LEEWAY_S,
        TOKEN_TYPE,
        AuthorizationDetail,
        CredentialClaims,
        CredentialError,
        Grant,
    )
    from callgate.credentials.issuer import (
        CREDENTIAL_DEADLINE_PASSED,
        CredentialIssuer,
        CredentialMintError,
        KeyInfo,
        KeyRing,
        KeyState,
        MintedCredential,
    )
    from callgate.credentials.verifier import (
        JWS_REGISTRY,
        CredentialVerifier,
        InMemoryReplayCache,
        ReplayCache,
        VerifiedCredential,
    )

_HOME: dict[str, str] = {
    **dict.fromkeys(
        (
            "ALG",
            "AUTHORIZATION_DETAILS_TYPE",
            "CODES",
            "HARD_MAX_TTL_S",
            "MAX_LEEWAY_S",
            "TOKEN_TYPE",
            "AuthorizationDetail",
            "CredentialClaims",
            "CredentialError",
            "Grant",
        ),
        "callgate.credentials.claims",
    ),
    **dict.fromkeys(
        (
            "CREDENTIAL_DEADLINE_PASSED",
            "CredentialIssuer",
            "CredentialMintError",
            "KeyInfo",
            "KeyRing",
            "KeyState",
            "MintedCredential",
        ),
        "callgate.credentials.issuer",
    ),
    **dict.fromkeys(
        ("JWS_REGISTRY", "CredentialVerifier", "InMemoryReplayCache", "ReplayCache", "VerifiedCredential"),
        "callgate.credentials.verifier",
    ),
}

__all__ = [
    "ALG",
    "AUTHORIZATION_DETAILS_TYPE",
    "CODES",
    "CREDENTIAL_DEADLINE_PASSED",
    "HARD_MAX_TTL_S",
    "JWS_REGISTRY",
    "MAX_LEEWAY_S",
    "TOKEN_TYPE",
    "AuthorizationDetail",
    "CredentialClaims",
    "CredentialError",
    "CredentialIssuer",
    "CredentialMintError",
    "CredentialVerifier",
    "Grant",
    "InMemoryReplayCache",
    "KeyInfo",
    "KeyRing",
    "KeyState",
    "MintedCredential",
    "ReplayCache",
    "VerifiedCredential",
]


def __getattr__(name: str) -> Any:
    """Import a re-exported name from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
