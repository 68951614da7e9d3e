"""The serving policy snapshot and readiness: what every request reads first.

A request reads :attr:`ServingSnapshot.current` once and uses that snapshot for every stage, so a
reload in the middle of a request never mixes an old ToolSpec with a new policy set. Until a good
snapshot is loaded and its engine is ready, ``current`` raises ``not_ready`` (fail closed: no
decision on half-loaded policies). The policy lifecycle swaps snapshots and sets readiness.

What must be prepared for a snapshot before it serves (the compiled core's per-tool plans)
subscribes with :meth:`ServingSnapshot.subscribe`, as Cerbos's storage ``Subscribable`` and OPA's
compiler triggers do: the policy side never imports the request pipeline it feeds.
"""

from __future__ import annotations

from collections.abc import Callable

from callgate.base.errors import not_ready
from callgate.policy.snapshot import PolicySnapshot

SwapListener = Callable[[PolicySnapshot], object]
"""Called with a snapshot before it starts serving (its return value is ignored)."""


class ServingSnapshot:
    """One reference to the serving snapshot, swapped atomically, its readiness, and the
    listeners told of each snapshot before it serves."""

    __slots__ = ("_listeners", "_ready", "_snap")

    def __init__(self, snapshot: PolicySnapshot | None) -> None:
        self._snap = snapshot
        self._ready = snapshot is not None
        self._listeners: list[SwapListener] = []

    def subscribe(self, listener: SwapListener) -> None:
        """Call ``listener`` with every snapshot before it serves, starting with the current one."""
        self._listeners.append(listener)
        if self._snap is not None:
            listener(self._snap)

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
        """Tell the listeners, then replace ToolSpecs + policies in one reference assignment."""
        for listener in self._listeners:
            listener(snapshot)
        self._snap = snapshot


__all__ = ["ServingSnapshot"]
