"""The descriptor pool behind gRPC server reflection: methods are symbols too.

``grpcurl describe callgate.v1.Gate.Propose`` asks reflection for the file containing the
symbol ``callgate.v1.Gate.Propose``. protobuf's default pool (upb) finds messages, enums and
services by full name but not methods, so reflection answered "Symbol not found".
:class:`MethodSymbolPool` delegates to the default pool and, for a name it does not find, looks up
``<service>.<method>`` through the service; everything else (and every error) is the pool's own.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor


class MethodSymbolPool:
    """A read-only view of a descriptor pool that also resolves method names to their file."""

    def __init__(self, pool: descriptor_pool.DescriptorPool | None = None) -> None:
        self._pool = pool if pool is not None else descriptor_pool.Default()

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service_name, dot, method = symbol.rpartition(".")
            if not dot:
                raise
            try:
                service = self._pool.FindServiceByName(service_name)
            except KeyError:
                raise KeyError(symbol) from None
            if method not in service.methods_by_name:
                raise KeyError(symbol) from None
            return service.file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


__all__ = ["MethodSymbolPool"]
