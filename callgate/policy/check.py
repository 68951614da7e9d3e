"""The checks a policy snapshot must pass, shared by ``callgate check`` and every (re)load.

A snapshot that loads (every file parses and validates) can still be wrong as a whole. These
checks run on the loaded snapshot and its policy folder; any error refuses it (``check`` exits
1, a reload keeps the serving revision) with a message naming the file, the place and the
problem (:class:`Finding`):

* **inventory**: every file in the policy folder is loaded or refused by name
  (:func:`inventory`): in ``tools/`` only ``*.json``; in the engine's folder only the files the
  engine reads (``cedar/``: every ``*.cedar``, ``schema.cedarschema``, ``entities.json``;
  ``rego/``: ``*.rego``, ``data.json``); ``tests/`` holds the policy tests. The other engine's
  folder is not read by this engine: a note, not an error.
* **consistency**: every capability a ToolSpec requires is an action of the engine's schema
  (Cedar: ``schema.cedarschema``; Rego: ``data.callgate.schema.actions`` when ``data.json`` has
  a schema), so a ToolSpec is never served before its action exists.
* **decision shape**: sample requests derived from each ToolSpec (required arguments with valid
  example values from its schema, for each capability, as each principal the engine's entity
  data names) are evaluated on the engine; a decision outside the contract (a Rego effect such
  as ``"approve"``, an undefined decision) is an error showing the value, the Rego file that
  writes it and the sample. For ``opa`` the samples run on embedded Rego over the same files.
* **policy tests**: ``<policy dir>/tests`` with ``ALLOW/``, ``DENY/``, ``CONFIRM/`` is run as
  ``callgate policy test`` would; a failing case is an error.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callgate.base import jsonpositions
from callgate.base.errors import ErrorCode, LoadError
from callgate.base.model import AuthzRequest, Decision, JSONValue, Subject
from callgate.policy.declare import Problem
from callgate.policy.engines.base import Engine
from callgate.policy.engines.cedar_slices import release_free_memory
from callgate.policy.engines.registry import ENGINES, policy_folders
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.toolspecs import CompiledTool

if TYPE_CHECKING:
    from callgate.config import Config

MAX_SUBJECTS = 32
"""At most this many principals per sample (taken in file order from the entity data)."""


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: the file, the place in it (``line:column`` and/or a JSON Pointer, a rule, a
    sample) and what is wrong."""

    severity: Severity
    file: str
    problem: str
    line: str = ""
    """``line`` or ``line:column`` in ``file`` ("" when the whole file is meant)."""
    place: str = ""
    """A JSON Pointer, a policy id, a sample: where inside the file."""

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        place = f" {self.place}:" if self.place else ""
        return f"{self.severity.value}: {where}:{place} {self.problem}"


def _split_source(source: str) -> tuple[str, str]:
    """``file:line[:col]`` -> (file, ``line[:col]``)."""
    m = re.match(r"^(.*?):(\d+(?::\d+)?)$", source)
    return (m.group(1), m.group(2)) if m else (source, "")


def load_error_findings(exc: LoadError) -> list[Finding]:
    """Every problem a load error carries, each located: a JSON file's violations at their own
    ``line:column`` (from the pointer), others at the error's ``file:line``."""
    file, line = _split_source(exc.source)
    text = ""
    if file.endswith(".json"):
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError:
            text = ""
    if not exc.violations:
        return [Finding(Severity.ERROR, file, f"{exc.code.value}: {exc.message}", line)]
    out = []
    for v in exc.violations:
        where, at = line, file
        if text and v.pointer.startswith("/"):
            ln, col = jsonpositions.locate(text, v.pointer)
            where = f"{ln}:{col}"
        elif file.endswith(".cedar") and v.pointer.startswith("policy:"):
            at, where = _policy_line(file, v.pointer.removeprefix("policy:"), line)
        out.append(Finding(Severity.ERROR, at, f"{exc.code.value}: {v.message}", where, v.pointer))
    return out


def _policy_line(file: str, pid: str, line: str) -> tuple[str, str]:
    """The ``.cedar`` file and line of the policy ``@id("pid")``, looked for in ``file`` and then
    the other ``.cedar`` files of its folder; ``(file, line)`` when none has it (a positional id).
    Before, every validation error of a set was shown at the line of the first one."""
    pattern = re.compile(r'@id\(\s*"' + re.escape(pid) + r'"\s*\)')
    first = Path(file)
    for path in [first, *sorted(p for p in first.parent.glob("*.cedar") if p != first)]:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        m = pattern.search(text)
        if m is not None:
            return str(path), str(text.count("\n", 0, m.start()) + 1)
    return file, line


# -- inventory ----------------------------------------------------------------------------------


def _properties_findings(path: Path) -> list[Finding]:
    """The properties file of ``callgate policy prove``, read as ``prove`` reads it."""
    from callgate.policy.prove.properties import load_properties

    try:
        load_properties(path)
    except LoadError as exc:
        return load_error_findings(exc)
    return []


def inventory(policy_dir: Path, engine: str) -> list[Finding]:
    """Every file of ``policy_dir`` that the snapshot neither loads nor uses, by name
    (errors), and the other engines' folders (notes)."""
    out: list[Finding] = []
    folder = ENGINES.get(engine).folder
    mine = folder.name
    others = sorted({f.name for f in policy_folders()} - {mine})
    if not policy_dir.is_dir():
        return out
    for path in sorted(policy_dir.rglob("*")):
        rel_parts = path.relative_to(policy_dir).parts
        if path.is_dir() or any(p.startswith(".") for p in rel_parts):
            continue  # hidden files, ConfigMap ..data copies
        top, rest = rel_parts[0], "/".join(rel_parts[1:])
        if top == "tools" and len(rel_parts) == 2 and path.suffix == ".json":
            continue
        if rel_parts == ("principals.json",):
            continue  # read by both engines (callgate/policy/declare.py)
        if rel_parts == ("properties.toml",):
            out += _properties_findings(path)  # callgate policy prove (docs/PROVE.md)
            continue
        if top == "tests" and len(rel_parts) >= 3 and rel_parts[1] in {"ALLOW", "DENY", "CONFIRM"}:
            continue
        if top == mine and folder.reads(rest):
            continue
        if top in others:
            continue
        if top == mine:
            why = f"not read by the {engine} engine ({folder.reads_text})"
        elif top == "tools":
            why = "not a ToolSpec (tools/ holds one <name>@<version>.json per tool)"
        elif top == "tests":
            why = "not a policy test case (tests/ALLOW|DENY|CONFIRM/*.json)"
        else:
            why = f"not part of a policy snapshot (tools/, tests/, {mine}/)"
        out.append(Finding(Severity.ERROR, str(path), f"file refused: {why}"))
    for other in others:
        if (policy_dir / other).is_dir():
            out.append(Finding(Severity.NOTE, str(policy_dir / other), f"not loaded: the engine is {engine}"))
    return out


# -- consistency --------------------------------------------------------------------------------


def consistency(snap: PolicySnapshot, policy_dir: Path, engine: str) -> list[Finding]:
    """A ToolSpec whose capability is not an action of the engine's schema refuses the set."""
    schema = ENGINES.get(engine).folder.schema_actions(policy_dir)
    actions, schema_file = schema.actions, schema.file
    if actions is None:
        return []
    out = []
    for tool in snap.tools:
        text = Path(tool.spec.source).read_text("utf-8") if Path(tool.spec.source).is_file() else ""
        for i, cap in enumerate(tool.spec.required_capabilities):
            if cap not in actions:
                pointer = f"/required_capabilities/{i}"
                ln, col = jsonpositions.locate(text, pointer) if text else (0, 0)
                out.append(
                    Finding(
                        Severity.ERROR,
                        tool.spec.source,
                        f"capability {cap!r} is not an action in {schema_file} (declare it there "
                        "first: the ToolSpec and its action load together or not at all)",
                        f"{ln}:{col}" if ln else "",
                        pointer,
                    )
                )
    return out


# -- sample requests ----------------------------------------------------------------------------

_FORMAT_EXAMPLES: Mapping[str, str] = {
    "date": "2026-01-15",
    "date-time": "2026-01-15T09:00:00Z",
    "time": "09:00:00Z",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "duration": "PT1H",
}
_STRING_CANDIDATES = ("example", "a", "A", "1", "/tmp/example", "example-1", "EXAMPLE")


def example_value(schema: Any, depth: int = 0) -> JSONValue:
    """A value the schema probably accepts: ``const``, the first ``enum`` / ``examples`` /
    ``default``, else built from ``type`` (an object gets its required members). The caller
    validates it."""
    if not isinstance(schema, Mapping) or depth > 16:
        return "example"
    for key in ("const",):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema[key][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            merged = {k: v for k, v in schema.items() if k != key}
            first = schema[key][0]
            return example_value({**merged, **first} if isinstance(first, Mapping) else merged, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", [])
        return {name: example_value(props.get(name, {}), depth + 1) for name in required}
    if kind == "array":
        n = schema.get("minItems", 0)
        return [example_value(schema.get("items", {}), depth + 1) for _ in range(int(n))]
    if kind in ("integer", "number"):
        return _example_number(schema)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _example_string(schema)


def _example_number(schema: Mapping[str, Any]) -> int:
    lo = schema.get("minimum")
    if isinstance(schema.get("exclusiveMinimum"), (int, float)):
        lo = int(schema["exclusiveMinimum"]) + 1
    hi = schema.get("maximum")
    if isinstance(schema.get("exclusiveMaximum"), (int, float)):
        hi = int(schema["exclusiveMaximum"]) - 1
    value = 1 if lo is None else int(lo) if float(lo).is_integer() else int(lo) + 1
    if lo is None and hi is not None and value > hi:
        value = int(hi)
    return value


def _example_string(schema: Mapping[str, Any]) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_EXAMPLES:
        return _FORMAT_EXAMPLES[fmt]
    lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
    pattern = schema.get("pattern")
    for cand in _STRING_CANDIDATES:
        if len(cand) < lo:
            cand = cand + "x" * (lo - len(cand))
        if hi is not None and len(cand) > int(hi):
            cand = cand[: int(hi)]
        if not isinstance(pattern, str):
            return cand
        try:
            if re.search(pattern, cand):
                return cand
        except re.error:
            return cand
    return "example"


@dataclass(frozen=True, slots=True)
class Sample:
    """One derived request and how to name it in a message."""

    tool: CompiledTool
    request: AuthzRequest

    def describe(self) -> str:
        args = json.dumps(
            self.request.context.get("args", {}), ensure_ascii=False, sort_keys=True, default=_shown
        )
        r = self.request
        return (
            f"sample {self.tool.spec.key}: principal {r.subject.tenant}/{r.subject.id}, action "
            f"{r.capability}, resource {r.resource}, args {args}"
        )


def subjects(policy_dir: Path, engine: str) -> list[Subject]:
    """The principals the engine's entity data names (its folder's
    :attr:`~callgate.policy.engines.factory.PolicyFolder.principals`: Cedar ``User`` entities with
    their ``tenant``; Rego ``data.callgate.entities.users``), at most :data:`MAX_SUBJECTS`."""
    out = ENGINES.get(engine).folder.principals(policy_dir, MAX_SUBJECTS)
    return out[:MAX_SUBJECTS] or [Subject(tenant="example", id="example")]


def samples(tool: CompiledTool, principals: Sequence[Subject]) -> tuple[list[Sample], list[Finding]]:
    """Sample requests for ``tool``: its required arguments with example values (valid against
    its normalized schema), for every capability and principal; a warning when no valid sample
    can be derived."""
    schema = tool.spec.input_schema
    if tool.normalized_schema is not tool.schema:
        schema = tool.normalized_schema.document
    args = example_value(schema)
    problems = tool.normalized_schema.validate_value(args)
    if problems:
        return [], [
            Finding(
                Severity.WARNING,
                tool.spec.source,
                "no valid sample request could be derived from the schema "
                f"({problems[0].pointer or '/'}: {problems[0].message}); add an example "
                '("examples": [...]) to the schema so check can evaluate the tool',
            )
        ]
    try:
        resource = tool.resource.render(args if isinstance(args, dict) else {})
    except Exception as exc:
        return [], [Finding(Severity.WARNING, tool.spec.source, f"sample request: {exc}")]
    context = _sample_context(tool, args)
    out = [
        Sample(tool, AuthzRequest(subject=subj, capability=cap, resource=resource, context=context))
        for cap in tool.spec.required_capabilities
        for subj in principals
    ]
    return out, []


def _shown(value: object) -> object:
    """A time value of a sample as its text (``describe``)."""
    text = getattr(value, "text", None)
    if isinstance(text, str):
        return text
    raise TypeError(type(value).__name__)


def _sample_context(tool: CompiledTool, args: Any) -> dict[str, Any]:
    """A sample's context as the authorize stage builds it: time arguments as time values,
    ``context.now`` the clock of the check (callgate/policy/timevalues.py)."""
    from callgate.policy.timevalues import NOW_KEY, TimeValueError, now_instant, time_values

    if isinstance(args, dict):
        args = tool.seen(args)
        try:
            args = time_values(args, tool.times)
        except TimeValueError:
            pass  # the engine sees the text: a schema refusal shows in the decision
    wall = datetime.now(UTC)
    return {"tool": tool.spec.key, "args": args, NOW_KEY: now_instant(wall.isoformat(), wall)}


_SHAPE_FAULTS = frozenset(
    {ErrorCode.ENGINE_MALFORMED.value, ErrorCode.ENGINE_UNDEFINED.value, ErrorCode.ENGINE_ERROR.value}
)


def _decision_finding(sample: Sample, d: Decision, policy_dir: Path, engine: str) -> Finding | None:
    if d.error_code not in _SHAPE_FAULTS:
        return None
    from callgate.policy.engines.rego_contract import malformed_effect

    message = next((r.message for r in d.reasons if r.code == d.error_code), "")
    bad = malformed_effect(message)
    file, line = sample.tool.spec.source, ""
    folder = ENGINES.get(engine).folder
    if bad is not None and folder.value_places is not None:
        places = folder.value_places(policy_dir, bad)
        if places:
            file, line = _split_source(places[0])
        else:
            file = str(policy_dir / folder.name)
        problem = (
            f"decision effect {bad} is not one of allow, deny, confirm (a caller would get a deny "
            f"{d.error_code}); {sample.describe()}"
        )
    else:
        problem = (
            f"the decision is not of the contract's shape: {d.error_code}: {message}; {sample.describe()}"
        )
    return Finding(Severity.ERROR, file, problem, line, "decision")


def shape_engine(cfg: Config, snap: PolicySnapshot) -> tuple[Engine, bool]:
    """The engine samples and policy tests run on: the snapshot's own, except for an engine
    registered with :attr:`~callgate.policy.engines.factory.EngineFactory.checked_on` (``opa``:
    embedded Rego over the same files, as the OPA server may still serve the previous revision).
    The flag says whether the caller must close it."""
    other = ENGINES.get(cfg.policy.engine).checked_on
    if not other:
        return snap.engine, False
    policy = replace(cfg.policy, engine=other)
    return ENGINES.get(other).load(cfg.path(cfg.policy.dir), policy), True


async def decision_shapes(
    snap: PolicySnapshot, engine: Engine, policy_dir: Path, engine_name: str
) -> list[Finding]:
    """Evaluate every tool's samples; a decision outside the contract is an error."""
    out: list[Finding] = []
    principals = subjects(policy_dir, engine_name)
    for tool in snap.tools:
        found, problems = samples(tool, principals)
        out.extend(problems)
        if not found:
            continue
        decisions = await engine.authorize_batch([s.request for s in found])
        for sample, d in zip(found, decisions, strict=False):
            f = _decision_finding(sample, d, policy_dir, engine_name)
            if f is not None:
                out.append(f)
                break  # one per tool is enough to name the problem
    return out


async def policy_tests(engine: Engine, policy_dir: Path) -> list[Finding]:
    """Run ``<policy dir>/tests`` when it holds ALLOW/, DENY/ or CONFIRM/ (``policy test``
    semantics); every failing case is an error naming its file."""
    from callgate.policy.policytest import FOLDERS, run_suite

    tests = policy_dir / "tests"
    if not any((tests / f).is_dir() for f in FOLDERS):
        return []
    result = await run_suite(tests, engine, policy_dir / "tools")
    return [
        Finding(Severity.ERROR, str(tests / c.file), f"policy test failed: {c.message}", place="test")
        for c in result.cases
        if not c.passed
    ]


def declared_types(policy_dir: Path) -> list[Finding]:
    """ToolSpec argument types against the hand-written engine schemas
    (:func:`callgate.policy.declare.check_tools` with every registered policy folder's rules),
    as findings."""
    from callgate.policy.declare import check_tools

    out: list[Finding] = []
    for problem in check_tools(policy_dir, policy_folders()):
        file, line = _split_source(problem.file)
        place = problem.place
        if place.startswith("line "):  # declare.py's "line N"
            line, place = place.removeprefix("line "), ""
        severity = Severity.WARNING if problem.warning else Severity.ERROR
        out.append(Finding(severity, file, problem.message, line, place))
    return out


def left_out_findings(cfg: Config) -> list[Finding]:
    """The arguments left out of ``context.args`` (no policy type), as warnings: printed with a
    load error too, since a policy that reads one is refused by Cedar's validation as an unknown
    attribute (``args.<name> ... not found``) and this names why."""
    from callgate.policy.declare import tool_typing
    from callgate.policy.engines.registry import ENGINES

    try:
        typing = tool_typing(cfg.path(cfg.policy.dir), ENGINES.get(cfg.policy.engine).folder)
    except (LoadError, OSError):
        return []
    return [_refusal(problem) for problem in typing.notes]


def _refusal(problem: Problem) -> Finding:
    """A ToolSpec refused alone (its action has no policy type): a warning, the set loads."""
    file, line = _split_source(problem.file)
    pointer, sep, message = problem.message.partition(": ")
    if not (sep and pointer.startswith("/")):
        pointer, message = "", problem.message
    return Finding(Severity.WARNING, file, f"{problem.place}: {message}", line, pointer)


async def check_snapshot(cfg: Config, snap: PolicySnapshot) -> list[Finding]:
    """Every check of the module docstring on a loaded snapshot; errors first."""
    policy_dir = cfg.path(cfg.policy.dir)
    name = cfg.policy.engine

    def files_and_declarations() -> tuple[list[Finding], tuple[Engine, bool]]:
        found = inventory(policy_dir, name) + consistency(snap, policy_dir, name) + declared_types(policy_dir)
        found += [_refusal(problem) for problem in (*snap.refused, *snap.unseen)]
        return found, shape_engine(cfg, snap)

    # Off the event loop: a reload is checked while the old snapshot serves (issue 15 item 3).
    out, (engine, close) = await asyncio.to_thread(files_and_declarations)
    try:
        out += await decision_shapes(snap, engine, policy_dir, name)
        out += await policy_tests(engine, policy_dir)
    finally:
        if close:
            await engine.close()
    await asyncio.to_thread(release_free_memory)  # what the checks used goes back to the OS
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}
    return sorted(out, key=lambda f: order[f.severity])


def errors(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


__all__ = [
    "declared_types",
    "Finding",
    "Sample",
    "Severity",
    "check_snapshot",
    "consistency",
    "decision_shapes",
    "errors",
    "example_value",
    "inventory",
    "load_error_findings",
    "policy_tests",
    "samples",
    "subjects",
]
