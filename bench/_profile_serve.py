"""``callgate serve`` under :mod:`cProfile` (the event loop's thread, where the gate's Python
runs), for bench/bench_profile.py: the stats are dumped to ``CALLGATE_PROFILE_OUT`` when the
sidecar stops. With ``CALLGATE_FLOOR`` set the floor sidecar of bench/_floor_serve.py is profiled
instead (``lean``: the common Propose with none of the gate's Python)."""

from __future__ import annotations

import cProfile
import os
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    out = os.environ["CALLGATE_PROFILE_OUT"]
    prof = cProfile.Profile()
    target = os.environ.get("CALLGATE_FLOOR", "real")
    sys.argv[0] = "callgate"
    prof.enable()
    try:
        if target == "real":
            from callgate.cli.main import main

            code = main()
        else:
            runpy.run_path(str(Path(__file__).with_name("_floor_serve.py")), run_name="__main__")
            code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        prof.disable()
        prof.dump_stats(out)
    raise SystemExit(code)
