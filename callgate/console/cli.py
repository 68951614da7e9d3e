"""``callgate console --config console.toml``: serve the confirmation console (docs/CONSOLE.md)."""

from __future__ import annotations

import argparse
import sys

from callgate.base.errors import CallgateError


def cmd_console(args: argparse.Namespace) -> int:
    from callgate.console import config
    from callgate.console.app import run  # without the extra: ImportError, which main() names

    try:
        cfg = config.load(args.config)
        if args.check:
            from callgate.console.app import build

            build(cfg)  # reads the token list / JWKS / key: every file the console needs
            print(f"console config ok: {len(cfg.tenants)} tenant(s), auth {cfg.auth.mode.value}")
            return 0
        return run(cfg)
    except CallgateError as exc:
        where = "" if exc.message.startswith(str(args.config)) else f"{args.config}: "
        print(f"callgate console: {where}{exc.message}", file=sys.stderr)
        return 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("console", help="serve the confirmation console (web UI for the confirmer role)")
    p.add_argument("--config", "-c", required=True, help="the console's TOML file ([console])")
    p.add_argument("--check", action="store_true", help="load and check the config, then exit")
    p.set_defaults(func=cmd_console)


__all__ = ["add_parser", "cmd_console"]
