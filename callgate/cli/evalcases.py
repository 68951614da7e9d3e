"""Proposal case files shared by ``callgate eval`` and the test suite.

A case is a JSON object::

    {"name": "...", "subject": {"tenant": "acme", "id": "alice"}, "timezone": "Asia/Shanghai",
     "reference_clock": "2026-07-19T14:00:00+08:00", "tool": "weather.get@v1",
     "arguments": {...} | "arguments_raw": "<exact bytes as a string>", "idempotency_key": "...",
     "expect": "allow" | {"state": ..., "effect": ..., "code": ..., "pointer": ...,
                          "policy_ids": [...], "reason": ..., "normalized": {...}}}

Every key of ``expect`` is optional; a string ``expect`` is the wanted effect (or final state).
Effects are compared in any letter case (``"ALLOW"`` == ``"allow"``). Each case runs alone: a
fresh in-memory store and idempotency store per case, so nothing (an idempotency key in
``defaults``, a session, a budget) carries from one case to the next. docs/EVAL.md documents the
format with its JSON Schema.

A ``.json`` file holds one case, an array of cases, or a table ``{"defaults": {...}, "cases":
[...]}`` whose defaults are merged under each case; a ``.jsonl`` file (or ``-``, stdin) holds
one case per line. The format is the JSON Schema (2020-12) ``evalcase.schema.json`` beside this
module: :func:`load_cases` checks every file against it, and each case again after the defaults
are merged (then ``subject`` and ``tool`` are required), and refuses a file that breaks it with
``file: /json/pointer: message`` (``file:line: ...`` for ``.jsonl``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from callgate.base import jsonpointer
from callgate.base.schemafiles import (
    SchemaProblem,
    describe,
    packaged_validator,
    schema_problems,
    subschema_validator,
)

EFFECTS = frozenset({"allow", "deny", "confirm"})
"""The effects an ``expect`` may name, compared in any letter case."""

SCHEMA_FILE = "evalcase.schema.json"
"""The case-file schema, package data of ``callgate.cli``."""


class CaseFileError(ValueError):
    """A case file cannot be used; the message names the file and the places that are wrong."""


def _problems(document: Any) -> list[SchemaProblem]:
    return schema_problems(packaged_validator("callgate.cli", SCHEMA_FILE), document)


def _case_problems(case: Any, where: tuple[str | int, ...]) -> list[SchemaProblem]:
    """A merged case against ``#/$defs/completeCase`` plus what a schema cannot say (a
    reference clock that is not a real instant)."""
    validator = subschema_validator(packaged_validator("callgate.cli", SCHEMA_FILE), "completeCase")
    out = [
        SchemaProblem(jsonpointer.join((*where, *jsonpointer.split(p.pointer))), p.message)
        for p in schema_problems(validator, case)
    ]
    clock = case.get("reference_clock") if isinstance(case, dict) else None
    if isinstance(clock, str):
        try:
            datetime.fromisoformat(clock)
        except ValueError:
            out.append(SchemaProblem(jsonpointer.join((*where, "reference_clock")), "not a valid date-time"))
    return out


def _refuse(where: str, problems: list[SchemaProblem]) -> CaseFileError:
    return CaseFileError(f"{where}: {describe(problems)}")


def _json(text: str, where: str, *, one_line: bool) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if one_line else f"line {exc.lineno} column {exc.colno}"
        raise CaseFileError(f"{where}: not JSON ({at}): {exc.msg}") from None


def parse_cases(text: str, name: str, *, lines: bool) -> list[tuple[int, dict[str, Any]]]:
    """The cases of one file's ``text`` as ``(number, case)`` with defaults merged (``number``:
    the line for ``lines=True``, else the position from 1). ``name`` is only used in messages.
    Raises :class:`CaseFileError` for text that is not JSON or breaks the schema."""
    out: list[tuple[int, dict[str, Any]]] = []
    if lines:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{name}:{n}"
            case = _json(line, where, one_line=True)
            problems = _case_problems(case, ())  # one case per line: never an array or a table
            if problems:
                raise _refuse(where, problems)
            out.append((n, case))
        return out
    doc = _json(text, name, one_line=False)
    problems = _problems(doc)
    if problems:
        raise _refuse(name, problems)
    defaults: dict[str, Any] = {}
    prefix: tuple[str | int, ...] = ()
    if isinstance(doc, dict) and "cases" in doc:
        defaults, doc, prefix = doc.get("defaults", {}), doc["cases"], ("cases",)
    items = doc if isinstance(doc, list) else [doc]
    for n, case in enumerate(items, 1):
        merged = {**defaults, **case}
        at = (*prefix, n - 1) if isinstance(doc, list) else ()
        problems.extend(_case_problems(merged, at))
        out.append((n, merged))
    if problems:
        raise _refuse(name, problems)
    return out


def load_cases(path: str) -> list[tuple[int, dict[str, Any]]]:
    """Read and check a case file (``.json``, ``.jsonl``, or ``-`` for JSON lines on stdin); see
    :func:`parse_cases`. Raises :class:`CaseFileError` or OSError."""
    if path == "-":
        return parse_cases(sys.stdin.read(), "<stdin>", lines=True)
    text = Path(path).read_text(encoding="utf-8")
    return parse_cases(text, path, lines=path.endswith(".jsonl"))


def case_arguments(case: Mapping[str, Any]) -> bytes:
    """The proposal's argument bytes: ``arguments_raw`` as UTF-8, else ``arguments`` as JSON."""
    if "arguments_raw" in case:
        return str(case["arguments_raw"]).encode("utf-8")
    return json.dumps(case.get("arguments", {}), ensure_ascii=False).encode("utf-8")


def mismatches(result: Mapping[str, Any], expect: Any) -> list[str]:
    """Compare an eval result (see ``callgate eval`` output) with a case's ``expect``."""
    decision = result.get("decision") or {}
    rejection = result.get("rejection") or {}
    if isinstance(expect, str):
        if expect.lower() in EFFECTS:  # effects in any letter case
            got = decision.get("effect") or result.get("state")
            return [] if str(got).lower() == expect.lower() else [f"wanted {expect.lower()}, got {got}"]
        got = result.get("state")
        return [] if got == expect else [f"wanted {expect}, got {got}"]
    out: list[str] = []

    def want(label: str, wanted: Any, got: Any) -> None:
        if wanted != got:
            out.append(f"{label}: wanted {wanted!r}, got {got!r}")

    if "state" in expect:
        want("state", expect["state"], result.get("state"))
    if "effect" in expect:
        wanted_effect = str(expect["effect"]).lower()
        if wanted_effect != decision.get("effect"):
            out.append(f"effect: wanted {wanted_effect!r}, got {decision.get('effect')!r}")
    if "code" in expect:
        want("code", expect["code"], rejection.get("code") or decision.get("error_code") or None)
    if "pointer" in expect:
        pointers = [v.get("pointer") for v in rejection.get("violations", [])]
        if expect["pointer"] not in pointers:
            out.append(f"pointer: wanted {expect['pointer']!r} among {pointers!r}")
    if "policy_ids" in expect:
        want("policy_ids", list(expect["policy_ids"]), list(decision.get("policy_ids", [])))
    if "reason" in expect:
        codes = [r.get("code") for r in decision.get("reasons", [])]
        if expect["reason"] not in codes:
            out.append(f"reason: wanted {expect['reason']!r} among {codes!r}")
    if "normalized" in expect:
        want("normalized", expect["normalized"], result.get("normalized_arguments"))
    return out
