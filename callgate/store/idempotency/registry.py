"""Idempotency-key backends, registered by name (``idempotency.backend`` in the config).

Config validation (:func:`callgate.config.validate`) and the composition root
(:func:`callgate.server.app.build_idempotency`) read :data:`IDEMPOTENCY_BACKENDS`; adding a
backend is one :class:`IdempotencyFactory` registration here. SQLite is the default; PostgreSQL is
for several pods sharing keys (its driver is imported only when it is opened).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from callgate.core.errors import config_invalid
from callgate.core.registry import Registry
from callgate.store.idempotency.base import IdempotencyStore

if TYPE_CHECKING:
    from callgate.config import Config, IdempotencyConfig


@dataclass(frozen=True, slots=True)
class IdempotencyFactory:
    """How to validate the config of, and open, one idempotency backend."""

    name: str
    """The ``idempotency.backend`` value."""
    doc: str
    """One line for docs."""
    open: Callable[[Config, Mapping[str, str]], Awaitable[IdempotencyStore]]
    """``(config, environment) -> started store``. Raises LoadError (config) or CallgateError
    (``store_unavailable``)."""
    validate: Callable[[IdempotencyConfig], list[str]]
    """Problems with the ``[idempotency]`` keys, each naming its key; ``[]`` = fine."""


async def _open_sqlite(cfg: Config, environ: Mapping[str, str]) -> IdempotencyStore:
    from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore

    store = SQLiteIdempotencyStore(cfg.path(cfg.idempotency.path), synchronous=cfg.store.synchronous)
    await store.start()
    return store


def _validate_sqlite(ic: IdempotencyConfig) -> list[str]:
    return [] if ic.path else ["idempotency.path must name the SQLite database file"]


async def _open_postgres(cfg: Config, environ: Mapping[str, str]) -> IdempotencyStore:
    from callgate.store.idempotency.postgres import PostgresIdempotencyStore

    ic = cfg.idempotency
    dsn = cfg.path(ic.dsn_file).read_text().strip() if ic.dsn_file else environ.get(ic.dsn_env, "")
    if not dsn:
        raise config_invalid(
            f"idempotency.backend = postgres needs a DSN in ${ic.dsn_env} or idempotency.dsn_file"
        )
    store = PostgresIdempotencyStore(dsn, pool_timeout=ic.pool_timeout_seconds)
    await store.start()
    return store


def _validate_postgres(ic: IdempotencyConfig) -> list[str]:
    problems = (
        []
        if ic.dsn_env or ic.dsn_file
        else ["idempotency.backend = postgres needs idempotency.dsn_env or idempotency.dsn_file"]
    )
    if ic.pool_timeout_seconds <= 0:
        problems.append("idempotency.pool_timeout_seconds must be positive")
    return problems


IDEMPOTENCY_BACKENDS: Registry[IdempotencyFactory] = Registry("idempotency backend", "idempotency.backend")
"""Every idempotency backend, by ``idempotency.backend`` name; the first (``sqlite``) is the default."""

IDEMPOTENCY_BACKENDS.register(
    IdempotencyFactory(
        name="sqlite",
        doc="embedded SQLite at idempotency.path (one pod)",
        open=_open_sqlite,
        validate=_validate_sqlite,
    )
)
IDEMPOTENCY_BACKENDS.register(
    IdempotencyFactory(
        name="postgres",
        doc="PostgreSQL shared by several pods (DSN from idempotency.dsn_env or idempotency.dsn_file)",
        open=_open_postgres,
        validate=_validate_postgres,
    )
)


__all__ = ["IDEMPOTENCY_BACKENDS", "IdempotencyFactory"]
