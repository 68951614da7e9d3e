"""``callgate store backup``: an online, consistent copy of the SQLite store (issue 34 item 5).

The copy is taken with SQLite's online backup API (``sqlite3.Connection.backup``) from a
read-only connection, in one step: it reads one snapshot of the database (WAL included) while the
sidecar keeps writing, so the copy holds every transaction committed before it began and none
after: an invocation is never without its events, a key never without its invocation. The copy is
written beside the target and renamed into place once ``PRAGMA integrity_check`` says ``ok``, so
a failed or interrupted backup never leaves a half-written file under the target name.

Restore: stop the sidecar, copy the backup to ``store.path`` (removing any ``-wal``/``-shm``
beside it), start the sidecar: start-up migrates it if it came from an older version. The
PostgreSQL store is backed up with PostgreSQL's own tools (``pg_dump``; docs/OPERATE.md).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from callgate.base.errors import config_invalid, store_unavailable


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What one backup copied."""

    target: Path
    bytes: int
    invocations: int
    events: int
    schema_version: int


def backup_sqlite(source: Path, target: Path) -> BackupReport:
    """Copy the SQLite store at ``source`` to ``target`` (see the module docstring). Raises
    CallgateError: ``config_invalid`` (no such database, target exists) or ``store_unavailable``
    (SQLite failed, the copy is not intact)."""
    if not source.is_file():
        raise config_invalid("no SQLite store at this path", source=str(source))
    if target.exists():
        raise config_invalid("the backup target exists; choose a new file", source=str(target))
    if not target.parent.is_dir():
        raise config_invalid("the backup target's folder does not exist", source=str(target))
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
        try:
            dst = sqlite3.connect(partial)
            try:
                src.backup(dst)  # one step: one snapshot of the source
                (check,) = dst.execute("PRAGMA integrity_check").fetchone()
                if check != "ok":
                    raise store_unavailable(f"the backup copy is not intact: {check}")
                (invocations,) = dst.execute("SELECT count(*) FROM invocations").fetchone()
                (events,) = dst.execute("SELECT count(*) FROM events").fetchone()
                (version,) = dst.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            finally:
                dst.close()
        finally:
            src.close()
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, target)
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise store_unavailable(f"SQLite backup failed: {exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupReport(target, target.stat().st_size, int(invocations), int(events), int(version))


__all__ = ["BackupReport", "backup_sqlite"]
