"""gRPC server reflection, ``v1`` and ``v1alpha``, over a pool where methods are symbols too.

``grpcurl describe callgate.v1.Gate.Propose`` asks reflection for the file containing the
symbol ``callgate.v1.Gate.Propose``. protobuf's default pool (upb) finds messages, enums and
services by full name but not methods, so reflection answered "Symbol not found".
:class:`MethodSymbolPool` delegates to the default pool and, for a name it does not find, looks up
``<service>.<method>`` through the service; everything else (and every error) is the pool's own.

grpcio-reflection serves only ``grpc.reflection.v1alpha.ServerReflection``; current grpcurl and
Postman ask ``grpc.reflection.v1.ServerReflection`` first. ``v1`` is the same messages (same
fields and numbers) under another package, so :func:`enable_reflection` serves the one servicer
under both names, and adds a ``grpc/reflection/v1/reflection.proto`` descriptor derived from the
``v1alpha`` one (package renamed) so that ``describe`` of the ``v1`` service itself works too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2

V1ALPHA_SERVICE = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = V1_PACKAGE + ".ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"
_V1ALPHA_PREFIX = "." + v1alpha_pb2.DESCRIPTOR.package + "."


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


def _renamed(type_name: str) -> str:
    if type_name.startswith(_V1ALPHA_PREFIX):
        return "." + V1_PACKAGE + "." + type_name[len(_V1ALPHA_PREFIX) :]
    return type_name


def v1_file(pool: descriptor_pool.DescriptorPool | None = None) -> FileDescriptor:
    """The ``grpc.reflection.v1`` file descriptor in ``pool`` (the default pool): the one already
    there (a library may have registered it), else the ``v1alpha`` file with its package renamed."""
    pool = pool if pool is not None else descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE)
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(fdp)
    fdp.name, fdp.package = V1_FILE, V1_PACKAGE
    fdp.ClearField("options")  # v1alpha's java/go package options name v1alpha
    for msg in fdp.message_type:
        for f in msg.field:
            if f.HasField("type_name"):  # a message or enum field (a scalar has none)
                f.type_name = _renamed(f.type_name)
    for svc in fdp.service:
        for m in svc.method:
            m.input_type, m.output_type = _renamed(m.input_type), _renamed(m.output_type)
    pool.AddSerializedFile(fdp.SerializeToString())
    return pool.FindFileByName(V1_FILE)


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> tuple[str, ...]:
    """Serve reflection for ``service_names`` under ``v1`` and ``v1alpha`` (one servicer, the
    same wire messages); the names listed (both reflection services included)."""
    v1_file()
    names = (*service_names, V1ALPHA_SERVICE, V1_SERVICE)
    servicer = reflection.aio.ReflectionServicer(names, pool=MethodSymbolPool())
    handlers = {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
            response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
        )
    }
    for service in (V1ALPHA_SERVICE, V1_SERVICE):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        server.add_registered_method_handlers(service, handlers)
    return tuple(sorted(names))


__all__ = ["V1ALPHA_SERVICE", "V1_SERVICE", "MethodSymbolPool", "enable_reflection", "v1_file"]
