"""``callgate serve`` with some of its threads pinned to one CPU once it serves, for
bench/bench_lowrate.py ``--variant NAME:RUNNER=bench/_pin_serve.py,CALLGATE_PIN_THREADS=...``:
``CALLGATE_PIN_THREADS`` names the kinds to pin, joined by ``+`` (``loop``: the event loop's
thread; ``poller``: grpc.aio's completion-queue poller; ``ee``: gRPC core's event-engine
threads; ``sqlite``: the store's writer and checkpointer threads; ``other``), on CPU
``CALLGATE_PIN_CPU`` (0 by default). Threads gRPC core starts later inherit their starter's
CPUs. (``CPUS=N`` in a variant pins the whole process from its start instead.)"""

from __future__ import annotations

import os
import sys
import threading
import time


def _kind(tid: int, names: dict[int | None, str]) -> str:
    comm = open(f"/proc/self/task/{tid}/comm").read().strip()
    name = names.get(tid, comm)
    if tid == os.getpid():
        return "loop"
    if "_poll" in name:
        return "poller"
    if comm.startswith("event_engine"):
        return "ee"
    if name.startswith("callgate-"):
        return "sqlite"
    return "other"


def _pin() -> None:
    time.sleep(1.5)  # serving by then: gRPC core's threads and the store's exist
    want = set(os.environ.get("CALLGATE_PIN_THREADS", "").split("+"))
    cpu = int(os.environ.get("CALLGATE_PIN_CPU", "0"))
    names = {t.native_id: t.name for t in threading.enumerate()}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        if _kind(tid, names) in want:
            os.sched_setaffinity(tid, {cpu})


if __name__ == "__main__":
    threading.Thread(target=_pin, daemon=True, name="bench-pin").start()
    sys.argv[0] = "callgate"
    from callgate.cli.main import main

    raise SystemExit(main())
