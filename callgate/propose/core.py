"""The core seam: which implementation runs the front of ``Propose`` (docs/NATIVE.md).

The Python stages (:mod:`callgate.propose.steps`: parse, validate, normalize, canonicalize,
digest) are the reference. The compiled core ``callgate._native`` (the Rust crate in
``native/``, built by ``scripts/native``) runs the same stages in one call with the GIL released,
and answers exactly as they do (``tests/test_native_parity.py``) or defers:

* success: the normalized value, its RFC 8785 bytes, the digest and the applied normalizers, from
  which the same events as the Python stages are recorded;
* a refusal: the code only; the Python stages then run on the same bytes and produce the refusal
  with its message and violations (the reference speaks on the refusal path, as the full
  validator always did);
* ``defer`` (a value the core cannot answer for exactly: non-ASCII text under a ``text`` or
  ``enum_alias`` normalizer, an integer past 64 bits...): the Python stages decide.

A tool the core does not support at all (a schema outside its subset, a ``decimal`` bound
finer than 10^-18) always runs the Python stages, and so does a tool with a ``relative_date``
or ``datetime`` normalizer in a session whose locale has no relative dates (the reference's
error) or, for ``datetime``, whose zone the reference does not know; :meth:`Core.unsupported`
names the unsupported tools and ``callgate serve`` logs them at start. ``[core] engine`` chooses
(:class:`CoreEngine`).
"""

from __future__ import annotations

import functools
import io
import json
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from callgate.arguments.normalize import (
    DATE_VOCABULARIES,
    NormalizerChain,
    _decimal_option,
    _text_key,
    load_zone,
    zone_file,
)
from callgate.arguments.parse import ParseLimits
from callgate.base.errors import config_invalid
from callgate.base.fastinit import builder
from callgate.base.model import JSONValue, NormalizedArguments, ValidatedArguments
from callgate.native import NOT_BUILT, CoreEngine, HandBack, NativeModule, load_native, native_missing
from callgate.policy.engines.cedar import DETACH_MIN_BYTES
from callgate.policy.snapshot import PolicySnapshot
from callgate.policy.timevalues import NO_PLAN, TimeValueError, now_instant
from callgate.policy.toolspecs import CompiledTool

if TYPE_CHECKING:
    from callgate._native import Tool, Vocab, Zone

__all__ = ["Core", "CoreEngine", "CoreKind", "FrontAnswer", "load_native", "native_plan", "native_steps"]

NATIVE_KINDS: Final = frozenset(
    {"default", "enum_alias", "text", "round", "relative_date", "decimal", "datetime"}
)
"""Normalizer kinds the compiled core runs (``datetime`` with the zone rules :func:`native_zone`
reads)."""
DATED_KINDS: Final = frozenset({"relative_date", "datetime"})
"""Kinds that read relative dates: the session's locale decides who answers
(:data:`NATIVE_DATE_LANGUAGES`)."""
DECIMAL_BOUND_PLACES: Final = 18
"""Fractional digits of a ``decimal`` bound the compiled core holds exactly (it counts in units
of 10^-18); a bound written with more keeps the tool on the Python stages."""


class CoreKind(StrEnum):
    """The core that runs (``callgate serve`` logs it; metric ``callgate_core_info``)."""

    PYTHON = "python"
    NATIVE = "native"


def _schema_native(schema: Any) -> bool:
    """The compiled core validates a schema that the Python fast check compiles exactly (no
    ``$ref``, ``unevaluated*``, ``contains``, ``multipleOf``...; ``pattern`` and
    ``patternProperties`` on ECMA-262's engine). Of the formats it asserts ``date``,
    ``date-time``, ``time``, ``duration``, ``uuid``, ``ipv4``, ``ipv6``, ``json-pointer``,
    ``relative-json-pointer``, ``hostname``, ``email``, ``idn-hostname``, ``idn-email``, ``uri``,
    ``uri-reference``, ``iri``, ``iri-reference`` and ``uri-template`` (ported from formats.py; an
    ``xn--`` label, or an internationalized name outside ASCII, defers the check to the
    reference); a schema with the format ``regex`` is refused when the tool is prepared, and the
    tool stays on Python."""
    return bool(schema.has_fast_path)


def native_plan(tool: CompiledTool) -> tuple[list[tuple[str, str, str, dict[str, str]]], str, str] | str:
    """What the compiled core needs for ``tool`` (normalizers, schema texts), or the reason it
    cannot run it."""
    steps = native_steps(tool.normalizers)
    if isinstance(steps, str):
        return steps
    raw_input = tool.schema.document
    if not _schema_native(tool.schema):
        return "input schema outside the native subset"
    raw_norm = tool.normalized_schema.document
    if not _schema_native(tool.normalized_schema):
        return "normalized schema outside the native subset"
    return steps, json.dumps(raw_input), json.dumps(raw_norm)


def native_steps(chain: NormalizerChain) -> list[tuple[str, str, str, dict[str, str]]] | str:
    """``chain`` as the compiled core's ``Tool`` takes it (kind, field, options as JSON, alias
    table), or the reason it cannot run it."""
    steps: list[tuple[str, str, str, dict[str, str]]] = []
    for spec in chain.specs:
        if spec.kind not in NATIVE_KINDS:
            return f"normalizer {spec.kind}"
        options = _thaw(spec.options)
        table: dict[str, str] = {}
        if spec.kind == "enum_alias":
            aliases = options.get("aliases")
            if isinstance(aliases, dict):
                table = {_text_key(k): v for k, v in aliases.items() if isinstance(v, str)}
        elif spec.kind == "decimal":
            # the bounds as the reference reads them (numbers from their repr), as plain text
            for name in ("minimum", "maximum"):
                bound = _decimal_option(options, name)
                if bound is not None:
                    text = format(bound, "f")
                    if len(text.partition(".")[2]) > DECIMAL_BOUND_PLACES:
                        return (
                            f"normalizer decimal ({name} has more than {DECIMAL_BOUND_PLACES} decimal places)"
                        )
                    options[name] = text
        steps.append((spec.kind, spec.field, json.dumps(options, ensure_ascii=False), table))
    return steps


NATIVE_DATE_LANGUAGES: Final = frozenset({"en", "zh", *DATE_VOCABULARIES})
"""Locales whose relative dates the compiled core answers: English always, German, French and
Spanish from the reference's own tables (:func:`native_vocab`); it defers any non-ASCII
expression (so Chinese ones, and the words with accents) to the Python stages. An unlisted
locale is an error in the reference, so it runs the Python stages."""


@functools.lru_cache(maxsize=256)
def _date_language(locale: str) -> str | None:
    """The language whose relative dates the compiled core reads for ``locale`` (see above), or
    None when the Python stages must answer."""
    lang = locale.replace("_", "-").split("-", 1)[0].lower()
    return lang if lang in NATIVE_DATE_LANGUAGES else None


@functools.lru_cache(maxsize=16)
def native_vocab(native: NativeModule, lang: str) -> Vocab | None:
    """The compiled core's copy of ``lang``'s relative-date table (``callgate._native.Vocab``),
    or None for English and Chinese (English is built in; Chinese text defers)."""
    table = DATE_VOCABULARIES.get(lang)
    if table is None:
        return None
    return native.Vocab(
        dict(table.fixed), [(p.pattern, sign) for p, sign in table.counts], dict(table.units),
        dict(table.weekdays), set(table.articles), dict(table.prefixes), dict(table.suffixes),
    )  # fmt: skip


TEXT_TABLE_RANGES: Final = (
    (0x80, 0x800),
    (0x1E00, 0x1F00),
    (0x3040, 0x3100),
    (0xAC00, 0xD7A4),
    (0xFF00, 0xFFF0),
)
"""Where the characters of :func:`text_table` are looked for (two-byte UTF-8: Latin-1, Latin
Extended, Greek, Cyrillic, Armenian, Hebrew, Arabic...; Latin Extended Additional; kana; Hangul
syllables; half- and full-width forms). CJK Unified Ideographs are handled in the crate."""
_EXCLUDED_CATEGORIES: Final = frozenset({"Cn", "Cs", "Co", "Cc", "Zs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class TextTable:
    """The characters of :func:`text_table`: ``ranges`` of code points (half-open, sorted) and the
    ``lower()``, ``upper()`` and ``casefold()`` of those whose mappings are not all themselves."""

    ranges: tuple[tuple[int, int], ...]
    mapped: Mapping[str, tuple[str, str, str]]

    def __contains__(self, c: object) -> bool:
        return isinstance(c, str) and len(c) == 1 and any(lo <= ord(c) < hi for lo, hi in self.ranges)

    def __len__(self) -> int:
        return sum(hi - lo for lo, hi in self.ranges)


def text_table() -> TextTable:
    """The characters outside ASCII that the compiled core's ``text`` and ``enum_alias`` leaves
    normalize, with their ``lower()``, ``upper()`` and ``casefold()``, from this Python's own
    ``unicodedata`` (the reference's tables). A character is in it when NFC keeps it and nothing
    composes with it (combining class 0, not the second half of any canonical pair), it is
    assigned, not a control and not whitespace, its case mapping needs no context (not U+03A3,
    whose lower case depends on its place in the word) and every character of its three mappings
    is ASCII or in the table. Text made of such characters and ASCII is then normalized exactly
    as the reference does character by character: NFC changes nothing, ``strip`` and ``\\s``
    only meet ASCII whitespace. ~80 ms; flat arrays while it runs, ranges and ~1,200 mappings in
    the answer (a dict of every character held 6 MiB)."""
    seconds = bytearray(0x30000)
    for cp in range(0x80, 0x30000):
        d = unicodedata.decomposition(chr(cp))
        if d and d[0] != "<" and len(parts := d.split()) == 2 and int(parts[1], 16) < 0x30000:
            seconds[int(parts[1], 16)] = 1
    member = bytearray(0x10000)  # every range of TEXT_TABLE_RANGES is in the BMP
    for lo, hi in TEXT_TABLE_RANGES:
        for cp in range(lo, hi):
            c = chr(cp)
            member[cp] = (
                unicodedata.category(c) not in _EXCLUDED_CATEGORIES
                and unicodedata.combining(c) == 0
                and not seconds[cp]
                and unicodedata.normalize("NFC", c) == c
                and not c.isspace()
                and c != "\u03a3"
            )
    changed = True
    while changed:  # drop those whose mappings leave the table, until none does
        changed = False
        for lo, hi in TEXT_TABLE_RANGES:
            for cp in range(lo, hi):
                c = chr(cp)
                if member[cp] and not all(_within(m, member) for m in (c.lower(), c.upper(), c.casefold())):
                    member[cp], changed = 0, True
    ranges: list[tuple[int, int]] = []
    mapped: dict[str, tuple[str, str, str]] = {}
    for lo, hi in TEXT_TABLE_RANGES:
        for cp in range(lo, hi):
            if not member[cp]:
                continue
            if ranges and ranges[-1][1] == cp:
                ranges[-1] = (ranges[-1][0], cp + 1)
            else:
                ranges.append((cp, cp + 1))
            c = chr(cp)
            maps = (c.lower(), c.upper(), c.casefold())
            if maps != (c, c, c):
                mapped[c] = maps
    return TextTable(tuple(ranges), MappingProxyType(mapped))


def _within(text: str, member: bytearray) -> bool:
    return all(x.isascii() or (ord(x) < len(member) and member[ord(x)]) for x in text)


TEXT_KINDS: Final = frozenset({"text", "enum_alias"})
"""Normalizers that read :func:`text_table` in the compiled core."""


@functools.cache
def install_text_table(native: NativeModule) -> None:
    """Hand :func:`text_table` to the compiled core (once per process, when the first tool with
    a ``text`` or ``enum_alias`` normalizer is prepared; until then, text outside ASCII and CJK
    ideographs defers to the Python stages)."""
    table = text_table()
    native.set_text_table(list(table.ranges), dict(table.mapped))


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


@functools.lru_cache(maxsize=512)
def native_zone(native: NativeModule, name: str) -> Zone | None:
    """The compiled core's rules of zone ``name`` (``callgate._native.Zone``), or None when the
    reference does not know the zone or the rules cannot be read as it reads them.

    They come from the file the reference loads (:func:`~callgate.arguments.normalize.load_zone`:
    the ``tzdata`` package, :func:`~callgate.arguments.normalize.zone_file`), parsed by the standard library's own ``zoneinfo`` reader (its
    transitions, offsets and footer rule), so both cores answer from the same data with the same
    algorithm (``native/src/zone.rs``)."""
    path = zone_file(name)
    if path is None or load_zone(name) is None:
        return None
    try:
        from zoneinfo import _common, _zoneinfo  # type: ignore[attr-defined]  # the stdlib reader

        data = path.read_bytes()
        trans_idx, trans_utc, utcoff, isdst, _, tz_str = _common.load_data(io.BytesIO(data))
        after: tuple[Any, ...] | None = None
        if tz_str:
            parsed = _zoneinfo._parse_tz_str(tz_str.decode())
            if isinstance(parsed, _zoneinfo._TZStr):
                after = ("rule", int(parsed.std.utcoff.total_seconds()), int(parsed.dst.utcoff.total_seconds()),
                         _rule_day(parsed.start), _rule_day(parsed.end))  # fmt: skip
            else:
                after = ("fixed", int(parsed.utcoff.total_seconds()), 0, None, None)
        return native.Zone(list(trans_utc), list(trans_idx), list(utcoff), [bool(d) for d in isdst], after)
    except Exception:  # another Python's private reader, a file it refuses: the reference decides
        return None


def _rule_day(day: Any) -> tuple[str, int, int, int, int, int, int, int]:
    hms = (int(day.hour), int(day.minute), int(day.second))
    if hasattr(day, "w"):  # _CalendarOffset: Mm.w.d
        return ("M", int(day.m), int(day.w), int(day.d), *hms, 0)
    return ("D", int(day.d), 0, 0, *hms, int(bool(day.julian)))  # _DayOffset: Jn or n


@dataclass(frozen=True, slots=True)
class FrontAnswer:
    """The compiled core's answer for one proposal's front stages."""

    code: str | None
    """None: accepted; a refusal code (the Python stages then produce the error); ``defer``."""
    top_level_keys: int = 0
    parsed: dict[str, JSONValue] | None = None
    normalized: dict[str, JSONValue] | None = None
    canonical: bytes = b""
    digest: str = ""
    applied: tuple[str, ...] = ()
    resource: str = ""
    """With :attr:`authz`: the rendered resource."""
    authz: tuple[Any, ...] | None = None
    """The one-call decision (:meth:`Core.front` given a compiled Cedar snapshot): the compiled
    snapshot's ``(enforcing, shadow)`` answers, one per capability; None when the core did not
    decide (the engine then decides as before)."""


_front_answer = builder(FrontAnswer)
_validated = builder(ValidatedArguments)
_normalized = builder(NormalizedArguments)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What :meth:`Core.front` reads of one tool on every call, found once per snapshot."""

    tool: CompiledTool
    snapshot: PolicySnapshot
    native_tool: Tool
    relative_dates: bool
    """The tool has a ``relative_date`` or ``datetime`` normalizer (the locale then decides who
    answers)."""
    capabilities: list[str]
    zoned: bool = False
    """The tool has a ``datetime`` normalizer: the session's zone rules go with each call."""


def _time_args_declared(snapshot: PolicySnapshot, tool: CompiledTool) -> bool:
    """Whether a time argument of ``tool`` is a Cedar ``datetime`` / ``duration`` for one of its
    capabilities (a hand-written schema may keep it a ``String``: the one-call context has it)."""
    if not tool.times:
        return False
    decider = snapshot.engine.compiled
    if decider is None:
        return True
    plans = decider.time_plans
    names = {f.name for f in tool.times}
    return any(names & plans.get(cap, NO_PLAN).args for cap in tool.spec.required_capabilities)


def _cedar_now(reference_clock: str) -> str | None:
    """``context.now`` as Cedar's ``datetime`` text (None: no datetime, the engine decides)."""
    try:
        return str(now_instant(reference_clock).cedar["__extn"]["arg"])
    except TimeValueError:
        return None


class Core:
    """The seam: prepares tools once per snapshot and answers the front stages natively when it
    can. Thread-safe (preparation takes a lock; answers share nothing mutable)."""

    def __init__(self, engine: CoreEngine | str = CoreEngine.AUTO) -> None:
        engine = CoreEngine(engine)
        self.engine = engine
        self._native = None if engine is CoreEngine.PYTHON else load_native()
        self.native_unavailable = ""
        """Why the compiled core was wanted (``auto``, ``native``) and does not run: ``""`` when
        it runs or ``core.engine = "python"``. ``callgate serve`` logs it, as a warning when a
        build is there but does not load."""
        if engine is not CoreEngine.PYTHON and self._native is None:
            self.native_unavailable = f"the compiled core callgate._native is {native_missing() or NOT_BUILT}"
            if engine is CoreEngine.NATIVE:
                raise config_invalid(f"core.engine is 'native' but {self.native_unavailable}")
        self.kind = CoreKind.NATIVE if self._native is not None else CoreKind.PYTHON
        self._lock = threading.Lock()
        self._snapshot: PolicySnapshot | None = None
        self._tools: dict[str, Tool] = {}
        self._unsupported: dict[str, str] = {}
        self._prepared: dict[int, _Prepared] = {}
        """By ``id`` of the CompiledTool (checked by identity): tools the core runs."""
        self.python_path: Counter[HandBack] = Counter()
        """Proposals the Python stages answered on the native core, by reason."""
        self.observer: Callable[[str], None] | None = None
        """Told each reason as it is counted (metric ``callgate_core_python_path_total``)."""

    def note(self, reason: HandBack) -> None:
        """Count a proposal the Python stages answered although the native core runs."""
        self.python_path[reason] += 1
        if self.observer is not None:
            self.observer(reason)

    @property
    def native(self) -> NativeModule | None:
        return self._native

    def prepare(self, snapshot: PolicySnapshot, *, eager: bool = False) -> dict[str, str]:
        """Serve ``snapshot`` from now on. Its tools are prepared on first use (a reload never
        compiles the whole catalogue on the event loop) or, with ``eager``, all at once. Returns
        the tools found unsupported so far (``name@version`` -> reason).

        A Cedar snapshot prepared in the compiled core decides there when this core is native
        (:meth:`cedar_core`); OPA and Rego are unaffected."""
        decider = snapshot.engine.compiled
        if decider is not None:
            decider.use_native(self._native is not None)
        if self._native is None:
            return {}
        with self._lock:
            if self._snapshot is not snapshot:
                self._snapshot, self._tools, self._unsupported = snapshot, {}, {}
                self._prepared = {}
        if eager:
            for tool in snapshot.tools:
                self._tool(snapshot, tool)
        return dict(self._unsupported)

    def _tool(self, snapshot: PolicySnapshot, tool: CompiledTool) -> Tool | None:
        """The prepared native tool, or None when it runs on the Python stages."""
        key = tool.spec.key
        native_tool = self._tools.get(key)
        if native_tool is not None or key in self._unsupported:
            return native_tool
        assert self._native is not None
        plan = native_plan(tool)
        reason = plan if isinstance(plan, str) else ""
        if not isinstance(plan, str):
            steps, schema, normalized = plan
            if any(kind in TEXT_KINDS for kind, _, _, _ in steps):
                install_text_table(self._native)
            try:
                native_tool = self._native.Tool(
                    tool.spec.name,
                    tool.spec.version,
                    steps,
                    schema,
                    normalized,
                    # a decimal or time argument is a Cedar decimal / datetime / duration in the
                    # policies' context, which the one-call decision does not build: the engine
                    # decides from the front's value
                    # so is an argument left out of context.args (no policy type: tool.unseen)
                    None
                    if _time_args_declared(snapshot, tool)
                    or tool.unseen
                    or any(s.kind == "decimal" for s in tool.normalizers.specs)
                    else tool.resource.template,
                )
            except ValueError as exc:
                reason = str(exc)
        with self._lock:
            if self._snapshot is snapshot:
                if native_tool is None:
                    self._unsupported[key] = reason
                else:
                    self._tools[key] = native_tool
        return native_tool

    @staticmethod
    def cedar_core(snapshot: PolicySnapshot) -> CoreKind | None:
        """Which core runs ``snapshot``'s Cedar decisions, or None for another engine."""
        decider = snapshot.engine.compiled
        if decider is None:
            return None
        return CoreKind.NATIVE if decider.native else CoreKind.PYTHON

    def unsupported(self) -> dict[str, str]:
        return dict(self._unsupported)

    def _prepared_for(self, snapshot: PolicySnapshot, tool: CompiledTool) -> _Prepared | None:
        """What :meth:`front` reads of ``tool`` on every call (found once per snapshot), or None
        when the compiled core does not run it."""
        prepared = self._prepared.get(id(tool))
        if prepared is None or prepared.tool is not tool or prepared.snapshot is not snapshot:
            if self._snapshot is not snapshot:
                self.prepare(snapshot)
            native_tool = self._tool(snapshot, tool)
            if native_tool is None:
                self.note(HandBack.UNSUPPORTED_TOOL)
                return None
            prepared = _Prepared(
                tool,
                snapshot,
                native_tool,
                any(s.kind in DATED_KINDS for s in tool.normalizers.specs),
                list(tool.spec.required_capabilities),
                any(s.kind == "datetime" for s in tool.normalizers.specs),
            )
            with self._lock:
                if self._snapshot is snapshot:
                    self._prepared[id(tool)] = prepared
        return prepared

    def front(
        self,
        snapshot: PolicySnapshot,
        tool: CompiledTool,
        raw: bytes,
        tenant: str,
        locale: str,
        reference_clock: str,
        limits: ParseLimits,
        principal: str | None = None,
        timezone: str = "",
    ) -> FrontAnswer | None:
        """The native answer, or None when this tool runs the Python stages.

        With ``principal`` (the session's subject) and a snapshot whose Cedar decisions run in
        the compiled core, the whole decision is one call (docs/NATIVE.md): the front stages,
        the resource, the Cedar context from the normalized value and one decision per required
        capability (:attr:`FrontAnswer.authz`). The GIL is released for inputs of
        ``DETACH_MIN_BYTES`` or more (:mod:`callgate.policy.engines.cedar`)."""
        if self._native is None:
            return None
        prepared = self._prepared_for(snapshot, tool)
        if prepared is None:
            return None
        native_tool = prepared.native_tool
        vocab = None
        if prepared.relative_dates:
            lang = _date_language(locale)
            if lang is None:
                self.note(HandBack.LOCALE)  # a locale without relative dates: the reference says so
                return None
            vocab = native_vocab(self._native, lang)
        zone = None
        if prepared.zoned:
            zone = native_zone(self._native, timezone)
            if zone is None:  # an unknown zone (the reference reports it) or unreadable rules
                self.note(HandBack.ZONE)
                return None
        decider = snapshot.engine.compiled
        cedar = decider.native_snapshot if decider is not None and principal is not None else None
        authz = None
        if cedar is None or principal is None:
            code, keys, parsed, normalized, canonical, digest, applied = native_tool.front(
                raw,
                tenant,
                locale,
                reference_clock,
                limits.max_bytes,
                limits.max_depth,
                len(raw) >= DETACH_MIN_BYTES,
                zone,
                vocab,
            )
        else:
            front, authz = native_tool.decide(
                raw,
                tenant,
                locale,
                reference_clock,
                limits.max_bytes,
                limits.max_depth,
                cedar,
                principal,
                prepared.capabilities,
                len(raw) >= DETACH_MIN_BYTES,
                zone,
                vocab,
                _cedar_now(reference_clock),
            )
            code, keys, parsed, normalized, canonical, digest, applied = front
        if code == "defer":
            self.note(HandBack.DEFERRED)
        if authz is None:
            return FrontAnswer(code, keys, parsed, normalized, canonical, digest, tuple(applied))
        resource, answers = authz
        return _front_answer(
            code=code,
            top_level_keys=keys,
            parsed=parsed,
            normalized=normalized,
            canonical=canonical,
            digest=digest,
            applied=tuple(applied),
            resource=resource,
            authz=tuple(answers),
        )

    def decide_metered(
        self,
        snapshot: PolicySnapshot,
        tool: CompiledTool,
        canonical: bytes,
        tenant: str,
        principal: str,
        reference_clock: str,
        members: dict[str, Any],
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The compiled core's decision of a metered or labelled call after its reservation
        (issue 30: ``members``, ``context.usage`` and ``context.session`` as Python values, no
        JSON text), from its canonical arguments: ``(resource, answers)`` as :meth:`front`'s
        one-call decision, or None (the engine's JSON path decides: another core, a tool the
        core does not run, no context projection, a decimal sum in ``members``)."""
        decider = snapshot.engine.compiled
        cedar = decider.native_snapshot if decider is not None else None
        if cedar is None or self._native is None:
            return None
        prepared = self._prepared_for(snapshot, tool)
        if prepared is None:
            return None
        got = prepared.native_tool.decide_metered(
            canonical,
            tenant,
            cedar,
            principal,
            prepared.capabilities,
            members,
            _cedar_now(reference_clock),
        )
        if got is None:
            return None
        resource, answers = got
        return str(resource), tuple(answers)

    def validated(self, tool: CompiledTool, answer: FrontAnswer) -> ValidatedArguments:
        """The :class:`ValidatedArguments` the Python validator would have returned (without
        the value when the core decided the proposal: it does not build it then)."""
        s = tool.schema
        assert answer.parsed is not None or answer.authz is not None
        return _validated(
            value=answer.parsed,
            dialect=s.dialect,
            validator=s.validator_name,
            validator_version=s.validator_version,
            format_assertion=s.format_assertion,
        )

    def normalized(self, answer: FrontAnswer, ctx: Any) -> NormalizedArguments:
        assert answer.normalized is not None or answer.authz is not None
        return _normalized(
            value=answer.normalized,
            canonical=answer.canonical,
            digest=answer.digest,
            context=ctx,
            applied=answer.applied,
        )
