"""The serving policy snapshot and readiness: what every request reads first.

A request reads :attr:`ServingSnapshot.current` once and uses that snapshot for every stage, so a
reload in the middle of a request never mixes an old ToolSpec with a new policy set. Until a good
snapshot is loaded and its engine is ready, ``current`` raises ``not_ready`` (fail closed: no
decision on half-loaded policies). The policy lifecycle swaps snapshots and sets readiness.
"""

from __future__ import annotations

from callgate.core.errors import not_ready
from callgate.policy.snapshot import PolicySnapshot


class ServingSnapshot:
    """One reference to the serving snapshot, swapped atomically, and its readiness."""

    __slots__ = ("_ready", "_snap")

    def __init__(self, snapshot: PolicySnapshot | None) -> None:
        self._snap = snapshot
        self._ready = snapshot is not None

    @property
    def current(self) -> PolicySnapshot:
        """The serving snapshot; raises ``not_ready`` until a good one is loaded and ready."""
        snap = self._snap
        if snap is None or not self._ready:
            raise not_ready("no usable policy snapshot yet (see the health service and the sidecar log)")
        return snap

    @property
    def current_or_none(self) -> PolicySnapshot | None:
        """The loaded snapshot even while not ready (health, metrics, reload)."""
        return self._snap

    def set_ready(self, ready: bool) -> None:
        self._ready = ready and self._snap is not None

    def swap(self, snapshot: PolicySnapshot) -> None:
        """Replace ToolSpecs + policies in one reference assignment."""
        self._snap = snapshot


__all__ = ["ServingSnapshot"]
