"""Issuer side of scoped invocation credentials: the Ed25519 key ring and minting.

A credential is a compact JWS (``alg`` ``EdDSA``, ``typ`` ``callgate-invocation+jwt``, ``kid``
the RFC 7638 thumbprint) over claims binding one executor (``aud``), one tenant and subject, one
tool ``name@version``, one attempt, the invocation digest of spec 6.5 and the deadline, for at
most 300 s. Executors verify it offline with :mod:`callgate.credentials.verifier`; the claims and
the wire format constants live in :mod:`callgate.credentials.claims`, so both sides share one
definition. See ``docs/CREDENTIALS.md``.

Keys rotate on a schedule: the JWKS always publishes ``next`` (so verifiers learn it a whole
rotation interval before it signs), ``current`` (signs) and ``previous`` (kept until every
credential it signed has expired, ``exp`` + the largest leeway).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jws
from joserfc.jwk import OKPKey

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import CallgateError, ErrorCode, LoadError, config_invalid
from callgate.credentials.claims import (
    ALG,
    DIGEST_RE,
    HARD_MAX_TTL_S,
    MAX_LEEWAY_S,
    TOKEN_TYPE,
    CredentialClaims,
    Grant,
)
from callgate.credentials.verifier import JWS_REGISTRY

__all__ = [
    "CREDENTIAL_DEADLINE_PASSED",
    "DEFAULT_ROTATION_INTERVAL",
    "RETENTION",
    "CredentialIssuer",
    "CredentialMintError",
    "Grant",
    "KeyInfo",
    "KeyRing",
    "KeyState",
    "MintedCredential",
]

CREDENTIAL_DEADLINE_PASSED: Final = "credential_deadline_passed"
"""Reason (``metadata.reason``) of a refused mint: the invocation deadline has passed, or is
less than a second away (no credential with a whole second of life fits before it)."""

DEFAULT_ROTATION_INTERVAL: Final = timedelta(hours=1)

RETENTION: Final = timedelta(seconds=HARD_MAX_TTL_S + MAX_LEEWAY_S)
"""How long a key stays published after it stopped signing: the longest lifetime of a
credential plus the largest verifier leeway. After that nothing it signed can verify."""

_KID_RE: Final = re.compile(r"[A-Za-z0-9_-]{43}\Z")
_STATE_FILE: Final = "keyring.json"
_STATE_FORMAT: Final = "callgate-keyring/1"


def _error_code(*candidates: str) -> ErrorCode:
    """The first of ``candidates`` that is an :class:`ErrorCode` value (codes are owned by
    ``callgate.base.errors``; this keeps the module importable while they are being added)."""
    for value in candidates:
        try:
            return ErrorCode(value)
        except ValueError:
            continue
    return ErrorCode.INTERNAL


class CredentialMintError(CallgateError):
    """A credential cannot be minted for this grant (``reason`` says why)."""

    def __init__(self, *, reason: str, message: str) -> None:
        super().__init__(
            code=_error_code(reason, "deadline_exceeded"), message=message, metadata={"reason": reason}
        )
        self.reason = reason


# --------------------------------------------------------------------------------------------
# Keys


class KeyState(str, Enum):
    NEXT = "next"
    """Published, not yet signing."""
    CURRENT = "current"
    """Signs new credentials."""
    PREVIOUS = "previous"
    """No longer signs; published until ``retired_at + RETENTION``."""


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """Public facts about one key of the ring (never the private key)."""

    kid: str
    """RFC 7638 JWK thumbprint (SHA-256, base64url)."""
    state: KeyState
    created_at: datetime
    activated_at: datetime | None = None
    """When it became ``current``."""
    retired_at: datetime | None = None
    """When it stopped signing (became ``previous``)."""

    @property
    def publish_until(self) -> datetime | None:
        """For a previous key: the instant after which nothing it signed can verify."""
        return None if self.retired_at is None else self.retired_at + RETENTION


@dataclass(frozen=True, slots=True)
class _Entry:
    info: KeyInfo
    key: OKPKey
    """Private OKP key (joserfc)."""


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    return now.astimezone(UTC)


def _entry(private: Ed25519PrivateKey, state: KeyState, created_at: datetime) -> _Entry:
    key = OKPKey.import_key(private)
    return _Entry(KeyInfo(kid=key.thumbprint(), state=state, created_at=created_at), key)


def _new_entry(state: KeyState, now: datetime) -> _Entry:
    return _entry(Ed25519PrivateKey.generate(), state, now)


def _public_jwk(entry: _Entry) -> dict[str, Any]:
    public = entry.key.as_dict(private=False)
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": public["x"],
        "kid": entry.info.kid,
        "alg": ALG,
        "use": "sig",
    }


def _pem(entry: _Entry) -> bytes:
    private = entry.key.private_key
    assert isinstance(private, Ed25519PrivateKey)
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_pem(pem: bytes, password: bytes | None, source: str) -> Ed25519PrivateKey:
    try:
        private = serialization.load_pem_private_key(pem, password=password)
    except (ValueError, TypeError) as exc:
        raise config_invalid("not a readable PEM private key", source=source) from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise config_invalid("credential key must be Ed25519", source=source)
    return private


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` atomically to ``path`` with mode 0600 (temp file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _time(value: Any, source: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise config_invalid("key times must be RFC 3339 strings", source=source)
    try:
        return _aware(datetime.fromisoformat(value))
    except ValueError as exc:
        raise config_invalid("bad RFC 3339 time in key ring state", source=source) from exc


class KeyRing:
    """Ed25519 signing keys with states ``next``/``current``/``previous``. Thread-safe.

    Args:
        now: the time of creation (a ring generated or loaded now).
        key_dir: if given, keys are loaded from and saved to this directory (one PKCS#8 PEM per
            key, ``<kid>.pem``, and ``keyring.json`` with the states; all 0600, the directory
            0700), so a restart keeps the ring and in-flight credentials stay verifiable. The
            first start creates it. Without it the ring lives in memory only.
        rotation_interval: :meth:`maybe_rotate` rotates once the current key has signed this
            long. At least :data:`RETENTION` (330 s), so that the JWKS holds 3 keys in steady
            state; executors must refresh their JWKS at least this often.

    Only one process may own a ``key_dir`` (there is no cross-process lock).
    """

    def __init__(
        self,
        now: datetime,
        *,
        key_dir: str | os.PathLike[str] | None = None,
        rotation_interval: timedelta = DEFAULT_ROTATION_INTERVAL,
    ) -> None:
        now = _aware(now)
        if rotation_interval < RETENTION:
            raise ValueError(f"rotation_interval must be at least {RETENTION.total_seconds():.0f} s")
        self._lock = threading.RLock()
        self._interval: timedelta | None = rotation_interval
        self._dir = Path(key_dir) if key_dir is not None else None
        self._next: _Entry | None
        self._current: _Entry
        self._previous: tuple[_Entry, ...]
        if self._dir is not None and (self._dir / _STATE_FILE).exists():
            self._load()
            return
        self._next = _new_entry(KeyState.NEXT, now)
        self._current = self._activate(_new_entry(KeyState.CURRENT, now), now)
        self._previous = ()
        self._publish()
        if self._dir is not None:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._save()

    @classmethod
    def from_private_pem(
        cls,
        current: bytes | str,
        *,
        now: datetime,
        password: bytes | None = None,
        next_pem: bytes | str | None = None,
        previous_pems: Sequence[bytes | str] = (),
    ) -> KeyRing:
        """A static ring from PEM keys, e.g. a mounted Kubernetes Secret (``tls.key``-style
        PKCS#8 Ed25519). It never rotates by itself (:meth:`rotate` raises): rotate by updating
        the Secret (old current as a previous key, the published next as current) and reloading.
        ``previous_pems`` keep credentials signed before such an update verifiable."""
        now = _aware(now)

        def load(pem: bytes | str, state: KeyState, what: str) -> _Entry:
            data = pem.encode("ascii") if isinstance(pem, str) else pem
            return _entry(_load_pem(data, password, what), state, now)

        ring = cls.__new__(cls)
        ring._lock = threading.RLock()
        ring._interval = None
        ring._dir = None
        ring._current = ring._activate(load(current, KeyState.CURRENT, "current key"), now)
        ring._next = load(next_pem, KeyState.NEXT, "next key") if next_pem is not None else None
        # retired_at stays None: the Secret, not the clock, decides how long they are published
        ring._previous = tuple(
            load(p, KeyState.PREVIOUS, f"previous key {i}") for i, p in enumerate(previous_pems)
        )
        kids = [e.info.kid for e in ring._entries()]
        if len(set(kids)) != len(kids):
            raise config_invalid("the same key appears twice", source="credential keys")
        ring._publish()
        return ring

    # -- queries

    @property
    def rotation_interval(self) -> timedelta | None:
        """``None`` for a static ring (:meth:`from_private_pem`)."""
        return self._interval

    def current_kid(self) -> str:
        with self._lock:
            return self._current.info.kid

    def keys(self) -> tuple[KeyInfo, ...]:
        """Every key of the ring: next (if any), current, previous (newest first)."""
        with self._lock:
            return tuple(e.info for e in self._entries())

    def jwks(self) -> dict[str, Any]:
        """The public JWK Set (``{"keys": [...]}``): next, current and previous keys with
        ``kty``, ``crv``, ``x``, ``kid``, ``alg`` (``EdDSA``) and ``use`` (``sig``). Never
        private material. A fresh dict each call."""
        with self._lock:
            published = self._published
        return {"keys": [dict(k) for k in published]}

    def signing_key(self) -> tuple[str, OKPKey]:
        """``(kid, private key)`` of the current key."""
        with self._lock:
            return self._current.info.kid, self._current.key

    # -- rotation

    def rotate(self, now: datetime) -> KeyInfo:
        """next -> current, current -> previous, a new next. Previous keys whose credentials can
        no longer verify are dropped; younger ones are kept (so two quick rotations publish
        more than one previous key until the older one's retention ends). Returns the new
        current key."""
        now = _aware(now)
        with self._lock:
            if self._interval is None:
                raise ValueError("a ring from PEM keys rotates by replacing its keys, not by rotate()")
            assert self._next is not None
            retired = _Entry(
                replace(self._current.info, state=KeyState.PREVIOUS, retired_at=now), self._current.key
            )
            self._current = self._activate(self._next, now)
            self._next = _new_entry(KeyState.NEXT, now)
            self._previous = (retired, *self._previous)
            self._prune(now)
            self._publish()
            if self._dir is not None:
                self._save()
            return self._current.info

    def maybe_rotate(self, now: datetime) -> bool:
        """Rotate if the current key has signed for ``rotation_interval`` (once, however long
        ago that was), and drop previous keys past their retention. Cheap when nothing is due:
        call it before every mint or from a timer. Returns whether it rotated."""
        now = _aware(now)
        with self._lock:
            activated = self._current.info.activated_at
            if self._interval is not None and activated is not None and now - activated >= self._interval:
                self.rotate(now)
                return True
            if self._previous and self._prune(now):
                self._publish()
                if self._dir is not None:
                    self._save()
        return False

    # -- internals

    @staticmethod
    def _activate(entry: _Entry, now: datetime) -> _Entry:
        return _Entry(replace(entry.info, state=KeyState.CURRENT, activated_at=now), entry.key)

    def _entries(self) -> list[_Entry]:
        head = [self._next] if self._next is not None else []
        return [*head, self._current, *self._previous]

    def _prune(self, now: datetime) -> bool:
        kept = tuple(e for e in self._previous if e.info.publish_until is None or e.info.publish_until > now)
        changed = len(kept) != len(self._previous)
        self._previous = kept
        return changed

    def _publish(self) -> None:
        order = [self._current, *([self._next] if self._next is not None else []), *self._previous]
        self._published: tuple[dict[str, Any], ...] = tuple(_public_jwk(e) for e in order)

    def _save(self) -> None:
        assert self._dir is not None
        entries = self._entries()
        for e in entries:
            path = self._dir / f"{e.info.kid}.pem"
            if not path.exists():
                _write_private(path, _pem(e))
        state = {
            "format": _STATE_FORMAT,
            "keys": [
                {
                    "kid": e.info.kid,
                    "state": e.info.state.value,
                    "created_at": rfc3339(e.info.created_at),
                    "activated_at": rfc3339(e.info.activated_at) if e.info.activated_at else None,
                    "retired_at": rfc3339(e.info.retired_at) if e.info.retired_at else None,
                }
                for e in entries
            ],
        }
        _write_private(self._dir / _STATE_FILE, json.dumps(state, indent=2).encode("utf-8") + b"\n")
        live = {f"{e.info.kid}.pem" for e in entries}
        for path in self._dir.glob("*.pem"):
            if path.name not in live and _KID_RE.match(path.stem):
                path.unlink(missing_ok=True)

    def _load(self) -> None:
        assert self._dir is not None
        state_path = self._dir / _STATE_FILE
        source = str(state_path)

        def bad(message: str, where: str = source) -> LoadError:
            return config_invalid(message, source=where)

        _check_private_mode(state_path)
        try:
            state = json.loads(state_path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise bad("key ring state is not readable JSON") from exc
        if (
            not isinstance(state, dict)
            or state.get("format") != _STATE_FORMAT
            or not isinstance(state.get("keys"), list)
        ):
            raise bad(f"key ring state must be {_STATE_FORMAT}")
        nxt: list[_Entry] = []
        cur: list[_Entry] = []
        prev: list[_Entry] = []
        for item in state["keys"]:
            if not isinstance(item, dict):
                raise bad("key ring entry is not an object")
            kid = item.get("kid")
            if not isinstance(kid, str) or not _KID_RE.match(kid):
                raise bad("key ring entry has no valid kid")
            try:
                key_state = KeyState(item.get("state"))
            except ValueError:
                raise bad("key ring entry has an unknown state") from None
            pem_path = self._dir / f"{kid}.pem"
            _check_private_mode(pem_path)
            try:
                pem = pem_path.read_bytes()
            except OSError as exc:
                raise bad("key file is missing or unreadable", str(pem_path)) from exc
            created = _time(item.get("created_at"), source)
            if created is None:
                raise bad("key ring entry has no created_at")
            entry = _entry(_load_pem(pem, None, str(pem_path)), key_state, created)
            if entry.info.kid != kid:
                raise bad("key file does not match its kid (RFC 7638 thumbprint)", str(pem_path))
            info = replace(
                entry.info,
                activated_at=_time(item.get("activated_at"), source),
                retired_at=_time(item.get("retired_at"), source),
            )
            {KeyState.NEXT: nxt, KeyState.CURRENT: cur, KeyState.PREVIOUS: prev}[key_state].append(
                _Entry(info, entry.key)
            )
        if (
            len(cur) != 1
            or len(nxt) != 1
            or any(e.info.retired_at is None for e in prev)
            or cur[0].info.activated_at is None
        ):
            raise bad("key ring state needs one next, one current (activated) and retired previous keys")
        self._next, self._current, self._previous = nxt[0], cur[0], tuple(prev)
        self._publish()


def _check_private_mode(path: Path) -> None:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise config_invalid("key ring file is missing", source=str(path)) from exc
    if not stat.S_ISREG(mode) or mode & 0o077:
        raise config_invalid(
            "key ring file must be a regular file readable by its owner only (0600)", source=str(path)
        )


# --------------------------------------------------------------------------------------------
# Minting


@dataclass(frozen=True, slots=True)
class MintedCredential:
    """A signed credential: the compact JWS and the facts the sidecar records about it."""

    token: str
    jti: str
    expires_at: datetime
    kid: str


def _check_grant(grant: Grant) -> None:
    for name in ("invocation_id", "attempt_id", "tenant", "subject", "audience", "tool_name", "tool_version"):
        value = getattr(grant, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"grant.{name} must be a non-empty string")
    if "@" in grant.tool_name or "\x00" in grant.tool_name + grant.tool_version + grant.tenant:
        raise ValueError("tool name must not contain '@'; tenant, name and version no NUL (spec 6.5 digest)")
    for name in ("resource", "idempotency_key", "trace_id"):
        if not isinstance(getattr(grant, name), str):
            raise ValueError(f"grant.{name} must be a string")
    if not isinstance(grant.capabilities, tuple) or not all(
        isinstance(c, str) and c for c in grant.capabilities
    ):
        raise ValueError("grant.capabilities must be a tuple of non-empty strings")
    if not isinstance(grant.digest, str) or not DIGEST_RE.match(grant.digest):
        raise ValueError("grant.digest must be sha256:<64 lowercase hex>")
    if not isinstance(grant.deadline, datetime) or grant.deadline.tzinfo is None:
        raise ValueError("grant.deadline must be an aware datetime")


class CredentialIssuer:
    """Mints credentials signed by the key ring's current key.

    Args:
        keyring: the signing keys; :meth:`KeyRing.maybe_rotate` is called before each mint.
        issuer: ``iss`` (e.g. ``callgate:<sidecar id>``), what executors are configured to expect.
        clock: time source.
        default_ttl_s: lifetime when ``mint`` is given none (60 s).
        max_ttl_s: cap on any lifetime, at most 300 s.
    """

    def __init__(
        self,
        keyring: KeyRing,
        issuer: str,
        clock: Clock,
        default_ttl_s: int = 60,
        max_ttl_s: int = HARD_MAX_TTL_S,
    ) -> None:
        if not issuer:
            raise ValueError("issuer must be non-empty")
        if not 1 <= max_ttl_s <= HARD_MAX_TTL_S:
            raise ValueError(f"max_ttl_s must be in 1..{HARD_MAX_TTL_S}")
        if not 1 <= default_ttl_s <= max_ttl_s:
            raise ValueError("default_ttl_s must be in 1..max_ttl_s")
        self._keyring = keyring
        self._issuer = issuer
        self._clock = clock
        self._default_ttl = default_ttl_s
        self._max_ttl = max_ttl_s

    @property
    def issuer(self) -> str:
        return self._issuer

    def mint(self, grant: Grant, ttl_s: int | None = None) -> MintedCredential:
        """Sign a credential for ``grant``.

        ``exp = min(now + ttl, now + max_ttl, grant.deadline)`` in whole seconds (rounded down,
        so never past the deadline); ``iat = nbf = now`` (rounded down).

        Raises:
            CredentialMintError: the deadline has passed or is less than a second away
                (``reason`` ``credential_deadline_passed``).
            ValueError: an ill-formed grant or ``ttl_s`` < 1 (programming errors).
        """
        _check_grant(grant)
        ttl = self._default_ttl if ttl_s is None else ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
            raise ValueError("ttl_s must be a positive integer")
        ttl = min(ttl, self._max_ttl)
        now = _aware(self._clock.now())
        self._keyring.maybe_rotate(now)
        deadline = grant.deadline.astimezone(UTC)
        iat = math.floor(now.timestamp())
        exp = math.floor(min(now + timedelta(seconds=ttl), deadline).timestamp())
        if exp <= iat:
            raise CredentialMintError(
                reason=CREDENTIAL_DEADLINE_PASSED,
                message="the invocation deadline has passed; no credential is issued",
            )
        kid, key = self._keyring.signing_key()
        jti = secrets.token_urlsafe(16)
        at = datetime.fromtimestamp(iat, UTC)
        claims = CredentialClaims.from_grant(
            grant,
            issuer=self._issuer,
            jti=jti,
            issued_at=at,
            not_before=at,
            expires_at=datetime.fromtimestamp(exp, UTC),
        )
        payload = json.dumps(claims.to_payload(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        header = {"alg": ALG, "typ": TOKEN_TYPE, "kid": kid}
        token = jws.serialize_compact(header, payload, key, registry=JWS_REGISTRY)
        return MintedCredential(token=token, jti=jti, expires_at=claims.expires_at, kid=kid)
