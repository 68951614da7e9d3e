"""``callgate serve`` with the gate's work taken out of Propose, for bench/bench_floor.py.

``CALLGATE_FLOOR`` names what ``Gate.propose`` does after the first call (which runs for real,
so the session, its view, one answer and one set of rows exist):

* ``cached``: returns the first call's outcome at once: what is left is gRPC, the interceptors,
  the Propose service (request to ``Proposal``, outcome to ``ProposeResponse``) and asyncio;
* ``writer``: the same, after one round trip through the SQLite writer with an operation that
  writes nothing (the one await a real Propose has on its store);
* ``decision``: ``writer`` plus the compiled core's whole decision on the call's own arguments
  (parse, schema, normalizers, digest, Cedar: ``Core.front``), its answer dropped;
* ``rows``: ``writer``, but the operation writes the first call's rows again (the invocation,
  its events as the store writes them (one packed row of stages), the usage), re-keyed with a new invocation id: the store's real work for a
  Propose, with the rows handed over ready-made, as a compiled builder would hand them;
* ``lean``: ``decision`` and ``rows`` together: the common Propose with none of the gate's
  Python (no stages, trail, records or JSON built per call), the upper bound of doing all of
  it in one compiled call.

Nothing but ``rows``/``lean``'s copies is recorded for those calls: this measures floors, it is
not a sidecar to run.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any

from callgate.base.ids import new_id
from callgate.cli.main import main
from callgate.propose.gate import Gate
from callgate.store import packed
from callgate.store import sqlite as sq

MODES = ("cached", "writer", "decision", "rows", "lean")
MODE = os.environ.get("CALLGATE_FLOOR", "cached")
_real = Gate.propose
_EVENT_WIDTH = packed.EVENT_WIDTH  # columns per event row


@dataclass
class _First:
    """What the first, real call left: its outcome, and its rows as the store wrote them."""

    outcome: Any
    row: list[Any]
    events: list[Any]
    n_events: int
    usage: list[tuple[Any, ...]]
    worker: Any


_first: list[_First] = []


async def _capture(gate: Gate, p: Any, trace: Any) -> _First:
    inner = getattr(gate._store, "inner", gate._store)  # under the publishing wrapper
    seen: list[tuple[Any, list[Any], dict[str, Any]]] = []
    write = inner.create_invocation

    async def spy(record: Any, events: Any, usage: Any = None, claim: Any = None) -> Any:
        seen.append((record, list(events), dict(usage or {})))
        return await write(record, events, usage, claim)

    inner.create_invocation = spy
    try:
        outcome = await _real(gate, p, trace)
    finally:
        inner.create_invocation = write
    record, events, usage = seen[-1]
    rows = packed.new_event_rows(events, record)  # as the store writes them: one packed row for the stages
    flat: list[Any] = [v for row in rows for v in row]
    return _First(
        outcome=outcome,
        row=list(sq._INVOCATIONS.row(record)),
        events=flat,
        n_events=len(rows),
        usage=[(sid, *sq._usage_row(u)) for sid, u in usage.items()],
        worker=inner._worker,
    )


def _rows_op(first: _First) -> Any:
    """The first call's rows under a new invocation id, as one writer operation."""
    inv = "inv_" + new_id()
    row = first.row[:]
    row[0] = inv
    events = first.events[:]
    for k in range(first.n_events):
        events[_EVENT_WIDTH * k] = inv
        if events[_EVENT_WIDTH * k + 2] is not None:  # NULL: <id>.<seq>, follows the new id
            events[_EVENT_WIDTH * k + 2] = f"{inv}.{events[_EVENT_WIDTH * k + 1]}"
    sql_inv, sql_events = sq._insert_invocations_sql(1), sq._insert_events_sql(first.n_events)

    def op(c: sqlite3.Connection) -> None:
        c.execute(sql_inv, row)
        c.execute(sql_events, events)
        c.executemany(sq._ADD_USAGE, first.usage)

    return op


def _decide(gate: Gate, p: Any) -> None:
    """The compiled core's whole decision on this call's arguments (its answer is dropped)."""
    session = gate.sessions.cached(p.session_id)
    snap = gate.serving.current
    tool = snap.tools.get(p.tool_name, p.tool_version)
    gate.core.front(
        snap, tool, p.arguments_bytes, session.tenant, session.locale, "2026-12-05T12:00:00+08:00",
        gate._limits, session.subject, session.timezone,
    )  # fmt: skip


async def _propose(self: Gate, p: Any, trace: Any) -> Any:
    if not _first:
        _first.append(await _capture(self, p, trace))
        return _first[0].outcome
    first = _first[0]
    if MODE in ("decision", "lean"):
        _decide(self, p)
    if MODE in ("rows", "lean"):
        await first.worker.run(_rows_op(first))
    elif MODE != "cached":
        await first.worker.run(lambda conn: None)
    return first.outcome


if __name__ == "__main__":
    if MODE not in MODES:
        raise SystemExit(f"CALLGATE_FLOOR must be one of {', '.join(MODES)}, not {MODE!r}")
    Gate.propose = _propose  # type: ignore[method-assign]
    sys.argv[0] = "callgate"
    raise SystemExit(main())
