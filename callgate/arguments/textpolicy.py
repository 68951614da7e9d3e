"""A ToolSpec's text policy (issue 33, spec 6.6: what the approver sees is what runs): which
string arguments are **identifiers**, which must not hide anything, and which are free text.

An identifier (an id, a path, an e-mail address, a URL, a name the resource template puts into
the policy's resource) with hidden characters (default-ignorable, bidi controls, controls, format, private-use and
unassigned code points: :mod:`callgate.arguments.unitext`) or letters of
writing systems with no script in common (UTS #39, :mod:`callgate.arguments.unitext`) is refused at
propose with ``text_refused``, one violation per place naming its JSON pointer. A ToolSpec may
ask for hidden characters to be removed instead (``identifier_strip``: recorded in the
``normalized`` event as ``text_policy:<pointer>``; mixed scripts are refused either way). Free
text keeps them; every confirmation surface shows them visibly.

Declared in the ToolSpec::

    "text_policy": {"/calendar_id": "identifier", "/title": "free", "/tags/*": "identifier_strip"}

Pointers are the normalizers' (RFC 6901, ``*`` for every item of an array). A string the member
does not name is an identifier when its property is a placeholder of ``resource_template``, has
an identifier ``format`` (:data:`IDENTIFIER_FORMATS`), or has an identifier's name
(:data:`IDENTIFIER_NAME`: ``calendar_id``, ``path``, ``email``, ``url``...); ``"free"`` turns that
off. docs/POLICIES.md and docs/NORMALIZATION.md describe it.

Runs before the normalizers, on both cores: the compiled core does not know the policy, so a
proposal it would act on is answered by the Python stages (:func:`needs_python`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from callgate.arguments import unitext
from callgate.arguments.normalize import _FieldError, _parse_pointer, _Resolved, _Seg, _Unchanged, _update
from callgate.base import jsonpointer
from callgate.base.errors import RejectedError, Violation, text_refused, toolspec_invalid
from callgate.base.model import JSONValue

__all__ = ["IDENTIFIER_FORMATS", "IDENTIFIER_NAME", "TextClass", "TextPolicy"]


class TextClass(str, Enum):
    """How one string argument is treated."""

    IDENTIFIER = "identifier"
    """Hidden characters or mixed scripts: refused (``text_refused``)."""
    IDENTIFIER_STRIP = "identifier_strip"
    """Hidden characters removed (a normalization, recorded); mixed scripts refused."""
    FREE = "free"
    """Kept as proposed; shown visibly on every confirmation surface."""


IDENTIFIER_FORMATS: Final = frozenset(
    {"email", "idn-email", "hostname", "idn-hostname", "uri", "uri-reference", "iri", "iri-reference",
     "uri-template", "uuid", "json-pointer", "relative-json-pointer", "ipv4", "ipv6"}
)  # fmt: skip
"""JSON Schema formats whose strings are identifiers by default."""
IDENTIFIER_NAME: Final = re.compile(
    r"(?:^|_)(?:id|ids|key|path|paths|file|filename|dir|directory|email|emails|url|urls|uri|uris|"
    r"host|hostname|domain|account|username|login|recipient|recipients|repo|repository|branch|"
    r"channel|handle)$",
    re.IGNORECASE,
)
"""Property names whose strings are identifiers by default (``calendar_id``, ``file_path``, ...)."""

_KEYWORD: Final = "text_policy"
_PLAIN_JSON: Final = re.compile(rb"[\t\n\r\x20-\x7e]*")
"""JSON text that can hold no hidden character unless escaped (no DEL, no other control byte)."""


def _is_string_schema(schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    return t == "string" or (isinstance(t, list) and "string" in t) or "format" in schema


def _defaults(schema: Any, template_fields: frozenset[str], pointer: str = "") -> dict[str, TextClass]:
    """Identifier pointers of ``schema`` by name, format and the resource template."""
    out: dict[str, TextClass] = {}
    if not isinstance(schema, Mapping):
        return out
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            if not isinstance(name, str) or not isinstance(sub, Mapping):
                continue
            here = f"{pointer}/{jsonpointer.escape(name)}"
            named = (
                bool(IDENTIFIER_NAME.search(name))
                or here in template_fields
                or (not pointer and name in template_fields)
            )
            out.update(_leaf_defaults(sub, template_fields, here, named))
    return out


def _leaf_defaults(
    schema: Mapping[str, Any], fields: frozenset[str], here: str, named: bool
) -> dict[str, TextClass]:
    out: dict[str, TextClass] = {}
    if _is_string_schema(schema) and (named or schema.get("format") in IDENTIFIER_FORMATS):
        out[here] = TextClass.IDENTIFIER
    items = schema.get("items")
    if isinstance(items, Mapping):
        out.update(_leaf_defaults(items, fields, f"{here}/*", named))
        out.update(_defaults(items, fields, f"{here}/*"))
    out.update(_defaults(schema, fields, here))
    return out


def _leaf(kind: TextClass) -> Any:
    def leaf(value: JSONValue, rctx: _Resolved) -> JSONValue | _Unchanged:
        if not isinstance(value, str) or (value.isascii() and value.isprintable()):
            return _UNCHANGED
        hidden = unitext.hidden_positions(value)
        out = value
        if hidden:
            if kind is TextClass.IDENTIFIER:
                points = ", ".join(sorted({f"U+{ord(value[i]):04X}" for i in hidden}))
                raise _FieldError(f"an identifier holds hidden characters ({points}): refused")
            drop = set(hidden)
            out = unicodedata.normalize("NFC", "".join(c for i, c in enumerate(value) if i not in drop))
        scripts = unitext.mixed_scripts(out)
        if scripts:
            raise _FieldError(f"an identifier mixes scripts ({' + '.join(scripts)}): refused")
        return _UNCHANGED if out == value else out

    return leaf


_UNCHANGED: Final = _Unchanged()
_NO_CTX: Final = None


@dataclass(frozen=True, slots=True)
class _Rule:
    pointer: str
    segs: tuple[_Seg, ...]
    kind: TextClass
    leaf: Any


class TextPolicy:
    """The compiled text policy of one tool version (immutable)."""

    __slots__ = ("declared", "rules")

    def __init__(self, rules: tuple[_Rule, ...], declared: Mapping[str, TextClass]) -> None:
        self.rules = rules
        self.declared = dict(declared)

    @property
    def identifiers(self) -> tuple[str, ...]:
        """The pointers checked (declared or by default), in order."""
        return tuple(r.pointer for r in self.rules)

    @classmethod
    def build(
        cls, declared: Any, input_schema: Any, template_fields: tuple[str, ...], *, source: str = ""
    ) -> TextPolicy:
        """Compile the ``text_policy`` member (``toolspec_invalid`` naming each bad entry)."""
        if declared is None:
            declared = {}
        if not isinstance(declared, Mapping):
            raise toolspec_invalid(
                "text_policy must be an object {pointer: class}",
                source=source,
                violations=[Violation("/text_policy", "must be an object", _KEYWORD)],
            )
        problems: list[Violation] = []
        classes: dict[str, TextClass] = {}
        for pointer, value in declared.items():
            where = f"/text_policy/{jsonpointer.escape(pointer)}"
            try:
                _parse_pointer(pointer)
            except ValueError as exc:
                problems.append(Violation(where, str(exc), _KEYWORD))
                continue
            try:
                classes[pointer] = TextClass(value)
            except ValueError:
                known = ", ".join(c.value for c in TextClass)
                problems.append(Violation(where, f"must be one of {known}", _KEYWORD))
        if problems:
            raise toolspec_invalid(
                f"{len(problems)} invalid text_policy entr{'y' if len(problems) == 1 else 'ies'}",
                source=source,
                violations=problems,
            )
        merged = _defaults(input_schema, frozenset(template_fields))
        merged.update(classes)
        rules = tuple(
            _Rule(p, _parse_pointer(p), k, _leaf(k))
            for p, k in sorted(merged.items())
            if k is not TextClass.FREE
        )
        return cls(rules, classes)

    def apply(self, value: dict[str, JSONValue]) -> tuple[dict[str, JSONValue], tuple[str, ...]]:
        """``value`` with hidden characters removed where the policy says so, and the names
        (``text_policy:<pointer>``) of the rules that changed something.

        Raises:
            RejectedError: ``text_refused``, one violation per refused place (messages name
                code points and scripts, never the value).
        """
        current: JSONValue = value
        applied: list[str] = []
        errors: list[Violation] = []
        for rule in self.rules:
            new = _update(current, rule.segs, 0, rule.leaf, _NO_CTX, "", _KEYWORD, errors)  # type: ignore[arg-type]
            if new is not current:
                applied.append(f"{_KEYWORD}:{rule.pointer}")
                current = new
        if errors:
            raise text_refused(f"{len(errors)} identifier(s) hide characters or mix scripts", errors)
        assert isinstance(current, dict)
        return current, tuple(applied)

    def needs_python(self, raw: bytes, parsed: dict[str, JSONValue] | None) -> bool:
        """Whether this proposal, which the compiled core accepted, is one the policy refuses or
        changes (the Python stages then answer it). Printable ASCII bytes (and JSON's whitespace)
        without ``\\u`` escapes never are; a raw DEL (0x7F, which JSON allows in a string) is."""
        if not self.rules or (_PLAIN_JSON.fullmatch(raw) is not None and b"\\u" not in raw):
            return False
        value = parsed if parsed is not None else json.loads(raw)
        try:
            return bool(self.apply(value)[1])
        except RejectedError:
            return True


EMPTY: Final = TextPolicy((), {})
