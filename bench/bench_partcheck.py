"""What the secret check of a result's image and file parts costs (callgate/execute/partcheck.py).

A result in parts sends each non-text part's canonical JSON with ``EncodeResult``; the sidecar
checks every string of it for its known secrets (the decoded bytes, and every form the redactor
knows in the string and in the bytes read as Latin-1 and UTF-8) and keeps none of it. Measured
here per part, in process CPU time, for an image of random bytes (base64 in the part's JSON) of
64 KiB, 1 MiB and 3 MiB (the client's limit per ``EncodeResult``), with 1 and 8 configured
secrets, each without and with the default secret patterns (``+p``: they run over the bytes
too), against what the client already spent on the same part before the check existed (its
descriptor: canonical JSON + sha256), interleaved in the same run. The gRPC transfer of the
bytes is not included. Prints CPU ms per part and the ratio; a benchmark prints, it is not a
timed test.

    .venv/bin/python bench/bench_partcheck.py [--rounds 5] [--e2e-calls 10]

``--e2e-calls``: also ``Client.run`` against a real ``callgate serve`` with and without the
bytes sent (wall and sidecar CPU per call, interleaved; the gRPC transfer included).
"""

from __future__ import annotations

import argparse
import base64
import functools
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callgate.adapters.parts import canonical, descriptor  # noqa: E402
from callgate.execute.partcheck import PartData, check_parts  # noqa: E402
from callgate.execute.redaction import DEFAULT_PATTERNS, Redactor  # noqa: E402

SIZES = {"64 KiB": 64 * 1024, "1 MiB": 1024 * 1024, "3 MiB": 3 * 1024 * 1024 - 4096}


def cpu_ms(fn: Callable[[], object], rounds: int) -> float:
    """Median process CPU time of one call, in ms."""
    out: list[float] = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        out.append((time.process_time() - t0) * 1000)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--e2e-calls", type=int, default=10, help="0: skip the end-to-end runs")
    args = ap.parse_args()
    rng = random.Random(1)
    redactors = {
        f"{n}{'+p' if patterns else ''}": Redactor(
            [f"configured-secret-{i}-{rng.getrandbits(64):016x}" for i in range(n)],
            patterns=DEFAULT_PATTERNS if patterns else (),
        )
        for n in (1, 8)
        for patterns in (False, True)
    }
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"{'part':>8} {'secrets':>7} {'descriptor ms':>14} {'check ms':>9} {'ratio':>6}")
    for label, size in SIZES.items():
        image = rng.randbytes(size * 3 // 4)
        part = {"type": "image", "base64": base64.b64encode(image).decode(), "mime_type": "image/png"}
        raw = canonical(part)
        desc = descriptor(part)
        value = {"mcp_content": [desc]}
        for n, red in redactors.items():
            base: list[float] = []
            check: list[float] = []
            for _ in range(args.rounds):  # interleaved: the same load for both
                base.append(cpu_ms(functools.partial(descriptor, part), 1))
                check.append(cpu_ms(functools.partial(check_parts, value, [PartData(0, raw)], red), 1))
            b, c = statistics.median(base), statistics.median(check)
            print(f"{label:>8} {n:>7} {b:>14.1f} {c:>9.1f} {c / b:>6.1f}")
    if args.e2e_calls:
        for size in (SIZES["64 KiB"], SIZES["1 MiB"]):
            end_to_end(args.e2e_calls, size)


def end_to_end(calls: int, size: int) -> None:
    """``Client.run`` of a weather call answering one image of ``size`` bytes against a real
    ``callgate serve`` with 8 configured secrets: with the part's bytes sent for the check
    (``committed``) and without (the descriptor only, as before), interleaved. Wall ms per call
    (BeginAttempt, ReportOutcome, EncodeResult), the sidecar's CPU ms per call (10 ms clock
    ticks: a median of ticks) and this client's."""
    from bench._harness import sidecar
    from callgate.adapters.parts import committed, encoded_value
    from callgate.client import Allowed, Client, Committed, ToolCall
    from callgate.client.errors import TransportError

    rng = random.Random(2)
    secrets_toml = ""
    for i in range(8):
        os.environ[f"CALLGATE_BENCH_PART_SECRET_{i}"] = f"configured-secret-{i}-{rng.getrandbits(64):016x}"
        secrets_toml += (
            f'[[secrets]]\nname = "s{i}"\nenv = "CALLGATE_BENCH_PART_SECRET_{i}"\n'
            'tools = ["calendar.create_event"]\n'
        )
    part = {"type": "image", "base64": base64.b64encode(rng.randbytes(size * 3 // 4)).decode()}
    ways: dict[str, Callable[[], Committed]] = {
        "descriptor only (before)": lambda: Committed(encoded_value([part])),
        "bytes checked (now)": lambda: committed([part]),
    }
    with sidecar(extra_toml=secrets_toml) as sc, Client(sc.agent, executor=sc.executor, timeout=30) as cg:
        for _ in range(600):  # until the sidecar serves (start-up takes seconds on a loaded box)
            try:
                session = cg.session("acme", "alice", timezone="Asia/Shanghai")
                break
            except TransportError:
                time.sleep(0.1)
        wall: dict[str, list[float]] = {k: [] for k in ways}
        cpu: dict[str, list[float]] = {k: [] for k in ways}
        mine: dict[str, list[float]] = {k: [] for k in ways}
        for n in range(calls):
            for name, make in ways.items():
                session.tools(f"mc-{name[:4]}-{n}")
                out = session.propose(
                    ToolCall(f"c-{name[:4]}-{n}", "weather__get", '{"city":"Paris","date":"2026-07-20"}')
                )
                assert isinstance(out, Allowed), out
                c0, t0, p0 = sc.cpu_seconds(), time.perf_counter(), time.process_time()
                res = cg.run(out.invocation_id, lambda ctx, m=make: m(), executor_id="bench")
                wall[name].append((time.perf_counter() - t0) * 1000)
                mine[name].append((time.process_time() - p0) * 1000)
                cpu[name].append((sc.cpu_seconds() - c0) * 1000)
                assert res.state == "OBSERVED", res
        print(f"end to end, one image of {size // 1024} KiB, 8 configured secrets, {calls} calls each:")
        for name in ways:
            print(
                f"  {name:>26}: wall p50 {statistics.median(wall[name]):6.1f} ms,"
                f" sidecar CPU p50 {statistics.median(cpu[name]):6.1f} ms,"
                f" client CPU p50 {statistics.median(mine[name]):6.1f} ms"
            )


if __name__ == "__main__":
    main()
