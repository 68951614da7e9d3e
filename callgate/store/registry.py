"""Event/invocation stores, registered by name (``store.backend`` in the config).

Config validation (:func:`callgate.config.validate`) and the composition root
(:func:`callgate.server.app.build_components`) read :data:`STORES`; adding a store is one
:class:`StoreFactory` registration here. SQLite is the embedded default; PostgreSQL is the store shared by several pods (its driver is
imported only when it is opened).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from callgate.base.errors import config_invalid
from callgate.base.registry import Registry
from callgate.store.base import Store

if TYPE_CHECKING:
    from callgate.config import Config, StoreConfig


@dataclass(frozen=True, slots=True)
class StoreFactory:
    """How to validate the config of, and open, one event store."""

    name: str
    """The ``store.backend`` value."""
    doc: str
    """One line for docs."""
    open: Callable[[Config, Mapping[str, str]], Awaitable[Store]]
    """``(config, environment) -> opened store`` (schema migrated, keys repaired; paths resolved
    against the config's directory). Raises LoadError (config) or CallgateError
    (``store_unavailable``)."""
    validate: Callable[[StoreConfig], list[str]]
    """Problems with the ``[store]`` keys, each naming its key; ``[]`` = fine."""
    probe: Callable[[Config, Mapping[str, str]], Awaitable[list[str]]] | None = None
    """``callgate check``: reach the configured store without changing it (a server store: connect
    and read its schema version); problems, ``[]`` = reachable. None: nothing to reach."""


async def _open_sqlite(cfg: Config, environ: Mapping[str, str]) -> Store:
    from callgate.store.sqlite import SQLiteStore
    from callgate.store.sqlite_worker import Durability

    ic = cfg.idempotency  # keys of a version before one commit per answer: imported once
    legacy = cfg.path(ic.path) if ic.backend == "sqlite" and ic.path else None
    return SQLiteStore(
        cfg.path(cfg.store.path),
        synchronous=cfg.store.synchronous,
        durability=Durability(cfg.store.durability),
        legacy_keys=legacy,
    )


def _validate_sqlite(sc: StoreConfig) -> list[str]:
    return [] if sc.path else ["store.path must name the SQLite database file"]


def store_dsn(cfg: Config, environ: Mapping[str, str]) -> str:
    """The PostgreSQL DSN of ``store.backend = postgres``: from ``store.dsn_file`` or the
    environment variable ``store.dsn_env``."""
    sc = cfg.store
    dsn = cfg.path(sc.dsn_file).read_text().strip() if sc.dsn_file else environ.get(sc.dsn_env, "")
    if not dsn:
        raise config_invalid(f"store.backend = postgres needs a DSN in ${sc.dsn_env} or store.dsn_file")
    return dsn


async def _open_postgres(cfg: Config, environ: Mapping[str, str]) -> Store:
    from callgate.store.postgres import PostgresStore

    store = PostgresStore(store_dsn(cfg, environ), pool_timeout=cfg.store.pool_timeout_seconds)
    await store.start()
    return store


async def _probe_postgres(cfg: Config, environ: Mapping[str, str]) -> list[str]:
    from callgate.base.errors import CallgateError
    from callgate.store.postgres import PostgresStore

    try:
        dsn = store_dsn(cfg, environ)
    except CallgateError as exc:
        return [exc.message]
    store = PostgresStore(dsn, min_size=0, max_size=1, read_only=True, connect_timeout=5.0)
    try:
        await store.start()  # read-only: the schema version is checked, nothing is migrated
    except CallgateError as exc:
        return [f"store.backend = postgres: {exc.message}"]
    await store.close()
    return []


def _validate_postgres(sc: StoreConfig) -> list[str]:
    problems = (
        []
        if sc.dsn_env or sc.dsn_file
        else ["store.backend = postgres needs store.dsn_env or store.dsn_file"]
    )
    if sc.pool_timeout_seconds <= 0:
        problems.append("store.pool_timeout_seconds must be positive")
    return problems


STORES: Registry[StoreFactory] = Registry("event store", "store.backend")
"""Every event store, by ``store.backend`` name; the first (``sqlite``) is the default."""

STORES.register(
    StoreFactory(
        name="sqlite",
        doc="embedded SQLite (WAL mode, one writer thread with group commit) at store.path",
        open=_open_sqlite,
        validate=_validate_sqlite,
    )
)
STORES.register(
    StoreFactory(
        name="postgres",
        doc="PostgreSQL shared by several pods: every record and the idempotency keys, one transaction "
        "per answer (DSN from store.dsn_env or store.dsn_file)",
        open=_open_postgres,
        validate=_validate_postgres,
        probe=_probe_postgres,
    )
)

__all__ = ["STORES", "StoreFactory"]
