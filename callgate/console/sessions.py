"""Server-side sign-in sessions and the sign-in rate limit (static-token mode, docs/CONSOLE.md).

The browser holds only a random session id in a ``__Host-`` cookie (``Secure``, ``Path=/``, no
``Domain``: a sibling host or a plain-HTTP page cannot plant or read it). The id maps to a
:class:`Session` kept in this process: the person, a CSRF token of this session alone, and the
SHA-256 of the token it was opened with. A session ends at sign-out, when its token leaves the
token list (revocation), after ``session_idle_s`` without a request, or ``session_ttl_s`` after
sign-in. Sign-in always opens a new id (and ends the one presented), so an id known before
sign-in is worth nothing after it.

The store is bounded (:data:`MAX_SESSIONS`, the oldest dropped first) and keyed by the id's
SHA-256, so a timing difference in the dict look-up says nothing about a live id.

:class:`SignInLimiter` counts failed sign-ins per client address and per identity in a sliding
window; at ``login_max_failures`` the client or identity is locked for ``login_lockout_s`` (every
attempt refused, even with a right token), and the lockout is logged once.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger("callgate.console.sessions")

MAX_SESSIONS = 10_000
"""Live sessions kept at most (one console serves people, not machines); the oldest go first."""
MAX_TRACKED = 10_000
"""Clients and identities the limiter remembers at most (expired entries are dropped first)."""


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in browser."""

    identity: str
    groups: tuple[str, ...]
    csrf: str
    """This session's CSRF token (random; forms of this session carry it)."""
    token_digest: bytes
    """SHA-256 of the static token it was opened with (revoked with that token)."""
    created: float
    last_seen: float


class SessionStore:
    """The live sessions of this process."""

    def __init__(self, ttl_s: float, idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._idle = idle_s
        self._clock = clock
        self._by_id: OrderedDict[bytes, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, identity: str, groups: tuple[str, ...], token_digest: bytes, replaces: str = "") -> str:
        """A new session id (the one in ``replaces``, if any, ends: rotation at sign-in)."""
        if replaces:
            self.close(replaces)
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        self._by_id[_digest(sid)] = Session(
            identity, groups, secrets.token_urlsafe(32), token_digest, now, now
        )
        while len(self._by_id) > MAX_SESSIONS:
            self._by_id.popitem(last=False)
        return sid

    def get(self, sid: str, token_alive: Callable[[bytes], bool]) -> Session | None:
        """The live session of ``sid`` (its last use updated), or None: unknown, expired, idle too
        long, or its token no longer in the list (the session is then dropped)."""
        if not sid:
            return None
        key = _digest(sid)
        s = self._by_id.get(key)
        if s is None:
            return None
        now = self._clock()
        if now - s.created > self._ttl or now - s.last_seen > self._idle or not token_alive(s.token_digest):
            del self._by_id[key]
            return None
        fresh = Session(s.identity, s.groups, s.csrf, s.token_digest, s.created, now)
        self._by_id[key] = fresh
        return fresh

    def close(self, sid: str) -> bool:
        """End a session (sign-out); True if it was live."""
        return self._by_id.pop(_digest(sid), None) is not None

    def revoke(self, token_alive: Callable[[bytes], bool]) -> int:
        """Drop every session whose token left the list; how many."""
        dead = [k for k, s in self._by_id.items() if not token_alive(s.token_digest)]
        for k in dead:
            del self._by_id[k]
        return len(dead)


class Lock(str, Enum):
    """What a refused sign-in was locked on."""

    CLIENT = "client"
    IDENTITY = "identity"


@dataclass(slots=True)
class _Count:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0


class SignInLimiter:
    """Failed sign-ins per client and per identity; a lockout after ``max_failures`` in
    ``window_s``, for ``lockout_s``."""

    def __init__(
        self,
        max_failures: int,
        window_s: float,
        lockout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_failures
        self._window = window_s
        self._lockout = lockout_s
        self._clock = clock
        self._counts: dict[tuple[Lock, str], _Count] = {}

    def locked(self, client: str, identity: str) -> Lock | None:
        """The lock refusing this attempt, if any."""
        now = self._clock()
        for kind, key in ((Lock.CLIENT, client), (Lock.IDENTITY, identity)):
            c = self._counts.get((kind, key))
            if c is not None and c.locked_until > now:
                return kind
        return None

    def failed(self, client: str, identity: str) -> Lock | None:
        """Count a failure; the lock it starts, if any (logged)."""
        now = self._clock()
        self._prune(now)
        started: Lock | None = None
        for kind, key in ((Lock.CLIENT, client), (Lock.IDENTITY, identity)):
            c = self._counts.setdefault((kind, key), _Count())
            c.failures = [t for t in c.failures if now - t < self._window] + [now]
            if len(c.failures) >= self._max and c.locked_until <= now:
                c.locked_until = now + self._lockout
                c.failures = []
                started = started or kind
                # the identity is the name typed in the form, not a secret; the client is an address
                log.warning(
                    "console: sign-in locked for %s %r for %.0f s after %d failures",
                    kind.value, key, self._lockout, self._max,
                )  # fmt: skip
        return started

    def succeeded(self, client: str, identity: str) -> None:
        for kind, key in ((Lock.CLIENT, client), (Lock.IDENTITY, identity)):
            self._counts.pop((kind, key), None)

    def _prune(self, now: float) -> None:
        if len(self._counts) < MAX_TRACKED:
            return
        for k in [k for k, c in self._counts.items() if c.locked_until <= now and not c.failures]:
            del self._counts[k]
        for k in [k for k, c in self._counts.items() if c.locked_until <= now]:
            if len(self._counts) < MAX_TRACKED:
                break
            del self._counts[k]


__all__ = ["Lock", "Session", "SessionStore", "SignInLimiter"]
