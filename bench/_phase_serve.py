"""``callgate serve`` with each Propose timed by phase, for bench/bench_lowrate.py.

Wraps (in this process only; nothing of callgate is changed) the Propose handler, ``Gate.propose``
and ``SQLiteWorker.run``, and records per call, in wall and event-loop-thread CPU microseconds:

* ``handler``: the Propose handler from its start to its answer (the rest of the call's wall
  time, measured by the load generator, is gRPC core, the interceptor, protobuf and the loop's
  scheduling around the handler);
* ``gate``: ``Gate.propose`` inside it (the rest of ``handler`` is the request's conversion and
  the answer's protobuf);
* ``store``: the SQLite worker's operations the call awaited (wall: commit included; whether
  each ran on the loop or went to the writer thread is counted as ``inline`` / ``queued``).

The records are written as JSON lines to ``CALLGATE_PHASES_OUT`` when the sidecar stops.
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
import time
from typing import Any

_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("phase_call", default=None)
_RECORDS: list[dict[str, Any]] = []


def _patch() -> None:
    from callgate.propose.gate import Gate
    from callgate.server.services import GateService
    from callgate.store.sqlite_worker import SQLiteWorker

    handler = GateService.Propose
    propose = Gate.propose
    run = SQLiteWorker.run

    async def timed_handler(self: Any, request: Any, context: Any) -> Any:
        rec: dict[str, Any] = {"store_wall": 0.0, "store_cpu": 0.0, "inline": 0, "queued": 0}
        token = _CALL.set(rec)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return await handler(self, request, context)
        finally:
            rec["handler_wall"] = (time.perf_counter() - w0) * 1e6
            rec["handler_cpu"] = (time.thread_time() - c0) * 1e6
            rec["at"] = w0
            _CALL.reset(token)
            _RECORDS.append(rec)

    async def timed_propose(self: Any, *args: Any, **kw: Any) -> Any:
        rec = _CALL.get()
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return await propose(self, *args, **kw)
        finally:
            if rec is not None:
                rec["gate_wall"] = (time.perf_counter() - w0) * 1e6
                rec["gate_cpu"] = (time.thread_time() - c0) * 1e6

    async def timed_run(self: Any, op: Any, **kw: Any) -> Any:
        rec = _CALL.get()
        if rec is None:
            return await run(self, op, **kw)
        before = self.inline_runs
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return await run(self, op, **kw)
        finally:
            rec["store_wall"] += (time.perf_counter() - w0) * 1e6
            rec["store_cpu"] += (time.thread_time() - c0) * 1e6
            if self.inline_runs > before:
                rec["inline"] += 1
            else:
                rec["queued"] += 1

    GateService.Propose = timed_handler  # type: ignore[method-assign]
    Gate.propose = timed_propose  # type: ignore[method-assign]
    SQLiteWorker.run = timed_run  # type: ignore[method-assign]


if __name__ == "__main__":
    _patch()
    from callgate.cli.main import main

    sys.argv[0] = "callgate"
    try:
        code = main()
    finally:
        with open(os.environ["CALLGATE_PHASES_OUT"], "w") as fh:
            for r in _RECORDS:
                fh.write(json.dumps(r) + "\n")
    raise SystemExit(code)
