"""Event/invocation stores, registered by name (``store.backend`` in the config).

Config validation (:func:`callgate.config.validate`) and the composition root
(:func:`callgate.server.app.build_components`) read :data:`STORES`; adding a store is one
:class:`StoreFactory` registration here. SQLite is the default and, today, the only one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from callgate.core.registry import Registry
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
    open: Callable[[Config], Store]
    """Open the store the config describes (paths resolved against the config's directory)."""
    validate: Callable[[StoreConfig], list[str]]
    """Problems with the ``[store]`` keys, each naming its key; ``[]`` = fine."""


def _open_sqlite(cfg: Config) -> Store:
    from callgate.store.sqlite import SQLiteStore

    ic = cfg.idempotency  # keys of a version before one commit per answer: imported once
    legacy = cfg.path(ic.path) if ic.backend == "sqlite" and ic.path else None
    return SQLiteStore(cfg.path(cfg.store.path), synchronous=cfg.store.synchronous, legacy_keys=legacy)


def _validate_sqlite(sc: StoreConfig) -> list[str]:
    return [] if sc.path else ["store.path must name the SQLite database file"]


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

__all__ = ["STORES", "StoreFactory"]
