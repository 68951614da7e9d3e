"""Executor library: verify a callgate invocation credential offline.

An executor (the process that actually runs a tool) receives, with each invocation, a short-lived
credential minted by the sidecar (:mod:`callgate.credentials.issuer`): an Ed25519-signed JWT bound to one
executor identity (``aud``), one tool ``name@version``, one attempt and the digest of the
canonical normalized arguments. Before it runs anything the executor calls
:meth:`CredentialVerifier.verify` with the token, the tool it is about to run and the arguments it
is about to run them with. Nothing here talks to the network or imports gRPC: the public keys
come from a JWKS mapping (or a callable returning the current one), time from an injected
:class:`~callgate.base.clock.Clock`, and single use of ``jti`` from a :class:`ReplayCache`.

The sidecar uses the same verifier for ``RedeemSecret`` (with the presenting executor's identity
as ``audience`` and the invocation's recorded digest as ``expected_digest``).

Checks, in this order; the first that fails raises :class:`CredentialError` with a stable
``code`` (see ``docs/CREDENTIALS.md``):

====  ==========================================================  ====================
step  check                                                       code
====  ==========================================================  ====================
1     compact JWS shape, size, strict base64url, strict JSON      ``malformed``
2     header ``alg`` is exactly ``EdDSA`` (no ``none``/HS*/...)    ``bad_algorithm``
3     header has only ``alg``, ``typ``, ``kid``                   ``malformed``
4     ``kid`` names exactly one usable Ed25519 key in the JWKS    ``unknown_kid``
5     Ed25519 signature                                           ``bad_signature``
6     ``typ`` is ``callgate-invocation+jwt``                      ``bad_type``
7     claims present and well typed, lifetime <= 300 s            ``malformed``
8     ``iss``                                                     ``wrong_issuer``
9     ``aud`` (one string)                                        ``wrong_audience``
10    ``exp`` (with leeway)                                       ``expired``
11    ``nbf``, ``iat`` (with leeway)                              ``not_yet_valid``
12    tool name and version                                       ``wrong_tool``
13    arguments re-canonicalized, digest recomputed, compared     ``arguments_mismatch``
14    ``jti`` first use (only once everything else passed)        ``replayed``
====  ==========================================================  ====================
"""

from __future__ import annotations

import heapq
import hmac
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Final, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from joserfc import jws
from joserfc.errors import BadSignatureError, InvalidKeyCurveError, JoseError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import OKPKey
from joserfc.jws import JWSRegistry
from joserfc.util import urlsafe_b64decode

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.base.clock import Clock
from callgate.base.errors import RejectedError
from callgate.base.model import JSONValue
from callgate.credentials.claims import (
    ALG,
    ARGUMENTS_MISMATCH,
    AUTHORIZATION_DETAILS_TYPE,
    BAD_ALGORITHM,
    BAD_SIGNATURE,
    BAD_TYPE,
    CODES,
    EXPIRED,
    HARD_MAX_TTL_S,
    MALFORMED,
    MAX_LEEWAY_S,
    MAX_TOKEN_BYTES,
    NOT_YET_VALID,
    REPLAYED,
    TOKEN_TYPE,
    UNKNOWN_KID,
    WRONG_TOOL,
    CredentialClaims,
    CredentialError,
)

__all__ = [
    "ALG",
    "AUTHORIZATION_DETAILS_TYPE",
    "CODES",
    "HARD_MAX_TTL_S",
    "JWS_REGISTRY",
    "MAX_LEEWAY_S",
    "TOKEN_TYPE",
    "CredentialError",
    "CredentialVerifier",
    "InMemoryReplayCache",
    "ReplayCache",
    "VerifiedCredential",
]

# --------------------------------------------------------------------------------------------
# JWS: one algorithm (the wire constants and the claims are in callgate.credentials.claims)


class _EdDSAEd25519(JWSAlgModel):
    """JWS ``EdDSA`` (RFC 8037) restricted to Ed25519 keys. Replaces joserfc's ``EdDSA`` model,
    which accepts Ed448 too and warns on every call that RFC 9864 deprecates the name (the choice
    of the name is deliberate: docs/CREDENTIALS.md)."""

    name = ALG
    description = "EdDSA with Ed25519 keys only"
    key_type = "OKP"
    recommended = True

    def check_key(self, key: Any) -> None:
        super().check_key(key)
        if not isinstance(key, OKPKey) or key.curve_name != "Ed25519":
            raise InvalidKeyCurveError("only Ed25519 keys are accepted")

    def sign(self, msg: bytes, key: Any) -> bytes:
        op_key = key.get_op_key("sign")
        if not isinstance(op_key, Ed25519PrivateKey):
            raise InvalidKeyCurveError("only Ed25519 keys are accepted")
        return op_key.sign(msg)

    def verify(self, msg: bytes, sig: bytes, key: Any) -> bool:
        op_key = key.get_op_key("verify")
        if not isinstance(op_key, Ed25519PublicKey):
            return False
        try:
            op_key.verify(sig, msg)
        except InvalidSignature:
            return False
        return True


class _PinnedRegistry(JWSRegistry):
    """A JWS registry that knows exactly one algorithm; any other ``alg`` is unsupported."""

    algorithms: dict[str, JWSAlgModel] = {ALG: _EdDSAEd25519()}
    recommended: list[str] = [ALG]
    max_header_length = 512
    max_payload_length = MAX_TOKEN_BYTES


JWS_REGISTRY: Final = _PinnedRegistry(algorithms=[ALG])
"""The only JWS registry callgate signs and verifies with (callgate.credentials.issuer signs with it)."""

_HEADER_PARAMS: Final = frozenset({"alg", "typ", "kid"})
_SEGMENT_RE: Final = re.compile(rb"[A-Za-z0-9_-]+\Z")


# --------------------------------------------------------------------------------------------
# Strict JSON (duplicate keys and NaN/Infinity refused: no parser differential on claims)


class _Strict(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Strict("duplicate key")
    return d


def _constant(name: str) -> Any:
    raise _Strict("non-finite number")


_DECODER: Final = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = _DECODER.decode(raw.decode("utf-8"))
    except (ValueError, TypeError, UnicodeError, RecursionError):
        raise CredentialError(code=MALFORMED, message=f"{what} is not strict JSON") from None
    if not isinstance(value, dict):
        raise CredentialError(code=MALFORMED, message=f"{what} is not a JSON object")
    return value


# --------------------------------------------------------------------------------------------
# Replay cache


class ReplayCache(Protocol):
    """Single use of ``jti``. Implementations must be atomic (check-and-set) and thread-safe.

    A shared implementation (several executor replicas behind one audience) is e.g. Redis
    ``SET jti 1 NX EXAT keep_until``: ``True`` if the key was set.
    """

    def first_use(self, jti: str, *, keep_until: float, now: float) -> bool:
        """Record ``jti`` as used until ``keep_until`` (POSIX seconds).

        Return ``True`` if it had not been used before (or its record has lapsed), ``False`` if
        this is a replay. ``keep_until`` is the last instant at which the credential could still
        verify (``exp`` + leeway); the record may be dropped after it.
        """
        ...


class InMemoryReplayCache:
    """Per-process :class:`ReplayCache`: ``jti -> keep_until`` with expired entries pruned on
    each call (a min-heap keeps pruning O(log n)). Thread-safe.

    Memory is bounded by the issuance rate times the longest lifetime (300 s + leeway), since
    only tokens with a valid signature reach the cache.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def first_use(self, jti: str, *, keep_until: float, now: float) -> bool:
        with self._lock:
            heap, until = self._heap, self._until
            while heap and heap[0][0] < now:
                t, old = heapq.heappop(heap)
                if until.get(old) == t:
                    del until[old]
            seen = until.get(jti)
            if seen is not None and seen >= now:
                return False
            until[jti] = keep_until
            heapq.heappush(heap, (keep_until, jti))
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._until)


# --------------------------------------------------------------------------------------------
# Result


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifiedCredential(CredentialClaims):
    """A credential that passed every check: its claims (:class:`CredentialClaims`, times as
    aware UTC datetimes, ``deadline`` the invocation deadline to run the tool within), the key
    that signed it and the verified payload."""

    kid: str
    """The ``kid`` of the signing key."""
    claims: Mapping[str, Any]
    """All verified claims (read-only view)."""

    @classmethod
    def from_claims(
        cls, claims: CredentialClaims, *, kid: str, payload: dict[str, Any]
    ) -> VerifiedCredential:
        """``claims`` as verified with key ``kid``; ``payload`` is kept as a read-only view."""
        return cls(
            **{f.name: getattr(claims, f.name) for f in fields(CredentialClaims)},
            kid=kid,
            claims=MappingProxyType(payload),
        )


# --------------------------------------------------------------------------------------------
# Verifier

JWKSource = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def _usable_jwk(jwk: Any) -> str | None:
    """The base64url ``x`` of an Ed25519 signing key usable with ``EdDSA``, or ``None``."""
    if not isinstance(jwk, Mapping):
        return None
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        return None
    if jwk.get("alg", ALG) != ALG or jwk.get("use", "sig") != "sig":
        return None
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, Sequence) or "verify" not in ops):
        return None
    x = jwk.get("x")
    return x if isinstance(x, str) else None


class CredentialVerifier:
    """Verifies callgate invocation credentials offline. Thread-safe; build one per process.

    Args:
        jwks: the issuer's JWKS (``{"keys": [...]}``) or a callable returning the current one
            (called on every verification; cheap if it returns a cached mapping). Publish-ahead
            of the ``next`` key means a JWKS refreshed at least once per rotation interval never
            misses a signing key.
        issuer: expected ``iss``.
        audience: expected ``aud`` (this executor's identity). May be left ``None`` if every
            call passes ``audience=`` (the sidecar's ``RedeemSecret`` does: the presenting
            executor's authenticated identity).
        clock: time source.
        leeway_s: clock-skew allowance for ``exp``/``nbf``/``iat``, 0..30 s.
        replay_cache: single use of ``jti``; a fresh :class:`InMemoryReplayCache` by default.
    """

    def __init__(
        self,
        jwks: JWKSource,
        *,
        issuer: str,
        audience: str | None,
        clock: Clock,
        leeway_s: int = 5,
        replay_cache: ReplayCache | None = None,
    ) -> None:
        if isinstance(leeway_s, bool) or not isinstance(leeway_s, int) or not 0 <= leeway_s <= MAX_LEEWAY_S:
            raise ValueError(f"leeway_s must be an integer in 0..{MAX_LEEWAY_S}")
        if not issuer:
            raise ValueError("issuer must be non-empty")
        if audience is not None and not audience:
            raise ValueError("audience must be non-empty (or None)")
        if isinstance(jwks, Mapping):
            if not isinstance(jwks.get("keys"), list):
                raise ValueError('jwks must be a JWK Set: {"keys": [...]}')
            static: Mapping[str, Any] = jwks
            self._jwks: Callable[[], Mapping[str, Any]] = lambda: static
        elif callable(jwks):
            self._jwks = jwks
        else:
            raise TypeError("jwks must be a mapping or a callable returning one")
        self._issuer = issuer
        self._audience = audience
        self._clock = clock
        self._leeway = leeway_s
        self._replay: ReplayCache = replay_cache if replay_cache is not None else InMemoryReplayCache()
        self._keys: dict[str, tuple[str, OKPKey]] = {}
        self._keys_lock = threading.Lock()

    @property
    def leeway_s(self) -> int:
        return self._leeway

    # -- keys

    def _key_for(self, kid: str) -> OKPKey | None:
        jwks = self._jwks()
        keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
        if not isinstance(keys, list):
            return None
        found: list[str] = []
        for jwk in keys:
            if isinstance(jwk, Mapping) and jwk.get("kid") == kid:
                x = _usable_jwk(jwk)
                if x is None:
                    return None
                found.append(x)
        if len(found) != 1:  # absent, or ambiguous: refuse
            return None
        x = found[0]
        with self._keys_lock:
            cached = self._keys.get(kid)
        if cached is not None and cached[0] == x:
            return cached[1]
        try:
            key = OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": x})
        except (JoseError, ValueError, TypeError):
            return None
        with self._keys_lock:
            if len(self._keys) >= 64:
                self._keys.clear()
            self._keys[kid] = (x, key)
        return key

    # -- verification

    def verify(
        self,
        token: str,
        *,
        tool_name: str,
        tool_version: str,
        arguments: JSONValue | None = None,
        canonical_arguments: bytes | None = None,
        expected_digest: str | None = None,
        audience: str | None = None,
    ) -> VerifiedCredential:
        """Verify ``token`` for running ``tool_name@tool_version`` on the given arguments.

        Pass exactly one of:

        * ``arguments``: the normalized argument object the executor is about to run (the
          ``normalized_arguments`` the sidecar returned, parsed); it is canonicalized (RFC 8785)
          here;
        * ``canonical_arguments``: the exact RFC 8785 bytes (e.g. ``normalized_arguments`` as
          received). Bytes that are not canonical simply fail to match;
        * ``expected_digest``: a digest the caller already trusts (the sidecar's own record).

        The digest is recomputed with the token's ``tenant`` and the expected tool and compared
        in constant time. ``audience`` overrides the constructor's for this call.

        Raises:
            CredentialError: the credential is refused (``.code`` says which check).
            ValueError: the call itself is wrong (not exactly one argument form, no audience).
        """
        if sum(x is not None for x in (arguments, canonical_arguments, expected_digest)) != 1:
            raise ValueError("pass exactly one of arguments, canonical_arguments, expected_digest")
        if canonical_arguments is not None and not isinstance(canonical_arguments, bytes):
            raise TypeError("canonical_arguments must be bytes")
        if expected_digest is not None and not isinstance(expected_digest, str):
            raise TypeError("expected_digest must be a str")
        expected_aud = audience if audience is not None else self._audience
        if not expected_aud:
            raise ValueError("no audience to check against")

        # 1. shape
        if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
            raise CredentialError(code=MALFORMED, message="not a compact JWS of acceptable size")
        try:
            raw = token.encode("ascii")
        except UnicodeError:
            raise CredentialError(code=MALFORMED, message="token is not ASCII") from None
        parts = raw.split(b".")
        # (an empty signature is a shape the alg check below reports: alg "none")
        if (
            len(parts) != 3
            or not (_SEGMENT_RE.match(parts[0]) and _SEGMENT_RE.match(parts[1]))
            or not (parts[2] == b"" or _SEGMENT_RE.match(parts[2]))
        ):
            raise CredentialError(code=MALFORMED, message="not a compact JWS (three base64url segments)")
        try:
            header_bytes = urlsafe_b64decode(parts[0])
        except ValueError:
            raise CredentialError(code=MALFORMED, message="header is not strict base64url") from None
        header = _json_object(header_bytes, "header")

        # 2-3. algorithm pinned before any key is touched
        if header.get("alg") != ALG:
            raise CredentialError(code=BAD_ALGORITHM, message=f"alg must be {ALG}")
        if not set(header) <= _HEADER_PARAMS:
            raise CredentialError(code=MALFORMED, message="header has parameters other than alg, typ, kid")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise CredentialError(code=UNKNOWN_KID, message="header has no kid")

        # 4. key
        key = self._key_for(kid)
        if key is None:
            raise CredentialError(code=UNKNOWN_KID, message="kid is not a usable key of the issuer's JWKS")

        # 5. signature
        try:
            obj = jws.deserialize_compact(raw, key, registry=JWS_REGISTRY)
        except BadSignatureError:
            raise CredentialError(code=BAD_SIGNATURE, message="signature does not verify") from None
        except (JoseError, ValueError, TypeError):
            raise CredentialError(code=MALFORMED, message="JWS could not be processed") from None

        # 6. explicit type (RFC 7515 4.1.9: case-insensitive, "application/" may be omitted)
        typ = header.get("typ")
        if not isinstance(typ, str) or typ.lower().removeprefix("application/") != TOKEN_TYPE:
            raise CredentialError(code=BAD_TYPE, message=f"typ must be {TOKEN_TYPE}")

        # 7-9. claims, who
        payload = _json_object(obj.payload or b"", "payload")
        claims = CredentialClaims.from_payload(payload, issuer=self._issuer, audience=expected_aud)

        # 10-11. when
        now = self._clock.now().timestamp()
        if now >= claims.expires_at.timestamp() + self._leeway:
            raise CredentialError(code=EXPIRED, message="credential has expired")
        if (
            now + self._leeway < claims.not_before.timestamp()
            or now + self._leeway < claims.issued_at.timestamp()
        ):
            raise CredentialError(code=NOT_YET_VALID, message="credential is not valid yet")

        # 12. what
        if claims.tool_name != tool_name or claims.tool_version != tool_version:
            raise CredentialError(code=WRONG_TOOL, message="credential is for another tool or version")

        # 13. with which arguments
        token_digest = claims.digest
        if expected_digest is not None:
            recomputed = expected_digest
        else:
            try:
                canonical = (
                    canonical_arguments if canonical_arguments is not None else canonicalize(arguments)
                )
                recomputed = invocation_digest(claims.tenant, tool_name, tool_version, canonical)
            except RejectedError:
                raise CredentialError(
                    code=ARGUMENTS_MISMATCH, message="arguments have no canonical form"
                ) from None
            except (ValueError, TypeError):
                raise CredentialError(code=MALFORMED, message="tenant or tool cannot form a digest") from None
        if not hmac.compare_digest(recomputed.encode(), token_digest.encode()):
            raise CredentialError(
                code=ARGUMENTS_MISMATCH, message="arguments differ from the authorized ones"
            )

        if claims.expires_at > claims.deadline:
            raise CredentialError(code=MALFORMED, message="exp is after the invocation deadline")

        # 14. once
        if not self._replay.first_use(
            claims.jti, keep_until=claims.expires_at.timestamp() + self._leeway, now=now
        ):
            raise CredentialError(code=REPLAYED, message="credential was already used")

        return VerifiedCredential.from_claims(claims, kid=kid, payload=payload)
