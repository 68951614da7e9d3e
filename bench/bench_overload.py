"""Overload benchmark (issue 9, issue 34 item 7): goodput, admitted latency, health, memory and
recovery beyond capacity, with the load generator on the same cores as the sidecar.

`callgate serve` runs as a separate process (Cedar + SQLite, synchronous=FULL) and
``bench/loadgen`` (Go, one HTTP/2 connection per process) drives Propose of ``weather.get@v1``:

1. capacity: ``--concurrency`` calls in flight, closed loop (completed calls per second), on
   a sidecar with that many calls as a fixed limit (a closed loop re-sends a refused call at
   once, so against the adaptive limit it would measure refusals, not capacity); its sidecar CPU
   per answer is the CPU of an admitted call;
2. unloaded: an open loop at a quarter of capacity on a second sidecar with the admission under
   test (defaults, or ``--before``, or ``--server-toml`` lines), its metrics endpoint on;
3. per factor of ``--factors``: an open loop at that multiple of capacity for ``--seconds``, and
   beside it, from its own process and connection, a calm caller at a quarter of capacity that
   goes on ``--tail`` seconds after the load stops (the recovery), while a thread probes health
   on the agent's Unix socket every 20 ms (like the chart's probes) and samples the sidecar's RSS.

Reported per factor (docs/BENCHMARKS.md, "Issue 34 item 7"): offered rate, goodput (answers per
second) as a fraction of capacity, admitted p99 from acceptance (the sidecar's own histogram of
admitted calls' time from the admission to the answer, ``callgate_admission_seconds``: the upper
bound of the bucket holding the 99th percentile) against 4x the latency target, the client's p99
from the scheduled send, answers after their deadline (the sidecar's count), health refusals, RSS
against unloaded, the recovery time of the calm caller's p99 (the end of the first 0.5 s window
after which every window is within 2x the unloaded p99), refusals by where they happened (in
Python by the admission; in gRPC core, seen by the client as ``CANCELLED``), and where the CPU
went: sidecar CPU per admitted call (capacity run) and per refusal (the rest of its CPU in the
phase over the refusals), the share of the sidecar's CPU that went into answered calls (answers
x the capacity run's CPU per answer / the sidecar's CPU: goodput against what the sidecar got,
whatever the generators and the rest of the box took), the generators' CPU and the rest of the
box (other processes). At the
end, the sidecar's event loop is stalled for 3 s (``bench/_stall_serve.py``, SIGUSR1) under an
open loop at 2x: every call beyond the pending bound is then dropped by gRPC core alone, and the
sidecar's CPU over the stall over those drops is the CPU of one drop (a refusal in Python costs
about a bare ``health.Check``: ``bench/bench_refusal.py``).

    .venv/bin/python bench/bench_overload.py [--seconds 10] [--factors 2,5] [--concurrency 16]
        [--timeout 1s] [--tail 3] [--server-toml '...'] [--before] [--checkout /work/main]

One run takes about a minute at the defaults (60-67 s measured at load averages 9-11).
The rerun for a quiet machine: `.venv/bin/python bench/bench_overload.py --json /tmp/overload.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from _harness import GoLoad, dump, free_port, machine_line, report_go, sidecar
from bench_propose import PROPOSE, open_session, proposal
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.config import ServerConfig
from callgate.gen.v1 import callgate_pb2 as pb

FIXED_LIMIT = "max_concurrent_rpcs = {c}\nadmission_min_in_flight = {c}\nadmission_target_ms = 1000000\nmax_pending_rpcs = 0\n"
"""``[server]`` lines of the capacity sidecar: a fixed limit of ``--concurrency`` calls, no
adaptation (a closed loop re-sends a refused call at once, which measures the refusals)."""
BEFORE = "max_concurrent_rpcs = 128\nadmission_target_ms = 0\nmax_pending_rpcs = 0\n"
"""``[server]`` lines of the admission before issue 9 (``--before``): gRPC's fixed limit of 128
calls, gRPC core's default pending queue, deadlines not consulted."""
WINDOW = 0.5
"""Width of the recovery windows, seconds (stepped by a quarter of it)."""
RECOVERY_RATIO = 2.0
"""The recovery target: the calm caller's p99 within this multiple of the unloaded p99."""
STALL_S = 3.0
"""How long the sidecar's event loop is stalled to measure gRPC core's drops alone (seconds)."""
STALL_RUNNER = (str(Path(__file__).with_name("_stall_serve.py")),)
"""``callgate serve`` that stalls its event loop on SIGUSR1 (the sidecar under test)."""
TICK = os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def busy_seconds() -> float:
    """CPU seconds all processes of the box have used (``/proc/stat``: all but idle and iowait)."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(url: str) -> dict[str, float]:
    """The agent listener's ``callgate_admission_*`` samples, by name and labels."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("callgate_admission_") and 'listener="agent"' in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def admitted_p99_ms(before: dict[str, float], after: dict[str, float]) -> float:
    """The upper bound (ms) of the histogram bucket holding the 99th percentile of the admitted
    calls between two scrapes (``inf`` when it is in the open last bucket)."""
    rows = []
    for name, count in after.items():
        m = re.match(r'callgate_admission_seconds_bucket\{.*le="([^"]+)".*\}', name)
        if m:
            rows.append((float(m.group(1)), count - before.get(name, 0.0)))
    rows.sort()
    total = rows[-1][1] if rows else 0.0
    for bound, cumulative in rows:
        if total and cumulative >= 0.99 * total:
            return bound * 1000
    return 0.0


def delta(before: dict[str, float], after: dict[str, float], prefix: str) -> float:
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(prefix))


@dataclass
class Go:
    """One loadgen process started now (its CPU read from ``wait4`` when it ends)."""

    proc: subprocess.Popen[bytes]
    result: dict[str, Any] = field(default_factory=dict)
    cpu_s: float = 0.0

    @classmethod
    def start(cls, go: GoLoad, reqs: Path, *, seconds: float, rate: float, offset: int, timeout: str,
              trace: Path | None = None, last: Path | None = None) -> Go:  # fmt: skip
        args = [go.binary, "-target", go.target, "-method", PROPOSE, "-requests", str(reqs),
                "-duration", f"{seconds}s", "-offset", str(offset), "-mode", "open", "-rate", str(rate),
                "-timeout", timeout]  # fmt: skip
        if trace is not None:
            args += ["-trace", str(trace)]
        if last is not None:
            args += ["-last", str(last)]
        return cls(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))

    def wait(self) -> Go:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        _, _, ru = os.wait4(self.proc.pid, 0)
        self.proc.returncode = 0
        self.cpu_s = ru.ru_utime + ru.ru_stime
        if not out:
            raise RuntimeError("loadgen printed nothing")
        self.result = json.loads(out)
        return self


class Prober(threading.Thread):
    """Health checks on the agent's Unix socket every 20 ms (1 s deadline each, like a probe)
    and the sidecar's RSS, until stopped."""

    def __init__(self, socket: Path, pid: int) -> None:
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        self.stub = health_pb2_grpc.HealthStub(self.channel)
        self.pid = pid
        self.checks = 0
        self.refused: dict[str, int] = {}
        self.max_rss = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.max_rss = max(self.max_rss, rss_mib(self.pid))
            self.checks += 1
            try:
                st = self.stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0).status
                if st != health_pb2.HealthCheckResponse.SERVING:
                    self.refused["NOT_SERVING"] = self.refused.get("NOT_SERVING", 0) + 1
            except grpc.RpcError as exc:
                name = exc.code().name  # type: ignore[attr-defined]
                self.refused[name] = self.refused.get(name, 0) + 1

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.channel.close()


def recovery_s(trace: Path, stop_s: float, end_s: float, unloaded_p99_ms: float) -> float:
    """Seconds after ``stop_s`` until the calm caller's p99 stays within the target: the end of
    the first window from which every later window (until ``end_s``) is within it; failed calls
    count as infinitely slow. ``inf`` if it never is."""
    calls = []
    for line in trace.read_text().splitlines():
        start_us, lat_us, ok = (int(x) for x in line.split())
        calls.append((start_us / 1e6, lat_us / 1e3 if ok else float("inf")))
    limit = RECOVERY_RATIO * unloaded_p99_ms
    starts = [stop_s + k * WINDOW / 4 for k in range(int((end_s - stop_s - WINDOW) / (WINDOW / 4)) + 1)]
    good = []
    for t in starts:
        lat = sorted(x for s, x in calls if t <= s < t + WINDOW)
        good.append(bool(lat) and lat[min(len(lat) - 1, int(0.99 * len(lat)))] <= limit)
    for i in range(len(starts)):
        if all(good[i:]):
            return starts[i] + WINDOW - stop_s
    return float("inf")


class Bench:
    """The phases against the sidecar under test (one request file, a running offset)."""

    def __init__(self, args: argparse.Namespace, sc: Any, sid: str, count: int, metrics: str) -> None:
        self.args, self.sc, self.metrics = args, sc, metrics
        self.go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-overload-")))
        self.reqs = self.go.requests("propose", [proposal(sid, i) for i in range(count)])
        self.last = self.go.tmp / "last.bin"
        self.offset = 0
        self.go.run(PROPOSE, self.reqs, seconds=1.0, inflight=4, offset=count - 5000)  # warm-up

    def take(self, n: float) -> int:
        at = self.offset
        self.offset += int(n) + 100
        return at

    def unloaded(self, rate: float) -> dict[str, Any]:
        s = self.args.seconds
        m0, cpu0 = scrape(self.metrics), self.sc.cpu_seconds()
        g = Go.start(
            self.go, self.reqs, seconds=s, rate=rate, offset=self.take(rate * s), timeout=self.args.timeout
        )
        r = g.wait().result
        m1 = scrape(self.metrics)
        out = report_go(f"unloaded: open loop {rate:.0f}/s", r)
        out["admitted_p99_from_acceptance_ms"] = admitted_p99_ms(m0, m1)
        out["sidecar_cpu_per_answer_us"] = (self.sc.cpu_seconds() - cpu0) / max(1, r["n"]) * 1e6
        out["rss_mib"] = rss_mib(self.sc.proc.pid)
        return out

    def core_drops(self, rate: float) -> dict[str, Any]:
        """The CPU of a call gRPC core drops: the event loop stalled for :data:`STALL_S` (SIGUSR1)
        while an open loop at ``rate`` runs inside the stall; every call beyond the pending bound
        is dropped before Python, and the sidecar's CPU over the stall is all gRPC core's."""
        a = self.args
        go = Go.start(self.go, self.reqs, seconds=STALL_S - 1.0, rate=rate, offset=self.take(rate * STALL_S),
                      timeout=a.timeout)  # fmt: skip
        time.sleep(0.1)  # the generator's start-up, before the stall
        os.kill(self.sc.proc.pid, signal.SIGUSR1)
        cpu0, t0 = self.sc.cpu_seconds(), time.monotonic()
        time.sleep(STALL_S - 0.2)
        cpu = self.sc.cpu_seconds() - cpu0
        wall = time.monotonic() - t0
        r = go.wait().result
        drops = r["error_codes"].get("Canceled", 0)
        if drops < 100:  # e.g. a stream limit held the calls in the client: nothing to divide by
            print(
                f"gRPC core drops (event loop stalled {STALL_S:g} s): only {drops}, not measured", flush=True
            )
            return {"drops": drops, "sidecar_cpu_s": cpu, "cpu_per_drop_us": 0.0, "wall_s": wall}
        out = {"drops": drops, "sidecar_cpu_s": cpu, "cpu_per_drop_us": cpu / max(1, drops) * 1e6,
               "generator_cpu_per_call_us": go.cpu_s / max(1, r["n"] + r["errors"]) * 1e6, "wall_s": wall}  # fmt: skip
        print(
            f"gRPC core drops (event loop stalled {STALL_S:g} s, open loop {rate:.0f}/s): {drops} CANCELLED, "
            f"sidecar CPU per drop {out['cpu_per_drop_us']:.0f} us; generator CPU per call "
            f"{out['generator_cpu_per_call_us']:.0f} us; load average {loadavg()}",
            flush=True,
        )
        return out

    def overload(
        self, factor: float, capacity: float, unloaded: dict[str, Any], admitted_cpu: float
    ) -> dict[str, Any]:
        a, s, tail = self.args, self.args.seconds, self.args.tail
        rate, calm = capacity * factor, capacity / 4
        prober = Prober(self.sc.tmp / "agent.sock", self.sc.proc.pid)
        trace = self.go.tmp / f"calm-{factor:g}.txt"
        m0, cpu0, box0, t0 = scrape(self.metrics), self.sc.cpu_seconds(), busy_seconds(), time.monotonic()
        self_cpu0 = time.process_time()
        prober.start()
        calm_go = Go.start(self.go, self.reqs, seconds=s + tail, rate=calm, offset=self.take(calm * (s + tail)),
                           timeout=a.timeout, trace=trace)  # fmt: skip
        load = Go.start(self.go, self.reqs, seconds=s, rate=rate, offset=self.take(rate * s), timeout=a.timeout,
                        last=self.last).wait()  # fmt: skip
        cpu_load, wall_load = self.sc.cpu_seconds() - cpu0, time.monotonic() - t0
        box_load = busy_seconds() - box0
        m1 = scrape(self.metrics)
        calm_go.wait()
        prober.stop()
        m2 = scrape(self.metrics)
        r = load.result
        codes = dict(r["error_codes"])  # both callers' refusals (the calm one's mostly in the load)
        for code, n in calm_go.result["error_codes"].items():
            codes[code] = codes.get(code, 0) + n
        in_python = delta(m0, m1, "callgate_admission_refused_total")
        in_core = codes.get("Canceled", 0)
        refused = sum(codes.values())
        rest_cpu = cpu_load - admitted_cpu * delta(m0, m1, "callgate_admission_seconds_count")
        gen_cpu = load.cpu_s + calm_go.cpu_s * s / (s + tail) + (time.process_time() - self_cpu0)
        goodput = r["throughput_rps"] / max(1e-9, capacity)
        # the sidecar's CPU that went into answered calls (at the capacity run's CPU per answer):
        # goodput against what the sidecar got, whatever the generators and the box took
        answered = r["n"] + calm_go.result["n"] * s / (s + tail)
        useful = answered * admitted_cpu / max(1e-9, cpu_load)
        p99_acc = admitted_p99_ms(m0, m1)
        late = delta(m0, m2, "callgate_admission_late_answers_total")
        rec = recovery_s(trace, s, s + tail, unloaded["p99_ms"])
        rss_ratio = prober.max_rss / max(1e-9, unloaded["rss_mib"])
        out = report_go(f"{factor:g}x: open loop {rate:.0f}/s", r)
        out.update(
            offered_rps=rate, goodput_fraction_of_capacity=goodput, admitted_p99_from_acceptance_ms=p99_acc,
            client_p99_from_scheduled_send_ms=r["percentiles_ms"].get("99", 0.0), late_answers=late,
            health_checks=prober.checks, health_refused=prober.refused, rss_max_mib=prober.max_rss,
            rss_ratio=rss_ratio, recovery_s=rec, refused_in_python=in_python, refused_in_core=in_core,
            refused_total=refused, calm=calm_go.result, generator_late_sends=r["late"],
            sidecar_cpu_s=cpu_load, sidecar_cpu_per_refusal_us=rest_cpu / max(1, refused) * 1e6,
            generator_cpu_s=gen_cpu, box_busy_s=box_load, wall_s=wall_load, sidecar_cpu_on_answers=useful,
        )  # fmt: skip
        target_ms = 4 * a.target_ms
        print(
            f"  offered {rate:.0f}/s (+ calm {calm:.0f}/s): goodput {goodput:.0%} of capacity (>= 80%: "
            f"{'met' if goodput >= 0.8 else 'NOT met'}); admitted p99 from acceptance <= {p99_acc:.0f} ms "
            f"(<= {target_ms} ms: {'met' if p99_acc <= target_ms else 'NOT met'}); client p99 from scheduled "
            f"send {out['client_p99_from_scheduled_send_ms']:.0f} ms; late answers {late:.0f}; health refused "
            f"{sum(prober.refused.values())} of {prober.checks}; RSS {prober.max_rss:.0f} MiB = {rss_ratio:.2f}x "
            f"unloaded (<= 1.5); recovery {rec:.2f} s (<= 2)\n"
            f"  refusals {refused} = {in_python:.0f} in Python (admission) + {in_core} in gRPC core (CANCELLED)"
            f" + {refused - in_python - in_core:.0f} other {codes}; CPU per refusal {out['sidecar_cpu_per_refusal_us']:.0f} us"
            f" (admitted {admitted_cpu * 1e6:.0f} us); sidecar CPU on answered calls {useful:.0%};"
            f" cores over {wall_load:.1f} s: sidecar {cpu_load / wall_load:.2f},"
            f" generators {gen_cpu / wall_load:.2f}, rest of box {(box_load - cpu_load - gen_cpu) / wall_load:.2f}"
            f" of {os.cpu_count()}; generator late sends {r['late']}; load average {loadavg()}",
            flush=True,
        )
        if r["n"]:
            answer = pb.ProposeResponse.FromString(self.last.read_bytes())
            assert answer.state == pb.PREPARED and answer.decision.effect == pb.ALLOW, answer
        return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--tail", type=float, default=3.0, help="seconds the calm caller goes on after the load")
    ap.add_argument("--factors", default="2,5", help="open-loop rates as multiples of capacity")
    ap.add_argument("--concurrency", type=int, default=16, help="closed loop measuring capacity")
    ap.add_argument("--timeout", default="1s", help="per-call gRPC deadline (Go duration)")
    ap.add_argument("--server-toml", default="", help="[server] lines of the measured sidecar")
    ap.add_argument("--before", action="store_true", help="measure the admission before issue 9")
    ap.add_argument("--checkout", type=Path, default=None, help="another checkout (with .venv) to measure")
    ap.add_argument("--json")
    args = ap.parse_args()
    started = time.monotonic()
    print(f"load average at start {loadavg()}", flush=True)
    where = {"checkout": args.checkout.resolve()} if args.checkout else {}
    s = args.seconds
    factors = [float(f) for f in args.factors.split(",") if f]
    server_toml = (BEFORE if args.before else "") + args.server_toml
    target = re.search(r"admission_target_ms\s*=\s*(\d+)", server_toml)
    args.target_ms = int(target.group(1)) if target else ServerConfig().admission_target_ms
    res: dict[str, Any] = {"load_average_start": loadavg()}
    # 1. capacity, on a sidecar with a fixed limit of --concurrency
    with sidecar(server_toml=FIXED_LIMIT.format(c=args.concurrency), **where) as sc:
        sid = await open_session(sc.agent)
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-overload-")))
        reqs = go.requests("propose", [proposal(sid, i) for i in range(int(4000 * s) + 6000)])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=4, offset=int(4000 * s) + 1000)  # warm-up
        cpu0 = sc.cpu_seconds()
        r = go.run(PROPOSE, reqs, seconds=s, inflight=args.concurrency, timeout=args.timeout)
        admitted_cpu = (sc.cpu_seconds() - cpu0) / max(1, r["n"])
        res["capacity"] = report_go(
            f"capacity: {args.concurrency} in flight", r, f"  sidecar CPU/answer={admitted_cpu * 1e6:.0f} us"
        )
        res["capacity"]["sidecar_cpu_per_answer_us"] = admitted_cpu * 1e6
    capacity = res["capacity"]["throughput_rps"]
    # 2. unloaded and overload, on a sidecar with the admission under test and its metrics
    metrics_port = free_port()
    extra = f'[observability]\nmetrics_address = "127.0.0.1:{metrics_port}"\n'
    with sidecar(server_toml=server_toml, extra_toml=extra, runner=STALL_RUNNER, **where) as sc:
        sid = await open_session(sc.agent)
        count = int(capacity * (s * (0.3 + sum(factors)) + (s + args.tail) * 0.3 * len(factors))) + 6000
        b = Bench(args, sc, sid, count, f"http://127.0.0.1:{metrics_port}/metrics")
        unloaded = res["unloaded"] = b.unloaded(capacity / 4)
        for f in factors:
            res[f"overload_{f:g}x"] = b.overload(f, capacity, unloaded, admitted_cpu)
        drop = res["core_drops"] = b.core_drops(capacity * 2)
        for f in factors:  # where the sidecar's CPU went in each overload phase
            r = res[f"overload_{f:g}x"]
            dropped_cores = drop["cpu_per_drop_us"] * 1e-6 * r["refused_in_core"] / r["wall_s"]
            r["sidecar_cores_on_core_drops"] = dropped_cores
            print(
                f"  {f:g}x: sidecar {r['sidecar_cpu_s'] / r['wall_s']:.2f} cores (capacity run "
                f"{capacity * admitted_cpu:.2f}): about {dropped_cores:.2f} on gRPC core's drops, the rest on "
                f"answers and refusals in Python; generators {r['generator_cpu_s'] / r['wall_s']:.2f}, rest of box "
                f"{(r['box_busy_s'] - r['sidecar_cpu_s'] - r['generator_cpu_s']) / r['wall_s']:.2f}",
                flush=True,
            )
        res["summary"] = {
            "timeout": args.timeout, "before": args.before, "server_toml": server_toml,
            "target_ms": args.target_ms, "sidecar_peak_rss_mib": sc.peak_rss_mib,
            "load_average_end": loadavg(), "runtime_s": time.monotonic() - started,
        }  # fmt: skip
    for line in (sc.tmp / "sidecar.log").read_text().splitlines():
        if "admission agent:" in line:  # logged by the sidecar when it stops
            print("sidecar " + line[line.index("admission agent:") :])
    print(
        f"{machine_line()}, client go, listener tcp, synchronous=full, deadline {args.timeout}; "
        f"load average at end {loadavg()}; run took {time.monotonic() - started:.0f} s"
    )
    dump(args.json, res)


if __name__ == "__main__":
    asyncio.run(main())
