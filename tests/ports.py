"""Free loopback ports for the servers tests start."""

from __future__ import annotations

import socket


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free loopback ports, held open together while picked: two picks in a row
    cannot return the same port (a gateway once bound its upstream's port, and the test talked
    to the upstream directly)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One free loopback port (on ``host``)."""
    return free_ports(1, host)[0]
