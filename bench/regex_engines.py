"""ECMA-262 patterns: callgate's hand-written translator vs the ``regress`` package, measured.

JSON Schema 2020-12 patterns are ECMA-262 regexes with the ``u`` flag. The criterion: a pattern is
matched faithfully or refused at load, never approximated. For each engine this counts cases
answered correctly, answered wrongly, and patterns refused, on

(a) every test of the official JSON-Schema-Test-Suite (draft 2020-12, at ``../shared``) whose
    schema uses ``pattern``, ``patternProperties`` or ``format: regex`` (required files and
    ``optional/``), run through :class:`~callgate.arguments.validate.CompiledSchema` with the
    engine installed (expected outcomes: the suite's, with the EXCLUSIONS of
    ``tests/test_validate.py``);
(b) the project's own regex cases in ``tests/test_validate.py`` (PATTERN_CASES, VALID_REGEXES,
    INVALID_REGEXES as format ``regex`` and as ``pattern``, UNSUPPORTED_PATTERNS and
    REDOS_ACCEPTED) plus PROBES below: texts for the patterns the translator refuses, with the
    answer of V8 (node 20, ``new RegExp(p, "u").test(s)``; ``--node`` re-checks them) or, for
    ES2025 syntax V8 20 lacks, of the specification by hand.

Then it lists every disagreement, times a catastrophic-backtracking input per engine (in a child
process with a time limit), and times compile and match on a few patterns. ``regress`` is an
evaluation-only dependency: ``pip install regress``. Usage::

    PYTHONPATH=. .venv/bin/python bench/regex_engines.py [--node]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import regress  # noqa: E402

from callgate.arguments.validate import CompiledSchema, ecma262, formats  # noqa: E402
from callgate.arguments.validate import schema as schema_mod  # noqa: E402
from callgate.base.errors import LoadError  # noqa: E402
from tests import test_validate as tv  # noqa: E402

# (pattern, text, RegExp(pattern, "u").test(text)) for constructs the translator refuses.
# "spec": ES2025 syntax node 20 does not parse; answer worked out from the specification.
PROBES: list[tuple[str, str, bool, str]] = [
    ("(?<=a+)b", "aab", True, "v8"), ("(?<=a+)b", "cb", False, "v8"),
    ("(?<=a|bc)d", "bcd", True, "v8"), ("(?<=a|bc)d", "xd", False, "v8"),
    ("\\p{Script=Greek}", "\u03b1", True, "v8"), ("\\p{Script=Greek}", "a", False, "v8"),
    ("[\\p{scx=Latn}]", "a", True, "v8"), ("[\\p{scx=Latn}]", "\u03b1", False, "v8"),
    ("\\p{Emoji}", "\U0001f600", True, "v8"), ("\\p{Emoji}", "1", True, "v8"),
    ("\\p{Emoji}", "a", False, "v8"),
    ("\\P{Alphabetic}", "1", True, "v8"), ("\\P{Alphabetic}", "a", False, "v8"),
    ("(?i:abc)", "ABC", True, "spec"), ("(?i:abc)", "ABD", False, "spec"),
    ("^(?:(a)|b)*\\1$", "aba", False, "v8"), ("^(?:(a)|b)*\\1$", "ab", True, "v8"),
    ("^(?:(a)|b)*\\1$", "aa", True, "v8"), ("^(?:(a)|b)*\\1$", "b", True, "v8"),
    ("^(a)+\\1$", "aaa", True, "v8"), ("^(a)+\\1$", "a", False, "v8"),
    ("(?<=(a)\\1)b", "aab", True, "v8"), ("(?<=(a)\\1)b", "ab", True, "v8"),
    ("(?<=\\1(a))b", "aab", True, "v8"), ("(?<=\\1(a))b", "xab", False, "v8"),
    ("(?<a>x)|(?<a>y)\\k<a>", "yy", True, "spec"), ("(?<a>x)|(?<a>y)\\k<a>", "zy", False, "spec"),
    ("^(?:){5000000000}$", "", True, "v8"),
    ("(a+)+", "aaa", True, "v8"), ("^(a+)+$", "aab", False, "v8"), ("^(a+)+$", "aaa", True, "v8"),
    ("(a*)*b", "aab", True, "v8"), ("(a*)*b", "aaa", False, "v8"),
    ("(\\w+\\s?)*$", "ab cd", True, "v8"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "abcDef", True, "v8"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "abcdef", False, "v8"),
    ("(.*a){20}", "a" * 20, True, "v8"), ("(.*a){20}", "a" * 19, False, "v8"),
    ("((ab)*)+", "x", True, "v8"), ("(x+x+)+y", "xxy", True, "v8"), ("(x+x+)+y", "xy", False, "v8"),
    ("(?:a|(b+))+", "c", False, "v8"), ("(-\\d+\\d+)*", "x", True, "v8"),
    ("^(-\\d+\\d+)+$", "-12", True, "v8"), ("^(-\\d+\\d+)+$", "-1", False, "v8"),
    ("^(-[a-z]+\\w?[a-z]*)+$", "-ab-c", True, "v8"), ("^(-[a-z]+\\w?[a-z]*)+$", "-1", False, "v8"),
    ("(?<a>x)|(?<a>y)\\k<a>", "y", False, "spec"),
    # Unicode version: ECMA-262 uses the latest Unicode (V8 here: 17); characters assigned or
    # re-categorized after Unicode 14 (Python 3.11's unicodedata).
    ("^\\p{L}$", "\U0001e4d0", True, "v8"), ("^\\p{Assigned}$", "\U0001e4d0", True, "v8"),
    ("^\\p{Lu}$", "\u1c89", True, "v8"), ("^\\p{L}$", "\u0295", True, "v8"),
    ("^\\p{Ll}$", "\u0295", False, "v8"),
]  # fmt: skip

# Catastrophic backtracking: (pattern, adversarial text); each run in a child with a time limit.
REDOS: list[tuple[str, str]] = [
    ("^(a+)+$", "a" * 25 + "!"),
    ("(x+x+)+y", "x" * 25),
    ("^(\\w+\\s?)*$", "a" * 25 + "!"),
]
REDOS_LIMIT_S = 10.0

# Compile + match timing: the shipped ToolSpec patterns and two common shapes.
TIMED: list[tuple[str, str]] = [
    ("^(?![\\s\\S]*/\\.\\.?(/|$))/[^\\u0000]*$", "/tmp/reports/2026/q3/summary.txt"),
    ("^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$", "build-artifact_2026.07.19"),
    ("^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$", "weather.get_forecast.daily"),
    ("^\\p{L}+$", "\u00e9t\u00e9caf\u00e9"),
    ("^(?=.*\\d)(?=.*[a-z]).{8,}$", "abcdefgh1ijkl"),
]


class Kind(Enum):
    """What an engine did with a pattern at load."""

    COMPILED = "compiled"
    INVALID = "invalid"  # not ECMA-262 (says the engine)
    REFUSED = "refused"  # valid, but the engine cannot match it faithfully


class Verdict(Enum):
    """How one case came out for one engine."""

    CORRECT = "correct"
    WRONG = "wrong"
    REFUSED = "refused"


@dataclass(frozen=True)
class Loaded:
    """An engine's answer at load: a matcher (``search(text)`` truthy on a match) or why not."""

    kind: Kind
    matcher: Any = None
    reason: str = ""


def _join_surrogates(text: str) -> str:
    """UTF-16 surrogate pairs -> code points (JavaScript source is UTF-16; regress takes UTF-8)."""
    return re.sub(
        "[\ud800-\udbff][\udc00-\udfff]",
        lambda m: chr(0x10000 + ((ord(m[0][0]) - 0xD800) << 10) + ord(m[0][1]) - 0xDC00),
        text,
    )


class _RegressMatcher:
    """``regress.Regex`` behind the ``search`` interface the validator uses."""

    def __init__(self, rx: Any) -> None:
        self._rx = rx

    def search(self, text: str) -> Any:
        try:
            return self._rx.find(text)
        except UnicodeEncodeError:  # a lone surrogate cannot cross into Rust: fail closed
            return None


@dataclass
class Engine:
    """One regex engine: how it loads a pattern, whether it accepts a string as a regex, and how
    it is installed into callgate.arguments.validate for the suite run."""

    name: str
    load: Callable[[str], Loaded]
    syntax_ok: Callable[[str], bool]
    install: Callable[[], contextlib.AbstractContextManager[None]]
    results: Counter[tuple[str, Verdict]] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


def _translator_load(source: str) -> Loaded:
    try:
        return Loaded(Kind.COMPILED, ecma262.compile_ecma(source))
    except ecma262.RegexError as err:
        return Loaded(Kind.INVALID if err.syntax else Kind.REFUSED, reason=err.message)


@functools.cache
def _regress_load(source: str) -> Loaded:
    try:
        return Loaded(Kind.COMPILED, _RegressMatcher(regress.Regex(_join_surrogates(source), "u")))
    except regress.RegressError as err:
        return Loaded(Kind.INVALID, reason=str(err))
    except UnicodeEncodeError:
        return Loaded(Kind.REFUSED, reason="lone surrogate in the pattern")


def _regress_syntax_ok(source: str) -> bool:
    return _regress_load(source).kind is Kind.COMPILED


def _regress_compile_ecma(source: str) -> Any:
    loaded = _regress_load(source)
    if loaded.kind is not Kind.COMPILED:
        raise ecma262.RegexError(loaded.reason, syntax=loaded.kind is Kind.INVALID)
    return loaded.matcher


@contextlib.contextmanager
def _install_regress() -> Iterator[None]:
    """Route every regex use of the validator through regress; the translator raises if reached."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("translator reached while regress is installed")

    def syntax_error(source: str) -> str | None:
        loaded = _regress_load(source)
        return None if loaded.kind is Kind.COMPILED else loaded.reason

    seams = [
        (ecma262, "compile_ecma", _regress_compile_ecma),  # ecma_search looks it up here
        (schema_mod, "compile_ecma", _regress_compile_ecma),  # schema scan and fast path
        (formats, "ecma_syntax_error", syntax_error),  # format "regex" (and the metaschema)
        (schema_mod, "ecma_syntax_error", syntax_error),  # messages only
        (ecma262, "_translate_ecma", forbidden),
        (ecma262, "ecma_syntax_error", forbidden),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in seams]
    try:
        for mod, name, value in seams:
            setattr(mod, name, value)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


ENGINES = [
    Engine(
        "translator", _translator_load, lambda s: ecma262.ecma_syntax_error(s) is None, contextlib.nullcontext
    ),
    Engine("regress", _regress_load, _regress_syntax_ok, _install_regress),
]


# --- (a) the official suite ------------------------------------------------------------------


def _uses_regex(schema: Any) -> bool:
    text = json.dumps(schema)
    return '"pattern"' in text or '"patternProperties"' in text or '"format": "regex"' in text


def _suite_files() -> list[Path]:
    base = tv.REQUIRED_DIR
    return (
        sorted(base.glob("*.json"))
        + sorted((base / "optional").glob("*.json"))
        + [
            base / "optional" / "format" / "regex.json",
            base / "optional" / "format" / "ecmascript-regex.json",
        ]
    )


def run_suite(engine: Engine, disagreements: list[str]) -> None:
    """Compile every regex-using case with ``engine`` installed and compare with the suite."""
    with engine.install():
        for path in _suite_files():
            name = path.relative_to(tv.REQUIRED_DIR).as_posix()
            for case in json.loads(path.read_text(encoding="utf-8")):
                if not _uses_regex(case["schema"]):
                    continue
                try:
                    compiled: CompiledSchema | LoadError = CompiledSchema.compile(
                        case["schema"], registry=tv.remotes_registry()
                    )
                except LoadError as err:
                    compiled = err
                for test in case["tests"]:
                    key = (path.name, case["description"], test["description"])
                    expected = "valid" if test["valid"] else "invalid"
                    if key in tv.EXCLUSIONS:
                        expected = tv.EXCLUSIONS[key][0]
                    if isinstance(compiled, LoadError):
                        got = f"load_error:{compiled.code.value}"
                    else:
                        got = "invalid" if compiled.validate_value(test["data"]) else "valid"
                    if got == expected:
                        verdict = Verdict.CORRECT
                    elif got.startswith("load_error"):
                        verdict = Verdict.REFUSED
                    else:
                        verdict = Verdict.WRONG
                    engine.results[("suite", verdict)] += 1
                    if verdict is not Verdict.CORRECT:
                        reason = compiled.violations[0].message if isinstance(compiled, LoadError) else ""
                        disagreements.append(
                            f"{engine.name:10} suite   {verdict.value:7} {name} / {case['description']} / "
                            f"{test['description']}: expected {expected}, got {got} {reason}".rstrip()
                        )


# --- (b) the project's own cases ---------------------------------------------------------------


def _match_cases() -> list[tuple[str, str, bool, str]]:
    return [(p, t, m, "tests") for p, t, m in tv.PATTERN_CASES] + PROBES


def run_project(engine: Engine, disagreements: list[str]) -> None:
    """Matches (PATTERN_CASES + PROBES), regex validity (format ``regex``) and load refusals."""

    def note(verdict: Verdict, what: str) -> None:
        engine.results[("project", verdict)] += 1
        if verdict is not Verdict.CORRECT:
            disagreements.append(f"{engine.name:10} project {verdict.value:7} {what}")

    for pattern, text, expected, origin in _match_cases():
        loaded = engine.load(pattern)
        if loaded.kind is not Kind.COMPILED:
            note(Verdict.REFUSED, f"{pattern!r} ~ {text!r} ({origin}): {loaded.kind.value}: {loaded.reason}")
            continue
        got = loaded.matcher.search(text) is not None
        note(
            Verdict.CORRECT if got is expected else Verdict.WRONG,
            f"{pattern!r} ~ {text!r} ({origin}): expected {expected}, got {got}",
        )
    for source in tv.VALID_REGEXES:
        ok = engine.syntax_ok(source)
        note(Verdict.CORRECT if ok else Verdict.WRONG, f"format regex {source!r}: valid ECMA-262, rejected")
    for source, why in tv.INVALID_REGEXES:
        ok = engine.syntax_ok(source)
        note(Verdict.WRONG if ok else Verdict.CORRECT, f"format regex {source!r}: invalid ({why}), accepted")
        loaded = engine.load(source)
        note(
            Verdict.WRONG if loaded.kind is Kind.COMPILED else Verdict.CORRECT,
            f"pattern {source!r}: invalid ({why}), compiled and used for matching",
        )
    for source, _ in tv.UNSUPPORTED_PATTERNS:
        engine.results[("load", engine.load(source).kind)] += 1
    for source in tv.REDOS_ACCEPTED:
        engine.results[("load", engine.load(source).kind)] += 1


# --- timing ------------------------------------------------------------------------------------

_REDOS_CHILD = """
import sys, time, re
sys.path.insert(0, {root!r})
engine, pattern, text = sys.argv[1:4]
if engine == "regress":
    import regress
    rx = regress.Regex(pattern, "u")
    t = time.perf_counter(); rx.find(text)
else:
    from callgate.arguments.validate import ecma262
    try:
        rx = ecma262.compile_ecma(pattern)
    except ecma262.RegexError as err:
        print("refused at load"); raise SystemExit
    t = time.perf_counter(); rx.search(text)
print(f"{{time.perf_counter() - t:.2f}} s")
"""


def redos(engine: Engine) -> list[str]:
    """Seconds to search an adversarial text (or "refused at load", or over the limit)."""
    out = []
    for pattern, text in REDOS:
        code = _REDOS_CHILD.format(root=str(ROOT))
        try:
            r = subprocess.run(
                [sys.executable, "-c", code, engine.name, pattern, text],
                capture_output=True,
                text=True,
                timeout=REDOS_LIMIT_S,
            )
            result = r.stdout.strip() or r.stderr.strip().splitlines()[-1]
        except subprocess.TimeoutExpired:
            result = f"> {REDOS_LIMIT_S:.0f} s (killed)"
        out.append(f"{pattern} on {len(text)} chars: {result}")
    return out


def gil_held() -> str:
    """Does a long regress search block other Python threads? (main-thread wake-ups during it)"""
    import threading

    rx = regress.Regex("^(a+)+$", "u")
    worker = threading.Thread(target=rx.find, args=("a" * 23 + "!",))
    ticks, start = 0, time.perf_counter()
    worker.start()
    while worker.is_alive():
        ticks += 1
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    return f"{elapsed:.2f} s search in a thread; the main thread (1 ms sleeps) woke {ticks} times"


def _per_call_us(fn: Callable[[], object], budget_s: float = 0.2) -> float:
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < budget_s:
        for _ in range(50):
            fn()
        n += 50
    return elapsed / n * 1e6


def timing() -> list[tuple[str, float, float, float, float]]:
    """(pattern, translator compile µs, regress compile µs, translator match µs, regress match µs).
    Compile is uncached (translate + ``re`` compile with the ``re`` cache purged / a new Regex)."""
    rows = []
    raw_compile = ecma262.compile_ecma.__wrapped__

    def translator_compile(p: str) -> object:
        re.purge()
        return raw_compile(p)

    for pattern, text in TIMED:
        t_rx = ecma262.compile_ecma(pattern)
        r_rx = regress.Regex(pattern, "u")
        assert (t_rx.search(text) is not None) == (r_rx.find(text) is not None) is True, pattern
        rows.append(
            (
                pattern,
                _per_call_us(lambda p=pattern: translator_compile(p)),
                _per_call_us(lambda p=pattern: regress.Regex(p, "u")),
                _per_call_us(lambda t_rx=t_rx, text=text: t_rx.search(text)),
                _per_call_us(lambda r_rx=r_rx, text=text: r_rx.find(text)),
            )
        )
    return rows


def check_with_node() -> None:
    """Re-check the "v8" PROBES and PATTERN_CASES with node (``new RegExp(p, "u").test(s)``)."""
    node = shutil.which("node")
    if node is None:
        print("node not found")
        return
    rows = [(p, t, m) for p, t, m, origin in _match_cases() if origin != "spec"]
    script = (
        "const rows = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(rows.map(([p, s]) => { try { return new RegExp(p, 'u').test(s) }"
        " catch (e) { return 'error' } })))"
    )
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    answers = json.loads(
        subprocess.run(
            [node, "-e", script],
            input=json.dumps([[p, t] for p, t, _ in rows]),
            capture_output=True,
            text=True,
        ).stdout
    )
    bad = [(p, t, m, a) for (p, t, m), a in zip(rows, answers, strict=True) if a != m]
    unparsed = [row for row in bad if row[3] == "error"]
    print(
        f"node {version}: {len(rows) - len(bad)}/{len(rows)} rows agree, {len(unparsed)} not parsed "
        "(ES2025 syntax such as modifiers is newer than this node)"
    )
    for p, t, m, a in bad:
        print(f"  {p!r} ~ {t!r}: table {m}, node {a}")


def main() -> None:
    """Run the measurement and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node", action="store_true", help="re-check the expected answers with node")
    args = ap.parse_args()
    if args.node:
        check_with_node()
    print(
        f"regress {_version('regress')}, python-jsonschema {_version('jsonschema')}, Python {sys.version.split()[0]}"
    )
    disagreements: list[str] = []
    for engine in ENGINES:
        run_suite(engine, disagreements)
        run_project(engine, disagreements)
    print()
    print(
        "| engine | suite correct | suite wrong | suite refused | project correct | project wrong | project refused |"
    )
    print("|---|---|---|---|---|---|---|")
    for e in ENGINES:
        r = e.results
        cells = [r[(scope, v)] for scope in ("suite", "project") for v in Verdict]
        print(f"| {e.name} | " + " | ".join(str(c) for c in cells) + " |")
    print()
    print("Load of UNSUPPORTED_PATTERNS + REDOS_ACCEPTED (tests/test_validate.py):")
    for e in ENGINES:
        print(f"  {e.name:10} " + ", ".join(f"{k.value} {e.results[('load', k)]}" for k in Kind))
    print()
    print("Disagreements (every case not answered as expected):")
    for line in disagreements:
        print("  " + line)
    print()
    print(f"Catastrophic backtracking (child process, limit {REDOS_LIMIT_S:.0f} s):")
    for e in ENGINES:
        for line in redos(e):
            print(f"  {e.name:10} {line}")
    print(f"  regress GIL: {gil_held()}")
    print()
    print("| pattern | compile µs translator | compile µs regress | match µs translator | match µs regress |")
    print("|---|---|---|---|---|")
    for pattern, tc, rc, tm, rm in timing():
        print(f"| `{pattern}` | {tc:.0f} | {rc:.1f} | {tm:.2f} | {rm:.2f} |")


def _version(dist: str) -> str:
    from importlib import metadata

    return metadata.version(dist)


if __name__ == "__main__":
    main()
