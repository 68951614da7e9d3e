"""Issue 15 A benchmark: how costs grow with what a request does not touch (printed, not timed).

Each part runs on the code in ``--code`` (default: this checkout), so the same script gives the
"before" (``--code /work/main``) and the "after" figures:

* ``policies``  decision cost (in process, one Cedar decision) at 10 / 1,000 / 10,000 policies
                about other actions, and the load time of each set;
* ``entities``  Propose p50 (a real sidecar, 1 in flight, resources varying so no cache can hide
                the set) at 10 vs 100,000 entities, and the sidecar's RSS;
* ``reload``    the longest ``health.Check`` (polled back to back) while the sidecar hot-reloads
                10,000 policies after a file change;
* ``tools``     ListTools p50 at 10 vs 1,000 tools;
* ``args``      sidecar CPU per Propose with a 60 KB array of records in the arguments;
* ``sessions``  sidecar RSS after opening 100,000 sessions (each with one ListTools);
* ``memory``    sidecar RSS on the example policies: idle at SERVING, under steady Propose load, peak.

    .venv/bin/python bench/bench_scale.py [--code DIR] [--only policies,entities,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from _harness import ROOT, free_port, machine_line, pct, rss_kib

CODE = ROOT
RESULTS: dict[str, Any] = {}
INFLIGHT = int(os.environ.get("BENCH_INFLIGHT", "4"))


def out(name: str, **figures: Any) -> None:
    RESULTS[name] = figures
    print(f"{name:<40} " + "  ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


# --- generated policy directories -----------------------------------------------------------------
def other_actions(n_policies: int, per_action: int = 10) -> tuple[str, str]:
    """(schema, policies) with ``n_policies`` policies about other actions than the examples'."""
    schema = (ROOT / "policies/cedar/schema.cedarschema").read_text()
    pol = (ROOT / "policies/cedar/policies.cedar").read_text()
    n_act = max(1, n_policies // per_action)
    schema += "\n" + "\n".join(
        f'action "other.a{i}" in [read] appliesTo {{ principal: User, resource: Resource, '
        f"context: {{ tenant: String, tool: String, args: {{ city: String }} }} }};"
        for i in range(n_act)
    )
    pol += "\n" + "\n".join(
        f'@id("other-{i}")\npermit (principal, action == Action::"other.a{i % n_act}", resource)\n'
        f'when {{ principal.tenant == context.tenant && context.args.city == "c{i}" }};'
        for i in range(n_policies)
    )
    return schema, pol


def policy_dir(
    tmp: Path, *, policies: int = 0, entities: int = 0, tools: int = 0, records: bool = False
) -> Path:
    d = tmp / "policies"
    shutil.copytree(ROOT / "policies", d, ignore=shutil.ignore_patterns("tests", "rego"))
    cedar = d / "cedar"
    if policies:
        schema, pol = other_actions(policies)
        (cedar / "schema.cedarschema").write_text(schema)
        (cedar / "policies.cedar").write_text(pol)
    if entities:
        ents = json.loads((cedar / "entities.json").read_text())
        ents += [
            {"uid": {"type": "User", "id": f"user{i}"}, "attrs": {"tenant": f"t{i % 100}"}, "parents": []}
            for i in range(entities)
        ]
        (cedar / "entities.json").write_text(json.dumps(ents))
    base = json.loads((d / "tools" / "weather.get@v1.json").read_text())
    for i in range(tools):
        (d / "tools" / f"bench.t{i:04d}@v1.json").write_text(
            json.dumps(
                {**base, "name": f"bench.t{i:04d}", "description": f"tool {i}: " + base["description"]}
            )
        )
    if records:
        rec = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
               "ok": {"type": "boolean"}}, "required": ["id", "name", "ok"], "additionalProperties": False}  # fmt: skip
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                  "properties": {"table": {"type": "string"}, "records": {"type": "array", "items": rec}},
                  "required": ["table", "records"], "additionalProperties": False}  # fmt: skip
        spec = {**base, "name": "records.put", "input_schema": schema, "normalized_schema": schema,
                "side_effect_class": "create", "required_capabilities": ["records.put"],
                "resource_template": "records:{table}", "normalizers": []}  # fmt: skip
        (d / "tools" / "records.put@v1.json").write_text(json.dumps(spec))
        with open(cedar / "schema.cedarschema", "a") as fh:
            fh.write(
                '\naction "records.put" in [create] appliesTo { principal: User, resource: Resource,\n'
                "  context: { tenant: String, tool: String,\n"
                "             args: { table: String, records: Set<{ id: Long, name: String, ok: Bool }> } } };\n"
            )
        with open(cedar / "policies.cedar", "a") as fh:
            fh.write(
                '\n@id("records-own-tenant")\npermit (principal, action == Action::"records.put", resource)\n'
                'when { principal.tenant == context.tenant && context.args.table == "t" };\n'
            )
    return d


# --- a sidecar on the chosen code ------------------------------------------------------------------
@contextmanager
def serve(
    pdir: Path, *, watch: bool = False, timeout: float = 900, extra: str = ""
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-scale-"))
    port = free_port()
    cfg = tmp / "callgate.toml"
    cfg.write_text(
        f"""
[server]
agent = {{ socket = "{tmp}/agent.sock", tcp = "127.0.0.1:{port}" }}
confirmer = {{ socket = "{tmp}/confirmer.sock" }}
authorizer = {{ socket = "{tmp}/authorizer.sock" }}
executor = {{ socket = "{tmp}/executor.sock" }}
[policy]
dir = "{pdir}"
watch = {"true" if watch else "false"}
watch_interval_ms = 100
[store]
path = "{tmp}/callgate.db"
synchronous = "normal"
[idempotency]
path = "{tmp}/idempotency.db"
[budgets]
max_model_calls = 100000000
max_tool_calls = 100000000
max_wall_clock_seconds = 100000000
max_result_bytes = 100000000000
{extra}"""
    )
    env = dict(os.environ, PYTHONPATH=str(CODE))
    log = tmp / "sidecar.log"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate", "serve", "--config", str(cfg)],
        cwd=CODE,
        stderr=open(log, "wb"),
        env=env,
    )
    try:
        asyncio.run(wait_serving(f"127.0.0.1:{port}", timeout, proc, log))
        out(f"  start to SERVING ({pdir.name})", seconds=round(time.monotonic() - t0, 1))
        yield proc, f"127.0.0.1:{port}", log
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


async def wait_serving(target: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("sidecar exited: " + log.read_text()[-2000:])
            try:
                r = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("sidecar never became SERVING")


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


# --- parts -------------------------------------------------------------------------------------------
def part_policies() -> None:
    """All three sets are loaded first, then measured in alternating rounds (the machine is
    shared: sequential runs would measure its load drift, not the policies)."""
    from callgate.base.model import AuthzRequest, Subject
    from callgate.policy.engines.cedar import CedarEngine, load_cedar_dir

    r = AuthzRequest(Subject("acme", "bob"), "weather.read", "weather:Paris",
                     {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}})  # fmt: skip
    engines: dict[int, Any] = {}
    loads: dict[int, float] = {}
    tmp = Path(tempfile.mkdtemp())
    for n in (10, 1000, 10000):
        d = policy_dir(tmp / str(n), policies=n) / "cedar"
        t0 = time.perf_counter()
        engines[n] = CedarEngine(load_cedar_dir(d))
        loads[n] = time.perf_counter() - t0
        engines[n].authorize_batch_sync([r])
    samples: dict[int, list[float]] = {n: [] for n in engines}
    for _ in range(9):
        for n, engine in engines.items():
            t0 = time.process_time()
            for _ in range(300):
                engine.authorize_batch_sync([r])
            samples[n].append((time.process_time() - t0) / 300 * 1e6)
    base = statistics.median(samples[10])
    for n in engines:
        us = statistics.median(samples[n])
        out(f"policies {n:>6} (other actions)", decision_us=round(us, 1), ratio=round(us / base, 2),
            load_s=round(loads[n], 2))  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


async def propose_loop(target: str, n: int, subjects: list[str], cities: int, tool: str = "weather.get",
                       args_of: Any = None, omit: bool = False) -> list[float]:  # fmt: skip
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    lat = []
    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as ch:
        gate = pb_grpc.GateStub(ch)
        sids = []
        for s in subjects:
            sid = (await gate.OpenSession(pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id=s),
                                                                 timezone="Europe/Paris"))).session_id  # fmt: skip
            await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="mc"))
            sids.append(sid)
        for i in range(n):
            args = args_of(i) if args_of else {"city": f"City{i % cities}", "date": "2026-07-20"}
            req = pb.ProposeRequest(session_id=sids[i % len(sids)], model_call_id="mc", proposal_id=f"p{i}",
                                    tool_name=tool, tool_version="v1", arguments=json.dumps(args).encode(),
                                    omit_normalized_arguments=omit)  # fmt: skip
            t0 = time.perf_counter()
            resp = await gate.Propose(req)
            lat.append(time.perf_counter() - t0)
            if i == 0:
                print(f"  first answer: {pb.State.Name(resp.state)}", flush=True)
    return lat


def part_entities(calls: int) -> None:
    base = None
    for n in (10, 100_000):
        tmp = Path(tempfile.mkdtemp())
        pdir = policy_dir(tmp, entities=n if n > 10 else 0)
        size = (pdir / "cedar" / "entities.json").stat().st_size
        with serve(pdir) as (proc, target, log):
            rss0 = rss_kib(proc.pid, "VmRSS") / 1024
            k = calls if n <= 10 else max(10, calls // 10 if RESULTS.get("slow_entities") else calls)
            lat = asyncio.run(propose_loop(target, k, ["bob", "alice", "user7", "stranger"], 97))
            p50 = pct(lat, 50) * 1e3
            base = base or p50
            steady, peak = rss_kib(proc.pid, "VmRSS") / 1024, rss_kib(proc.pid) / 1024
            out(f"entities {n:>7} ({size / 2**20:.1f} MiB)", propose_p50_ms=round(p50, 2), ratio=round(p50 / base, 2),
                calls=k, rss_mib=round(steady, 1), rss_at_serving_mib=round(rss0, 1),
                peak_rss_mib=round(peak, 1), load_peak_over_steady=round(peak / steady, 2))  # fmt: skip
            if n > 10:
                reload_peak = reload_entities(proc.pid, pdir, log)
                out(f"entities {n:>7} reloaded (one entity more, SIGHUP)", reload_peak_rss_mib=round(reload_peak, 1),
                    reload_peak_over_steady=round(reload_peak / steady, 2),
                    rss_after_mib=round(rss_kib(proc.pid, "VmRSS") / 1024, 1))  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


def reload_entities(pid: int, pdir: Path, log: Path, timeout: float = 300) -> float:
    """Reload a sidecar's policies with one entity more (SIGHUP) and return its peak RSS (MiB)
    while the new snapshot loaded beside the serving one: the peak is reset first (``clear_refs``
    5, Linux), then read once the new snapshot serves (its log line)."""
    ents_path = pdir / "cedar" / "entities.json"
    ents = json.loads(ents_path.read_text())
    ents.append({"uid": {"type": "User", "id": "reloaded"}, "attrs": {"tenant": "t0"}, "parents": []})
    ents_path.write_text(json.dumps(ents))
    del ents
    serving = log.read_text(errors="replace").count("policy snapshot")
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count("policy snapshot") == serving:
        if time.monotonic() > deadline:
            raise RuntimeError("the reload never served")
        time.sleep(0.2)
    return rss_kib(pid) / 1024


def part_reload(policies: int) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    tmp = Path(tempfile.mkdtemp())
    pdir = policy_dir(tmp, policies=policies)
    with serve(pdir, watch=True) as (proc, target, log):

        async def idle(seconds: float) -> list[float]:
            lat = []
            async with grpc.aio.insecure_channel(target) as ch:
                stub = health_pb2_grpc.HealthStub(ch)
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    t0 = time.perf_counter()
                    await stub.Check(health_pb2.HealthCheckRequest(), timeout=600)
                    lat.append(time.perf_counter() - t0)
            return lat

        quiet = asyncio.run(idle(5.0))
        out("  health.Check without a reload (5 s)", longest_ms=round(max(quiet) * 1e3, 1),
            p99_ms=round(pct(quiet, 99) * 1e3, 2), checks=len(quiet))  # fmt: skip
        lats: list[float] = []

        async def run() -> tuple[float, int, float]:
            async with grpc.aio.insecure_channel(target) as ch:
                stub = health_pb2_grpc.HealthStub(ch)
                seen = log.read_text().count("serving (")
                pol = pdir / "cedar" / "policies.cedar"
                pol.write_text(pol.read_text().replace('"c0"', '"c0-changed"', 1))
                t_change = time.monotonic()
                worst, n, took, worst_at = 0.0, 0, 0.0, 0.0
                served_at = 0.0
                # until the new snapshot serves, and 7 s more: the old one is retired 5 s later
                while served_at == 0.0 or time.monotonic() - served_at < 7.0:
                    if served_at == 0.0 and log.read_text().count("serving (") > seen:
                        served_at = time.monotonic()
                        took = served_at - t_change
                    t0 = time.perf_counter()
                    await stub.Check(health_pb2.HealthCheckRequest(), timeout=600)
                    dt = time.perf_counter() - t0
                    if dt > worst:
                        worst, worst_at = dt, time.monotonic() - t_change
                    lats.append(dt)
                    n += 1
                    if time.monotonic() - t_change > 900:
                        raise RuntimeError("reload never finished")
                out("  longest Check at (s after the change)", at=round(worst_at, 2))
                return worst, n, took

        worst, n, took = asyncio.run(run())
        out(f"reload of {policies} policies", longest_check_ms=round(worst * 1e3, 1), checks=n,
            p99_ms=round(pct(lats, 99) * 1e3, 2), reload_s=round(took, 1))  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


def part_tools(calls: int) -> None:
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    base = None
    for n in (10, 1000):
        tmp = Path(tempfile.mkdtemp())
        pdir = policy_dir(tmp, tools=n - 3)
        with serve(pdir) as (proc, target, _):

            async def run() -> tuple[list[float], int]:
                lat = []
                size = 0
                opts = [("grpc.max_receive_message_length", 64 << 20)]
                async with grpc.aio.insecure_channel(target, options=opts) as ch:
                    gate = pb_grpc.GateStub(ch)
                    sid = (await gate.OpenSession(pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="bob"),
                                                                         timezone="Europe/Paris"))).session_id  # fmt: skip
                    for i in range(calls):
                        t0 = time.perf_counter()
                        r = await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id=f"mc{i}"))
                        lat.append(time.perf_counter() - t0)
                        size = r.ByteSize()
                return lat, size

            c0 = cpu_s(proc.pid)
            lat, size = asyncio.run(run())
            cpu_ms = (cpu_s(proc.pid) - c0) / calls * 1e3
            p50 = pct(lat, 50) * 1e3
            base = base or p50
            out(f"ListTools {n:>5} tools", p50_ms=round(p50, 2), ratio=round(p50 / base, 2), kb=round(size / 1024),
                sidecar_cpu_ms=round(cpu_ms, 2))  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


def part_args(calls: int, sizes: tuple[int, ...] = (139, 1390, 13900)) -> None:
    """Sidecar CPU per Propose of an array of small records (~43 bytes each: 139 ~ 6 KB, 1,390 ~
    60 KB, 13,900 ~ 600 KB, over the default 64 KiB limit, so raised to 1 MiB here), answered
    with the arguments echoed and digest-only (``omit_normalized_arguments``)."""
    tmp = Path(tempfile.mkdtemp())
    pdir = policy_dir(tmp, records=True)
    with serve(pdir, extra="[limits]\nmax_argument_bytes = 1048576\n") as (proc, target, _):
        for n in sizes:
            recs = [{"id": i, "name": f"n{i:05d}", "ok": i % 2 == 0} for i in range(n)]
            args = {"table": "t", "records": recs}
            size = len(json.dumps(args))
            k = max(5, calls * 1390 // max(n, 1390))
            for omit in (False, True):
                asyncio.run(propose_loop(target, 3, ["bob"], 1, "records.put", lambda i, a=args: a, omit))
                c0 = cpu_s(proc.pid)
                lat = asyncio.run(
                    propose_loop(target, k, ["bob"], 1, "records.put", lambda i, a=args: a, omit)
                )
                cpu_ms = (cpu_s(proc.pid) - c0) / (k + 1) * 1e3  # + the session's ListTools
                out(f"Propose with {size // 1024} KB of records{' (digest only)' if omit else ''}",
                    sidecar_cpu_ms=round(cpu_ms, 1), us_per_kb=round(cpu_ms * 1e3 / (size / 1024), 1),
                    p50_ms=round(pct(lat, 50) * 1e3, 1), calls=k)  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


def part_sessions(n: int) -> None:
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    tmp = Path(tempfile.mkdtemp())
    pdir = policy_dir(tmp)
    curve: list[tuple[int, int]] = []
    with serve(pdir) as (proc, target, log):

        async def run() -> None:
            async with grpc.aio.insecure_channel(target) as ch:
                gate = pb_grpc.GateStub(ch)
                counter = iter(range(n))
                step = max(1, n // 10)
                done = 0

                async def worker() -> None:
                    nonlocal done
                    for i in counter:
                        sid = (await gate.OpenSession(pb.OpenSessionRequest(
                            subject=pb.Subject(tenant="acme", id=f"user{i}"), timezone="Europe/Paris"))).session_id  # fmt: skip
                        await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="mc"))
                        done += 1
                        if done % step == 0:  # the curve: RSS every tenth of the sessions
                            curve.append((done, rss_kib(proc.pid, "VmRSS")))

                await asyncio.gather(*(worker() for _ in range(INFLIGHT)))

        async def warm() -> None:
            nonlocal n
            saved, n = n, 200
            await run()
            n = saved

        try:
            asyncio.run(warm())
        except grpc.RpcError:
            print(log.read_text()[-3000:])
            raise
        before = rss_kib(proc.pid, "VmRSS")
        curve.clear()
        t0 = time.monotonic()
        asyncio.run(run())
        after = rss_kib(proc.pid, "VmRSS")
        out(f"sessions {n}", rss_growth_mib=round((after - before) / 1024, 1),
            per_session_bytes=round((after - before) * 1024 / n), rss_mib=round(after / 1024, 1),
            seconds=round(time.monotonic() - t0),
            curve_rss_growth_mib=[(k, round((v - before) / 1024, 1)) for k, v in curve])  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


def part_memory(seconds: float) -> None:
    """The sidecar's RSS on the example policies: at SERVING (idle), then under steady load
    (Propose of weather.get, ``BENCH_INFLIGHT`` calls in flight, for ``seconds``), and its peak."""
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    tmp = Path(tempfile.mkdtemp())
    pdir = policy_dir(tmp)
    with serve(pdir) as (proc, target, _):
        time.sleep(1.0)
        idle = rss_kib(proc.pid, "VmRSS") / 1024
        idle_anon = rss_kib(proc.pid, "RssAnon") / 1024

        async def run() -> int:
            done = 0
            async with grpc.aio.insecure_channel(target) as ch:
                gate = pb_grpc.GateStub(ch)
                sid = (await gate.OpenSession(pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="bob"),
                                                                     timezone="Europe/Paris"))).session_id  # fmt: skip
                await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="mc"))
                end = time.monotonic() + seconds

                async def worker(w: int) -> None:
                    nonlocal done
                    i = 0
                    while time.monotonic() < end:
                        args = {"city": f"City{i % 97}", "date": "2026-07-20"}
                        await gate.Propose(pb.ProposeRequest(session_id=sid, model_call_id="mc", proposal_id=f"w{w}-{i}",
                                                             tool_name="weather.get", tool_version="v1",
                                                             arguments=json.dumps(args).encode()))  # fmt: skip
                        i += 1
                        done += 1

                await asyncio.gather(*(worker(w) for w in range(INFLIGHT)))
            return done

        calls = asyncio.run(run())
        out("sidecar RSS, example policies", idle_at_serving_mib=round(idle, 1),
            under_load_mib=round(rss_kib(proc.pid, "VmRSS") / 1024, 1), peak_mib=round(rss_kib(proc.pid) / 1024, 1),
            calls=calls, seconds=seconds, idle_anon_mib=round(idle_anon, 1),
            under_load_anon_mib=round(rss_kib(proc.pid, "RssAnon") / 1024, 1),
            file_backed_mib=round(rss_kib(proc.pid, "RssFile") / 1024, 1))  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    global CODE
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", default=str(ROOT), help="checkout whose callgate runs (before/after)")
    ap.add_argument("--only", default="policies,entities,reload,tools,args,sessions,memory")
    ap.add_argument("--memory-seconds", type=float, default=30.0)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--entity-calls", type=int, default=200)
    ap.add_argument("--reload-policies", type=int, default=10000)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--json")
    a = ap.parse_args()
    CODE = Path(a.code).resolve()
    sys.path.insert(0, str(CODE))
    import callgate

    print(machine_line(), f"| code: {CODE} ({Path(callgate.__file__).parent})", flush=True)
    parts = a.only.split(",")
    if "policies" in parts:
        part_policies()
    if "entities" in parts:
        part_entities(a.entity_calls)
    if "reload" in parts:
        part_reload(a.reload_policies)
    if "tools" in parts:
        part_tools(a.calls)
    if "args" in parts:
        part_args(max(5, a.calls // 10))
    if "sessions" in parts:
        part_sessions(a.sessions)
    if "memory" in parts:
        part_memory(a.memory_seconds)
    if a.json:
        Path(a.json).write_text(json.dumps(RESULTS, indent=2))


if __name__ == "__main__":
    main()
