"""Policy tests for authors: ``callgate policy test DIR``.

A suite is a directory holding up to three folders, one per wanted effect (the layout of
cedar-examples' allow/deny request folders, plus callgate's confirm)::

    DIR/ALLOW/*.json      each request must be allowed
    DIR/DENY/*.json       each request must be denied
    DIR/CONFIRM/*.json    each request must need a confirmation

Folders may have subfolders (``ALLOW/calendar/x.json``); only ``*.json`` files are cases. Every
file is run against the configured engine (Cedar, embedded Rego or OPA) and the result is a
pass/fail table. The project's own suite is ``policies/tests/``: one set of files, run on every
engine, so it also proves that the Cedar and Rego policies mean the same thing.

Request file (strict JSON: duplicate keys, NaN and the like are refused; unknown keys too, so a
misspelt expectation cannot silently test nothing). The format is the JSON Schema (2020-12)
``policytest-request.schema.json`` beside this module; a file that breaks it is reported as
``file: /json/pointer: message``::

    {
      "description": "schedulers create events in their tenant's calendars, confirmed",
      "principal": {"tenant": "acme", "id": "alice"},
      "action": "calendar.create",
      "resource": "calendar:primary",
      "context": {"tool": "calendar.create_event@v1",
                  "args": {"calendar_id": "primary", "title": "standup",
                           "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 30}},
      "expect_reasons": ["calendar-create-scheduler"]
    }

==================  ========  ==========================================================
field               required  meaning
==================  ========  ==========================================================
description         no        a string, for the reader
principal           yes       ``{"tenant": str, "id": str}``: the session's subject
action              yes       the capability (a Cedar action / ``input.capability``)
resource            yes       the rendered resource template, e.g. ``file:/tmp/x``
context             no        object, default ``{}``: ``{"tool": "name@version",
                              "args": {...}}`` as the authorize stage passes it (the engine
                              adds the session tenant, as in production); ``"now"``: the
                              reference clock (RFC 3339; default: the clock when the suite
                              runs: state it in a case whose policy reads ``context.now``)
expect_reasons      no        list of policy ids: the decision's policy ids must be exactly
                              these (order and repeats ignored); ``[]`` = no policy decided
                              (e.g. a ``no_matching_permit`` deny)
expect_error_code   no        DENY only: the deny must be this engine fault, e.g.
                              ``policy_evaluation_error`` or ``engine_error``
==================  ========  ==========================================================

A case passes when the effect is the folder's, the policy ids match ``expect_reasons`` (if
given), and the fault code matches ``expect_error_code``. Without ``expect_error_code`` a
fail-closed deny caused by an engine fault (a schema refusal, an OPA timeout, ...) does **not**
pass a DENY case: an engine that is down would otherwise pass every DENY test.

The suite fails when any case fails, when a file is malformed (reported with its name and what
is wrong), when a folder is misnamed (``allow/``, ``deny_requests/``: rename to ``ALLOW/``...) or
a case file lies outside the three folders, and when it runs no case at all: a suite that tests
nothing must not pass.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from callgate.arguments.parse import ParseLimits, parse_json_document
from callgate.base.errors import CallgateError, RejectedError
from callgate.base.model import AuthzRequest, Decision, Effect, Reason, Subject
from callgate.base.schemafiles import describe, packaged_validator, schema_problems
from callgate.policy.engines.base import Engine
from callgate.policy.engines.registry import ENGINES

if TYPE_CHECKING:
    from callgate.config import Config

FOLDERS: Mapping[str, Effect] = {"ALLOW": Effect.ALLOW, "CONFIRM": Effect.CONFIRM, "DENY": Effect.DENY}
"""Folder name -> wanted effect, in the order the table lists them."""

SCHEMA_FILE = "policytest-request.schema.json"
"""The request-file format (JSON Schema 2020-12), package data of ``callgate.policy``."""
_LIMITS = ParseLimits(max_bytes=1024 * 1024, max_depth=64)
_NEAR_MISS = {
    alias: folder
    for folder in ("ALLOW", "CONFIRM", "DENY")
    for alias in (
        folder.lower(),
        f"{folder.lower()}_requests",
        f"{folder.lower()}_queries",
        f"{folder.lower()}_cases",
    )
} | {"allowed": "ALLOW", "confirmed": "CONFIRM", "denied": "DENY"}
"""Folder names a suite author may have meant as one of ours (cedar-examples uses
``allow_requests/``): reported, never silently skipped."""


class SuiteError(ValueError):
    """The suite directory itself cannot be used (missing, not a directory)."""


class CaseFileError(ValueError):
    """A request file is malformed; the message names the file and the place
    (``DENY/x.json: /principal/id: must be a string, not a number``)."""


@dataclass(frozen=True, slots=True)
class RequestCase:
    """One parsed request file."""

    file: str
    """Path relative to the suite directory, with ``/`` separators (``DENY/x.json``)."""
    wanted: Effect
    request: AuthzRequest
    description: str = ""
    expect_reasons: tuple[str, ...] | None = None
    expect_error_code: str | None = None


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one file (a malformed file is a failed case that never ran)."""

    file: str
    wanted: Effect | None
    """The folder's effect; ``None`` for a file or folder outside the layout."""
    got: Effect | None
    """The engine's effect; ``None`` when the file could not be run."""
    reasons: tuple[Reason, ...]
    error_code: str
    passed: bool
    message: str
    """Why it failed (empty when it passed)."""
    description: str = ""

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(r.policy_id for r in self.reasons if r.policy_id)


@dataclass(frozen=True, slots=True)
class SuiteResult:
    directory: str
    engine: str
    revision: str
    cases: tuple[CaseResult, ...]
    notes: tuple[str, ...] = ()
    """Extra lines for the reader (e.g. where a suite probably is when none was found)."""

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.passed)

    @property
    def failed(self) -> int:
        return sum(1 for c in self.cases if not c.passed)

    @property
    def ok(self) -> bool:
        """All cases passed and at least one ran."""
        return self.failed == 0 and self.passed > 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


# -- reading request files --------------------------------------------------------------------


def parse_case(raw: bytes, file: str, wanted: Effect) -> RequestCase:
    """Parse one request file: strict JSON, then the schema ``policytest-request.schema.json``
    (package data beside this module), then the rule the folder adds. ``file`` names the file
    in messages and in the case. Raises :class:`CaseFileError` (``file: /pointer: message``)."""
    try:
        doc = parse_json_document(raw, _LIMITS)
    except RejectedError as exc:
        raise CaseFileError(f"{file}: not strict JSON ({exc.code.value}): {exc.message}") from None
    problems = schema_problems(packaged_validator("callgate.policy", SCHEMA_FILE), doc)
    if problems:
        raise CaseFileError(f"{file}: {describe(problems)}")
    if "expect_error_code" in doc and wanted is not Effect.DENY:
        raise CaseFileError(
            f"{file}: /expect_error_code: only meaningful in DENY/ (an engine fault is always a deny)"
        )
    principal = doc["principal"]
    return RequestCase(
        file=file,
        wanted=wanted,
        request=AuthzRequest(
            subject=Subject(tenant=principal["tenant"], id=principal["id"]),
            capability=doc["action"],
            resource=doc["resource"],
            context=doc.get("context", {}),
        ),
        description=doc.get("description", ""),
        expect_reasons=tuple(doc["expect_reasons"]) if "expect_reasons" in doc else None,
        expect_error_code=doc.get("expect_error_code"),
    )


def _near_miss(name: str) -> str | None:
    """``allow``, ``Deny``, ``allow_requests``... -> the folder name that was probably meant."""
    meant = _NEAR_MISS.get(name.lower())
    return meant if meant != name else None


def _failure(file: str, wanted: Effect | None, message: str, description: str = "") -> CaseResult:
    return CaseResult(
        file=file,
        wanted=wanted,
        got=None,
        reasons=(),
        error_code="",
        passed=False,
        message=message,
        description=description,
    )


def collect(directory: Path) -> tuple[list[RequestCase], list[CaseResult]]:
    """The suite's cases (sorted: ALLOW, CONFIRM, DENY, then by path) and the files/folders that
    could not be used (as failed results). Raises :class:`SuiteError` if ``directory`` is
    not a directory."""
    if not directory.exists():
        raise SuiteError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise SuiteError(f"{directory}: not a directory")
    cases: list[RequestCase] = []
    bad: list[CaseResult] = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            meant = _near_miss(entry.name)
            if entry.name not in FOLDERS and meant is not None:
                bad.append(
                    _failure(
                        f"{entry.name}/",
                        None,
                        f"folder must be named {meant}/ (exactly: ALLOW/, CONFIRM/, DENY/); its files were not run",
                    )
                )
        elif entry.suffix == ".json":
            bad.append(
                _failure(
                    entry.name,
                    None,
                    "case file outside ALLOW/, CONFIRM/ and DENY/: not run (the folder is the wanted effect)",
                )
            )
    for folder, wanted in FOLDERS.items():
        root = directory / folder
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.json")):
            if not path.is_file() or any(part.startswith(".") for part in path.relative_to(root).parts):
                continue
            rel = path.relative_to(directory).as_posix()
            try:
                cases.append(parse_case(path.read_bytes(), rel, wanted))
            except CaseFileError as exc:
                bad.append(_failure(rel, wanted, f"malformed case file: {exc}"))
            except OSError as exc:
                bad.append(_failure(rel, wanted, f"cannot read: {exc.strerror or exc}"))
    return cases, bad


# -- judging ------------------------------------------------------------------------------------


def _fault_text(d: Decision) -> str:
    msg = next((r.message for r in d.reasons if r.code == d.error_code and r.message), "")
    return f"{d.error_code}: {msg}" if msg else d.error_code


def judge(case: RequestCase, decision: Decision) -> CaseResult:
    """Compare one decision with what the case wants."""
    problems: list[str] = []
    if decision.effect is not case.wanted:
        problems.append(f"wanted {case.wanted.value}, got {decision.effect.value}")
    if case.expect_error_code is not None:
        if decision.error_code != case.expect_error_code:
            got = _fault_text(decision) if decision.error_code else "no engine fault"
            problems.append(f"wanted error code {case.expect_error_code}, got {got}")
    elif decision.error_code:
        if decision.effect is case.wanted:  # a DENY case denied by a fault
            problems.append(
                f"the deny is an engine fault ({_fault_text(decision)}), not a policy decision; "
                f'add "expect_error_code": "{decision.error_code}" if this case tests that'
            )
        else:
            problems.append(f"engine fault: {_fault_text(decision)}")
    if case.expect_reasons is not None:
        want, got_ids = sorted(set(case.expect_reasons)), sorted(set(decision.policy_ids))
        if want != got_ids:
            problems.append(f"wanted policy ids [{', '.join(want)}], got [{', '.join(got_ids)}]")
    return CaseResult(
        file=case.file,
        wanted=case.wanted,
        got=decision.effect,
        reasons=decision.reasons,
        error_code=decision.error_code,
        passed=not problems,
        message="; ".join(problems),
        description=case.description,
    )


async def run_cases(cases: Sequence[RequestCase], engine: Engine) -> list[CaseResult]:
    """Run each case on ``engine``, one at a time (a suite is small; sequential calls keep a
    loaded OPA from turning into timeouts, and a fault stays with its case)."""
    results: list[CaseResult] = []
    for case in cases:
        try:
            decisions = await engine.authorize_batch([case.request])
        except Exception as exc:
            results.append(
                _failure(
                    case.file, case.wanted, f"the engine raised {type(exc).__name__}: {exc}", case.description
                )
            )
            continue
        if len(decisions) != 1:
            results.append(
                _failure(
                    case.file,
                    case.wanted,
                    f"the engine returned {len(decisions)} decisions for 1 request",
                    case.description,
                )
            )
            continue
        results.append(judge(case, decisions[0]))
    return results


def _policy_values(cases: list[RequestCase], tools_dir: Path | None) -> list[RequestCase]:
    """Cases get their context as the authorize stage passes it: ``context.now`` (RFC 3339 in the
    file, else the clock when the suite runs) as a time value, and when ``context.tool`` names a
    ToolSpec, its ``decimal`` and time arguments as decimals and time values (a Cedar ``decimal``
    / ``datetime`` / ``duration``, a Rego number / text), so ``"amount": "150.00"`` and
    ``"start": "2026-07-20"`` in a request file mean what they mean in production; and
    ``context.text`` from the arguments when the file does not state it."""
    from callgate.policy.textflags import TEXT_KEY, text_context
    from callgate.policy.timevalues import NOW_KEY, TimeValueError, now_instant, time_values

    tools: dict[str, Any] = {}
    if tools_dir is not None and tools_dir.is_dir():
        from callgate.policy.toolspecs import load_tools

        try:
            tools = {t.spec.key: t for t in load_tools(tools_dir)}
        except CallgateError:
            pass  # the snapshot load reports it
    from callgate.arguments.normalize import as_policy_values

    wall = datetime.now(UTC)
    out = []
    for c in cases:
        ctx: dict[str, Any] = dict(c.request.context)
        stated = ctx.get(NOW_KEY)
        try:
            ctx[NOW_KEY] = (
                now_instant(wall.isoformat().replace("+00:00", "Z"), wall)
                if stated is None
                else now_instant(stated)
                if isinstance(stated, str)
                else stated
            )
        except TimeValueError:
            pass  # not a time: the engine sees the text (a schema refusal, a deny)
        tool = tools.get(str(ctx.get("tool", "")))
        args = ctx.get("args")
        text = text_context(args) if isinstance(args, dict) and TEXT_KEY not in ctx else None
        if text is not None:  # free text that hides characters, as Propose computes it
            ctx[TEXT_KEY] = text
        if tool is not None and isinstance(args, dict):
            values = as_policy_values(tool.seen(args), tool.normalizers)
            try:
                values = time_values(values, tool.times)
            except TimeValueError:
                pass
            ctx["args"] = values
        if tool is not None:
            ctx = stated_state(ctx, tool, any(t.labels for t in tools.values()))
        out.append(replace(c, request=replace(c.request, context=ctx)))
    return out


def stated_state(ctx: dict[str, Any], tool: Any, labels_used: bool) -> dict[str, Any]:
    """A case's ``context.usage`` and ``context.session`` as Propose passes them (issue 30): the
    usage of a sum over decimals as decimals (``"after": "100.01"``); a meter the case does not
    state is at ``before`` 0, ``after`` the call's own contribution; ``session.labels`` is ``[]``
    when the case states none and a ToolSpec of the folder declares result labels."""
    from decimal import Decimal

    from callgate.policy.meters import SESSION_KEY, USAGE_KEY, MeterError, Reading, contributions

    usage = ctx.get(USAGE_KEY)
    if tool.meters and (usage is None or isinstance(usage, dict)):
        stated = dict(usage or {})
        raw_args = ctx.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        try:
            parts = contributions(tool.meters, args, tenant="", subject="", session_id="", resource="")
        except MeterError:
            parts = ()
        for m, part in zip(tool.meters, parts, strict=False):
            if m.name not in stated:
                stated[m.name] = {
                    w.name: Reading(m.name, w.name, 0, part.amount, m.scale).as_dict() for w in m.windows
                }
            elif m.scale and isinstance(stated[m.name], dict):
                stated[m.name] = {
                    w: {k: Decimal(str(v)) for k, v in ba.items()} if isinstance(ba, dict) else ba
                    for w, ba in stated[m.name].items()
                }
        ctx = {**ctx, USAGE_KEY: stated}
    if labels_used and SESSION_KEY not in ctx:
        ctx = {**ctx, SESSION_KEY: {"labels": []}}
    return ctx


async def run_suite(directory: Path, engine: Engine, tools_dir: Path | None = None) -> SuiteResult:
    """Run every case file under ``directory`` on ``engine``. Raises :class:`SuiteError` if the
    directory does not exist; everything else (malformed files, failures) is in the result.
    ``tools_dir``: the ToolSpecs, for decimal arguments (:func:`_policy_values`)."""
    cases, bad = collect(directory)
    cases = _policy_values(cases, tools_dir)
    results = await run_cases(cases, engine)
    hint = "" if cases or bad else hint_for(directory)
    return SuiteResult(
        directory=str(directory),
        engine=engine.name,
        revision=engine.revision,
        cases=tuple(bad) + tuple(results),
        notes=(hint,) if hint else (),
    )


# -- the table ----------------------------------------------------------------------------------


def _reasons_text(c: CaseResult) -> str:
    if c.got is None:
        return "-"
    return ", ".join(f"{r.code}:{r.policy_id}" if r.policy_id else r.code for r in c.reasons) or "-"


def render_table(result: SuiteResult) -> str:
    """Aligned table, one row per case in suite order (layout problems and malformed files
    first), then the summary ``N passed, M failed`` alone on the last line."""
    lines = [f"policy tests: {result.directory} on engine {result.engine} (revision {result.revision})"]
    header = ("RESULT", "CASE", "WANT", "GOT", "REASONS", "MESSAGE")
    rows = [
        (
            "PASS" if c.passed else "FAIL",
            c.file,
            c.wanted.value if c.wanted else "-",
            c.got.value if c.got else "-",
            _reasons_text(c),
            c.message,
        )
        for c in result.cases
    ]
    if rows:
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
            lines.append("  ".join(cells).rstrip())
    if not result.cases:
        lines.append(
            f"error: no test cases in {result.directory}: expected *.json request files in "
            "ALLOW/, CONFIRM/ and DENY/ folders there; a suite that runs nothing does not pass"
        )
    lines.extend(result.notes)
    lines.append(f"{result.passed} passed, {result.failed} failed")
    return "\n".join(lines) + "\n"


def hint_for(directory: Path) -> str:
    """A hint when ``directory`` looks like a policy directory rather than a suite."""
    for sub in ("tests", "cedar/tests", "rego/tests"):
        if any((directory / sub / f).is_dir() for f in FOLDERS):
            return f"hint: {directory / sub} holds a suite"
    return ""


# -- the command ------------------------------------------------------------------------------


def build_engine(cfg: Config, engine: str | None = None, opa_url: str | None = None) -> Engine:
    """The engine a suite runs on: the configured one (``policy.engine`` over ``policy.dir``,
    loaded exactly as the server loads it) unless ``engine`` / ``opa_url`` override it; an
    override is built by the engine's registration (:data:`~callgate.policy.engines.registry.ENGINES`)
    from the config's policy dir (``cedar/`` or ``rego/``), without the config's shadow ids.
    Raises :class:`~callgate.base.errors.LoadError` or ValueError."""
    name = engine or cfg.policy.engine
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (registered: {', '.join(ENGINES.names())})")
    if opa_url is not None and name != "opa":
        raise ValueError(f"--opa-url applies to the opa engine only (the engine is {name})")
    if engine is None and opa_url is None:
        from callgate.policy.snapshot import load_snapshot_from_config

        return load_snapshot_from_config(cfg).engine
    policy = replace(cfg.policy, engine=name, opa_url=opa_url or cfg.policy.opa_url, shadow=())
    return ENGINES.get(name).load(cfg.path(cfg.policy.dir), policy)


async def run_command(
    cfg: Config,
    directory: Path,
    *,
    engine: str | None = None,
    opa_url: str | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """``callgate policy test``: 0 when every case passed and at least one ran, 1 when a case
    failed or none ran, 2 when the suite or the engine cannot be used (missing directory, broken
    config or policies, an OPA server that does not serve these policies)."""
    if not directory.is_dir():
        print(f"error: {directory}: no such directory (DIR holds ALLOW/, CONFIRM/ and DENY/)", file=err)
        return 2
    try:
        eng = build_engine(cfg, engine, opa_url)
    except (CallgateError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    try:
        ok, why = await eng.readiness()
        if not ok:
            # An OPA serving other policies (or none) would answer for a different revision, and
            # a down OPA denies everything: neither is a test of these policies.
            print(f"error: engine {eng.name} is not ready: {why}", file=err)
            return 2
        result = await run_suite(directory, eng, cfg.path(cfg.policy.dir) / "tools")
    except SuiteError as exc:
        print(f"error: {exc}", file=err)
        return 2
    finally:
        await eng.close()
    out.write(render_table(result))
    return result.exit_code
