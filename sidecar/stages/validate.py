"""Schema validation stage (spec 6.4 layer 2): JSON Schema 2020-12 with format assertion ON.

``ParsedArguments --validate--> ValidatedArguments``

Validation is bound to exactly one dialect (:data:`DIALECT_2020_12`) and one validator
(python-jsonschema, version recorded on every :class:`~sidecar.model.ValidatedArguments`), with
``format`` *asserted*, not treated as an annotation (spec 6.14 row 3: ``format: date`` must not be
silently unchecked).

Design points:

* **Compile once.** :meth:`CompiledSchema.compile` checks the schema against the 2020-12
  metaschema, checks every ``$schema``, resolves every ``$ref`` / ``$dynamicRef`` and scans every
  ``format`` keyword, then builds the ``Draft202012Validator``. :meth:`CompiledSchema.validate`
  only runs that validator.
* **Formats are asserted or refused.** Only the formats in :data:`SUPPORTED_FORMATS` are accepted
  in a schema; any other ``format`` (including ones python-jsonschema knows but checks wrongly,
  see :data:`EXCLUDED_FORMATS`) is a :class:`~sidecar.errors.LoadError` with
  ``ErrorCode.UNSUPPORTED_FORMAT``. The checkers are this module's own (RFC-based, verified against
  the official JSON-Schema-Test-Suite ``optional/format`` files by ``tests/test_validate.py``) and
  are self-tested at import time: a checker that does not reject its known-bad samples is not
  listed as supported.
* **No network, ever.** ``$ref`` resolves only inside the schema document, the official
  metaschemas and an explicitly passed :class:`referencing.Registry`. The registry never
  retrieves; an unknown remote URI is a load error.
* **Safe messages.** Violation messages are built from the failing keyword and the *schema* side
  only (plus property *names*); instance values never appear, because arguments may carry
  secrets or model-controlled text.
"""

from __future__ import annotations

import copy
import importlib
import ipaddress
import re
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, best_match

from sidecar.errors import ErrorCode, LoadError, RejectedError, Violation
from sidecar.model import ParsedArguments, ValidatedArguments

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
    "idn-email": (("\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8",), ("garbage", "a@",)),
}


def _fail_closed(fn: _FormatFn) -> _FormatFn:
    """Wrap a checker so that an unexpected exception counts as 'does not conform'."""

    def check(value: object) -> bool:
        try:
            return bool(fn(value))
        except Exception:  # noqa: BLE001 - fail closed on checker bugs
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

EXCLUDED_FORMATS: Final[Mapping[str, str]] = {
    "regex": (
        "the validator compiles regexes with Python `re`, not ECMA-262: it accepts Python-only "
        "syntax such as (?P<n>...) and (?i) and rejects valid ECMA-262 such as (?<n>...), \\k<n>, "
        "[^] and \\cA (fails all 12 cases of optional/format/ecmascript-regex.json)"
    ),
}
"""Formats deliberately not supported, with the reason (see docs/json-schema-conformance.md)."""


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name, fn in _CHECKERS.items():
        checker.checks(name)(fn)
    return checker


_FORMAT_CHECKER: Final = _format_checker()


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
_SCHEMA_MAP_VALUED: Final = frozenset(
    {"properties", "patternProperties", "$defs", "dependentSchemas"}
)


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
            except Exception:  # noqa: BLE001 - any failure to resolve is a load error
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

    def _walk(
        self, node: Any, resolver: _Resolver, *, origin: str | None, label: str
    ) -> None:
        stack: list[tuple[Any, str, _Resolver]] = [(node, "", resolver)]
        while stack:
            current, ptr, res = stack.pop()
            if not isinstance(current, Mapping) or id(current) in self._seen:
                continue
            self._seen.add(id(current))
            if isinstance(current.get("$id"), str):
                res = res.in_subresource(_spec().create_resource(current))

            def at(keyword: str) -> str:
                return f"{ptr}/{keyword}" if origin is None else origin

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
_META_VALIDATOR: Final = Draft202012Validator(
    Draft202012Validator.META_SCHEMA,
    format_checker=Draft202012Validator.FORMAT_CHECKER,
    registry=_SPECIFICATIONS,
)


def _metaschema_violations(schema: Any) -> list[Violation]:
    out = []
    for error in _META_VALIDATOR.iter_errors(schema):
        message = str(error.message)
        if len(message) > 200:
            message = message[:200] + "..."
        out.append(
            Violation(
                pointer=_pointer(error.absolute_path),
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
        if (
            found
            and isinstance(value_here, Mapping)
            and isinstance(instance, str)
            and instance in value_here
        ):
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
                Violation(pointer=pointer, message=f"missing required property {_quote(name)}",
                          keyword="required")
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
                if name not in props and not any(re.search(p, name) for p in patterns)
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

    __slots__ = ("_schema", "_source", "_validator")

    def __init__(self, *, schema: Any, source: str, validator: Any) -> None:
        """Private: use :meth:`compile`."""
        self._schema = schema
        self._source = source
        self._validator = validator

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
        2020-12, if any ``$schema`` differs from it, if the schema fails the 2020-12 metaschema or
        if a ``$ref``/``$dynamicRef`` cannot be resolved offline; with
        ``ErrorCode.UNSUPPORTED_FORMAT`` if any ``format`` reachable from the schema is not in
        :data:`SUPPORTED_FORMATS`.

        ``registry`` may preload further documents (e.g. remotes in tests). It is used as given;
        callgate never adds a retrieval function, so no reference ever triggers I/O.
        ``source`` (``file:line``) is copied into every :class:`LoadError`.
        """

        def fail(code: ErrorCode, message: str, violations: Sequence[Violation]) -> LoadError:
            return LoadError(code=code, message=message, source=source, violations=violations)

        if dialect != DIALECT_2020_12:
            raise fail(
                ErrorCode.TOOLSPEC_INVALID,
                f"unsupported dialect {dialect!r}; only {DIALECT_2020_12!r} is supported",
                [Violation(pointer="", message="unsupported dialect", keyword="$schema")],
            )
        if not isinstance(schema, (Mapping, bool)):
            raise fail(
                ErrorCode.TOOLSPEC_INVALID,
                "schema must be a JSON object or boolean",
                [Violation(pointer="", message="schema must be an object", keyword="type")],
            )
        schema_copy: Any = copy.deepcopy(dict(schema) if isinstance(schema, Mapping) else schema)

        scan = _SchemaScan(dialect)
        if isinstance(schema_copy, dict):
            top = schema_copy.get("$schema")
            if top is not None and top != dialect:
                raise fail(
                    ErrorCode.TOOLSPEC_INVALID,
                    f"$schema {_quote(top)} does not match the required dialect {dialect!r}",
                    [Violation(pointer="/$schema", message="wrong dialect", keyword="$schema")],
                )

        meta = _metaschema_violations(schema_copy)
        if meta:
            raise fail(
                ErrorCode.TOOLSPEC_INVALID,
                f"schema is not valid JSON Schema 2020-12 ({_plural(len(meta), 'problem')})",
                meta,
            )

        _rewrite_false_subschemas(schema_copy)
        base = registry if registry is not None else referencing.Registry()
        combined: referencing.Registry[Any] = base.combine(_SPECIFICATIONS)
        resource = _spec().create_resource(schema_copy)
        scan.run(schema_copy, combined.resolver_with_root(resource))
        if scan.dialect_violations:
            raise fail(
                ErrorCode.TOOLSPEC_INVALID,
                "embedded or referenced schema declares another dialect",
                _sorted(scan.dialect_violations),
            )
        if scan.ref_violations:
            raise fail(
                ErrorCode.TOOLSPEC_INVALID,
                f"unresolvable reference ({_plural(len(scan.ref_violations), 'problem')})",
                _sorted(scan.ref_violations),
            )
        if scan.format_violations:
            names = ", ".join(_quote(n) for n in sorted(scan.unsupported_formats))
            raise fail(
                ErrorCode.UNSUPPORTED_FORMAT,
                f"format(s) not supported for assertion: {names} (supported: "
                f"{', '.join(sorted(SUPPORTED_FORMATS))})",
                _sorted(scan.format_violations),
            )

        validator = Draft202012Validator(
            schema_copy, registry=combined, format_checker=_FORMAT_CHECKER
        )
        return cls(schema=schema_copy, source=source, validator=validator)

    # --- validation -------------------------------------------------------------------

    def validate_value(self, value: Any) -> list[Violation]:
        """Validate a JSON value; return every violation sorted by (pointer, keyword).

        An empty list means valid.

        Fails closed: a reference that cannot be resolved at run time or a recursion overflow is
        reported as a violation rather than passing the value.
        """
        mapper = _Mapper(value)
        out: list[Violation] = []
        try:
            for error in self._validator.iter_errors(value):
                out.extend(mapper.violations(error))
        except referencing.exceptions.Unresolvable:
            out.append(Violation(pointer="", message="schema reference could not be resolved",
                                 keyword="$ref"))
        except RecursionError:
            out.append(Violation(pointer="", message="validation exceeded the nesting limit",
                                 keyword=""))
        return _sorted(out)

    def validate(self, parsed: ParsedArguments) -> ValidatedArguments:
        """Validate parsed arguments.

        Raises :class:`RejectedError` (``SCHEMA_VIOLATION``) listing every violation; otherwise
        returns :class:`ValidatedArguments` recording dialect, validator, version and format
        assertion."""
        violations = self.validate_value(parsed.value)
        if violations:
            raise RejectedError(
                code=ErrorCode.SCHEMA_VIOLATION,
                message="arguments do not match the tool schema "
                f"({_plural(len(violations), 'violation')})",
                violations=violations,
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
