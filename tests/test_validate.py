"""Tests of the callgate.arguments.validate package: JSON Schema 2020-12 conformance + callgate's own rules.

The official JSON-Schema-Test-Suite lives outside the repo (``../shared/conformance/json-schema``).
If it is missing these tests FAIL (they never skip): conformance is a release requirement.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from callgate.arguments.validate import (
    DIALECT_2020_12,
    EXCLUDED_FORMATS,
    SUPPORTED_FORMATS,
    CompiledSchema,
    ecma262,
    formats,
    keywords,
)
from callgate.arguments.validate import schema as schema_mod
from callgate.base.errors import ErrorCode, LoadError, RejectedError, Violation
from callgate.base.model import ParsedArguments, ValidatedArguments

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "json-schema"
REQUIRED_DIR = CORPUS / "tests" / "draft2020-12"
FORMAT_DIR = REQUIRED_DIR / "optional" / "format"
REMOTES_DIR = CORPUS / "remotes"
REMOTE_BASE = "http://localhost:1234/"  # where the official harness serves remotes/

# --------------------------------------------------------------------------------------
# Deliberate divergences from the required suite. Each entry is CHECKED (not skipped): the case
# must produce exactly the outcome given here. Outcomes: "valid", "invalid",
# "load_error:<ErrorCode value>".
# --------------------------------------------------------------------------------------

R_FORMAT = "callgate turns format assertion on, per spec 6.4/6.14"
R_VOCABULARY = (
    "custom metaschemas/vocabularies are refused: validation is bound to the one 2020-12 dialect (spec 6.4)"
)

_ANNOTATION_ONLY_FORMATS = (
    "email", "idn-email", "ipv4", "ipv6", "idn-hostname", "hostname", "date", "date-time", "time",
    "json-pointer", "relative-json-pointer", "iri", "iri-reference", "uri", "uri-reference",
    "uri-template", "uuid", "duration", "regex",
)  # fmt: skip
_ALL_STRING_FORMATS_IGNORE = ("integers", "floats", "objects", "arrays", "booleans", "nulls")

EXCLUSIONS: dict[tuple[str, str, str], tuple[str, str]] = {
    # format.json: invalid values are "only an annotation by default"; we assert.
    **{
        (
            "format.json",
            f"{fmt} format",
            f"invalid {fmt} string is only an annotation by default",
        ): ("invalid", R_FORMAT)
        for fmt in _ANNOTATION_ONLY_FORMATS
    },
    # Custom metaschemas with $vocabulary.
    **{
        ("vocabulary.json", case, t): ("load_error:toolspec_invalid", R_VOCABULARY)
        for case, tests in {
            "schema that uses custom metaschema with with no validation vocabulary": (
                "applicator vocabulary still works",
                "no validation: valid number",
                "no validation: invalid number, but it still validates",
            ),
            "ignore unrecognized optional vocabulary": ("string value", "number value"),
        }.items()
        for t in tests
    },
}

# --------------------------------------------------------------------------------------
# Corpus loading
# --------------------------------------------------------------------------------------

MISSING = "CORPUS-MISSING"


@cache
def remotes_registry() -> Registry[Any]:
    """The remotes/ documents preloaded at the harness URL. Test-only; nothing is fetched."""
    pairs = []
    for path in sorted(REMOTES_DIR.rglob("*.json")):
        uri = REMOTE_BASE + path.relative_to(REMOTES_DIR).as_posix()
        contents = json.loads(path.read_text(encoding="utf-8"))
        pairs.append((uri, Resource.from_contents(contents, default_specification=DRAFT202012)))
    return Registry().with_resources(pairs)


@cache
def load_file(path: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return cases


_compiled: dict[tuple[Path, int], CompiledSchema | LoadError] = {}


def compiled_case(path: Path, index: int) -> CompiledSchema | LoadError:
    """Compile each case once (many tests share it)."""
    key = (path, index)
    if key not in _compiled:
        schema = load_file(path)[index]["schema"]
        try:
            _compiled[key] = CompiledSchema.compile(schema, registry=remotes_registry())
        except LoadError as err:
            _compiled[key] = err
    return _compiled[key]


def outcome(path: Path, case_index: int, data: Any) -> str:
    compiled = compiled_case(path, case_index)
    if isinstance(compiled, LoadError):
        return f"load_error:{compiled.code.value}"
    return "invalid" if compiled.validate_value(data) else "valid"


def suite_params(files: list[Path]) -> Iterator[Any]:
    for path in files:
        for ci, case in enumerate(load_file(path)):
            for ti, test in enumerate(case["tests"]):
                yield pytest.param(
                    path, ci, ti, id=f"{path.stem}::{case['description']}::{test['description']}"
                )


def required_files() -> list[Path]:
    return sorted(REQUIRED_DIR.glob("*.json")) if REQUIRED_DIR.is_dir() else []


def required_params() -> list[Any]:
    params = list(suite_params(required_files()))
    return params or [pytest.param(MISSING, 0, 0, id=MISSING)]


def format_params() -> list[Any]:
    params: list[Any] = []
    for fmt in sorted(SUPPORTED_FORMATS):
        path = FORMAT_DIR / f"{fmt}.json"
        if not path.is_file():
            params.append(pytest.param(path, 0, 0, id=f"{fmt}::{MISSING}"))
            continue
        params.extend(suite_params([path]))
    return params


def _require_corpus(path: Any) -> Path:
    if path == MISSING or not Path(path).is_file():
        pytest.fail(f"JSON-Schema-Test-Suite corpus missing at {CORPUS} ({path})")
    return Path(path)


# --------------------------------------------------------------------------------------
# 1. required draft2020-12 suite
# --------------------------------------------------------------------------------------


def test_corpus_present() -> None:
    assert REQUIRED_DIR.is_dir(), f"missing {REQUIRED_DIR}"
    assert len(required_files()) >= 40, "required draft2020-12 files missing"
    assert FORMAT_DIR.is_dir(), f"missing {FORMAT_DIR}"
    assert REMOTES_DIR.is_dir(), f"missing {REMOTES_DIR}"


@pytest.mark.parametrize(("path", "case_index", "test_index"), required_params())
def test_required_suite(path: Any, case_index: int, test_index: int) -> None:
    path = _require_corpus(path)
    case = load_file(path)[case_index]
    test = case["tests"][test_index]
    key = (path.name, case["description"], test["description"])
    expected = "valid" if test["valid"] else "invalid"
    if key in EXCLUSIONS:
        expected = EXCLUSIONS[key][0]
    assert outcome(path, case_index, test["data"]) == expected


def test_exclusions_are_current() -> None:
    """Every exclusion names an existing test whose official expectation differs from ours."""
    present = {
        (p.name, c["description"], t["description"]): t["valid"]
        for p in required_files()
        for c in load_file(p)
        for t in c["tests"]
    }
    stale = [key for key in EXCLUSIONS if key not in present]
    assert not stale, f"exclusions name unknown tests: {stale}"
    for key, (ours, reason) in EXCLUSIONS.items():
        official = "valid" if present[key] else "invalid"
        assert ours != official, f"not a divergence, drop it: {key}"
        assert reason


# --------------------------------------------------------------------------------------
# 2. optional/format/<fmt>.json for every supported format, assertion on
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "case_index", "test_index"), format_params())
def test_format_suite(path: Any, case_index: int, test_index: int) -> None:
    path = _require_corpus(path)
    test = load_file(path)[case_index]["tests"][test_index]
    assert outcome(path, case_index, test["data"]) == ("valid" if test["valid"] else "invalid")


def test_supported_formats() -> None:
    assert SUPPORTED_FORMATS == {
        "date", "date-time", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex",
    }  # fmt: skip
    assert dict(EXCLUDED_FORMATS) == {}
    assert not SUPPORTED_FORMATS & set(EXCLUDED_FORMATS)


GARBAGE = {"regex": "garbage ( \u0000 value"}  # any plain string is a valid regex


@pytest.mark.parametrize("fmt", sorted(SUPPORTED_FORMATS))
def test_supported_format_rejects_garbage(fmt: str) -> None:
    """The field-notes failure mode: a 'supported' format that accepts anything."""
    compiled = CompiledSchema.compile({"format": fmt})
    assert compiled.validate_value(GARBAGE.get(fmt, "garbage \u0000 value")) != []
    assert compiled.validate_value(12) == []  # formats only constrain strings


@pytest.mark.parametrize("fmt", sorted({*EXCLUDED_FORMATS, "unknown", "color", "int32", "binary"}))
def test_unsupported_format_is_refused(fmt: str) -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile({"format": fmt})
    assert exc.value.code is ErrorCode.UNSUPPORTED_FORMAT


def test_python_re_is_not_ecma262_but_the_regex_format_is() -> None:
    """Why 'regex' needs callgate's own parser: Python re disagrees with
    format/ecmascript-regex.json, the ECMA-262 checker agrees with every case."""
    import re

    disagree = 0
    for case in load_file(_require_corpus(FORMAT_DIR / "ecmascript-regex.json")):
        for test in case["tests"]:
            try:
                re.compile(test["data"])
                python_ok = True
            except re.error:
                python_ok = False
            disagree += python_ok != test["valid"]
            assert formats.is_regex(test["data"]) is test["valid"], test["data"]
    assert disagree > 0


FORMAT_EDGE_CASES: list[tuple[str, str, bool]] = [
    ("date", "2026-07-20", True),
    ("date", "2026-02-30", False),
    ("date", "2024-02-29", True),
    ("date", "2100-02-29", False),
    ("date", "2026-07-20\n", False),
    ("date", "2026-07-2\u0661", False),
    ("date", "20260720", False),
    ("date-time", "2026-07-19T14:00:00+08:00", True),
    ("date-time", "2026-07-19t14:00:00z", True),
    ("date-time", "2026-07-19T14:00:00", False),
    ("date-time", "2026-07-19 14:00:00Z", False),
    ("date-time", "2026-07-19T14:00:00.5+08:00\n", False),
    ("date-time", "garbage", False),
    ("time", "23:59:60Z", True),
    ("time", "00:59:60+01:00", True),
    ("time", "23:59:60+01:00", False),
    ("time", "14:00", False),
    ("duration", "P1Y2M3DT4H5M6S", True),
    ("duration", "p1d", False),
    ("duration", "PT1.5S", False),
    ("email", "a.b+c@example.com", True),
    ("email", "a@b@example.com", False),
    ("email", "a@example.com\n", False),
    ("email", "a@-example.com", False),
    ("email", "a@[IPv6:2001:db8::1]", True),
    ("email", "a@[1.2.3.04]", False),
    ("email", "\u00e9@example.com", False),
    ("idn-email", "\u00e9@example.com", True),
    ("email", "x" * 65 + "@example.com", False),
    ("hostname", "EXAMPLE.com", True),
    ("hostname", "example.com\n", False),
    ("hostname", "a" * 64 + ".com", False),
    ("hostname", "\u00e9xample.com", False),
    ("idn-hostname", "\u00e9xample.com", True),
    ("idn-hostname", "\u00c9xample.com", False),
    ("ipv4", "127.0.0.1", True),
    ("ipv4", "127.0.0.1\n", False),
    ("ipv4", "\u0661.1.1.1", False),
    ("ipv4", "0127.0.0.1", False),
    ("ipv6", "fe80::1%eth0", False),
    ("ipv6", "::ffff:192.168.0.1", True),
    ("ipv6", "::\u0661", False),
    ("ipv6", "::1\n", False),
    ("uuid", "{2eb8aa08-aa98-11ea-b4aa-73b441d16380}", False),
    ("uuid", "urn:uuid:2eb8aa08-aa98-11ea-b4aa-73b441d16380", False),
    ("uri", "https://example.com/a b", False),
    ("uri", "https://example.com/\n", False),
    ("uri", "https://[v1.x]/", True),
    ("uri", "https://[::1%25eth0]/", False),
    ("uri", "javascript:alert(1)", True),  # syntax only: schemes are not policed here
    ("iri", "https://\u00e9.example/\u00e9?q=\ue000", True),
    ("iri", "https://\u00e9.example/\ue000", False),
    ("uri-template", "/users/{id}{?fields*,limit:3}", True),
    ("uri-template", "/users/{!id}", False),
    ("json-pointer", "/a/~0/~1", True),
    ("json-pointer", "/a/~", False),
    ("relative-json-pointer", "0+1/a", True),
]


@pytest.mark.parametrize(
    ("fmt", "value", "valid"),
    FORMAT_EDGE_CASES,
    ids=[f"{f}:{v!r}" for f, v, _ in FORMAT_EDGE_CASES],
)
def test_format_edge_cases(fmt: str, value: str, valid: bool) -> None:
    compiled = CompiledSchema.compile({"format": fmt})
    violations = compiled.validate_value(value)
    assert (violations == []) is valid, violations
    if not valid:
        assert violations == [
            Violation(pointer="", message=f"value does not match format '{fmt}'", keyword="format")
        ]


# --------------------------------------------------------------------------------------
# 3. compile-time rules
# --------------------------------------------------------------------------------------

WEATHER = {
    "$schema": DIALECT_2020_12,
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "date": {"type": "string", "format": "date"},
    },
    "required": ["city", "date"],
    "additionalProperties": False,
}

UNKNOWN_FORMAT_SCHEMAS: list[tuple[str, dict[str, Any], str]] = [
    ("top level", {"type": "string", "format": "made-up"}, "/format"),
    ("property", {"properties": {"a": {"format": "made-up"}}}, "/properties/a/format"),
    (
        "deep in $defs and items",
        {"$defs": {"d": {"items": {"properties": {"x": {"format": "made-up"}}}}}},
        "/$defs/d/items/properties/x/format",
    ),
    ("prefixItems", {"prefixItems": [True, {"format": "made-up"}]}, "/prefixItems/1/format"),
    (
        "allOf/anyOf/oneOf/not",
        {"allOf": [{"anyOf": [{"oneOf": [{"not": {"format": "made-up"}}]}]}]},
        "/allOf/0/anyOf/0/oneOf/0/not/format",
    ),
    (
        "if/then/else",
        {"if": {"type": "string"}, "then": {"format": "date"}, "else": {"format": "made-up"}},
        "/else/format",
    ),
    (
        "dependentSchemas/patternProperties",
        {"dependentSchemas": {"a": {"patternProperties": {"^x": {"format": "made-up"}}}}},
        "/dependentSchemas/a/patternProperties/^x/format",
    ),
    (
        "additionalProperties/propertyNames/contains",
        {"additionalProperties": {"propertyNames": {"format": "made-up"}}},
        "/additionalProperties/propertyNames/format",
    ),
    (
        "unevaluated*/contentSchema",
        {"unevaluatedItems": {"contentSchema": {"format": "made-up"}}},
        "/unevaluatedItems/contentSchema/format",
    ),
    (
        "pointer escaping",
        {"properties": {"a/b~c": {"format": "made-up"}}},
        "/properties/a~1b~0c/format",
    ),
    (
        "reached only through $ref into an unknown keyword",
        {"$ref": "#/x-extra/thing", "x-extra": {"thing": {"format": "made-up"}}},
        "/$ref",
    ),
]


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [pytest.param(s, p, id=name) for name, s, p in UNKNOWN_FORMAT_SCHEMAS],
)
def test_unknown_format_is_load_error(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(schema, source="tools/x.yaml:12")
    err = exc.value
    assert err.code is ErrorCode.UNSUPPORTED_FORMAT
    assert err.source == "tools/x.yaml:12"
    assert [v.pointer for v in err.violations] == [pointer]
    assert err.violations[0].keyword == "format"


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"format": {"type": "string"}}},  # a property NAMED format
        {"enum": [{"format": "made-up"}]},  # data, not a keyword
        {"const": {"format": "made-up"}, "default": {"format": "made-up"}},
        {"examples": [{"format": "made-up"}]},
        {"x-unreferenced": {"format": "made-up"}},  # unknown keyword, never evaluated
    ],
)
def test_format_lookalikes_are_not_keywords(schema: dict[str, Any]) -> None:
    CompiledSchema.compile(schema)


INVALID_SCHEMAS: list[tuple[str, Any, ErrorCode, str]] = [
    ("type is a number", {"type": 5}, ErrorCode.TOOLSPEC_INVALID, "/type"),
    ("minLength negative", {"minLength": -1}, ErrorCode.TOOLSPEC_INVALID, "/minLength"),
    ("required not array", {"required": "x"}, ErrorCode.TOOLSPEC_INVALID, "/required"),
    ("bad pattern", {"properties": {"a": {"pattern": "("}}}, ErrorCode.TOOLSPEC_INVALID,
     "/properties/a/pattern"),
    ("draft-07 $schema", {"$schema": "http://json-schema.org/draft-07/schema#"},
     ErrorCode.TOOLSPEC_INVALID, "/$schema"),
    ("2019-09 $schema", {"$schema": "https://json-schema.org/draft/2019-09/schema"},
     ErrorCode.TOOLSPEC_INVALID, "/$schema"),
    ("embedded resource switches dialect",
     {"$defs": {"old": {"$id": "urn:old", "$schema": "http://json-schema.org/draft-07/schema#"}}},
     ErrorCode.TOOLSPEC_INVALID, "/$defs/old/$schema"),
    ("dangling local $ref", {"$ref": "#/$defs/nowhere"}, ErrorCode.TOOLSPEC_INVALID, "/$ref"),
    ("dangling anchor", {"properties": {"a": {"$ref": "#nope"}}}, ErrorCode.TOOLSPEC_INVALID,
     "/properties/a/$ref"),
    ("remote $ref", {"$ref": "http://example.com/x.json"}, ErrorCode.TOOLSPEC_INVALID, "/$ref"),
    ("remote $dynamicRef", {"$dynamicRef": "https://example.com/s#meta"},
     ErrorCode.TOOLSPEC_INVALID, "/$dynamicRef"),
    ("not a schema", ["type", "string"], ErrorCode.TOOLSPEC_INVALID, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "code", "pointer"),
    [pytest.param(s, c, p, id=name) for name, s, c, p in INVALID_SCHEMAS],
)
def test_invalid_schema_is_load_error(schema: Any, code: ErrorCode, pointer: str) -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(schema, source="tools/weather.yaml:3")
    assert exc.value.code is code
    assert exc.value.source == "tools/weather.yaml:3"
    assert pointer in [v.pointer for v in exc.value.violations]


def test_wrong_dialect_argument() -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(WEATHER, dialect="http://json-schema.org/draft-07/schema#")
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every network entry point record the attempt and blow up."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def boom(*args: Any, **kwargs: Any) -> Any:
            attempts.append(name)
            raise AssertionError(f"network I/O attempted via {name}")

        return boom

    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(urllib.request, "urlopen", refuse("urllib.request.urlopen"))
    return attempts


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "http://example.com/x.json"},
        {"properties": {"a": {"$ref": "https://example.com/schemas/a.json#/$defs/b"}}},
        {"$id": "https://example.com/root.json", "$ref": "other.json"},
        {"allOf": [{"$dynamicRef": "http://example.com/x.json#meta"}]},
    ],
)
def test_remote_ref_never_fetches(no_network: list[str], schema: dict[str, Any]) -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(schema)
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID
    assert no_network == []


def test_preloaded_registry_resolves_without_network(no_network: list[str]) -> None:
    registry: Registry[Any] = Registry().with_resource(
        "https://schemas.example/date.json",
        DRAFT202012.create_resource({"type": "string", "format": "date"}),
    )
    compiled = CompiledSchema.compile(
        {"properties": {"d": {"$ref": "https://schemas.example/date.json"}}}, registry=registry
    )
    assert compiled.validate_value({"d": "2026-07-20"}) == []
    assert [v.pointer for v in compiled.validate_value({"d": "2026-02-30"})] == ["/d"]
    assert no_network == []


def test_formats_in_referenced_documents_are_checked() -> None:
    registry: Registry[Any] = Registry().with_resource(
        "https://schemas.example/odd.json",
        DRAFT202012.create_resource({"type": "string", "format": "made-up"}),
    )
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(
            {"properties": {"d": {"$ref": "https://schemas.example/odd.json"}}}, registry=registry
        )
    assert exc.value.code is ErrorCode.UNSUPPORTED_FORMAT
    assert [v.pointer for v in exc.value.violations] == ["/properties/d/$ref"]


def test_compile_copies_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    compiled = CompiledSchema.compile(schema)
    schema["properties"]["n"]["type"] = "string"
    assert compiled.validate_value({"n": 1}) == []


def test_validate_does_not_recheck_or_reresolve(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = CompiledSchema.compile(WEATHER)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("schema re-checked at validation time")

    monkeypatch.setattr(schema_mod, "_metaschema_violations", forbidden)
    monkeypatch.setattr(schema_mod._SchemaScan, "run", forbidden)
    monkeypatch.setattr(schema_mod.Draft202012Validator, "check_schema", forbidden)
    monkeypatch.setattr(keywords.EcmaValidator, "check_schema", forbidden)
    monkeypatch.setattr(ecma262._EcmaParser, "parse", forbidden)
    parsed = ParsedArguments(raw=b"", value={"city": "Beijing", "date": "2026-07-20"})
    assert compiled.validate(parsed).value == parsed.value


def test_boolean_schemas() -> None:
    assert CompiledSchema.compile(True).validate_value({"x": 1}) == []
    assert CompiledSchema.compile(False).validate_value({}) == [
        Violation(pointer="", message="no value is allowed here (false schema)", keyword="false")
    ]


# --------------------------------------------------------------------------------------
# 4. validation results
# --------------------------------------------------------------------------------------


def parsed(value: dict[str, Any]) -> ParsedArguments:
    return ParsedArguments(raw=json.dumps(value).encode(), value=value)


def test_valid_arguments_record_the_validator() -> None:
    compiled = CompiledSchema.compile(WEATHER)
    args = parsed({"city": "Beijing", "date": "2026-07-20"})
    result = compiled.validate(args)
    assert isinstance(result, ValidatedArguments)
    assert result.value is args.value
    assert result.dialect == DIALECT_2020_12 == compiled.dialect
    assert result.validator == "python-jsonschema" == compiled.validator_name
    assert result.validator_version == schema_mod.metadata.version("jsonschema")
    assert result.validator_version == compiled.validator_version
    assert result.format_assertion is True and compiled.format_assertion is True


VALIDATION_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str, str]]]] = [
    ("extra field", {"city": "Beijing", "date": "2026-07-20", "extra": 1},
     [("/extra", "additionalProperties", "additional property 'extra' is not allowed")]),
    ("impossible date", {"city": "Beijing", "date": "2026-02-30"},
     [("/date", "format", "value does not match format 'date'")]),
    ("missing date", {"city": "Beijing"},
     [("", "required", "missing required property 'date'")]),
    ("empty city, wrong type", {"city": "", "date": 20260720},
     [("/city", "minLength", "string shorter than minLength 1"),
      ("/date", "type", "expected type string")]),
    ("everything", {"city": 1, "a~b": 1, "c/d": 2},
     [("", "required", "missing required property 'date'"),
      ("/a~0b", "additionalProperties", "additional property 'a~b' is not allowed"),
      ("/city", "type", "expected type string"),
      ("/c~1d", "additionalProperties", "additional property 'c/d' is not allowed")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [pytest.param(v, e, id=name) for name, v, e in VALIDATION_CASES],
)
def test_weather_violations(value: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    compiled = CompiledSchema.compile(WEATHER)
    with pytest.raises(RejectedError) as exc:
        compiled.validate(parsed(value))
    assert exc.value.code is ErrorCode.SCHEMA_VIOLATION
    got = [(v.pointer, v.keyword, v.message) for v in exc.value.violations]
    assert got == expected
    assert compiled.validate_value(value) == list(exc.value.violations)


def test_spec_accepts_normalized_date() -> None:
    compiled = CompiledSchema.compile(WEATHER)
    assert compiled.validate_value({"city": "Beijing", "date": "2026-07-20"}) == []


NESTED = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "qty": {"type": "integer", "minimum": 1},
                },
                "required": ["name"],
                "additionalProperties": {"type": "boolean"},
            },
        },
        "when": {"$ref": "#/$defs/when"},
        "kind": {"anyOf": [{"type": "integer"}, {"type": "object", "required": ["a"]}]},
        "one": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        "tags": {"type": "object", "propertyNames": {"maxLength": 3}},
    },
    "$defs": {"when": {"type": "string", "format": "date-time"}},
}


def test_nested_pointers() -> None:
    compiled = CompiledSchema.compile(NESTED)
    got = compiled.validate_value(
        {
            "items": [{"name": 5}, {"name": "ok", "qty": 0, "flag": "x"}, {}],
            "when": "2026-07-20",
            "tags": {"abcd": 1},
        }
    )
    assert [(v.pointer, v.keyword) for v in got] == [
        ("/items/0/name", "type"),
        ("/items/1/flag", "type"),
        ("/items/1/qty", "minimum"),
        ("/items/2", "required"),
        ("/tags/abcd", "propertyNames"),
        ("/when", "format"),
    ]
    assert got[4].message == "property name 'abcd' is invalid: string longer than maxLength 3"


def test_any_of_and_one_of_are_summarized() -> None:
    compiled = CompiledSchema.compile(NESTED)
    got = compiled.validate_value({"kind": {"b": 1}, "one": 3})
    assert got == [
        Violation(
            pointer="/kind",
            message="value does not match any alternative of anyOf "
            "(closest alternative: missing required property 'a' at /kind)",
            keyword="anyOf",
        ),
        Violation(
            pointer="/one",
            message="value matches more than one alternative of oneOf",
            keyword="oneOf",
        ),
    ]


CANARY = "CANARY-7f3a-secret-token"

CANARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "t": {"type": "integer"},
        "e": {"enum": ["a", "b"]},
        "c": {"const": "a"},
        "p": {"type": "string", "pattern": "^[a-z]+$"},
        "f": {"type": "string", "format": "email"},
        "short": {"maxLength": 3},
        "long": {"minLength": 100},
        "any": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]},
        "one": {"oneOf": [{"type": "string"}, {"type": "string", "minLength": 1}]},
        "not": {"not": {"type": "string"}},
        "arr": {"type": "array", "uniqueItems": True, "contains": {"type": "integer"}},
        "nope": False,
        "obj": {"type": "object", "maxProperties": 0},
        "num": {"type": "number", "multipleOf": 7, "maximum": 1},
        "cond": {"if": {"type": "string"}, "then": {"format": "uuid"}},
    },
    "additionalProperties": {"type": "integer"},
    "dependentRequired": {"t": ["missing"]},
    "unevaluatedProperties": False,
}


def test_canary_never_in_messages() -> None:
    compiled = CompiledSchema.compile(CANARY_SCHEMA)
    value = {name: CANARY for name in ("t", "e", "c", "p", "f", "short", "long", "any", "one", "not", "nope")}
    value |= {
        "arr": [CANARY, CANARY],
        "obj": {"k": CANARY},
        "num": 10**30 + 1,
        "cond": CANARY,
        "extra": CANARY,
    }
    with pytest.raises(RejectedError) as exc:
        compiled.validate(parsed(value))
    err = exc.value
    assert len(err.violations) >= 15
    keywords = {v.keyword for v in err.violations}
    assert {"type", "enum", "const", "pattern", "format", "maxLength", "minLength", "anyOf",
            "oneOf", "not", "uniqueItems", "contains", "false", "maxProperties", "multipleOf",
            "maximum", "dependentRequired", "unevaluatedProperties"} <= keywords  # fmt: skip
    assert (
        Violation(pointer="/nope", message="no value is allowed here (false schema)", keyword="false")
        in err.violations
    )
    for text in [err.message, str(err), *(v.message for v in err.violations)]:
        assert CANARY not in text
        assert str(10**30 + 1) not in text
    assert err.violations == tuple(sorted(err.violations, key=lambda v: (v.pointer, v.keyword, v.message)))


def test_violations_are_deterministic() -> None:
    compiled = CompiledSchema.compile(CANARY_SCHEMA)
    value = {"t": "x", "e": "x", "extra": "x", "arr": [1, 1]}
    first = compiled.validate_value(value)
    assert first == compiled.validate_value(dict(reversed(value.items())))
    assert len(first) == len(set(first))


def test_false_subschemas_keep_their_pointer() -> None:
    """python-jsonschema drops the path for a direct `false` under properties/prefixItems/
    patternProperties; compile rewrites those to the equivalent {"not": {}}."""
    compiled = CompiledSchema.compile(
        {
            "properties": {"a": False, "b": {"items": False, "prefixItems": [True, False]}},
            "patternProperties": {"^x": False},
            "propertyNames": {"not": {"const": "zz"}},
        }
    )
    got = compiled.validate_value({"a": 1, "b": [1, 2, 3], "xy": 2, "zz": 1, "ok": 1})
    assert [(v.pointer, v.keyword, v.message) for v in got] == [
        ("/a", "false", "no value is allowed here (false schema)"),
        ("/b", "items", "array has more items than prefixItems allows"),
        ("/b/1", "false", "no value is allowed here (false schema)"),
        ("/xy", "false", "no value is allowed here (false schema)"),
        ("/zz", "propertyNames", "property name 'zz' is invalid: value must not match the 'not' schema"),
    ]


def test_validate_value_reports_valid_as_empty_list() -> None:
    compiled = CompiledSchema.compile(NESTED)
    assert compiled.validate_value({"items": [{"name": "a", "qty": 2, "gift": True}]}) == []


# --------------------------------------------------------------------------------------
# 5. ECMA-262 regular expressions: pattern, patternProperties, format "regex"
# --------------------------------------------------------------------------------------

OPTIONAL_DIR = REQUIRED_DIR / "optional"
REGEX_SUITE_FILES = (
    OPTIONAL_DIR / "ecmascript-regex.json",
    OPTIONAL_DIR / "non-bmp-regex.json",
    FORMAT_DIR / "ecmascript-regex.json",
)

# Cases of REGEX_SUITE_FILES that callgate deliberately does not answer as the suite does. Each
# entry must be a compile-time refusal ("load_error:toolspec_invalid"), never a wrong answer.
# Currently empty: every case passes.
REGEX_SUITE_EXCLUSIONS: dict[tuple[str, str, str], tuple[str, str]] = {}


def _suite_name(path: Path) -> str:
    return path.relative_to(REQUIRED_DIR).as_posix()


def regex_suite_params() -> list[Any]:
    params: list[Any] = []
    for path in REGEX_SUITE_FILES:
        if not path.is_file():
            params.append(pytest.param(path, 0, 0, id=f"{_suite_name(path)}::{MISSING}"))
            continue
        for ci, case in enumerate(load_file(path)):
            for ti, test in enumerate(case["tests"]):
                params.append(
                    pytest.param(
                        path, ci, ti,
                        id=f"{_suite_name(path)}::{case['description']}::{test['description']}",
                    )
                )  # fmt: skip
    return params


@pytest.mark.parametrize(("path", "case_index", "test_index"), regex_suite_params())
def test_regex_suite(path: Any, case_index: int, test_index: int) -> None:
    path = _require_corpus(path)
    case = load_file(path)[case_index]
    test = case["tests"][test_index]
    key = (_suite_name(path), case["description"], test["description"])
    expected = "valid" if test["valid"] else "invalid"
    if key in REGEX_SUITE_EXCLUSIONS:
        expected = REGEX_SUITE_EXCLUSIONS[key][0]
    assert outcome(path, case_index, test["data"]) == expected


def test_regex_suite_exclusions_are_refusals() -> None:
    present = {
        (_suite_name(p), c["description"], t["description"])
        for p in REGEX_SUITE_FILES
        for c in load_file(_require_corpus(p))
        for t in c["tests"]
    }
    for key, (ours, reason) in REGEX_SUITE_EXCLUSIONS.items():
        assert key in present, f"stale exclusion {key}"
        assert ours == "load_error:toolspec_invalid" and reason


# (pattern, string, ECMA-262 RegExp(pattern, "u").test(string)). Every row was checked against
# V8 (node 20) when written; rows marked "Python: ..." are ones Python re gets wrong.
PATTERN_CASES: list[tuple[str, str, bool]] = [
    # $ is end of input only
    ("^[a-z0-9]+$", "abc", True),
    ("^[a-z0-9]+$", "abc\n", False),  # Python: True
    ("^abc$", "abc\n", False),  # Python: True
    ("^a\\nb$", "a\nb", True),
    ("^b$", "a\nb", False),
    # \d \D \w \W \b \B are ASCII
    ("^\\d+$", "123", True),
    ("^\\d+$", "\u0661\u0662\u0663", False),  # Arabic-Indic digits; Python: True
    ("^\\d+$", "\u09ea\u09e8", False),  # Bengali digits; Python: True
    ("^\\D$", "\u0661", True),  # Python: False
    ("^\\w+$", "abc_09", True),
    ("^\\w+$", "caf\u00e9", False),  # Python: True
    ("^\\W$", "\u00e9", True),  # Python: False
    ("\\bfoo\\b", "\u00e9foo\u00e9", True),  # Python: False
    ("\\Bfoo", "\u00e9foo", False),  # Python: True
    ("\\B", "", True),  # Python's \B never matches ""
    ("\\b", "", False),
    # . excludes all four line terminators; one code point per astral character
    ("a.b", "a\u2028b", False),  # Python: True
    ("a.b", "a\u2029b", False),  # Python: True
    ("a.b", "a\rb", False),  # Python: True
    ("a.b", "a\nb", False),
    ("a.b", "a\u0085b", True),
    ("a.b", "a\u00e9b", True),
    ("^.$", "\U0001f600", True),
    ("^[^]*$", "a\nb\u2028", True),
    ("[]", "", False),
    ("[]", "a", False),
    # \s is ECMA WhiteSpace + LineTerminator
    *[("^\\s$", ch, True) for ch in " \t\u000b\f\r\n\u00a0\ufeff\u1680\u2003\u2028\u2029\u202f\u3000"],
    ("^\\s$", "\u0085", False),  # NEL is not ECMA whitespace; Python: True
    ("^\\s$", "\u001c", False),  # Python: True
    ("^\\s$", "\u180e", False),
    ("^\\s$", "\u200b", False),
    ("^\\S$", "\u2013", True),
    ("^[\\S]$", "\u00a0", False),
    # escapes
    ("^\\cJ\\cj$", "\n\n", True),
    ("^\\t$", "\t", True),
    ("^\\t$", "\\t", False),
    ("^\\x41\\u0042\\u{43}$", "ABC", True),
    ("^\\uD83D\\uDE00$", "\U0001f600", True),
    ("^\\u{1F600}+$", "\U0001f600\U0001f600", True),
    ("^\\0$", "\x00", True),
    ("^[\\b]$", "\x08", True),
    ("^\\/\\.\\*$", "/.*", True),
    ("^[\\-a]+$", "-a-", True),
    ("^\U0001f432*$", "\U0001f432\U0001f432", True),
    ("^\U0001f432*$", "\U0001f409", False),
    ("^\ud83d\udc32*$", "\U0001f432\U0001f432", True),  # a surrogate pair in the source
    ("^[\ud83d\udc32]$", "\U0001f432", True),
    # Unicode property escapes (General_Category, some binary properties)
    ("^\\p{L}+$", "\u00e9t\u00e9", True),
    ("^\\p{Letter}+$", "abc1", False),
    ("^\\p{Lu}$", "\u00c9", True),
    ("^\\p{Lu}$", "\u00e9", False),
    ("^\\p{Nd}+$", "\u0661\u0662", True),
    ("^\\p{digit}+$", "\u09ea", True),
    ("^\\P{L}$", "1", True),
    ("^[\\p{L}\\d]+$", "\u00e91", True),
    ("^[^\\P{Lu}]$", "A", True),
    ("^[^\\P{Lu}]$", "a", False),
    ("^\\p{gc=Zs}$", "\u3000", True),
    ("^\\p{General_Category=Decimal_Number}$", "7", True),
    ("^\\p{ASCII}+$", "abc\u00e9", False),
    ("^\\p{Any}$", "\U0010ffff", True),
    ("^\\p{Assigned}$", "\u0378", False),
    ("^\\p{AHex}+$", "fF0", True),
    # backreferences (a reference to a group that did not participate matches "")
    ("^(a)\\1$", "aa", True),
    ("^(?<q>['\"]).*\\k<q>$", "'x'", True),
    ("^(?<q>['\"]).*\\k<q>$", "'x\"", False),
    ("^(?:(a)|b)\\1c$", "bc", True),  # Python: False
    ("^\\1(a)$", "a", True),
    ("^(a\\1)$", "a", True),
    ("^(?!(a)b)\\1ac$", "ac", True),
    # lookarounds
    ("^(?=.*\\d)(?=.*[a-z]).{8,}$", "abcdefg1", True),
    ("^(?=.*\\d)(?=.*[a-z]).{8,}$", "abcdefgh", False),
    ("(?<=\\$)\\d+", "$42", True),
    ("(?<!\\$)\\b\\d+", "$42", False),
    # ES2025 modifiers s and m
    ("^(?s:a.b)$", "a\nb", True),
    ("^(?-s:a.b)$", "a\nb", False),
    ("(?m:^b$)", "a\nb\nc", True),
    ("(?m:^b$)", "a\u2028b\rc", True),
    ("^(?m:b$)", "b\n", True),
    # quantifiers
    ("^a{2,3}$", "aaaa", False),
    ("^a{2}?$", "aa", True),
    ("^a{0,99999999999}$", "aaa", True),
    ("^(?:ab){2,}?$", "ababab", True),
]


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    PATTERN_CASES,
    ids=[f"{p!r}~{t!r}" for p, t, _ in PATTERN_CASES],
)
def test_pattern_semantics(pattern: str, text: str, matches: bool) -> None:
    compiled = CompiledSchema.compile({"pattern": pattern})
    violations = compiled.validate_value(text)
    assert (violations == []) is matches, violations
    if not matches:
        assert [(v.pointer, v.keyword) for v in violations] == [("", "pattern")]
    # the same semantics for property names
    keyed = CompiledSchema.compile({"patternProperties": {pattern: False}})
    assert (keyed.validate_value({text: 1}) != []) is matches


FILES_DELETE = Path(__file__).resolve().parents[1] / "policies" / "tools" / "files.delete@v1.json"
FILES_DELETE_PATH_CASES: list[tuple[str, bool]] = [
    ("/tmp/x", True),
    ("/tmp/x.txt", True),
    ("/tmp/..x", True),  # a file named "..x" is not traversal
    ("/tmp/x\n", True),  # "\n" is allowed by [^\u0000]
    ("/a/..\n", True),  # last segment is "..\n" (ECMA $ does not match before "\n")
    ("/tmp/../etc", False),
    ("/a/..", False),
    ("/a/.", False),
    ("/..", False),
    ("/./x", False),
    ("tmp/x", False),
    ("", False),
    ("/tmp/x\u0000", False),
]


@pytest.mark.parametrize(("path_value", "ok"), FILES_DELETE_PATH_CASES)
def test_files_delete_path_pattern(path_value: str, ok: bool) -> None:
    spec = json.loads(FILES_DELETE.read_text(encoding="utf-8"))
    compiled = CompiledSchema.compile(spec["input_schema"], dialect=spec["schema_dialect"])
    violations = compiled.validate_value({"path": path_value})
    assert (violations == []) is ok, violations
    if not ok:
        assert [(v.pointer, v.keyword) for v in violations] == [("/path", "pattern")]


def test_dot_in_lookahead_stops_at_line_terminators() -> None:
    """ECMA '.' does not cross a newline, so `^(?!.*/\\.\\.?(/|$))` only inspects the first line
    (Python re behaves the same here): a traversal after a "\\n" is not caught. `[\\s\\S]*`
    inspects the whole value."""
    weak = "^(?!.*/\\.\\.?(/|$))/[^\\u0000]*$"
    strong = "^(?![\\s\\S]*/\\.\\.?(/|$))/[^\\u0000]*$"
    assert CompiledSchema.compile({"pattern": weak}).validate_value("/a\n/../etc") == []
    assert CompiledSchema.compile({"pattern": strong}).validate_value("/a\n/../etc") != []
    assert CompiledSchema.compile({"pattern": strong}).validate_value("/tmp/x") == []


def test_pattern_properties_and_additional_properties_agree() -> None:
    """A key that only Python re would match must count as an additional property."""
    compiled = CompiledSchema.compile(
        {"patternProperties": {"^[a-z]+$": {"type": "integer"}}, "additionalProperties": False}
    )
    assert compiled.validate_value({"abc": 1}) == []
    assert [(v.pointer, v.keyword) for v in compiled.validate_value({"abc": "x"})] == [("/abc", "type")]
    assert compiled.validate_value({"abc\n": 1}) == [
        Violation(
            pointer="/abc\n",
            message="additional property 'abc\\n' is not allowed",
            keyword="additionalProperties",
        )
    ]


def test_pattern_properties_and_unevaluated_properties_agree() -> None:
    compiled = CompiledSchema.compile({"patternProperties": {"^x$": True}, "unevaluatedProperties": False})
    assert compiled.validate_value({"x": 1}) == []
    assert [v.keyword for v in compiled.validate_value({"x\n": 1})] == ["unevaluatedProperties"]
    nested = CompiledSchema.compile(
        {"allOf": [{"patternProperties": {"^\\d+$": True}}], "unevaluatedProperties": False}
    )
    assert nested.validate_value({"12": 1}) == []
    assert nested.validate_value({"\u0661\u0662": 1}) != []


def test_property_names_pattern() -> None:
    compiled = CompiledSchema.compile({"propertyNames": {"pattern": "^[a-z]+$"}})
    assert compiled.validate_value({"abc": 1}) == []
    got = compiled.validate_value({"abc\n": 1})
    assert [(v.pointer, v.keyword) for v in got] == [("/abc\n", "propertyNames")]


# Valid ECMA-262 (2025, Unicode mode) regexes: format "regex" accepts them.
VALID_REGEXES = [
    "", "|", "()", "(?:)", "[]", "[^]", "[-]", "[a-]", "[-a]", "[\\-]", "[\\b]", "\\/", "a{2,}?",
    "(?<n>a)\\k<n>", "\\k<a>(?<a>x)", "(?<$>a)", "(?<\\u0061>a)\\k<a>", "(?<\u03c0>a)",
    "(?<=a+)b", "(?<!a)b", "\\cA", "\\0", "\\u{10FFFF}", "\\uD83D\\uDE00", "\\uD83D",
    "\\p{L}", "\\P{Lu}", "\\p{gc=Nd}", "\\p{Script=Greek}", "\\p{scx=Grek}", "\\p{Emoji}",
    "\\p{ASCII_Hex_Digit}", "[\\p{L}\\d-]", "[\\w-a]"[:0] + "[a-z\\d]",
    "(?<a>x)|(?<a>y)", "(?i:a)", "(?-i:a)", "(?ms-i:a)", "^(a)\\1$", "a{1}", "\\1(a)",
]  # fmt: skip
# Invalid ones (all Python re accepts except those marked): format "regex" rejects them, and a
# schema using one as pattern is refused at compile.
INVALID_REGEXES: list[tuple[str, str]] = [
    ("(?P<n>x)", "invalid group"),
    ("(?P<n>a)(?P=n)", "invalid group"),
    ("(?#comment)a", "invalid group"),
    ("(?i)abc", "invalid group"),
    ("(?ims)abc", "invalid group"),
    ("(?-:a)", "invalid modifiers"),
    ("(?ii:a)", "invalid modifiers"),
    ("(?i-i:a)", "invalid modifiers"),
    ("(?x:a)", "invalid group"),
    ("\\a", "invalid escape"),
    ("\\-", "invalid escape"),
    ("\\e", "invalid escape"),
    ("a{2,1}", "out of order"),
    ("a{,2}", "lone '{'"),
    ("{", "lone '{'"),
    ("}", "lone '}'"),
    ("]", "lone ']'"),
    ("a**", "nothing to repeat"),
    ("(?=a)*", "nothing to repeat"),
    ("\\b+", "nothing to repeat"),
    ("[z-a]", "out of order"),
    ("[\\d-z]", "range bound"),
    ("[a-\\w]", "range bound"),
    ("[\\1]", "invalid escape"),
    ("\\k<x>", "does not exist"),
    ("(?<x>a)\\k<y>", "does not exist"),
    ("(a)\\2", "does not exist"),
    ("\\8", "does not exist"),
    ("(?<a>x)(?<a>y)", "duplicate group name"),
    ("(?<a>(?<a>x)|y)", "duplicate group name"),
    ("(?<1a>x)", "invalid group name"),
    ("\\p{Foo}", "unknown Unicode property"),
    ("\\p{ascii}", "unknown Unicode property"),
    ("\\p{Script=Foo}", "unknown Unicode property"),
    ("\\p{L", "invalid property escape"),
    ("\\pL", "invalid property escape"),
    ("\\u{110000}", "out of range"),
    ("\\u12", "invalid \\u escape"),
    ("\\x1", "invalid \\x escape"),
    ("\\c1", "control escape"),
    ("\\01", "octal"),
    ("(", "missing ')'"),
    (")", "unmatched ')'"),
    ("[a", "missing ']'"),
    ("\\", "end of pattern"),
]


@pytest.mark.parametrize("source", VALID_REGEXES)
def test_regex_format_accepts(source: str) -> None:
    assert CompiledSchema.compile({"format": "regex"}).validate_value(source) == []


@pytest.mark.parametrize(("source", "reason"), INVALID_REGEXES)
def test_regex_format_rejects(source: str, reason: str) -> None:
    assert ecma262.ecma_syntax_error(source) is not None
    assert reason in str(ecma262.ecma_syntax_error(source))
    violations = CompiledSchema.compile({"format": "regex"}).validate_value(source)
    assert violations == [
        Violation(pointer="", message="value does not match format 'regex'", keyword="format")
    ]


@pytest.mark.parametrize(("source", "reason"), INVALID_REGEXES)
def test_invalid_pattern_is_refused_at_compile(source: str, reason: str) -> None:
    for schema, pointer in (
        ({"properties": {"a": {"pattern": source}}}, "/properties/a/pattern"),
        (
            {"patternProperties": {source: True}},
            "/patternProperties/" + source.replace("~", "~0").replace("/", "~1"),
        ),
    ):
        with pytest.raises(LoadError) as exc:
            CompiledSchema.compile(schema, source="tools/t.json:1")
        err = exc.value
        assert err.code is ErrorCode.TOOLSPEC_INVALID
        assert err.source == "tools/t.json:1"
        hits = [v for v in err.violations if v.pointer == pointer]
        assert hits, err.violations
        assert "not a valid ECMA-262 regular expression" in hits[0].message
        assert reason in hits[0].message


# Valid ECMA-262 that callgate cannot match faithfully (or refuses as a ReDoS risk): refused at
# compile with TOOLSPEC_INVALID, never matched approximately.
UNSUPPORTED_PATTERNS: list[tuple[str, str]] = [
    ("(?<=a+)b", "variable-width lookbehind"),
    ("(?<=a|bc)d", "variable-width lookbehind"),
    ("\\p{Script=Greek}", "no Script property"),
    ("[\\p{scx=Latn}]", "no Script property"),
    ("\\p{Emoji}", "binary properties"),
    ("\\P{Alphabetic}", "binary properties"),
    ("(?i:abc)", "case-insensitive modifier"),
    ("(?:(a)|b)*\\1", "repeated expression"),
    ("(a)+\\1", "repeated expression"),
    ("(?<=(a)\\1)b", "inside a lookbehind"),
    ("(?<=\\1(a))b", "inside a lookbehind"),  # right-to-left: not a forward reference
    ("(?<a>x)|(?<a>y)\\k<a>", "duplicated group name"),
    ("(?:){5000000000}", "too large"),
    # ReDoS heuristic
    ("(a+)+", "nested quantifier"),
    ("^(a+)+$", "nested quantifier"),
    ("(a*)*b", "nested quantifier"),
    ("(\\w+\\s?)*$", "nested quantifier"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "nested quantifier"),
    ("(.*a){20}", "nested quantifier"),
    ("((ab)*)+", "nested quantifier"),
    ("(x+x+)+y", "nested quantifier"),
    ("(?:a|(b+))+", "nested quantifier"),
    ("(-\\d+\\d+)*", "adjacent overlapping quantifiers"),
    ("(-[a-z]+\\w?[a-z]*)+", "adjacent overlapping quantifiers"),
]


@pytest.mark.parametrize(("source", "reason"), UNSUPPORTED_PATTERNS)
def test_unsupported_pattern_is_refused_at_compile(source: str, reason: str) -> None:
    assert ecma262.ecma_syntax_error(source) is None  # valid ECMA-262
    assert formats.is_regex(source)
    for schema, pointer, keyword in (
        ({"properties": {"a": {"pattern": source}}}, "/properties/a/pattern", "pattern"),
        ({"patternProperties": {source: True}}, "/patternProperties/" + source,
         "patternProperties"),
    ):  # fmt: skip
        with pytest.raises(LoadError) as exc:
            CompiledSchema.compile(schema)
        err = exc.value
        assert err.code is ErrorCode.TOOLSPEC_INVALID
        assert [(v.pointer, v.keyword) for v in err.violations] == [(pointer, keyword)]
        assert "cannot be matched with ECMA-262 semantics" in err.violations[0].message
        assert reason in err.violations[0].message


# Patterns with nested or repeated quantifiers that the ReDoS heuristic accepts (a mandatory
# delimiter separates the iterations).
REDOS_ACCEPTED = [
    "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$",  # callgate/policy/toolspec.schema.json
    "^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$",
    "^(\\d{1,3}\\.){3}\\d{1,3}$",
    "^([a-z0-9]+(-[a-z0-9]+)*\\.)+[a-z]{2,}$",
    "^(?:[a-z0-9]+-)*[a-z0-9]+$",
    "(?:(?:-|_)[a-z]+)*",
    "^(?:a?b?)*$",
    "^(?:ab|cd)+$",
    "^(?!.*/\\.\\.?(/|$))/[^\\u0000]*$",
]


@pytest.mark.parametrize("source", REDOS_ACCEPTED)
def test_redos_heuristic_accepts(source: str) -> None:
    CompiledSchema.compile({"pattern": source, "patternProperties": {source: True}})


def test_unsupported_pattern_in_referenced_document() -> None:
    registry: Registry[Any] = Registry().with_resource(
        "https://schemas.example/p.json",
        DRAFT202012.create_resource({"type": "string", "pattern": "(a+)+"}),
    )
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile(
            {"properties": {"p": {"$ref": "https://schemas.example/p.json"}}}, registry=registry
        )
    assert exc.value.code is ErrorCode.TOOLSPEC_INVALID
    assert [(v.pointer, v.keyword) for v in exc.value.violations] == [("/properties/p/$ref", "pattern")]


def test_patterns_are_translated_once_at_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {
        "type": "object",
        "properties": {"p": {"type": "string", "pattern": "^[a-z]+-compile-once$"}},
        "patternProperties": {"^x-compile-once-\\d+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    compiled = CompiledSchema.compile(schema)

    def forbidden(source: str) -> str:
        raise AssertionError(f"pattern {source!r} translated at validation time")

    monkeypatch.setattr(ecma262, "_translate_ecma", forbidden)
    assert compiled.validate_value({"p": "ab-compile-once", "x-compile-once-1": 1}) == []
    assert len(compiled.validate_value({"p": "AB", "x-compile-once-\u0661": 1})) == 2


def test_space_separators_match_unicodedata() -> None:
    import sys
    import unicodedata

    zs = {cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Zs"}
    table = {cp for lo, hi in ecma262._SPACE_SEPARATORS for cp in range(lo, hi + 1)}
    assert table == zs


def test_regex_format_on_non_strings_and_in_metaschema() -> None:
    compiled = CompiledSchema.compile({"format": "regex"})
    assert compiled.validate_value(12) == []
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile({"properties": {"a": {"pattern": "(?P<n>x)"}}})
    assert exc.value.violations == (
        Violation(
            pointer="/properties/a/pattern",
            message="'(?P<n>x)' is not a valid ECMA-262 regular expression: invalid group at offset 0",
            keyword="format",
        ),
    )


def test_metaschema_verdict_is_remembered_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15: the metaschema check (most of loading a tool) runs once per distinct schema; a
    reload of unchanged ToolSpecs, or a second tool with the same schema, reuses the verdict."""
    from callgate.arguments.validate import schema as schema_module

    calls: list[object] = []
    real = schema_module._metaschema_check
    monkeypatch.setattr(schema_module, "_metaschema_check", lambda s: calls.append(s) or real(s))
    good = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 7919}}}
    bad = {"type": "object", "properties": {"q": {"type": "string", "minLength": -7919}}}
    CompiledSchema.compile(good)
    CompiledSchema.compile(dict(reversed(list(good.items()))))  # same document, other key order
    errors = []
    for _ in range(2):
        with pytest.raises(LoadError) as err:
            CompiledSchema.compile(bad)
        errors.append(err.value.violations)
    assert len(calls) == 2 and errors[0] == errors[1] and errors[0]
