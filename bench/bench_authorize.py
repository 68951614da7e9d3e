"""Issue 4 benchmark: the same decisions through callgate's Authorize RPC on each engine vs a
direct call to the OPA server's REST Data API with the equivalent Rego policy.

Starts one OPA server (scripts/opa; built on first use) serving policies/rego, and one sidecar
per engine (cedar, rego, opa->that server). Each mode runs the same request mix (allow, confirm,
forbid, no match) with 1 and N calls in flight; prints p50/p99/throughput and the throughput
ratio to the direct OPA REST call.

    .venv/bin/python bench/bench_authorize.py [--seconds 5] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from _harness import ROOT, closed_loop, dump, free_port, machine_line, ready, report, sidecar
from google.protobuf import struct_pb2

from callgate.base.model import AuthzRequest, Subject
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.policy.engines.rego_contract import build_input

REQUESTS = [
    (
        "bob",
        "weather.read",
        "weather:Paris",
        {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}},
    ),
    (
        "alice",
        "calendar.create",
        "calendar:primary",
        {
            "tool": "calendar.create_event@v1",
            "args": {
                "calendar_id": "primary",
                "title": "x",
                "start": "2026-07-20T09:00:00+08:00",
                "duration_minutes": 30,
            },
        },
    ),
    (
        "alice",
        "calendar.create",
        "calendar:primary",
        {
            "tool": "calendar.create_event@v1",
            "args": {
                "calendar_id": "primary",
                "title": "x",
                "start": "2026-07-20T09:00:00+08:00",
                "duration_minutes": 600,
            },
        },
    ),
    ("bob", "files.delete", "file:/tmp/x", {"tool": "files.delete@v1", "args": {"path": "/tmp/x"}}),
]


def start_opa() -> tuple[subprocess.Popen[bytes], str]:
    binary = subprocess.run(
        ["bash", str(ROOT / "scripts" / "opa"), "path"], check=True, capture_output=True, text=True
    ).stdout.strip()
    port = free_port()
    log = open(Path(tempfile.mkdtemp()) / "opa.log", "wb")
    proc = subprocess.Popen(
        [binary, "run", "--server", "--addr", f"127.0.0.1:{port}", "--log-level", "error", "--skip-version-check",
         "--ignore", "*_test.rego", str(ROOT / "policies" / "rego")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("OPA did not start")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json")
    args = ap.parse_args()
    opa, url = start_opa()
    results: dict[str, Any] = {}
    try:
        bodies = [
            json.dumps({"input": build_input(AuthzRequest(Subject("acme", s), c, r, ctx))}).encode()
            for s, c, r, ctx in REQUESTS
        ]
        async with aiohttp.ClientSession() as http:

            async def direct(i: int) -> object:
                async with http.post(f"{url}/v1/data/callgate/authz/decision", data=bodies[i % len(bodies)],
                                     headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
                    return await resp.read()

            await closed_loop(direct, 1.0, 4)
            for c in (1, args.concurrency):
                lat, el = await closed_loop(direct, args.seconds, c)
                results[f"opa_rest_direct_{c}"] = report(
                    f"OPA REST Data API direct (aiohttp), {c} in flight", lat, el
                )
        for engine in ("cedar", "rego", "opa"):
            policy = f'engine = "{engine}"\nopa_url = "{url}"' if engine == "opa" else f'engine = "{engine}"'
            with sidecar(policy=policy) as sc:
                async with grpc.aio.insecure_channel(sc.agent) as agent_ch:
                    await ready(agent_ch)
                async with grpc.aio.insecure_channel(sc.authorizer) as ch:
                    stub = pb_grpc.AuthorizerStub(ch)
                    reqs = []
                    for s, c, r, ctx in REQUESTS:
                        st = struct_pb2.Struct()
                        st.update(ctx)
                        reqs.append(
                            pb.AuthorizeRequest(
                                subject=pb.Subject(tenant="acme", id=s), capability=c, resource=r, context=st
                            )
                        )

                    async def authorize(i: int) -> object:
                        return await stub.Authorize(reqs[i % len(reqs)])

                    await closed_loop(authorize, 1.0, 4)
                    for c in (1, args.concurrency):
                        lat, el = await closed_loop(authorize, args.seconds, c)
                        r = report(f"callgate Authorize RPC ({engine}), {c} in flight", lat, el)
                        r["ratio_to_opa_direct"] = (
                            r["throughput_rps"] / results[f"opa_rest_direct_{c}"]["throughput_rps"]
                        )
                        print(f"    throughput ratio to direct OPA REST: {r['ratio_to_opa_direct']:.2f}")
                        results[f"{engine}_{c}"] = r
    finally:
        opa.terminate()
    print(machine_line())
    dump(args.json, results)


if __name__ == "__main__":
    asyncio.run(main())
