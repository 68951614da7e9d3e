"""Executor library: verify a callgate invocation credential offline.

An executor (the process that actually runs a tool) receives, with each invocation, a short-lived
credential minted by the sidecar (:mod:`callgate.credentials.issuer`): an Ed25519-signed JWT bound to one
executor identity (``aud``), one tool ``name@version``, one attempt and the digest of the
canonical normalized arguments. Before it runs anything the executor calls
:meth:`CredentialVerifier.verify` with the token, the tool it is about to run and the arguments it
is about to run them with. Nothing here talks to the network or imports gRPC: the public keys
come from a JWKS mapping (or a callable returning the current one), time from an injected
:class:`~callgate.core.clock.Clock`, and single use of ``jti`` from a :class:`ReplayCache`.

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
from dataclasses import dataclass
from datetime import UTC, datetime
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

from callgate.core.clock import Clock
from callgate.core.errors import RejectedError
from callgate.core.model import JSONValue
from callgate.propose.digest import canonicalize, invocation_digest

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
# Wire format (shared with the issuer, callgate.credentials.issuer)

ALG: Final = "EdDSA"
"""JWS ``alg`` (RFC 8037). Pinned: the only value accepted. See docs/CREDENTIALS.md for why not
the RFC 9864 name ``Ed25519`` (PyJWT and most JOSE libraries of 2026 reject it). The ambiguity
RFC 9864 removes (``EdDSA`` could mean Ed448) is closed here by accepting Ed25519 keys only."""

TOKEN_TYPE: Final = "callgate-invocation+jwt"
"""JWS ``typ`` (explicit typing, RFC 8725 section 3.11): not ``JWT`` and not ``at+jwt``, so the
credential cannot be confused with an OAuth access token or an ID token and vice versa."""

AUTHORIZATION_DETAILS_TYPE: Final = "callgate_invocation"
"""``type`` of the single RFC 9396 ``authorization_details`` entry."""

HARD_MAX_TTL_S: Final = 300
"""No credential lives longer than this (``exp - iat``); the issuer caps, the verifier refuses."""

MAX_LEEWAY_S: Final = 30
"""Upper bound of the verifier's clock-skew leeway."""

MAX_TOKEN_BYTES: Final = 8192

# Refusal codes (stable strings; the sidecar maps them to ErrorCode.CREDENTIAL_INVALID with
# metadata.reason = code).
MALFORMED: Final = "malformed"
BAD_ALGORITHM: Final = "bad_algorithm"
UNKNOWN_KID: Final = "unknown_kid"
BAD_SIGNATURE: Final = "bad_signature"
BAD_TYPE: Final = "bad_type"
WRONG_ISSUER: Final = "wrong_issuer"
WRONG_AUDIENCE: Final = "wrong_audience"
EXPIRED: Final = "expired"
NOT_YET_VALID: Final = "not_yet_valid"
WRONG_TOOL: Final = "wrong_tool"
ARGUMENTS_MISMATCH: Final = "arguments_mismatch"
REPLAYED: Final = "replayed"

CODES: Final = frozenset(
    {
        MALFORMED,
        BAD_ALGORITHM,
        UNKNOWN_KID,
        BAD_SIGNATURE,
        BAD_TYPE,
        WRONG_ISSUER,
        WRONG_AUDIENCE,
        EXPIRED,
        NOT_YET_VALID,
        WRONG_TOOL,
        ARGUMENTS_MISMATCH,
        REPLAYED,
    }
)


class CredentialError(Exception):
    """A credential was refused. ``code`` is one of :data:`CODES`.

    All data is keyword-only; ``message`` is safe to log and to return: it never contains the
    token, claim values chosen by a caller, or argument values.
    """

    def __init__(self, *, code: str, message: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown credential error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}\Z")
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


@dataclass(frozen=True, slots=True)
class VerifiedCredential:
    """A credential that passed every check. Times are aware UTC datetimes."""

    issuer: str
    audience: str
    subject: str
    tenant: str
    jti: str
    kid: str
    issued_at: datetime
    not_before: datetime
    expires_at: datetime
    invocation_id: str
    attempt_id: str
    tool_name: str
    tool_version: str
    capabilities: tuple[str, ...]
    resource: str
    digest: str
    """``sha256:<hex>``: the invocation digest of spec 6.5 the arguments were checked against."""
    idempotency_key: str
    deadline: datetime
    """The invocation deadline: run the tool with at most this much time."""
    trace_id: str
    claims: Mapping[str, Any]
    """All verified claims (read-only view)."""


@dataclass(frozen=True, slots=True)
class _Detail:
    tool_name: str
    tool_version: str
    capabilities: tuple[str, ...]
    resource: str
    digest: str
    idempotency_key: str
    deadline: datetime
    invocation_id: str
    attempt_id: str


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


def _require_str(claims: Mapping[str, Any], name: str, *, empty_ok: bool = False) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or (not value and not empty_ok):
        raise CredentialError(code=MALFORMED, message=f"claim {name!r} missing or not a string")
    return value


def _require_int(claims: Mapping[str, Any], name: str) -> int:
    value = claims.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CredentialError(code=MALFORMED, message=f"claim {name!r} missing or not an integer NumericDate")
    return value


def _utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


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

        # 7. claims
        claims = _json_object(obj.payload or b"", "payload")
        iss = _require_str(claims, "iss")
        aud = claims.get("aud")
        sub = _require_str(claims, "sub")
        tenant = _require_str(claims, "tenant")
        jti = _require_str(claims, "jti")
        iat = _require_int(claims, "iat")
        nbf = _require_int(claims, "nbf")
        exp = _require_int(claims, "exp")
        if not iat <= nbf < exp or exp - iat > HARD_MAX_TTL_S:
            raise CredentialError(
                code=MALFORMED, message=f"iat <= nbf < exp and a lifetime <= {HARD_MAX_TTL_S} s required"
            )
        trace_id = claims.get("trace_id", "")
        if not isinstance(trace_id, str):
            raise CredentialError(code=MALFORMED, message="claim 'trace_id' is not a string")
        detail = self._detail(claims)

        # 8-9. who
        if iss != self._issuer:
            raise CredentialError(code=WRONG_ISSUER, message="iss is not the expected issuer")
        if not isinstance(aud, str):
            raise CredentialError(code=WRONG_AUDIENCE, message="aud must be a single string")
        if aud != expected_aud:
            raise CredentialError(code=WRONG_AUDIENCE, message="aud is not this executor")

        # 10-11. when
        now = self._clock.now().timestamp()
        if now >= exp + self._leeway:
            raise CredentialError(code=EXPIRED, message="credential has expired")
        if now + self._leeway < nbf or now + self._leeway < iat:
            raise CredentialError(code=NOT_YET_VALID, message="credential is not valid yet")

        # 12. what
        if detail.tool_name != tool_name or detail.tool_version != tool_version:
            raise CredentialError(code=WRONG_TOOL, message="credential is for another tool or version")

        # 13. with which arguments
        token_digest = detail.digest
        if expected_digest is not None:
            recomputed = expected_digest
        else:
            try:
                canonical = (
                    canonical_arguments if canonical_arguments is not None else canonicalize(arguments)
                )
                recomputed = invocation_digest(tenant, tool_name, tool_version, canonical)
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

        if _utc(exp) > detail.deadline:
            raise CredentialError(code=MALFORMED, message="exp is after the invocation deadline")

        # 14. once
        if not self._replay.first_use(jti, keep_until=float(exp + self._leeway), now=now):
            raise CredentialError(code=REPLAYED, message="credential was already used")

        return VerifiedCredential(
            issuer=iss,
            audience=aud,
            subject=sub,
            tenant=tenant,
            jti=jti,
            kid=kid,
            issued_at=_utc(iat),
            not_before=_utc(nbf),
            expires_at=_utc(exp),
            invocation_id=detail.invocation_id,
            attempt_id=detail.attempt_id,
            tool_name=detail.tool_name,
            tool_version=detail.tool_version,
            capabilities=detail.capabilities,
            resource=detail.resource,
            digest=token_digest,
            idempotency_key=detail.idempotency_key,
            deadline=detail.deadline,
            trace_id=trace_id,
            claims=MappingProxyType(claims),
        )

    @staticmethod
    def _detail(claims: Mapping[str, Any]) -> _Detail:
        details = claims.get("authorization_details")
        if not isinstance(details, list) or len(details) != 1 or not isinstance(details[0], dict):
            raise CredentialError(code=MALFORMED, message="authorization_details must hold exactly one entry")
        entry: dict[str, Any] = details[0]
        if entry.get("type") != AUTHORIZATION_DETAILS_TYPE:
            raise CredentialError(
                code=MALFORMED, message=f"authorization_details type must be {AUTHORIZATION_DETAILS_TYPE}"
            )
        tool = entry.get("tool")
        if not isinstance(tool, dict):
            raise CredentialError(code=MALFORMED, message="authorization_details.tool missing")
        caps = entry.get("capabilities")
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise CredentialError(
                code=MALFORMED, message="authorization_details.capabilities must be strings"
            )
        digest = _require_str(entry, "arguments_digest")
        if not _DIGEST_RE.match(digest):
            raise CredentialError(
                code=MALFORMED, message="authorization_details.arguments_digest is not sha256:<hex>"
            )
        deadline_text = _require_str(entry, "deadline")
        try:
            deadline = datetime.fromisoformat(deadline_text)
        except ValueError:
            raise CredentialError(
                code=MALFORMED, message="authorization_details.deadline is not RFC 3339"
            ) from None
        if deadline.tzinfo is None:
            raise CredentialError(code=MALFORMED, message="authorization_details.deadline has no offset")
        return _Detail(
            tool_name=_require_str(tool, "name"),
            tool_version=_require_str(tool, "version"),
            capabilities=tuple(caps),
            resource=_require_str(entry, "resource", empty_ok=True),
            digest=digest,
            idempotency_key=_require_str(entry, "idempotency_key", empty_ok=True),
            deadline=deadline.astimezone(UTC),
            invocation_id=_require_str(entry, "invocation_id"),
            attempt_id=_require_str(entry, "attempt_id"),
        )
