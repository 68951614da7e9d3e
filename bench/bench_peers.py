"""Issue 15 benchmark: callgate's Authorize (Cedar) against a bare health.Check on the same server
and listener, with the same decision on peer PDPs beside it (OPA's REST API, Cerbos if built).

One real ``callgate serve`` (the example policies, Cedar, default core and durability); the Go
load generator (``bench/loadgen``, built by ``scripts/loadgen``) replays pre-serialized
``AuthorizeRequest`` messages on the authorizer listener (Unix socket) and, interleaved with them
in each round, ``grpc.health.v1.Health/Check`` on the same listener: 1 and N calls in flight.
Printed: p50/p99/throughput, the server's CPU per call (/proc/PID/stat, all threads), and the
ratio Authorize/Check (the issue's target at N=16: >= 0.85).

The decision mix (both example policies): bob reads the weather in his tenant (allow,
``weather-read-own-tenant``) and bob deletes a file (deny: not an admin). Beside it:

* **OPA** (the pinned binary from ``scripts/opa``) serving ``policies/rego`` as callgate's opa
  engine uses it: ``POST /v1/data/callgate/authz/decision`` with the engine's own input document,
  driven by ``bench/httpload`` (Go, HTTP/1.1 keep-alive, one connection per call in flight, built
  by ``scripts/httpload``); its floor is ``GET /health`` with the same client.
* **Cerbos** (``scripts/cerbos`` builds it into ~/.cache/callgate/cerbos; skipped with a printed
  reason when the binary is missing): resource policies equivalent to the two (``weather.read``
  for any principal of the resource's tenant; ``files.delete`` for role admin, not under /etc),
  ``cerbos.svc.v1.CerbosService/CheckResources`` over gRPC with the same Go load generator; its
  floor is its own ``Health/Check``.

Under the default ``store.durability = "barrier"`` an Authorize *allow* is answered after an fsync
(docs/CONFIG.md), so the allow half of the mix pays one; ``--durability per_answer --synchronous
normal`` runs without any fsync (not durable against power loss).

    .venv/bin/python bench/bench_peers.py [--seconds 5] [--concurrency 16] [--rounds 2] [--json out.json]
                                          [--only callgate,opa,cerbos] [--durability barrier]
                                          [--synchronous full]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
from _harness import ROOT, GoLoad, dump, free_port, machine_line, report_go, sidecar
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.base.model import AuthzRequest, Subject
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.policy.engines.rego_contract import build_input

AUTHORIZE = "/callgate.v1.Authorizer/Authorize"
CHECK = "/grpc.health.v1.Health/Check"
CERBOS_CHECK = "/cerbos.svc.v1.CerbosService/CheckResources"
CERBOS_BIN = Path(os.environ.get("CALLGATE_CERBOS", Path.home() / ".cache/callgate/cerbos/cerbos"))

# (subject, capability, resource, context, expected effect)
DECISIONS = [
    ("bob", "weather.read", "weather:Paris",
     {"tool": "weather.get@v1", "args": {"city": "Paris", "date": "2026-07-20"}}, "allow"),
    ("bob", "files.delete", "file:/tmp/x", {"tool": "files.delete@v1", "args": {"path": "/tmp/x"}}, "deny"),
]  # fmt: skip


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_http(url: str, what: str) -> None:
    for _ in range(400):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


def records(path: Path, bodies: list[bytes]) -> Path:
    with open(path, "wb") as fh:
        for b in bodies:
            fh.write(len(b).to_bytes(4, "big") + b)
    return path


class Pair:
    """Decision vs floor on one server, interleaved: floor, decision at 1 in flight, then at N."""

    def __init__(self, name: str, pid: int, run: Any) -> None:
        self.name, self.pid, self.run = name, pid, run
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def measure(self, label: str, key: str, kind: str, inflight: int, seconds: float) -> None:
        cpu0 = cpu_seconds(self.pid)
        r = self.run(kind, inflight, seconds)
        cpu = (cpu_seconds(self.pid) - cpu0) / max(1, r["n"])
        out = report_go(
            f"{self.name} {label}, {inflight} in flight", r, f"  server CPU/call={cpu * 1e6:.0f} us"
        )
        out["server_cpu_us_per_call"] = cpu * 1e6
        self.rows.setdefault(key, []).append(out)

    def rounds(self, n: int, c: int, seconds: float, floor: str, decision: str) -> dict[str, Any]:
        self.run("decision", 4, 1.0)  # warm-up
        self.run("floor", 4, 1.0)
        for k in range(n):
            print(f"-- {self.name}, round {k + 1}/{n}", flush=True)
            for inflight in (1, c):
                self.measure(floor, f"floor_{inflight}", "floor", inflight, seconds)
                self.measure(decision, f"decision_{inflight}", "decision", inflight, seconds)
        res: dict[str, Any] = {"rounds": self.rows, "rss_mib": rss_mib(self.pid)}
        for key, rows in self.rows.items():
            res[key] = {f: statistics.median(r[f] for r in rows)
                        for f in ("p50_ms", "p99_ms", "throughput_rps", "server_cpu_us_per_call")}  # fmt: skip
        for inflight in (1, c):
            d, f = res[f"decision_{inflight}"], res[f"floor_{inflight}"]
            res[f"ratio_{inflight}"] = d["throughput_rps"] / f["throughput_rps"]
            res[f"added_cpu_us_{inflight}"] = d["server_cpu_us_per_call"] - f["server_cpu_us_per_call"]
        return res


def run_callgate(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with sidecar(policy='engine = "cedar"', durability=args.durability, synchronous=args.synchronous) as sc:
        target = sc.authorizer.replace("unix:", "unix://", 1)
        go = GoLoad(target=target, tmp=tmp)
        reqs = []
        for s, cap, res, ctx, _ in DECISIONS:
            st = struct_pb2.Struct()
            st.update(ctx)
            reqs.append(pb.AuthorizeRequest(subject=pb.Subject(tenant="acme", id=s), capability=cap, resource=res, context=st))  # fmt: skip
        files = {"decision": (AUTHORIZE, go.requests("authorize", reqs)),
                 "floor": (CHECK, go.requests("check", [health_pb2.HealthCheckRequest()]))}  # fmt: skip
        deadline = time.monotonic() + 60
        with grpc.insecure_channel(sc.authorizer) as ch:  # SERVING on the authorizer listener
            while time.monotonic() < deadline:
                try:
                    if (
                        health_pb2_grpc.HealthStub(ch)
                        .Check(health_pb2.HealthCheckRequest(), timeout=1)
                        .status
                        == 1
                    ):
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError("the sidecar never became SERVING")
        with grpc.insecure_channel(sc.authorizer) as ch:  # the decisions are the expected ones
            stub = pb_grpc.AuthorizerStub(ch)
            for req, (*_, effect) in zip(reqs, DECISIONS, strict=True):
                got = stub.Authorize(req, timeout=10).decision.effect
                assert got == {"allow": pb.ALLOW, "deny": pb.DENY}[effect], (req, got)

        def run(kind: str, inflight: int, seconds: float) -> dict[str, Any]:
            method, path = files[kind]
            return go.run(method, path, seconds=seconds, inflight=inflight)

        return Pair("callgate", sc.proc.pid, run).rounds(args.rounds, args.concurrency, args.seconds, "health.Check", "Authorize (Cedar)")  # fmt: skip


def run_opa(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    binary = subprocess.check_output(["bash", str(ROOT / "scripts" / "opa"), "path"], text=True).strip()
    client = subprocess.check_output(["bash", str(ROOT / "scripts" / "httpload"), "path"], text=True).strip()
    version = subprocess.run([binary, "version"], capture_output=True, text=True).stdout.splitlines()[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, "run", "--server", "--addr", f"127.0.0.1:{port}", "--log-level", "error", "--skip-version-check",
         "--ignore", "*_test.rego", str(ROOT / "policies" / "rego")],
        stdout=open(tmp / "opa.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_http(url + "/health", "OPA")
        bodies = [json.dumps({"input": build_input(AuthzRequest(Subject("acme", s), cap, r, ctx))}).encode()
                  for s, cap, r, ctx, _ in DECISIONS]  # fmt: skip
        for body, (*_, effect) in zip(bodies, DECISIONS, strict=True):
            req = urllib.request.Request(url + "/v1/data/callgate/authz/decision", body, {"Content-Type": "application/json"})  # fmt: skip
            got = json.loads(urllib.request.urlopen(req, timeout=5).read())["result"]["effect"]
            assert got == effect, (got, effect)
        files = {"decision": (url + "/v1/data/callgate/authz/decision", records(tmp / "opa.bin", bodies)),
                 "floor": (url + "/health", records(tmp / "empty.bin", [b""]))}  # fmt: skip

        def run(kind: str, inflight: int, seconds: float) -> dict[str, Any]:
            u, path = files[kind]
            verb = ["-get"] if kind == "floor" else []
            p = subprocess.run([client, "-url", u, "-requests", str(path), "-concurrency", str(inflight),
                                "-duration", f"{seconds}s", *verb], capture_output=True, text=True)  # fmt: skip
            if not p.stdout:
                raise RuntimeError(f"httpload failed: {p.stderr.strip()}")
            out: dict[str, Any] = json.loads(p.stdout)
            return out

        res = Pair("OPA REST", proc.pid, run).rounds(args.rounds, args.concurrency, args.seconds, "GET /health", "POST decision")  # fmt: skip
        res["version"] = version
        return res
    finally:
        proc.terminate()
        proc.wait(10)


# --- Cerbos: the request is encoded by hand (no Cerbos stubs in the venv) --------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _attr(key: str, value: str) -> bytes:  # map<string, google.protobuf.Value> entry
    return _ld(1, key.encode()) + _ld(2, _ld(3, value.encode()))  # Value.string_value = 3


def cerbos_request(subject: str, action: str, kind: str, rid: str, attrs: dict[str, str]) -> bytes:
    roles = {"alice": "scheduler", "carol": "admin"}.get(subject, "user")
    principal = _ld(1, subject.encode()) + _ld(3, roles.encode()) + _ld(4, _attr("tenant", "acme"))
    resource = (
        _ld(1, kind.encode()) + _ld(3, rid.encode()) + b"".join(_ld(4, _attr(k, v)) for k, v in attrs.items())
    )
    entry = _ld(1, action.encode()) + _ld(2, resource)
    return _ld(1, b"bench") + _ld(3, principal) + _ld(4, entry)  # request_id, principal, resources


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        n = shift = 0
        while True:
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while i < len(buf):
        key = varint()
        if key & 7 == 0:
            out.append((key >> 3, varint()))
        elif key & 7 == 2:
            n = varint()
            out.append((key >> 3, buf[i : i + n]))
            i += n
        else:
            raise ValueError(f"wire type {key & 7} not expected in a CheckResourcesResponse")
    return out


def cerbos_effects(answer: bytes) -> list[str]:
    """The effects in a CheckResourcesResponse (results = 2; ResultEntry.actions = 2, a map of
    action to Effect: 1 allow, 2 deny)."""
    names = {1: "allow", 2: "deny"}
    return [
        names.get(int(v), "?")
        for f, entry in _fields(answer)
        if f == 2 and isinstance(entry, bytes)
        for g, action in _fields(entry)
        if g == 2 and isinstance(action, bytes)
        for h, v in _fields(action)
        if h == 2
    ]


CERBOS_POLICIES = {
    "weather.yaml": """apiVersion: api.cerbos.dev/v1
resourcePolicy:
  version: default
  resource: weather
  rules:
    - actions: ["weather.read"]
      effect: EFFECT_ALLOW
      roles: ["*"]
      name: weather-read-own-tenant
      condition:
        match:
          expr: request.principal.attr.tenant == request.resource.attr.tenant
""",
    "file.yaml": """apiVersion: api.cerbos.dev/v1
resourcePolicy:
  version: default
  resource: file
  rules:
    - actions: ["files.delete"]
      effect: EFFECT_ALLOW
      roles: ["admin"]
      name: files-delete-admin
      condition:
        match:
          expr: request.principal.attr.tenant == request.resource.attr.tenant
    - actions: ["files.delete"]
      effect: EFFECT_DENY
      roles: ["*"]
      name: files-delete-protected
      condition:
        match:
          expr: request.resource.attr.path.startsWith("/etc/")
""",
}


def run_cerbos(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    pdir = tmp / "cerbos-policies"
    pdir.mkdir()
    for name, text in CERBOS_POLICIES.items():
        (pdir / name).write_text(text)
    grpc_port, http_port = free_port(), free_port()
    (tmp / "cerbos.yaml").write_text(
        f'server:\n  httpListenAddr: "127.0.0.1:{http_port}"\n  grpcListenAddr: "127.0.0.1:{grpc_port}"\n'
        f'storage:\n  driver: disk\n  disk:\n    directory: "{pdir}"\n    watchForChanges: false\n'
        "audit:\n  enabled: false\n"
    )
    version = subprocess.run([str(CERBOS_BIN), "--version"], capture_output=True, text=True).stdout.strip()
    proc = subprocess.Popen(
        [str(CERBOS_BIN), "server", "--config", str(tmp / "cerbos.yaml"), "--log-level", "error"],
        stdout=open(tmp / "cerbos.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{http_port}/_cerbos/health", "Cerbos")
        go = GoLoad(target=f"127.0.0.1:{grpc_port}", tmp=tmp)
        reqs = [
            cerbos_request("bob", "weather.read", "weather", "Paris", {"tenant": "acme"}),
            cerbos_request("bob", "files.delete", "file", "/tmp/x", {"tenant": "acme", "path": "/tmp/x"}),
        ]
        dec = records(tmp / "cerbos.bin", reqs)
        chk = go.requests("cerbos-check", [health_pb2.HealthCheckRequest()])
        last = tmp / "cerbos-last.bin"
        effects = []
        for i in range(len(reqs)):
            one = records(tmp / f"cerbos-{i}.bin", [reqs[i]])
            r = go.run(CERBOS_CHECK, one, seconds=0.2, inflight=1, last=last)
            if not r["n"]:
                raise RuntimeError(
                    f"Cerbos refused the request: {r['error_codes']}; log: {(tmp / 'cerbos.log').read_text()[-2000:]}"
                )
            effects += cerbos_effects(last.read_bytes())
        print(f"Cerbos answers: {effects}")
        assert effects == ["allow", "deny"], effects

        def run(kind: str, inflight: int, seconds: float) -> dict[str, Any]:
            method, path = (CERBOS_CHECK, dec) if kind == "decision" else (CHECK, chk)
            return go.run(method, path, seconds=seconds, inflight=inflight)

        res = Pair("Cerbos", proc.pid, run).rounds(args.rounds, args.concurrency, args.seconds, "health.Check", "CheckResources")  # fmt: skip
        res["version"] = version
        return res
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2, help="floor/decision pairs per server (medians printed)")
    ap.add_argument("--only", default="callgate,opa,cerbos")
    ap.add_argument(
        "--durability", default="barrier", help="callgate's store.durability (barrier: an fsync per allow)"
    )
    ap.add_argument(
        "--synchronous", default="full", help="callgate's store.synchronous (normal + per_answer: no fsync)"
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cg-peers-"))
    only = set(args.only.split(","))
    results: dict[str, Any] = {"load_before": os.getloadavg()}
    if "callgate" in only:
        results["callgate"] = run_callgate(args, tmp)
    if "opa" in only:
        results["opa"] = run_opa(args, tmp)
    if "cerbos" in only:
        if CERBOS_BIN.is_file() and os.access(CERBOS_BIN, os.X_OK):
            results["cerbos"] = run_cerbos(args, tmp)
        else:
            reason = f"Cerbos skipped: no binary at {CERBOS_BIN} (build it with scripts/cerbos)"
            print(reason)
            results["cerbos_skipped"] = reason
    results["load_after"] = os.getloadavg()
    c = args.concurrency
    print(f"\nsummary (medians of {args.rounds} rounds, {args.seconds:g} s each)")
    print(f"{'server':<10} {'decision p50 @1':>16} {'p99 @1':>8} {'rps @1':>8} {'p50 @' + str(c):>9} "
          f"{'p99 @' + str(c):>9} {'rps @' + str(c):>8} {'CPU/call @' + str(c):>12} {'/floor @' + str(c):>10} "
          f"{'+CPU vs floor':>14} {'RSS':>7}")  # fmt: skip
    for name in ("callgate", "opa", "cerbos"):
        if name not in results:
            continue
        r = results[name]
        d1, dc = r["decision_1"], r[f"decision_{c}"]
        print(f"{name:<10} {d1['p50_ms']:13.3f} ms {d1['p99_ms']:8.3f} {d1['throughput_rps']:8.0f} "
              f"{dc['p50_ms']:9.3f} {dc['p99_ms']:9.3f} {dc['throughput_rps']:8.0f} "
              f"{dc['server_cpu_us_per_call']:9.0f} us {r[f'ratio_{c}']:10.2f} "
              f"{r[f'added_cpu_us_{c}']:11.0f} us {r['rss_mib']:5.0f} MiB")  # fmt: skip
    if "callgate" in results:
        ratio = results["callgate"][f"ratio_{c}"]
        print(f"Authorize (Cedar) / bare health.Check at {c} in flight: {ratio:.2f} (target >= 0.85: "
              f"{'met' if ratio >= 0.85 else 'NOT met'})")  # fmt: skip
    print(f"load average before/after: {results['load_before']} / {results['load_after']}")
    print(machine_line())
    dump(args.json, results)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
