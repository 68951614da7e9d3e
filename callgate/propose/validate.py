"""Schema validation stage (spec 6.4 layer 2): JSON Schema 2020-12 with format assertion ON.

``ParsedArguments --validate--> ValidatedArguments``

Validation is bound to exactly one dialect (:data:`DIALECT_2020_12`) and one validator
(python-jsonschema, version recorded on every :class:`~callgate.core.model.ValidatedArguments`), with
``format`` *asserted*, not treated as an annotation (spec 6.14 row 3: ``format: date`` must not be
silently unchecked).

Design points:

* **Compile once.** :meth:`CompiledSchema.compile` checks the schema against the 2020-12
  metaschema, checks every ``$schema``, resolves every ``$ref`` / ``$dynamicRef`` and scans every
  ``format`` keyword, translates every regex, then builds the validator (``Draft202012Validator``
  extended with ECMA-262 regex keywords). :meth:`CompiledSchema.validate` only runs it.
* **Formats are asserted or refused.** Only the formats in :data:`SUPPORTED_FORMATS` are accepted
  in a schema; any other ``format`` (including ones python-jsonschema knows but checks wrongly,
  see :data:`EXCLUDED_FORMATS`) is a :class:`~callgate.core.errors.LoadError` with
  ``ErrorCode.UNSUPPORTED_FORMAT``. The checkers are this module's own (RFC-based, verified against
  the official JSON-Schema-Test-Suite ``optional/format`` files by ``tests/test_validate.py``) and
  are self-tested at import time: a checker that does not reject its known-bad samples is not
  listed as supported.
* **Regexes are ECMA-262.** ``pattern``, ``patternProperties`` (also where
  ``additionalProperties`` / ``unevaluatedProperties`` consult them) and format ``regex`` follow
  ECMA-262 in Unicode mode, as JSON Schema requires -- not Python ``re``. Each schema regex is
  parsed with the ECMA-262 grammar and translated once, at compile, into a Python pattern made of
  explicit code-point classes (``$`` = end of input, ASCII ``\\d``/``\\w``/``\\b``, ECMA ``\\s``,
  ``.`` excluding all line terminators, ``\\p{General_Category}``). A regex that is invalid, that
  cannot be matched faithfully (e.g. variable-width lookbehind, ``\\p{Script=...}``) or that the
  nested-quantifier heuristic flags as a catastrophic-backtracking risk is a
  :class:`~callgate.core.errors.LoadError` (``TOOLSPEC_INVALID``); nothing is matched approximately.
* **No network, ever.** ``$ref`` resolves only inside the schema document, the official
  metaschemas and an explicitly passed :class:`referencing.Registry`. The registry never
  retrieves; an unknown remote URI is a load error.
* **Safe messages.** Violation messages are built from the failing keyword and the *schema* side
  only (plus property *names*); instance values never appear, because arguments may carry
  secrets or model-controlled text.
"""

from __future__ import annotations

import copy
import functools
import importlib
import ipaddress
import itertools
import re
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema import validators as _jsonschema_validators
from jsonschema.exceptions import ValidationError, best_match

from callgate.core.errors import Violation, schema_violation, toolspec_invalid, unsupported_format
from callgate.core.model import ParsedArguments, ValidatedArguments
from callgate.propose.fastcheck import compile_check

if TYPE_CHECKING:  # referencing does not re-export Resolver at top level
    from referencing._core import Resolver

    _Resolver = Resolver[Any]

_idna: ModuleType | None
try:  # idna is a dependency of jsonschema[format-nongpl]; without it hostname formats drop out.
    import idna as _idna
except ImportError:  # pragma: no cover - exercised only in broken environments
    _idna = None

_jsonschema_specifications: Any
try:  # untyped package (the official metaschemas); imported dynamically to keep mypy quiet
    _jsonschema_specifications = importlib.import_module("jsonschema_specifications")
except ImportError:  # pragma: no cover - jsonschema itself depends on it
    _jsonschema_specifications = None

__all__ = [
    "DIALECT_2020_12",
    "EXCLUDED_FORMATS",
    "SUPPORTED_FORMATS",
    "VALIDATOR_NAME",
    "VALIDATOR_VERSION",
    "CompiledSchema",
]

DIALECT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
"""The one dialect callgate validates with (``$schema`` of JSON Schema 2020-12)."""

VALIDATOR_NAME: Final = "python-jsonschema"
"""Recorded as :attr:`ValidatedArguments.validator`."""

VALIDATOR_VERSION: Final[str] = metadata.version("jsonschema")
"""Installed python-jsonschema version, recorded as :attr:`ValidatedArguments.validator_version`."""

_MAX_NAME = 64
"""Property names longer than this are truncated inside messages (pointers stay exact)."""


# =====================================================================================
# Format checkers. Each takes any JSON value and returns True for non-strings (formats only
# constrain strings) and for strings that conform. They never raise (wrapped fail-closed below).
# =====================================================================================

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME_PART = r"(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
_TIME_RE = re.compile(_TIME_PART, re.ASCII)
_DATE_TIME_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt]" + _TIME_PART, re.ASCII)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _date_ok(year: str, month: str, day: str) -> bool:
    m, d = int(month), int(day)
    return 1 <= m <= 12 and 1 <= d <= _days_in_month(int(year), m)


def _time_ok(groups: Sequence[str | None]) -> bool:
    """RFC 3339 ``full-time`` semantics; a leap second must fall on 23:59:60 UTC."""
    hour_s, minute_s, second_s, zulu, sign, off_h_s, off_m_s = groups
    assert hour_s is not None and minute_s is not None and second_s is not None
    hour, minute, second = int(hour_s), int(minute_s), int(second_s)
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset = 0
    if not zulu:
        assert off_h_s is not None and off_m_s is not None
        off_h, off_m = int(off_h_s), int(off_m_s)
        if off_h > 23 or off_m > 59:
            return False
        offset = (off_h * 60 + off_m) * (1 if sign == "+" else -1)
    if second == 60:
        return (hour * 60 + minute - offset) % 1440 == 23 * 60 + 59
    return True


def _is_date(value: object) -> bool:
    """RFC 3339 ``full-date`` (``YYYY-MM-DD``), with real calendar days."""
    if not isinstance(value, str):
        return True
    m = _DATE_RE.fullmatch(value)
    return m is not None and _date_ok(*m.groups())


def _is_time(value: object) -> bool:
    """RFC 3339 ``full-time``: offset required, ``Z`` case-insensitive, leap second at 23:59:60Z."""
    if not isinstance(value, str):
        return True
    m = _TIME_RE.fullmatch(value)
    return m is not None and _time_ok(m.groups())


def _is_date_time(value: object) -> bool:
    """RFC 3339 ``date-time``: ``T``/``Z`` case-insensitive, offset required, leap seconds."""
    if not isinstance(value, str):
        return True
    m = _DATE_TIME_RE.fullmatch(value)
    if m is None:
        return False
    g = m.groups()
    assert g[0] is not None and g[1] is not None and g[2] is not None
    return _date_ok(g[0], g[1], g[2]) and _time_ok(g[3:])


_DUR_TIME = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
_DURATION_RE = re.compile(
    rf"P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:{_DUR_TIME})?|{_DUR_TIME}|\d+W)",
    re.ASCII,
)


def _is_duration(value: object) -> bool:
    """RFC 3339 Appendix A ``duration`` (integers only, fixed unit order, weeks alone)."""
    if not isinstance(value, str):
        return True
    return _DURATION_RE.fullmatch(value) is not None


_HEX = "[0-9A-Fa-f]"
_UUID_RE = re.compile(f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}")


def _is_uuid(value: object) -> bool:
    """RFC 9562 string form: 8-4-4-4-12 ASCII hex digits, any version/variant."""
    if not isinstance(value, str):
        return True
    return _UUID_RE.fullmatch(value) is not None


_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4_RE = re.compile(rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}")


def _is_ipv4(value: object) -> bool:
    """RFC 2673 dotted-quad: four decimal octets, no leading zeros, ASCII only."""
    if not isinstance(value, str):
        return True
    return _IPV4_RE.fullmatch(value) is not None


def _is_ipv6(value: object) -> bool:
    """RFC 4291 text form (embedded IPv4 allowed, no zone id), ASCII only."""
    if not isinstance(value, str):
        return True
    if not value.isascii() or "%" in value or not value:
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


# --- host names -------------------------------------------------------------------------

_LDH_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IDN_DOTS_RE = re.compile("[.\u3002\uff0e\uff61]")
_RTL_CLASSES = frozenset({"R", "AL", "AN"})


def _bidi_domain_ok(ulabels: Sequence[str]) -> bool:
    """RFC 5893: in a domain with any right-to-left label, every label must pass the Bidi rule."""
    assert _idna is not None
    if not any(unicodedata.bidirectional(ch) in _RTL_CLASSES for label in ulabels for ch in label):
        return True
    try:
        for label in ulabels:
            _idna.check_bidi(label, check_ltr=True)
    except (UnicodeError, ValueError):
        return False
    return True


def _is_hostname(value: object) -> bool:
    """RFC 1123 host name (ASCII LDH labels, no trailing dot, <= 253 octets); ``xn--`` labels must
    be valid IDNA2008 A-labels (RFC 5890/5891/5892/5893)."""
    if not isinstance(value, str):
        return True
    if not value or len(value) > 253 or not value.isascii():
        return False
    ulabels: list[str] = []
    for label in value.split("."):
        if _LDH_LABEL_RE.fullmatch(label) is None:
            return False
        if label[:4].lower() == "xn--":
            assert _idna is not None
            try:
                ulabel = _idna.ulabel(label)
            except (UnicodeError, ValueError):
                return False
            if ulabel.isascii():
                return False
            ulabels.append(ulabel)
        else:
            ulabels.append(label)
    return _bidi_domain_ok(ulabels)


def _is_idn_hostname(value: object) -> bool:
    """RFC 5890 internationalized host name: IDNA2008 U-labels/A-labels/NR-LDH labels separated by
    any of the four IDNA dots; A-label form <= 63 octets per label, <= 253 octets in total."""
    if not isinstance(value, str):
        return True
    if not value:
        return False
    assert _idna is not None
    ulabels: list[str] = []
    total = -1
    for label in _IDN_DOTS_RE.split(value):
        if not label:
            return False
        try:
            if label.isascii():
                if label[:4].lower() == "xn--":
                    ulabel = _idna.ulabel(label)
                    if ulabel.isascii():
                        return False
                elif _LDH_LABEL_RE.fullmatch(label) is None or label[2:4] == "--":
                    return False
                else:
                    ulabel = label
                alabel_len = len(label)
            else:
                _idna.check_label(label)
                alabel_len = len(_idna.alabel(label))
                ulabel = label
        except (UnicodeError, ValueError):
            return False
        if alabel_len > 63:
            return False
        total += alabel_len + 1
        ulabels.append(ulabel)
    if total > 253:
        return False
    return _bidi_domain_ok(ulabels)


# --- e-mail -----------------------------------------------------------------------------

_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-"
_EMAIL_LOCAL_RE = re.compile(
    rf"[{_ATEXT}]+(?:\.[{_ATEXT}]+)*"
    r'|"(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E])*"'
)
_IDN_EMAIL_LOCAL_RE = re.compile(
    rf"[{_ATEXT}\u0080-\U0010FFFF]+(?:\.[{_ATEXT}\u0080-\U0010FFFF]+)*"
    r'|"(?:[\x20\x21\x23-\x5B\x5D-\x7E\u0080-\U0010FFFF]|\\[\x20-\x7E\u0080-\U0010FFFF])*"'
)


def _address_literal_ok(literal: str) -> bool:
    """RFC 5321 4.1.3 ``[IPv4]`` or ``[IPv6:...]`` (general address literals are refused)."""
    inner = literal[1:-1]
    if inner[:5].lower() == "ipv6:":
        return _is_ipv6(inner[5:])
    return _IPV4_RE.fullmatch(inner) is not None


def _email_ok(value: str, *, idn: bool) -> bool:
    local, at, domain = value.rpartition("@")
    if not at or not local or not domain:
        return False
    if len(value.encode("utf-8")) > 254 or len(local.encode("utf-8")) > 64:
        return False
    local_re = _IDN_EMAIL_LOCAL_RE if idn else _EMAIL_LOCAL_RE
    if local_re.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        return _address_literal_ok(domain)
    if idn:
        return _is_idn_hostname(unicodedata.normalize("NFC", domain))
    return _is_hostname(domain)


def _is_email(value: object) -> bool:
    """RFC 5321 ``Mailbox``: dot-string or quoted-string local part (<= 64 octets) ``@`` host name
    or address literal."""
    if not isinstance(value, str):
        return True
    return _email_ok(value, idn=False)


def _is_idn_email(value: object) -> bool:
    """RFC 6531 ``Mailbox``: as ``email`` but non-ASCII allowed in the local part and the domain is
    an ``idn-hostname`` (compared after NFC normalization)."""
    if not isinstance(value, str):
        return True
    return _email_ok(value, idn=True)


# --- URI / IRI (RFC 3986 / RFC 3987 ABNF) -----------------------------------------------

_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd\U00040000-\U0004fffd"
    "\U00050000-\U0005fffd\U00060000-\U0006fffd\U00070000-\U0007fffd\U00080000-\U0008fffd"
    "\U00090000-\U0009fffd\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
    "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
_IPVFUTURE_RE = re.compile(r"[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+")


def _uri_patterns(*, iri: bool) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compile (absolute, relative-ref) patterns of RFC 3986, or of RFC 3987 when ``iri``."""
    ucs = _UCSCHAR if iri else ""
    private = _IPRIVATE if iri else ""
    unreserved = rf"A-Za-z0-9\-._~{ucs}"
    sub_delims = r"!$&'()*+,;="
    pct = r"%[0-9A-Fa-f]{2}"
    pchar = rf"(?:[{unreserved}{sub_delims}:@]|{pct})"
    query = rf"(?:[{unreserved}{sub_delims}:@/?{private}]|{pct})*"
    fragment = rf"(?:[{unreserved}{sub_delims}:@/?]|{pct})*"
    userinfo = rf"(?:[{unreserved}{sub_delims}:]|{pct})*"
    reg_name = rf"(?:[{unreserved}{sub_delims}]|{pct})*"
    authority = rf"(?:{userinfo}@)?(?:\[(?P<ip>[^\[\]]*)\]|{reg_name})(?::[0-9]*)?"
    segment = rf"{pchar}*"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{pchar}+(?:/{segment})*)?"
    path_rootless = rf"{pchar}+(?:/{segment})*"
    path_noscheme = rf"(?:[{unreserved}{sub_delims}@]|{pct})+(?:/{segment})*"
    tail = rf"(?:\?{query})?(?:\#{fragment})?"
    absolute = (
        rf"[A-Za-z][A-Za-z0-9+\-.]*:"
        rf"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|){tail}"
    )
    relative = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|){tail}"
    return re.compile(absolute), re.compile(relative)


_URI_RE, _URI_RELATIVE_RE = _uri_patterns(iri=False)
_IRI_RE, _IRI_RELATIVE_RE = _uri_patterns(iri=True)


def _ip_literal_ok(match: re.Match[str]) -> bool:
    literal = match.group("ip")
    if literal is None:
        return True
    if literal[:1] in ("v", "V"):
        return _IPVFUTURE_RE.fullmatch(literal) is not None
    return bool(literal) and _is_ipv6(literal)


def _uri_ok(value: str, absolute: re.Pattern[str], relative: re.Pattern[str] | None) -> bool:
    m = absolute.fullmatch(value)
    if m is None and relative is not None:
        m = relative.fullmatch(value)
    return m is not None and _ip_literal_ok(m)


def _is_uri(value: object) -> bool:
    """RFC 3986 ``URI`` (absolute, scheme required); IP literals checked as real IPv6 addresses."""
    return not isinstance(value, str) or _uri_ok(value, _URI_RE, None)


def _is_uri_reference(value: object) -> bool:
    """RFC 3986 ``URI-reference`` (``URI`` or ``relative-ref``)."""
    return not isinstance(value, str) or _uri_ok(value, _URI_RE, _URI_RELATIVE_RE)


def _is_iri(value: object) -> bool:
    """RFC 3987 ``IRI`` (``ucschar`` allowed, ``iprivate`` only in the query)."""
    return not isinstance(value, str) or _uri_ok(value, _IRI_RE, None)


def _is_iri_reference(value: object) -> bool:
    """RFC 3987 ``IRI-reference``."""
    return not isinstance(value, str) or _uri_ok(value, _IRI_RE, _IRI_RELATIVE_RE)


# --- URI template, JSON pointers --------------------------------------------------------

_VARCHAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE_RE = re.compile(
    r"(?:[\x21\x23\x24\x26\x27\x28-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E"
    + _UCSCHAR
    + _IPRIVATE
    + r"]|%[0-9A-Fa-f]{2}"
    + rf"|\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"
)


def _is_uri_template(value: object) -> bool:
    """RFC 6570 level 4 template; reserved operators (``= , ! @ |``) are refused."""
    if not isinstance(value, str):
        return True
    return _URI_TEMPLATE_RE.fullmatch(value) is not None


_JSON_POINTER = r"(?:/(?:[^/~]|~[01])*)*"
_JSON_POINTER_RE = re.compile(_JSON_POINTER)
_NON_NEG_INT = r"(?:0|[1-9][0-9]*)"
_RELATIVE_JSON_POINTER_RE = re.compile(
    rf"{_NON_NEG_INT}(?:[+-]{_NON_NEG_INT})?(?:\#|{_JSON_POINTER})", re.ASCII
)


def _is_json_pointer(value: object) -> bool:
    """RFC 6901 JSON pointer (string form)."""
    return not isinstance(value, str) or _JSON_POINTER_RE.fullmatch(value) is not None


def _is_relative_json_pointer(value: object) -> bool:
    """draft-bhutton-relative-json-pointer-00 (the 2020-12 reference), ASCII digits only."""
    return not isinstance(value, str) or _RELATIVE_JSON_POINTER_RE.fullmatch(value) is not None


# =====================================================================================
# ECMA-262 regular expressions (``pattern``, ``patternProperties``, format ``regex``).
#
# JSON Schema patterns are ECMA-262 regular expressions with Unicode ("u" flag) semantics, which
# differ from Python ``re`` in ways that matter for a guard: Python ``$`` also matches before a
# final "\n", ``\d``/``\w``/``\b`` are Unicode-aware, ``.`` matches "\r" and U+2028/U+2029, and
# there are no ``\p{...}`` escapes. A pattern is therefore parsed here with the ECMA-262 (2025,
# Unicode mode) grammar and early errors, then translated ONCE into an equivalent Python
# pattern built only from explicit code-point classes and constructs whose Python semantics are
# the ECMA ones. Anything that cannot be translated faithfully is refused at compile time
# (``_RegexError`` with ``syntax=False``) -- never matched approximately.
# =====================================================================================


class _RegexError(Exception):
    """A regex that is not valid ECMA-262 (``syntax``), or that is valid but cannot be matched
    with ECMA-262 semantics by this build (not ``syntax``)."""

    def __init__(self, message: str, *, syntax: bool) -> None:
        super().__init__(message)
        self.message = message
        self.syntax = syntax


_Range = tuple[int, int]
_Ranges = tuple[_Range, ...]
_MAX_CP: Final = 0x10FFFF
_PY_MAXREPEAT: Final = 4294967295  # re's repeat-count limit (sre MAXREPEAT on 64-bit builds)


def _normalize(ranges: Iterable[_Range]) -> _Ranges:
    """Sort and merge inclusive code-point ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _complement(ranges: _Ranges) -> _Ranges:
    out: list[_Range] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CP:
        out.append((nxt, _MAX_CP))
    return tuple(out)


def _disjoint(a: _Ranges, b: _Ranges) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return False
    return True


_ANY_CP: Final[_Ranges] = ((0, _MAX_CP),)
_DIGITS: Final[_Ranges] = ((0x30, 0x39),)
_WORD_CHARS: Final[_Ranges] = _normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_LINE_TERMINATORS: Final[_Ranges] = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_SPACE_SEPARATORS: Final[_Ranges] = (  # General_Category Zs (stable since Unicode 6.3)
    (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x202F, 0x202F),
    (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip
_ECMA_WHITESPACE: Final[_Ranges] = _normalize(  # WhiteSpace + LineTerminator (ECMA-262 22.2.2.9)
    [(0x09, 0x09), (0x0B, 0x0C), (0xFEFF, 0xFEFF), *_SPACE_SEPARATORS, *_LINE_TERMINATORS]
)

_GC_GROUPS: Final[Mapping[str, tuple[str, ...]]] = {
    "C": ("Cc", "Cf", "Cn", "Co", "Cs"),
    "L": ("Ll", "Lm", "Lo", "Lt", "Lu"),
    "LC": ("Ll", "Lt", "Lu"),
    "M": ("Mc", "Me", "Mn"),
    "N": ("Nd", "Nl", "No"),
    "P": ("Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps"),
    "S": ("Sc", "Sk", "Sm", "So"),
    "Z": ("Zl", "Zp", "Zs"),
}
# General_Category values and their aliases (ECMA-262 table "Value aliases and canonical values
# for the Unicode property General_Category", from Unicode PropertyValueAliases.txt).
_GC_VALUE_ALIASES: Final = (
    "C Other", "Cc Control cntrl", "Cf Format", "Cn Unassigned", "Co Private_Use", "Cs Surrogate",
    "L Letter", "LC Cased_Letter", "Ll Lowercase_Letter", "Lm Modifier_Letter", "Lo Other_Letter",
    "Lt Titlecase_Letter", "Lu Uppercase_Letter", "M Mark Combining_Mark", "Mc Spacing_Mark",
    "Me Enclosing_Mark", "Mn Nonspacing_Mark", "N Number", "Nd Decimal_Number digit",
    "Nl Letter_Number", "No Other_Number", "P Punctuation punct", "Pc Connector_Punctuation",
    "Pd Dash_Punctuation", "Pe Close_Punctuation", "Pf Final_Punctuation",
    "Pi Initial_Punctuation", "Po Other_Punctuation", "Ps Open_Punctuation", "S Symbol",
    "Sc Currency_Symbol", "Sk Modifier_Symbol", "Sm Math_Symbol", "So Other_Symbol",
    "Z Separator", "Zl Line_Separator", "Zp Paragraph_Separator", "Zs Space_Separator",
)  # fmt: skip
_GC_ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    alias: _GC_GROUPS.get(names.split()[0], (names.split()[0],))
    for names in _GC_VALUE_ALIASES
    for alias in names.split()
}
# Binary properties allowed in Unicode mode (ECMA-262 table "Binary Unicode property aliases").
_BINARY_PROPERTIES: Final = frozenset(
    "ASCII ASCII_Hex_Digit AHex Alphabetic Alpha Any Assigned Bidi_Control Bidi_C Bidi_Mirrored "
    "Bidi_M Case_Ignorable CI Cased Changes_When_Casefolded CWCF Changes_When_Casemapped CWCM "
    "Changes_When_Lowercased CWL Changes_When_NFKC_Casefolded CWKCF Changes_When_Titlecased CWT "
    "Changes_When_Uppercased CWU Dash Default_Ignorable_Code_Point DI Deprecated Dep Diacritic "
    "Dia Emoji Emoji_Component EComp Emoji_Modifier EMod Emoji_Modifier_Base EBase "
    "Emoji_Presentation EPres Extended_Pictographic ExtPict Extender Ext Grapheme_Base Gr_Base "
    "Grapheme_Extend Gr_Ext Hex_Digit Hex IDS_Binary_Operator IDSB IDS_Trinary_Operator IDST "
    "ID_Continue IDC ID_Start IDS Ideographic Ideo Join_Control Join_C Logical_Order_Exception "
    "LOE Lowercase Lower Math Noncharacter_Code_Point NChar Pattern_Syntax Pat_Syn "
    "Pattern_White_Space Pat_WS Quotation_Mark QMark Radical Regional_Indicator RI "
    "Sentence_Terminal STerm Soft_Dotted SD Terminal_Punctuation Term Unified_Ideograph UIdeo "
    "Uppercase Upper Variation_Selector VS White_Space space XID_Continue XIDC XID_Start "
    "XIDS".split()
)
# Binary properties this build can compute exactly (everything else is refused in patterns).
_BINARY_SUPPORTED: Final[Mapping[str, Callable[[], _Ranges]]] = {
    "Any": lambda: _ANY_CP,
    "ASCII": lambda: ((0, 0x7F),),
    "ASCII_Hex_Digit": lambda: _normalize([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)]),
    "AHex": lambda: _normalize([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)]),
    "Assigned": lambda: _complement(_gc_ranges(("Cn",))),
}
# Script / Script_Extensions values and aliases (Unicode 17 PropertyValueAliases.txt, as accepted
# by current engines); only used to decide whether a regex is *valid*: \p{Script=...} itself is
# refused in patterns because Python's unicodedata has no Script property.
_SCRIPT_VALUES: Final = frozenset(
    (
    "Adlam Adlm Aghb Ahom Anatolian_Hieroglyphs Arab Arabic Armenian Armi Armn Avestan Avst "
    "Bali Balinese Bamu Bamum Bass Bassa_Vah Batak Batk Beng Bengali Berf Beria_Erfe Bhaiksuki "
    "Bhks Bopo Bopomofo Brah Brahmi Brai Braille Bugi Buginese Buhd Buhid Cakm "
    "Canadian_Aboriginal Cans Cari Carian Caucasian_Albanian Chakma Cham Cher Cherokee "
    "Chorasmian Chrs Common Copt Coptic Cpmn Cprt Cuneiform Cypriot Cypro_Minoan Cyrillic Cyrl "
    "Deseret Deva Devanagari Diak Dives_Akuru Dogr Dogra Dsrt Dupl Duployan Egyp "
    "Egyptian_Hieroglyphs Elba Elbasan Elym Elymaic Ethi Ethiopic Gara Garay Geor Georgian Glag "
    "Glagolitic Gong Gonm Goth Gothic Gran Grantha Greek Grek Gujarati Gujr Gukh Gunjala_Gondi "
    "Gurmukhi Guru Gurung_Khema Han Hang Hangul Hani Hanifi_Rohingya Hano Hanunoo Hatr Hatran "
    "Hebr Hebrew Hira Hiragana Hluw Hmng Hmnp Hung Imperial_Aramaic Inherited "
    "Inscriptional_Pahlavi Inscriptional_Parthian Ital Java Javanese Kaithi Kali Kana Kannada "
    "Katakana Kawi Kayah_Li Khar Kharoshthi Khitan_Small_Script Khmer Khmr Khoj Khojki "
    "Khudawadi Kirat_Rai Kits Knda Krai Kthi Lana Lao Laoo Latin Latn Lepc Lepcha Limb Limbu "
    "Lina Linb Linear_A Linear_B Lisu Lyci Lycian Lydi Lydian Mahajani Mahj Maka Makasar "
    "Malayalam Mand Mandaic Mani Manichaean Marc Marchen Masaram_Gondi Medefaidrin Medf "
    "Meetei_Mayek Mend Mende_Kikakui Merc Mero Meroitic_Cursive Meroitic_Hieroglyphs Miao Mlym "
    "Modi Mong Mongolian Mro Mroo Mtei Mult Multani Myanmar Mymr Nabataean Nag_Mundari Nagm "
    "Nand Nandinagari Narb Nbat New_Tai_Lue Newa Nko Nkoo Nshu Nushu Nyiakeng_Puachue_Hmong "
    "Ogam Ogham Ol_Chiki Ol_Onal Olck Old_Hungarian Old_Italic Old_North_Arabian Old_Permic "
    "Old_Persian Old_Sogdian Old_South_Arabian Old_Turkic Old_Uyghur Onao Oriya Orkh Orya Osage "
    "Osge Osma Osmanya Ougr Pahawh_Hmong Palm Palmyrene Pau_Cin_Hau Pauc Perm Phag Phags_Pa "
    "Phli Phlp Phnx Phoenician Plrd Prti Psalter_Pahlavi Qaac Qaai Rejang Rjng Rohg Runic Runr "
    "Samaritan Samr Sarb Saur Saurashtra Sgnw Sharada Shavian Shaw Shrd Sidd Siddham Sidetic "
    "Sidt SignWriting Sind Sinh Sinhala Sogd Sogdian Sogo Sora Sora_Sompeng Soyo Soyombo Sund "
    "Sundanese Sunu Sunuwar Sylo Syloti_Nagri Syrc Syriac Tagalog Tagb Tagbanwa Tai_Le Tai_Tham "
    "Tai_Viet Tai_Yo Takr Takri Tale Talu Tamil Taml Tang Tangsa Tangut Tavt Tayo Telu Telugu "
    "Tfng Tglg Thaa Thaana Thai Tibetan Tibt Tifinagh Tirh Tirhuta Tnsa Todhri Todr Tolong_Siki "
    "Tols Toto Tulu_Tigalari Tutg Ugar Ugaritic Unknown Vai Vaii Vith Vithkuqi Wancho Wara "
    "Warang_Citi Wcho Xpeo Xsux Yezi Yezidi Yi Yiii Zanabazar_Square Zanb Zinh Zyyy Zzzz"
    ).split()
)  # fmt: skip

_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_DEC_DIGITS: Final = frozenset("0123456789")
_ASCII_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SYNTAX_CHARS: Final = frozenset("^$\\.*+?()[]{}|")
_CONTROL_ESCAPES: Final[Mapping[str, int]] = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_PROPERTY_NAME_RE: Final = re.compile(r"[A-Za-z_]+")
_PROPERTY_VALUE_RE: Final = re.compile(r"[A-Za-z0-9_]+")


@functools.cache
def _gc_table() -> Mapping[str, _Ranges]:
    """Code-point ranges of every two-letter General_Category (Python's unicodedata; built once,
    on the first \\p{...} that needs it, ~0.3 s)."""
    table: dict[str, list[_Range]] = {}
    category = unicodedata.category
    start, current = 0, category("\x00")
    for cp in range(1, _MAX_CP + 2):
        cat = category(chr(cp)) if cp <= _MAX_CP else ""
        if cat != current:
            table.setdefault(current, []).append((start, cp - 1))
            start, current = cp, cat
    return {name: tuple(ranges) for name, ranges in table.items()}


def _gc_ranges(categories: Iterable[str]) -> _Ranges:
    table = _gc_table()
    return _normalize(r for cat in categories for r in table.get(cat, ()))


# --- AST -----------------------------------------------------------------------------


class _Named:
    """A predefined set: ``\\d \\w \\s`` (kind d/w/s), ``.`` (dot / any), ``\\p{...}``
    (gc / bin / sc / scx), optionally complemented."""

    __slots__ = ("kind", "negated", "value")

    def __init__(self, kind: str, value: str = "", negated: bool = False) -> None:
        self.kind, self.value, self.negated = kind, value, negated

    def ranges(self) -> _Ranges:
        kind = self.kind
        if kind == "d":
            base = _DIGITS
        elif kind == "w":
            base = _WORD_CHARS
        elif kind == "s":
            base = _ECMA_WHITESPACE
        elif kind == "dot":
            base = _complement(_LINE_TERMINATORS)
        elif kind == "any":
            base = _ANY_CP
        elif kind == "gc":
            base = _gc_ranges(_GC_ALIASES[self.value])
        elif kind == "bin" and self.value in _BINARY_SUPPORTED:
            base = _BINARY_SUPPORTED[self.value]()
        else:
            raise _RegexError(f"{self.describe()} is not supported", syntax=False)
        return _complement(base) if self.negated else base

    def describe(self) -> str:
        letter = "P" if self.negated else "p"
        if self.kind in ("sc", "scx"):
            prop = "Script" if self.kind == "sc" else "Script_Extensions"
            return f"\\{letter}{{{prop}={self.value}}}"
        return f"\\{letter}{{{self.value}}}"

    def supported(self) -> bool:
        return self.kind in ("d", "w", "s", "dot", "any", "gc") or (
            self.kind == "bin" and self.value in _BINARY_SUPPORTED
        )


_ClassItem = int | _Range | _Named


class _Class:
    """A set of code points: a literal, ``.``, an escape like ``\\d`` or ``[...]``."""

    __slots__ = ("items", "negated")

    def __init__(self, items: tuple[_ClassItem, ...], negated: bool = False) -> None:
        self.items, self.negated = items, negated

    def ranges(self) -> _Ranges:
        parts: list[_Range] = []
        for item in self.items:
            if isinstance(item, int):
                parts.append((item, item))
            elif isinstance(item, tuple):
                parts.append(item)
            else:
                parts.extend(item.ranges())
        merged = _normalize(parts)
        return _complement(merged) if self.negated else merged


class _Assert:
    """``^`` / ``$`` (kind "^", "$", or "^m", "$m" under the m modifier), ``\\b`` / ``\\B``."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Disj:
    __slots__ = ("alts",)

    def __init__(self, alts: list[list[_RxNode]]) -> None:
        self.alts = alts


class _Group:
    """``( )`` (index = capture number) or ``(?: )`` / modifier group (index None)."""

    __slots__ = ("body", "index")

    def __init__(self, index: int | None, body: _Disj) -> None:
        self.index, self.body = index, body


class _Look:
    __slots__ = ("behind", "body", "negative")

    def __init__(self, behind: bool, negative: bool, body: _Disj) -> None:
        self.behind, self.negative, self.body = behind, negative, body


class _Backref:
    __slots__ = ("indices", "name", "number")

    def __init__(self, number: str | None, name: str | None) -> None:
        self.number, self.name = number, name
        self.indices: list[int] = []


class _Repeat:
    __slots__ = ("body", "hi", "lazy", "lo")

    def __init__(self, body: _RxNode, lo: int, hi: int | None, lazy: bool) -> None:
        self.body, self.lo, self.hi, self.lazy = body, lo, hi, lazy

    @property
    def multi(self) -> bool:
        """True if the body can be iterated more than once."""
        return self.hi is None or self.hi > 1


_RxNode = _Class | _Assert | _Group | _Look | _Backref | _Repeat


class _Place:
    """Where a group was opened: alternative ``alt`` of the group (or root) numbered ``uid``,
    itself at ``parent``. Places share their parents, so making one is O(1)."""

    __slots__ = ("alt", "depth", "parent", "uid")

    def __init__(self, uid: int, alt: int, parent: _Place | None) -> None:
        self.uid, self.alt, self.parent = uid, alt, parent
        self.depth: int = 1 if parent is None else parent.depth + 1


class _Frame:
    """An open group while parsing (the parser is iterative: nesting depth is unbounded)."""

    __slots__ = (
        "alts", "behind", "dotall", "index", "kind", "multiline", "negative", "place", "uid",
    )  # fmt: skip

    def __init__(self, kind: str, uid: int, place: _Place | None, *, dotall: bool, multiline: bool) -> None:
        self.kind, self.uid, self.place = kind, uid, place
        self.dotall, self.multiline = dotall, multiline
        self.alts: list[list[_RxNode]] = [[]]
        self.index: int | None = None
        self.behind = self.negative = False


class _RxParse:
    """Result of parsing: the tree, the capture count and what cannot be matched faithfully."""

    __slots__ = ("group_count", "root", "unsupported")

    def __init__(self, root: _Disj, group_count: int, unsupported: list[str]) -> None:
        self.root, self.group_count, self.unsupported = root, group_count, unsupported


# --- parser (ECMA-262 2025 Pattern grammar, Unicode mode, with its early errors) ----------


_SURROGATE_PAIR_RE: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _join_surrogates(text: str) -> str:
    """Combine UTF-16 surrogate pairs into code points (JavaScript source text is UTF-16)."""
    return _SURROGATE_PAIR_RE.sub(
        lambda m: chr(0x10000 + ((ord(m[0][0]) - 0xD800) << 10) + ord(m[0][1]) - 0xDC00), text
    )


class _EcmaParser:
    def __init__(self, source: str) -> None:
        source = _join_surrogates(source)
        self.s = source
        self.n = len(source)
        self.group_count = 0
        # name -> [(place, capture index)] in source order (duplicate names are legal only in
        # different alternatives)
        self.names: dict[str, list[tuple[_Place, int]]] = {}
        self.backrefs: list[_Backref] = []
        self.unsupported: list[str] = []
        self._uid = 0

    def _error(self, message: str, at: int) -> _RegexError:
        return _RegexError(f"{message} at offset {at}", syntax=True)

    def parse(self) -> _RxParse:
        s, n = self.s, self.n
        stack = [_Frame("root", 0, None, dotall=False, multiline=False)]
        i = 0
        while i < n:
            top = stack[-1]
            c = s[i]
            atom: _RxNode
            if c == "|":
                top.alts.append([])
                i += 1
                continue
            if c == "(":
                i = self._open_group(i, stack)
                continue
            if c == ")":
                if len(stack) == 1:
                    raise self._error("unmatched ')'", i)
                frame = stack.pop()
                body = _Disj(frame.alts)
                i += 1
                if frame.kind == "look":
                    # Unicode mode: lookarounds cannot be quantified (a quantifier after one
                    # is reported as "nothing to repeat" by the next iteration).
                    stack[-1].alts[-1].append(_Look(frame.behind, frame.negative, body))
                    continue
                atom = _Group(frame.index, body)
            elif c in "*+?":
                raise self._error("nothing to repeat", i)
            elif c == "{":
                raise self._error("nothing to repeat" if self._quantifier(i) else "lone '{'", i)
            elif c in "}]":
                raise self._error(f"lone {c!r}", i)
            elif c in "^$":
                top.alts[-1].append(_Assert(c + "m" if top.multiline else c))
                i += 1
                continue
            elif c == ".":
                atom = _Class((_Named("any" if top.dotall else "dot"),))
                i += 1
            elif c == "[":
                atom, i = self._class(i + 1)
            elif c == "\\":
                escaped, i = self._atom_escape(i + 1)
                if isinstance(escaped, _Assert):
                    top.alts[-1].append(escaped)
                    continue
                atom = escaped
            else:
                atom = _Class((ord(c),))
                i += 1
            quantifier = self._quantifier(i)
            if quantifier is not None:
                lo, hi, lazy, i = quantifier
                atom = _Repeat(atom, lo, hi, lazy)
            stack[-1].alts[-1].append(atom)
        if len(stack) > 1:
            raise self._error("missing ')'", n)
        self._finish()
        return _RxParse(_Disj(stack[0].alts), self.group_count, self.unsupported)

    def _finish(self) -> None:
        for ref in self.backrefs:
            if ref.number is not None:
                digits = ref.number.lstrip("0")
                if len(digits) > 9 or int(digits) > self.group_count:
                    raise _RegexError(
                        f"backreference \\{ref.number} to a group that does not exist", syntax=True
                    )
                ref.indices = [int(digits)]
            else:
                assert ref.name is not None
                if ref.name not in self.names:
                    raise _RegexError(
                        f"backreference \\k<{ref.name}> to a group name that does not exist",
                        syntax=True,
                    )
                ref.indices = [index for _, index in self.names[ref.name]]
        for name, entries in self.names.items():
            # Entries are in source order (= tree order): a clash between any two of them
            # implies a clash between two neighbours, so only neighbours are compared.
            for (place_a, _), (place_b, _) in itertools.pairwise(entries):
                if not self._other_alternative(place_a, place_b):
                    raise _RegexError(f"duplicate group name <{name}>", syntax=True)

    @staticmethod
    def _other_alternative(a: _Place, b: _Place) -> bool:
        """ES2025: two groups may share a name only if they are in different alternatives of
        some disjunction (then they can never both participate)."""
        while a.depth > b.depth:
            assert a.parent is not None
            a = a.parent
        while b.depth > a.depth:
            assert b.parent is not None
            b = b.parent
        if a is b:
            return False  # one group is inside the other
        while a.parent is not b.parent:
            assert a.parent is not None and b.parent is not None
            a, b = a.parent, b.parent
        return a.alt != b.alt  # same parent, so same disjunction

    # --- groups ---

    def _open_group(self, i: int, stack: list[_Frame]) -> int:
        s, n = self.s, self.n
        top = stack[-1]
        self._uid += 1
        place = _Place(top.uid, len(top.alts) - 1, top.place)
        frame = _Frame("group", self._uid, place, dotall=top.dotall, multiline=top.multiline)
        if not s.startswith("(?", i):
            self.group_count += 1
            frame.index = self.group_count
            stack.append(frame)
            return i + 1
        j = i + 2
        d = s[j] if j < n else ""
        if d == ":":
            frame.kind = "nc"
            stack.append(frame)
            return j + 1
        if d in ("=", "!") or (d == "<" and s[j + 1 : j + 2] in ("=", "!")):
            behind = d == "<"
            frame.kind = "look"
            frame.behind = behind
            frame.negative = s[j + 1 if behind else j] == "!"
            stack.append(frame)
            return j + 2 if behind else j + 1
        if d == "<":
            name, k = self._group_name(j + 1)
            self.group_count += 1
            frame.index = self.group_count
            self.names.setdefault(name, []).append((place, frame.index))
            stack.append(frame)
            return k
        # ES2025 modifiers: (?ims-ims: ... )
        k = j
        while k < n and s[k] in "ims":
            k += 1
        add = s[j:k]
        remove = ""
        dash = k < n and s[k] == "-"
        if dash:
            m = k + 1
            while m < n and s[m] in "ims":
                m += 1
            remove, k = s[k + 1 : m], m
        if k >= n or s[k] != ":" or not (add or dash):
            raise self._error("invalid group", i)
        if (dash and not add and not remove) or len(set(add + remove)) != len(add + remove):
            raise self._error("invalid modifiers", i)
        frame.kind = "nc"
        frame.dotall = (top.dotall or "s" in add) and "s" not in remove
        frame.multiline = (top.multiline or "m" in add) and "m" not in remove
        if "i" in add:
            self.unsupported.append(
                "case-insensitive modifier group (?i:...) (ECMA-262 case folding is not "
                "reproduced; write both cases explicitly, e.g. [Aa])"
            )
        stack.append(frame)
        return k + 1

    def _group_name(self, k: int) -> tuple[str, int]:
        """Parse ``RegExpIdentifierName>`` starting at ``k``; return (name, index after '>')."""
        s, n = self.s, self.n
        start = k
        chars: list[str] = []
        while True:
            if k >= n:
                raise self._error("unterminated group name", start)
            c = s[k]
            if c == ">":
                break
            if c == "\\":
                if s[k + 1 : k + 2] != "u":
                    raise self._error("invalid escape in group name", k)
                cp, k = self._unicode_escape(k + 2)
                c = chr(cp)
            else:
                k += 1
            ok = (
                c in "$_" or c.isidentifier()
                if not chars
                else c in "$\u200c\u200d" or ("a" + c).isidentifier()
            )
            if not ok:
                raise self._error("invalid group name", start)
            chars.append(c)
        if not chars:
            raise self._error("empty group name", start)
        return "".join(chars), k + 1

    # --- quantifiers ---

    def _quantifier(self, i: int) -> tuple[int, int | None, bool, int] | None:
        s, n = self.s, self.n
        if i >= n:
            return None
        c = s[i]
        lo: int
        hi: int | None
        if c == "*":
            lo, hi, i = 0, None, i + 1
        elif c == "+":
            lo, hi, i = 1, None, i + 1
        elif c == "?":
            lo, hi, i = 0, 1, i + 1
        elif c == "{":
            k = i + 1
            while k < n and s[k] in _DEC_DIGITS:
                k += 1
            if k == i + 1:
                return None
            lo_digits = s[i + 1 : k]
            hi_digits: str | None = lo_digits
            if k < n and s[k] == ",":
                m = k + 1
                while m < n and s[m] in _DEC_DIGITS:
                    m += 1
                hi_digits = s[k + 1 : m] or None
                k = m
            if k >= n or s[k] != "}":
                return None
            if hi_digits is not None and _decimal_key(lo_digits) > _decimal_key(hi_digits):
                raise self._error("numbers out of order in {} quantifier", i)
            lo = _bounded_int(lo_digits)
            hi = None if hi_digits is None else _bounded_int(hi_digits)
            i = k + 1
        else:
            return None
        lazy = i < n and s[i] == "?"
        return lo, hi, lazy, i + 1 if lazy else i

    # --- escapes ---

    def _atom_escape(self, k: int) -> tuple[_RxNode, int]:
        s, n = self.s, self.n
        if k >= n:
            raise self._error("\\ at end of pattern", k - 1)
        e = s[k]
        if e in "bB":
            return _Assert(e), k + 1
        if e in "123456789":
            m = k
            while m < n and s[m] in _DEC_DIGITS:
                m += 1
            ref = _Backref(s[k:m], None)
            self.backrefs.append(ref)
            return ref, m
        if e == "k":
            if s[k + 1 : k + 2] != "<":
                raise self._error("invalid named reference", k - 1)
            name, m = self._group_name(k + 2)
            ref = _Backref(None, name)
            self.backrefs.append(ref)
            return ref, m
        if e in "dDsSwW":
            return _Class((_Named(e.lower(), negated=e.isupper()),)), k + 1
        if e in "pP":
            named, m = self._property(k)
            return _Class((named,)), m
        cp, m = self._character_escape(k, in_class=False)
        return _Class((cp,)), m

    def _character_escape(self, k: int, *, in_class: bool) -> tuple[int, int]:
        """``CharacterEscape[+UnicodeMode]`` starting at ``k`` (just after the backslash)."""
        s, n = self.s, self.n
        e = s[k]
        if e in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[e], k + 1
        if e == "c":
            if k + 1 < n and s[k + 1] in _ASCII_LETTERS:
                return ord(s[k + 1]) % 32, k + 2
            raise self._error("invalid control escape \\c", k - 1)
        if e == "0":
            if k + 1 < n and s[k + 1] in _DEC_DIGITS:
                raise self._error("octal escapes are not allowed", k - 1)
            return 0, k + 1
        if e == "x":
            digits = s[k + 1 : k + 3]
            if len(digits) == 2 and all(d in _HEX_DIGITS for d in digits):
                return int(digits, 16), k + 3
            raise self._error("invalid \\x escape", k - 1)
        if e == "u":
            return self._unicode_escape(k + 1)
        if e in _SYNTAX_CHARS or e == "/" or (in_class and e == "-"):
            return ord(e), k + 1
        raise self._error(f"invalid escape \\{e}", k - 1)

    def _unicode_escape(self, k: int) -> tuple[int, int]:
        """``\\u`` escape body starting at ``k`` (just after the 'u'); pairs of surrogate
        escapes combine into one code point, as in Unicode mode."""
        s = self.s
        if s[k : k + 1] == "{":
            end = s.find("}", k + 1)
            digits = s[k + 1 : end] if end > 0 else ""
            if not digits or not all(d in _HEX_DIGITS for d in digits):
                raise self._error("invalid \\u{...} escape", k - 2)
            stripped = digits.lstrip("0")
            if len(stripped) > 6 or int(digits, 16) > _MAX_CP:
                raise self._error("code point out of range in \\u{...}", k - 2)
            return int(digits, 16), end + 1
        digits = s[k : k + 4]
        if len(digits) != 4 or not all(d in _HEX_DIGITS for d in digits):
            raise self._error("invalid \\u escape", k - 2)
        cp = int(digits, 16)
        k += 4
        if 0xD800 <= cp <= 0xDBFF and s[k : k + 2] == "\\u":
            trail = s[k + 2 : k + 6]
            if len(trail) == 4 and all(d in _HEX_DIGITS for d in trail):
                low = int(trail, 16)
                if 0xDC00 <= low <= 0xDFFF:
                    return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), k + 6
        return cp, k

    def _property(self, k: int) -> tuple[_Named, int]:
        """``\\p{...}`` / ``\\P{...}`` starting at ``k`` (the 'p' or 'P')."""
        s = self.s
        negated = s[k] == "P"
        end = s.find("}", k + 2)
        if s[k + 1 : k + 2] != "{" or end < 0:
            raise self._error("invalid property escape", k - 1)
        body = s[k + 2 : end]
        name, eq, value = body.partition("=")
        named: _Named | None = None
        if eq:
            if _PROPERTY_NAME_RE.fullmatch(name) and _PROPERTY_VALUE_RE.fullmatch(value):
                if name in ("General_Category", "gc") and value in _GC_ALIASES:
                    named = _Named("gc", value, negated)
                elif name in ("Script", "sc", "Script_Extensions", "scx") and (value in _SCRIPT_VALUES):
                    named = _Named("sc" if name in ("Script", "sc") else "scx", value, negated)
        elif _PROPERTY_VALUE_RE.fullmatch(body):
            if body in _GC_ALIASES:
                named = _Named("gc", body, negated)
            elif body in _BINARY_PROPERTIES:
                named = _Named("bin", body, negated)
        if named is None:
            raise self._error(f"unknown Unicode property {body!r}", k - 1)
        if not named.supported():
            reason = (
                "Python's unicodedata has no Script property"
                if named.kind in ("sc", "scx")
                else "only Any, ASCII, ASCII_Hex_Digit and Assigned are supported among the binary properties"
            )
            self.unsupported.append(f"property escape {named.describe()} ({reason})")
        return named, end + 1

    # --- character classes ---

    def _class(self, k: int) -> tuple[_Class, int]:
        s, n = self.s, self.n
        start = k - 1
        negated = k < n and s[k] == "^"
        if negated:
            k += 1
        items: list[_ClassItem] = []
        while True:
            if k >= n:
                raise self._error("missing ']'", start)
            if s[k] == "]":
                return _Class(tuple(items), negated), k + 1
            first, k = self._class_atom(k)
            if k + 1 < n and s[k] == "-" and s[k + 1] != "]":
                last, k = self._class_atom(k + 1)
                if not isinstance(first, int) or not isinstance(last, int):
                    raise self._error("character class escape used as a range bound", start)
                if first > last:
                    raise self._error("range out of order in character class", start)
                items.append((first, last))
            else:
                items.append(first)

    def _class_atom(self, k: int) -> tuple[int | _Named, int]:
        s, n = self.s, self.n
        c = s[k]
        if c != "\\":
            return ord(c), k + 1
        k += 1
        if k >= n:
            raise self._error("\\ at end of pattern", k - 1)
        e = s[k]
        if e == "b":
            return 0x08, k + 1
        if e in "dDsSwW":
            return _Named(e.lower(), negated=e.isupper()), k + 1
        if e in "pP":
            return self._property(k)
        return self._character_escape(k, in_class=True)


def _decimal_key(digits: str) -> tuple[int, str]:
    """Order decimal strings by value without converting huge ones to int."""
    stripped = digits.lstrip("0")
    return len(stripped), stripped


def _bounded_int(digits: str) -> int:
    stripped = digits.lstrip("0") or "0"
    return int(stripped) if len(stripped) <= 12 else 10**12


# --- analysis + translation to Python re ---------------------------------------------------


def _py_char(cp: int) -> str:
    if cp < 0x80 and chr(cp).isalnum():
        return chr(cp)
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _py_class(ranges: _Ranges) -> str:
    if not ranges:
        return "(?!)"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _py_char(ranges[0][0])
    body = "".join(_py_char(lo) if lo == hi else f"{_py_char(lo)}-{_py_char(hi)}" for lo, hi in ranges)
    return f"[{body}]"


_LINE_START: Final = r"(?:\A|(?<=[\n\r\u2028\u2029]))"
_LINE_END: Final = r"(?=[\n\r\u2028\u2029]|\Z)"
_ASSERTIONS: Final[Mapping[str, str]] = {
    "^": r"\A",
    "$": r"\Z",  # ECMA '$' without the m flag: end of input only (Python '$' also matches
    "^m": _LINE_START,  # before a final newline)
    "$m": _LINE_END,
    # ECMA IsWordChar is ASCII [A-Za-z0-9_]; spelled out because Python's \B never matches
    # the empty string.
    "b": r"(?:(?<=[0-9A-Z_a-z])(?![0-9A-Z_a-z])|(?<![0-9A-Z_a-z])(?=[0-9A-Z_a-z]))",
    "B": r"(?:(?<=[0-9A-Z_a-z])(?=[0-9A-Z_a-z])|(?<![0-9A-Z_a-z])(?![0-9A-Z_a-z]))",
}


def _children(node: _RxNode) -> list[_RxNode]:
    if isinstance(node, (_Group, _Look)):
        return [child for alt in node.body.alts for child in alt]
    if isinstance(node, _Repeat):
        return [node.body]
    return []


def _walk_rx(root: _Disj) -> Iterator[tuple[_RxNode, tuple[_RxNode, ...]]]:
    """Every node in source order with its ancestors (iterative)."""
    stack: list[tuple[_RxNode, tuple[_RxNode, ...]]] = [
        (node, ()) for alt in reversed(root.alts) for node in reversed(alt)
    ]
    while stack:
        node, ancestors = stack.pop()
        yield node, ancestors
        inner = (*ancestors, node)
        stack.extend((child, inner) for child in reversed(_children(node)))


class _Translator:
    """Checks what cannot be matched faithfully, then emits the Python pattern."""

    def __init__(self, parsed: _RxParse) -> None:
        self.parsed = parsed
        self.problems: list[str] = list(parsed.unsupported)
        self.empty_refs: set[int] = set()  # id() of backreferences that always match ""
        self._chars: dict[int, _Ranges] = {}

    def check(self) -> None:
        order: dict[int, int] = {}
        groups: dict[int, tuple[_Group, tuple[_RxNode, ...]]] = {}
        refs: list[tuple[_Backref, tuple[_RxNode, ...]]] = []
        for position, (node, ancestors) in enumerate(_walk_rx(self.parsed.root)):
            order[id(node)] = position
            if isinstance(node, _Group) and node.index is not None:
                groups[node.index] = (node, ancestors)
            elif isinstance(node, _Backref):
                refs.append((node, ancestors))
            elif isinstance(node, _Repeat):
                if node.lo >= _PY_MAXREPEAT:
                    self.problems.append(f"repetition count {{{node.lo}}} is too large")
                if node.multi:
                    self._check_redos(node)
        for ref, ancestors in refs:
            self._check_backref(ref, ancestors, order, groups)

    def _check_backref(
        self,
        ref: _Backref,
        ancestors: tuple[_RxNode, ...],
        order: Mapping[int, int],
        groups: Mapping[int, tuple[_Group, tuple[_RxNode, ...]]],
    ) -> None:
        if len(ref.indices) != 1:
            self.problems.append(f"backreference \\k<{ref.name}> to a duplicated group name is not supported")
            return
        if any(isinstance(a, _Look) and a.behind for a in ancestors):
            # ECMA-262 matches a lookbehind right to left (so even "forward" references see
            # their group); Python re cannot express that.
            self.problems.append("backreference inside a lookbehind (matched right-to-left)")
            return
        group, group_ancestors = groups[ref.indices[0]]
        inside = set(map(id, ancestors))
        if (
            order[id(group)] > order[id(ref)]  # forward reference: group not yet captured
            or id(group) in inside  # reference inside its own group
            or any(  # group inside a negative lookaround that has succeeded: never captured
                isinstance(a, _Look) and a.negative and id(a) not in inside for a in group_ancestors
            )
        ):
            self.empty_refs.add(id(ref))  # ECMA: a reference to an unset group matches ""
            return
        if any(isinstance(a, _Repeat) and a.multi for a in group_ancestors):
            self.problems.append(
                "backreference to a group inside a repeated expression (ECMA-262 resets the "
                "group on every iteration, Python re does not)"
            )

    # --- ReDoS heuristic ---

    def _chars_of(self, node: _RxNode) -> _Ranges:
        key = id(node)
        if key not in self._chars:
            if isinstance(node, _Class):
                value = node.ranges()
            elif isinstance(node, _Backref):
                value = _ANY_CP
            elif isinstance(node, (_Group, _Repeat)):
                value = _normalize(r for child in _children(node) for r in self._chars_of(child))
            else:  # assertions and lookarounds consume nothing
                value = ()
            self._chars[key] = value
        return self._chars[key]

    @staticmethod
    def _nullable(node: _RxNode) -> bool:
        if isinstance(node, _Class):
            return False
        if isinstance(node, _Group):
            return any(all(_Translator._nullable(t) for t in alt) for alt in node.body.alts)
        if isinstance(node, _Repeat):
            return node.lo == 0 or _Translator._nullable(node.body)
        return True  # assertions, lookarounds, backreferences (may match "")

    def _edge(self, node: _RxNode, *, last: bool) -> _Ranges:
        """Characters that can begin (``last=False``) or end (``last=True``) a match of node."""
        if isinstance(node, _Class):
            return node.ranges()
        if isinstance(node, _Backref):
            return _ANY_CP
        if isinstance(node, _Repeat):
            return self._edge(node.body, last=last)
        if isinstance(node, _Group):
            return _normalize(r for alt in node.body.alts for r in self._seq_edge(alt, last=last))
        return ()  # assertions and lookarounds consume nothing

    def _seq_edge(self, seq: list[_RxNode], *, last: bool) -> _Ranges:
        out: list[_Range] = []
        for term in reversed(seq) if last else seq:
            out.extend(self._edge(term, last=last))
            if not self._nullable(term):
                break
        return _normalize(out)

    def _check_redos(self, loop: _Repeat) -> None:
        """Heuristic refusal of the classic catastrophic-backtracking shapes inside a loop
        (a quantifier whose maximum is > 1):

        * nested quantifier -- an alternative of the loop body contains a quantifier with
          maximum > 1 and no mandatory (non-nullable) term whose characters are disjoint from
          everything those inner quantifiers can match: ``(a+)+``, ``(\\w+\\s?)*``,
          ``(.*a){20}`` are refused, ``(\\.[a-z]+)*`` and ``(\\d{1,3}\\.){3}`` are not;
        * adjacent overlapping quantifiers -- inside the loop body, two quantifiers with
          maximum > 1 separated only by nullable terms, where the last characters of the first
          can be the first characters of the second: ``(-\\d+\\d+)*`` is refused,
          ``([a-z]+(-[a-z]+)*\\.)+`` is not.

        Not a proof of safety: e.g. ``(a|a)*`` or ``\\d+\\d+`` outside a loop pass.
        """
        body = loop.body
        if not isinstance(body, _Group):
            return
        for alt in body.body.alts:
            inner = [
                node
                for term in alt
                for node, _ in _walk_rx(_Disj([[term]]))
                if isinstance(node, _Repeat) and node.multi
            ]
            if not inner:
                continue
            inner_chars = _normalize(r for node in inner for r in self._chars_of(node))
            if not any(
                not self._nullable(term) and _disjoint(self._chars_of(term), inner_chars) for term in alt
            ):
                self.problems.append(
                    "nested quantifier: a repeated group contains a repeated sub-pattern and no "
                    "mandatory delimiter that the sub-pattern cannot match (catastrophic "
                    "backtracking risk, e.g. (a+)+ should be written a+)"
                )
                return
        for alt in self._sequences(body):
            previous: _Ranges | None = None
            for term in alt:
                if isinstance(term, _Repeat) and term.multi:
                    if previous is not None and not _disjoint(previous, self._edge(term, last=False)):
                        self.problems.append(
                            "adjacent overlapping quantifiers inside a repeated group "
                            "(catastrophic backtracking risk, e.g. (-\\d+\\d+)* should be "
                            "written (-\\d{2,})*)"
                        )
                        return
                    previous = self._edge(term, last=True)
                elif not self._nullable(term):
                    previous = None

    @staticmethod
    def _sequences(group: _Group) -> Iterator[list[_RxNode]]:
        yield from group.body.alts
        for node, _ in _walk_rx(group.body):
            if isinstance(node, (_Group, _Look)):
                yield from node.body.alts

    # --- emission ---

    def emit(self) -> str:
        return self._disj(self.parsed.root)

    def _disj(self, disj: _Disj) -> str:
        return "|".join("".join(self._node(node) for node in alt) for alt in disj.alts)

    def _node(self, node: _RxNode) -> str:
        if isinstance(node, _Class):
            return _py_class(node.ranges())
        if isinstance(node, _Assert):
            return _ASSERTIONS[node.kind]
        if isinstance(node, _Group):
            return f"({'' if node.index is not None else '?:'}{self._disj(node.body)})"
        if isinstance(node, _Look):
            kind = ("<" if node.behind else "") + ("!" if node.negative else "=")
            return f"(?{kind}{self._disj(node.body)})"
        if isinstance(node, _Backref):
            if id(node) in self.empty_refs:
                return "(?:)"
            index = node.indices[0]
            return f"(?({index})\\{index})"  # an unset group matches "" (Python would fail)
        lo, hi = node.lo, node.hi
        if hi is not None and hi >= _PY_MAXREPEAT:
            hi = None  # every iteration past the minimum consumes input: same language
        if hi is None:
            count = "*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}"
        elif lo == hi:
            count = f"{{{lo}}}"
        else:
            count = "?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}"
        # Every emitted atom (class, char, group, conditional) is a single Python atom.
        return f"{self._node(node.body)}{count}{'?' if node.lazy else ''}"


def _ecma_syntax_error(source: str) -> str | None:
    """None if ``source`` is a valid ECMA-262 (Unicode mode) pattern, else why not."""
    try:
        _EcmaParser(source).parse()
    except _RegexError as err:
        return err.message
    return None


def _translate_ecma(source: str) -> str:
    """The Python ``re`` source equivalent to ECMA-262 pattern ``source``.

    Raises :class:`_RegexError` (``syntax=True``) for an invalid pattern and (``syntax=False``)
    for a valid one that cannot be matched faithfully or is refused by the ReDoS heuristic."""
    translator = _Translator(_EcmaParser(source).parse())
    try:
        translator.check()
        if translator.problems:
            raise _RegexError("; ".join(dict.fromkeys(translator.problems)), syntax=False)
        return translator.emit()
    except RecursionError:
        raise _RegexError("pattern is too deeply nested", syntax=False) from None


@functools.lru_cache(maxsize=2048)
def _compile_ecma(source: str) -> re.Pattern[str]:
    """Compiled Python pattern with the ECMA-262 semantics of ``source`` (cached: schema
    patterns are translated once, at schema compile time)."""
    translated = _translate_ecma(source)
    try:
        return re.compile(translated)
    except re.error as err:
        reason = "variable-width lookbehind" if "look-behind" in str(err) else f"Python re: {err.msg}"
        raise _RegexError(f"{reason} is not supported", syntax=False) from None
    except (OverflowError, RecursionError, ValueError) as err:
        raise _RegexError(f"pattern too large or too deeply nested ({err})", syntax=False) from None


def _ecma_search(source: str, text: str) -> bool:
    """ECMA-262 ``RegExp(source, "u").test(text)``; a pattern that cannot be compiled never
    matches (fail closed; compile refuses such schemas before they are used)."""
    try:
        compiled = _compile_ecma(source)
    except _RegexError:
        return False
    return compiled.search(text) is not None


def _is_regex(value: object) -> bool:
    """ECMA-262 regular expression (2025 edition, Unicode mode, as JSON Schema patterns): the
    full pattern grammar and its early errors, including valid \\p{...} names."""
    if not isinstance(value, str):
        return True
    return _ecma_syntax_error(value) is None


# --- registry + import-time self test ---------------------------------------------------

_FormatFn = Callable[[object], bool]

_CANDIDATES: dict[str, _FormatFn] = {
    "date": _is_date,
    "date-time": _is_date_time,
    "time": _is_time,
    "duration": _is_duration,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "uuid": _is_uuid,
    "uri": _is_uri,
    "uri-reference": _is_uri_reference,
    "iri": _is_iri,
    "iri-reference": _is_iri_reference,
    "uri-template": _is_uri_template,
    "json-pointer": _is_json_pointer,
    "relative-json-pointer": _is_relative_json_pointer,
    "regex": _is_regex,
}
if _idna is not None:
    _CANDIDATES.update(
        {
            "hostname": _is_hostname,
            "idn-hostname": _is_idn_hostname,
            "email": _is_email,
            "idn-email": _is_idn_email,
        }
    )

# (must accept, must reject) samples. A checker is listed as supported only if it gets all of these
# right in *this* environment: guards against a helper package silently degrading to "accept all".
_SELF_TEST: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "date": (("2026-07-20", "2024-02-29"), ("2026-02-30", "garbage", "2026-07-20\n", "2026-7-20")),
    "date-time": (
        ("2026-07-19T14:00:00+08:00", "1998-12-31T23:59:60Z"),
        ("garbage", "2026-07-19T14:00:00", "2026-02-30T00:00:00Z", "1998-12-31T23:58:60Z"),
    ),
    "time": (("14:00:00+08:00", "23:59:60Z"), ("garbage", "14:00:00", "24:00:00Z")),
    "duration": (("P1D", "PT1H30M", "P2W"), ("garbage", "P", "PT", "P1Y2D")),
    "ipv4": (("192.168.0.1",), ("garbage", "192.168.0.01", "256.1.1.1")),
    "ipv6": (("::1", "2001:db8::1"), ("garbage", "::1%eth0", "12345::")),
    "uuid": (
        ("2eb8aa08-aa98-11ea-b4aa-73b441d16380",),
        ("garbage", "2eb8aa08aa9811eab4aa73b441d16380"),
    ),
    "uri": (("https://example.com/a?b#c",), ("garbage", "/relative", "http://[::ffff:01.2.3.4]")),
    "uri-reference": (("/relative", ""), ("\\\\WINDOWS\\share", "http://a b")),
    "iri": (("http://\u0192\u00f8\u00f8.com/",), ("garbage", "/relative")),
    "iri-reference": (("/\u00e2\u03c0\u03c0",), ("\\\\WINDOWS\\share",)),
    "uri-template": (("/a/{b}{?c*}",), ("{", "{}", "a b")),
    "json-pointer": (("", "/a~1b"), ("a", "/a~2")),
    "relative-json-pointer": (("0", "1/a", "0#"), ("/a", "01", "")),
    "hostname": (("example.com", "xn--9n2bp8q.xn--9t4b11yi5a"), ("-a", "example.", "a_b", "xn--X")),
    "idn-hostname": (
        ("\uc2e4\ub840.\ud14c\uc2a4\ud2b8",),
        ("-a", "example.", "\u302e\uc2e4\ub840"),
    ),
    "email": (("joe.bloggs@example.com",), ("garbage", "@example.com", "a..b@example.com")),
    "idn-email": (
        ("\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8",),
        (
            "garbage",
            "a@",
        ),
    ),
    "regex": (
        ("([abc])+\\s+$", "(?<n>a)\\k<n>", "[^]", "\\p{Letter}", "(?<=a+)b"),
        ("^(abc]", "(?P<n>x)", "\\a", "(?i)abc", "a{2,1}", "\\p{Nope}", "a**"),
    ),
}


def _fail_closed(fn: _FormatFn) -> _FormatFn:
    """Wrap a checker so that an unexpected exception counts as 'does not conform'."""

    def check(value: object) -> bool:
        try:
            return bool(fn(value))
        except Exception:
            return False

    check.__doc__ = fn.__doc__
    return check


def _self_test(name: str, fn: _FormatFn) -> bool:
    good, bad = _SELF_TEST.get(name, ((), ()))
    if not good or not bad:
        return False
    return all(fn(v) for v in good) and not any(fn(v) for v in bad) and fn(12) and fn(None)


_CHECKERS: Final[dict[str, _FormatFn]] = {
    name: _fail_closed(fn) for name, fn in _CANDIDATES.items() if _self_test(name, _fail_closed(fn))
}

SUPPORTED_FORMATS: Final[frozenset[str]] = frozenset(_CHECKERS)
"""Formats this build really asserts. Any other ``format`` in a schema is a load error."""

EXCLUDED_FORMATS: Final[Mapping[str, str]] = {}
"""Formats deliberately not supported, with the reason (see docs/json-schema-conformance.md).
Currently none: ``regex`` is asserted with callgate's own ECMA-262 parser."""


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name, fn in _CHECKERS.items():
        checker.checks(name)(fn)
    return checker


_FORMAT_CHECKER: Final = _format_checker()


# =====================================================================================
# Keywords that evaluate regexes, re-implemented with ECMA-262 matching. python-jsonschema's own
# versions call Python ``re.search`` on the raw pattern (pattern, patternProperties, and the
# patternProperties look-ups inside additionalProperties / unevaluatedProperties).
# =====================================================================================


def _kw_pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _ecma_search(pattern, instance):
        yield ValidationError("string does not match pattern")


def _kw_pattern_properties(
    validator: Any, pattern_properties: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for name, value in instance.items():
            if _ecma_search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _matches_pattern_properties(schema: Mapping[str, Any], name: str) -> bool:
    return any(_ecma_search(pattern, name) for pattern in schema.get("patternProperties", {}))


def _kw_additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = [
        name for name in instance if name not in properties and not _matches_pattern_properties(schema, name)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError("additional properties are not allowed")


def _evaluated_property_keys(validator: Any, instance: Any, schema: Any) -> set[str]:
    """python-jsonschema's ``find_evaluated_property_keys_by_schema`` (4.26) with ECMA-262
    matching for patternProperties."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            keys |= _evaluated_property_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance,
                resolved.contents,
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {
                name
                for name, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            }
    if "patternProperties" in schema:
        keys |= {name for name in instance if _matches_pattern_properties(schema, name)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_property_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                keys |= _evaluated_property_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_property_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_property_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_property_keys(validator, instance, schema["else"])
    return keys


def _kw_unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_property_keys(validator, instance, schema)
    failed = [
        name
        for name in instance
        if name not in evaluated
        and next(validator.descend(instance[name], unevaluated, path=name, schema_path=name), None)
        is not None
    ]
    if failed:
        yield ValidationError("unevaluated properties are not allowed")


_EcmaValidator: Final[Any] = _jsonschema_validators.extend(
    Draft202012Validator,
    {
        "pattern": _kw_pattern,
        "patternProperties": _kw_pattern_properties,
        "additionalProperties": _kw_additional_properties,
        "unevaluatedProperties": _kw_unevaluated_properties,
    },
)
"""Draft 2020-12 validator whose regex keywords use ECMA-262 semantics."""


# =====================================================================================
# Compile-time analysis: $schema, format, $ref
# =====================================================================================

_SCHEMA_VALUED: Final = frozenset(
    {
        "additionalProperties",
        "propertyNames",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
_SCHEMA_ARRAY_VALUED: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAP_VALUED: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})


def _escape(token: object) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _pointer(path: Iterable[object]) -> str:
    """RFC 6901 pointer from a sequence of keys / indexes ("" is the root)."""
    return "".join("/" + _escape(token) for token in path)


def _quote(name: object) -> str:
    text = str(name)
    if len(text) > _MAX_NAME:
        text = text[:_MAX_NAME] + "..."
    return repr(text)


def _spec() -> referencing.Specification[Any]:
    return referencing.jsonschema.DRAFT202012


class _SchemaScan:
    """Walk every subschema reachable from the root, following ``$ref``/``$dynamicRef``.

    Subschemas are found by keyword (``properties`` values, ``items``, ``$defs`` ...), never by
    shape, so a *property named* ``format`` or data inside ``enum``/``const``/``default`` is not
    mistaken for a keyword. Reference targets are walked too (including ones in unknown keywords
    or in registry documents); violations there are reported at the pointer of the root
    document's ``$ref`` that leads to them.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.dialect_violations: list[Violation] = []
        self.ref_violations: list[Violation] = []
        self.format_violations: list[Violation] = []
        self.unsupported_formats: set[str] = set()
        self.regex_violations: list[Violation] = []
        self._seen: set[int] = set()
        # (reference, resolver at its location, pointer in the root document it is reported at)
        self._refs: deque[tuple[str, _Resolver, str]] = deque()

    def run(self, root: Any, resolver: _Resolver) -> None:
        """Scan ``root`` and everything it references."""
        self._walk(root, resolver, origin=None, label="")
        while self._refs:
            ref, ref_resolver, origin = self._refs.popleft()
            try:
                resolved = ref_resolver.lookup(ref)
            except Exception:
                self.ref_violations.append(
                    Violation(
                        pointer=origin,
                        message=f"reference {_quote(ref)} cannot be resolved offline (only the "
                        "schema itself, the official metaschemas and preloaded documents are "
                        "available; nothing is fetched)",
                        keyword=origin.rsplit("/", 1)[-1],
                    )
                )
                continue
            self._walk(resolved.contents, resolved.resolver, origin=origin, label=ref)

    def _walk(self, node: Any, resolver: _Resolver, *, origin: str | None, label: str) -> None:
        stack: list[tuple[Any, str, _Resolver]] = [(node, "", resolver)]
        while stack:
            current, ptr, res = stack.pop()
            if not isinstance(current, Mapping) or id(current) in self._seen:
                continue
            self._seen.add(id(current))
            if isinstance(current.get("$id"), str):
                res = res.in_subresource(_spec().create_resource(current))

            def at(keyword: str) -> str:
                return f"{ptr}/{keyword}" if origin is None else origin  # noqa: B023 (called within this iteration)

            suffix = "" if origin is None else f" (in {_quote(label)} at {_quote(ptr or '/')})"
            schema_uri = current.get("$schema")
            if schema_uri is not None and schema_uri != self.dialect:
                self.dialect_violations.append(
                    Violation(
                        pointer=at("$schema"),
                        message=f"$schema {_quote(schema_uri)} is not the required dialect "
                        f"{self.dialect!r}{suffix}",
                        keyword="$schema",
                    )
                )
            fmt = current.get("format")
            if isinstance(fmt, str) and fmt not in SUPPORTED_FORMATS:
                self.unsupported_formats.add(fmt)
                reason = EXCLUDED_FORMATS.get(fmt, "unknown to this validator")
                self.format_violations.append(
                    Violation(
                        pointer=at("format"),
                        message=f"format {_quote(fmt)} cannot be asserted: {reason}{suffix}",
                        keyword="format",
                    )
                )
            pattern = current.get("pattern")
            if isinstance(pattern, str):
                self._check_regex(pattern, at("pattern"), "pattern", suffix)
            members = current.get("patternProperties")
            if isinstance(members, Mapping):
                for name in members:
                    where = f"{ptr}/patternProperties/{_escape(name)}" if origin is None else origin
                    self._check_regex(str(name), where, "patternProperties", suffix)
            for keyword in ("$ref", "$dynamicRef"):
                ref = current.get(keyword)
                if isinstance(ref, str):
                    self._refs.append((ref, res, at(keyword)))
            for keyword, value in current.items():
                if keyword in _SCHEMA_VALUED:
                    stack.append((value, f"{ptr}/{keyword}", res))
                elif keyword in _SCHEMA_ARRAY_VALUED and isinstance(value, list):
                    for i, sub in enumerate(value):
                        stack.append((sub, f"{ptr}/{keyword}/{i}", res))
                elif keyword in _SCHEMA_MAP_VALUED and isinstance(value, Mapping):
                    for name, sub in value.items():
                        stack.append((sub, f"{ptr}/{_escape(keyword)}/{_escape(name)}", res))

    def _check_regex(self, source: str, pointer: str, keyword: str, suffix: str) -> None:
        """Translate (and cache) a schema regex now, so validation never meets a bad one."""
        try:
            _compile_ecma(source)
        except _RegexError as err:
            what = (
                "is not a valid ECMA-262 regular expression"
                if err.syntax
                else "cannot be matched with ECMA-262 semantics by callgate"
            )
            self.regex_violations.append(
                Violation(
                    pointer=pointer,
                    message=f"regex {_quote(source)} {what}: {err.message}{suffix}",
                    keyword=keyword,
                )
            )


def _rewrite_false_subschemas(root: Any) -> None:
    """Replace ``false`` with the equivalent ``{"not": {}}`` where python-jsonschema would lose
    the instance path.

    python-jsonschema 4.26 ``descend`` returns early for boolean ``false`` before appending the
    path, so ``{"properties": {"a": false}}`` reports its error at the object, not at ``/a``. The
    two schemas accept exactly the same instances; :func:`_leaf_message` reports ``not: {}`` as a
    false schema. Only the (private copy of the) root document is rewritten.
    """
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        for keyword in ("properties", "patternProperties"):
            members = node.get(keyword)
            if isinstance(members, dict):
                for name in [n for n, sub in members.items() if sub is False]:
                    members[name] = {"not": {}}
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            node["prefixItems"] = [{"not": {}} if sub is False else sub for sub in prefix]
        for keyword, value in node.items():
            if keyword in _SCHEMA_VALUED:
                stack.append(value)
            elif keyword in _SCHEMA_ARRAY_VALUED and isinstance(value, list):
                stack.extend(value)
            elif keyword in _SCHEMA_MAP_VALUED and isinstance(value, dict):
                stack.extend(value.values())


def _metaschema_registry() -> referencing.Registry[Any]:
    if _jsonschema_specifications is None:  # pragma: no cover
        return referencing.Registry()
    registry: referencing.Registry[Any] = _jsonschema_specifications.REGISTRY
    return registry


_SPECIFICATIONS: Final = _metaschema_registry()


def _meta_format_checker() -> FormatChecker:
    """python-jsonschema's 2020-12 format checker with ``regex`` replaced by the ECMA-262 one,
    so that every ``pattern`` / ``patternProperties`` name must be a valid ECMA-262 regex."""
    checker = FormatChecker(formats=())
    for name, (fn, raises) in Draft202012Validator.FORMAT_CHECKER.checkers.items():
        checker.checks(name, raises)(fn)
    checker.checks("regex")(_is_regex)
    return checker


_META_VALIDATOR: Final = _EcmaValidator(
    Draft202012Validator.META_SCHEMA,
    format_checker=_meta_format_checker(),
    registry=_SPECIFICATIONS,
)


def _metaschema_violations(schema: Any) -> list[Violation]:
    out = []
    for error in _META_VALIDATOR.iter_errors(schema):
        message = str(error.message)
        path = list(error.absolute_path)
        if error.validator == "format" and error.validator_value == "regex":
            source = str(error.instance)
            message = (
                f"{_quote(source)} is not a valid ECMA-262 regular expression: {_ecma_syntax_error(source)}"
            )
            if path and path[-1] == "patternProperties":  # reported by propertyNames
                path.append(source)
        if len(message) > 200:
            message = message[:200] + "..."
        out.append(
            Violation(
                pointer=_pointer(path),
                message=message,
                keyword=str(error.validator or ""),
            )
        )
    return sorted(set(out), key=lambda v: (v.pointer, v.keyword, v.message))


# =====================================================================================
# Error -> safe Violation mapping
# =====================================================================================


def _plural(n: object, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _leaf_message(keyword: str | None, expected: Any) -> str:
    """Message for one failing keyword, from the keyword and the schema value only."""
    if keyword is None or (keyword == "not" and expected == {}):
        return "no value is allowed here (false schema)"
    if keyword == "items" and expected is False:
        return "array has more items than prefixItems allows"
    if keyword == "type":
        types = [expected] if isinstance(expected, str) else list(expected)
        return "expected type " + " or ".join(str(t) for t in types)
    simple: dict[str, str] = {
        "enum": "value not in enum",
        "const": "value does not equal const",
        "uniqueItems": "array items are not unique",
        "not": "value must not match the 'not' schema",
        "contains": "array does not contain an item matching 'contains'",
        "unevaluatedItems": "array has items not allowed by unevaluatedItems",
        "unevaluatedProperties": "object has properties not allowed by unevaluatedProperties",
        "additionalProperties": "additional properties are not allowed",
    }
    if keyword in simple:
        return simple[keyword]
    bounded: dict[str, str] = {
        "minLength": "string shorter than minLength {}",
        "maxLength": "string longer than maxLength {}",
        "minimum": "number less than minimum {}",
        "maximum": "number greater than maximum {}",
        "exclusiveMinimum": "number not greater than exclusiveMinimum {}",
        "exclusiveMaximum": "number not less than exclusiveMaximum {}",
        "multipleOf": "number is not a multiple of {}",
        "minItems": "array has fewer items than minItems {}",
        "maxItems": "array has more items than maxItems {}",
        "minProperties": "object has fewer properties than minProperties {}",
        "maxProperties": "object has more properties than maxProperties {}",
        "minContains": "array has fewer items matching 'contains' than minContains {}",
        "maxContains": "array has more items matching 'contains' than maxContains {}",
    }
    if keyword in bounded:
        return bounded[keyword].format(expected)
    if keyword == "pattern":
        return f"string does not match pattern {_quote(expected)}"
    if keyword == "format":
        return f"value does not match format {_quote(expected)}"
    return f"value fails {_quote(keyword)}"


class _Mapper:
    """Turn python-jsonschema errors into sorted, de-duplicated, value-free violations."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def _value_at(self, path: Iterable[object]) -> tuple[bool, Any]:
        node = self.root
        for token in path:
            try:
                node = node[token]  # dict key or list index
            except (KeyError, IndexError, TypeError):
                return False, None
        return True, node

    def violations(self, error: ValidationError) -> list[Violation]:
        path = list(error.absolute_path)
        pointer = _pointer(path)
        keyword: str | None = error.validator
        expected = error.validator_value
        instance = error.instance

        found, value_here = self._value_at(path)
        if found and isinstance(value_here, Mapping) and isinstance(instance, str) and instance in value_here:
            # Only propertyNames evaluates an instance (a key) that is not at error.path.
            leaf = self._describe(error, keyword, expected, instance, pointer)
            return [
                Violation(
                    pointer=f"{pointer}/{_escape(instance)}",
                    message=f"property name {_quote(instance)} is invalid: {leaf.message}",
                    keyword="propertyNames",
                )
            ]
        if keyword == "required" and isinstance(instance, Mapping):
            return [
                Violation(
                    pointer=pointer, message=f"missing required property {_quote(name)}", keyword="required"
                )
                for name in expected
                if name not in instance
            ]
        if keyword == "dependentRequired" and isinstance(instance, Mapping):
            return [
                Violation(
                    pointer=pointer,
                    message=f"property {_quote(prop)} requires property {_quote(dep)}",
                    keyword="dependentRequired",
                )
                for prop, deps in expected.items()
                if prop in instance
                for dep in deps
                if dep not in instance
            ]
        if keyword == "additionalProperties" and isinstance(instance, Mapping):
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            props = schema.get("properties", {})
            patterns = schema.get("patternProperties", {})
            extras = [
                name
                for name in instance
                if name not in props and not any(_ecma_search(p, name) for p in patterns)
            ]
            if extras:
                return [
                    Violation(
                        pointer=f"{pointer}/{_escape(name)}",
                        message=f"additional property {_quote(name)} is not allowed",
                        keyword="additionalProperties",
                    )
                    for name in extras
                ]
        return [self._describe(error, keyword, expected, instance, pointer)]

    def _describe(
        self,
        error: ValidationError,
        keyword: str | None,
        expected: Any,
        instance: Any,
        pointer: str,
    ) -> Violation:
        if keyword in ("anyOf", "oneOf"):
            if not error.context:
                return Violation(
                    pointer=pointer,
                    message=f"value matches more than one alternative of {keyword}",
                    keyword=keyword,
                )
            message = f"value does not match any alternative of {keyword}"
            # best_match descends into the context the way python-jsonschema intends (deepest,
            # type-matching alternative first); it returns the error itself when ambiguous.
            closest = best_match([error])
            if closest is not None and closest is not error:
                hints = self.violations(closest)
                if hints:
                    hint = hints[0]
                    where = hint.pointer if hint.pointer else "the root"
                    message += f" (closest alternative: {hint.message} at {where})"
            return Violation(pointer=pointer, message=message, keyword=keyword)
        message = _leaf_message(keyword, expected)
        if keyword is None or (keyword == "not" and expected == {}):
            keyword = "false"
        return Violation(pointer=pointer, message=message, keyword=keyword)


def _sorted(violations: Iterable[Violation]) -> list[Violation]:
    return sorted(set(violations), key=lambda v: (v.pointer, v.keyword, v.message))


# =====================================================================================
# Public API
# =====================================================================================


class CompiledSchema:
    """A JSON Schema 2020-12 document checked, resolved and compiled once, ready to validate.

    Build with :meth:`compile`; instances are immutable and safe to share between threads
    (python-jsonschema validators keep no per-call state).
    """

    __slots__ = ("_schema", "_source", "_validator", "_fast")

    def __init__(self, *, schema: Any, source: str, validator: Any) -> None:
        """Private: use :meth:`compile`."""
        self._schema = schema
        self._source = source
        self._validator = validator
        self._fast = compile_check(schema, regex=_compile_ecma, format_conforms=_FORMAT_CHECKER.conforms)
        """Exact yes/no check when the schema is in the fast subset (:mod:`.fastcheck`)."""

    @property
    def has_fast_path(self) -> bool:
        """True when valid instances are confirmed by the compiled check alone."""
        return self._fast is not None

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any] | bool,
        *,
        source: str = "",
        dialect: str = DIALECT_2020_12,
        registry: referencing.Registry[Any] | None = None,
    ) -> CompiledSchema:
        """Check ``schema`` and build its validator.

        Raises :class:`LoadError` with ``ErrorCode.TOOLSPEC_INVALID`` if ``dialect`` is not
        2020-12, if any ``$schema`` differs from it, if the schema fails the 2020-12 metaschema
        (which includes "every pattern is a valid ECMA-262 regex"), if a ``$ref``/``$dynamicRef``
        cannot be resolved offline, or if a ``pattern`` / ``patternProperties`` regex anywhere
        reachable cannot be matched with ECMA-262 semantics (see the module docstring); with
        ``ErrorCode.UNSUPPORTED_FORMAT`` if any ``format`` reachable from the schema is not in
        :data:`SUPPORTED_FORMATS`.

        ``registry`` may preload further documents (e.g. remotes in tests). It is used as given;
        callgate never adds a retrieval function, so no reference ever triggers I/O.
        ``source`` (``file:line``) is copied into every :class:`LoadError`.
        """

        if dialect != DIALECT_2020_12:
            raise toolspec_invalid(
                f"unsupported dialect {dialect!r}; only {DIALECT_2020_12!r} is supported",
                source=source,
                violations=[Violation(pointer="", message="unsupported dialect", keyword="$schema")],
            )
        if not isinstance(schema, (Mapping, bool)):
            raise toolspec_invalid(
                "schema must be a JSON object or boolean",
                source=source,
                violations=[Violation(pointer="", message="schema must be an object", keyword="type")],
            )
        schema_copy: Any = copy.deepcopy(dict(schema) if isinstance(schema, Mapping) else schema)

        scan = _SchemaScan(dialect)
        if isinstance(schema_copy, dict):
            top = schema_copy.get("$schema")
            if top is not None and top != dialect:
                raise toolspec_invalid(
                    f"$schema {_quote(top)} does not match the required dialect {dialect!r}",
                    source=source,
                    violations=[Violation(pointer="/$schema", message="wrong dialect", keyword="$schema")],
                )

        meta = _metaschema_violations(schema_copy)
        if meta:
            raise toolspec_invalid(
                f"schema is not valid JSON Schema 2020-12 ({_plural(len(meta), 'problem')})",
                source=source,
                violations=meta,
            )

        _rewrite_false_subschemas(schema_copy)
        base = registry if registry is not None else referencing.Registry()
        combined: referencing.Registry[Any] = base.combine(_SPECIFICATIONS)
        resource = _spec().create_resource(schema_copy)
        scan.run(schema_copy, combined.resolver_with_root(resource))
        if scan.dialect_violations:
            raise toolspec_invalid(
                "embedded or referenced schema declares another dialect",
                source=source,
                violations=_sorted(scan.dialect_violations),
            )
        if scan.ref_violations:
            raise toolspec_invalid(
                f"unresolvable reference ({_plural(len(scan.ref_violations), 'problem')})",
                source=source,
                violations=_sorted(scan.ref_violations),
            )
        if scan.regex_violations:
            raise toolspec_invalid(
                "regular expression refused "
                f"({_plural(len(scan.regex_violations), 'problem')}); patterns are matched with "
                "ECMA-262 semantics, see docs/json-schema-conformance.md",
                source=source,
                violations=_sorted(scan.regex_violations),
            )
        if scan.format_violations:
            names = ", ".join(_quote(n) for n in sorted(scan.unsupported_formats))
            raise unsupported_format(
                f"format(s) not supported for assertion: {names} (supported: "
                f"{', '.join(sorted(SUPPORTED_FORMATS))})",
                source=source,
                violations=_sorted(scan.format_violations),
            )

        validator = _EcmaValidator(schema_copy, registry=combined, format_checker=_FORMAT_CHECKER)
        return cls(schema=schema_copy, source=source, validator=validator)

    # --- validation -------------------------------------------------------------------

    def validate_value(self, value: Any) -> list[Violation]:
        """Validate a JSON value; return every violation sorted by (pointer, keyword).

        An empty list means valid.

        Fails closed: a reference that cannot be resolved at run time or a recursion overflow is
        reported as a violation rather than passing the value.
        """
        fast = self._fast
        if fast is not None:
            try:
                if fast(value):
                    return []
            except RecursionError:
                pass  # the full validator reports it
        mapper = _Mapper(value)
        out: list[Violation] = []
        try:
            for error in self._validator.iter_errors(value):
                out.extend(mapper.violations(error))
        except referencing.exceptions.Unresolvable:
            out.append(
                Violation(pointer="", message="schema reference could not be resolved", keyword="$ref")
            )
        except RecursionError:
            out.append(Violation(pointer="", message="validation exceeded the nesting limit", keyword=""))
        return _sorted(out)

    def validate(self, parsed: ParsedArguments) -> ValidatedArguments:
        """Validate parsed arguments.

        Raises :class:`RejectedError` (``SCHEMA_VIOLATION``) listing every violation; otherwise
        returns :class:`ValidatedArguments` recording dialect, validator, version and format
        assertion."""
        violations = self.validate_value(parsed.value)
        if violations:
            raise schema_violation(
                f"arguments do not match the tool schema ({_plural(len(violations), 'violation')})",
                violations,
            )
        return ValidatedArguments(
            value=parsed.value,
            dialect=DIALECT_2020_12,
            validator=VALIDATOR_NAME,
            validator_version=VALIDATOR_VERSION,
            format_assertion=True,
        )

    # --- recorded facts -----------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """The dialect this schema is bound to (always :data:`DIALECT_2020_12`)."""
        return DIALECT_2020_12

    @property
    def validator_name(self) -> str:
        """``"python-jsonschema"``."""
        return VALIDATOR_NAME

    @property
    def validator_version(self) -> str:
        """Installed python-jsonschema version."""
        return VALIDATOR_VERSION

    @property
    def format_assertion(self) -> bool:
        """Always ``True``: ``format`` is asserted (spec 6.4, 6.14)."""
        return True

    @property
    def source(self) -> str:
        """Where the schema came from (``file:line``), as passed to :meth:`compile`."""
        return self._source
