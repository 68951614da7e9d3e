"""Issue 34 item 2: bytes on disk and written per allowed Propose, before and after, in one run.

Each side is a real ``callgate serve`` (``--baseline``: another checkout with its own ``.venv``,
e.g. main, run from its own directory; the other side is this checkout), driven by the Go load
generator (``bench/loadgen``) with allowed ``weather.get`` Proposes at 16 in flight until at least
``--proposals`` invocations are stored. Sides alternate (baseline, new, baseline, new ... for
``--rounds``). Per side it prints:

* **bytes on disk per Propose**: growth of the database file plus its WAL over the load, divided
  by the invocations stored; and the file alone after a ``wal_checkpoint(TRUNCATE)`` once the
  sidecar stopped (what the records keep on disk once the WAL is folded in);
* **written per Propose**: the sidecar process's ``wchar`` (``/proc/PID/io``: WAL frames, the
  checkpoints' copies into the database file, its log) over the load;
* rows per Propose (``events`` and ``invocations``), throughput, p50 and p99 of the load's runs,
  and the ratio new / baseline of bytes and throughput.

``--backend postgres`` runs the same against a throwaway PostgreSQL (``scripts/postgres``), one
fresh database per side: bytes = growth of ``pg_database_size``, written = WAL bytes generated
(``pg_current_wal_lsn`` before and after).

The deadline sweep is slowed to once per hour in both sides, so the figures are the Propose's
own (an allowed ``weather.get`` is PREPARED with a 5 s deadline; its expiry, a row of its own,
would otherwise land during the run).

    .venv/bin/python bench/bench_rows.py --baseline /work/main [--proposals 100000] [--rounds 1]
                                         [--backend sqlite|postgres]

A benchmark prints; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import ROOT, GoLoad, machine_line, sidecar
from bench_propose import PROPOSE, open_session, proposal

SLOW_SWEEP = "[confirmation]\nsweep_interval_ms = 3600000\n"
RUN_SECONDS = 10.0
IDLE_S = 6.0


def wchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


class SQLiteSide:
    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "callgate.db"

    def toml(self) -> str:
        return ""

    def size(self) -> int:
        return sum(p.stat().st_size for p in (self.db, Path(f"{self.db}-wal")) if p.exists())

    def wal(self) -> int:
        w = Path(f"{self.db}-wal")
        return w.stat().st_size if w.exists() else 0

    def tables(self) -> int:
        return self.db.stat().st_size

    def relations(self) -> dict[str, int]:
        return {}

    def written(self, pid: int) -> int:
        return wchar(pid)

    def count(self, table: str) -> int:
        c = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return int(c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        finally:
            c.close()

    def folded(self) -> int:
        """The file alone once the WAL is checkpointed into it and truncated (sidecar stopped)."""
        c = sqlite3.connect(self.db)
        try:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            c.close()
        return self.db.stat().st_size


class PostgresSide:
    def __init__(self, server_dsn: str) -> None:
        import psycopg

        self.name = f"cg_rows_{os.getpid()}_{time.monotonic_ns() % 10**9}"
        with psycopg.connect(server_dsn, autocommit=True) as c:
            c.execute(f"CREATE DATABASE {self.name}")
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(server_dsn)
        params["dbname"] = self.name
        self.dsn = make_conninfo(**params)

    def toml(self) -> str:
        os.environ["CALLGATE_BENCH_STORE_DSN"] = self.dsn
        return '[store]\nbackend = "postgres"\ndsn_env = "CALLGATE_BENCH_STORE_DSN"'

    def _one(self, q: str) -> Any:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            row = c.execute(q).fetchone()
            return row[0] if row else 0

    def size(self) -> int:
        return int(self._one(f"SELECT pg_database_size('{self.name}')"))

    def wal(self) -> int:
        return 0  # the cluster's WAL is not the database's; "written" reports what it generated

    def relations(self) -> dict[str, int]:
        """Each table's and index's own size (``pg_relation_size``; TOAST is a table's)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            rows = c.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'i', 't') AND n.nspname IN (current_schema(), 'pg_toast') "
                "AND (c.relname LIKE 'callgate%' OR c.relname LIKE 'pg_toast%')"
            ).fetchall()
        return {str(name): int(size) for name, size in rows}

    def tables(self) -> int:
        """``pg_total_relation_size`` (heap, indexes, TOAST, free space and visibility maps) of
        the store's tables together."""
        return int(
            self._one(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname LIKE 'callgate%'"
            )
        )

    def written(self, pid: int) -> int:
        return int(self._one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))

    def count(self, table: str) -> int:
        return int(self._one(f"SELECT count(*) FROM callgate_{table}"))

    def folded(self) -> int:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute("CHECKPOINT")
        return self.size()


def measure(label: str, checkout: Path, backend: str, n: int, pg_dsn: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-rows-"))
    pg = PostgresSide(pg_dsn) if backend == "postgres" else None
    with sidecar(extra_toml=SLOW_SWEEP, checkout=checkout, store_toml=pg.toml() if pg else "") as sc:
        side: SQLiteSide | PostgresSide = pg or SQLiteSide(sc.tmp)
        sid = asyncio.run(open_session(sc.agent))
        go = GoLoad(target=sc.agent, tmp=tmp)
        reqs = go.requests("propose", [proposal(sid, i) for i in range(20000)])
        go.run(PROPOSE, reqs, seconds=1.0, inflight=4)  # warm-up
        time.sleep(IDLE_S)  # measured from a store at rest (an idle store may fold its WAL in)
        inv0, ev0 = side.count("invocations"), side.count("events")
        size0, w0, t0_tables, rel0 = side.size(), side.written(sc.proc.pid), side.tables(), side.relations()
        wal_peak = side.wal()
        runs: list[dict[str, Any]] = []
        t0 = time.monotonic()
        while side.count("invocations") - inv0 < n:
            r = go.run(PROPOSE, reqs, seconds=RUN_SECONDS, inflight=16, offset=len(runs) * 7919 % 20000)
            if r["errors"]:
                raise RuntimeError(f"{label}: {r['error_codes']}")
            runs.append(r)
            wal_peak = max(wal_peak, side.wal())
        elapsed = time.monotonic() - t0
        invs, evs = side.count("invocations") - inv0, side.count("events") - ev0
        size1, w1, t1_tables, rel1 = side.size(), side.written(sc.proc.pid), side.tables(), side.relations()
        wal_end = side.wal()
        time.sleep(IDLE_S)  # the sidecar at rest: an idle store may fold its WAL in
        size_idle = side.size()
    folded = side.folded()
    p50 = statistics.median(r["percentiles_ms"]["50"] for r in runs)
    p99 = max(r["percentiles_ms"]["99"] for r in runs)
    return {
        "label": label, "proposals": invs, "events_rows": evs / invs, "rps": invs / elapsed,
        "p50_ms": p50, "p99_ms": p99, "disk_per": (size1 - size0) / invs, "written_per": (w1 - w0) / invs,
        "folded_per": folded / invs, "tables_per": (t1_tables - t0_tables) / invs,
        "idle_per": (size_idle - size0) / invs,
        "relations": {k: (v - rel0.get(k, 0)) / invs for k, v in rel1.items() if v != rel0.get(k, 0)}, "wal_peak": wal_peak, "wal_end": wal_end,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout (with .venv) to compare")
    ap.add_argument("--proposals", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    a = ap.parse_args()
    pg_dir = ""
    pg_dsn = ""
    if a.backend == "postgres":
        pg_dir = tempfile.mkdtemp(prefix="cg-rows-pg-")
        pg_dsn = subprocess.check_output(
            ["bash", str(ROOT / "scripts" / "postgres"), "start", pg_dir], text=True
        )
        pg_dsn = pg_dsn.strip()
    print(
        machine_line()
        + f", client go, backend {a.backend}, {a.proposals:,} Proposes at 16 in flight per side"
    )
    print()
    print("| side | round | Proposes | event rows / Propose | disk (file + WAL) / Propose | same, 6 s at rest | "
          "tables / Propose | file after checkpoint / Propose | WAL peak / at end | written / Propose | "
          "Propose/s @16 | p50 | p99 (worst run) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes: list[str] = []
    try:
        for k in range(1, a.rounds + 1):
            pair = []
            for label, checkout in (("baseline", a.baseline.resolve()), ("new", ROOT)):
                m = measure(label, checkout, a.backend, a.proposals, pg_dsn)
                pair.append(m)
                growth = ", ".join(
                    f"{rel} {v:,.0f}" for rel, v in sorted(m["relations"].items(), key=lambda kv: -kv[1])
                )
                if growth:
                    notes.append(f"{label}, round {k}: growth per Propose (B): {growth}")
                print(f"| {label} | {k} | {m['proposals']:,} | {m['events_rows']:.2f} | {m['disk_per']:,.0f} B | "
                      f"{m['idle_per']:,.0f} B | {m['tables_per']:,.0f} B | "
                      f"{m['folded_per']:,.0f} B | {m['wal_peak'] / 2**20:.1f} / {m['wal_end'] / 2**20:.1f} MiB | "
                      f"{m['written_per']:,.0f} B | {m['rps']:,.0f} | "
                      f"{m['p50_ms']:.2f} ms | {m['p99_ms']:.2f} ms |", flush=True)  # fmt: skip
            b, n = pair
            print(f"| **new / baseline** | {k} | | {n['events_rows'] / b['events_rows']:.2f} | "
                  f"**{n['disk_per'] / b['disk_per']:.2f}** | {n['idle_per'] / b['idle_per']:.2f} | "
                  f"{n['tables_per'] / b['tables_per']:.2f} | {n['folded_per'] / b['folded_per']:.2f} | | "
                  f"{n['written_per'] / b['written_per']:.2f} | **{n['rps'] / b['rps']:.2f}** | "
                  f"{n['p50_ms'] / b['p50_ms']:.2f} | {n['p99_ms'] / b['p99_ms']:.2f} |", flush=True)  # fmt: skip
    finally:
        if pg_dir:
            subprocess.run(["bash", str(ROOT / "scripts" / "postgres"), "stop", pg_dir], check=False)
    print()
    for note in notes:
        print(f"* {note}")
    print()
    print("target (issue 34 item 2): <= 1.5 KB on disk per allowed Propose")


if __name__ == "__main__":
    main()
