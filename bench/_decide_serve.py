"""``callgate serve`` with the compiled core's decisions timed, for bench/bench_lowrate.py
``--entities``: each ``Core.front`` and ``Core.decide_metered`` call is recorded as (start, thread
CPU us, wall us) and the lists are written as JSON to ``CALLGATE_DECIDE_OUT`` when the sidecar
stops. Nothing of callgate is changed but the two methods' wrapping, in this process only."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_RECORDS: dict[str, list[tuple[float, float, float]]] = {"front": [], "decide_metered": []}


def _wrap(cls: Any, name: str) -> None:
    original = getattr(cls, name)
    rows = _RECORDS[name]

    def timed(self: Any, *args: Any, **kw: Any) -> Any:
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return original(self, *args, **kw)
        finally:
            rows.append((w0, (time.thread_time() - c0) * 1e6, (time.perf_counter() - w0) * 1e6))

    setattr(cls, name, timed)


if __name__ == "__main__":
    from callgate.propose.core import Core

    for method in _RECORDS:
        _wrap(Core, method)
    sys.argv[0] = "callgate"
    from callgate.cli.main import main

    try:
        code = main()
    finally:
        with open(os.environ["CALLGATE_DECIDE_OUT"], "w") as f:
            json.dump(_RECORDS, f)
    raise SystemExit(code)
