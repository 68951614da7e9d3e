"""``callgate`` command line: ``serve``, ``check``, ``eval``, ``mcp`` (callgate/mcp/cli.py),
``--version`` (callgate/cli/version.py)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeVar

# Nothing of callgate at import time: `callgate --help` starts at once, and each command imports
# what it needs (issue 12 item 6; measured with `python -X importtime -m callgate --help`).
if TYPE_CHECKING:
    from callgate.config import Config
    from callgate.propose.gate import ProposeOutcome


def _config(path: str | None) -> Config:
    from callgate.config import Config, load_config

    if path:
        return load_config(path)
    default = Path("callgate.toml")
    return load_config(default) if default.exists() else Config(base_dir=str(Path.cwd()))


def _serve_config(args: argparse.Namespace) -> Config:
    """``--example``'s config (the packaged example policies, state under the working directory)
    or :func:`_config`'s."""
    if getattr(args, "example", False):
        from callgate.cli.example import example_config

        return example_config(Path.cwd())
    return _config(args.config)


def _hint_without_policies(cfg: Config, err: TextIO) -> None:
    """``callgate serve`` with no config file and no policies in the working directory (a new
    user's first try after ``pip install``): the built-in defaults read ``./policies``, so say
    where the example and the scaffolding are before the load errors repeat."""
    from callgate.cli.example import EXAMPLE_DIR

    policies = Path(cfg.path(cfg.policy.dir))
    if Path("callgate.toml").exists() or policies.is_dir():
        return
    print(
        f"callgate: no ./callgate.toml, so the built-in defaults: policies from {policies} (missing);"
        " serving NOT_READY until they appear. `callgate serve --example` serves the packaged"
        f" example policies; copy {EXAMPLE_DIR / 'policies'} to ./policies to start your own"
        " (`callgate new tool` then adds a tool to them; docs/CONFIG.md)",
        file=err,
    )


MALLOC_ARENAS = 4
"""glibc malloc arenas of a serving sidecar (``mallopt(M_ARENA_MAX)``), unless the environment
sets ``MALLOC_ARENA_MAX``. glibc's default (8 per core) gives every thread that allocates its
own arena, and memory freed in one stays there: after 15 s of Propose load four thread arenas
held ~1 MiB each, almost all free (docs/OPERATE.md, "Memory"). Fewer than 3 let the thread that
loads a snapshot share the main thread's heap, where the load's freed temporaries stay pinned
between live blocks: 8.4 MiB more resident after loading 100,000 entities with 1 or 2 arenas
than with 3 or 4 (measured 2026-12-05; RSS under Propose load the same with 2 and 4)."""
MMAP_THRESHOLD = 128 * 1024
"""Allocations from this size on get their own mapping, returned to the OS when freed
(``mallopt(M_MMAP_THRESHOLD)``, unless the environment sets ``MALLOC_MMAP_THRESHOLD_``). glibc
starts at the same 128 KiB but raises the threshold to the largest mapped block freed so far (up
to 32 MiB): after a load had freed its multi-MiB texts, the snapshot's large blocks came from the
heap between freed ones, and ~8 MiB of partly used pages stayed resident at 100,000 entities
that ``malloc_trim`` cannot return. A fixed value keeps them apart."""


class Mallopt(int, Enum):
    """The glibc ``mallopt`` parameters ``callgate serve`` sets (their numbers in malloc.h)."""

    M_ARENA_MAX = -8
    M_MMAP_THRESHOLD = -3


_MALLOPT: Final = ((Mallopt.M_ARENA_MAX, "MALLOC_ARENA_MAX", MALLOC_ARENAS),
                   (Mallopt.M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD))  # fmt: skip
"""(parameter, the environment variable that overrides it, value)."""


def tune_malloc(environ: Mapping[str, str] | None = None) -> tuple[Mallopt, ...]:
    """Set :data:`MALLOC_ARENAS` and :data:`MMAP_THRESHOLD` in glibc's allocator; called first
    by ``callgate serve``, before any thread allocates. Returns the parameters set: none on
    another C library, and none that the environment sets itself (glibc applied those)."""
    env = os.environ if environ is None else environ
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not glibc (musl, macOS)
        return ()
    if not libc.startswith("glibc"):
        return ()
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return ()
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return tuple(p for p, override, value in _MALLOPT if override not in env and mallopt(p.value, value) == 1)


def freeze_startup_objects() -> int:
    """Collect once, then move every object alive now (the ~50,000 of the imported modules:
    their functions, classes, protobuf descriptors) to the collector's permanent generation
    (:func:`gc.freeze`): they live as long as the process, and a full collection, which Python
    runs whenever enough objects have survived since the last one, then traverses only the
    objects made since (the calls', the snapshot's) instead of all of them (~10-18 ms each on the
    development machine). Reference counting still frees frozen objects. Called by ``callgate
    serve`` once its modules are imported, before the snapshot loads. Returns how many froze."""
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def cmd_serve(args: argparse.Namespace) -> int:
    tune_malloc()
    import asyncio

    from callgate.server.app import serve

    cfg = _serve_config(args)
    if not args.example and not args.config:
        _hint_without_policies(cfg, sys.stderr)
    freeze_startup_objects()
    from callgate.observability.logs import apply_log_format

    apply_log_format(cfg.log.format)
    return asyncio.run(serve(cfg))


def cmd_check(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Validate config, ToolSpecs and policies, then run the snapshot checks
    (:mod:`callgate.policy.check`: inventory, consistency, decision shapes, policy tests); print
    ``error: file:line:column: place: problem`` for every problem (exit 1)."""
    import asyncio

    from callgate.base.errors import LoadError
    from callgate.policy import check
    from callgate.policy.engines.registry import ENGINES
    from callgate.policy.snapshot import load_snapshot_from_config

    cfg = None
    try:
        cfg = _serve_config(args)
        _check_core(cfg, str(args.config or "callgate.toml"))
        snap = load_snapshot_from_config(cfg)
        secrets = _check_secrets_and_keys(cfg)
    except LoadError as exc:
        left_out = check.left_out_findings(cfg) if cfg is not None else []  # why an args.<name> is unknown
        for finding in check.load_error_findings(exc) + left_out:
            print(finding.render(), file=out)
        return 1

    async def run() -> list[check.Finding]:
        try:
            return await check.check_snapshot(cfg, snap)
        finally:
            await snap.engine.close()

    try:
        findings = asyncio.run(run())
    except LoadError as exc:  # the opa engine's embedded Rego twin could not be built
        findings = check.load_error_findings(exc)
    if not getattr(args, "offline", False):  # reach the configured server stores, as serve would
        findings += [
            check.Finding(
                check.Severity.ERROR, str(args.config or "callgate.toml"), f"store_unavailable: {p}"
            )
            for p in asyncio.run(_probe_stores(cfg))
        ]
    for finding in findings:
        print(finding.render(), file=out)
    if check.errors(findings):
        return 1
    print(f"ok: {len(snap.tools)} tools, engine {snap.engine.name}, revision {snap.revision}", file=out)
    for warning in ENGINES.get(cfg.policy.engine).warnings(cfg.path(cfg.policy.dir)):
        print(f"warning: {warning}", file=out)
    if secrets:
        print(f"  secrets: {', '.join(secrets)} (values loaded, not shown)", file=out)
    for t in snap.tools:
        print(
            f"  {t.spec.key:<32} {t.spec.side_effect_class.value:<9} {', '.join(t.spec.required_capabilities)}",
            file=out,
        )
    if getattr(args, "against", None):  # what this change loosens (docs/PROVE.md)
        from callgate.policy.prove.cli import check_against

        policy_dir = Path(cfg.path(cfg.policy.dir))
        return min(1, check_against(policy_dir, tuple(cfg.policy.shadow), args.against, out, sys.stderr))
    return 0


def _check_core(cfg: Config, source: str) -> None:
    """``[core] engine = "native"`` where the compiled core does not load (the sdist's pure-Python
    wheel, a build for another platform): ``serve`` refuses to start, so ``check`` says so first."""
    from callgate.base.errors import LoadError, config_invalid
    from callgate.propose.core import Core

    try:
        Core(cfg.core.engine)
    except LoadError as exc:
        raise config_invalid(exc.message, source=source) from None


async def _probe_stores(cfg: Config) -> list[str]:
    """Reach the configured server stores as ``serve`` would (read-only): problems."""
    from callgate.store.idempotency.registry import IDEMPOTENCY_BACKENDS
    from callgate.store.registry import STORES

    probes = [STORES.get(cfg.store.backend).probe]
    if cfg.store.backend != "postgres":  # with the PostgreSQL store the keys live in it
        probes.append(IDEMPOTENCY_BACKENDS.get(cfg.idempotency.backend).probe)
    problems: list[str] = []
    for probe in probes:
        if probe is not None:
            problems += await probe(cfg, os.environ)
    return problems


def cmd_store_backup(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """An online backup of the SQLite store (:mod:`callgate.store.backup`); exit 1 with the
    reason when it cannot be taken."""
    from callgate.base.errors import CallgateError, LoadError
    from callgate.store.backup import backup_sqlite

    try:
        cfg = _config(args.config)
        if cfg.store.backend != "sqlite":
            print(
                f"error: store.backend = {cfg.store.backend}: back it up with its own tools "
                "(PostgreSQL: pg_dump, docs/OPERATE.md)",
                file=out,
            )
            return 1
        report = backup_sqlite(cfg.path(cfg.store.path), Path(args.target))
    except (CallgateError, LoadError) as exc:
        where = f"{exc.source}: " if isinstance(exc, LoadError) and exc.source else ""
        print(f"error: {where}{exc.code.value}: {exc.message}", file=out)
        return 1
    print(
        f"ok: {report.target} ({report.bytes} bytes, schema version {report.schema_version}, "
        f"{report.invocations} invocations, {report.events} events)",
        file=out,
    )
    return 0


def cmd_store_compact(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Shrink a stopped SQLite store once (:mod:`callgate.store.compact`); exit 1 with the
    reason when it cannot."""
    from callgate.base.errors import CallgateError, LoadError
    from callgate.store.compact import compact_sqlite

    try:
        cfg = _config(args.config)
        if cfg.store.backend != "sqlite":
            print(f"error: store.backend = {cfg.store.backend}: PostgreSQL reclaims space itself", file=out)
            return 1
        report = compact_sqlite(cfg.path(cfg.store.path))
    except (CallgateError, LoadError) as exc:
        print(f"error: {exc.code.value}: {exc.message}", file=out)
        return 1
    print(
        f"ok: {report.path} {report.bytes_before} -> {report.bytes_after} bytes in {report.seconds:.2f} s "
        "(auto_vacuum = INCREMENTAL: retention now hands freed pages back)",
        file=out,
    )
    return 0


def _check_secrets_and_keys(cfg: Config) -> list[str]:
    """Load what ``serve`` would load besides policies: secret files/variables (values never
    printed) and a fixed signing key. Raises LoadError."""
    from callgate.base.errors import config_invalid
    from callgate.execute.redaction import Redactor
    from callgate.execute.secrets import SecretStore

    store = SecretStore.load(cfg.secrets, Path(cfg.base_dir))
    try:
        Redactor(secrets=store.values())
    except ValueError as exc:
        raise config_invalid(f"secrets: {exc}") from None
    cc = cfg.credentials
    for path in (cc.key_file, cc.next_key_file, *cc.previous_key_files):
        if path and not cfg.path(path).is_file():
            raise config_invalid("credentials key file not found", source=str(cfg.path(path)))
    return [sc.name for sc in cfg.secrets]


def _outcome_json(case_no: int, case: dict[str, Any], o: ProposeOutcome) -> dict[str, Any]:
    from callgate.propose.gate import decision_to_dict

    r = o.record
    return {
        "case": case.get("name", case_no),
        "tool": f"{r.tool_name}@{r.tool_version}",
        "state": r.state.value,
        "decision": decision_to_dict(o.decision) if o.decision else None,
        "digest": r.digest or None,
        "normalized_arguments": json.loads(r.normalized_arguments) if r.normalized_arguments else None,
        "rejection": o.rejection.as_dict() if o.rejection else None,
        "invocation_id": r.invocation_id,
    }


async def _eval(cfg: Config, cases: Sequence[tuple[int, dict[str, Any]]], out: TextIO) -> int:
    from datetime import datetime

    from callgate.base.clock import FixedClock, SystemClock
    from callgate.base.model import Proposal, Subject
    from callgate.base.trace import TraceContext
    from callgate.cli.evalcases import case_arguments, mismatches
    from callgate.policy.snapshot import load_snapshot_from_config
    from callgate.propose.gate import SessionSpec
    from callgate.server.app import Shared
    from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore
    from callgate.store.sqlite import SQLiteStore

    snap = load_snapshot_from_config(cfg)
    failures = 0
    for n, case in cases:
        # Each case alone: fresh stores, so no key, session or budget carries to the next case.
        store = SQLiteStore(":memory:")
        idem = SQLiteIdempotencyStore(":memory:")
        await idem.start()
        try:
            clock = (
                FixedClock(datetime.fromisoformat(case["reference_clock"]))
                if "reference_clock" in case
                else SystemClock()
            )
            gate = Shared.build(cfg, snap, store, clock, idem).gate(cfg, store, clock)
            subj = case.get("subject", {})
            session = await gate.open_session(
                SessionSpec(
                    subject=Subject(tenant=subj.get("tenant", ""), id=subj.get("id", "")),
                    timezone=case.get("timezone", "UTC"),
                    locale=case.get("locale", "en"),
                )
            )
            await gate.list_tools(session.session_id, "eval")
            name, _, version = str(case.get("tool", "")).partition("@")
            raw = case_arguments(case)
            outcome = await gate.propose(
                Proposal(
                    session.session_id, "eval", f"case-{n}", name, version, raw, case.get("idempotency_key")
                ),
                TraceContext.from_traceparent(None),
            )
            result = _outcome_json(n, case, outcome)
            if "expect" in case:
                problems = mismatches(result, case["expect"])
                result["pass"] = not problems
                if problems:
                    result["mismatches"] = problems
                    failures += 1
            print(json.dumps(result, ensure_ascii=False, sort_keys=True), file=out)
        finally:
            await store.close()
            await idem.close()
    return 1 if failures else 0


def cmd_eval(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run proposal cases through the whole pipeline offline (a fresh in-memory store per case,
    no server; docs/EVAL.md)."""
    import asyncio

    from callgate.base.errors import CallgateError
    from callgate.cli.evalcases import load_cases

    try:
        cfg = _serve_config(args)
        cases = load_cases(args.file)
        return asyncio.run(_eval(cfg, cases, out))
    except (CallgateError, json.JSONDecodeError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_policy_prove(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Prove the policy properties (:mod:`callgate.policy.prove.cli`)."""
    from callgate.policy.prove.cli import cmd_policy_prove as run

    return run(args, out, sys.stderr, _config)


def _prove_arguments(p: argparse.ArgumentParser) -> None:
    from callgate.policy.prove.cli import add_arguments

    add_arguments(p)


def cmd_policy_test(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run the request files in DIR/ALLOW, DIR/DENY, DIR/CONFIRM on an engine; print a pass/fail
    table (format: ``callgate/policy/policytest.py``). 0 only if all pass and at least one ran."""
    import asyncio

    from callgate.base.errors import CallgateError
    from callgate.policy.policytest import run_command

    try:
        cfg = _serve_config(args)
    except CallgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dir is None:  # --example: the packaged example's own tests
        if not args.example:
            print(
                "error: give DIR (the folder holding ALLOW/, DENY/ and CONFIRM/), or --example",
                file=sys.stderr,
            )
            return 2
        args.dir = str(Path(cfg.path(cfg.policy.dir)) / "tests")
    return asyncio.run(run_command(cfg, Path(args.dir), engine=args.engine, opa_url=args.opa_url, out=out))


def cmd_status(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Ask a running sidecar for its policy status (``callgate.v1.PolicyStatus``): the serving
    revision and, when the newest files were refused, each problem. Exit 0 when the newest files
    serve, 1 when they were refused or nothing serves, 2 when the sidecar cannot be reached."""
    import grpc

    from callgate.base.errors import CallgateError
    from callgate.gen.v1 import callgate_pb2 as pb
    from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc

    target = args.target
    if not target:
        try:
            cfg = _config(args.config)
        except CallgateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        listener = cfg.server.agent
        target = f"unix:{cfg.path(listener.socket)}" if listener.socket else listener.tcp
    try:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.PolicyStatusStub(channel)  # type: ignore[no-untyped-call]
            reply = stub.GetPolicyStatus(pb.GetPolicyStatusRequest(), timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"error: cannot reach the sidecar at {target}: {exc.code().name}", file=sys.stderr)
        return 2
    if args.json:
        from google.protobuf import json_format

        doc = json_format.MessageToDict(reply, always_print_fields_with_no_presence=True)
        print(json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True), file=out)
    else:
        print(
            f"serving: {reply.serving_revision or '-'} ({'ready' if reply.ready else 'NOT READY'})", file=out
        )
        if reply.latest_files_ok:
            print("latest policy files: loaded", file=out)
        else:
            print(f"latest policy files: REFUSED at {reply.refused_at}", file=out)
            for p in reply.problems:
                where = f"{p.file}:{p.line}" if p.line else p.file
                place = f" {p.place}:" if p.place else ""
                print(f"  error: {where}:{place} {p.problem}", file=out)
    return 0 if reply.ready and reply.latest_files_ok else 1


def cmd_new_tool(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Scaffold a ToolSpec, its Cedar and Rego rules and test requests (callgate/cli/newtool.py)."""
    from callgate.base.errors import CallgateError
    from callgate.cli.newtool import ScaffoldError, scaffold

    try:
        if args.dir:
            policy_dir = Path(args.dir)
        else:
            cfg = _config(args.config)
            policy_dir = cfg.path(cfg.policy.dir)
        done = scaffold(policy_dir, args.name, args.side_effect)
    except (ScaffoldError, CallgateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in done.created:
        print(f"created  {path}", file=out)
    for path in done.appended:
        print(f"appended {path}", file=out)
    print("next: type the arguments in the ToolSpec, write the rules, then `callgate check`", file=out)
    return 0


# --- callgate explain (callgate/cli/explain.py) ---------------------------------------------------
T = TypeVar("T")


class _StoreOpenError(Exception):
    """The configured store could not be opened (exit 2)."""


def cmd_explain(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Answer the 6.13 questions for one invocation (or show one recorded ``Authorize`` decision
    with ``--decision``) from the configured store (read-only; the sidecar may be running or
    stopped). Exit 1 for an unknown id, 2 for an unusable store or a wrong call."""
    from callgate.base.errors import CallgateError
    from callgate.cli import explain as ex

    if bool(args.invocation_id) == bool(args.decision):
        print("error: give an INVOCATION_ID or --decision DECISION_ID (one of them)", file=sys.stderr)
        return 2
    try:
        cfg = _config(args.config)
    except CallgateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.decision:
        return _explain_from_store(
            cfg,
            lambda source: ex.explain_decision(source, args.decision),
            f"unknown decision_id {args.decision!r}",
            ex.decision_to_json,
            ex.render_decision_text,
            args.json,
            out,
        )
    spec_files = ex.spec_files_in(cfg.path(cfg.policy.dir))
    try:
        masker = _masker(cfg)
    except CallgateError as exc:  # fail closed: no arguments shown that could not be masked
        print(
            f"error: the configured secrets are needed to mask them in the arguments shown: {exc}",
            file=sys.stderr,
        )
        return 2

    async def fetch(source: Any) -> Any:  # Explanation | ExpiredInvocation | None (mypy cannot solve
        # the type parameter of _explain_from_store from a union)
        found = await ex.explain_or_expired(source, args.invocation_id, spec_files=spec_files)
        return ex.masked(found, masker) if isinstance(found, ex.Explanation) else found

    return _explain_from_store(
        cfg,
        fetch,
        f"unknown invocation_id {args.invocation_id!r}",
        ex.any_to_json,
        ex.any_to_text,
        args.json,
        out,
    )


def _masker(cfg: Config) -> Any:
    """As the confirmer listener masks the arguments a person sees (``callgate explain`` shows what
    the console does). Raises CallgateError (``config_invalid``); the message never holds a value."""
    from callgate.execute.secrets import configured_masker

    return configured_masker(cfg.secrets, Path(cfg.base_dir))


def _explain_from_store(
    cfg: Config,
    fetch: Callable[[Any], Awaitable[T | None]],
    unknown: str,
    as_json: Callable[[T], Any],
    as_text: Callable[[T], str],
    want_json: bool,
    out: TextIO,
) -> int:
    """Open the configured store read-only (SQLite or PostgreSQL), ``fetch`` one record, print
    it; exit 1 when it is not there, 2 when the store cannot be opened or read."""
    import asyncio
    import sqlite3

    from callgate.base.errors import CallgateError
    from callgate.cli.explain import open_source

    where = str(cfg.path(cfg.store.path)) if cfg.store.backend == "sqlite" else "PostgreSQL store"

    async def run() -> T | None:
        try:
            opened = await open_source(cfg, os.environ)
        except (OSError, sqlite3.Error, CallgateError) as exc:
            raise _StoreOpenError(f"cannot open the event store {where}: {exc}") from exc
        try:
            return await fetch(opened.source)
        finally:
            await opened.close()

    try:
        found = asyncio.run(run())
    except _StoreOpenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (sqlite3.Error, CallgateError) as exc:
        print(f"error: cannot read the event store {where}: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print(f"error: {unknown} (not in {where})", file=sys.stderr)
        return 1
    if want_json:
        print(json.dumps(as_json(found), ensure_ascii=False, indent=2, sort_keys=True), file=out)
    else:
        out.write(as_text(found))
    return 0


MCP_HELP = "the MCP gateway: callgate in front of MCP servers (docs/MCP.md)"
"""``callgate mcp``'s line in ``--help`` (the same as callgate/mcp/cli.py's), shown without
importing the gateway."""
CONSOLE_HELP = "serve the confirmation console (web UI for the confirmer role)"
"""``callgate console``'s line in ``--help`` (the same as callgate/console/cli.py's)."""
_EXTRA_COMMANDS = (
    ("mcp", "callgate.mcp.cli", "mcp", MCP_HELP),
    ("console", "callgate.console.cli", "starlette", CONSOLE_HELP),
)
"""Commands of optional extras: name (also the extra's name), the module whose ``add_parser``
adds it (imported only when the command runs), the package whose presence lists it in
``--help``, and its help line."""


def _extra_missing(name: str, exc: ImportError) -> int:
    """``callgate mcp`` / ``callgate console`` without their extra: say which one to install
    (exit 2), as the sidecar's commands do in the slim install."""
    from callgate.cli.version import install_hint

    print(f"callgate {name} needs the '{name}' extra ({install_hint(name)}): {exc}", file=sys.stderr)
    return 2


_EXTRA_NAMES: Final = frozenset(name for name, *_ in _EXTRA_COMMANDS)


class _VersionAction(argparse.Action):
    """``--version``: print :func:`callgate.cli.version.version_info` and exit, like argparse's
    own version action (no command needed)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from callgate.cli.version import version_info

        sys.stdout.write(version_info().render())
        parser.exit()


def _engine_names(command: str) -> tuple[str, ...] | None:
    """The registered engines, for ``policy test --engine`` (imported only for that command)."""
    if command != "policy":
        return None
    from callgate.policy.engines.registry import ENGINES

    return ENGINES.names()


_ONE_SHOT: Final = frozenset({"check", "status", "eval", "policy", "new", "explain", "store"})
"""Commands that print an answer and exit: they log warnings and errors only (``-v``: debug)."""

_CONFIG_HELP: Final = "TOML config (default: ./callgate.toml, else the built-in defaults; docs/CONFIG.md)"


def _config_or_example(p: argparse.ArgumentParser, example_help: str) -> None:
    """``--config FILE`` or ``--example`` (the packaged example policies), not both."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--config", "-c", help=_CONFIG_HELP)
    which.add_argument("--example", action="store_true", help=example_help)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), "")
    parser = argparse.ArgumentParser(
        prog="callgate", description="Authorization sidecar for AI-agent tool calls."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version, the core, the proto package, the store schema and the engines",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the gRPC sidecar")
    _config_or_example(
        p, "serve the packaged example policies (Cedar + SQLite), Unix sockets and state in ./var"
    )
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("check", help="validate config, ToolSpecs and policies; non-zero exit on error")
    _config_or_example(p, "check the packaged example policies (serve --example's)")
    p.add_argument(
        "--offline",
        action="store_true",
        help="check the files only: do not connect to a configured PostgreSQL store or key store",
    )
    p.add_argument(
        "--against",
        metavar="REV",
        help="also prove the Cedar policies no looser than git revision REV; print what they loosen",
    )
    p.set_defaults(func=cmd_check)
    p = sub.add_parser(
        "status", help="a running sidecar's policy status: serving revision, refused files and why"
    )
    p.add_argument("--config", "-c", help=_CONFIG_HELP)
    p.add_argument("--target", help="gRPC address (default: the config's agent listener)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("eval", help="run proposal cases (.json or .jsonl, '-' for stdin) offline")
    p.add_argument(
        "file", help="a case file: .json (a case, a list, or defaults + cases) or .jsonl; '-': stdin"
    )
    _config_or_example(p, "run the cases on the packaged example policies")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("policy", help="policy authoring tools")
    policy_sub = p.add_subparsers(dest="policy_command", required=True)
    p = policy_sub.add_parser(
        "test", help="run ALLOW/, DENY/, CONFIRM/ request files; non-zero exit unless all pass"
    )
    p.add_argument(
        "dir",
        nargs="?",
        help="folder holding ALLOW/, DENY/ and CONFIRM/ (the project's: policies/tests; with --example: its own)",
    )
    _config_or_example(p, "the packaged example policies (and their tests when DIR is not given)")
    p.add_argument("--engine", choices=_engine_names(command), help="default: the config's policy.engine")
    p.add_argument("--opa-url", help="OPA server for --engine opa (default: the config's policy.opa_url)")
    p.set_defaults(func=cmd_policy_test)
    p = policy_sub.add_parser(
        "prove",
        help="prove the properties file over every request (docs/PROVE.md); non-zero unless all proved",
    )
    _prove_arguments(p)
    p.set_defaults(func=cmd_policy_prove)
    p = sub.add_parser("new", help="scaffold policy files")
    new_sub = p.add_subparsers(dest="new_command", required=True)
    p = new_sub.add_parser("tool", help="a ToolSpec, its Cedar and Rego rules and test requests")
    p.add_argument("name", help="NAME[@VERSION], e.g. payments.refund@v1 (version default v1)")
    p.add_argument("--dir", help="the policy folder (default: the config's policy.dir)")
    p.add_argument("--config", "-c", help=_CONFIG_HELP)
    p.add_argument(
        "--side-effect",
        default="read_only",
        choices=["read_only", "create", "modify", "delete"],
        help="the ToolSpec's side_effect_class (default read_only)",
    )
    p.set_defaults(func=cmd_new_tool)
    p = sub.add_parser(
        "explain", help="what happened to one invocation (the 8 questions of 6.13), from the event store"
    )
    p.add_argument(
        "invocation_id", nargs="?", default="", help="inv_... (the Propose answer's invocation_id)"
    )
    p.add_argument(
        "--decision",
        metavar="DECISION_ID",
        default="",
        help="show one recorded Authorizer.Authorize decision",
    )
    p.add_argument("--config", "-c", help=_CONFIG_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output (bytes as utf8 + base64)")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("store", help="the event store: an online backup, compaction")
    store_sub = p.add_subparsers(dest="store_command", required=True)
    p = store_sub.add_parser("backup", help="copy the SQLite store while the sidecar runs (consistent)")
    p.add_argument("target", help="the new backup file (must not exist)")
    p.add_argument("--config", "-c", help=_CONFIG_HELP)
    p.set_defaults(func=cmd_store_backup)
    p = store_sub.add_parser(
        "compact", help="shrink a stopped SQLite store once (VACUUM; afterwards retention shrinks it)"
    )
    p.add_argument("--config", "-c", help=_CONFIG_HELP)
    p.set_defaults(func=cmd_store_compact)
    for name, cli_module, probe, help_text in _EXTRA_COMMANDS:
        if command == name:
            try:
                add_extra_parser = importlib.import_module(cli_module).add_parser
            except ImportError as exc:  # the extra is not installed
                return _extra_missing(name, exc)
            add_extra_parser(sub)
        elif importlib.util.find_spec(probe) is not None:  # listed in --help without importing it
            sub.add_parser(name, help=help_text, add_help=False)
    args = parser.parse_args(words)
    if args.command not in _EXTRA_NAMES:
        from callgate.cli.version import SIDECAR_EXTRA, install_hint, missing_sidecar

        if missing := missing_sidecar():  # the slim install: the client and the adapters only
            print(
                f"callgate {args.command} needs the sidecar: {install_hint(SIDECAR_EXTRA)} "
                f"(not installed: {', '.join(missing)})",
                file=sys.stderr,
            )
            return 2
    logging.basicConfig(  # the one-shot commands print their answer; their INFO lines are noise
        level=logging.DEBUG
        if args.verbose
        else logging.WARNING
        if args.command in _ONE_SHOT
        else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        rc: int = args.func(args)
    except Exception as exc:  # a config or policy a command could not load: say so, no traceback
        from callgate.base.errors import LoadError

        if isinstance(exc, ImportError) and args.command in _EXTRA_NAMES:
            return _extra_missing(args.command, exc)  # what the extra brings is not installed
        if not isinstance(exc, LoadError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
