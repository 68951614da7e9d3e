"""``callgate store compact``: shrink a stopped SQLite store once, so retention can shrink it after.

A database created before retention existed has ``auto_vacuum = NONE``: pages freed by retention
are reused, but the file never shrinks. Switching it to ``INCREMENTAL`` needs a full ``VACUUM``
(a rewrite of the whole file, with room for a copy on disk, the write lock held throughout:
~7.5 ms per MiB measured, docs/BENCHMARKS.md), which start-up never runs unasked. This runs it,
refusing while a sidecar may be using the file (a ``-wal`` file beside it: a clean stop removes
it; a sidecar that crashed leaves it: start and stop it once).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from callgate.base.errors import config_invalid, store_unavailable

AUTO_VACUUM_INCREMENTAL = 2
"""``PRAGMA auto_vacuum`` of a file whose free pages retention hands back."""


@dataclass(frozen=True, slots=True)
class CompactReport:
    path: Path
    bytes_before: int
    bytes_after: int
    seconds: float
    auto_vacuum_before: int


def compact_sqlite(path: Path) -> CompactReport:
    """``PRAGMA auto_vacuum = INCREMENTAL; VACUUM`` on the stopped store at ``path``. Raises
    CallgateError: ``config_invalid`` (no database, a sidecar may be running) or
    ``store_unavailable`` (SQLite failed; the file is as it was: VACUUM is one transaction)."""
    if not path.is_file():
        raise config_invalid(f"no SQLite store at {path}")
    if Path(str(path) + "-wal").exists():
        raise config_invalid(
            f"{path}-wal exists: a sidecar may be using the store; stop it first (a sidecar that "
            "did not stop cleanly leaves it: start and stop it once)"
        )
    before = path.stat().st_size
    t0 = time.monotonic()
    try:
        c = sqlite3.connect(str(path), isolation_level=None, timeout=0)
        try:
            (mode,) = c.execute("PRAGMA auto_vacuum").fetchone()
            c.execute(f"PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL}")
            c.execute("VACUUM")
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            c.close()
    except sqlite3.Error as exc:
        raise store_unavailable(f"cannot compact {path}: {exc}") from exc
    return CompactReport(path, before, path.stat().st_size, time.monotonic() - t0, int(mode))


__all__ = ["AUTO_VACUUM_INCREMENTAL", "CompactReport", "compact_sqlite"]
