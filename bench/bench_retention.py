"""Retention soak: at a steady Propose rate with ``[store.retention]`` on, the SQLite database file
and its WAL stop growing once the retention window has passed (issue 34 item 1).

A real ``callgate serve`` (SQLite, the default durability) keeps terminal invocations for
``--retention`` seconds; a retention pass runs every ``--pass-interval`` seconds. The Go load
generator sends an open-loop Propose load at ``--rate`` calls/s for ``--seconds``. Every
``--sample`` seconds the bench prints the database file, the WAL, the pages in use and free, and
the invocation rows. At the end it compares the sizes at the end with the sizes at the first
sample after ``--settle`` seconds (the issue's "size at 1 h ≈ size at 10 min within 10%", scaled
to the run). Each call is an allowed ``weather.get`` that nobody executes: it waits in PREPARED
until its deadline (the ToolSpec's 5 s) and the deadline sweep ends it CANCELLED_BEFORE_COMMIT,
a terminal state; retention deletes it ``--retention`` seconds later.

    .venv/bin/python bench/bench_retention.py [--seconds 300] [--rate 100] [--retention 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import GoLoad, dump, machine_line, sidecar
from bench_soak import setup

from callgate.gen.v1 import callgate_pb2 as pb


def sizes(db: Path) -> dict[str, float]:
    """File and WAL sizes (MiB), pages used and free, invocation rows (a read-only look)."""
    wal = Path(str(db) + "-wal")
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (pages,) = c.execute("PRAGMA page_count").fetchone()
        (free,) = c.execute("PRAGMA freelist_count").fetchone()
        (rows,) = c.execute("SELECT COUNT(*) FROM invocations").fetchone()
        (tombs,) = c.execute("SELECT COUNT(*) FROM expired_invocations").fetchone()
    finally:
        c.close()
    return {
        "db_mib": db.stat().st_size / 2**20,
        "wal_mib": (wal.stat().st_size if wal.exists() else 0) / 2**20,
        "pages": pages,
        "free_pages": free,
        "invocations": rows,
        "tombstones": tombs,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--retention", type=int, default=60, help="invocations_seconds (0: no retention)")
    ap.add_argument("--pass-interval", type=int, default=5)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--sample", type=float, default=15.0)
    ap.add_argument("--settle", type=float, default=0.0, help="default: a third of --seconds")
    ap.add_argument("--export", action="store_true", help="export before deletion (JSON lines)")
    ap.add_argument("--json")
    args = ap.parse_args()
    settle = args.settle or args.seconds / 3
    tmp_export = Path(tempfile.mkdtemp(prefix="cg-retention-")) / "expired.jsonl"
    export = f'export_path = "{tmp_export}"\n' if args.export else ""
    extra = (  # --retention 0: none (the same load without retention, to compare)
        f"[store.retention]\ninvocations_seconds = {args.retention}\n"
        f"interval_seconds = {args.pass_interval}\nbatch = {args.batch}\nmax_batches = 40\n{export}"
        if args.retention
        else ""
    )
    with sidecar(extra_toml=extra) as sc:
        db = sc.tmp / "callgate.db"
        pairs = asyncio.run(setup(sc.agent, 10, 20))
        go = GoLoad(target=sc.agent, tmp=Path(tempfile.mkdtemp(prefix="cg-retention-load-")))
        n = int(args.seconds * args.rate * 1.05)
        cities = ["Paris", "Lyon", "Oslo", "Lima", "Rome", "Quito", "Berlin", "上海"]
        reqs = go.requests("propose", [
            pb.ProposeRequest(session_id=sid, model_call_id=mc, proposal_id=f"p{i}", tool_name="weather.get",
                              tool_version="v1",
                              arguments=json.dumps({"city": cities[i % len(cities)], "date": "tomorrow"}).encode())
            for i, (sid, mc) in ((i, pairs[(i * 7919) % len(pairs)]) for i in range(n))
        ])  # fmt: skip
        samples: list[dict[str, float]] = []
        done = threading.Event()

        def sample() -> None:
            start = time.monotonic()
            while not done.wait(args.sample):
                s = {"t_s": time.monotonic() - start, **sizes(db)}
                samples.append(s)
                print(
                    f"  t={s['t_s']:5.0f} s  db {s['db_mib']:7.2f} MiB  wal {s['wal_mib']:7.2f} MiB  "
                    f"pages {s['pages']:7.0f} free {s['free_pages']:6.0f}  invocations {s['invocations']:7.0f}"
                    f"  tombstones {s['tombstones']:7.0f}",
                    flush=True,
                )

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        r = go.run("/callgate.v1.Gate/Propose", reqs, seconds=args.seconds, rate=args.rate)
        done.set()
        th.join()
        p = r["percentiles_ms"]
        print(
            f"Propose open loop {args.rate:.0f}/s for {args.seconds:.0f} s, retention {args.retention} s: "
            f"n={r['n']} errors={r['error_codes']} p50={p.get('50', 0):.2f} ms p99={p.get('99', 0):.2f} ms"
        )
        res: dict[str, Any] = {"load": r, "samples": samples, "args": vars(args)}
        after = [s for s in samples if s["t_s"] >= settle]
        if len(after) >= 2:
            first, last = after[0], after[-1]
            for k in ("db_mib", "wal_mib"):
                ratio = last[k] / first[k] if first[k] else float("nan")
                print(f"{k}: {first[k]:.2f} at t={first['t_s']:.0f} s -> {last[k]:.2f} at t={last['t_s']:.0f} s "
                      f"(x{ratio:.3f})")  # fmt: skip
                res[f"{k}_ratio"] = ratio
            print(f"max db {max(s['db_mib'] for s in after):.2f} MiB, max wal {max(s['wal_mib'] for s in after):.2f}"
                  " MiB after settling")  # fmt: skip
        if args.export:
            print(f"export: {tmp_export.stat().st_size / 2**20:.1f} MiB, "
                  f"{sum(1 for _ in tmp_export.open())} lines")  # fmt: skip
        print(machine_line())
        dump(args.json, res)


if __name__ == "__main__":
    main()
