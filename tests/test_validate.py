"""Tests of sidecar.stages.validate: JSON Schema 2020-12 conformance + callgate's own rules.

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

import sidecar.stages.validate as validate_mod
from sidecar.errors import ErrorCode, LoadError, RejectedError, Violation
from sidecar.model import ParsedArguments, ValidatedArguments
from sidecar.stages.validate import (
    DIALECT_2020_12,
    EXCLUDED_FORMATS,
    SUPPORTED_FORMATS,
    CompiledSchema,
)

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
R_REGEX = (
    "callgate turns format assertion on, per spec 6.4/6.14; format 'regex' cannot be asserted "
    "by this build (Python re is not ECMA-262), so a schema using it is refused at load"
)
R_META_REGEX = (
    "the 2020-12 metaschema contains format 'regex', which this build cannot assert; a schema "
    "that $refs the metaschema is refused at load instead of silently skipping that check"
)
R_UNICODE_PROPERTY = (
    "pattern uses \\p{...}: Python re (python-jsonschema's regex engine) has no Unicode property "
    "escapes, so the schema fails the metaschema's pattern check and is refused at load"
)
R_VOCABULARY = (
    "custom metaschemas/vocabularies are refused: validation is bound to the one 2020-12 "
    "dialect (spec 6.4)"
)

_ANNOTATION_ONLY_FORMATS = (
    "email", "idn-email", "ipv4", "ipv6", "idn-hostname", "hostname", "date", "date-time", "time",
    "json-pointer", "relative-json-pointer", "iri", "iri-reference", "uri", "uri-reference",
    "uri-template", "uuid", "duration",
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
    # format.json: format 'regex' is excluded from SUPPORTED_FORMATS -> load error for the case.
    **{
        ("format.json", "regex format", f"all string formats ignore {kind}"): (
            "load_error:unsupported_format",
            R_REGEX,
        )
        for kind in _ALL_STRING_FORMATS_IGNORE
    },
    ("format.json", "regex format", "invalid regex string is only an annotation by default"): (
        "load_error:unsupported_format",
        R_REGEX,
    ),
    # $ref to the official metaschema reaches format 'regex'.
    ("defs.json", "validate definition against metaschema", "valid definition schema"): (
        "load_error:unsupported_format",
        R_META_REGEX,
    ),
    ("defs.json", "validate definition against metaschema", "invalid definition schema"): (
        "load_error:unsupported_format",
        R_META_REGEX,
    ),
    ("ref.json", "remote ref, containing refs itself", "remote ref valid"): (
        "load_error:unsupported_format",
        R_META_REGEX,
    ),
    ("ref.json", "remote ref, containing refs itself", "remote ref invalid"): (
        "load_error:unsupported_format",
        R_META_REGEX,
    ),
    # \p{...} patterns.
    **{
        ("pattern.json", "pattern with Unicode property escape requires unicode mode", t): (
            "load_error:toolspec_invalid",
            R_UNICODE_PROPERTY,
        )
        for t in ("ASCII letters match", "Non-ASCII letters match", "Digits do not match")
    },
    **{
        ("patternProperties.json", "patternProperties with Unicode property escape", t): (
            "load_error:toolspec_invalid",
            R_UNICODE_PROPERTY,
        )
        for t in (
            "Unicode letter property name matches",
            "Non-letter property name does not match pattern",
        )
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
        "uri-template", "json-pointer", "relative-json-pointer",
    }  # fmt: skip
    assert set(EXCLUDED_FORMATS) == {"regex"}
    assert not SUPPORTED_FORMATS & set(EXCLUDED_FORMATS)


@pytest.mark.parametrize("fmt", sorted(SUPPORTED_FORMATS))
def test_supported_format_rejects_garbage(fmt: str) -> None:
    """The field-notes failure mode: a 'supported' format that accepts anything."""
    compiled = CompiledSchema.compile({"format": fmt})
    assert compiled.validate_value("garbage \u0000 value") != []
    assert compiled.validate_value(12) == []  # formats only constrain strings


@pytest.mark.parametrize("fmt", sorted({*EXCLUDED_FORMATS, "unknown", "color", "int32", "binary"}))
def test_unsupported_format_is_refused(fmt: str) -> None:
    with pytest.raises(LoadError) as exc:
        CompiledSchema.compile({"format": fmt})
    assert exc.value.code is ErrorCode.UNSUPPORTED_FORMAT


def test_regex_really_is_not_ecma262() -> None:
    """Evidence for excluding 'regex': Python re disagrees with format/ecmascript-regex.json."""
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
    ("regex (excluded)", {"properties": {"p": {"format": "regex"}}}, "/properties/p/format"),
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

    monkeypatch.setattr(validate_mod, "_metaschema_violations", forbidden)
    monkeypatch.setattr(validate_mod._SchemaScan, "run", forbidden)
    monkeypatch.setattr(validate_mod.Draft202012Validator, "check_schema", forbidden)
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
    assert result.validator_version == validate_mod.metadata.version("jsonschema")
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
    value = {
        name: CANARY
        for name in ("t", "e", "c", "p", "f", "short", "long", "any", "one", "not", "nope")
    }
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
    assert Violation(
        pointer="/nope", message="no value is allowed here (false schema)", keyword="false"
    ) in err.violations
    for text in [err.message, str(err), *(v.message for v in err.violations)]:
        assert CANARY not in text
        assert str(10**30 + 1) not in text
    assert err.violations == tuple(
        sorted(err.violations, key=lambda v: (v.pointer, v.keyword, v.message))
    )


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
        ("/zz", "propertyNames",
         "property name 'zz' is invalid: value must not match the 'not' schema"),
    ]


def test_validate_value_reports_valid_as_empty_list() -> None:
    compiled = CompiledSchema.compile(NESTED)
    assert compiled.validate_value({"items": [{"name": "a", "qty": 2, "gift": True}]}) == []
