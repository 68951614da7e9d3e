"""Redaction of secrets in text and JSON values before they reach a model (spec 6.10).

Spec 6.10 lists, among what a runtime must settle before a tool result goes back into the model's
context, "结果中的秘密、个人数据和凭证在回填前如何过滤" (how secrets, personal data and credentials
in the result are filtered before it is fed back). A :class:`Redactor` is built once (at load /
reload) from two sources and is immutable afterwards:

**Known secrets** (the upstream credentials the sidecar itself holds). Every occurrence is replaced
by ``[REDACTED:<name>]``, and not only the literal value: the redactor also looks for the common
encodings a tool or an upstream error message may echo a credential in:

============================  ====================================================================
form                          variants
============================  ====================================================================
literal text                  the secret as text (when its bytes are UTF-8), in any letter case
                              (matching ignores case: lower-, upper-, title- or mixed-cased
                              echoes are caught; ``casefold`` forms such as ``ß`` -> ``ss`` too)
JSON-escaped                  ``json.dumps`` with and without ``ensure_ascii``, and with ``\\/``;
                              and any other mix of legal JSON escapes (below)
HTML-escaped                  ``html.escape`` with and without quotes, ``&#x27;`` and ``&#39;``;
                              and any mix of character references per character (below)
URL-encoded                   ``quote``/``quote_plus`` with ``safe=""`` and ``safe="/"``, upper- and
                              lower-case ``%xx``; and any mix of percent-escaped and plain
                              characters (below)
hex                           lower and upper case
base64                        standard and URL-safe alphabets, at the three byte alignments the
                              secret can have inside a larger encoded blob (so ``base64("user:" +
                              secret)`` is caught too); the characters that depend only on the
                              secret's bytes are matched, which covers padded and unpadded forms.
                              The URL-encoded form of the standard alphabet is included.
============================  ====================================================================

**Behind JSON escapes, HTML references and percent-escapes.** A tool result is often JSON text
inside a string (an HTTP body, a document), an HTML page or a URL: the secret can be spelled there
with any legal JSON escape per character (``s\\u006b-\\u0061...``, upper- or lower-case hex,
``\\/``, a surrogate pair, one document inside another), with HTML character references mixed in
(``&#115;k-...``, ``&#x73;``, ``&amp;`` for a ``&`` of the secret, the ``;`` optional as HTML5
reads them) or with some characters percent-escaped (``s%6B-...``, UTF-8 bytes, twice-encoded
``%256B``). A text holding a backslash, ``&`` or ``%`` is therefore also read with those decoded:
in each round its JSON escapes, then its HTML references, then its percent-escapes (each kind only
when its first character is there), up to :data:`MAX_UNESCAPE_LEVELS` rounds; a known secret form
or a pattern match found in a decoded text is mapped back to the characters it decodes from, and
those are replaced (the text around stays valid JSON, HTML or URL). The presence checks read the
decoded texts too (:meth:`Redactor.contains_known_form` is the as-written check alone), so the
encoder's check of the redacted strings withholds what redaction could not take out.

Occurrences may overlap (two secrets sharing characters); the union of all occurrence spans is
redacted, so no fragment of either survives. A secret shorter than ``min_secret_length``
characters (default 8) is *refused* with :class:`ValueError` rather than silently skipped: a short
value would redact ordinary words, and silently ignoring a configured secret would be worse. At
the edges of a base64 occurrence up to two characters carrying at most 4 bits of the secret each
may remain (they also depend on the neighbouring bytes).

**Configured patterns** (:class:`SecretPattern`): regular expressions for credential formats the
sidecar does not hold itself, e.g. API keys of other services that a web page or a log excerpt
contains. :data:`DEFAULT_PATTERNS` is a small, high-precision list (see there). Patterns are
compiled with ``re.MULTILINE``; they must not use global inline flags (use scoped ``(?i:...)``)
and should start with a literal (a literal prefix lets ``re`` skip ahead with a fast search,
which is what keeps scanning cheap).

What this cannot catch (see ``docs/RESULT-ENCODING.md``): paraphrased, re-typed, translated, split
(``"sk-abc" + "def"``), reversed, compressed or encrypted secrets, other encodings (base32,
UTF-16, gzip+base64 ...), and credential formats nobody configured. Known secrets are matched
exactly but for letter case (case-insensitive everywhere: a base64 or hex text that differs from a
secret's form only in case is redacted too, a false positive at 8 or more characters that costs
nothing); patterns are heuristics. Redaction reduces exposure, it does not prove
absence; the encoder therefore also re-checks its final bytes for known secrets
(:meth:`Redactor.contains_known_secret`).

Matching cost: known secrets are compiled into one regular expression shaped like a trie
(alternatives factored by common prefix, longer continuations tried first, so the match at a
position is the longest secret form there), used to find occurrences; whether a text contains any
form at all is answered by C substring search per form up to :data:`SCAN_FORMS_LIMIT` forms
(faster for the handful of credentials a sidecar holds), by the trie regex above that. Patterns are
searched one by one. Callers with many strings should first ask the cheap presence questions on
the strings joined together (one scan) and redact string by string only when one says yes;
:func:`callgate.execute.encode.encode_result` does exactly that.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from html.entities import html5 as _HTML5
from typing import Any, cast

from callgate.client.resultforms import (
    DEFAULT_MIN_SECRET_LENGTH,
    holds_secret,
    part_data,
    part_views,
    secret_forms,
    withheld_note,
)
from callgate.client.visible import mask_mark

__all__ = [
    "DEFAULT_MIN_SECRET_LENGTH",
    "DEFAULT_PATTERNS",
    "PATTERNS_ONLY",
    "Redactor",
    "SCAN_FORMS_LIMIT",
    "SecretPattern",
    "holds_secret",
    "marker",
    "mask_mark",
    "secret_forms",
    "unique_keys",
    "withheld_note",
]


MAX_UNESCAPE_LEVELS = 4
"""How many rounds of decoding the redactor reads a text behind (a JSON document inside a string
inside a JSON document ..., an HTML reference to an ``&``, a percent-escaped ``%`` are one level
each); a round decodes JSON escapes, then HTML references, then percent-escapes."""

_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _c1(num: int) -> str:
    try:
        return bytes([num]).decode("cp1252")
    except UnicodeDecodeError:  # the five bytes Windows-1252 leaves undefined: themselves
        return chr(num)


_C1_REFS = {num: _c1(num) for num in range(0x80, 0xA0)}
"""``&#128;`` .. ``&#159;`` as HTML5 reads them (Windows-1252, as ``html.unescape``)."""

_URLSAFE_B64 = re.compile(r"[A-Za-z0-9_\-]+={0,2}")
"""URL-safe base64 text (``part_data`` reads the standard alphabet only)."""

PATTERN_TEXT_MAX = 1024
"""Base64 text of a result part up to this length is also searched as text by the patterns
(:meth:`Redactor.part_matches_pattern`); longer base64 only as the bytes it stands for."""

SCAN_FORMS_LIMIT = 512
"""Up to this many secret forms, presence is tested with ``in`` per form; above, with one regex."""

MAX_JSON_DEPTH = 256
"""Deepest JSON value :meth:`Redactor.redact_json` walks (deeper input raises ``ValueError``)."""

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")


def marker(name: str) -> str:
    """The replacement text for a redacted occurrence: ``[REDACTED:<name>]``."""
    return f"[REDACTED:{name}]"


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """A configured credential format: a regular expression and the name shown in its marker."""

    name: str
    """Shown as ``[REDACTED:<name>]``; ``[A-Za-z0-9_.-]{1,64}``."""
    regex: str
    """Python regular expression, compiled with ``re.MULTILINE``; no global inline flags."""
    group: int = 0
    """The group that is the secret (0 = the whole match). With a group, the rest of the match
    (e.g. the word ``Bearer`` or the ``://`` and ``@`` around URL credentials) is kept."""


DEFAULT_PATTERNS: tuple[SecretPattern, ...] = (
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-api03-...
    SecretPattern("api_key", r"sk-[A-Za-z0-9_\-]{20,}"),
    # AWS access key ids (long-term AKIA, temporary ASIA).
    SecretPattern("aws_access_key_id", r"A[KS]IA[0-9A-Z]{16}(?![0-9A-Z])"),
    # AWS secret access keys only next to their name (40 base64 chars alone are too common).
    SecretPattern(
        "aws_secret_access_key", r"ecret_?[Aa]ccess_?[Kk]ey[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})", 1
    ),
    SecretPattern(
        "aws_secret_access_key", r"ECRET_?ACCESS_?KEY[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})", 1
    ),
    # GitHub personal access / OAuth / app tokens and fine-grained PATs.
    SecretPattern("github_token", r"g(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})"),
    # Slack tokens.
    SecretPattern("slack_token", r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    # Google API keys.
    SecretPattern("google_api_key", r"AIza[0-9A-Za-z_\-]{35}"),
    # Stripe secret/restricted keys (sk_/rk_; the leading letter stays, it carries no secret).
    SecretPattern("stripe_key", r"k_(?:live|test)_[0-9A-Za-z]{16,}"),
    # HTTP bearer tokens ("Bearer" / "bearer" / "BEARER"; the word stays).
    SecretPattern("bearer_token", r"earer[ \t]+([A-Za-z0-9._~+/\-]{16,}=*)", 1),
    SecretPattern("bearer_token", r"EARER[ \t]+([A-Za-z0-9._~+/\-]{16,}=*)", 1),
    # JSON Web Tokens (header.payload.signature, both first parts JSON objects).
    SecretPattern("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
    # PEM private keys; without an END line everything after BEGIN is redacted.
    SecretPattern(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*)",
    ),
    # user:password@ in URLs (scheme://user:pass@host).
    SecretPattern("url_credentials", r"://([^/\s:@]+:[^/\s@]+)@", 1),
)
"""The default configured patterns (high precision, literal-prefixed so scanning stays cheap)."""


# --------------------------------------------------------------------------------------------
# Forms of a known secret


# --------------------------------------------------------------------------------------------
# One regular expression for many literals


def _trie_regex(words: Iterable[str]) -> str:
    """A regex matching any of ``words``; at a given start it matches the longest one.

    The alternation is factored by common prefixes (a trie), continuations are tried before
    ending, single-child chains are emitted as one literal. Recursion happens only at branching
    nodes, so its depth is bounded by the number of words sharing prefixes, not by their length.
    """
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        parts: list[str] = []
        for ch in sorted(k for k in node if k):
            chunk = [re.escape(ch)]
            child: dict[str, Any] = node[ch]
            while len(child) == 1 and "" not in child:
                ((k, nxt),) = child.items()
                chunk.append(re.escape(k))
                child = nxt
            rest = "" if child.keys() == {""} else emit(child)
            parts.append("".join(chunk) + rest)
        if "" in node:
            parts.append("")  # ending here is the last (shortest) choice
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

    return emit(root)


def _literal_regex(words: Iterable[str]) -> str:
    ordered = sorted(set(words), key=lambda w: (-len(w), w))
    try:
        pattern = _trie_regex(ordered)
        re.compile(pattern)
        return pattern
    except (RecursionError, re.error, OverflowError):  # pragma: no cover - pathological sets only
        return "|".join(re.escape(w) for w in ordered)


# --------------------------------------------------------------------------------------------
# Text behind its escapes: JSON string escapes, HTML character references, percent-encoding


@dataclass(frozen=True, slots=True)
class _View:
    """A text with its escapes decoded, and where each decoded piece came from."""

    text: str
    at: tuple[int, ...]
    """Index in :attr:`text` where each decoded piece starts (increasing)."""
    ends: tuple[int, ...]
    """Where it ends (a named reference can stand for two characters)."""
    spans: tuple[tuple[int, int], ...]
    """Its ``(start, end)`` in the text one level up."""

    def up(self, start: int, end: int) -> tuple[int, int]:
        """The span one level up that decodes to ``text[start:end]`` (``end > start``)."""
        return self._where(start)[0], self._where(end - 1)[1]

    def _where(self, index: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.at, index) - 1
        if i >= 0 and index < self.ends[i]:
            return self.spans[i]
        base, origin = (self.ends[i], self.spans[i][1]) if i >= 0 else (0, 0)
        pos = origin + index - base
        return pos, pos + 1


_JSON_TOKEN = r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[\"\\/bfnrt])"
_HTML_TOKEN = r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]{0,31};?)"
_PERCENT_TOKEN = r"%[0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*"
_JSON_SPLIT = re.compile(f"({_JSON_TOKEN})")
"""A legal JSON string escape (a surrogate pair, another ``\\uXXXX``, a two-character one), as
one group: ``split`` gives text and escapes alternately (C speed)."""
_HTML_SPLIT = re.compile(f"({_HTML_TOKEN})")
"""An HTML character reference: decimal, hexadecimal, or a name; the terminating ``;`` optional,
as HTML5 reads them."""
_PERCENT_SPLIT = re.compile(f"({_PERCENT_TOKEN})")
"""A run of percent-escaped bytes (read as UTF-8)."""
_KINDS = (("\\", _JSON_SPLIT), ("&", _HTML_SPLIT), ("%", _PERCENT_SPLIT))
"""The escapes a text is read behind, in this order in each round, each only when its first
character is in the text (a regular expression that starts with a literal is a fast search: one
over all three kinds costs ten times as much on a text with none of them)."""


def _may_hide(text: str) -> bool:
    """Whether ``text`` holds a character an escape starts with (three C substring tests)."""
    return "\\" in text or "&" in text or "%" in text


def _json_char(token: str) -> str:
    if token[1] != "u":
        return _SIMPLE_ESCAPES[token[1]]
    if len(token) == 12:  # a surrogate pair
        return chr(0x10000 + ((int(token[2:6], 16) - 0xD800) << 10) + (int(token[8:12], 16) - 0xDC00))
    return chr(int(token[2:6], 16))


def _numeric_ref(token: str) -> str:
    """The character of ``&#115;`` / ``&#x73;`` as HTML5 reads it: C1 controls as Windows-1252,
    NUL, surrogates and beyond U+10FFFF as U+FFFD (other non-characters as themselves, where a
    browser may drop them: a view that keeps them hides nothing)."""
    body = token[2:].rstrip(";")
    hexadecimal = body[:1] in "xX"
    digits = (body[1:] if hexadecimal else body).lstrip("0") or "0"
    if len(digits) > 8:  # far beyond U+10FFFF (and never a long int conversion)
        return "\ufffd"
    num = int(digits, 16 if hexadecimal else 10)
    if num in _C1_REFS:
        return _C1_REFS[num]
    if num == 0 or 0xD800 <= num <= 0xDFFF or num > 0x10FFFF:
        return "\ufffd"
    return chr(num)


def _named_ref(token: str) -> tuple[str, int]:
    """What ``&name;`` stands for and how many characters of ``token`` it takes, as HTML5 reads
    it (``html.unescape``): the whole name when it is one, else the longest legacy name it starts
    with (``&ampx`` is ``&`` and ``x``); ``("", 0)`` when it is none."""
    name = token[1:]
    value = _HTML5.get(name)
    if value is not None:
        return value, len(token)
    for x in range(len(name) - 1, 1, -1):
        value = _HTML5.get(name[:x])
        if value is not None:
            return value, x + 1
    return "", 0


def _percent_chars(token: str) -> list[str]:
    """The characters a run of percent escapes spells (UTF-8; a byte that is not UTF-8 as a lone
    surrogate, which no secret form contains)."""
    return list(bytes.fromhex(token.replace("%", "")).decode("utf-8", "surrogateescape"))


def _decode_token(token: str) -> str:
    """The text one escape (one of :data:`_KINDS`) stands for: its decoded pieces
    (:func:`_pieces`), then what of it they do not take (``x`` of ``&ampx``; all of a name that
    is no reference)."""
    pieces = _pieces(token, 0)
    used = pieces[-1][2] if pieces else 0
    return "".join(piece for piece, _, _ in pieces) + token[used:]


def _pieces(token: str, start: int) -> list[tuple[str, int, int]]:
    """The decoded pieces of the escape ``token`` found at ``start``, each with the span it comes
    from: one per escape or reference, one per character of a percent run (its bytes' escapes);
    none for a name that is no reference."""
    head = token[0]
    if head == "\\":
        return [(_json_char(token), start, start + len(token))]
    if head == "%":
        out: list[tuple[str, int, int]] = []
        pos = start
        for ch in _percent_chars(token):
            size = 3 * len(ch.encode("utf-8", "surrogateescape"))
            out.append((ch, pos, pos + size))
            pos += size
        return out
    if token[1] == "#":
        return [(_numeric_ref(token), start, start + len(token))]
    value, used = _named_ref(token)
    return [(value, start, start + used)] if used else []


def _unescape(text: str, kind: re.Pattern[str]) -> _View | None:
    """``text`` with every escape of one ``kind`` (:data:`_KINDS`: ``\\u0041``, ``\\/``, a
    surrogate pair; ``&#115;``, ``&#x73;``, ``&amp;``; ``%6B``) decoded, wherever it stands, and
    the map back; None when there is none."""
    chunks: list[str] = []
    at: list[int] = []
    ends: list[int] = []
    spans: list[tuple[int, int]] = []
    pos = size = 0
    for m in kind.finditer(text):
        for piece, start, end in _pieces(m.group(), m.start()):
            literal = text[pos:start]
            chunks.append(literal)
            size += len(literal)
            chunks.append(piece)
            at.append(size)
            size += len(piece)
            ends.append(size)
            spans.append((start, end))
            pos = end
    if not at:
        return None
    chunks.append(text[pos:])
    return _View("".join(chunks), tuple(at), tuple(ends), tuple(spans))


def _views(text: str) -> list[_View]:
    """The texts behind ``text``'s escapes: in each round (a level), its JSON escapes, then its
    HTML references, then its percent-escapes decoded, one view per kind found, up to
    :data:`MAX_UNESCAPE_LEVELS` rounds (empty without a backslash, ``&`` or ``%``)."""
    out: list[_View] = []
    for _ in range(MAX_UNESCAPE_LEVELS):
        found = len(out)
        for char, kind in _KINDS:
            if char in text:
                view = _unescape(text, kind)
                if view is not None:
                    out.append(view)
                    text = view.text
        if len(out) == found:
            break
    return out


_DECODED: dict[str, str] = {}
"""Each escape's text (:func:`_decode_token`), filled as met; cleared at 4,096."""


_LAST_DECODED: tuple[str, tuple[str, ...]] = ("", ())
"""The last text :func:`_decoded` read and its answer (the known-secret and the pattern checks
of one text in a row decode it once; one tuple, replaced whole, so threads only miss)."""


def _decode_all(text: str, kind: re.Pattern[str]) -> str:
    parts = kind.split(text)
    get = _DECODED.get
    escapes = parts[1::2]
    chars = [get(e) for e in escapes]
    if None in chars:
        for i, e in enumerate(escapes):
            if chars[i] is None:
                if len(_DECODED) >= 4096:
                    _DECODED.clear()
                chars[i] = _DECODED[e] = _decode_token(e)
    parts[1::2] = chars
    return "".join(cast(list[str], parts))


def _decoded(text: str) -> tuple[str, ...]:
    """The texts of :func:`_views` without their maps (about three times faster): what the
    presence checks read."""
    global _LAST_DECODED
    last = _LAST_DECODED
    if last[0] is text:
        return last[1]
    last_text = text
    out: list[str] = []
    for _ in range(MAX_UNESCAPE_LEVELS):
        found = len(out)
        for char, kind in _KINDS:
            if char in text:
                nxt = _decode_all(text, kind)
                if nxt != text:  # a decoded escape always shortens the text
                    out.append(nxt)
                    text = nxt
        if len(out) == found:
            break
    answer = tuple(out)
    if out:
        _LAST_DECODED = (last_text, answer)
    return answer


def _to_top(chain: list[_View], level: int, start: int, end: int) -> tuple[int, int]:
    """A span of ``chain[level].text`` as the span of the original text it decodes from."""
    for view in reversed(chain[: level + 1]):
        start, end = view.up(start, end)
    return start, end


# --------------------------------------------------------------------------------------------


_Mark = Callable[[bool, str, str], str]
"""What replaces an occurrence: (a known secret?, its name or the pattern's, the text found)."""


@dataclass(frozen=True, slots=True)
class _CompiledPattern:
    name: str
    regex: re.Pattern[str]
    group: int
    marker: str


class Redactor:
    """Replaces known secrets (and their common encodings) and configured patterns in text.

    Built once, immutable, safe to share between threads. All methods are pure.

    Args:
        secrets: known secret values, either a mapping ``name -> value`` (the name appears in the
            marker) or plain values (named ``default_secret_name``). ``str`` or ``bytes``.
        patterns: configured credential formats; :data:`DEFAULT_PATTERNS` unless given.
        min_secret_length: shortest accepted secret (characters of its text; bytes if it is not
            UTF-8). Shorter secrets raise ``ValueError`` (never silently skipped). At least 4.
        default_secret_name: marker name for secrets given without a name.
        scan_forms_limit: see :data:`SCAN_FORMS_LIMIT` (only performance depends on it).

    Raises:
        ValueError: a secret too short or empty, a bad name, a pattern that does not compile
            (the message names the pattern, never a secret value).
    """

    __slots__ = (
        "_forms", "_literal", "_overlap", "_patterns", "_raw", "_scan_forms", "_secret_count", "_min_length",
    )  # fmt: skip

    def __init__(
        self,
        secrets: Mapping[str, str | bytes] | Iterable[str | bytes] = (),
        *,
        patterns: Iterable[SecretPattern] = DEFAULT_PATTERNS,
        min_secret_length: int = DEFAULT_MIN_SECRET_LENGTH,
        default_secret_name: str = "secret",
        scan_forms_limit: int = SCAN_FORMS_LIMIT,
    ) -> None:
        if min_secret_length < 4:
            raise ValueError("min_secret_length must be at least 4")
        if not _NAME.match(default_secret_name):
            raise ValueError("default_secret_name must match [A-Za-z0-9_.-]{1,64}")
        named: list[tuple[str, str | bytes]]
        if isinstance(secrets, Mapping):
            named = [(str(k), v) for k, v in secrets.items()]
        else:
            named = [(default_secret_name, v) for v in secrets]
        form_names: dict[str, str] = {}
        for index, (name, value) in enumerate(named):
            if not _NAME.match(name):
                raise ValueError(f"secret #{index}: name must match [A-Za-z0-9_.-]{{1,64}}")
            if not isinstance(value, (str, bytes, bytearray)):
                raise ValueError(f"secret #{index} ({name}): value must be str or bytes")
            size = _secret_length(value)
            if size < min_secret_length:
                raise ValueError(
                    f"secret #{index} ({name}) is shorter than {min_secret_length} characters;"
                    " refusing to redact a trivial string"
                )
            for form in secret_forms(bytes(value) if isinstance(value, bytearray) else value):
                if len(form) >= min_secret_length:
                    form_names.setdefault(form, name)
        self._forms: dict[str, str] = {}
        for form, name in form_names.items():
            self._forms.setdefault(form.casefold(), name)
        self._secret_count = len(named)
        self._raw: tuple[bytes, ...] = tuple(
            v.encode("utf-8", "surrogatepass") if isinstance(v, str) else bytes(v) for _, v in named
        )
        self._min_length = min_secret_length
        self._scan_forms: tuple[str, ...] | None = (
            tuple(sorted(self._forms, key=lambda f: (-len(f), f)))  # casefolded
            if len(self._forms) <= scan_forms_limit
            else None
        )
        if form_names:
            trie = _literal_regex(form_names)
            self._literal: re.Pattern[str] | None = re.compile(trie, re.IGNORECASE)
            self._overlap: re.Pattern[str] | None = re.compile(f"(?=({trie}))", re.IGNORECASE)
        else:
            self._literal = None
            self._overlap = None
        compiled: list[_CompiledPattern] = []
        for pat in patterns:
            if not _NAME.match(pat.name):
                raise ValueError(f"pattern {pat.name!r}: name must match [A-Za-z0-9_.-]{{1,64}}")
            try:
                rx = re.compile(pat.regex, re.MULTILINE)
            except re.error as exc:
                raise ValueError(f"pattern {pat.name!r} does not compile: {exc}") from None
            if not 0 <= pat.group <= rx.groups:
                raise ValueError(f"pattern {pat.name!r}: group {pat.group} does not exist")
            if rx.match("") is not None:
                raise ValueError(f"pattern {pat.name!r} matches the empty string")
            compiled.append(_CompiledPattern(pat.name, rx, pat.group, marker(pat.name)))
        self._patterns: tuple[_CompiledPattern, ...] = tuple(compiled)

    # -- introspection -------------------------------------------------------------------------

    @property
    def secret_count(self) -> int:
        """How many known secrets were configured."""
        return self._secret_count

    @property
    def form_count(self) -> int:
        """How many distinct text forms of known secrets are matched."""
        return len(self._forms)

    @property
    def pattern_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self._patterns)

    # -- scanning ------------------------------------------------------------------------------

    def contains_known_secret(self, text: str) -> bool:
        """Whether ``text`` contains any form of a known secret (patterns are not consulted), as
        written or behind JSON string escapes (``\\u0041``, ``\\/``, ... in any mix, up to
        :data:`MAX_UNESCAPE_LEVELS` levels), HTML character references and percent-escapes.

        Up to :data:`SCAN_FORMS_LIMIT` forms this is one ``in`` test per casefolded form in the
        casefolded text (C substring search, about three times faster than the trie regex for
        small sets); above, one search with the case-insensitive trie regex.
        """
        return self._plain_holds(text) or self._escaped_holds(text)

    def contains_known_form(self, text: str) -> bool:
        """Whether ``text`` contains a form of a known secret as written (not behind its JSON
        escapes): for a text whose strings were checked behind their escapes already, e.g. a
        message that is those strings JSON-encoded (:func:`~callgate.execute.encode.encode_result`
        checks the strings with :meth:`contains_known_secret`, its message with this)."""
        return self._plain_holds(text)

    def _escaped_holds(self, text: str) -> bool:
        return _may_hide(text) and any(self._plain_holds(view) for view in _decoded(text))

    def _plain_holds(self, text: str) -> bool:
        if self._scan_forms is not None:  # casefolded on both sides: a superset of the regex's matches
            folded = text.casefold()
            return any(form in folded for form in self._scan_forms)
        return self._literal is not None and self._literal.search(text) is not None

    def holds_known_secret(self, value: str) -> bool:
        """Whether a string of a result part's bytes (base64 data, a ``data:`` URL, a name) holds a
        known secret: its bytes in the decoded data, or any form :meth:`contains_known_secret`
        finds in the string or in the data read as Latin-1 or UTF-8 (the views
        :func:`~callgate.client.resultforms.holds_secret` searches for redeemed values); behind
        JSON escapes, HTML references and percent-escapes, in the string and in the Latin-1 view
        (escapes are ASCII: one decoding of the bytes covers such text inside any binary). Patterns are not consulted here
        (:meth:`part_matches_pattern`)."""
        raw, texts = part_views(value)
        if any(secret in raw for secret in self._raw):
            return True
        if self._scan_forms is not None:  # the views are casefolded already
            if any(form in text for text in texts for form in self._scan_forms):
                return True
        elif any(self._plain_holds(text) for text in texts):
            return True
        return any(self._escaped_holds(text) for text in texts[:2])

    def part_matches_pattern(self, value: str) -> bool:
        """Whether a configured pattern matches in a string of a result part (base64 data, a
        ``data:`` URL, a name): in the bytes that base64 data stands for
        (:func:`~callgate.client.resultforms.part_data`) read as Latin-1, where every ASCII
        credential format stays as it was written (patterns are ASCII); in the string itself when
        it is not base64, or is base64 of at most :data:`PATTERN_TEXT_MAX` characters (an id, a
        name that happens to be base64). Long base64 text is not searched as text: random base64
        is full of ``sk-``-, ``AIza``-, ``xoxb-``-shaped runs (URL-safe base64 matches ``api_key``
        in nearly every megabyte), which would withhold clean images."""
        if not self._patterns:
            return False
        data = part_data(value)
        if data is None and len(value) > PATTERN_TEXT_MAX and _URLSAFE_B64.fullmatch(value):
            bare = value.rstrip("=")
            try:
                data = base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
            except (binascii.Error, ValueError):  # a length no base64 has: read as text
                data = None
        if data is None or len(value) <= PATTERN_TEXT_MAX:
            if self.might_match_pattern(value):
                return True
        if data is None:
            return False
        text = data.decode("latin-1")
        return any(p.regex.search(text) is not None for p in self._patterns)

    def might_match_pattern(self, text: str) -> bool:
        """Whether any configured pattern matches somewhere in ``text`` (one search each), as
        written or behind JSON string escapes, HTML references and percent-escapes."""
        if any(p.regex.search(text) is not None for p in self._patterns):
            return True
        return (
            bool(self._patterns)
            and _may_hide(text)
            and any(p.regex.search(view) is not None for view in _decoded(text) for p in self._patterns)
        )

    def might_contain(self, text: str) -> bool:
        """Whether :meth:`redact` could change ``text``.

        Also a sound pre-filter over several strings joined by a separator that cannot continue a
        JSON escape (``"\\n"`` does; not one of ``"\\/bfnrtu``): a match inside one string is a
        match inside the joined text (patterns anchored with ``\\A``/``\\Z`` aside).
        """
        return self.contains_known_secret(text) or self.might_match_pattern(text)

    # -- redaction -----------------------------------------------------------------------------

    def redact(self, text: str) -> tuple[str, int]:
        """Return ``text`` with known secrets, then patterns, replaced; and the number replaced.

        Known secrets go first and completely (union of overlapping occurrences), so a pattern
        can never consume half of a known secret and leave the other half.
        """
        return self._apply(text, _redaction_mark)

    def mask(self, text: str) -> tuple[str, int]:
        """:meth:`redact` for a person's eyes (the confirmation console, ``callgate explain``):
        each occurrence becomes ``⟦masked <name>⟧`` for a known secret (its configured name) and
        ``⟦masked <pattern> …<last 4>⟧`` for a pattern's match of 16 or more characters whose
        last four are letters or digits (the fingerprint that tells two keys apart), else
        ``⟦masked <pattern>⟧`` (:func:`~callgate.client.visible.mask_mark`). A known secret never
        shows a character of its own: the sidecar holds it, a person needs only its name."""
        return self._apply(text, _mask_mark)

    def mask_json(self, value: Any) -> tuple[Any, int]:
        """:meth:`mask` over every string of a JSON-like value (keys too); anything that is not a
        string, list or dict is kept as it is. Returns a new value and the count."""
        counter = [0]
        return self._walk(value, self.mask, False, counter, 0), counter[0]

    def _apply(self, text: str, mark: _Mark) -> tuple[str, int]:
        count = 0
        if self._plain_holds(text):
            text, count = self._redact_literals(text, mark)
        if _may_hide(text):  # before the patterns as written: a match spelled partly plain, partly
            text, n = self._redact_escaped(text, mark)  # escaped, is taken whole from the views
            count += n
        for pat in self._patterns:
            if pat.regex.search(text) is None:
                continue
            spans: list[tuple[int, int, int, str]] = []
            for m in pat.regex.finditer(text):
                group = pat.group if pat.group and m.start(pat.group) >= 0 else 0
                found = m.group(group)
                shown = mark(False, pat.name, found)
                if found and found != shown:  # not a marker put in before (``://[REDACTED:...]@``)
                    spans.append((m.start(group), m.end(group), 1, shown))
            if spans:
                text, n = _replace_spans(text, spans)
                count += n
        return text, count

    def _redact_escaped(self, text: str, mark: _Mark) -> tuple[str, int]:
        """Redact what only the texts behind escapes show (``s\\u006b-...``, ``\\/`` for
        ``/``, ``&#115;k-...``, ``s%6B-...``, one level inside another): each occurrence found in a decoded view is mapped back to
        the characters it decodes from, and those are replaced. Repeated while a view still shows
        something (a replacement can only shorten the text), at most
        :data:`MAX_UNESCAPE_LEVELS` + 1 times; what is left then is the encoder's final check's
        (which withholds the result)."""
        count = 0
        for _ in range(MAX_UNESCAPE_LEVELS + 1):
            if not any(
                self._plain_holds(view) or any(p.regex.search(view) for p in self._patterns)
                for view in _decoded(text)
            ):
                break
            chain = _views(text)
            spans: list[tuple[int, int, int, str]] = []  # known secrets (0) before patterns (1)
            for level, view in enumerate(chain):
                if self._overlap is not None and self._plain_holds(view.text):
                    for m in self._overlap.finditer(view.text):
                        found = m.group(1)
                        start, end = _to_top(chain, level, m.start(), m.start() + len(found))
                        name = self._forms.get(found.casefold(), "secret")
                        spans.append((start, end, 0, mark(True, name, found)))
                for pat in self._patterns:
                    for m in pat.regex.finditer(view.text):
                        group = pat.group if pat.group and m.start(pat.group) >= 0 else 0
                        if m.end(group) > m.start(group):
                            start, end = _to_top(chain, level, m.start(group), m.end(group))
                            spans.append((start, end, 1, mark(False, pat.name, m.group(group))))
            # a pattern can match a marker put in before (``://[REDACTED:...]@``): not again
            spans = [sp for sp in spans if text[sp[0] : sp[1]] != sp[3]]
            if not spans:
                break
            text, n = _replace_spans(text, spans)
            count += n
        return text, count

    def _redact_literals(self, text: str, mark: _Mark) -> tuple[str, int]:
        assert self._overlap is not None
        spans: list[tuple[int, int, int, str]] = []
        for m in self._overlap.finditer(text):
            found = m.group(1)
            name = self._forms.get(found.casefold(), "secret")
            spans.append((m.start(), m.start() + len(found), 0, mark(True, name, found)))
        return _replace_spans(text, spans)

    def redact_json(self, value: Any) -> tuple[Any, int]:
        """Redact every string of a JSON value, object keys included; return a new value + count.

        The input is not modified. Object member order is kept. Two keys that become equal after
        redaction (``{"tok=<a>": 1, "tok=<b>": 2}``) are kept apart by suffixing ``#2``, ``#3``,
        ... to the later ones (first unused suffix, in member order).

        Raises:
            ValueError: a value nested deeper than :data:`MAX_JSON_DEPTH`, a non-finite float.
            TypeError: a value that is not JSON (object keys must be ``str``).
        """
        counter = [0]
        return self._walk(value, self.redact, True, counter, 0), counter[0]

    def _walk(
        self,
        value: Any,
        change: Callable[[str], tuple[str, int]],
        strict: bool,
        counter: list[int],
        depth: int,
    ) -> Any:
        """``change`` applied to every string of ``value`` (object keys too, repeated keys kept apart
        by :func:`unique_keys`), counted in ``counter``. ``strict`` (:meth:`redact_json`): only JSON
        values, else ``TypeError`` (a non-finite float: ``ValueError``); otherwise (:meth:`mask_json`)
        any other value is kept as it is and keys are read with ``str``."""
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON value nested deeper than {MAX_JSON_DEPTH}")
        if isinstance(value, str):
            text, n = change(value)
            counter[0] += n
            return text
        if isinstance(value, (list, tuple)):
            return [self._walk(v, change, strict, counter, depth + 1) for v in value]
        if isinstance(value, dict if strict else Mapping):
            pairs: list[tuple[str, Any]] = []
            for key, child in value.items():
                if strict and not isinstance(key, str):
                    raise TypeError("JSON object keys must be str")
                new_key, n = change(key if strict else str(key))
                counter[0] += n
                pairs.append((new_key, self._walk(child, change, strict, counter, depth + 1)))
            return dict(unique_keys(pairs))
        if not strict or value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError("non-finite number in a JSON value")
            return value
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def _replace_spans(text: str, spans: list[tuple[int, int, int, str]]) -> tuple[str, int]:
    """Replace the union of ``spans`` (start, end, rank, marker), each run of overlapping ones by
    the marker of its first (at one start, the lowest rank); the number of runs."""
    merged: list[tuple[int, int, str]] = []
    for start, end, _, mark in sorted(spans, key=lambda s: (s[0], s[2], -s[1])):
        if merged and start < merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end, merged[-1][2])
            continue
        merged.append((start, end, mark))
    out: list[str] = []
    pos = 0
    for start, end, mark in merged:
        out.append(text[pos:start])
        out.append(mark)
        pos = end
    out.append(text[pos:])
    return "".join(out), len(merged)


PATTERNS_ONLY = Redactor()
"""No known secret, the default patterns: the masker of a surface built without the configured
secrets (a confirmer listener constructed in a test, the MCP question without a masker)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Make keys unique, keeping order: a repeated key gets the first free ``#2``, ``#3``, ..."""
    taken = {k for k, _ in pairs}
    if len(taken) == len(pairs):
        return pairs
    seen: set[str] = set()
    out: list[tuple[str, Any]] = []
    for key, child in pairs:
        if key in seen:
            n = 2
            while f"{key}#{n}" in taken:
                n += 1
            key = f"{key}#{n}"
            taken.add(key)
        seen.add(key)
        out.append((key, child))
    return out


def _redaction_mark(known: bool, name: str, found: str) -> str:
    return marker(name)


_FINGERPRINT = re.compile(r"[A-Za-z0-9]{4}")
FINGERPRINT_FROM = 16
"""A pattern's match shows its last four characters in a mask only from this length on."""


def _mask_mark(known: bool, name: str, found: str) -> str:
    if known or len(found) < FINGERPRINT_FROM or not _FINGERPRINT.fullmatch(found[-4:]):
        return mask_mark(name)
    return mask_mark(name, found[-4:])


def _secret_length(value: str | bytes | bytearray) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(bytes(value).decode("utf-8"))
    except UnicodeDecodeError:
        return len(value)
