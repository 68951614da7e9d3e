"""Declared meters: counts and totals a policy can read (issue 30 items 2-3; spec 6.6 "amount,
rate, quantity").

A ToolSpec may declare ``meters``::

    "meters": [
      {"name": "emails", "measure": "calls", "scope": "subject", "windows": ["1h", "24h"]},
      {"name": "refunded", "measure": "sum(args.amount)", "scope": "session", "windows": ["session"]},
      {"name": "per_account", "measure": "calls", "scope": "args.account", "windows": ["24h"]}
    ]

* ``measure``: ``calls`` (each call adds 1) or ``sum(args.<field>)`` over a top-level argument
  that is an integer or has a ``decimal`` normalizer (amounts are exact: stored as integers of
  10^-scale, never rounded);
* ``scope``: ``tenant``, ``subject``, ``session``, ``resource`` (the rendered resource) or
  ``args.<field>`` (a top-level string argument, e.g. an account): the meter counts per scope
  value, always within the session's tenant;
* ``windows``: sliding windows ``<n>s|m|h|d`` (1 s .. 31 d) and ``session`` (since the session
  opened).

A policy reads ``context.usage.<meter>["<window>"]`` as ``{before, after}``: the value the call
sees without itself (every committed, unknown and still reserved contribution) and with itself.
Windows are exact: a contribution made at ``t`` counts while ``now < t + window`` and leaves
exactly then (:mod:`callgate.store.meters`). A meter
name shared by several ToolSpecs is one meter (its calls add up); its measure must be the same.

Dogwood (the reference, docs/POLICIES.md) evaluates ``count`` / ``sum`` over a bounded past window
of the event log at decision time; callgate declares the meter once and keeps it incrementally
(:mod:`callgate.store.meters`), so a decision never scans history.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from callgate.base.errors import LoadError, toolspec_invalid
from callgate.base.meters import (
    LABEL_PREFIX,
    SESSION_WINDOW,
    Contribution,
    Reading,
    Window,
    label_scope,
)

__all__ = [
    "SESSION_WINDOW",
    "USAGE_KEY",
    "Contribution",
    "MeterError",
    "MeterSpec",
    "Reading",
    "ScopeKind",
    "Window",
    "contributions",
    "label_scope",
    "parse_window",
    "LABEL_PREFIX",
    "parse_meters",
    "usage_context",
]

USAGE_KEY: Final = "usage"
"""``context.usage``."""
_WINDOW_RE: Final = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_MAX_WINDOW_MS: Final = 31 * 86_400_000
_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_SUM_RE: Final = re.compile(r"^sum\(args\.([A-Za-z_][A-Za-z0-9_]*)\)$")
_FIELD_RE: Final = re.compile(r"^args\.([A-Za-z_][A-Za-z0-9_]*)$")
MAX_METERS: Final = 8


class MeterError(ValueError):
    """A value a meter cannot count (the message names the meter, never the value)."""


class ScopeKind(StrEnum):
    TENANT = "tenant"
    SUBJECT = "subject"
    SESSION = "session"
    RESOURCE = "resource"
    ARG = "arg"


def parse_window(text: str) -> Window:
    """A window as written (``session`` or ``<n>s|m|h|d``, at most 31 days). Raises :class:`MeterError`."""
    if text == SESSION_WINDOW:
        return Window(text, 0)
    m = _WINDOW_RE.match(text)
    if m is None:
        raise MeterError(f"window '{text[:32]}' is neither 'session' nor <n>s|m|h|d")
    ms = int(m.group(1)) * _UNIT_MS[m.group(2)]
    if ms > _MAX_WINDOW_MS:
        raise MeterError(f"window '{text}' is longer than 31 days")
    return Window(text, ms)


@dataclass(frozen=True, slots=True)
class MeterSpec:
    """One declared meter of a ToolSpec."""

    name: str
    field: str
    """The summed top-level argument; empty for ``calls``."""
    scale: int
    """Fractional digits of the amounts (0: integers; the decimal normalizer's scale)."""
    scope: ScopeKind
    scope_field: str
    windows: tuple[Window, ...]

    @property
    def measure(self) -> str:
        return f"sum(args.{self.field})" if self.field else "calls"

    @property
    def integral(self) -> bool:
        return self.scale == 0


def _field_types(schema: Any) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def parse_meters(doc: Mapping[str, Any], source: str) -> tuple[MeterSpec, ...]:
    """The ``meters`` of a ToolSpec document. Raises :class:`LoadError` naming the member
    (``/meters/<i>/...``) for an unknown argument, a non-numeric sum, a bad scope or window."""
    raw = doc.get("meters")
    if raw is None:
        return ()
    schema = doc.get("normalized_schema", doc.get("input_schema"))
    props = _field_types(schema)
    scales = {
        str(n.get("field", "")).lstrip("/"): int(n.get("scale", 0))
        for n in doc.get("normalizers", []) or []
        if isinstance(n, Mapping) and n.get("kind") == "decimal" and isinstance(n.get("scale", 0), int)
    }
    if not isinstance(raw, list) or len(raw) > MAX_METERS:
        raise toolspec_invalid(f"/meters: a list of at most {MAX_METERS} meters", source=source)
    out: list[MeterSpec] = []
    seen: set[str] = set()
    for i, m in enumerate(raw):
        try:
            out.append(_one_meter(m, props, scales))
        except MeterError as exc:
            raise toolspec_invalid(f"/meters/{i}: {exc}", source=source) from None
        if out[-1].name in seen:
            raise toolspec_invalid(f"/meters/{i}: meter '{out[-1].name}' is declared twice", source=source)
        seen.add(out[-1].name)
    return tuple(out)


def _one_meter(m: Any, props: Mapping[str, Any], scales: Mapping[str, int]) -> MeterSpec:
    if not isinstance(m, Mapping):
        raise MeterError("a meter is an object {name, measure, scope, windows}")
    extra = sorted(set(m) - {"name", "measure", "scope", "windows"})
    if extra:
        raise MeterError(f"unknown member '{extra[0]}'")
    name = m.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise MeterError("name: lower-case letters, digits and '_' (a Cedar and Rego identifier)")
    measure = m.get("measure", "calls")
    field, scale = "", 0
    if measure != "calls":
        sm = _SUM_RE.match(measure) if isinstance(measure, str) else None
        if sm is None:
            raise MeterError(f"{name}: measure is 'calls' or 'sum(args.<field>)'")
        field = sm.group(1)
        if field not in props:
            raise MeterError(
                f"{name}: measure sums args.{field}, which the ToolSpec's schema does not declare"
            )
        if field in scales:
            scale = scales[field]
        elif not (isinstance(props[field], Mapping) and props[field].get("type") == "integer"):
            raise MeterError(
                f"{name}: args.{field} is not numeric (an integer, or a field with a 'decimal' normalizer)"
            )
    scope_text = m.get("scope", "subject")
    scope_field = ""
    if not isinstance(scope_text, str):
        raise MeterError(f"{name}: scope is a string")
    fm = _FIELD_RE.match(scope_text)
    if fm is not None:
        scope, scope_field = ScopeKind.ARG, fm.group(1)
        t = props.get(scope_field)
        if not (isinstance(t, Mapping) and t.get("type") in ("string", "integer")):
            raise MeterError(f"{name}: scope args.{scope_field} is not a string or integer argument")
    else:
        try:
            scope = ScopeKind(scope_text)
        except ValueError:
            raise MeterError(f"{name}: scope is tenant, subject, session, resource or args.<field>") from None
        if scope is ScopeKind.ARG:
            raise MeterError(f"{name}: scope is tenant, subject, session, resource or args.<field>")
    windows_raw = m.get("windows")
    if not isinstance(windows_raw, list) or not windows_raw or len(windows_raw) > 4:
        raise MeterError(f"{name}: windows is a list of 1 to 4 windows")
    windows: list[Window] = []
    for w in windows_raw:
        if not isinstance(w, str):
            raise MeterError(f"{name}: a window is a string like '1h' or 'session'")
        win = parse_window(w)
        if any(x.name == win.name for x in windows):
            raise MeterError(f"{name}: window '{w}' is listed twice")
        windows.append(win)
    return MeterSpec(name, field, scale, scope, scope_field, tuple(windows))


def _units(value: Any, scale: int, meter: str) -> int:
    if value is None:  # an optional argument not given adds nothing
        return 0
    if isinstance(value, bool):
        raise MeterError(f"meter {meter}: the summed argument is not a number")
    if isinstance(value, int):
        return int(value) * int(10**scale)
    try:
        d = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except ArithmeticError:
        raise MeterError(f"meter {meter}: the summed argument is not a number") from None
    units = d.scaleb(scale)
    if units != units.to_integral_value():
        raise MeterError(f"meter {meter}: the summed argument has more than {scale} decimal places")
    return int(units)


def contributions(
    meters: Sequence[MeterSpec],
    args: Mapping[str, Any],
    *,
    tenant: str,
    subject: str,
    session_id: str,
    resource: str,
    keeps: Mapping[str, int] | None = None,
) -> tuple[Contribution, ...]:
    """What one call adds to each declared meter (``args``: the normalized arguments). Raises
    :class:`MeterError` for a missing or non-numeric summed value or scope argument."""
    out: list[Contribution] = []
    for m in meters:
        amount = _units(args.get(m.field), m.scale, m.name) if m.field else 1
        if m.scope is ScopeKind.TENANT:
            part = ""
        elif m.scope is ScopeKind.SUBJECT:
            part = "s:" + subject
        elif m.scope is ScopeKind.SESSION:
            part = "x:" + session_id
        elif m.scope is ScopeKind.RESOURCE:
            part = "r:" + resource
        else:
            v = args.get(m.scope_field)
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise MeterError(f"meter {m.name}: scope argument {m.scope_field} is missing")
            part = f"a:{m.scope_field}={v}"
        keep = keeps.get(m.name, 0) if keeps else 0  # a ToolSpec sharing the meter may read longer
        out.append(Contribution(m.name, f"{tenant}\x1f{part}", amount, m.windows, m.scale, keep))
    return tuple(out)


def meter_keeps(meters: Iterable[MeterSpec]) -> dict[str, int]:
    """Per meter name, the longest timed window any of ``meters`` declares (a meter shared by
    several ToolSpecs is kept for the longest of them: docs/POLICIES.md "Shared meters")."""
    out: dict[str, int] = {}
    for m in meters:
        out[m.name] = max([out.get(m.name, 0), *(w.ms for w in m.windows)])
    return out


def registry_keeps(tools: Iterable[Any]) -> dict[str, int]:
    """:func:`meter_keeps` of a registry's ToolSpecs: the longest window any of them declares per
    meter name (a serving snapshot keeps its own: :meth:`PolicySnapshot.meter_keeps`)."""
    return meter_keeps(m for t in tools for m in t.meters)


def usage_context(readings: Sequence[Reading]) -> dict[str, Any]:
    """``context.usage``: meter -> window -> ``{before, after}`` (labels are not meters here)."""
    out: dict[str, dict[str, Any]] = {}
    for r in readings:
        if not r.meter.startswith(LABEL_PREFIX):
            out.setdefault(r.meter, {})[r.window] = r.as_dict()
    return out


def cedar_usage_type(meters: Sequence[MeterSpec]) -> str:
    """The Cedar schema type of ``context.usage`` for these meters."""
    parts = []
    for m in meters:
        t = "Long" if m.integral else "decimal"
        wins = ", ".join(f'"{w.name}": {{ before: {t}, after: {t} }}' for w in m.windows)
        parts.append(f"{m.name}: {{ {wins} }}")
    return "{ " + ", ".join(parts) + " }"


def declared_usage(doc: Mapping[str, Any], source: str) -> str:
    """The Cedar type of ``context.usage`` a ToolSpec document declares ("" when it declares no
    meters, or declares them wrongly: loading the ToolSpec reports that)."""
    try:
        meters = parse_meters(doc, source)
    except LoadError:
        return ""
    return cedar_usage_type(meters) if meters else ""


def usage_member(cedar_type: str) -> str:
    """``, usage: <type>`` for a generated action's context ("" without meters)."""
    return f", {USAGE_KEY}: {cedar_type}" if cedar_type else ""


# --------------------------------------------------------------------------- session labels
SESSION_KEY: Final = "session"
"""``context.session`` (``{labels: [...]}``): the labels of results the session has observed."""
CEDAR_SESSION_TYPE: Final = "{ labels: Set<String> }"
_LABEL_RE: Final = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_LABELS: Final = 8


def parse_labels(doc: Mapping[str, Any], source: str) -> tuple[str, ...]:
    """The ``result_labels`` of a ToolSpec document (e.g. ``["private", "untrusted"]``): labels
    every result of the tool carries into its session. Raises :class:`LoadError`."""
    raw = doc.get("result_labels")
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_LABELS:
        raise toolspec_invalid(f"/result_labels: a list of at most {MAX_LABELS} labels", source=source)
    for i, label in enumerate(raw):
        if not isinstance(label, str) or not _LABEL_RE.match(label):
            raise toolspec_invalid(
                f"/result_labels/{i}: a label is 1-32 lower-case letters, digits, '_' or '-'", source=source
            )
    return tuple(dict.fromkeys(raw))


def usage_record(usage: Mapping[str, Any]) -> dict[str, Any]:
    """``context.usage`` as the event records it (decimals as their exact text; the same dict
    when every value is an integer)."""
    if all(type(v) is int for ws in usage.values() for ba in ws.values() for v in ba.values()):
        return dict(usage)
    return {
        m: {w: {k: str(v) if isinstance(v, Decimal) else v for k, v in ba.items()} for w, ba in ws.items()}
        for m, ws in usage.items()
    }


_labels_used: list[Any] = [None, False]


def labels_used(tools: Iterable[Any]) -> bool:
    """Whether any of ``tools`` declares result labels (a serving snapshot asks once:
    :meth:`SnapshotMemo.labels_used`)."""
    return any(t.labels for t in tools)


def session_member(declared: bool) -> str:
    """``, session: { labels: Set<String> }`` for a generated action's context when labels are used."""
    return f", {SESSION_KEY}: {CEDAR_SESSION_TYPE}" if declared else ""
