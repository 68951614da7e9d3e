"""Issue 30 item 5: what the declared meters cost (docs/BENCHMARKS.md "Issue 30").

Two measurements, in one run, in process (the sidecar's own code; no RPC):

1. **Context cost vs history.** The meter read + reservation of one Propose (the store's
   ``reserve`` of three meters, then the release a deny would do) on a database holding 100
   invocations, and on one holding 1,000,000 invocations with the meter entries a month of such traffic keeps
   (twice each meter's longest window; 1,000 subjects). SQLite, and PostgreSQL with
   ``--pg-dsn``. Target: the second within 1.2x of the first.
2. **Three meters vs none.** Sidecar CPU (``time.process_time``: every thread of the process,
   the SQLite writer included) per ``Gate.propose`` (+ the ``Cancel`` that ends it and settles
   its reservation) of a tool declaring three meters vs the same tool declaring none, same
   policies, same store, Python and compiled core. Target: at most 150 us more per Propose.

3. **A metered Propose on PostgreSQL** (with ``--pg-dsn``): p50 wall time, CPU and the server's
   commits per Propose of the three-meter tool vs the plain one (:func:`pg_propose`).
   ``--pg-propose`` runs only this, on whichever callgate the interpreter imports: run it with
   another checkout's ``.venv`` (e.g. ``/work/main/.venv/bin/python``) to compare, interleaved.
   ``--cpu-only`` runs only 2., the same way.

    .venv/bin/python bench/bench_meters.py [--calls 3000] [--history 1000000] [--pg-dsn DSN]
                                           [--pg-propose]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from callgate.base.clock import FixedClock
from callgate.base.model import Proposal, Subject
from callgate.base.trace import TraceContext
from callgate.config import load_config
from callgate.policy.meters import Contribution, Window
from callgate.policy.snapshot import load_snapshot
from callgate.propose.outcome import SessionSpec
from callgate.server.app import Shared
from callgate.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)
HOUR, DAY = Window("1h", 3_600_000), Window("24h", 86_400_000)
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string", "maxLength": 64}, "n": {"type": "integer"}},
    "required": ["to", "n"],
    "additionalProperties": False,
}
METERS = [
    {"name": "calls_1h", "measure": "calls", "scope": "subject", "windows": ["1h"]},
    {"name": "calls_session", "measure": "calls", "scope": "session", "windows": ["session"]},
    {"name": "total_24h", "measure": "sum(args.n)", "scope": "tenant", "windows": ["24h"]},
]


def contributions(subject: str) -> list[Contribution]:
    return [
        Contribution("calls_1h", f"acme\x1fs:{subject}", 1, (HOUR,), 0),
        Contribution("calls_session", "acme\x1fx:ses_bench", 1, (Window("session", 0),), 0),
        Contribution("total_24h", "acme\x1f", 7, (DAY,), 0),
    ]


# --------------------------------------------------------------------------- 1. history
def seed_sqlite(path: Path, invocations: int) -> None:
    now_ms = int(NOW.timestamp() * 1000)
    """``invocations`` committed invocation rows and the meter entries they left (1,000 subjects, 30
    days), written with recursive CTEs (the shape of a month of traffic, not its events)."""
    c = sqlite3.connect(path)
    with c:
        c.execute(
            f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {invocations})
            INSERT INTO invocations (invocation_id, session_id, model_call_id, proposal_id, tool_name,
              tool_version, tenant, subject, state, raw_arguments, digest, normalized_arguments,
              idempotency_key, deadline, confirmation_expires_at, policy_revision, created_at, updated_at,
              attempts, external_resource_id, commit_time, cancel_requested_at)
            SELECT 'inv_h' || i, 'ses_h' || (i % 5000), 'm', 'p' || i, 'bench.metered', 'v1', 'acme',
              'u' || (i % 1000), 'COMMITTED', X'7B7D', '', X'7B7D', '', '', '', 'r', '2026-06-19T00:00:00Z',
              '2026-06-19T00:00:00Z', 1, 'x', '', '' FROM n"""
        )
        # the entries a month of such traffic keeps: twice each meter's longest window (calls_1h:
        # the last 2 h, 1,000 subjects; total_24h: the last 48 h, one tenant)
        for meter, keep_ms, scope in (
            ("calls_1h", 2 * 3_600_000, "'acme' || char(31) || 's:u' || (i % 1000)"),
            ("total_24h", 2 * 86_400_000, "'acme' || char(31)"),
        ):
            kept = max(1, invocations * keep_ms // (30 * 86_400_000))
            c.execute(
                f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {kept})
                INSERT INTO meter_entries SELECT '{meter}', {scope}, {now_ms} - i * {keep_ms} / {kept},
                  'inv_h' || i, 7 FROM n"""
            )
    c.close()


async def reserve_cost(meters: Any, calls: int, start: int = 0) -> list[float]:
    """The clock moves 100 ms per call: the windows' edges pass over the seeded entries."""
    out = []
    for i in range(calls):
        now = NOW + timedelta(milliseconds=100 * (start + i))
        t0 = time.perf_counter()
        await meters.reserve(
            f"inv_b{i}", "ses_bench", contributions(f"u{i % 1000}"), now, now + timedelta(minutes=1)
        )
        await meters.release(f"inv_b{i}")
        out.append(time.perf_counter() - t0)
    return out


async def interleaved(stores: dict[int, Any], calls: int, rounds: int = 5) -> dict[int, list[float]]:
    """Reserve + release latencies per store, in ``rounds`` alternating blocks (the machine's
    drift hits both alike) after a warm-up that reads every subject's meter once."""
    lat: dict[int, list[float]] = {n: [] for n in stores}
    for meters in stores.values():
        await reserve_cost(meters, 1000)  # warm: every subject's running total exists
    for r in range(rounds):
        for n, meters in stores.items():
            lat[n] += await reserve_cost(meters, calls // rounds, 1000 + r * calls)
    return lat


def report(
    kind: str, history: int, lat: dict[int, list[float]], seeded: dict[int, float]
) -> dict[str, float]:
    res = {n: statistics.median(x) * 1e6 for n, x in lat.items()}
    for n, x in lat.items():
        print(f"  {kind} {n:>9,} invocations (seeded in {seeded[n]:.1f} s): reserve+release p50 {res[n]:.0f} us, "
              f"p99 {sorted(x)[int(len(x) * 0.99)] * 1e6:.0f} us")  # fmt: skip
    print(f"  {kind} ratio {history:,} / 100: {res[history] / res[100]:.3f} (target <= 1.2)")
    return {"p50_us_100": res[100], f"p50_us_{history}": res[history], "ratio": res[history] / res[100]}


async def history_sqlite(tmp: Path, history: int, calls: int) -> dict[str, float]:
    stores, seeded = {}, {}
    for n in (100, history):
        path = tmp / f"h{n}.db"
        await SQLiteStore(path).close()
        t0 = time.perf_counter()
        seed_sqlite(path, n)
        seeded[n] = time.perf_counter() - t0
        stores[n] = SQLiteStore(path)
    lat = await interleaved({n: st.meters() for n, st in stores.items()}, calls)
    for st in stores.values():
        await st.close()
    return report("sqlite", history, lat, seeded)


async def history_pg(dsn: str, history: int, calls: int) -> dict[str, float]:
    import psycopg

    from callgate.store.postgres import PostgresStore

    stores: dict[int, Any] = {}
    seeded: dict[int, float] = {}
    for n in (100, history):
        name = f"cg_bench_meters_{n}"
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name}")
            c.execute(f"CREATE DATABASE {name}")
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        params["dbname"] = name
        db = make_conninfo(**params)
        store = PostgresStore(db)
        await store.start()
        t0 = time.perf_counter()
        with psycopg.connect(db, autocommit=True) as c:
            c.execute(
                f"""INSERT INTO callgate_invocations (invocation_id, session_id, model_call_id, proposal_id,
                  tool_name, tool_version, tenant, subject, state, raw_arguments, digest, normalized_arguments,
                  idempotency_key, deadline, confirmation_expires_at, policy_revision, created_at, updated_at,
                  attempts, external_resource_id, commit_time, cancel_requested_at)
                SELECT 'inv_h' || i, 'ses_h' || (i % 5000), 'm', 'p' || i, 'bench.metered', 'v1', 'acme',
                  'u' || (i % 1000), 'COMMITTED', '\\x7b7d', '', '\\x7b7d', '', '', '', 'r',
                  '2026-06-19T00:00:00Z', '2026-06-19T00:00:00Z', 1, 'x', '', ''
                FROM generate_series(1, {n}) AS i"""
            )
            now_ms = int(NOW.timestamp() * 1000)
            for meter, keep_ms, scope in (
                ("calls_1h", 2 * 3_600_000, "'acme' || chr(31) || 's:u' || (i % 1000)"),
                ("total_24h", 2 * 86_400_000, "'acme' || chr(31)"),
            ):
                kept = max(1, n * keep_ms // (30 * 86_400_000))
                c.execute(
                    f"""INSERT INTO callgate_meter_entries SELECT '{meter}', {scope},
                      {now_ms} - i::bigint * {keep_ms} / {kept}, 'inv_h' || i, 7
                    FROM generate_series(1, {kept}) AS i"""
                )
            c.execute("ANALYZE")
        seeded[n] = time.perf_counter() - t0
        stores[n] = store
    lat = await interleaved({n: st.meters() for n, st in stores.items()}, calls)
    for st in stores.values():
        await st.close()
    return report("postgres", history, lat, seeded)


# --------------------------------------------------------------------------- 2. CPU per Propose
def policy_folder(tmp: Path) -> Path:
    root = tmp / "policies"
    (root / "tools").mkdir(parents=True)
    (root / "cedar").mkdir()
    for name, meters in (("bench.plain", None), ("bench.metered", METERS)):
        doc: dict[str, Any] = {
            "name": name, "version": "v1", "description": "bench",
            "schema_dialect": "https://json-schema.org/draft/2020-12/schema", "input_schema": SCHEMA,
            "side_effect_class": "read_only", "required_capabilities": [name], "resource_template": "r:{to}",
        }  # fmt: skip
        if meters:
            doc["meters"] = meters
        (root / "tools" / f"{name}@v1.json").write_text(json.dumps(doc))
    (root / "cedar" / "policies.cedar").write_text(
        '@id("plain")\npermit (principal, action == Action::"bench.plain", resource)\n'
        "when { principal.tenant == context.tenant };\n"
        '@id("metered")\npermit (principal, action == Action::"bench.metered", resource)\n'
        'when { principal.tenant == context.tenant && context.usage.calls_1h["1h"].after <= 1000000000 '
        '&& context.usage.total_24h["24h"].after <= 1000000000000 };\n'
    )
    (root / "principals.json").write_text(json.dumps({"tenants": ["acme"], "roles": {}, "users": {}}))
    return root


async def cpu_per_propose(tmp: Path, calls: int, core: str) -> dict[str, float]:
    from callgate.config import CoreConfig

    base = load_config(ROOT / "callgate.toml")
    folder = policy_folder(tmp)
    cfg = replace(base, core=CoreConfig(engine=core), policy=replace(base.policy, dir=str(folder)))
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_tool_calls=10**9))
    snap = load_snapshot(folder, policy=cfg.policy)
    store = SQLiteStore(tmp / f"cpu-{core}.db")
    clock = FixedClock(NOW)
    gate = Shared.build(cfg, snap, store, clock, store.keys()).gate(cfg, store, clock)
    s = await gate.open_session(SessionSpec(subject=Subject(tenant="acme", id="alice"), timezone="UTC"))
    await gate.list_tools(s.session_id, "m")
    trace = TraceContext.from_traceparent(None)
    out: dict[str, float] = {}
    for rnd in range(3):  # interleaved rounds: the machine's drift hits both alike
        for tool in ("bench.plain", "bench.metered"):
            raw = [json.dumps({"to": f"x{i}", "n": 7}).encode() for i in range(calls)]
            c0 = time.process_time()
            for i in range(calls):
                got = await gate.propose(
                    Proposal(s.session_id, "m", f"{tool}{rnd}-{i}", tool, "v1", raw[i], f"{tool}{rnd}-{i}"),
                    trace,
                )
                assert got.decision is not None and got.decision.effect.value == "allow", got
                # the call ends (here: cancelled), as calls do: its reservation is settled
                await gate.cancel(got.record.invocation_id, "bench", trace, session_id=s.session_id)
            cpu = (time.process_time() - c0) / calls * 1e6
            if rnd:  # the first round warms up
                out[tool] = min(out.get(tool, cpu), cpu)
    await store.close()
    extra = out["bench.metered"] - out["bench.plain"]
    print(f"  core {core}: CPU per Propose, no meters {out['bench.plain']:.0f} us, three meters "
          f"{out['bench.metered']:.0f} us: +{extra:.0f} us (target <= 150)")  # fmt: skip
    return {"none_us": out["bench.plain"], "three_us": out["bench.metered"], "extra_us": extra}


def pg_database(dsn: str, name: str) -> str:
    """A fresh database ``name`` on the server of ``dsn``: its DSN."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


async def pg_propose(tmp: Path, dsn: str, calls: int) -> dict[str, float]:
    """3. A metered ``Gate.propose`` (allowed; then the ``Cancel`` that settles it) on the
    PostgreSQL store, against the same tool without meters: p50 wall time of the Propose (its
    store round trips and commits), sidecar CPU (``time.process_time``) per Propose + Cancel, and
    the server's commits per Propose (``pg_stat_database.xact_commit``). Runs on whichever
    callgate the interpreter imports (``--pg-propose`` with another checkout's ``.venv``: its code)."""
    import psycopg

    from callgate.config import CoreConfig
    from callgate.store.postgres import PostgresStore

    base = load_config(ROOT / "callgate.toml")
    folder = policy_folder(tmp)
    cfg = replace(base, core=CoreConfig(engine="native"), policy=replace(base.policy, dir=str(folder)))
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_tool_calls=10**9))
    snap = load_snapshot(folder, policy=cfg.policy)
    db = pg_database(dsn, "cg_bench_meters_propose")
    store = PostgresStore(db)
    await store.start()
    clock = FixedClock(NOW)
    gate = Shared.build(cfg, snap, store, clock, store.keys()).gate(cfg, store, clock)
    s = await gate.open_session(SessionSpec(subject=Subject(tenant="acme", id="alice"), timezone="UTC"))
    await gate.list_tools(s.session_id, "m")
    trace = TraceContext.from_traceparent(None)
    wall: dict[str, list[float]] = {"bench.plain": [], "bench.metered": []}
    cpu: dict[str, float] = {}
    commits: dict[str, float] = {}

    def xact() -> int:
        with psycopg.connect(db, autocommit=True) as c:
            row = c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            return int(row.fetchone()[0])  # type: ignore[index]

    for rnd in range(4):  # interleaved rounds; the first warms up
        for tool in wall:
            raw = [json.dumps({"to": f"x{i}", "n": 7}).encode() for i in range(calls)]
            took, c0, x0 = [], time.process_time(), xact()
            for i in range(calls):
                t0 = time.perf_counter()
                got = await gate.propose(
                    Proposal(s.session_id, "m", f"{tool}{rnd}-{i}", tool, "v1", raw[i], f"{tool}{rnd}-{i}"),
                    trace,
                )
                took.append(time.perf_counter() - t0)
                assert got.decision is not None and got.decision.effect.value == "allow", got
                await gate.cancel(got.record.invocation_id, "bench", trace, session_id=s.session_id)
            used = (time.process_time() - c0) / calls * 1e6
            if rnd:
                wall[tool] += took
                cpu[tool] = min(cpu.get(tool, used), used)
                commits[tool] = (xact() - x0 - 1) / calls  # less the xact() read itself
    await store.close()
    p50 = {t: statistics.median(x) * 1e6 for t, x in wall.items()}
    for t in wall:
        print(f"  postgres {t}: Propose p50 {p50[t]:.0f} us, p99 {sorted(wall[t])[int(len(wall[t]) * 0.99)] * 1e6:.0f} us, "
              f"CPU per Propose+Cancel {cpu[t]:.0f} us, commits per Propose+Cancel {commits[t]:.2f}")  # fmt: skip
    return {
        **{f"p50_us_{t}": p50[t] for t in wall},
        **{f"cpu_us_{t}": cpu[t] for t in wall},
        **{f"commits_{t}": commits[t] for t in wall},
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--history", type=int, default=1_000_000)
    ap.add_argument("--pg-dsn", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--pg-propose", action="store_true", help="only 3. (metered Propose on PostgreSQL)")
    ap.add_argument("--cpu-only", action="store_true", help="only 2. (CPU per Propose, three meters vs none)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cg-bench-meters-"))
    results: dict[str, Any] = {}
    try:
        if args.pg_propose:
            print("3. Propose on PostgreSQL, three meters vs none")
            results["pg_propose"] = await pg_propose(tmp, args.pg_dsn, args.calls)
            return
        if args.cpu_only:
            print("2. sidecar CPU per Propose, three meters vs none")
            for core in ("python", "native"):
                results[f"cpu_{core}"] = await cpu_per_propose(tmp / core, args.calls, core)
            return
        print("1. context cost vs stored history (three meters: reserve + release)")
        results["sqlite_history"] = await history_sqlite(tmp, args.history, args.calls)
        if args.pg_dsn:
            results["pg_history"] = await history_pg(args.pg_dsn, args.history, args.calls)
        print("2. sidecar CPU per Propose, three meters vs none")
        for core in ("python", "native"):
            results[f"cpu_{core}"] = await cpu_per_propose(tmp / core, args.calls, core)
        if args.pg_dsn:
            print("3. Propose on PostgreSQL, three meters vs none")
            results["pg_propose"] = await pg_propose(tmp / "pg", args.pg_dsn, args.calls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
