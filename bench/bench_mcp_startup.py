"""Start-up of ``callgate mcp serve``: how long a client waits for ``initialize``, the first
``tools/list`` and the first ``tools/call`` (branch ``gwstart``; docs/MCP.md, "Start-up").

A gateway folder with three published upstreams the suite installs (PyPI ``mcp-server-time``
from the venv; npm ``server-memory`` and ``server-everything`` from tests/mcp_node, run with
node), pinned by ``callgate mcp import --accept-proposed``, the embedded sidecar, Cedar policies
permitting the reads. Each round spawns a fresh gateway and, as an MCP client does, sends
``initialize`` at once (stdio: raw newline-delimited JSON-RPC on the pipes; HTTP: the SDK's
client once the port accepts), then ``tools/list``, then ``time__get_current_time``. Times are
wall clock from the spawn.

``--phases`` also measures the parts in fresh processes of the code under test: the imports of
``callgate mcp serve`` (``callgate.cli.main``, ``callgate.mcp.serve``, ``callgate.server.app``,
the SDK), the embedded sidecar (``build_components``, ``Sidecar.start``), reading the pins, and
each upstream's spawn + initialize and its ``tools/list`` (one after the other, then all at once).

``--burn N`` runs N busy-looping processes during the rounds (a loaded box; the machine is shared,
so the load average is printed beside each figure). ``--before DIR``: the same rounds with
another checkout of callgate (e.g. ``git archive main | tar -x -C DIR``), run with this venv,
round by round in turn with this one.

    .venv/bin/python bench/bench_mcp_startup.py [--rounds 3] [--burn 2] [--http] [--phases] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODULES = ROOT / "tests" / "mcp_node" / "node_modules" / "@modelcontextprotocol"
MEMORY_JS = MODULES / "server-memory" / "dist" / "index.js"
EVERYTHING_JS = MODULES / "server-everything" / "dist" / "index.js"
TOKEN = "bench-startup-token-5b1f0c9e7a"

POLICIES = """
@id("reads")
permit (principal == User::"alice", action in Action::"read", resource);
"""


def folder(base: Path) -> Path:
    """The gateway folder under ``base``; returns its config (pins imported)."""
    (base / "policies" / "cedar").mkdir(parents=True)
    (base / "policies" / "tools").mkdir()
    (base / "policies" / "cedar" / "policies.cedar").write_text(POLICIES)
    (base / "policies" / "principals.json").write_text(
        json.dumps({"tenants": ["acme"], "users": {"alice": {"tenant": "acme"}}})
    )
    (base / "tokens.json").write_text(json.dumps({TOKEN: "alice"}))
    (base / "tokens.json").chmod(0o600)
    config = base / "callgate.toml"
    config.write_text(f"""
[server]
agent = {{ socket = "run/a.sock" }}
confirmer = {{ socket = "run/c.sock" }}
authorizer = {{ socket = "run/z.sock" }}
executor = {{ socket = "run/x.sock" }}
[policy]
dir = "policies"
[store]
path = "var/cg.db"
synchronous = "normal"
[idempotency]
path = "var/idem.db"
[mcp.identity]
tenant = "acme"
user = "alice"
[mcp.http]
tenant = "acme"
tokens_file = "tokens.json"

[[mcp.upstreams]]
name = "time"
command = {json.dumps(str(BIN / "mcp-server-time"))}
args = ["--local-timezone", "Europe/Oslo"]
timeout_seconds = 60.0

[[mcp.upstreams]]
name = "memory"
command = "node"
args = [{json.dumps(str(MEMORY_JS))}]
env = {{ MEMORY_FILE_PATH = {json.dumps(str(base / "memory.jsonl"))} }}
timeout_seconds = 60.0

[[mcp.upstreams]]
name = "everything"
command = "node"
args = [{json.dumps(str(EVERYTHING_JS))}, "stdio"]
timeout_seconds = 60.0
""")
    r = subprocess.run(
        [sys.executable, "-m", "callgate", "mcp", "import", "--config", str(config), "--accept-proposed"],
        cwd=base, env=_env(ROOT), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"callgate mcp import failed:\n{r.stdout}\n{r.stderr}")
    return config


def _env(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code)}


@contextmanager
def burning(n: int) -> Iterator[None]:
    """``n`` busy-looping processes (ended by their pids when the block ends)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _send(proc: subprocess.Popen[bytes], msg: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], want: int, deadline: float) -> dict[str, Any]:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer to request {want}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            raise EOFError(f"gateway exited before answering request {want}")
        msg = json.loads(line)
        if msg.get("id") == want:
            out: dict[str, Any] = msg
            return out


def stdio_round(code: Path, base: Path, config: Path, log: Path) -> dict[str, float]:
    """One fresh gateway over stdio: seconds from spawn to each answer."""
    with log.open("wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(config)],
            cwd=base, env=_env(code), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
        )  # fmt: skip
        deadline = t0 + 180
        try:
            _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}})  # fmt: skip
            _answer(proc, 1, deadline)
            t_init = time.monotonic() - t0
            _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            listed = _answer(proc, 2, deadline)
            t_list = time.monotonic() - t0
            tools = len(listed["result"]["tools"])
            _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "time__get_current_time", "arguments": {"timezone": "Europe/Oslo"}}})  # fmt: skip
            called = _answer(proc, 3, deadline)
            t_call = time.monotonic() - t0
            ok = not called["result"].get("isError")
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"initialize": t_init, "tools/list": t_list, "tools/call": t_call, "tools": tools, "ok": ok}


async def _http_steps(port: int, t0: float) -> dict[str, float]:
    import httpx2
    import mcp_types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    out: dict[str, float] = {}
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                out["initialize"] = time.monotonic() - t0
                listed = await session.list_tools()
                out["tools/list"] = time.monotonic() - t0
                out["tools"] = len(listed.tools)
                r = await session.call_tool("time__get_current_time", {"timezone": "Europe/Oslo"})
                out["tools/call"] = time.monotonic() - t0
                out["ok"] = not r.is_error and any(isinstance(c, types.TextContent) for c in r.content)
    return out


def http_round(code: Path, base: Path, config: Path, log: Path) -> dict[str, float]:
    """One fresh gateway over streamable HTTP: port accepting, then the client's steps."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with log.open("wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "callgate", "mcp", "serve", "--config", str(config), "--transport", "http",
             "--listen", f"127.0.0.1:{port}"],
            cwd=base, env=_env(code), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            while True:
                if proc.poll() is not None or time.monotonic() - t0 > 180:
                    raise RuntimeError(f"http gateway did not listen: {log.read_text()[-2000:]}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    time.sleep(0.02)
            t_port = time.monotonic() - t0
            out = asyncio.run(_http_steps(port, t0))
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"listening": t_port, **out}


PHASES = r"""
import asyncio, json, sys, time
from pathlib import Path
config = sys.argv[1]
out = {}

async def main():
    from callgate.mcp.config import load_gateway_config
    cfg, mcp = load_gateway_config(config)
    from callgate.mcp.pins import read_pins
    t = time.perf_counter(); read_pins(cfg.path(cfg.policy.dir) / "tools"); out["pins read"] = time.perf_counter() - t
    from callgate.server.app import Sidecar, build_components
    t = time.perf_counter(); comp = await build_components(cfg, tolerate_bad_policies=True)
    out["sidecar: build_components"] = time.perf_counter() - t
    t = time.perf_counter(); sc = Sidecar(comp); await sc.start(); out["sidecar: start"] = time.perf_counter() - t
    from callgate.mcp.upstreams import Upstream, _list_all
    async def one(u, tag):
        up = Upstream(u, Path(cfg.base_dir))
        t = time.perf_counter(); s = await up._listing(); out[f"{tag}{u.name}: spawn+initialize"] = time.perf_counter() - t
        t = time.perf_counter(); await _list_all(s, 60); out[f"{tag}{u.name}: tools/list"] = time.perf_counter() - t
        return up
    ups = []
    t = time.perf_counter()
    for u in mcp.upstreams:
        ups.append(await one(u, "sequential "))
    out["upstreams, one after the other"] = time.perf_counter() - t
    for up in ups:
        await up.close()
    t = time.perf_counter()
    ups = await asyncio.gather(*(one(u, "concurrent ") for u in mcp.upstreams))
    out["upstreams, all at once"] = time.perf_counter() - t
    for up in ups:
        await up.close()
    await sc.stop()

asyncio.run(main())
print(json.dumps(out))
"""

IMPORTS = (
    "callgate.cli.main",
    "callgate.mcp.serve",
    "callgate.server.app",
    "mcp.server.lowlevel",
    "mcp.client.stdio",
)


def phases(code: Path, base: Path, config: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], env=_env(code), check=True)
    out["python -c pass"] = time.monotonic() - t
    for module in IMPORTS:
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)",
            ],
            cwd=base,
            env=_env(code),
            capture_output=True,
            text=True,
            check=True,
        )  # cwd: not a checkout, so PYTHONPATH decides which callgate is imported
        out[f"import {module}"] = float(r.stdout.strip())
    r = subprocess.run(
        [sys.executable, "-c", PHASES, str(config)], cwd=base, env=_env(code), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"phases failed:\n{r.stderr[-3000:]}")
    out.update(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def show(label: str, rounds: list[dict[str, float]], loads: list[float]) -> None:
    keys = [k for k in rounds[0] if k not in ("tools", "ok")]
    cells = []
    for k in keys:
        xs = [r[k] for r in rounds]
        cells.append(f"{k} median {statistics.median(xs):5.2f} s (max {max(xs):5.2f})")
    tools = sorted({int(r["tools"]) for r in rounds})
    ok = all(r["ok"] for r in rounds)
    print(f"{label}: " + "; ".join(cells) + f"; tools listed {tools}; call ok {ok}; "
          f"load1 {min(loads):.1f}-{max(loads):.1f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burn", type=int, default=0, help="busy-looping processes during the rounds")
    ap.add_argument("--http", action="store_true", help="also over streamable HTTP")
    ap.add_argument("--phases", action="store_true", help="also the parts, one by one")
    ap.add_argument("--before", type=Path, help="another checkout of callgate, measured first")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (gateway logs)")
    args = ap.parse_args()
    for js in (MEMORY_JS, EVERYTHING_JS):
        if not js.is_file():
            raise SystemExit(f"{js} missing: run scripts/mcp-node install")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; load1 {os.getloadavg()[0]:.1f}; "
          f"burn {args.burn}", flush=True)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="cg-mcp-start-"))
    try:
        base = tmp / "gw"
        base.mkdir()
        config = folder(base)
        codes = [("before", args.before.resolve()), ("this", ROOT)] if args.before else [("this", ROOT)]
        with burning(args.burn):
            if args.phases:
                for label, code in codes:
                    for k, v in phases(code, base, config).items():
                        print(f"  {label} phase {k:<44} {v:6.2f} s", flush=True)
            stdio: dict[str, list[dict[str, float]]] = {label: [] for label, _ in codes}
            http: dict[str, list[dict[str, float]]] = {label: [] for label, _ in codes}
            loads: list[float] = []
            for i in range(args.rounds):  # the checkouts alternate, the order too (the box is shared)
                for label, code in codes if i % 2 == 0 else codes[::-1]:
                    loads.append(os.getloadavg()[0])
                    stdio[label].append(stdio_round(code, base, config, tmp / f"{label}-stdio-{i}.log"))
                    if args.http:
                        http[label].append(http_round(code, base, config, tmp / f"{label}-http-{i}.log"))
            for label, _ in codes:
                show(f"{label} stdio", stdio[label], loads)
                if args.http:
                    show(f"{label} http ", http[label], loads)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
