"""``callgate serve`` with the gate's work taken out of Propose, for bench/bench_floor.py.

``CALLGATE_FLOOR`` names what ``Gate.propose`` does after the first call (which runs for real,
so the session, its view and one answer exist):

* ``cached``: returns the first call's outcome at once: what is left is gRPC, the interceptors,
  the Propose service (request to ``Proposal``, outcome to ``ProposeResponse``) and asyncio;
* ``writer``: the same, after one round trip through the SQLite writer with an operation that
  writes nothing (the one await a real Propose has on its store).

Nothing is recorded for those calls: this measures a floor, it is not a sidecar to run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from callgate.cli.main import main
from callgate.propose.gate import Gate

MODE = os.environ.get("CALLGATE_FLOOR", "cached")
_real = Gate.propose
_first: dict[str, Any] = {}


async def _propose(self: Gate, p: Any, trace: Any) -> Any:
    if "outcome" not in _first:
        _first["outcome"] = await _real(self, p, trace)
    elif MODE == "writer":
        store = getattr(self._store, "inner", self._store)  # under the publishing wrapper
        await store._worker.run(lambda conn: None)
    return _first["outcome"]


if __name__ == "__main__":
    if MODE not in ("cached", "writer"):
        raise SystemExit(f"CALLGATE_FLOOR must be cached or writer, not {MODE!r}")
    Gate.propose = _propose  # type: ignore[method-assign]
    sys.argv[0] = "callgate"
    raise SystemExit(main())
