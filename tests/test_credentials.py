"""Scoped invocation credentials: minting (callgate.credentials.issuer) and offline verification
(callgate.credentials.verifier), with real Ed25519 keys and a FixedClock.

Done when: tampered, expired, wrong audience, wrong tool, other arguments, replayed ``jti`` and
unknown ``kid`` are all refused, and rotation keeps in-flight credentials valid until they expire.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.base.clock import FixedClock
from callgate.base.errors import CallgateError, LoadError
from callgate.credentials.claims import CredentialClaims
from callgate.credentials.issuer import (
    CREDENTIAL_DEADLINE_PASSED,
    RETENTION,
    CredentialIssuer,
    CredentialMintError,
    Grant,
    KeyRing,
    KeyState,
)
from callgate.credentials.verifier import (
    CODES,
    CredentialError,
    CredentialVerifier,
    InMemoryReplayCache,
)

ROOT = Path(__file__).resolve().parents[1]

T0 = datetime(2026, 7, 19, 6, 0, 0, tzinfo=UTC)
ISSUER = "callgate:sidecar-1"
EXECUTOR = "spiffe://acme/executor/weather"
ARGS = {"city": "Shanghai", "date": "2026-07-20", "units": {"temp": "C", "wind": "m/s"}}
SECRET_ARG = "hunter2-do-not-leak"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def digest_of(args: Any, tenant: str = "acme") -> str:
    return invocation_digest(tenant, "weather.get", "v1", canonicalize(args))


def make_grant(clock: FixedClock, **changes: Any) -> Grant:
    g = Grant(
        invocation_id="inv-1",
        attempt_id="att-1",
        tenant="acme",
        subject="alice",
        audience=EXECUTOR,
        tool_name="weather.get",
        tool_version="v1",
        capabilities=("weather.read",),
        resource="city/Shanghai",
        digest=digest_of(ARGS),
        idempotency_key="idem-1",
        deadline=clock.now() + timedelta(minutes=10),
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    )
    return replace(g, **changes)


@dataclass
class World:
    clock: FixedClock
    ring: KeyRing
    issuer: CredentialIssuer
    verifier: CredentialVerifier

    def mint(self, **changes: Any) -> str:
        return self.issuer.mint(make_grant(self.clock, **changes)).token

    def verify(self, token: str, **kw: Any) -> Any:
        kw.setdefault("tool_name", "weather.get")
        kw.setdefault("tool_version", "v1")
        if not {"arguments", "canonical_arguments", "expected_digest"} & kw.keys():
            kw["arguments"] = ARGS
        return self.verifier.verify(token, **kw)

    def new_verifier(self, **kw: Any) -> CredentialVerifier:
        kw.setdefault("issuer", ISSUER)
        kw.setdefault("audience", EXECUTOR)
        kw.setdefault("clock", self.clock)
        return CredentialVerifier(kw.pop("jwks", self.ring.jwks), **kw)


@pytest.fixture
def world() -> Iterator[World]:
    clock = FixedClock(T0)
    ring = KeyRing(clock.now())
    issuer = CredentialIssuer(ring, ISSUER, clock)
    verifier = CredentialVerifier(ring.jwks, issuer=ISSUER, audience=EXECUTOR, clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. joserfc's per-call RFC 9864 SecurityWarning
        yield World(clock, ring, issuer, verifier)


def split(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    h, p, s = token.split(".")
    pad = lambda x: x + "=" * (-len(x) % 4)  # noqa: E731
    return json.loads(base64.urlsafe_b64decode(pad(h))), json.loads(base64.urlsafe_b64decode(pad(p))), s


def private_key(ring: KeyRing) -> Ed25519PrivateKey:
    key = ring.signing_key()[1].private_key
    assert isinstance(key, Ed25519PrivateKey)
    return key


def forge(
    header: dict[str, Any],
    payload: dict[str, Any] | bytes,
    *,
    ed: Ed25519PrivateKey | None = None,
    hs: bytes | None = None,
) -> str:
    """A compact JWS with whatever header/payload, signed with ``ed`` (Ed25519), ``hs`` (HMAC-SHA256)
    or nothing (empty signature, as for ``alg: none``)."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(raw)}".encode()
    if ed is not None:
        sig = ed.sign(signing_input)
    elif hs is not None:
        sig = hmac.new(hs, signing_input, hashlib.sha256).digest()
    else:
        sig = b""
    return f"{signing_input.decode()}.{b64(sig)}"


def resign(w: World, token: str, *, header: dict[str, Any] | None = None, **claims: Any) -> str:
    """Re-sign a minted token with the ring's real key after changing header fields / claims."""
    h, p, _ = split(token)
    h.update(header or {})
    for k, v in claims.items():
        if v is None:
            p.pop(k, None)
        else:
            p[k] = v
    return forge(h, p, ed=private_key(w.ring))


# --------------------------------------------------------------------------------------------
# Mint + verify


def test_mint_and_verify(world: World) -> None:
    minted = world.issuer.mint(make_grant(world.clock))
    header, claims, _ = split(minted.token)
    assert header == {"alg": "EdDSA", "typ": "callgate-invocation+jwt", "kid": world.ring.current_kid()}
    assert minted.kid == world.ring.current_kid()
    assert claims["iss"] == ISSUER and claims["aud"] == EXECUTOR and claims["sub"] == "alice"
    assert claims["tenant"] == "acme" and claims["jti"] == minted.jti and len(minted.jti) == 22  # 128 bits
    assert claims["iat"] == claims["nbf"] == int(T0.timestamp()) and claims["exp"] == claims["iat"] + 60
    assert claims["authorization_details"] == [
        {
            "type": "callgate_invocation",
            "tool": {"name": "weather.get", "version": "v1"},
            "capabilities": ["weather.read"],
            "resource": "city/Shanghai",
            "arguments_digest": digest_of(ARGS),
            "idempotency_key": "idem-1",
            "deadline": "2026-07-19T06:10:00Z",
            "invocation_id": "inv-1",
            "attempt_id": "att-1",
        }
    ]
    assert claims["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"

    v = world.verify(minted.token)
    assert (v.tenant, v.subject, v.audience, v.jti, v.kid) == (
        "acme",
        "alice",
        EXECUTOR,
        minted.jti,
        minted.kid,
    )
    assert (v.tool_name, v.tool_version, v.capabilities, v.resource) == (
        "weather.get",
        "v1",
        ("weather.read",),
        "city/Shanghai",
    )
    assert (v.invocation_id, v.attempt_id, v.idempotency_key) == ("inv-1", "att-1", "idem-1")
    assert v.digest == digest_of(ARGS) and v.expires_at == minted.expires_at == T0 + timedelta(seconds=60)
    assert v.deadline == T0 + timedelta(minutes=10) and v.issued_at == v.not_before == T0
    with pytest.raises(TypeError):
        v.claims["iss"] = "x"  # type: ignore[index]


def test_trace_id_omitted_when_empty(world: World) -> None:
    _, claims, _ = split(world.mint(trace_id=""))
    assert "trace_id" not in claims


def test_one_claims_type_for_both_halves(world: World) -> None:
    """The issuer writes and the verifier returns the same claims type (callgate.credentials.claims)."""
    grant = make_grant(world.clock)
    minted = world.issuer.mint(grant)
    v = world.verify(minted.token)
    assert isinstance(v, CredentialClaims) and isinstance(v, Grant)
    # every Grant field comes back as minted (the deadline in UTC)
    assert {f.name: getattr(v, f.name) for f in fields(Grant)} == {
        f.name: getattr(grant, f.name) for f in fields(Grant)
    }
    # the verified claims write back the payload they were read from
    restored = CredentialClaims.from_grant(
        v, issuer=v.issuer, jti=v.jti, issued_at=v.issued_at, not_before=v.not_before, expires_at=v.expires_at
    )
    assert restored.to_payload() == dict(v.claims) == split(minted.token)[1]
    again = CredentialClaims.from_payload(restored.to_payload(), issuer=ISSUER, audience=EXECUTOR)
    assert again == restored


def test_claims_from_payload_checks_issuer_then_audience(world: World) -> None:
    payload = split(world.mint())[1]
    with pytest.raises(CredentialError) as exc:
        CredentialClaims.from_payload({**payload, "aud": [EXECUTOR]}, issuer="other", audience=EXECUTOR)
    assert exc.value.code == "wrong_issuer"
    with pytest.raises(CredentialError) as exc:
        CredentialClaims.from_payload({**payload, "aud": [EXECUTOR]}, issuer=ISSUER, audience=EXECUTOR)
    assert exc.value.code == "wrong_audience"
    with pytest.raises(CredentialError) as exc:  # shape before who
        CredentialClaims.from_payload({**payload, "jti": 1}, issuer="other", audience="other")
    assert exc.value.code == "malformed"


# --------------------------------------------------------------------------------------------
# Refusals (table-driven): each case builds a token / verifier / call and expects one code


def _tamper_payload(w: World) -> tuple[str, dict[str, Any]]:
    h, p, s = w.mint().split(".")
    claims = split(w.mint())[1]
    claims["aud"] = "spiffe://acme/executor/other"
    return f"{h}.{b64(json.dumps(claims).encode())}.{s}", {"audience": "spiffe://acme/executor/other"}


def _tamper_signature(w: World) -> tuple[str, dict[str, Any]]:
    h, p, s = w.mint().split(".")
    sig = bytearray(base64.urlsafe_b64decode(s + "=="))
    sig[10] ^= 0x01
    return f"{h}.{p}.{b64(bytes(sig))}", {}


def _expired(w: World) -> tuple[str, dict[str, Any]]:
    token = w.mint()
    w.clock.advance(60 + 5)  # exp + leeway: refused (now >= exp + leeway)
    return token, {}


def _not_yet_valid(w: World) -> tuple[str, dict[str, Any]]:
    now = int(T0.timestamp())
    return resign(w, w.mint(), nbf=now + 60, iat=now + 60, exp=now + 120), {}


def _iat_in_future(w: World) -> tuple[str, dict[str, Any]]:
    now = int(T0.timestamp())
    return resign(w, w.mint(), iat=now + 30, nbf=now + 30, exp=now + 90), {}


def _unknown_kid(w: World) -> tuple[str, dict[str, Any]]:
    other = KeyRing(w.clock.now())
    token = CredentialIssuer(other, ISSUER, w.clock).mint(make_grant(w.clock)).token
    return token, {}


def _unknown_kid_header(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), header={"kid": "no-such-key"}), {}


def _no_kid(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    del h["kid"]
    return forge(h, p, ed=private_key(w.ring)), {}


def _alg_none(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    return forge({**h, "alg": "none"}, p), {}


def _alg_none_case(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    return forge({**h, "alg": "nOnE"}, p), {}


def _alg_hs256_public_key(w: World) -> tuple[str, dict[str, Any]]:
    """Algorithm confusion: HMAC keyed with the published public key (raw bytes and JWK text)."""
    h, p, _ = split(w.mint())
    jwk = next(k for k in w.ring.jwks()["keys"] if k["kid"] == h["kid"])
    raw = base64.urlsafe_b64decode(jwk["x"] + "=")
    return forge({**h, "alg": "HS256"}, p, hs=raw), {}


def _alg_hs256_jwk_json(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    jwk = next(k for k in w.ring.jwks()["keys"] if k["kid"] == h["kid"])
    return forge({**h, "alg": "HS256"}, p, hs=json.dumps(jwk).encode()), {}


def _alg_ed25519_name(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), header={"alg": "Ed25519"}), {}


def _alg_missing(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    del h["alg"]
    return forge(h, p, ed=private_key(w.ring)), {}


def _typ_jwt(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), header={"typ": "JWT"}), {}


def _typ_at_jwt(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), header={"typ": "at+jwt"}), {}


def _typ_missing(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    del h["typ"]
    return forge(h, p, ed=private_key(w.ring)), {}


def _embedded_jwk(w: World) -> tuple[str, dict[str, Any]]:
    """An attacker's own key in the header is never used (and the header is refused)."""
    attacker = Ed25519PrivateKey.generate()
    x = attacker.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    h, p, _ = split(w.mint())
    return forge({**h, "jwk": {"kty": "OKP", "crv": "Ed25519", "x": b64(x)}}, p, ed=attacker), {}


def _wrong_audience(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"audience": "spiffe://acme/executor/other"}


def _audience_list(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), aud=[EXECUTOR, "spiffe://acme/executor/other"]), {}


def _wrong_issuer(w: World) -> tuple[str, dict[str, Any]]:
    w.verifier = w.new_verifier(issuer="callgate:sidecar-2")
    return w.mint(), {}


def _wrong_tool_name(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"tool_name": "weather.set"}


def _wrong_tool_version(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"tool_version": "v2"}


def _other_arguments(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"arguments": {**ARGS, "city": "Beijing"}}


def _extra_argument(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"arguments": {**ARGS, "api_key": SECRET_ARG}}


def _other_tenant_same_args(w: World) -> tuple[str, dict[str, Any]]:
    """The token's digest is for tenant acme; a token claiming tenant 'evil' with acme's digest
    (re-signed) does not match the recomputed digest."""
    return resign(w, w.mint(), tenant="evil"), {}


def _non_canonical_bytes(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"canonical_arguments": json.dumps(ARGS, indent=1).encode()}


def _not_canonicalizable(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"arguments": {**ARGS, "n": 2**60}}


def _expected_digest_other(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint(), {"expected_digest": digest_of({**ARGS, "city": "Beijing"})}


def _replayed(w: World) -> tuple[str, dict[str, Any]]:
    token = w.mint()
    w.verify(token)
    return token, {}


def _replayed_with_other_verifier_same_cache(w: World) -> tuple[str, dict[str, Any]]:
    cache = InMemoryReplayCache()
    first = w.new_verifier(replay_cache=cache)
    token = w.mint()
    first.verify(token, tool_name="weather.get", tool_version="v1", arguments=ARGS)
    w.verifier = w.new_verifier(replay_cache=cache)
    return token, {}


def _lifetime_too_long(w: World) -> tuple[str, dict[str, Any]]:
    now = int(T0.timestamp())
    return resign(w, w.mint(), exp=now + 301), {}


def _exp_after_deadline(w: World) -> tuple[str, dict[str, Any]]:
    g = make_grant(w.clock, deadline=T0 + timedelta(seconds=30))
    return resign(w, w.issuer.mint(g).token, exp=int(T0.timestamp()) + 60), {}


def _duplicate_claim(w: World) -> tuple[str, dict[str, Any]]:
    h, p, _ = split(w.mint())
    body = json.dumps(p)[:-1] + ', "aud": "spiffe://acme/executor/other"}'
    return forge(h, body.encode(), ed=private_key(w.ring)), {}


def _float_exp(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), exp=int(T0.timestamp()) + 60.5), {}


def _missing_jti(w: World) -> tuple[str, dict[str, Any]]:
    return resign(w, w.mint(), jti=None), {}


def _two_details(w: World) -> tuple[str, dict[str, Any]]:
    d = split(w.mint())[1]["authorization_details"]
    return resign(w, w.mint(), authorization_details=d * 2), {}


def _detail_type(w: World) -> tuple[str, dict[str, Any]]:
    d = split(w.mint())[1]["authorization_details"]
    return resign(w, w.mint(), authorization_details=[{**d[0], "type": "payment_initiation"}]), {}


def _garbage(w: World) -> tuple[str, dict[str, Any]]:
    return "not a token", {}


def _two_segments(w: World) -> tuple[str, dict[str, Any]]:
    return ".".join(w.mint().split(".")[:2]), {}


def _padded(w: World) -> tuple[str, dict[str, Any]]:
    h, p, s = w.mint().split(".")
    return f"{h}.{p}.{s}==", {}


def _oversized(w: World) -> tuple[str, dict[str, Any]]:
    return w.mint() + "A" * 9000, {}


def _json_serialization(w: World) -> tuple[str, dict[str, Any]]:
    h, p, s = w.mint().split(".")
    return json.dumps({"protected": h, "payload": p, "signature": s}), {}


REFUSALS: list[tuple[str, Callable[[World], tuple[str, dict[str, Any]]], str]] = [
    ("tampered payload", _tamper_payload, "bad_signature"),
    ("tampered signature", _tamper_signature, "bad_signature"),
    ("expired beyond leeway", _expired, "expired"),
    ("nbf in the future", _not_yet_valid, "not_yet_valid"),
    ("iat in the future", _iat_in_future, "not_yet_valid"),
    ("unknown kid (other ring)", _unknown_kid, "unknown_kid"),
    ("unknown kid (header)", _unknown_kid_header, "unknown_kid"),
    ("no kid", _no_kid, "unknown_kid"),
    ("alg none", _alg_none, "bad_algorithm"),
    ("alg nOnE", _alg_none_case, "bad_algorithm"),
    ("alg HS256 keyed with public key bytes", _alg_hs256_public_key, "bad_algorithm"),
    ("alg HS256 keyed with the JWK text", _alg_hs256_jwk_json, "bad_algorithm"),
    ("alg Ed25519 (RFC 9864 name, not pinned)", _alg_ed25519_name, "bad_algorithm"),
    ("alg missing", _alg_missing, "bad_algorithm"),
    ("typ JWT", _typ_jwt, "bad_type"),
    ("typ at+jwt", _typ_at_jwt, "bad_type"),
    ("typ missing", _typ_missing, "bad_type"),
    ("embedded jwk header", _embedded_jwk, "malformed"),
    ("wrong audience", _wrong_audience, "wrong_audience"),
    ("audience list", _audience_list, "wrong_audience"),
    ("wrong issuer", _wrong_issuer, "wrong_issuer"),
    ("wrong tool name", _wrong_tool_name, "wrong_tool"),
    ("wrong tool version", _wrong_tool_version, "wrong_tool"),
    ("other argument value", _other_arguments, "arguments_mismatch"),
    ("extra argument", _extra_argument, "arguments_mismatch"),
    ("other tenant re-signed", _other_tenant_same_args, "arguments_mismatch"),
    ("non-canonical bytes", _non_canonical_bytes, "arguments_mismatch"),
    ("arguments without canonical form", _not_canonicalizable, "arguments_mismatch"),
    ("expected digest differs", _expected_digest_other, "arguments_mismatch"),
    ("replayed jti", _replayed, "replayed"),
    ("replayed jti, shared cache", _replayed_with_other_verifier_same_cache, "replayed"),
    ("lifetime over 300 s", _lifetime_too_long, "malformed"),
    ("exp after deadline", _exp_after_deadline, "malformed"),
    ("duplicate claim", _duplicate_claim, "malformed"),
    ("float exp", _float_exp, "malformed"),
    ("missing jti", _missing_jti, "malformed"),
    ("two authorization_details", _two_details, "malformed"),
    ("other authorization_details type", _detail_type, "malformed"),
    ("garbage", _garbage, "malformed"),
    ("two segments", _two_segments, "malformed"),
    ("base64 padding", _padded, "malformed"),
    ("oversized", _oversized, "malformed"),
    ("JWS JSON serialization", _json_serialization, "malformed"),
]


@pytest.mark.parametrize(("case", "build", "code"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refused(
    world: World, case: str, build: Callable[[World], tuple[str, dict[str, Any]]], code: str
) -> None:
    token, kw = build(world)
    with pytest.raises(CredentialError) as info:
        world.verify(token, **kw)
    err = info.value
    assert err.code == code, (case, err.code, err.message)
    assert err.code in CODES
    text = str(err) + err.message
    assert token not in text and SECRET_ARG not in text and "Shanghai" not in text


def test_every_code_is_exercised() -> None:
    assert {code for _, _, code in REFUSALS} == CODES


def test_refusal_does_not_consume_jti(world: World) -> None:
    token = world.mint()
    for kw in (
        {"tool_name": "weather.set"},
        {"arguments": {"city": "Beijing"}},
        {"audience": "someone-else"},
    ):
        with pytest.raises(CredentialError):
            world.verify(token, **kw)
    world.verify(token)
    with pytest.raises(CredentialError, match="replayed"):
        world.verify(token)


# --------------------------------------------------------------------------------------------
# Accepted variants


def test_within_leeway_accepted(world: World) -> None:
    token = world.mint()
    world.clock.advance(60 + 4.999)
    assert world.verify(token).jti


def test_clock_behind_within_leeway_accepted(world: World) -> None:
    token = world.mint()
    world.clock.advance(-4)  # executor's clock 4 s behind the sidecar's
    assert world.verify(token).jti


def test_same_arguments_other_key_order_accepted(world: World) -> None:
    token = world.mint()
    reordered = {"units": {"wind": "m/s", "temp": "C"}, "date": "2026-07-20", "city": "Shanghai"}
    assert list(reordered) != list(ARGS)
    assert world.verify(token, arguments=reordered).digest == digest_of(ARGS)


@pytest.mark.parametrize(
    "form",
    [
        {"canonical_arguments": canonicalize(ARGS)},
        {"expected_digest": digest_of(ARGS)},
    ],
    ids=["canonical bytes", "expected digest"],
)
def test_other_argument_forms_accepted(world: World, form: dict[str, Any]) -> None:
    assert world.verify(world.mint(), **form).digest == digest_of(ARGS)


def test_typ_media_type_forms_accepted(world: World) -> None:
    for typ in ("application/callgate-invocation+jwt", "Callgate-Invocation+JWT"):
        assert world.verify(resign(world, world.mint(), header={"typ": typ})).jti


def test_audience_override_per_call(world: World) -> None:
    """The sidecar's RedeemSecret: no fixed audience, the presenting executor's identity per call."""
    verifier = world.new_verifier(audience=None)
    token = world.mint()
    with pytest.raises(ValueError):
        verifier.verify(token, tool_name="weather.get", tool_version="v1", expected_digest=digest_of(ARGS))
    v = verifier.verify(
        token, tool_name="weather.get", tool_version="v1", expected_digest=digest_of(ARGS), audience=EXECUTOR
    )
    assert v.attempt_id == "att-1"


def test_static_jwks_mapping(world: World) -> None:
    verifier = world.new_verifier(jwks=json.loads(json.dumps(world.ring.jwks())))
    assert verifier.verify(world.mint(), tool_name="weather.get", tool_version="v1", arguments=ARGS).jti


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"arguments": ARGS, "canonical_arguments": canonicalize(ARGS)},
        {"arguments": ARGS, "expected_digest": "x"},
    ],
    ids=["none", "arguments+canonical", "arguments+digest"],
)
def test_verify_needs_exactly_one_argument_form(world: World, kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        world.verifier.verify(world.mint(), tool_name="weather.get", tool_version="v1", **kw)


@pytest.mark.parametrize("leeway", [-1, 31, 5.5, True])
def test_leeway_is_bounded(world: World, leeway: Any) -> None:
    with pytest.raises(ValueError):
        world.new_verifier(leeway_s=leeway)


def test_jwk_with_other_alg_or_use_is_not_used(world: World) -> None:
    token = world.mint()
    for change in ({"alg": "Ed25519"}, {"use": "enc"}, {"crv": "Ed448"}, {"key_ops": ["sign"]}):
        jwks = {"keys": [{**k, **change} for k in world.ring.jwks()["keys"]]}
        with pytest.raises(CredentialError) as info:
            world.new_verifier(jwks=jwks).verify(
                token, tool_name="weather.get", tool_version="v1", arguments=ARGS
            )
        assert info.value.code == "unknown_kid", change


# --------------------------------------------------------------------------------------------
# Lifetime


def test_ttl_default_cap_and_deadline(world: World) -> None:
    now = int(T0.timestamp())

    def exp(**kw: Any) -> int:
        ttl = kw.pop("ttl_s", None)
        return int(split(world.issuer.mint(make_grant(world.clock, **kw), ttl_s=ttl).token)[1]["exp"])

    assert exp() == now + 60
    assert exp(ttl_s=120) == now + 120
    assert exp(ttl_s=3600) == now + 300  # hard cap
    assert exp(deadline=T0 + timedelta(seconds=30)) == now + 30  # never past the deadline
    assert exp(deadline=T0 + timedelta(seconds=30.9)) == now + 30  # rounded down
    assert exp(ttl_s=3600, deadline=T0 + timedelta(seconds=200)) == now + 200
    with pytest.raises(ValueError):
        world.issuer.mint(make_grant(world.clock), ttl_s=0)


def test_fractional_now_never_past_deadline() -> None:
    clock = FixedClock(T0 + timedelta(seconds=0.9))
    issuer = CredentialIssuer(KeyRing(clock.now()), ISSUER, clock, default_ttl_s=10)
    _, claims, _ = split(issuer.mint(make_grant(clock, deadline=T0 + timedelta(seconds=5.5))).token)
    assert claims["iat"] == int(T0.timestamp()) and claims["exp"] == int(T0.timestamp()) + 5


def test_issuer_limits() -> None:
    clock = FixedClock(T0)
    ring = KeyRing(T0)
    for kw in ({"max_ttl_s": 301}, {"default_ttl_s": 0}, {"default_ttl_s": 120, "max_ttl_s": 60}):
        with pytest.raises(ValueError):
            CredentialIssuer(ring, ISSUER, clock, **kw)


@pytest.mark.parametrize("delta", [-1.0, 0.0, 0.5], ids=["passed", "now", "under a second"])
def test_deadline_passed_refuses_mint(world: World, delta: float) -> None:
    with pytest.raises(CredentialMintError) as info:
        world.issuer.mint(make_grant(world.clock, deadline=T0 + timedelta(seconds=delta)))
    err = info.value
    assert isinstance(err, CallgateError)
    assert err.reason == CREDENTIAL_DEADLINE_PASSED == err.metadata["reason"]
    assert err.code.value in ("credential_deadline_passed", "deadline_exceeded")


@pytest.mark.parametrize(
    "change",
    [
        {"digest": "sha256:abc"},
        {"audience": ""},
        {"deadline": datetime(2026, 7, 19, 7, 0)},
        {"capabilities": ["weather.read"]},
    ],
    ids=["digest", "audience", "naive deadline", "capabilities list"],
)
def test_ill_formed_grant(world: World, change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        world.issuer.mint(make_grant(world.clock, **change))


# --------------------------------------------------------------------------------------------
# Keys, JWKS, rotation


def rfc7638(jwk: dict[str, Any]) -> str:
    required = {k: jwk[k] for k in ("crv", "kty", "x")}
    return b64(hashlib.sha256(json.dumps(required, sort_keys=True, separators=(",", ":")).encode()).digest())


def test_jwks_public_only(world: World) -> None:
    world.ring.rotate(world.clock.now())
    jwks = world.ring.jwks()
    text = json.dumps(jwks)
    assert len(jwks["keys"]) == 3
    for jwk in jwks["keys"]:
        assert set(jwk) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")
        assert jwk["kid"] == rfc7638(jwk)
    assert '"d"' not in text and "PRIVATE" not in text
    jwks["keys"].clear()  # a copy: the ring is unaffected
    assert len(world.ring.jwks()["keys"]) == 3


def test_next_key_is_published_before_it_signs(world: World) -> None:
    infos = {i.state: i for i in world.ring.keys()}
    assert set(infos) == {KeyState.NEXT, KeyState.CURRENT}
    next_kid = infos[KeyState.NEXT].kid
    assert next_kid in {k["kid"] for k in world.ring.jwks()["keys"]}
    world.ring.rotate(world.clock.now())
    assert world.ring.current_kid() == next_kid
    assert split(world.mint())[0]["kid"] == next_kid


def test_rotation_keeps_in_flight_credentials_valid_until_they_expire(world: World) -> None:
    old = world.issuer.mint(make_grant(world.clock), ttl_s=300)
    world.clock.advance(10)
    world.ring.rotate(world.clock.now())  # old key -> previous
    states = {i.kid: i.state for i in world.ring.keys()}
    assert states[old.kid] is KeyState.PREVIOUS and len(world.ring.jwks()["keys"]) == 3
    assert world.verify(world.mint()).kid != old.kid  # new credentials use the new key

    world.clock.advance(100)
    world.ring.rotate(world.clock.now())  # second quick rotation: old key still needed
    kids = [k["kid"] for k in world.ring.jwks()["keys"]]
    assert old.kid in kids and len(kids) == 4

    world.clock.advance(300 - 110 + 4)  # 4 s past exp, within leeway
    assert world.ring.maybe_rotate(world.clock.now()) is False
    assert world.verify(old.token).kid == old.kid  # still valid while it can be

    world.clock.advance(40)  # t=344: past exp + leeway; the old key (retired at t=10) is dropped
    world.ring.maybe_rotate(world.clock.now())
    kids = [k["kid"] for k in world.ring.jwks()["keys"]]
    assert old.kid not in kids and len(kids) == 3  # next, current, previous (retired at t=110)
    with pytest.raises(CredentialError) as info:
        world.new_verifier().verify(old.token, tool_name="weather.get", tool_version="v1", arguments=ARGS)
    assert info.value.code in ("expired", "unknown_kid")


def test_previous_kept_until_retention_then_dropped(world: World) -> None:
    first = world.ring.current_kid()
    world.ring.rotate(world.clock.now())
    world.clock.advance(RETENTION.total_seconds() - 1)
    world.ring.maybe_rotate(world.clock.now())
    assert first in {k["kid"] for k in world.ring.jwks()["keys"]}
    world.clock.advance(1)
    world.ring.maybe_rotate(world.clock.now())
    assert first not in {k["kid"] for k in world.ring.jwks()["keys"]}
    assert [i.state for i in world.ring.keys()] == [KeyState.NEXT, KeyState.CURRENT]


def test_scheduled_rotation(world: World) -> None:
    first = world.ring.current_kid()
    world.clock.advance(3599)
    assert world.ring.maybe_rotate(world.clock.now()) is False
    world.clock.advance(1)
    token = world.mint()  # mint calls maybe_rotate: the hour is up
    assert split(token)[0]["kid"] != first
    assert [i.state for i in world.ring.keys()] == [KeyState.NEXT, KeyState.CURRENT, KeyState.PREVIOUS]
    world.clock.advance(5 * 3600)  # long idle: one rotation, not five
    assert world.ring.maybe_rotate(world.clock.now()) is True
    assert len(world.ring.keys()) == 3


def test_rotation_interval_lower_bound() -> None:
    with pytest.raises(ValueError):
        KeyRing(T0, rotation_interval=timedelta(seconds=60))


def test_unknown_kid_after_previous_dropped(world: World) -> None:
    token = world.mint()
    world.ring.rotate(world.clock.now())
    world.ring.rotate(world.clock.now())
    world.clock.advance(RETENTION.total_seconds() + 1)
    world.ring.maybe_rotate(world.clock.now())
    with pytest.raises(CredentialError) as info:
        world.verify(token)
    assert info.value.code == "unknown_kid"


# --------------------------------------------------------------------------------------------
# Persistence and mounted keys


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_dir_round_trip(tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    clock = FixedClock(T0)
    ring = KeyRing(clock.now(), key_dir=key_dir)
    token = CredentialIssuer(ring, ISSUER, clock).mint(make_grant(clock)).token
    assert mode(key_dir) == 0o700
    files = sorted(p.name for p in key_dir.iterdir())
    assert len(files) == 3 and "keyring.json" in files
    assert all(mode(key_dir / f) == 0o600 for f in files)

    clock.advance(20)
    restarted = KeyRing(clock.now(), key_dir=key_dir)  # restart keeps the ring
    assert restarted.keys() == ring.keys() and restarted.jwks() == ring.jwks()
    verifier = CredentialVerifier(restarted.jwks, issuer=ISSUER, audience=EXECUTOR, clock=clock)
    assert verifier.verify(token, tool_name="weather.get", tool_version="v1", arguments=ARGS).jti

    restarted.rotate(clock.now())
    again = KeyRing(clock.now(), key_dir=key_dir)
    assert again.keys() == restarted.keys() and len(again.jwks()["keys"]) == 3
    pem = sorted(p for p in key_dir.iterdir() if p.suffix == ".pem")
    assert len(pem) == 3 and all(mode(p) == 0o600 for p in pem)

    clock.advance(RETENTION.total_seconds() + 1)
    again.maybe_rotate(clock.now())  # previous dropped: its file removed
    assert len([p for p in key_dir.iterdir() if p.suffix == ".pem"]) == 2
    assert len(KeyRing(clock.now(), key_dir=key_dir).keys()) == 2


def test_key_dir_refuses_open_permissions_and_tampering(tmp_path: Path) -> None:
    KeyRing(T0, key_dir=tmp_path)
    pem = next(p for p in tmp_path.iterdir() if p.suffix == ".pem")
    os.chmod(pem, 0o644)
    with pytest.raises(LoadError, match="0600"):
        KeyRing(T0, key_dir=tmp_path)
    os.chmod(pem, 0o600)
    other = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem.write_bytes(other)
    with pytest.raises(LoadError, match="thumbprint"):
        KeyRing(T0, key_dir=tmp_path)
    (tmp_path / "keyring.json").write_text("{")
    with pytest.raises(LoadError):
        KeyRing(T0, key_dir=tmp_path)


def test_from_private_pem(world: World) -> None:
    def pem(key: Ed25519PrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    old, cur, nxt = (Ed25519PrivateKey.generate() for _ in range(3))
    ring = KeyRing.from_private_pem(pem(cur), now=T0, next_pem=pem(nxt), previous_pems=[pem(old)])
    assert [i.state for i in ring.keys()] == [KeyState.NEXT, KeyState.CURRENT, KeyState.PREVIOUS]
    assert ring.rotation_interval is None and ring.maybe_rotate(T0 + timedelta(days=30)) is False
    with pytest.raises(ValueError):
        ring.rotate(T0)
    token = CredentialIssuer(ring, ISSUER, world.clock).mint(make_grant(world.clock)).token
    verifier = world.new_verifier(jwks=ring.jwks())
    assert (
        verifier.verify(token, tool_name="weather.get", tool_version="v1", arguments=ARGS).kid
        == ring.current_kid()
    )
    # a credential signed with the old key (before the Secret was updated) still verifies
    h, p, _ = split(token)
    old_kid = ring.keys()[2].kid
    old_token = forge({**h, "kid": old_kid}, {**p, "jti": "other"}, ed=old)
    assert (
        verifier.verify(old_token, tool_name="weather.get", tool_version="v1", arguments=ARGS).kid == old_kid
    )

    rsa_pem = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VuBCIEIA==\n-----END PRIVATE KEY-----\n"
    with pytest.raises(LoadError):
        KeyRing.from_private_pem(rsa_pem, now=T0)


# --------------------------------------------------------------------------------------------
# Replay cache


def test_replay_cache_prunes_and_is_atomic() -> None:
    cache = InMemoryReplayCache()
    assert cache.first_use("a", keep_until=100.0, now=0.0)
    assert not cache.first_use("a", keep_until=100.0, now=50.0)
    assert cache.first_use("b", keep_until=200.0, now=50.0)
    assert cache.first_use("c", keep_until=300.0, now=150.0)  # prunes "a"
    assert len(cache) == 2

    results: list[bool] = []
    barrier = threading.Barrier(16)

    def race() -> None:
        barrier.wait()
        results.append(cache.first_use("z", keep_until=1000.0, now=160.0))

    threads = [threading.Thread(target=race) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1


def test_concurrent_verification_single_use(world: World) -> None:
    token = world.mint()
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait()
        try:
            world.verify(token)
            outcomes.append("ok")
        except CredentialError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["replayed"] * 7


# --------------------------------------------------------------------------------------------
# Packaging and interop


def test_executor_library_imports_without_grpc() -> None:
    code = (
        "import sys, callgate.credentials.verifier; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('grpc', 'google', 'cedarpy', 'jsonschema')]; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_executor_library_imports_no_sidecar_modules() -> None:
    """The verifier half loads neither gRPC/protobuf nor the sidecar's config, store, server,
    engine or issuer modules; the package's re-exports are lazy."""
    code = (
        "import sys, callgate.credentials.verifier; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('grpc', 'google', 'cedarpy', 'jsonschema', 'regopy')"
        " or m.startswith(('callgate.config', 'callgate.store', 'callgate.server', 'callgate.policy',"
        " 'callgate.execute', 'callgate.gen', 'callgate.credentials.issuer'))]; "
        "assert not bad, bad; "
        "import callgate.credentials as c; "
        "assert c.CredentialVerifier is callgate.credentials.verifier.CredentialVerifier; "
        "assert c.KeyRing.__module__ == 'callgate.credentials.issuer'; "
        "assert c.Grant is c.CredentialClaims.__mro__[1]; "
        "assert sorted(c.__all__) == sorted(c._HOME)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_pyjwt_interop(world: World) -> None:
    """An executor using PyJWT instead of callgate.credentials.verifier can verify callgate credentials (the
    reason for ``alg: EdDSA``). PyJWT is a dev dependency for exactly this check."""
    import jwt

    token = world.mint()
    header = jwt.get_unverified_header(token)
    assert header["typ"] == "callgate-invocation+jwt"
    world.ring.rotate(world.clock.now())  # next, current and previous all load in PyJWT
    keyset = jwt.PyJWKSet.from_dict(world.ring.jwks())
    assert len(keyset.keys) == 3
    key = keyset[header["kid"]].key
    claims = jwt.decode(
        token,
        key,
        algorithms=["EdDSA"],
        audience=EXECUTOR,
        issuer=ISSUER,
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
    )
    assert claims["authorization_details"][0]["arguments_digest"] == digest_of(ARGS)
