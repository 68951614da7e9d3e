"""Upstream secrets (API keys, tokens): loaded from files or the environment, bound to tools and
resources, released only to an executor holding a valid credential for that scope (6.6: "short
credentials and least privilege; credentials never enter the model context").

The values live only in this object and in the redactor built from them; they are never logged,
never put in events, and never returned on the agent listener.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from callgate.base.errors import (
    config_invalid,
    secret_not_bound,
    secret_not_found,
)
from callgate.config import SecretConfig

if TYPE_CHECKING:
    from callgate.execute.redaction import Redactor


@dataclass(frozen=True, slots=True)
class BoundSecret:
    name: str
    value: bytes
    tools: tuple[str, ...]
    resources: tuple[str, ...]

    def __repr__(self) -> str:  # never print the value
        return f"BoundSecret(name={self.name!r}, tools={self.tools!r}, resources={self.resources!r})"

    def allows(self, tool_name: str, tool_version: str, resource: str) -> bool:
        tool_ok = tool_name in self.tools or f"{tool_name}@{tool_version}" in self.tools
        return tool_ok and any(fnmatch.fnmatchcase(resource, pat) for pat in self.resources)


class SecretStore:
    def __init__(self, secrets: Sequence[BoundSecret]) -> None:
        self._by_name: Mapping[str, BoundSecret] = {s.name: s for s in secrets}

    @classmethod
    def load(
        cls, entries: Sequence[SecretConfig], base_dir: Path, environ: Mapping[str, str] | None = None
    ) -> SecretStore:
        env = os.environ if environ is None else environ
        out = []
        for e in entries:
            if e.file:
                path = Path(e.file) if Path(e.file).is_absolute() else base_dir / e.file
                try:
                    value = path.read_bytes().rstrip(b"\r\n")
                except OSError as exc:
                    raise config_invalid(f"secret '{e.name}': cannot read file ({exc.strerror})") from None
            else:
                if e.env not in env:
                    raise config_invalid(f"secret '{e.name}': environment variable {e.env} is not set")
                value = env[e.env].encode("utf-8")
            if not value:
                raise config_invalid(f"secret '{e.name}' is empty")
            out.append(BoundSecret(name=e.name, value=value, tools=e.tools, resources=e.resources))
        return cls(out)

    def values(self) -> list[bytes]:
        """Every secret value, for the redactor."""
        return [s.value for s in self._by_name.values()]

    def named(self) -> dict[str, bytes]:
        """Every secret by its configured name, for the masks a person sees (the confirmation
        console, ``callgate explain``: ``⟦masked <name>⟧``)."""
        return {name: s.value for name, s in self._by_name.items()}

    def release(self, name: str, tool_name: str, tool_version: str, resource: str) -> bytes:
        secret = self._by_name.get(name)
        if secret is None:
            raise secret_not_found(f"no secret named '{name}'")
        if not secret.allows(tool_name, tool_version, resource):
            raise secret_not_bound(
                f"secret '{name}' is not bound to {tool_name}@{tool_version} on this resource"
            )
        return secret.value


def configured_masker(entries: Sequence[SecretConfig], base_dir: Path) -> Redactor:
    """The configured secrets by name and the secret patterns, as a person sees them masked (the
    confirmer listener, ``callgate explain``, the MCP gateway's question; docs/CONSOLE.md "Secrets
    are masked"). Raises CallgateError (``config_invalid``) when a secret cannot be read; the
    message never holds a value."""
    from callgate.execute.redaction import Redactor

    store = SecretStore.load(entries, base_dir)
    try:
        return Redactor(secrets=store.named())
    except ValueError as exc:
        raise config_invalid(f"secrets: {exc}") from None
