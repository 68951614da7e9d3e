"""Format checkers (format assertion ON, spec 6.4 layer 2 and 6.14 row 3).

Each checker takes any JSON value and returns True for non-strings (formats only constrain
strings) and for strings that conform. They never raise (wrapped fail-closed below). The checkers
are this module's own (RFC-based, verified against the official JSON-Schema-Test-Suite
``optional/format`` files by ``tests/test_validate.py``) and are self-tested at import time: a
checker that does not reject its known-bad samples is not listed in :data:`SUPPORTED_FORMATS`.
Format ``regex`` is the ECMA-262 grammar check of :mod:`.ecma262`.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Final

from jsonschema import FormatChecker

from callgate.arguments.validate.ecma262 import ecma_syntax_error

_idna: ModuleType | None
try:  # idna is a dependency of jsonschema[format-nongpl]; without it hostname formats drop out.
    import idna as _idna
except ImportError:  # pragma: no cover - exercised only in broken environments
    _idna = None

__all__ = ["EXCLUDED_FORMATS", "FORMAT_CHECKER", "SUPPORTED_FORMATS", "is_regex"]


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


def is_regex(value: object) -> bool:
    """ECMA-262 regular expression (2025 edition, Unicode mode, as JSON Schema patterns): the
    full pattern grammar and its early errors, including valid \\p{...} names."""
    if not isinstance(value, str):
        return True
    return ecma_syntax_error(value) is None


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
    "regex": is_regex,
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


FORMAT_CHECKER: Final = _format_checker()
