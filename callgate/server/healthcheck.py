"""A tiny gRPC health client for container probes (``grpc.health.v1``, over the Unix sockets).

    python -m callgate.server.healthcheck [--live] [--service NAME] [--timeout S] TARGET [TARGET ...]

Each TARGET is a gRPC address such as ``unix:/run/callgate/agent/agent.sock``. The exit status is
0 when every target answers ``SERVING`` for ``--service`` (default ``""``, the whole server), 1
otherwise (unreachable, deadline exceeded, ``NOT_SERVING``, unknown service), 2 on a usage error.
With ``--live`` any answer counts: the process is up and serving gRPC, even while it reports
``NOT_SERVING`` (e.g. policies that failed to load, which a restart would not fix).

Kubernetes' native ``grpc`` probes dial the pod IP, and callgate listens only on Unix sockets and
loopback, so the Helm chart runs this module as an ``exec`` probe inside the sidecar container
(see docs/DEPLOY.md). It imports only grpc and the health stubs, so a probe costs ~0.2 s of CPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["check", "main"]


def check(target: str, *, service: str = "", timeout: float = 3.0) -> str:
    """Ask ``target`` for the health of ``service``; return the status name (``SERVING``,
    ``NOT_SERVING``, ...) or ``UNREACHABLE: <grpc code>`` when the call fails."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            name = code.name if code is not None else type(exc).__name__
            return "SERVICE_UNKNOWN" if code == grpc.StatusCode.NOT_FOUND else f"UNREACHABLE: {name}"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m callgate.server.healthcheck", description="gRPC health check for container probes."
    )
    parser.add_argument(
        "targets", nargs="+", metavar="TARGET", help="gRPC address, e.g. unix:/run/callgate/agent/agent.sock"
    )
    parser.add_argument("--service", default="", help='health service name (default "": the whole server)')
    parser.add_argument("--timeout", type=float, default=3.0, help="deadline per target, seconds (default 3)")
    parser.add_argument("--live", action="store_true", help="any answer counts (liveness), not only SERVING")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    rc = 0
    for target in args.targets:
        status = check(target, service=args.service, timeout=args.timeout)
        ok = status == "SERVING" or (args.live and not status.startswith("UNREACHABLE"))
        print(f"{target}: {status}", file=out)
        rc = rc if ok else 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
