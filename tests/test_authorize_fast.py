"""Authorize's cheaper path gives the same answers and the same records as the reference path.

The ``Authorizer.Authorize`` handler reads the context ``Struct`` directly
(:func:`callgate.server.services.struct_dict`, not ``json_format.MessageToDict``), digests it
through the C JSON encoder where that text is canonical
(:func:`callgate.arguments.digest.canonicalize_plain`, else the reference ``canonicalize``), builds
each distinct decision's message and stored form once, and records an allow behind the barrier in
one writer round trip. Here:

* ``struct_dict`` is ``MessageToDict`` (same values, same order) on generated Structs, and refuses
  a NaN or infinite number with ``invalid_request``;
* ``canonicalize_plain`` is either None or the reference's bytes, on generated JSON values;
* a differential over tests/data/parity_cases.json through the gRPC API on every engine (Cedar on
  the compiled core and on cedarpy, embedded Rego, a real OPA server): each answer and each
  stored record (digest, keys, decision) is what the reference path computes from the same
  request (``MessageToDict`` -> ``canonicalize`` -> ``engine.authorize_batch`` ->
  ``decision_to_dict``), asked twice (the second answer comes from the built forms).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.arguments.digest import canonicalize, canonicalize_plain
from callgate.base.errors import CallgateError
from callgate.base.model import AuthzRequest, Subject
from callgate.config import CoreConfig, PolicyConfig
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.propose.outcome import decision_to_dict
from callgate.server.services import struct_dict
from tests.conftest import DATA, Running, start_sidecar, stop_sidecar

PROPS = settings(
    max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CASES: list[dict[str, Any]] = json.loads((DATA / "parity_cases.json").read_text(encoding="utf-8"))["cases"]

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ["", "a", "\x00\x1f\x7f", '"\\/', "\u2028", "é", "😀", "\ue000\uffff", "𝄞z"]
)
_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 1e-4, 1e-5, 1e-7, 1e15, 1e16, 1e21, 2.0**53, 2.0**53 + 2, 240825066873221.12, 0.1]
)
_keys = st.text(alphabet=st.characters(codec="ascii"), max_size=4) | _text
_json = st.recursive(
    st.none() | st.booleans() | _floats | st.integers(-(2**60), 2**60) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)
_struct_json = st.recursive(
    st.none() | st.booleans() | _floats | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@PROPS
@given(st.dictionaries(_keys, _struct_json, max_size=5))
def test_struct_dict_is_message_to_dict(value: dict[str, Any]) -> None:
    s = struct_pb2.Struct()
    s.update(value)
    s.fields["unset"].CopyFrom(struct_pb2.Value())  # no kind at all: null for both
    got, want = struct_dict(s), json_format.MessageToDict(s)
    assert got == want and list(got) == list(want)
    assert json.dumps(got) == json.dumps(want)  # same types too (floats stay floats)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_struct_dict_refuses_numbers_without_a_json_form(bad: float) -> None:
    s = struct_pb2.Struct()
    s.update({"args": {"n": [1.0, bad]}})
    with pytest.raises(CallgateError) as err:
        struct_dict(s)
    assert err.value.code.value == "invalid_request"


@PROPS
@given(_json)
def test_canonicalize_plain_is_the_reference_or_nothing(value: Any) -> None:
    fast = canonicalize_plain(value)
    try:
        ref: bytes | None = canonicalize(value)
    except Exception:
        ref = None
    assert fast is None or fast == ref


def test_canonicalize_plain_takes_the_usual_contexts() -> None:
    plain = 0
    for case in CASES:
        s = struct_pb2.Struct()
        s.update(case["context"])
        ctx = struct_dict(s)
        fast = canonicalize_plain(ctx)
        assert fast in (None, canonicalize(ctx)), case["name"]
        plain += fast is not None
    assert plain >= 0.9 * len(CASES)  # the reference runs for the odd one (a float past 2^53)


@pytest.fixture(
    scope="module",
    params=["cedar-native", "cedar-python", "rego", pytest.param("opa", marks=pytest.mark.opa)],
)
def engine_server(request: pytest.FixtureRequest) -> Iterator[Running]:
    kw: dict[str, Any] = {}
    if request.param == "cedar-python":
        kw["core"] = CoreConfig(engine="python")
    elif request.param == "rego":
        kw["policy"] = PolicyConfig(engine="rego")
    elif request.param == "opa":
        from tests.opa_fixture import shared_opa

        # a generous deadline: a timeout is a (correct) deny, not the answer compared here
        kw["policy"] = PolicyConfig(engine="opa", opa_url=shared_opa().url, opa_timeout_ms=10_000)
    running, tmp = start_sidecar(**kw)
    engine = running.sidecar.components.gate.snapshot.engine
    if request.param.startswith("cedar"):
        assert engine.name == "cedar" and engine.native == (request.param == "cedar-native")  # type: ignore[attr-defined]
    else:
        assert engine.name == request.param
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def test_answers_and_records_are_the_reference_ones(engine_server: Running) -> None:
    sc = engine_server
    gate = sc.sidecar.components.gate
    for case in CASES:
        ctx = struct_pb2.Struct()
        ctx.update(case["context"])
        request = pb.AuthorizeRequest(
            subject=pb.Subject(**case["subject"]), capability=case["capability"], resource=case["resource"],
            context=ctx,
        )  # fmt: skip
        reference = json_format.MessageToDict(ctx)
        want = sc.call(
            gate.snapshot.engine.authorize_batch(
                [
                    AuthzRequest(
                        subject=Subject(**case["subject"]),
                        capability=case["capability"],
                        resource=case["resource"],
                        context=reference,
                    )
                ]
            )
        )[0]
        if not case["subject"]["id"]:
            with pytest.raises(grpc.RpcError):  # the RPC asks for a subject id
                sc.authorizer.Authorize(request)
            continue
        for _ in range(2):  # the second answer comes from the forms built for the first
            resp = sc.authorizer.Authorize(request)
            record = sc.call(gate.get_decision(resp.decision_id))
            assert record is not None, case["name"]
            assert dict(record.decision) == decision_to_dict(want), case["name"]
            assert resp.decision.effect == pb.Effect.Value(want.effect.value.upper())
            assert [(r.code, r.policy_id, r.message) for r in resp.decision.reasons] == [
                (r.code, r.policy_id, r.message) for r in want.reasons
            ], case["name"]
            assert (resp.decision.error_code, resp.decision.engine) == (want.error_code, want.engine)
            digest = "sha256:" + hashlib.sha256(canonicalize(reference)).hexdigest() if reference else ""
            assert record.context_digest == digest, case["name"]
            assert record.context_keys == tuple(sorted(reference)), case["name"]
