"""Named extension points: one registry per kind of pluggable component.

A registry maps a name (the string a config file uses: ``policy.engine = "cedar"``,
``store.backend = "sqlite"``, ``idempotency.backend = "postgres"``) to a frozen factory that
validates its config section and builds the component. Config validation, the CLI's choices and
the composition root all read the same registry, so adding an engine or a backend is one
registration, and an unknown name is refused once, with the config key, the file and the
registered choices in the message (in the style of OPA plugins and Cerbos storage drivers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from callgate.base.errors import LoadError, config_invalid


class Registered(Protocol):
    """What every registered factory carries: its name and a one-line description."""

    @property
    def name(self) -> str: ...

    @property
    def doc(self) -> str: ...


F = TypeVar("F", bound=Registered)


class Registry(Generic[F]):
    """Name -> factory, in registration order (the first is listed first in choices)."""

    def __init__(self, kind: str, key: str) -> None:
        """``kind``: what is registered (``policy engine``); ``key``: the config key that names
        one (``policy.engine``), used in error messages."""
        self.kind = kind
        self.key = key
        self._entries: dict[str, F] = {}

    def register(self, factory: F) -> F:
        """Add ``factory`` under its name. Raises ValueError if the name is taken (a second
        registration must never silently replace the first)."""
        if not factory.name or factory.name in self._entries:
            raise ValueError(f"{self.kind} {factory.name!r} is already registered or has no name")
        self._entries[factory.name] = factory
        return factory

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order (e.g. argparse ``choices``)."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[F]:
        return iter(tuple(self._entries.values()))

    def unknown(self, name: str, *, source: str = "") -> LoadError:
        """The error for a name that is not registered (``config_invalid``, naming the key, the
        file when known, and the registered choices)."""
        return config_invalid(
            f"{self.key} '{name}' is not supported (registered: {', '.join(self.names())})", source=source
        )

    def get(self, name: str, *, source: str = "") -> F:
        """The factory registered as ``name``. Raises :class:`LoadError` (see :meth:`unknown`)."""
        factory = self._entries.get(name)
        if factory is None:
            raise self.unknown(name, source=source)
        return factory
