"""The claim set of a callgate invocation credential, declared once for both halves.

The issuer (:mod:`callgate.credentials.issuer`) turns a :class:`Grant` into
:class:`CredentialClaims` and writes them with :meth:`CredentialClaims.to_payload`; the verifier
(:mod:`callgate.credentials.verifier`) reads them back with :meth:`CredentialClaims.from_payload`
and returns them as a :class:`~callgate.credentials.verifier.VerifiedCredential` (a subclass).
The wire constants (``alg``, ``typ``, the RFC 9396 ``authorization_details`` type, lifetimes) and
the refusal codes of :class:`CredentialError` live here too, so there is one definition of the
format. Standard library only: executors import it through the verifier.

Payload (JSON object, in this member order)::

    {"iss", "sub", "aud", "tenant", "jti", "iat", "nbf", "exp",
     "authorization_details": [{"type": "callgate_invocation",
                                "tool": {"name", "version"}, "capabilities", "resource",
                                "arguments_digest", "idempotency_key", "deadline",
                                "invocation_id", "attempt_id"}],
     "trace_id"}                                   (omitted when empty)

See ``docs/CREDENTIALS.md`` for the meaning of each claim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, Final, TypedDict

from callgate.base.clock import rfc3339

__all__ = [
    "ALG",
    "ARGUMENTS_MISMATCH",
    "AUTHORIZATION_DETAILS_TYPE",
    "BAD_ALGORITHM",
    "BAD_SIGNATURE",
    "BAD_TYPE",
    "CODES",
    "DIGEST_RE",
    "EXPIRED",
    "HARD_MAX_TTL_S",
    "MALFORMED",
    "MAX_LEEWAY_S",
    "MAX_TOKEN_BYTES",
    "NOT_YET_VALID",
    "REPLAYED",
    "TOKEN_TYPE",
    "UNKNOWN_KID",
    "WRONG_AUDIENCE",
    "WRONG_ISSUER",
    "WRONG_TOOL",
    "AuthorizationDetail",
    "CredentialClaims",
    "CredentialError",
    "Grant",
]

# --------------------------------------------------------------------------------------------
# Wire format

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
"""Longest compact JWS the verifier reads."""

DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}\Z")
"""``arguments_digest``: ``sha256:`` and 64 lowercase hex digits (spec 6.5)."""

# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# Claims


@dataclass(frozen=True, slots=True)
class Grant:
    """What one credential authorizes: one attempt of one invocation, by one executor. These are
    the private claims (``sub``, ``aud``, ``tenant``, ``trace_id`` and the fields of the
    ``authorization_details`` entry); :class:`CredentialClaims` adds the registered ones."""

    invocation_id: str
    attempt_id: str
    tenant: str
    subject: str
    audience: str
    """The executor identity that may present the credential."""
    tool_name: str
    tool_version: str
    capabilities: tuple[str, ...]
    resource: str
    digest: str
    """``sha256:<hex>`` from :func:`callgate.arguments.digest.invocation_digest`."""
    idempotency_key: str
    """May be ``""``."""
    deadline: datetime
    """Aware datetime; the credential never outlives it."""
    trace_id: str = ""
    """W3C trace id; may be ``""`` (then the claim is omitted)."""


class AuthorizationDetail(TypedDict):
    """The single RFC 9396 ``authorization_details`` entry, as on the wire (its fields are those
    of the type ``callgate_invocation``; RFC 9396 section 2 lets a type define its own)."""

    type: str
    tool: dict[str, str]
    """``{"name": ..., "version": ...}``."""
    capabilities: list[str]
    resource: str
    arguments_digest: str
    idempotency_key: str
    deadline: str
    """RFC 3339, UTC."""
    invocation_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CredentialClaims(Grant):
    """Every claim of a credential: the :class:`Grant` and the registered JWT claims. Times are
    aware datetimes in whole seconds (the payload carries integer NumericDates)."""

    issuer: str
    """``iss``."""
    jti: str
    """``jti``: 128 random bits, single use."""
    issued_at: datetime
    """``iat``."""
    not_before: datetime
    """``nbf``."""
    expires_at: datetime
    """``exp``."""

    @classmethod
    def from_grant(
        cls,
        grant: Grant,
        *,
        issuer: str,
        jti: str,
        issued_at: datetime,
        not_before: datetime,
        expires_at: datetime,
    ) -> CredentialClaims:
        """The claims of a credential minted for ``grant``."""
        return cls(
            **{f.name: getattr(grant, f.name) for f in fields(Grant)},
            issuer=issuer,
            jti=jti,
            issued_at=issued_at,
            not_before=not_before,
            expires_at=expires_at,
        )

    def authorization_detail(self) -> AuthorizationDetail:
        """The ``authorization_details`` entry of these claims."""
        return {
            "type": AUTHORIZATION_DETAILS_TYPE,
            "tool": {"name": self.tool_name, "version": self.tool_version},
            "capabilities": list(self.capabilities),
            "resource": self.resource,
            "arguments_digest": self.digest,
            "idempotency_key": self.idempotency_key,
            "deadline": rfc3339(self.deadline.astimezone(UTC)),
            "invocation_id": self.invocation_id,
            "attempt_id": self.attempt_id,
        }

    def to_payload(self) -> dict[str, Any]:
        """The JWT payload (the member order of the module docstring; ``trace_id`` only when
        set). Times must be whole seconds."""
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "sub": self.subject,
            "aud": self.audience,
            "tenant": self.tenant,
            "jti": self.jti,
            "iat": _numeric_date(self.issued_at),
            "nbf": _numeric_date(self.not_before),
            "exp": _numeric_date(self.expires_at),
            "authorization_details": [self.authorization_detail()],
        }
        if self.trace_id:
            payload["trace_id"] = self.trace_id
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], *, issuer: str, audience: str) -> CredentialClaims:
        """Read a verified JWS payload: the claims present and well typed, ``iat <= nbf < exp``
        and a lifetime of at most :data:`HARD_MAX_TTL_S`, exactly one ``callgate_invocation``
        entry (``malformed``); then ``iss`` is ``issuer`` (``wrong_issuer``) and ``aud`` is the one
        string ``audience`` (``wrong_audience``). Steps 7 to 9 of the verifier, in that order.

        Raises:
            CredentialError: the first check that fails.
        """
        iss = _require_str(payload, "iss")
        aud = payload.get("aud")
        sub = _require_str(payload, "sub")
        tenant = _require_str(payload, "tenant")
        jti = _require_str(payload, "jti")
        iat = _require_int(payload, "iat")
        nbf = _require_int(payload, "nbf")
        exp = _require_int(payload, "exp")
        if not iat <= nbf < exp or exp - iat > HARD_MAX_TTL_S:
            raise CredentialError(
                code=MALFORMED, message=f"iat <= nbf < exp and a lifetime <= {HARD_MAX_TTL_S} s required"
            )
        trace_id = payload.get("trace_id", "")
        if not isinstance(trace_id, str):
            raise CredentialError(code=MALFORMED, message="claim 'trace_id' is not a string")
        entry = _detail_entry(payload)

        if iss != issuer:
            raise CredentialError(code=WRONG_ISSUER, message="iss is not the expected issuer")
        if not isinstance(aud, str):
            raise CredentialError(code=WRONG_AUDIENCE, message="aud must be a single string")
        if aud != audience:
            raise CredentialError(code=WRONG_AUDIENCE, message="aud is not this executor")

        return cls(
            **entry,
            tenant=tenant,
            subject=sub,
            audience=aud,
            trace_id=trace_id,
            issuer=iss,
            jti=jti,
            issued_at=_utc(iat),
            not_before=_utc(nbf),
            expires_at=_utc(exp),
        )


def _numeric_date(dt: datetime) -> int:
    """An aware datetime in whole seconds as a NumericDate."""
    ts = dt.timestamp()
    if not ts.is_integer():
        raise ValueError("credential times must be whole seconds")
    return int(ts)


def _utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


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


def _detail_entry(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the one ``authorization_details`` entry, checked, under the
    :class:`Grant` field names. Raises :class:`CredentialError` (``malformed``)."""
    details = payload.get("authorization_details")
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
        raise CredentialError(code=MALFORMED, message="authorization_details.capabilities must be strings")
    digest = _require_str(entry, "arguments_digest")
    if not DIGEST_RE.match(digest):
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
    return {
        "tool_name": _require_str(tool, "name"),
        "tool_version": _require_str(tool, "version"),
        "capabilities": tuple(caps),
        "resource": _require_str(entry, "resource", empty_ok=True),
        "digest": digest,
        "idempotency_key": _require_str(entry, "idempotency_key", empty_ok=True),
        "deadline": deadline.astimezone(UTC),
        "invocation_id": _require_str(entry, "invocation_id"),
        "attempt_id": _require_str(entry, "attempt_id"),
    }
