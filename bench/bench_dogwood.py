"""Issue 30: the meters against Dogwood's local engine's published load figures.

Dogwood (an open-source Cedar superset for "temporal" policies: counts per window, running
totals) publishes, for its durable server (every event fsync'd before the answer) on a 16-core
Xeon: a fsync floor of 1.18 ms per append (~845 events/s ceiling); open loop, 5 s per point,
latency from the scheduled start: p50 1.48 ms / p99 3.53 ms at 100 requests/s with 10 policies,
2.21 ms / 4.48 ms at 100/s with 100 policies, and with 100 policies saturation at 246 of 500
offered requests/s (dogwood-performance/README.md). This runs the same shape of workload on
callgate, on this machine, with durable records:

* a real ``callgate serve`` (own process; Cedar, compiled core; SQLite ``synchronous = FULL``,
  durability ``barrier`` by default: a Propose's records are committed to the WAL before the
  answer and fsync'd at the next barrier, taken before anything can run; ``--durability
  per_answer``: every commit fsync'd before the answer, group-committed, as Dogwood does per
  event);
* one tool, ``mail.send@v1``, declaring a meter (``calls`` per subject over ``1h`` and the
  session), and 10 or 100 Cedar policies on its action, every one reading the meter (one permit
  under a ceiling, the others forbids on a recipient and a count: all evaluated on each call);
* ``bench/loadgen`` (Go, one HTTP/2 connection) offers Propose in an open loop: 100/s, then a
  ramp (``--ramp``) to find where achieved falls below offered; requests rotate over
  ``--subjects`` sessions (each its own subject: the meter's scope) so reservations spread as an
  agent fleet's would; each point gets fresh sessions;
* the fsync floor of this disk, measured as Dogwood does (a small append + fsync, repeated);
* ``--example``: what the example folder's label costs, i.e. Propose of ``weather.get@v1`` (closed
  loop, ``--inflight`` calls) on ``policies/`` as shipped (a ToolSpec declares
  ``result_labels``: every Propose reads the session's labels after the claim, and a weather
  read reserves its label) against a copy without its meter and label and one whose only label
  is on ``calendar.create_event`` (the read of the labels without the weather read's write),
  alternating sidecars (A B C A B C), sidecar CPU per call and p50.

Every answered Propose is a decision with its meter reserved and its events committed; the last
answer of each point is decoded and checked (ALLOW, PREPARED). State the load average (printed)
beside every figure: the box is shared.

    .venv/bin/python bench/bench_dogwood.py [--seconds 5] [--policies 10,100] [--ramp 250,400,500,700]
                                            [--rates 1,10,100,500] [--durability per_answer]
                                            [--example] [--inflight 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from _harness import ROOT, GoLoad, dump, machine_line, ready, report_go, sidecar

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

PROPOSE = "/callgate.v1.Gate/Propose"
DOGWOOD = {  # dogwood-performance/README.md, 16-core Xeon 8259CL, NVMe, load ~0.2
    "fsync_floor_ms": 1.18,
    "10 policies @ 100/s": {"p50_ms": 1.48, "p99_ms": 3.53, "achieved": 100},
    "100 policies @ 100/s": {"p50_ms": 2.21, "p99_ms": 4.48, "achieved": 100},
    "100 policies @ 500/s": {"p50_ms": 1653.0, "p99_ms": 5051.0, "achieved": 246},
    "10 policies @ 500/s": {"p50_ms": 4.00, "p99_ms": 10.7, "achieved": 500},
}
TOOL = {
    "name": "mail.send",
    "version": "v1",
    "description": "Send an email (bench_dogwood.py).",
    "schema_dialect": "https://json-schema.org/draft/2020-12/schema",
    "input_schema": {
        "type": "object",
        "properties": {"to": {"type": "string", "minLength": 1, "maxLength": 64}},
        "required": ["to"],
        "additionalProperties": False,
    },
    "side_effect_class": "create",
    "required_capabilities": ["mail.send"],
    "resource_template": "mail:{to}",
    "idempotency": {"supported": True, "without_key": "allow"},
    "timeout_policy": {"timeout_ms": 60000},
    "meters": [{"name": "sends", "measure": "calls", "scope": "subject", "windows": ["1h", "session"]}],
}


def policies(n: int) -> str:
    """One permit under a ceiling and ``n - 1`` forbids, each on a recipient and the meter."""
    out = [
        (
            '@id("send-under-ceiling")\n'
            'permit (principal, action == Action::"mail.send", resource)\n'
            'when { principal.tenant == context.tenant && context.usage.sends["1h"].after <= 100000000 };\n'
        )
    ]
    for i in range(n - 1):
        out.append(
            f'@id("blocked-{i}")\n'
            'forbid (principal, action == Action::"mail.send", resource)\n'
            f'when {{ context.args.to == "blocked{i}@example.com" && '
            f'context.usage.sends["session"].after > {i % 7} }};\n'
        )
    return "\n".join(out)


def folder(root: Path, n: int) -> Path:
    d = root / f"policies-{n}"
    (d / "tools").mkdir(parents=True)
    (d / "cedar").mkdir()
    (d / "tools" / "mail.send@v1.json").write_text(json.dumps(TOOL))
    (d / "cedar" / "policies.cedar").write_text(policies(n))
    (d / "principals.json").write_text(json.dumps({"tenants": ["acme"]}))
    return d


def fsync_floor_ms(where: Path, n: int = 300) -> float:
    """Median of an fsync'd 128-byte append on this disk (Dogwood's durability floor)."""
    path = where / "floor.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 128)
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    times.sort()
    return times[len(times) // 2] * 1000


async def sessions(target: str, count: int, tag: str) -> list[str]:
    async with grpc.aio.insecure_channel(target) as ch:
        await ready(ch)
        gate = pb_grpc.GateStub(ch)
        out = []
        for i in range(count):
            sid = (await gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id=f"{tag}-{i}"), timezone="UTC")
            )).session_id  # fmt: skip
            await gate.ListTools(pb.ListToolsRequest(session_id=sid, model_call_id="bench"))
            out.append(str(sid))
        return out


def proposal(sid: str, i: int, recipients: int = 97) -> pb.ProposeRequest:
    return pb.ProposeRequest(
        session_id=sid, model_call_id="bench", proposal_id=f"p{i}", tool_name="mail.send", tool_version="v1",
        arguments=json.dumps({"to": f"user{i % recipients}@example.com"}).encode(),
    )  # fmt: skip


def load1() -> float:
    return os.getloadavg()[0]


async def point(sc: Any, go: GoLoad, n: int, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    sids = await sessions(sc.agent, args.subjects, f"s{n}-{rate:g}")
    count = int(rate * args.seconds) + 200
    reqs = go.requests(f"p{n}-{rate:g}", [proposal(sids[i % len(sids)], i) for i in range(count)])
    last = go.tmp / "last.bin"
    cpu0, la = sc.cpu_seconds(), load1()
    r = go.run(PROPOSE, reqs, seconds=args.seconds, rate=rate, last=last, timeout="30s")
    cpu = (sc.cpu_seconds() - cpu0) / max(1, r["n"])
    out = report_go(
        f"{n} policies, open loop {rate:g}/s",
        r,
        f"  achieved={r['throughput_rps']:.0f}/s  CPU/call={cpu * 1e6:.0f} us  load1={la:.2f}",
    )
    out.update(offered_rps=rate, cpu_us_per_call=cpu * 1e6, load1=la)
    if r["n"]:
        answer = pb.ProposeResponse.FromString(last.read_bytes())
        assert answer.state == pb.PREPARED and answer.decision.effect == pb.ALLOW, answer
    return out


def variant(root: Path, name: str, labels: dict[str, list[str]]) -> Path:
    """A copy of the example folder without its meter, with ``labels`` as the only result labels
    (ToolSpec file -> labels; none: the folder before issue 30 item 6, as the engines see it)."""
    import shutil

    d = root / name
    shutil.copytree(ROOT / "policies", d)
    for spec_file in (d / "tools").glob("*.json"):
        spec = json.loads(spec_file.read_text())
        spec.pop("result_labels", None)
        spec.pop("meters", None)
        if spec_file.name in labels:
            spec["result_labels"] = labels[spec_file.name]
        spec_file.write_text(json.dumps(spec))
    return d


async def example_cost(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    from bench_propose import proposal as weather

    folders = {
        "labelled (as shipped)": ROOT / "policies",
        "without meter and label": variant(root, "plain", {}),
        "label on calendar only": variant(root, "calendar", {"calendar.create_event@v1.json": ["untrusted"]}),
    }
    out: dict[str, Any] = {}
    for rnd in range(2):
        for name, d in folders.items():
            with sidecar(policy_dir=d) as sc:
                go = GoLoad(target=sc.agent, tmp=root)
                (sid,) = await sessions(sc.agent, 1, "alice")
                reqs = go.requests(
                    f"ex{rnd}", [weather(sid, i) for i in range(int(3000 * args.seconds) + 2000)]
                )
                go.run(PROPOSE, reqs, seconds=1.0, inflight=args.inflight, offset=int(3000 * args.seconds))
                cpu0, la = sc.cpu_seconds(), load1()
                r = go.run(PROPOSE, reqs, seconds=args.seconds, inflight=args.inflight)
                cpu = (sc.cpu_seconds() - cpu0) / max(1, r["n"])
                got = report_go(
                    f"example {name} ({rnd + 1})", r, f"  CPU/call={cpu * 1e6:.0f} us  load1={la:.2f}"
                )
                got.update(cpu_us_per_call=cpu * 1e6, load1=la)
                out.setdefault(name, []).append(got)
    base = statistics.median(x["cpu_us_per_call"] for x in out["without meter and label"])
    for name in folders:
        ratio = statistics.median(x["cpu_us_per_call"] for x in out[name]) / base
        print(f"example folder, {name}: CPU per Propose / without meter and label = {ratio:.2f}x")
        out[f"cpu_ratio {name}"] = ratio
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--policies", default="10,100")
    ap.add_argument("--ramp", default="250,400,500,700", help="open-loop rates after 100/s")
    ap.add_argument("--rates", default="", help="open-loop rates instead of 100/s and the ramp")
    ap.add_argument("--durability", default="barrier", choices=("barrier", "per_answer"))
    ap.add_argument("--subjects", type=int, default=64)
    ap.add_argument("--example", action="store_true", help="only the example folder's label cost")
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    print(machine_line(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="cg-dogwood-"))
    if args.example:
        dump(args.json, await example_cost(root, args))
        return
    floor = fsync_floor_ms(root)
    print(f"fsync floor here: {floor:.3f} ms per append ({1000 / floor:.0f}/s)  (Dogwood's: 1.18 ms)")
    res: dict[str, Any] = {
        "fsync_floor_ms": floor,
        "durability": args.durability,
        "dogwood_published": DOGWOOD,
    }
    rates = [100.0] + [float(x) for x in args.ramp.split(",") if x]
    if args.rates:
        rates = [float(x) for x in args.rates.split(",") if x]
    print(f"durability: {args.durability}", flush=True)
    for n in (int(x) for x in args.policies.split(",") if x):
        with sidecar(policy_dir=folder(root, n), durability=args.durability) as sc:
            go = GoLoad(target=sc.agent, tmp=root)
            (warm,) = await sessions(sc.agent, 1, "warm")
            go.run(
                PROPOSE, go.requests("warm", [proposal(warm, i) for i in range(600)]), seconds=2.0, inflight=4
            )
            for rate in rates:
                res[f"{n} policies @ {rate:g}/s"] = await point(sc, go, n, rate, args)
    for key, theirs in DOGWOOD.items():
        ours = res.get(key)
        if isinstance(theirs, dict) and ours:
            print(
                f"{key:<24} callgate p50 {ours['p50_ms']:.2f} ms p99 {ours['p99_ms']:.2f} ms "
                f"achieved {ours['throughput_rps']:.0f}/s | Dogwood p50 {theirs['p50_ms']} ms "
                f"p99 {theirs['p99_ms']} ms achieved {theirs['achieved']}/s"
            )
    dump(args.json, res)


if __name__ == "__main__":
    asyncio.run(main())
