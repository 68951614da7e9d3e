"""The front of the Propose decision on the Python stages vs the compiled core (docs/NATIVE.md).

Same inputs, same process, no server: strict parse -> JSON Schema -> normalizers -> RFC 8785 ->
digest -> normalized schema, for the example ToolSpecs and a 60 KB array of records, then the
whole decision: the same plus the Cedar decision (the Python stages with cedarpy against the
compiled core's one call, ``cedar-policy`` inside). The records tool is the one of
``bench_scale.py --only args`` (a policy set with its action). Prints p50 / p99 per call,
single-thread throughput and the Python/native ratio; a benchmark prints, it is not a timed test.

Those calls run back to back, so their code and data stay in the CPU's caches. In the sidecar
they do not: between two decisions the event loop runs gRPC, asyncio and the gate's Python, and
the other threads (the SQLite writer, gRPC's pollers, the load) share the caches. The second
table runs the weather decision after writing ``--evict-mib`` of memory (one byte per 64-byte
line) before each call: cold caches, what a decision costs inside the server (measured there on
2026-12-05: 63-66 µs per ``Core.front``, at 1 and at 16 calls in flight).

    .venv/bin/python bench/bench_core.py [--seconds 2] [--evict-mib 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callgate.arguments.normalize import normalize  # noqa: E402
from callgate.arguments.parse import ParseLimits, parse_arguments  # noqa: E402
from callgate.base.errors import RejectedError  # noqa: E402
from callgate.base.model import NormalizationContext, Subject  # noqa: E402
from callgate.policy.snapshot import load_snapshot  # noqa: E402
from callgate.policy.toolspecs import CompiledTool  # noqa: E402
from callgate.propose.authorize import authorize_invocation  # noqa: E402
from callgate.propose.core import Core  # noqa: E402

CLOCK = "2026-07-19T14:00:00+08:00"
ZONE = "Asia/Shanghai"
LIMITS = ParseLimits()


def python_front(tool: CompiledTool, raw: bytes) -> Any:
    ctx = NormalizationContext(CLOCK, ZONE, "en")
    parsed = parse_arguments(raw, LIMITS)
    validated = tool.schema.validate(parsed)
    n = normalize(
        validated,
        tool.normalizers,
        ctx,
        tenant="acme",
        tool_name=tool.spec.name,
        tool_version=tool.spec.version,
    )
    if tool.normalized_schema.validate_value(n.value):
        raise AssertionError("normalized schema")
    return n


def measure(fn: Callable[[], Any], seconds: float) -> tuple[float, float, float]:
    """p50 µs, p99 µs, calls/s (single thread)."""
    for _ in range(200):
        fn()
    samples: list[float] = []
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end:
        a = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - a)
    elapsed = time.perf_counter() - t0
    samples.sort()
    p50 = statistics.median(samples) * 1e6
    p99 = samples[int(len(samples) * 0.99)] * 1e6
    return p50, p99, len(samples) / elapsed


def measure_cold(fn: Callable[[], Any], seconds: float, evict_mib: int) -> float:
    """p50 µs of ``fn`` with ``evict_mib`` MiB of memory written before each call."""
    junk = bytearray(evict_mib << 20)
    ones = b"\x01" * len(junk[::64])
    fn()
    samples: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        junk[::64] = ones  # one write per cache line: the caches now hold this buffer
        a = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - a)
    return statistics.median(samples) * 1e6


def records_snapshot(tmp: Path) -> tuple[Any, CompiledTool, bytes]:
    """The example policies plus ``records.put`` (bench_scale's) and ~60 KB of 1,390 records."""
    from bench_scale import policy_dir

    snap = load_snapshot(policy_dir(tmp, records=True))
    tool = snap.tools.get("records.put", "v1")
    assert tool is not None
    records = [{"id": i, "name": f"n{i:05d}", "ok": i % 2 == 0} for i in range(1390)]
    return snap, tool, json.dumps({"table": "t", "records": records}).encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--evict-mib", type=int, default=16, help="memory written before each cold call")
    args = ap.parse_args()
    snap = load_snapshot(ROOT / "policies")
    core = Core("native")
    unsupported = core.prepare(snap, eager=True)
    cases: list[tuple[str, CompiledTool, bytes]] = []
    for key, raw in (
        ("weather.get@v1", b'{"city": " Paris ", "date": "tomorrow"}'),
        ("weather.get@v1", '{"city": " São Paulo ", "date": "tomorrow"}'.encode()),  # text outside ASCII
        ("files.delete@v1", b'{"path": "/home/alice/notes/old.txt", "reason": " cleanup "}'),
        (
            "calendar.create_event@v1",
            b'{"title": " Standup ", "start": "tomorrow at 9:30am", "calendar_id": "main"}',
        ),
        ("calendar.create_event@v1", b'{"title": "Review", "start": "2026-10-25T02:30:00+02:00"}'),
    ):
        name, _, version = key.partition("@")
        tool = snap.tools.get(name, version)
        assert tool is not None and key not in unsupported, (key, unsupported)
        cases.append((key, tool, raw))
    import tempfile

    rec_snap, rec_tool, rec_raw = records_snapshot(Path(tempfile.mkdtemp(prefix="cg-bench-core-")))
    print(f"python {sys.version.split()[0]}; compiled core {core.kind.value}; {args.seconds:.0f} s per row")
    print()
    print(
        "| stages | input | Python p50 / p99 µs | native p50 / p99 µs | Python / native calls/s | ratio (p50) |"
    )
    print("|---|---|---|---|---|---|")
    rows: list[tuple[str, str, Callable[[], Any], Callable[[], Any]]] = []
    for key, tool, raw in cases:
        rows.append(("front", f"{key} ({len(raw)} B)", lambda t=tool, r=raw: python_front(t, r),
                     lambda t=tool, r=raw: _native(core, snap, t, r)))  # fmt: skip
    rec_core = Core("native")
    rec_core.prepare(rec_snap, eager=True)
    label = f"records.put@v1 ({len(rec_raw) // 1024} KB, 1,390 records)"
    rows.append(("front", label, lambda: python_front(rec_tool, rec_raw),
                 lambda: _native(rec_core, rec_snap, rec_tool, rec_raw)))  # fmt: skip
    # the whole decision: the Python stages + cedarpy against the compiled core's one call
    subject = Subject(tenant="acme", id="alice")
    loop = asyncio.new_event_loop()

    def decide(s: Any, tool: CompiledTool, raw: bytes, who: Subject) -> Callable[[], Any]:
        def run() -> Any:
            return loop.run_until_complete(authorize_invocation(s.engine, tool, python_front(tool, raw), who))

        return run

    def decide_native(c: Core, s: Any, tool: CompiledTool, raw: bytes, who: Subject) -> Callable[[], Any]:
        def run() -> Any:
            answer = c.front(s, tool, raw, who.tenant, "en", CLOCK, LIMITS, who.id)
            assert answer is not None and answer.code is None and answer.authz is not None
            return answer

        return run

    weather = cases[0][1]
    rows.append(("front + Cedar", "weather.get@v1", decide(snap, weather, cases[0][2], subject),
                 decide_native(core, snap, weather, cases[0][2], subject)))  # fmt: skip
    bob = Subject(tenant="acme", id="bob")
    rows.append(("front + Cedar", label, decide(rec_snap, rec_tool, rec_raw, bob),
                 decide_native(rec_core, rec_snap, rec_tool, rec_raw, bob)))  # fmt: skip
    for stages, label, py, nat in rows:
        p50, p99, tput = measure(py, args.seconds)
        n50, n99, ntput = measure(nat, args.seconds)
        print(f"| {stages} | {label} | {p50:.1f} / {p99:.1f} | {n50:.1f} / {n99:.1f} | "
              f"{tput:,.0f} / {ntput:,.0f} | {p50 / n50:.1f}× |")  # fmt: skip
    print()
    print(f"| weather.get@v1, caches evicted ({args.evict_mib} MiB) before each call | Python p50 µs "
          "warm / cold | native p50 µs warm / cold |")  # fmt: skip
    print("|---|---|---|")
    cold_rows = (
        ("front", lambda: python_front(weather, cases[0][2]), lambda: _native(core, snap, weather, cases[0][2])),
        ("front + Cedar", decide(snap, weather, cases[0][2], subject),
         decide_native(core, snap, weather, cases[0][2], subject)),
    )  # fmt: skip
    for stages, py, nat in cold_rows:
        warm = measure(py, args.seconds)[0], measure(nat, args.seconds)[0]
        cold = measure_cold(py, args.seconds, args.evict_mib), measure_cold(nat, args.seconds, args.evict_mib)
        print(f"| {stages} | {warm[0]:.1f} / {cold[0]:.1f} | {warm[1]:.1f} / {cold[1]:.1f} |")
    loop.close()
    # the GIL: two threads calling the same front on the 60 KB records (native releases the GIL)
    print()
    print("| 60 KB records, 2 threads | Python calls/s | native calls/s |")
    print("|---|---|---|")
    py2 = threaded(lambda: python_front(rec_tool, rec_raw), args.seconds)
    nat2 = threaded(lambda: _native(rec_core, rec_snap, rec_tool, rec_raw), args.seconds)
    print(f"| 1 thread → 2 threads | {py2[0]:,.0f} → {py2[1]:,.0f} | {nat2[0]:,.0f} → {nat2[1]:,.0f} |")


def threaded(fn: Callable[[], Any], seconds: float) -> tuple[float, float]:
    """Calls/s with one thread, then with two threads calling ``fn`` concurrently."""
    import threading

    out: list[float] = []
    for n in (1, 2):
        counts = [0] * n
        stop = time.perf_counter() + seconds

        def worker(i: int, counts: list[int] = counts, stop: float = stop) -> None:
            while time.perf_counter() < stop:
                fn()
                counts[i] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.append(sum(counts) / (time.perf_counter() - t0))
    return out[0], out[1]


def _native(core: Core, snap: Any, tool: CompiledTool, raw: bytes) -> Any:
    answer = core.front(snap, tool, raw, "acme", "en", CLOCK, LIMITS, timezone=ZONE)
    if answer is None or answer.code is not None:
        raise RejectedError.__new__(RejectedError)  # pragma: no cover - a bench input refused
    return answer


def _native_normalized(core: Core, snap: Any, tool: CompiledTool, raw: bytes) -> Any:
    answer = _native(core, snap, tool, raw)
    return core.normalized(answer, NormalizationContext(CLOCK, "Asia/Shanghai", "en"))


if __name__ == "__main__":
    main()
