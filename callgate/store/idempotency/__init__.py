"""Idempotency keys (spec 6.8): the contract in :mod:`.base`, SQLite (embedded default) in
:mod:`.sqlite`, PostgreSQL (several pods sharing state) in :mod:`.postgres`, each registered by
its ``idempotency.backend`` name in :mod:`.registry` (:data:`IDEMPOTENCY_BACKENDS`).

The PostgreSQL backend is imported lazily (``from callgate.store.idempotency.postgres import ...``)
so that the SQLite default does not need the driver loaded."""

from callgate.store.idempotency.base import (
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyError,
    IdempotencyKey,
    IdempotencyRecord,
    IdempotencyStore,
    RecordState,
)
from callgate.store.idempotency.registry import IDEMPOTENCY_BACKENDS, IdempotencyFactory
from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore

__all__ = [
    "ClaimKind",
    "ClaimResult",
    "ExpiredPolicy",
    "IDEMPOTENCY_BACKENDS",
    "IdempotencyFactory",
    "IdempotencyError",
    "IdempotencyKey",
    "IdempotencyRecord",
    "IdempotencyStore",
    "RecordState",
    "SQLiteIdempotencyStore",
]
