"""ECMA-262 regular expressions for ``pattern``, ``patternProperties`` and format ``regex``.

JSON Schema patterns are ECMA-262 regular expressions with Unicode ("u" flag) semantics, which
differ from Python ``re`` in ways that matter for a guard: Python ``$`` also matches before a
final "\\n", ``\\d``/``\\w``/``\\b`` are Unicode-aware, ``.`` matches "\\r" and U+2028/U+2029, and
there are no ``\\p{...}`` escapes. A pattern is therefore parsed here with the ECMA-262 (2025,
Unicode mode) grammar and early errors, then translated ONCE into an equivalent Python
pattern built only from explicit code-point classes and constructs whose Python semantics are
the ECMA ones. Anything that cannot be translated faithfully is refused at compile time
(:class:`RegexError` with ``syntax=False``) -- never matched approximately.

Entry points: :func:`compile_ecma` (translate + compile, cached), :func:`ecma_search`
(``RegExp(source, "u").test(text)``) and :func:`ecma_syntax_error` (the grammar check behind
format ``regex``). Why this translator and not the ``regress`` package: see
docs/json-schema-conformance.md, "ECMA-262 patterns: translator vs regress".
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

__all__ = ["RegexError", "compile_ecma", "ecma_search", "ecma_syntax_error"]


class RegexError(Exception):
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
            raise RegexError(f"{self.describe()} is not supported", syntax=False)
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

    def _error(self, message: str, at: int) -> RegexError:
        return RegexError(f"{message} at offset {at}", syntax=True)

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
                    raise RegexError(
                        f"backreference \\{ref.number} to a group that does not exist", syntax=True
                    )
                ref.indices = [int(digits)]
            else:
                assert ref.name is not None
                if ref.name not in self.names:
                    raise RegexError(
                        f"backreference \\k<{ref.name}> to a group name that does not exist",
                        syntax=True,
                    )
                ref.indices = [index for _, index in self.names[ref.name]]
        for name, entries in self.names.items():
            # Entries are in source order (= tree order): a clash between any two of them
            # implies a clash between two neighbours, so only neighbours are compared.
            for (place_a, _), (place_b, _) in itertools.pairwise(entries):
                if not self._other_alternative(place_a, place_b):
                    raise RegexError(f"duplicate group name <{name}>", syntax=True)

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


def ecma_syntax_error(source: str) -> str | None:
    """None if ``source`` is a valid ECMA-262 (Unicode mode) pattern, else why not."""
    try:
        _EcmaParser(source).parse()
    except RegexError as err:
        return err.message
    return None


def _translate_ecma(source: str) -> str:
    """The Python ``re`` source equivalent to ECMA-262 pattern ``source``.

    Raises :class:`RegexError` (``syntax=True``) for an invalid pattern and (``syntax=False``)
    for a valid one that cannot be matched faithfully or is refused by the ReDoS heuristic."""
    translator = _Translator(_EcmaParser(source).parse())
    try:
        translator.check()
        if translator.problems:
            raise RegexError("; ".join(dict.fromkeys(translator.problems)), syntax=False)
        return translator.emit()
    except RecursionError:
        raise RegexError("pattern is too deeply nested", syntax=False) from None


@functools.lru_cache(maxsize=2048)
def compile_ecma(source: str) -> re.Pattern[str]:
    """Compiled Python pattern with the ECMA-262 semantics of ``source`` (cached: schema
    patterns are translated once, at schema compile time)."""
    translated = _translate_ecma(source)
    try:
        return re.compile(translated)
    except re.error as err:
        reason = "variable-width lookbehind" if "look-behind" in str(err) else f"Python re: {err.msg}"
        raise RegexError(f"{reason} is not supported", syntax=False) from None
    except (OverflowError, RecursionError, ValueError) as err:
        raise RegexError(f"pattern too large or too deeply nested ({err})", syntax=False) from None


def ecma_search(source: str, text: str) -> bool:
    """ECMA-262 ``RegExp(source, "u").test(text)``; a pattern that cannot be compiled never
    matches (fail closed; compile refuses such schemas before they are used)."""
    try:
        compiled = compile_ecma(source)
    except RegexError:
        return False
    return compiled.search(text) is not None
