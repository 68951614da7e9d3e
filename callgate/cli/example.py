"""``callgate serve --example``: the example policies packaged with callgate (``callgate/example``:
the repository's ``callgate.toml`` and ``policies/``, the same files ``scripts/serve`` serves), for
an installed wheel without a clone. Policies are read from the package; the sockets, the event
store and the keys go where the example config puts them, relative to the working directory
(``var/run/agent.sock`` ...: the README's client loop connects there); Unix sockets only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from callgate.config import Config

EXAMPLE_DIR: Final = Path(__file__).resolve().parent.parent / "example"
"""The packaged example: ``callgate.toml`` and ``policies/`` (in a checkout, links to the
repository's own files)."""


def example_config(workdir: Path) -> Config:
    """The example config with its policies read from the package and every other relative path
    (sockets, store, keys) resolved against ``workdir``; the agent listener on its Unix socket
    only (the example config's loopback TCP port left out)."""
    from dataclasses import replace

    from callgate.config import load_config, with_overrides

    cfg = load_config(EXAMPLE_DIR / "callgate.toml")
    return with_overrides(
        cfg,
        policy=replace(cfg.policy, dir=str(EXAMPLE_DIR / "policies")),
        # Unix sockets only: a second example, or scripts/serve, may hold the loopback port
        server=replace(cfg.server, agent=replace(cfg.server.agent, tcp="")),
        base_dir=str(workdir),
    )


__all__ = ["EXAMPLE_DIR", "example_config"]
