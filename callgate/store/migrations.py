"""Versioned schema migrations, applied at start by every store backend.

A store's schema is a numbered list of :class:`Migration` s (1, 2, 3 ... with no gaps); the
database records the ones applied in its ``schema_version`` table. At start the store applies the
missing ones in order, all in one transaction with the version rows, so a crash mid-way leaves
the previous version. A database whose version is higher than the code knows (written by a newer
callgate) is refused (``store_unavailable``): an older binary never writes into a schema it does
not understand. Migration 1 is the schema of the version before versioning
(``CREATE ... IF NOT EXISTS``), so a database of that version is adopted as it is.

Adding a migration: append one with the next number to the backend's list (SQLite in
:mod:`callgate.store.sqlite`, PostgreSQL in :mod:`callgate.store.postgres`); never edit or
renumber one that was released.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from callgate.base.errors import store_unavailable

SCHEMA_VERSION_TABLE = "schema_version"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    """1, 2, 3 ...: the schema version the database has once this migration is applied."""
    name: str
    """One line for ``schema_version.name`` and the docs."""
    sql: str
    """The statements (``;``-separated; a trigger body may contain ``;``)."""


def check_sequence(migrations: Sequence[Migration]) -> int:
    """The latest version; raises ``ValueError`` unless the versions are 1..n in order."""
    for i, m in enumerate(migrations, 1):
        if m.version != i:
            raise ValueError(f"migration {m.name!r} has version {m.version}, expected {i}")
    return len(migrations)


def too_new(found: int, latest: int, where: str) -> Exception:
    return store_unavailable(
        f"{where} has schema version {found}, newer than this callgate knows ({latest}); "
        "refusing to start (upgrade callgate, or restore a backup of the database)"
    )


def sqlite_statements(sql: str) -> list[str]:
    """Split a script into complete statements (trigger bodies stay whole)."""
    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement: {buf.strip()[:80]!r}")
    return out


def sqlite_version(c: sqlite3.Connection) -> int:
    """The schema version of an SQLite database (0: never migrated)."""
    has = c.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (SCHEMA_VERSION_TABLE,)
    ).fetchone()
    if has is None:
        return 0
    (v,) = c.execute(f"SELECT COALESCE(MAX(version), 0) FROM {SCHEMA_VERSION_TABLE}").fetchone()
    return int(v)


def migrate_sqlite(c: sqlite3.Connection, migrations: Sequence[Migration], *, at: str) -> tuple[int, int]:
    """Apply the missing ``migrations`` on ``c`` (inside the caller's transaction, which holds
    the write lock). Returns (version found, version now)."""
    latest = check_sequence(migrations)
    c.execute(
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    found = sqlite_version(c)
    if found > latest:
        raise too_new(found, latest, "the SQLite store")
    for m in migrations[found:]:
        for statement in sqlite_statements(m.sql):
            c.execute(statement)
        c.execute(f"INSERT INTO {SCHEMA_VERSION_TABLE} VALUES (?,?,?)", (m.version, m.name, at))
    return found, latest


__all__ = [
    "SCHEMA_VERSION_TABLE",
    "Migration",
    "check_sequence",
    "migrate_sqlite",
    "sqlite_statements",
    "sqlite_version",
    "too_new",
]
