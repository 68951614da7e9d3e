"""``callgate serve`` whose event loop stalls on ``SIGUSR1``, for bench/bench_overload.py.

On ``SIGUSR1`` the main thread (the event loop's) sleeps ``CALLGATE_STALL_S`` seconds (default
3): Python takes no call meanwhile, so calls beyond ``server.max_pending_rpcs`` are dropped by
gRPC core alone, and the sidecar's CPU over the stall is what those drops cost (gRPC core's
HTTP/2 and call handling). Nothing else differs from ``python -m callgate``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

from callgate.cli.main import main


def _stall(signum: int, frame: FrameType | None) -> None:
    time.sleep(float(os.environ.get("CALLGATE_STALL_S", "3")))


signal.signal(signal.SIGUSR1, _stall)
sys.exit(main())
