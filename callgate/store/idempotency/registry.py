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

from callgate.base.errors import config_invalid
from callgate.base.registry import Registry
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
    probe: Callable[[Config, Mapping[str, str]], Awaitable[list[str]]] | None = None
    """``callgate check``: reach the configured key store without changing it; problems, ``[]`` =
    reachable. None: nothing to reach."""


async def _open_sqlite(cfg: Config, environ: Mapping[str, str]) -> IdempotencyStore:
    from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore

    store = SQLiteIdempotencyStore(cfg.path(cfg.idempotency.path), synchronous=cfg.store.synchronous)
    await store.start()
    return store


def _validate_sqlite(ic: IdempotencyConfig) -> list[str]:
    return [] if ic.path else ["idempotency.path must name the SQLite database file"]


def _dsn(cfg: Config, environ: Mapping[str, str]) -> str:
    ic = cfg.idempotency
    dsn = cfg.path(ic.dsn_file).read_text().strip() if ic.dsn_file else environ.get(ic.dsn_env, "")
    if not dsn:
        raise config_invalid(
            f"idempotency.backend = postgres needs a DSN in ${ic.dsn_env} or idempotency.dsn_file"
        )
    return dsn


async def _open_postgres(cfg: Config, environ: Mapping[str, str]) -> IdempotencyStore:
    from callgate.store.idempotency.postgres import PostgresIdempotencyStore

    store = PostgresIdempotencyStore(_dsn(cfg, environ), pool_timeout=cfg.idempotency.pool_timeout_seconds)
    await store.start()
    return store


async def _probe_postgres(cfg: Config, environ: Mapping[str, str]) -> list[str]:
    import psycopg

    from callgate.base.errors import CallgateError

    try:
        dsn = _dsn(cfg, environ)
        async with await psycopg.AsyncConnection.connect(dsn, connect_timeout=5) as conn:
            await conn.execute("SELECT 1")
    except CallgateError as exc:
        return [exc.message]
    except (psycopg.Error, OSError) as exc:  # the message names host and port, never the password
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"idempotency.backend = postgres: cannot connect: {first}"]
    return []


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
        probe=_probe_postgres,
    )
)


__all__ = ["IDEMPOTENCY_BACKENDS", "IdempotencyFactory"]
