"""Result encoding: a tool's result or error becomes the tool message the model reads (spec 6.10).

Spec 6.10 ("工具结果再次成为输入"): the model sees the serialized representation, not the external
system, so the runtime must settle truncation and paging, distinguishable success and error
schemas, marking external text as untrusted data instead of promoting it to instructions, a tool
call id one-to-one with the proposal, and filtering of secrets before the result goes back; a
truncated result carries ``truncated=true`` and a way to fetch the rest and must not pass off
truncated JSON as complete. Spec 6.14 row 8: web content promoted to instructions is answered at
the result-encoding boundary by keeping the untrusted tool-data boundary.

:func:`encode_result` is a pure function of an :class:`EncodeInput`, a
:class:`~callgate.execute.redaction.Redactor`, the continuation token and an optional nonce key: the same
inputs give the same bytes. Steps:

1. **Clean** every string of the payload, object keys included (:func:`neutralize`): remove
   invisible and control characters (zero-width, bidi controls, Unicode tags, variation selectors
   17-256, noncharacters ...), show the boundary brackets as text (``⟦`` becomes ``[U+27E6]``),
   replace lone surrogates. Redact known secrets and configured patterns (the strings are first
   checked together, in one scan, and redacted one by one only if that finds something). Sort
   object members by key; keys that collide after cleaning get ``#2``, ``#3`` ... in the order
   of their original keys, so the bytes never depend on the tool's member order. The compact
   JSON of the cleaned payload is the **complete data**.
2. **Nonce**: the first 12 hex digits of HMAC-SHA256(nonce_key, ``callgate/untrusted/v1`` ‖
   invocation id ‖ SHA-256(complete data)).
3. **Wrap** every string from the tool as ``⟦untrusted:N⟧…⟦/untrusted:N⟧`` (object keys too,
   unless they are plain identifiers), except under ``trusted_paths``. Content cannot contain
   ``⟦``/``⟧`` after step 1, so it can neither close nor forge a boundary, whatever nonce it
   guesses. (Implementation: step 1 already inserts Unicode noncharacters as placeholders, which
   step 1 also strips from content; after the nonce is known, ``str.replace`` turns them into
   markers. One Python walk and one C ``json.dumps`` on the common path.)
4. **Fit** the message into ``max_bytes``: arrays longer than ``max_items`` are cut; if the
   message is still too large, long strings are shortened (the largest per-string length that
   fits is found by binary search; a shortened string ends with ``⟦truncated⟧`` after its closing
   boundary); if even 16-byte strings do not fit, only the first N leaves in document order are
   kept (N by binary search). A truncated message says ``"truncated": true``, counts what it
   leaves out and names a continuation from which the complete data is read page by page
   (:func:`page`). An untruncated message is never altered.
5. **Check** the final bytes for any form of a known secret. None can come from the data, which
   was redacted string by string, but one could come from a model-chosen id or an escaping
   coincidence: then the message becomes a ``result_withheld`` error, or
   :class:`ResultEncodingError` is raised if even that would carry it.

The message formats, their JSON Schemas (:data:`OK_MESSAGE_SCHEMA`, :data:`ERROR_MESSAGE_SCHEMA`,
:data:`PAGE_MESSAGE_SCHEMA`) and what the model should be told are in ``docs/RESULT-ENCODING.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

from callgate.base import jsonpointer
from callgate.base.errors import CallgateError, ErrorCode
from callgate.base.model import JSONValue
from callgate.client.resultforms import CLOSE_PREFIX, OPEN_PREFIX, close_marker, open_marker, unmarked_data
from callgate.execute.redaction import Redactor, unique_keys
from callgate.policy.resultlimits import DEFAULT_MAX_BYTES, MIN_MAX_BYTES, limits_from_spec

__all__ = [
    "CLOSE_PREFIX",
    "COMMIT_STATUSES",
    "DEFAULT_MAX_BYTES",
    "ERROR_MESSAGE_SCHEMA",
    "EncodeInput",
    "EncodedResult",
    "MIN_MAX_BYTES",
    "OK_MESSAGE_SCHEMA",
    "OPEN_PREFIX",
    "Omitted",
    "PAGE_MESSAGE_SCHEMA",
    "ResultEncodingError",
    "TRUNCATION_MARK",
    "close_marker",
    "encode_refusal",
    "encode_result",
    "limits_from_spec",
    "neutralize",
    "open_marker",
    "page",
    "unmarked_data",
]

MAX_DEPTH = 128
"""Deepest payload accepted (the strict parser's default limit is 64)."""
MIN_STRING_PREVIEW = 16
"""Shortest preview (bytes) a shortened string keeps before whole leaves are dropped instead."""
NONCE_HEX = 12

TRUNCATION_MARK = "\u27e6truncated\u27e7"
"""Follows the closing boundary of a string the sidecar shortened."""
_TRUNC_BYTES = len(TRUNCATION_MARK.encode("utf-8"))

WITHHELD_CODE = "result_withheld"
GENERIC_ERROR_CODE = "tool_error"

COMMIT_STATUSES = ("COMMITTED", "NOT_COMMITTED", "UNKNOWN", "NOT_APPLICABLE")
"""Spec 6.13 item 6 (not committed / committed / unknown); ``NOT_APPLICABLE`` for read-only tools."""

_ID = re.compile(r"[\x21-\x7e]{1,256}\Z")
_TOOL_NAME = re.compile(r"[\x21-\x3f\x41-\x7e]{1,128}\Z")  # printable ASCII without '@'
_TOOL_VERSION = re.compile(r"[\x21-\x7e]{1,64}\Z")
_ERROR_CODE = re.compile(r"[a-z][a-z0-9_.]{0,63}\Z")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,39}\Z")
_NONCE = re.compile(r"[0-9a-f]{12}\Z")

# Removed from every string: C0 controls except TAB/LF/CR, DEL, C1 controls, soft hyphen,
# combining grapheme joiner, Arabic letter mark, Hangul fillers, Khmer invisible vowels,
# Mongolian variation selectors and vowel separator, zero-width space, LRM/RLM, bidi
# embeddings/overrides/isolates, word joiner and invisible operators, deprecated format
# controls, BOM/zero-width no-break space, interlinear annotation controls, the noncharacters
# U+FDD0-U+FDEF, U+FFFE, U+FFFF (reserved for internal use: callgate's placeholders), Egyptian
# hieroglyph, shorthand and musical format controls, Unicode tags (used for "ASCII smuggling")
# and variation selectors 17-256. Kept: ZWJ/ZWNJ (emoji sequences, Persian and Indic scripts),
# variation selectors 1-16 (emoji presentation), visible format characters such as the Arabic
# number signs.
_INVISIBLE = (
    r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    r"\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    r"\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    r"\u3164\ufdd0-\ufdef\ufeff\uffa0\ufff9-\ufffb\ufffe\uffff"
    r"\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    r"\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_DELIMITERS = "\u27e6\u27e7\u301a\u301b"  # ⟦ ⟧ and their look-alikes 〚 〛
_NEUTRAL = re.compile("[" + _INVISIBLE + _DELIMITERS + r"\ud800-\udfff]")
# The same class split in two: ``re`` tests BMP classes with a bitmap, astral ranges one by
# one (4x slower), so the astral part only runs on text that has astral characters.
_NEUTRAL_BMP = re.compile("[" + _INVISIBLE.split("\\U")[0] + _DELIMITERS + r"\ud800-\udfff]")
_NEUTRAL_ASTRAL = re.compile("[\\U" + _INVISIBLE.split("\\U", 1)[1] + "]")
_ASTRAL_SPAN = re.compile("[\U00013430-\U000e01ef]")  # one range covering the astral part


def _needs_neutral(text: str) -> bool:
    """Whether :func:`neutralize` would change ``text`` (fast: ASCII text costs one BMP scan)."""
    if _NEUTRAL_BMP.search(text) is not None:
        return True
    return (
        not text.isascii()
        and _ASTRAL_SPAN.search(text) is not None
        and _NEUTRAL_ASTRAL.search(text) is not None
    )


# Placeholders (noncharacters, removed from content by _NEUTRAL, never escaped by json.dumps).
_PH_OPEN = "\ufdd0"
_PH_CLOSE = "\ufdd1"
_PH_CUT = "\ufdd2"
_PH_BODY = "\ufdd3"
_PH_BODY_JSON = '"\ufdd3"'


def _neutral_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    if ch in _DELIMITERS:
        return f"[U+{ord(ch):04X}]"
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"
    return ""


def neutralize(text: str) -> tuple[str, int]:
    """Remove invisible/control characters, show ``⟦ ⟧ 〚 〛`` as ``[U+27E6]`` etc., replace lone
    surrogates by U+FFFD. Returns the text and the number of characters changed.

    Afterwards the text contains no character of a boundary marker, so it can neither close nor
    forge one. Idempotent.
    """
    if not _needs_neutral(text):
        return text, 0
    return _NEUTRAL.subn(_neutral_char, text)


class ResultEncodingError(CallgateError):
    """The result cannot be encoded without leaking a known secret (e.g. a secret inside a
    model-chosen ``tool_call_id``). Code ``internal``; the message never contains the value."""

    def __init__(self, message: str) -> None:
        super().__init__(code=ErrorCode.INTERNAL, message=message)


# --------------------------------------------------------------------------------------------
# Inputs and outputs


def _parse_pointer(pointer: str) -> tuple[str, ...]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise ValueError("trusted_paths entries must be JSON pointers ('' or starting with '/')")
    return jsonpointer.split(pointer)


@dataclass(frozen=True, slots=True)
class EncodeInput:
    """One result of one invocation, to be turned into the tool message for the model.

    JSON values are treated as immutable (as everywhere in :mod:`callgate.base.model`).

    Raises:
        ValueError: on construction, for any field outside its documented domain.
    """

    invocation_id: str
    tool_call_id: str
    """The proposal id the model gave this call: the message answers exactly this call."""
    tool_name: str
    tool_version: str
    status: Literal["ok", "error"]
    value: JSONValue
    """``ok``: the tool's result (any JSON value). ``error``: ``{"code": str, "message": str,
    "retryable"?: bool}`` and nothing else."""
    commit_status: str
    """One of :data:`COMMIT_STATUSES`."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Largest message in bytes (ToolSpec ``result_limits.max_bytes``), at least
    :data:`MIN_MAX_BYTES`."""
    max_items: int | None = None
    """Longest array shown (ToolSpec ``result_limits.max_items``); ``None``: no item limit."""
    trusted_paths: tuple[str, ...] = ()
    """Parts of an ``ok`` value that the tool itself produced (not external text), as JSON
    pointers where a ``*`` segment matches any key or index; a pointer covers everything below
    it. Strings there are cleaned and redacted but not wrapped. Everything else, including any
    member the pointers do not foresee, is untrusted. Default: nothing is trusted. Never applied
    to an error's message, which is always untrusted."""

    def __post_init__(self) -> None:
        for label, text, rx, limit in (
            ("invocation_id", self.invocation_id, _ID, 256),
            ("tool_call_id", self.tool_call_id, _ID, 256),
            ("tool_name", self.tool_name, _TOOL_NAME, 128),
            ("tool_version", self.tool_version, _TOOL_VERSION, 64),
        ):
            if not isinstance(text, str) or rx.match(text) is None:
                raise ValueError(f"{label} must be 1-{limit} printable ASCII characters without spaces")
        if self.status not in ("ok", "error"):
            raise ValueError("status must be 'ok' or 'error'")
        if self.commit_status not in COMMIT_STATUSES:
            raise ValueError(f"commit_status must be one of {', '.join(COMMIT_STATUSES)}")
        if (
            isinstance(self.max_bytes, bool)
            or not isinstance(self.max_bytes, int)
            or self.max_bytes < MIN_MAX_BYTES
        ):
            raise ValueError(f"max_bytes must be an integer >= {MIN_MAX_BYTES}")
        if self.max_items is not None and (
            isinstance(self.max_items, bool) or not isinstance(self.max_items, int) or self.max_items < 1
        ):
            raise ValueError("max_items must be None or an integer >= 1")
        if not isinstance(self.trusted_paths, tuple):
            raise ValueError("trusted_paths must be a tuple of JSON pointers")
        for pointer in self.trusted_paths:
            _parse_pointer(pointer)
        if self.status == "error":
            v = self.value
            if not isinstance(v, dict) or not {"code", "message"} <= v.keys() <= {
                "code",
                "message",
                "retryable",
            }:
                raise ValueError("an error value is {'code', 'message', optional 'retryable'}")
            if not isinstance(v["code"], str) or not isinstance(v["message"], str):
                raise ValueError("error code and message must be strings")
            if "retryable" in v and not isinstance(v["retryable"], bool):
                raise ValueError("error retryable must be a bool")


@dataclass(frozen=True, slots=True)
class Omitted:
    """What a truncated message leaves out, counted where it is cut off."""

    array_items: int = 0
    """Array elements not shown (an element dropped whole counts once, whatever it contains)."""
    object_members: int = 0
    strings_shortened: int = 0

    @property
    def any(self) -> bool:
        return bool(self.array_items or self.object_members or self.strings_shortened)

    def as_json(self) -> dict[str, int]:
        return {
            "array_items": self.array_items,
            "object_members": self.object_members,
            "strings_shortened": self.strings_shortened,
        }


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """The tool message and what the gate needs to record and to serve continuation pages."""

    message_bytes: bytes
    """UTF-8 JSON, compact, deterministic; at most ``max_bytes``."""
    truncated: bool
    remaining: bytes | None
    """When truncated: the complete (cleaned, redacted, unwrapped) data as compact UTF-8 JSON,
    served from offset 0 by :func:`page` under the continuation token. ``None`` otherwise."""
    redactions: int
    """Secrets / pattern matches replaced in the payload."""
    content_digest: str
    """``sha256:<hex>`` of ``message_bytes`` (spec 6.13 item 7: which bytes the model got)."""
    nonce: str
    """The boundary nonce of this message; pages of its continuation reuse it."""
    neutralized: int = 0
    """Characters removed or made visible by :func:`neutralize`, plus a replaced error code."""
    omitted: Omitted = Omitted()
    withheld: bool = False
    """The message is an error of callgate's own in place of the result: ``result_withheld``
    (the final check found a known secret) or the code given to :func:`encode_refusal`."""
    data: bytes | None = None
    """``ok`` results that were not withheld: the complete data (cleaned, redacted, unwrapped) as
    compact UTF-8 JSON, the same bytes :attr:`remaining` holds when truncated. Not for the
    model (it has no boundaries); the sidecar checks it against an ``output_schema`` and hands
    it out as the structured result only when that holds and the message is not truncated."""


# --------------------------------------------------------------------------------------------
# Steps 1 and 3: clean, redact, sort, wrap (with placeholders)

_Paths = tuple[tuple[str, ...], ...]


def _descend(live: _Paths, segment: str) -> tuple[bool, _Paths]:
    rest = [p[1:] for p in live if p[0] == "*" or p[0] == segment]
    return any(not p for p in rest), tuple(p for p in rest if p)


@dataclass(slots=True)
class _Stats:
    strings: list[str]
    """Every string seen (values and keys), as they end up in the tree."""
    neutralized: int = 0
    redactions: int = 0
    longest_array: int = 0


def _build(
    payload: Any, redactor: Redactor, *, neutral: bool, redact: bool, trusted: bool, live: _Paths
) -> tuple[Any, _Stats]:
    """One walk over the payload: clean every string (``neutral``: :func:`neutralize`,
    ``redact``: the redactor), sort members, wrap untrusted strings in placeholders.

    The common path runs with both flags off (the strings are then checked together, and the
    walk is repeated with a flag on only when that check finds something)."""
    stats = _Stats([])
    strings = stats.strings
    append = strings.append
    key_cache: dict[str, str] = {}

    def clean(s: str) -> str:
        if neutral and _needs_neutral(s):
            s, n = _NEUTRAL.subn(_neutral_char, s)
            stats.neutralized += n
        if redact:
            s, n = redactor.redact(s)
            stats.redactions += n
        append(s)
        return s

    def wrap_key(key: str) -> str:
        out = key_cache.get(key)
        if out is None:
            out = key_cache[key] = key if _PLAIN_KEY.match(key) else _PH_OPEN + key + _PH_CLOSE
        return out

    def build(v: Any, depth: int, trusted: bool, live: _Paths) -> Any:
        t = type(v)
        if t is str:
            s = clean(v) if neutral or redact else v
            if not (neutral or redact):
                append(s)
            return s if trusted else _PH_OPEN + s + _PH_CLOSE
        if t is int or t is bool or v is None:
            return v
        if depth >= MAX_DEPTH:
            raise ValueError(f"result nested deeper than {MAX_DEPTH}")
        if t is dict:
            members = []
            for key, child in v.items():
                if type(key) is not str:
                    raise TypeError("result object keys must be str")
                if neutral or redact:
                    members.append((clean(key), key, child))
                else:
                    append(key)
                    members.append((key, key, child))
            # sorted by cleaned key, ties (keys equal after cleaning) by the original key
            members.sort(key=itemgetter(0, 1))
            pairs = unique_keys([(k, c) for k, _, c in members])
            out: dict[str, Any] = {}
            if not trusted and not live:  # everything below is untrusted
                for key, child in pairs:
                    out[wrap_key(key)] = build(child, depth + 1, False, ())
            elif trusted:
                for key, child in pairs:
                    out[key] = build(child, depth + 1, True, ())
            else:
                for key, child in pairs:
                    out[wrap_key(key)] = build(child, depth + 1, *_descend(live, key))
            return out
        if t is list or t is tuple:
            if len(v) > stats.longest_array:
                stats.longest_array = len(v)
            if trusted or not live:
                return [build(c, depth + 1, trusted, ()) for c in v]
            return [build(c, depth + 1, *_descend(live, str(i))) for i, c in enumerate(v)]
        if t is float:
            if not math.isfinite(v):
                raise ValueError("result contains a non-finite number")
            return v
        # subclasses of the JSON types (rare): convert to the exact type and retry
        for base in (bool, int, float, str, dict, list):
            if isinstance(v, base):
                return build(base(v), depth, trusted, live)  # type: ignore[arg-type]
        raise TypeError(f"result is not a JSON value: {type(v).__name__}")

    return build(payload, 0, trusted, live), stats


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _strip_placeholders(text: str) -> str:
    return text.replace(_PH_OPEN, "").replace(_PH_CLOSE, "")


# --------------------------------------------------------------------------------------------
# Step 4: fitting (on the placeholder tree)


def _blen(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def _prefix(s: str, nbytes: int) -> str:
    if s.isascii():
        return s[:nbytes]
    return s.encode("utf-8")[:nbytes].decode("utf-8", "ignore")


def _split(s: str) -> tuple[str, bool]:
    """(content, wrapped) of a placeholder-tree string, shortened or not."""
    if s.endswith(_PH_CUT):
        s = s[:-1]
    if s.startswith(_PH_OPEN):
        return s[1:-1], True
    return s, False


def _cap_items(node: Any, max_items: int) -> Any:
    if isinstance(node, list):
        return [_cap_items(v, max_items) for v in node[:max_items]]
    if isinstance(node, dict):
        return {k: _cap_items(v, max_items) for k, v in node.items()}
    return node


def _shorten(s: str, limit: int) -> str:
    inner, wrapped = _split(s)
    cut = _prefix(inner, limit)
    return (_PH_OPEN + cut + _PH_CLOSE if wrapped else cut) + _PH_CUT


def _cap_strings(node: Any, limit: int) -> Any:
    """Shorten value strings longer than ``limit`` + the marker to ``limit`` bytes (monotone)."""
    if isinstance(node, str):
        return _shorten(node, limit) if _blen(_split(node)[0]) > limit + _TRUNC_BYTES else node
    if isinstance(node, list):
        return [_cap_strings(v, limit) for v in node]
    if isinstance(node, dict):
        return {k: _cap_strings(v, limit) for k, v in node.items()}
    return node


def _longest_string(node: Any) -> int:
    if isinstance(node, str):
        return _blen(_split(node)[0])
    if isinstance(node, list):
        return max((_longest_string(v) for v in node), default=0)
    if isinstance(node, dict):
        return max((_longest_string(v) for v in node.values()), default=0)
    return 0


def _is_leaf(node: Any) -> bool:
    return not isinstance(node, (list, dict)) or not node


_DROP = object()


def _take(node: Any, budget: list[int]) -> Any:
    """The first ``budget[0]`` leaves of ``node`` in document order (containers closed)."""
    if _is_leaf(node):
        if budget[0] <= 0:
            return _DROP
        budget[0] -= 1
        return node
    if isinstance(node, dict):
        out_d: dict[str, Any] = {}
        for k, v in node.items():
            kept = _take(v, budget)
            if kept is _DROP:
                break
            out_d[k] = kept
        return out_d if out_d else _DROP
    out_l: list[Any] = []
    for v in node:
        kept = _take(v, budget)
        if kept is _DROP:
            break
        out_l.append(kept)
    return out_l if out_l else _DROP


def _cut_leaves(node: Any, leaves: int) -> Any:
    kept = _take(node, [leaves])
    if kept is not _DROP:
        return kept
    if isinstance(node, dict):
        return {}
    if isinstance(node, list):
        return []
    if isinstance(node, str):
        return _shorten(node, 0)
    return node


def _omitted(full: Any, preview: Any, acc: list[int]) -> None:
    if isinstance(preview, str):
        if preview.endswith(_PH_CUT):
            acc[2] += 1
    elif isinstance(preview, dict):
        acc[1] += len(full) - len(preview)
        for k, v in preview.items():
            _omitted(full[k], v, acc)
    elif isinstance(preview, list):
        acc[0] += len(full) - len(preview)
        for f, v in zip(full, preview, strict=False):
            _omitted(f, v, acc)


# --------------------------------------------------------------------------------------------
# Messages


@dataclass(frozen=True, slots=True)
class _Envelope:
    inp: EncodeInput
    nonce: str
    token: str
    total_bytes: int
    code: str
    retryable: bool

    def text(self, omitted: Omitted) -> str:
        """The message JSON with the body as the placeholder string ``"\\ufdd3"``."""
        inp = self.inp
        content: dict[str, Any] = {
            "type": "tool_result",
            "status": inp.status,
            "tool": f"{inp.tool_name}@{inp.tool_version}",
            "invocation_id": inp.invocation_id,
            "commit_status": inp.commit_status,
            "nonce": self.nonce,
            "truncated": omitted.any,
        }
        if omitted.any:
            content["continuation"] = {"token": self.token, "offset": 0, "remaining_bytes": self.total_bytes}
            content["omitted"] = omitted.as_json()
        if inp.status == "ok":
            content["data"] = _PH_BODY
        else:
            content["error"] = {"code": self.code, "message": _PH_BODY, "retryable": self.retryable}
        return _dumps({"role": "tool", "tool_call_id": inp.tool_call_id, "content": content})

    def render(self, body_json: str, omitted: Omitted) -> str:
        """Splice the body (placeholder JSON) into the envelope and turn placeholders into markers."""
        body = (
            body_json.replace(_PH_OPEN, open_marker(self.nonce))
            .replace(_PH_CLOSE, close_marker(self.nonce))
            .replace(_PH_CUT, TRUNCATION_MARK)
        )
        return self.text(omitted).replace(_PH_BODY_JSON, body, 1)


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _preview_text(env: _Envelope, full: Any, preview: Any) -> tuple[str, Omitted]:
    acc = [0, 0, 0]
    _omitted(full, preview, acc)
    omitted = Omitted(*acc)
    return env.render(_dumps(preview), omitted), omitted


def _fit(env: _Envelope, full: Any, max_bytes: int, max_items: int | None) -> tuple[str, Omitted]:
    """The largest preview of ``full`` whose message fits (``full`` itself did not fit or was cut).

    Bounds that hold for any message of at most ``max_bytes``: no string longer than
    ``max_bytes`` bytes, at most ``max_bytes // 2 + 1`` leaves (each leaf takes a byte and a
    separator). They cap the searches, so a 1 MB result costs a few passes over 1 MB plus
    O(max_bytes) per search step.
    """
    base = _cap_items(full, max_items) if max_items is not None else full
    max_leaves = max_bytes // 2 + 1
    budget = [max_leaves + 1]
    _take(base, budget)  # stops after max_leaves + 1 leaves
    few = budget[0] > 0
    if few:
        text, omitted = _preview_text(env, full, base)
        if _size(text) <= max_bytes:
            return text, omitted
        leaves = max_leaves + 1 - budget[0]
    else:  # every preview that fits drops leaves: keep the first ones only, from the start
        base = _cut_leaves(base, max_leaves)
        leaves = max_leaves
    base = _cap_strings(base, max_bytes)  # longer strings cannot be shown whole anyway
    floor = MIN_STRING_PREVIEW if env.inp.status == "ok" else 0
    best: tuple[str, Omitted] | None = None

    # Shorten strings: the largest per-string limit that fits (binary search; size is monotone).
    if few:
        lo, hi = floor, min(_longest_string(base), max_bytes)
        while lo <= hi:
            mid = (lo + hi) // 2
            text, omitted = _preview_text(env, full, _cap_strings(base, mid))
            if _size(text) <= max_bytes:
                best, lo = (text, omitted), mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
    if env.inp.status == "error":
        raise ValueError(f"max_bytes={max_bytes} is too small for the envelope of this message")

    # Keep only the first N leaves in document order (binary search on N).
    capped = _cap_strings(base, floor)
    lo, hi = 0, min(leaves, max_leaves)
    while lo <= hi:
        mid = (lo + hi) // 2
        text, omitted = _preview_text(env, full, _cut_leaves(capped, mid))
        if _size(text) <= max_bytes:
            best, lo = (text, omitted), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise ValueError(f"max_bytes={max_bytes} is too small for the envelope of this message")
    return best


def _nonce(nonce_key: bytes, invocation_id: str, data: bytes) -> str:
    msg = (
        b"callgate/untrusted/v1\x00" + invocation_id.encode("ascii") + b"\x00" + hashlib.sha256(data).digest()
    )
    return hmac.new(nonce_key, msg, hashlib.sha256).hexdigest()[:NONCE_HEX]


def encode_result(
    inp: EncodeInput, redactor: Redactor, *, continuation_token: str, nonce_key: bytes = b""
) -> EncodedResult:
    """Encode one result as the tool message for the model (steps in the module doc).

    Args:
        inp: the result and its limits.
        redactor: known secrets and patterns (built once at load).
        continuation_token: names the complete data if the message is truncated (minted and
            stored by the caller together with :attr:`EncodedResult.remaining`); 1-256
            printable ASCII characters. Not used when the result fits.
        nonce_key: key of the boundary nonce. Pass a random per-process key (``os.urandom(32)``
            at startup) so no one outside can predict a nonce; with the default ``b""`` the nonce
            still depends on the content (a tool cannot embed it) but anyone holding the result
            can recompute it. Boundaries cannot be forged either way (step 1).

    Raises:
        ValueError: a payload that is not JSON-encodable (non-finite float, too deep), or
            ``max_bytes`` too small for the envelope (ids near their 256-character limit).
        TypeError: a non-JSON type or a non-string object key.
        ResultEncodingError: a known secret in the envelope itself (e.g. the tool call id).
    """
    if not isinstance(continuation_token, str) or _ID.match(continuation_token) is None:
        raise ValueError("continuation_token must be 1-256 printable ASCII characters")

    neutralized = 0
    if inp.status == "ok":
        payload: Any = inp.value
        code, retryable = "", False
        trusted = any(not p for p in (_parse_pointer(q) for q in inp.trusted_paths))
        live = tuple(p for p in (_parse_pointer(q) for q in inp.trusted_paths) if p)
    else:
        payload = inp.value["message"]
        code = inp.value["code"] if _ERROR_CODE.match(inp.value["code"]) else GENERIC_ERROR_CODE
        neutralized += code != inp.value["code"]
        # A committed or possibly committed write is never "retryable" to the model (6.7, 6.9).
        retryable = bool(inp.value.get("retryable", False)) and inp.commit_status not in (
            "COMMITTED",
            "UNKNOWN",
        )
        trusted, live = False, ()

    # Common path: one walk with no cleaning, the strings checked together, one dumps, one
    # render, one scan of the final text. A walk is repeated with neutralization and/or
    # redaction only when a check finds something.
    neutral = False
    full, stats = _build(payload, redactor, neutral=False, redact=False, trusted=trusted, live=live)
    joined = "\n".join(stats.strings)
    if _needs_neutral(joined):
        neutral = True
        full, stats = _build(payload, redactor, neutral=True, redact=False, trusted=trusted, live=live)
        joined = "\n".join(stats.strings)
    redacted = False
    while True:
        placeholder_json = _dumps(full)
        complete = _strip_placeholders(placeholder_json)
        complete_bytes = complete.encode("utf-8")
        nonce = _nonce(nonce_key, inp.invocation_id, complete_bytes)
        env = _Envelope(inp, nonce, continuation_token, len(complete_bytes), code, retryable)
        text = env.render(placeholder_json, Omitted())
        whole = _size(text) <= inp.max_bytes and (
            inp.max_items is None or stats.longest_array <= inp.max_items
        )
        if redacted:
            break
        # The strings themselves are scanned, as written and behind their JSON escapes (a
        # string may hold an escaped form of a secret, whose escaped form in turn is no known
        # form), then the message as written: the envelope's own fields too (behind its escapes
        # the message is the strings again). When the message has to be cut, the uncut data is
        # scanned instead.
        if (
            not redactor.might_match_pattern(joined)
            and not redactor.contains_known_secret(joined)
            and not redactor.contains_known_form(text if whole else complete)
        ):
            break
        full, stats = _build(payload, redactor, neutral=neutral, redact=True, trusted=trusted, live=live)
        redacted = True
    neutralized += stats.neutralized

    omitted = Omitted()
    if not whole:
        text, omitted = _fit(env, full, inp.max_bytes, inp.max_items)
    remaining = complete_bytes if omitted.any else None

    # Final check of the exact bytes (and of the complete data served by pages), and of the
    # redacted strings behind their JSON escapes (what redaction could not take out).
    if (
        (redacted or not whole)
        and redactor.contains_known_form(text)
        or (redacted and redactor.contains_known_secret("\n".join(stats.strings)))
        or (remaining is not None and redacted and redactor.contains_known_form(complete))
    ):
        return _withheld(inp, redactor, nonce, stats.redactions, neutralized)

    message = text.encode("utf-8")
    return EncodedResult(
        message_bytes=message,
        truncated=omitted.any,
        remaining=remaining,
        redactions=stats.redactions,
        content_digest="sha256:" + hashlib.sha256(message).hexdigest(),
        nonce=nonce,
        neutralized=neutralized,
        omitted=omitted,
        data=complete_bytes if inp.status == "ok" else None,
    )


def encode_refusal(
    inp: EncodeInput, redactor: Redactor, *, code: str, message: str, nonce_key: bytes = b""
) -> EncodedResult:
    """The tool message that stands in for a result callgate refuses to hand to the model (e.g.
    ``result_schema_invalid``): an ``error`` message with the sidecar's own ``code`` and
    ``message`` (no data from the tool, so nothing in it is untrusted), ``retryable`` false.
    ``inp.value`` is not read. Raises like :func:`encode_result` when the envelope (ids, tool
    name) carries a known secret or ``max_bytes`` is too small for it."""
    if _ERROR_CODE.match(code) is None:
        raise ValueError("code must be a snake_case error code")
    nonce = _nonce(nonce_key, inp.invocation_id, f"{code}\x00{message}".encode())
    return _withheld(inp, redactor, nonce, 0, 0, code=code, message=message)


def _withheld(
    inp: EncodeInput,
    redactor: Redactor,
    nonce: str,
    redactions: int,
    neutralized: int,
    *,
    code: str = WITHHELD_CODE,
    message: str = "callgate withheld this result: it still contained a known secret after redaction",
) -> EncodedResult:
    content = {
        "type": "tool_result",
        "status": "error",
        "tool": f"{inp.tool_name}@{inp.tool_version}",
        "invocation_id": inp.invocation_id,
        "commit_status": inp.commit_status,
        "nonce": nonce,
        "truncated": False,
        "error": {"code": code, "message": message, "retryable": False},
    }
    text = _dumps({"role": "tool", "tool_call_id": inp.tool_call_id, "content": content})
    if redactor.contains_known_secret(text):
        raise ResultEncodingError("the tool message envelope (ids or tool name) contains a known secret")
    out = text.encode("utf-8")
    if len(out) > inp.max_bytes:
        raise ValueError(f"max_bytes={inp.max_bytes} is too small for the envelope of this message")
    return EncodedResult(
        message_bytes=out,
        truncated=False,
        remaining=None,
        redactions=redactions,
        content_digest="sha256:" + hashlib.sha256(out).hexdigest(),
        nonce=nonce,
        neutralized=neutralized,
        withheld=True,
    )


# --------------------------------------------------------------------------------------------
# Pages of the complete data


def page(
    remaining: bytes,
    offset: int,
    max_bytes: int,
    *,
    tool_call_id: str,
    invocation_id: str,
    token: str,
    nonce: str,
    redactor: Redactor | None = None,
) -> tuple[bytes, int | None]:
    """One page of a truncated result's complete data, as a tool message of at most ``max_bytes``.

    ``remaining`` is :attr:`EncodedResult.remaining`, ``nonce`` :attr:`EncodedResult.nonce`;
    ``offset`` a byte offset into ``remaining`` on a UTF-8 character boundary (0 for the first
    page, then the returned next offset). The page's ``fragment`` is
    ``remaining[offset:next_offset]`` as text, wrapped once in the boundary of ``nonce``; the
    fragments of all pages, concatenated in order, are the complete data's JSON text.
    ``tool_call_id`` is the id of the call that asked for the page.

    Returns:
        ``(message_bytes, next_offset)``; ``next_offset`` is ``None`` on the last page.

    Raises:
        ValueError: a bad offset, id or nonce, ``remaining`` that was not produced by
            :func:`encode_result` (it contains boundary or invisible characters), or
            ``max_bytes`` too small for a page with at least one character.
        ResultEncodingError: ``redactor`` given and a known secret found in the page.
    """
    for label, text in (("tool_call_id", tool_call_id), ("invocation_id", invocation_id), ("token", token)):
        if not isinstance(text, str) or _ID.match(text) is None:
            raise ValueError(f"{label} must be 1-256 printable ASCII characters")
    if not isinstance(nonce, str) or _NONCE.match(nonce) is None:
        raise ValueError("nonce must be the EncodedResult's nonce (12 lowercase hex digits)")
    total = len(remaining)
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < total:
        raise ValueError("offset must be within the remaining data")
    if remaining[offset] & 0xC0 == 0x80:
        raise ValueError("offset is not on a UTF-8 character boundary")

    opener, closer = open_marker(nonce), close_marker(nonce)

    def build(end: int) -> bytes:
        fragment = remaining[offset:end].decode("utf-8")
        if _needs_neutral(fragment):
            raise ValueError("remaining data was not produced by encode_result")
        content = {
            "type": "tool_result_page",
            "invocation_id": invocation_id,
            "nonce": nonce,
            "token": token,
            "offset": offset,
            "next_offset": end if end < total else None,
            "total_bytes": total,
            "fragment": opener + fragment + closer,
        }
        return _dumps({"role": "tool", "tool_call_id": tool_call_id, "content": content}).encode("utf-8")

    def boundary(end: int) -> int:
        while end < total and remaining[end] & 0xC0 == 0x80:
            end -= 1
        return end

    best: tuple[bytes, int] | None = None
    lo, hi = offset + 1, min(total, offset + max_bytes)
    while lo <= hi:
        mid = (lo + hi) // 2
        end = boundary(mid)
        if end <= offset:
            lo = mid + 1
            continue
        candidate = build(end)
        if len(candidate) <= max_bytes:
            best, lo = (candidate, end), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise ValueError(f"max_bytes={max_bytes} is too small for a page")
    message, end = best
    if redactor is not None and redactor.contains_known_secret(message.decode("utf-8")):
        raise ResultEncodingError("a result page contains a known secret")
    return message, (end if end < total else None)


# --------------------------------------------------------------------------------------------
# JSON Schemas (2020-12) of the three message kinds; docs/RESULT-ENCODING.md shows them verbatim.

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_ENVELOPE_COMMON: dict[str, Any] = {
    "type": {"const": "tool_result"},
    "tool": {"type": "string", "pattern": "^[!-?A-~]+@[!-~]+$"},
    "invocation_id": {"type": "string", "minLength": 1},
    "commit_status": {"enum": list(COMMIT_STATUSES)},
    "nonce": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
    "truncated": {"type": "boolean"},
    "continuation": {
        "type": "object",
        "required": ["token", "offset", "remaining_bytes"],
        "additionalProperties": False,
        "properties": {
            "token": {"type": "string", "minLength": 1},
            "offset": {"const": 0},
            "remaining_bytes": {"type": "integer", "minimum": 1},
        },
    },
    "omitted": {
        "type": "object",
        "required": ["array_items", "object_members", "strings_shortened"],
        "additionalProperties": False,
        "properties": {
            "array_items": {"type": "integer", "minimum": 0},
            "object_members": {"type": "integer", "minimum": 0},
            "strings_shortened": {"type": "integer", "minimum": 0},
        },
    },
}
_TRUNCATION_RULE: dict[str, Any] = {
    "if": {"properties": {"truncated": {"const": True}}},
    "then": {"required": ["continuation", "omitted"]},
    "else": {"not": {"anyOf": [{"required": ["continuation"]}, {"required": ["omitted"]}]}},
}


def _tool_message(title: str, content: dict[str, Any]) -> dict[str, Any]:
    """The envelope every tool message shares: role, tool_call_id and the given content."""
    return {
        "$schema": _DIALECT,
        "title": title,
        "type": "object",
        "required": ["role", "tool_call_id", "content"],
        "additionalProperties": False,
        "properties": {
            "role": {"const": "tool"},
            "tool_call_id": {"type": "string", "minLength": 1},
            "content": content,
        },
    }


def _message_schema(title: str, status: str, body_name: str, body: dict[str, Any]) -> dict[str, Any]:
    return _tool_message(
        title,
        {
            "type": "object",
            "required": [
                "type",
                "status",
                "tool",
                "invocation_id",
                "commit_status",
                "nonce",
                "truncated",
                body_name,
            ],
            "additionalProperties": False,
            "properties": {**_ENVELOPE_COMMON, "status": {"const": status}, body_name: body},
            **_TRUNCATION_RULE,
        },
    )


OK_MESSAGE_SCHEMA: dict[str, Any] = _message_schema("callgate tool message: success", "ok", "data", {})
"""Success: ``content.status == "ok"`` and ``content.data`` (any JSON value)."""

ERROR_MESSAGE_SCHEMA: dict[str, Any] = _message_schema(
    "callgate tool message: error",
    "error",
    "error",
    {
        "type": "object",
        "required": ["code", "message", "retryable"],
        "additionalProperties": False,
        "properties": {
            "code": {"type": "string", "pattern": "^[a-z][a-z0-9_.]{0,63}$"},
            "message": {"type": "string"},
            "retryable": {"type": "boolean"},
        },
    },
)
"""Error: ``content.status == "error"`` and ``content.error`` (code, message, retryable)."""

PAGE_MESSAGE_SCHEMA: dict[str, Any] = _tool_message(
    "callgate tool message: page of a truncated result",
    {
        "type": "object",
        "required": [
            "type",
            "invocation_id",
            "nonce",
            "token",
            "offset",
            "next_offset",
            "total_bytes",
            "fragment",
        ],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "tool_result_page"},
            "invocation_id": {"type": "string", "minLength": 1},
            "nonce": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
            "token": {"type": "string", "minLength": 1},
            "offset": {"type": "integer", "minimum": 0},
            "next_offset": {"type": ["integer", "null"], "minimum": 1},
            "total_bytes": {"type": "integer", "minimum": 1},
            "fragment": {"type": "string"},
        },
    },
)
"""A page: ``content.type == "tool_result_page"``, a wrapped ``fragment`` of the complete data."""
