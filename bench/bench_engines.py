"""Engine benchmark: the same decisions through Cedar, embedded Rego (regopy) and an OPA server.

Runs a mix of requests from tests/data/parity_cases.json (allow, confirm, forbid, no match,
schema error) and prints p50/p99 latency, throughput and ratios to Cedar for:

  cedar              CedarEngine, in-process (authorize_batch_sync, one request per call)
  rego-inline        RegoEngine, evaluated on the calling thread
  rego-offload       RegoEngine.authorize_batch on its thread pool (what the sidecar awaits)
  opa-engine         OpaEngine.authorize_batch: opa-python-client (aiohttp) -> OPA REST Data API
  opa-http-aiohttp   the same POST /v1/data/callgate/authz/decision straight with aiohttp
                     (pre-encoded body: the floor for any Python client of OPA's REST API)
  opa-http-sync      the same POST with http.client on one keep-alive connection

first with one request in flight, then (async modes) with --concurrency requests in flight.
Also prints OPA's own server-side handler time (?metrics=true) for the same decision. Starts its
own OPA (scripts/opa path; built on first use) on a free loopback port. Usage:

    .venv/bin/python bench/bench_engines.py [--seconds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callgate.base.model import AuthzRequest, Subject  # noqa: E402
from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir  # noqa: E402
from callgate.policy.engines.opa import OpaEngine  # noqa: E402
from callgate.policy.engines.rego import RegoEngine  # noqa: E402
from callgate.policy.engines.rego_contract import build_input  # noqa: E402

CASE_NAMES = [
    "weather-allowed-own-tenant",
    "calendar-scheduler-confirms",
    "calendar-481-over-the-limit",
    "files-admin-deletes",
    "files-protected-etc",
    "files-non-admin-denied",
    "calendar-duration-string-481",
]
DECISION_PATH = "/v1/data/callgate/authz/decision"


def requests_mix() -> list[AuthzRequest]:
    table = json.loads((ROOT / "tests" / "data" / "parity_cases.json").read_text())
    by_name = {c["name"]: c for c in table["cases"]}
    out = []
    for n in CASE_NAMES:
        c = by_name[n]
        out.append(
            AuthzRequest(
                Subject(c["subject"]["tenant"], c["subject"]["id"]),
                c["capability"],
                c["resource"],
                c["context"],
            )
        )
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_opa() -> tuple[subprocess.Popen[bytes], str]:
    opa = subprocess.run(
        ["bash", str(ROOT / "scripts" / "opa"), "path"], check=True, capture_output=True, text=True
    ).stdout.strip()
    port = free_port()
    proc = subprocess.Popen(
        [
            opa,
            "run",
            "--server",
            "--addr",
            f"127.0.0.1:{port}",
            "--log-level",
            "error",
            "--skip-version-check",
            "--ignore",
            "*_test.rego",
            str(ROOT / "policies" / "rego"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(400):
        try:
            with opener.open(url + "/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("OPA did not start")


Row = dict[str, Any]


def row(name: str, lat: list[float], elapsed: float, inflight: int) -> Row:
    return {
        "name": name,
        "inflight": inflight,
        "n": len(lat),
        "p50": pct(lat, 50) * 1e6,
        "p99": pct(lat, 99) * 1e6,
        "rps": len(lat) / elapsed,
    }


def bench_sync(name: str, fn: Callable[[AuthzRequest], Any], reqs: list[AuthzRequest], seconds: float) -> Row:
    for r in reqs * 20:  # warm-up
        fn(r)
    lat: list[float] = []
    i = 0
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        fn(reqs[i % len(reqs)])
        lat.append(time.perf_counter() - now)
        i += 1
    return row(name, lat, time.perf_counter() - start, 1)


async def bench_async(
    name: str,
    fn: Callable[[AuthzRequest], Awaitable[Any]],
    reqs: list[AuthzRequest],
    seconds: float,
    inflight: int,
) -> Row:
    for r in reqs * 10:
        await fn(r)
    lat: list[float] = []
    start = time.perf_counter()
    end = start + seconds
    counter = 0

    async def worker() -> None:
        nonlocal counter
        while time.perf_counter() < end:
            r = reqs[counter % len(reqs)]
            counter += 1
            t = time.perf_counter()
            await fn(r)
            lat.append(time.perf_counter() - t)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return row(name, lat, time.perf_counter() - start, inflight)


async def main_async(args: argparse.Namespace, url: str) -> list[Row]:
    reqs = requests_mix()
    rows: list[Row] = []
    cedar = CedarEngine(load_cedar_dir(ROOT / "policies" / "cedar"))
    rego_inline = RegoEngine.from_dir(ROOT / "policies" / "rego", offload=False)
    rego_pool = RegoEngine.from_dir(ROOT / "policies" / "rego", offload=True)
    opa = OpaEngine.from_dir(ROOT / "policies" / "rego", url=url, timeout=1.0)
    assert await opa.ready(), "OPA does not serve policies/rego"

    # sanity: every engine decides the mix identically
    def key(d: Any) -> tuple[Any, ...]:
        return (d.effect, sorted((r.code, r.policy_id) for r in d.reasons))

    want = [key(d) for d in cedar.authorize_batch_sync(reqs)]
    assert [key(d) for d in rego_inline.authorize_batch_sync(reqs)] == want
    assert [key(d) for d in await opa.authorize_batch(reqs)] == want

    bodies = [json.dumps({"input": build_input(r)}).encode() for r in reqs]
    body_of = {id(r): b for r, b in zip(reqs, bodies, strict=True)}
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)

    async def aio_direct(r: AuthzRequest) -> Any:
        async with session.post(
            url + DECISION_PATH, data=body_of[id(r)], headers={"Content-Type": "application/json"}
        ) as resp:
            return await resp.json()

    def sync_direct(r: AuthzRequest) -> Any:
        conn.request("POST", DECISION_PATH, body=body_of[id(r)], headers={"Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())

    s = args.seconds
    rows.append(bench_sync("cedar", lambda r: cedar.authorize_batch_sync([r]), reqs, s))
    rows.append(bench_sync("rego-inline", lambda r: rego_inline.authorize_batch_sync([r]), reqs, s))
    rows.append(await bench_async("rego-offload", lambda r: rego_pool.authorize_batch([r]), reqs, s, 1))
    rows.append(await bench_async("opa-engine", lambda r: opa.authorize_batch([r]), reqs, s, 1))
    rows.append(await bench_async("opa-http-aiohttp", aio_direct, reqs, s, 1))
    rows.append(bench_sync("opa-http-sync", sync_direct, reqs, s))
    c = args.concurrency
    rows.append(await bench_async("cedar (async wrapper)", lambda r: cedar.authorize_batch([r]), reqs, s, c))
    rows.append(await bench_async("rego-offload", lambda r: rego_pool.authorize_batch([r]), reqs, s, c))
    rows.append(await bench_async("opa-engine", lambda r: opa.authorize_batch([r]), reqs, s, c))
    rows.append(await bench_async("opa-http-aiohttp", aio_direct, reqs, s, c))

    # OPA's own view: server handler time for the same decision
    handler: list[float] = []
    evals: list[float] = []
    for i in range(300):
        async with session.post(url + DECISION_PATH + "?metrics=true", data=bodies[i % len(bodies)]) as resp:
            m = (await resp.json()).get("metrics", {})
            handler.append(m.get("timer_server_handler_ns", 0) / 1e9)
            evals.append(m.get("timer_rego_query_eval_ns", 0) / 1e9)
    rows.append(
        {
            "name": "opa server handler (metrics)",
            "inflight": 1,
            "n": len(handler),
            "p50": pct(handler, 50) * 1e6,
            "p99": pct(handler, 99) * 1e6,
            "rps": 0.0,
        }
    )
    rows.append(
        {
            "name": "opa query eval (metrics)",
            "inflight": 1,
            "n": len(evals),
            "p50": pct(evals, 50) * 1e6,
            "p99": pct(evals, 99) * 1e6,
            "rps": 0.0,
        }
    )

    conn.close()
    await session.close()
    for e in (cedar, rego_inline, rego_pool, opa):
        await e.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="per mode")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", action="store_true", help="print rows as JSON too")
    args = ap.parse_args()
    proc, url = start_opa()
    try:
        rows = asyncio.run(main_async(args, url))
    finally:
        proc.terminate()
        proc.wait(10)
    base = next(r for r in rows if r["name"] == "cedar")
    print(
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}, {len(CASE_NAMES)} request kinds, {args.seconds:g} s per mode"
    )
    print(
        f"{'mode':32} {'in flight':>9} {'n':>8} {'p50 us':>9} {'p99 us':>9} {'req/s':>9} {'p50 / cedar':>12}"
    )
    for r in rows:
        ratio = r["p50"] / base["p50"] if base["p50"] else 0.0
        rps = f"{r['rps']:9.0f}" if r["rps"] else f"{'-':>9}"
        print(
            f"{r['name']:32} {r['inflight']:>9} {r['n']:>8} {r['p50']:9.1f} {r['p99']:9.1f} {rps} {ratio:11.1f}x"
        )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
