"""``callgate mcp serve | import | check`` (docs/MCP.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from callgate.core.errors import LoadError
from callgate.mcp.config import McpConfig, load_gateway_config
from callgate.mcp.listing import UNSERVABLE_MESSAGES, unservable
from callgate.mcp.pins import (
    PinState,
    SideEffect,
    compare,
    proposed_side_effect,
    read_only_hinted,
    read_pins,
    spec_name,
    toolspec_for,
    write_toolspec,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mcp", help="the MCP gateway: callgate in front of MCP servers (docs/MCP.md)")
    msub = p.add_subparsers(dest="mcp_command", required=True)
    s = msub.add_parser("serve", help="run the MCP gateway (stdio by default)")
    s.add_argument("--config", "-c", required=True)
    s.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    s.add_argument("--listen", default="", help="HOST:PORT for --transport http (loopback)")
    s.set_defaults(func=cmd_serve)
    i = msub.add_parser("import", help="pin the upstreams' tools as ToolSpecs")
    i.add_argument("--config", "-c", required=True)
    i.add_argument("--upstream", action="append", default=[], help="only this upstream (repeatable)")
    i.add_argument("--out", default="", help="tools folder (default: <policy.dir>/tools)")
    i.add_argument("--version", default="v1", help="ToolSpec version (default v1)")
    i.add_argument(
        "--side-effect", action="append", default=[], metavar="TOOL=CLASS",
        help="side-effect class of a tool (upstream.tool or tool): read_only|create|modify|delete",
    )  # fmt: skip
    i.add_argument(
        "--accept-proposed", action="store_true",
        help="accept the class proposed from the annotations for every tool not given --side-effect",
    )  # fmt: skip
    i.set_defaults(func=cmd_import)
    c = msub.add_parser("check", help="compare the pins with the live upstreams; non-zero on any difference")
    c.add_argument("--config", "-c", required=True)
    c.set_defaults(func=cmd_check)


def _quiet() -> None:
    """The HTTP client logs every request at INFO: keep the gateway's stderr for its own lines."""
    for name in ("httpx2", "httpcore2", "mcp.client.streamable_http"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _load(path: str, out: TextIO) -> tuple[Any, McpConfig] | None:
    _quiet()
    try:
        return load_gateway_config(path)
    except LoadError as exc:
        print(f"error: {exc}", file=out)
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    from callgate.mcp.serve import serve

    loaded = _load(args.config, sys.stderr)
    if loaded is None:
        return 2
    return serve(loaded[0], loaded[1], args.transport, args.listen)


async def _listings(mcp: McpConfig, base: Path, only: list[str]) -> dict[str, list[dict[str, Any]] | str]:
    from callgate.mcp.upstreams import Upstream  # the SDK's client: imported only when used

    out: dict[str, list[dict[str, Any]] | str] = {}
    for cfg in mcp.upstreams:
        if only and cfg.name not in only:
            continue
        up = Upstream(cfg, base)
        try:
            out[cfg.name] = await up.list_tools()
        except Exception as exc:
            out[cfg.name] = type(exc).__name__
        finally:
            await up.close()
    return out


def _classes(given: list[str]) -> dict[str, SideEffect] | str:
    out: dict[str, SideEffect] = {}
    for item in given:
        tool, sep, cls = item.partition("=")
        try:
            out[tool] = SideEffect(cls)
        except ValueError:
            return f"--side-effect {item!r}: expected TOOL=read_only|create|modify|delete"
        if not sep:
            return f"--side-effect {item!r}: expected TOOL=CLASS"
    return out


def cmd_import(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    loaded = _load(args.config, out)
    if loaded is None:
        return 2
    cfg, mcp = loaded
    unknown = [u for u in args.upstream if mcp.upstream(u) is None]
    if unknown:
        print(f"error: unknown upstream {', '.join(unknown)} (configured: "
              f"{', '.join(u.name for u in mcp.upstreams) or 'none'})", file=out)  # fmt: skip
        return 2
    classes = _classes(args.side_effect)
    if isinstance(classes, str):
        print(f"error: {classes}", file=out)
        return 2
    tools_dir = Path(args.out) if args.out else cfg.path(cfg.policy.dir) / "tools"
    listings = asyncio.run(_listings(mcp, Path(cfg.base_dir), args.upstream))
    failed = {k: v for k, v in listings.items() if isinstance(v, str)}
    for name, why in failed.items():
        print(f"error: upstream {name}: cannot list tools ({why})", file=out)
    if failed:
        return 1
    plans: list[tuple[str, dict[str, Any], SideEffect, str]] = []
    unconfirmed: list[str] = []
    for name, tools in listings.items():
        assert not isinstance(tools, str)
        for tool in tools:
            full = spec_name(name, str(tool["name"]))
            why = unservable(tool)
            if why is not None:
                print(f"skipped {full}: {why}: {UNSERVABLE_MESSAGES[why]}", file=out)
                continue
            proposed = proposed_side_effect(tool)
            cls = classes.get(full) or classes.get(str(tool["name"]))
            how = "given"
            if cls is None:
                if read_only_hinted(tool):
                    cls, how = SideEffect.READ_ONLY, "readOnlyHint"
                elif args.accept_proposed:
                    cls, how = proposed, "accepted proposal"
                else:
                    unconfirmed.append(f"{full} (proposed: {proposed.value})")
                    continue
            plans.append((name, tool, cls, how))
    if unconfirmed:
        print("error: side-effect class not confirmed for these tools (not read-only-hinted); pass "
              "--side-effect TOOL=CLASS for each, or --accept-proposed:", file=out)  # fmt: skip
        for line in unconfirmed:
            print(f"  {line}", file=out)
        print("nothing written", file=out)
        return 1
    for name, tool, cls, how in plans:
        up = mcp.upstream(name)
        assert up is not None
        doc = toolspec_for(name, tool, cls, version=args.version, timeout_seconds=up.timeout_seconds)
        path = write_toolspec(tools_dir, doc)
        print(f"pinned {doc['name']}@{doc['version']} {cls.value} ({how}) sha256 "
              f"{doc['upstream']['definition_sha256'][:16]}… -> {path}", file=out)  # fmt: skip
    print(
        f"ok: {len(plans)} tools pinned; add policies for their capabilities (mcp.<upstream>.<tool>)",
        file=out,
    )
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    loaded = _load(args.config, out)
    if loaded is None:
        return 2
    cfg, mcp = loaded
    pins = read_pins(cfg.path(cfg.policy.dir) / "tools")
    listings = asyncio.run(_listings(mcp, Path(cfg.base_dir), []))
    bad = 0
    for name, tools in listings.items():
        if isinstance(tools, str):
            print(f"unreachable {name}: {tools}", file=out)
            bad += 1
            continue
        pinned = {(p.server, p.tool) for p in pins}
        refused = set()
        for tool in tools:
            why = unservable(tool)
            if why is not None:
                refused.add(str(tool["name"]))
                bad += (name, str(tool["name"])) in pinned  # a pin that can never be served
                print(f"unservable {spec_name(name, str(tool['name']))}: {why}: {UNSERVABLE_MESSAGES[why]}",
                      file=out)  # fmt: skip
        for c in compare(name, pins, tools):
            if c.state is PinState.MATCH or (c.state is PinState.NEW and c.tool in refused):
                continue
            bad += 1
            print(f"{c.state.value} {c.spec_name} (upstream {c.server} tool {c.tool})", file=out)
    for p in pins:
        if mcp.upstream(p.server) is None:
            bad += 1
            print(f"missing {p.spec_name} (upstream {p.server} is not configured)", file=out)
    if bad:
        print(f"error: {bad} difference(s); re-pin with `callgate mcp import` after review", file=out)
        return 1
    print(f"ok: {len(pins)} pins match", file=out)
    return 0


__all__ = ["add_parser", "cmd_check", "cmd_import", "cmd_serve"]
