"""Issue 3 benchmarks.

1. Credentials, in-process: mint (CredentialIssuer) and verify (callgate.credentials.verifier) per second,
   against raw Ed25519 sign/verify with `cryptography` as the baseline.
2. Full round trip over gRPC against a running sidecar (Cedar + SQLite, synchronous=FULL):
   Propose -> BeginAttempt (mints a credential) -> ReportOutcome(COMMITTED) -> EncodeResult,
   with the executor verifying its credential offline, vs the same number (4) of bare health
   RPCs on the same server as the baseline.

    .venv/bin/python bench/bench_roundtrip.py [--seconds 10] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import grpc
from _harness import closed_loop, dump, machine_line, ready, report, sidecar
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.arguments.digest import canonicalize, invocation_digest
from callgate.base.clock import FixedClock
from callgate.credentials.issuer import CredentialIssuer, Grant, KeyRing
from callgate.credentials.verifier import CredentialVerifier, InMemoryReplayCache
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc


def per_second(fn: object, seconds: float) -> tuple[list[float], float]:
    lat: list[float] = []
    end = time.perf_counter() + seconds
    t_start = time.perf_counter()
    i = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        fn(i)  # type: ignore[operator]
        lat.append(time.perf_counter() - t0)
        i += 1
    return lat, time.perf_counter() - t_start


def bench_credentials(seconds: float) -> dict[str, object]:
    now = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)
    clock = FixedClock(now)
    ring = KeyRing(now)
    issuer = CredentialIssuer(ring, "callgate", clock)
    args = {
        "calendar_id": "primary",
        "title": "x",
        "start": "2026-07-20T09:00:00+08:00",
        "duration_minutes": 10,
    }
    canonical = canonicalize(args)
    digest = invocation_digest("acme", "calendar.create_event", "v1", canonical)

    def grant(i: int) -> Grant:
        return Grant(
            invocation_id=f"inv_{i}", attempt_id=f"att_{i}", tenant="acme", subject="alice", audience="cal",
            tool_name="calendar.create_event", tool_version="v1", capabilities=("calendar.create",),
            resource="calendar:primary", digest=digest, idempotency_key="k", deadline=now + timedelta(seconds=30),
        )  # fmt: skip

    tokens = [issuer.mint(grant(i)).token for i in range(20000)]
    verifier = CredentialVerifier(
        ring.jwks(), issuer="callgate", audience="cal", clock=clock, replay_cache=InMemoryReplayCache()
    )
    key = Ed25519PrivateKey.generate()
    pub = key.public_key()
    msg = b"x" * 600
    sig = key.sign(msg)
    res: dict[str, object] = {}
    lat, el = per_second(lambda i: key.sign(msg), seconds)
    res["baseline_ed25519_sign"] = report("baseline raw Ed25519 sign", lat, el)
    lat, el = per_second(lambda i: issuer.mint(grant(i)), seconds)
    res["mint"] = report("CredentialIssuer.mint (JWT, EdDSA)", lat, el)
    lat, el = per_second(lambda i: pub.verify(sig, msg), seconds)
    res["baseline_ed25519_verify"] = report("baseline raw Ed25519 verify", lat, el)
    lat, el = per_second(
        lambda i: verifier.verify(tokens[i % len(tokens)] if i < len(tokens) else issuer.mint(grant(i)).token,
                                  tool_name="calendar.create_event", tool_version="v1", canonical_arguments=canonical),
        seconds,
    )  # fmt: skip
    res["verify"] = report("CredentialVerifier.verify (all checks)", lat, el)
    return res


async def bench_roundtrip(seconds: float, concurrency: int) -> dict[str, object]:
    res: dict[str, object] = {}
    with sidecar() as sc:
        async with grpc.aio.insecure_channel(sc.agent) as agent, grpc.aio.insecure_channel(sc.executor) as ex:
            await ready(agent)
            gate = pb_grpc.GateStub(agent)
            executor = pb_grpc.ExecutorStub(ex)
            health = health_pb2_grpc.HealthStub(agent)
            sid = (await gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="carol"), timezone="UTC")
            )).session_id  # fmt: skip
            await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="bench"))
            jwks = json.loads((await executor.GetJwks(pb.GetJwksRequest())).jwks_json)
            from callgate.base.clock import SystemClock

            verifier = CredentialVerifier(jwks, issuer="callgate", audience="files", clock=SystemClock())

            async def roundtrip(i: int) -> object:
                p = await gate.Propose(pb.ProposeRequest(
                    session_id=sid, model_call_id="bench", proposal_id=f"p{i}", tool_name="files.delete",
                    tool_version="v1", arguments=json.dumps({"path": f"/tmp/f{i}"}).encode(),
                ))  # fmt: skip
                assert p.state == pb.PREPARED, p
                a = await executor.BeginAttempt(
                    pb.BeginAttemptRequest(invocation_id=p.invocation_id, executor_id="files")
                )
                verifier.verify(a.credential, tool_name=a.tool_name, tool_version=a.tool_version,
                                canonical_arguments=a.normalized_arguments)  # fmt: skip
                await executor.ReportOutcome(pb.ReportOutcomeRequest(
                    attempt_id=a.attempt_id, outcome=pb.OUTCOME_COMMITTED, external_resource_id=f"del-{i}"))  # fmt: skip
                e = await executor.EncodeResult(pb.EncodeResultRequest(
                    invocation_id=p.invocation_id, status="ok", value=b'{"deleted": true}'))  # fmt: skip
                assert e.state == pb.OBSERVED
                return e

            hc = health_pb2.HealthCheckRequest()

            async def bare4(i: int) -> object:
                for _ in range(4):
                    await health.Check(hc)
                return None

            await closed_loop(roundtrip, 1.0, 2)
            lat, el = await closed_loop(bare4, seconds, 1)
            res["baseline_4_rpcs_sequential"] = report("baseline 4 x health.Check, 1 in flight", lat, el)
            lat, el = await closed_loop(roundtrip, seconds, 1)
            res["roundtrip_sequential"] = report("Propose->Begin->Report->Encode, 1 in flight", lat, el)
            lat, el = await closed_loop(bare4, seconds, concurrency)
            res["baseline_4_rpcs_saturated"] = report(
                f"baseline 4 x health.Check, {concurrency} in flight", lat, el
            )
            lat, el = await closed_loop(roundtrip, seconds, concurrency)
            res["roundtrip_saturated"] = report(
                f"Propose->Begin->Report->Encode, {concurrency} in flight", lat, el
            )
        res["sidecar_peak_rss_mib"] = sc.peak_rss_mib
        print(f"sidecar peak RSS (VmHWM): {sc.peak_rss_mib:.1f} MiB")
    return res


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {"credentials": bench_credentials(min(args.seconds, 5.0))}
    results["roundtrip"] = await bench_roundtrip(args.seconds, args.concurrency)
    print(machine_line())
    dump(args.json, results)


if __name__ == "__main__":
    asyncio.run(main())
