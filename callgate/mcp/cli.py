"""``callgate mcp serve | import | check`` (docs/MCP.md)."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TextIO

from callgate.base.errors import LoadError
from callgate.mcp.config import McpConfig, load_gateway_config
from callgate.mcp.importing import (
    RECORD_FILE,
    Change,
    Merge,
    Pinned,
    Recorded,
    assign_names,
    merge,
    pinned_files,
    read_record,
    restore_keys,
    tool_key,
    write_record,
)
from callgate.mcp.listing import DESTRUCTIVE_CLASSES, UNSERVABLE_MESSAGES, unservable
from callgate.mcp.pins import (
    PinState,
    SideEffect,
    compare,
    definition_of,
    proposed_side_effect,
    read_only_hinted,
    read_pins,
    spec_name,
    toolspec_for,
    write_toolspec,
)
from callgate.policy.toolspecs import compile_tool_bytes

_CONFIG_HELP = "the callgate.toml with the [mcp] tables (docs/MCP.md)"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mcp", help="the MCP gateway: callgate in front of MCP servers (docs/MCP.md)")
    msub = p.add_subparsers(dest="mcp_command", required=True)
    s = msub.add_parser("serve", help="run the MCP gateway (stdio by default)")
    s.add_argument("--config", "-c", required=True, help=_CONFIG_HELP)
    s.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (launched by the MCP client, default) or streamable HTTP at /mcp on --listen",
    )
    s.add_argument("--listen", default="", help="HOST:PORT for --transport http (loopback)")
    s.set_defaults(func=cmd_serve)
    i = msub.add_parser("import", help="pin the upstreams' tools as ToolSpecs")
    i.add_argument("--config", "-c", required=True, help=_CONFIG_HELP)
    i.add_argument("--upstream", action="append", default=[], help="only this upstream (repeatable)")
    i.add_argument("--out", default="", help="tools folder (default: <policy.dir>/tools)")
    i.add_argument("--version", default="v1", help="ToolSpec version (default v1)")
    i.add_argument(
        "--side-effect", action="append", default=[], metavar="TOOL=CLASS",
        help="side-effect class of a tool (upstream.tool or tool): read_only|create|modify|delete. "
             "TOOL may be a case-sensitive fnmatch pattern (*, ?, [...]) matched on upstream.tool and on "
             "the bare tool name, e.g. 'git.git_*=modify'. An exact name beats any pattern; among "
             "patterns the longest literal prefix wins (a pattern that matched only the bare name "
             "counts 'upstream.' in it), then the first given. A pattern that matches no listed tool, "
             "or an exact name that names none, is an error; a pattern may not give a tool hinted "
             "destructiveHint: true read_only or create (give that by its exact name). A tool already "
             "pinned keeps its file's class",
    )  # fmt: skip
    i.add_argument(
        "--accept-proposed", action="store_true",
        help="accept the class proposed from the annotations for every tool no --side-effect name or "
             "pattern matches",
    )  # fmt: skip
    i.add_argument(
        "--accept-changes", action="store_true",
        help="re-pin the tools whose upstream definition changed (after reviewing the diff shown)",
    )  # fmt: skip
    i.add_argument(
        "--keep-edits", action="store_true",
        help="where you edited a member the upstream also changed, keep your value",
    )  # fmt: skip
    i.add_argument(
        "--restore", action="append", default=[], metavar="TOOL",
        help="import again a tool whose ToolSpec you removed (upstream.tool or its ToolSpec name)",
    )  # fmt: skip
    i.set_defaults(func=cmd_import)
    c = msub.add_parser("check", help="compare the pins with the live upstreams; non-zero on any difference")
    c.add_argument("--config", "-c", required=True, help=_CONFIG_HELP)
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
    from callgate.mcp.upstreams import Upstream, listing_failure  # the SDK's client: only when used

    out: dict[str, list[dict[str, Any]] | str] = {}
    for cfg in mcp.upstreams:
        if only and cfg.name not in only:
            continue
        up = Upstream(cfg, base)
        try:
            out[cfg.name] = await up.list_tools()
        except Exception as exc:  # say why: it cannot start, or its listing is unusable
            out[cfg.name] = listing_failure(exc)
        finally:
            await up.close()
    return out


GLOB_CHARS = "*?["
"""A ``--side-effect`` TOOL with one of these is an fnmatch pattern, else an exact name."""


@dataclass(frozen=True)
class _Given:
    """The ``--side-effect`` answers: exact names, and patterns in the order given."""

    exact: dict[str, SideEffect] = field(default_factory=dict)
    patterns: list[tuple[str, SideEffect]] = field(default_factory=list)


def _classes(given: list[str]) -> _Given | str:
    out = _Given()
    seen: dict[str, SideEffect] = {}
    for item in given:
        tool, sep, cls = item.partition("=")
        if not sep or not tool:
            return f"--side-effect {item!r}: expected TOOL=CLASS"
        try:
            se = SideEffect(cls)
        except ValueError:
            return f"--side-effect {item!r}: expected TOOL=read_only|create|modify|delete"
        if seen.get(tool, se) is not se:
            return f"--side-effect {item!r}: {tool!r} already given as {seen[tool].value}"
        if tool in seen:
            continue
        seen[tool] = se
        if any(c in tool for c in GLOB_CHARS):
            out.patterns.append((tool, se))
        else:
            out.exact[tool] = se
    return out


def _literal_prefix(pattern: str) -> int:
    """How many characters of ``pattern`` come before its first ``*``, ``?`` or ``[``."""
    return next((i for i, c in enumerate(pattern) if c in GLOB_CHARS), len(pattern))


def _pattern_for(upstream: str, tname: str, patterns: Iterable[tuple[str, SideEffect]],
                 ) -> tuple[str, SideEffect] | None:  # fmt: skip
    """The pattern that classes upstream tool ``tname``: of those matching ``<upstream>.<tool>``
    or the bare tool name, the one with the longest literal prefix, counted in the full name (a
    pattern that matched only the bare name has ``<upstream>.`` added), then the first given."""
    best: tuple[str, SideEffect] | None = None
    score = -1
    for pattern, cls in patterns:
        if fnmatchcase(f"{upstream}.{tname}", pattern):
            s = _literal_prefix(pattern)
        elif fnmatchcase(tname, pattern):
            s = len(upstream) + 1 + _literal_prefix(pattern)
        else:
            continue
        if s > score:  # strictly longer: an equal one given later loses
            best, score = (pattern, cls), s
    return best


def _unmatched(patterns: Iterable[tuple[str, SideEffect]], listed: Mapping[str, list[dict[str, Any]]],
               ) -> list[str]:  # fmt: skip
    """The patterns that match no tool the upstreams listed (a typo must not pass silently)."""
    names = [(up, str(t["name"])) for up, tools in listed.items() for t in tools]
    return [p for p, _ in patterns if not any(_pattern_for(u, t, [(p, SideEffect.MODIFY)]) for u, t in names)]


def _names_of(listed: Mapping[str, list[dict[str, Any]]], pinned: Mapping[str, Pinned]) -> list[str]:
    """Every exact ``--side-effect`` name that names a listed tool: ``<upstream>.<tool>``, its
    ToolSpec name (import's, or the pinned file's), and the bare tool name."""
    out: dict[str, None] = {}
    for up, tools in listed.items():
        for t in tools:
            tname = str(t["name"])
            pin = pinned.get(tool_key(up, tname))
            names = [f"{up}.{tname}", spec_name(up, tname), tname]
            if pin is not None and isinstance(pin.doc.get("name"), str):
                names.append(str(pin.doc["name"]))
            out.update(dict.fromkeys(names))
    return list(out)


def _unknown_names(exact: Iterable[str], listed: Mapping[str, list[dict[str, Any]]],
                   pinned: Mapping[str, Pinned]) -> list[str]:  # fmt: skip
    """The exact ``--side-effect`` names that name no listed tool, each with the closest names
    that do (a typo must not pass silently, as a pattern's does not: :func:`_unmatched`)."""
    known = _names_of(listed, pinned)
    out: list[str] = []
    for name in exact:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        out.append(f"{name!r} (closest: {', '.join(map(repr, close))})" if close else repr(name))
    return out


@dataclass
class _Plan:
    """What one import would write and say."""

    new: list[tuple[str, dict[str, Any], SideEffect, str]] = field(default_factory=list)
    merges: list[tuple[Merge, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    weakened: list[str] = field(default_factory=list)
    """Tools hinted ``destructiveHint: true`` a pattern would class ``read_only`` or ``create``."""
    notes: list[str] = field(default_factory=list)


def _given_exact(server: str, tname: str, full: str, given: _Given) -> SideEffect | None:
    """The class given by exact name for upstream tool ``tname``: by its ToolSpec name ``full``,
    ``<upstream>.<tool>`` or the bare tool name."""
    return given.exact.get(full) or given.exact.get(f"{server}.{tname}") or given.exact.get(tname)


def _classify(server: str, full: str, tool: Mapping[str, Any], given: _Given, accept: bool,
              ) -> tuple[SideEffect, str] | None:  # fmt: skip
    """The class of a tool to pin and why: an exact ``--side-effect`` name (its ToolSpec name or
    the bare tool name), else the winning pattern, else ``readOnlyHint``, else the proposal when
    ``accept``; None: not confirmed."""
    cls = _given_exact(server, str(tool["name"]), full, given)
    if cls is not None:
        return cls, "given"
    by = _pattern_for(server, str(tool["name"]), given.patterns)
    if by is not None:
        return by[1], f"pattern {by[0]!r}"
    if read_only_hinted(tool):
        return SideEffect.READ_ONLY, "readOnlyHint"
    if accept:
        return proposed_side_effect(tool), "accepted proposal"
    return None


def _destructive_hinted(tool: Mapping[str, Any]) -> bool:
    ann = tool.get("annotations") or {}
    return ann.get("destructiveHint") is True and ann.get("readOnlyHint") is not True


def refused_by_loader(doc: Mapping[str, Any]) -> str | None:
    """Why ``callgate check`` and the sidecar would refuse the ToolSpec ``doc`` (its code and
    first problem: ``toolspec_invalid: /input_schema/...: message``), else None. Checked with the
    loader itself on the document's bytes, so import never writes a ToolSpec that stops every tool of
    the gateway from being served (an upstream ``inputSchema`` that is not JSON Schema 2020-12,
    such as draft-04's boolean ``exclusiveMinimum``)."""
    try:
        compile_tool_bytes(json.dumps(doc, ensure_ascii=False).encode(), f"<{doc.get('name')}>")
    except LoadError as exc:
        first = exc.violations[0] if exc.violations else None
        where = f"{first.pointer}: {first.message}" if first is not None else exc.message
        return f"{exc.code.value}: {where}"
    return None


def _plan(args: argparse.Namespace, mcp: McpConfig, listings: Mapping[str, list[dict[str, Any]]],
          pinned: Mapping[str, Pinned], record: Mapping[str, Recorded], restore: set[str],
          classes: _Given) -> _Plan:  # fmt: skip
    plan = _Plan()
    for server, tools in listings.items():
        up = mcp.upstream(server)
        assert up is not None
        listed = {str(t["name"]): t for t in tools}
        fresh: list[str] = []
        for tname, tool in sorted(listed.items()):
            key = tool_key(server, tname)
            if key in pinned:
                doc = pinned[key].doc
                caps = doc.get("required_capabilities") or [None]
                cls = doc.get("side_effect_class")
                gen = toolspec_for(
                    server, tool, SideEffect(cls) if cls in set(SideEffect) else SideEffect.MODIFY,
                    version=str(doc.get("version") or args.version), timeout_seconds=up.timeout_seconds,
                    capability=caps[0], name=str(doc.get("name") or ""),
                )  # fmt: skip
                m = merge(key, pinned[key], gen, tool, record.get(key), keep_edits=args.keep_edits)
                plan.merges.append((m, gen, tool))
                given = _given_exact(server, tname, str(doc.get("name") or ""), classes)
                if given is not None and given.value != cls:
                    plan.notes.append(f"note: --side-effect {given.value} for {doc.get('name')} not applied: it is "
                                      f"pinned already as {cls}, the class in {pinned[key].path.name} stands "
                                      "(edit side_effect_class there to change it)")  # fmt: skip
            elif key in record and key not in restore:
                name = record[key].generated.get("name", key)
                plan.notes.append(f"removed {name} (upstream {server} tool {tname}): its ToolSpec was removed "
                                  f"after import; not written again (--restore {name} imports it again)")  # fmt: skip
            elif (why := unservable(tool)) is not None:
                plan.notes.append(f"skipped {server}.{tname}: {why}: {UNSERVABLE_MESSAGES[why]}")
            else:
                fresh.append(tname)
        naming, refused = assign_names(server, fresh, pinned)
        for tname, why in sorted(refused.items()):
            plan.notes.append(f"refused upstream {server} tool {tname!r}: {why}; not pinned (never shown)")
        for tname in sorted(naming):
            tool, n = listed[tname], naming[tname]
            got = _classify(server, n.name, tool, classes, args.accept_proposed)
            doc = toolspec_for(server, tool, got[0] if got is not None else proposed_side_effect(tool),
                               version=args.version, timeout_seconds=up.timeout_seconds,
                               capability=n.capability, name=n.name)  # fmt: skip
            if (why := refused_by_loader(doc)) is not None:
                plan.notes.append(f"skipped {n.name}: {why} (in the upstream's definition; a ToolSpec the "
                                  f"loader refuses would stop the whole gateway): not pinned (never shown)")  # fmt: skip
                continue
            if got is None:
                plan.unconfirmed.append(f"{n.name} (proposed: {proposed_side_effect(tool).value})")
                continue
            if got[1].startswith("pattern ") and _destructive_hinted(tool) and got[0] not in DESTRUCTIVE:
                plan.weakened.append(f"{n.name} ({got[0].value} by {got[1]})")
                continue
            plan.new.append((server, doc, got[0], got[1]))
        for key, p in pinned.items():
            if key.startswith(f"{server}/") and key.split("/", 1)[1] not in listed:
                plan.notes.append(f"missing {p.doc.get('name')} (upstream {server} no longer lists tool "
                                  f"{key.split('/', 1)[1]!r}): the pin stays, the gateway hides it")  # fmt: skip
    return plan


DESTRUCTIVE = frozenset(SideEffect(c) for c in DESTRUCTIVE_CLASSES)
"""``modify`` and ``delete``: the only classes a pattern may give a ``destructiveHint: true`` tool."""


def _review(plan: _Plan, out: TextIO) -> None:
    for m, _, _ in plan.merges:
        if m.change is Change.UNCHANGED:
            continue
        what = "definition changed" if m.change is Change.CHANGED else "import's values changed"
        print(f"{m.change.value} {m.doc.get('name')} ({what}; {m.path.name})", file=out)
        if m.edits:
            print(f"  your edits: {', '.join(m.edits)}", file=out)
        if m.taken:
            print(f"  from the upstream: {', '.join(m.taken)}", file=out)
        if m.conflicts:
            print(f"  conflict (you and the upstream changed it): {', '.join(m.conflicts)}", file=out)
        if m.no_record:
            print(f"  no entry in {RECORD_FILE}: edits since import cannot be told apart", file=out)
        for line in m.lines:
            print(line, file=out)


def cmd_import(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout  # looked up per call (a default would keep the stdout of import time)
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
    try:
        record = read_record(tools_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=out)
        return 2
    restore, unknown = restore_keys(
        args.restore, {k: str(r.generated.get("name")) for k, r in record.items()}
    )
    if unknown:
        print(f"error: --restore {', '.join(unknown)}: not a tool in {tools_dir / RECORD_FILE}", file=out)
        return 2
    listings = asyncio.run(_listings(mcp, Path(cfg.base_dir), args.upstream))
    failed = {k: v for k, v in listings.items() if isinstance(v, str)}
    for name, why in failed.items():
        print(f"error: upstream {name}: cannot list tools ({why})", file=out)
    if failed:
        return 1
    listed = {k: v for k, v in listings.items() if not isinstance(v, str)}
    pinned = pinned_files(tools_dir)
    unmatched = _unmatched(classes.patterns, listed)
    if unmatched:
        print(f"error: --side-effect pattern(s) {', '.join(map(repr, unmatched))} match no tool listed by "
              f"upstream(s) {', '.join(listed) or 'none'}; nothing written", file=out)  # fmt: skip
    unknown_names = _unknown_names(classes.exact, listed, pinned)
    if unknown_names:
        print(f"error: --side-effect name(s) {', '.join(unknown_names)} match no tool listed by "
              f"upstream(s) {', '.join(listed) or 'none'}; nothing written", file=out)  # fmt: skip
    if unmatched or unknown_names:
        return 2
    plan = _plan(args, mcp, listed, pinned, record, restore, classes)
    for note in plan.notes:
        print(note, file=out)
    _review(plan, out)
    if plan.unconfirmed:
        print("error: side-effect class not confirmed for these tools (not read-only-hinted); pass "
              "--side-effect TOOL=CLASS for each (TOOL may be a pattern), or --accept-proposed:",
              file=out)  # fmt: skip
        for line in plan.unconfirmed:
            print(f"  {line}", file=out)
    if plan.weakened:
        print("error: a --side-effect pattern may not class a tool hinted destructiveHint: true below "
              "modify; give these by exact name if you mean it:", file=out)  # fmt: skip
        for line in plan.weakened:
            print(f"  {line}", file=out)
    conflicts = [m for m, _, _ in plan.merges if m.conflicts]
    if conflicts and not args.keep_edits:
        print("error: you edited what the upstream changed in: "
              + "; ".join(f"{m.doc.get('name')} ({', '.join(m.conflicts)})" for m in conflicts)
              + ". Pass --keep-edits to keep yours, or undo them in the file(s)", file=out)  # fmt: skip
    changed = [m for m, _, _ in plan.merges if m.change is Change.CHANGED]
    if changed and not args.accept_changes:
        print(f"error: {len(changed)} upstream definition(s) changed since they were pinned: review the "
              "diff above, then re-run with --accept-changes to re-pin them (until then the gateway "
              "hides them)", file=out)  # fmt: skip
    if (
        plan.unconfirmed
        or plan.weakened
        or (conflicts and not args.keep_edits)
        or (changed and not args.accept_changes)
    ):
        print("nothing written", file=out)
        return 1
    for m, gen, tool in plan.merges:
        record[m.key] = Recorded(gen, definition_of(tool))
        if m.change is not Change.UNCHANGED:
            write_toolspec(tools_dir, m.doc, path=m.path)
            print(f"{'re-pinned' if m.change is Change.CHANGED else 'updated'} {m.doc['name']} -> {m.path}",
                  file=out)  # fmt: skip
    for name, doc, cls, how in plan.new:
        path = write_toolspec(tools_dir, doc)
        record[tool_key(name, doc["upstream"]["tool"])] = Recorded(doc, definition_of(_listed(listed, doc)))
        print(f"pinned {doc['name']}@{doc['version']} {cls.value} ({how}) sha256 "
              f"{doc['upstream']['definition_sha256'][:16]}… -> {path}", file=out)  # fmt: skip
    write_record(tools_dir, record)
    same = sum(1 for m, _, _ in plan.merges if m.change is Change.UNCHANGED)
    print(
        f"ok: {len(plan.new)} tools pinned, {len(plan.merges) - same} re-pinned or updated, {same} unchanged; "
        "add policies for their capabilities (required_capabilities)",
        file=out,
    )
    return 0


def _listed(listed: Mapping[str, list[dict[str, Any]]], doc: Mapping[str, Any]) -> dict[str, Any]:
    up = doc["upstream"]
    return next(t for t in listed[up["server"]] if str(t["name"]) == up["tool"])


def cmd_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout  # looked up per call (a default would keep the stdout of import time)
    loaded = _load(args.config, out)
    if loaded is None:
        return 2
    cfg, mcp = loaded
    tools_dir = cfg.path(cfg.policy.dir) / "tools"
    pins = read_pins(tools_dir)
    try:
        record = read_record(tools_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=out)
        return 2
    listings = asyncio.run(_listings(mcp, Path(cfg.base_dir), []))
    bad = 0
    for name, tools in listings.items():
        if isinstance(tools, str):
            print(f"unreachable {name}: {tools}", file=out)
            bad += 1
            continue
        pinned = {(p.server, p.tool) for p in pins}
        unserved = set()
        for tool in tools:
            why = unservable(tool)
            if why is not None:
                unserved.add(str(tool["name"]))
                bad += (name, str(tool["name"])) in pinned  # a pin that can never be served
                print(f"unservable {name}.{tool['name']}: {why}: {UNSERVABLE_MESSAGES[why]}", file=out)
            elif (name, str(tool["name"])) not in pinned and (
                refused := refused_by_loader(toolspec_for(name, tool, proposed_side_effect(tool)))
            ) is not None:  # import skips it (never pinned): not a difference to re-pin
                unserved.add(str(tool["name"]))
                print(f"unservable {name}.{tool['name']}: {refused} (in the upstream's definition)", file=out)
        for c in compare(name, pins, tools):
            if c.state is PinState.MATCH or (c.state is PinState.NEW and c.tool in unserved):
                continue
            if c.state is PinState.NEW and tool_key(name, c.tool) in record:
                print(f"removed {c.spec_name} (upstream {c.server} tool {c.tool}): its ToolSpec was removed "
                      "after import, not a difference", file=out)  # fmt: skip
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
