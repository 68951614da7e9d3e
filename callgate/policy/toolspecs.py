"""ToolSpecs (spec 6.1): versioned tool interfaces, loaded from ``<policy dir>/tools/*.json``.

A ToolSpec file is strict JSON (duplicate keys are refused here too, so a policy file cannot be
read two ways). Its shape is checked against ``toolspec.schema.json``; its ``input_schema`` (and
``normalized_schema`` and ``output_schema`` when given) is compiled once (JSON Schema 2020-12,
format assertion on, ECMA-262 patterns); its normalizers and resource template are compiled once. Any problem is a :class:`~callgate.base.errors.LoadError` naming ``file:line``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from callgate.arguments.normalize import NormalizerChain
from callgate.arguments.parse import ParseLimits, parse_json_document
from callgate.arguments.textpolicy import EMPTY as NO_TEXT_POLICY
from callgate.arguments.textpolicy import TextPolicy
from callgate.arguments.validate import CompiledSchema
from callgate.arguments.validate.vocabulary import unknown_keywords
from callgate.base import jsonpointer, jsonpositions
from callgate.base.errors import (
    ErrorCode,
    LoadError,
    RejectedError,
    Violation,
    resource_unresolved,
    toolspec_invalid,
)
from callgate.base.model import JSONValue, SideEffectClass
from callgate.client.names import tool_name_problem
from callgate.policy.meters import MeterSpec, parse_labels, parse_meters
from callgate.policy.resultlimits import limits_from_spec
from callgate.policy.timevalues import TimeField, time_fields

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def _toolspec_meta_validator() -> Any:
    text = resources.files("callgate.policy").joinpath("toolspec.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    return jsonschema.Draft202012Validator(schema)


_META = _toolspec_meta_validator()


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """``kind:{field}`` over normalized arguments; placeholders are top-level names or JSON pointers."""

    template: str
    fields: tuple[str, ...]

    @classmethod
    def compile(cls, template: str, *, source: str = "") -> ResourceTemplate:
        names = tuple(_PLACEHOLDER.findall(template))
        if ":" not in template.split("{", 1)[0]:
            raise toolspec_invalid(
                f"resource template '{template}' must start with a literal 'kind:' prefix", source=source
            )
        return cls(template=template, fields=names)

    def render(self, args: Mapping[str, JSONValue]) -> str:
        """Fill the template. A missing or non-scalar field raises (the caller denies)."""

        def value(name: str) -> str:
            node: Any = args
            parts = name[1:].split("/") if name.startswith("/") else [name]
            for part in parts:
                part = jsonpointer.unescape(part)
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    raise resource_unresolved(
                        f"resource template field '{name}' is missing from the arguments"
                    )
            if isinstance(node, bool) or not isinstance(node, (str, int)):
                raise resource_unresolved(f"resource template field '{name}' is not a string or integer")
            return str(node)

        return _PLACEHOLDER.sub(lambda m: value(m.group(1)), self.template)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One versioned tool interface the runtime may show the model (spec 6.1)."""

    name: str
    version: str
    description: str
    input_schema: Mapping[str, JSONValue]
    schema_dialect: str
    side_effect_class: SideEffectClass
    required_capabilities: tuple[str, ...]
    resource_template: str
    timeout_policy: Mapping[str, JSONValue]
    retry_policy: Mapping[str, JSONValue]
    idempotency: Mapping[str, JSONValue]
    result_limits: Mapping[str, JSONValue]
    normalizers: tuple[Mapping[str, JSONValue], ...]
    spec_digest: str
    """``sha256:`` of the ToolSpec file's bytes: names exactly what the model was shown."""
    source: str
    output_schema: Mapping[str, JSONValue] | None = None
    """JSON Schema 2020-12 of an ``ok`` result (optional). A result that does not conform is
    withheld from the model as ``result_schema_invalid`` (docs/RESULT-ENCODING.md)."""

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def idempotency_supported(self) -> bool:
        return bool(self.idempotency.get("supported", False))

    @property
    def keyless_allowed(self) -> bool:
        """May this tool run without an idempotency key? Read-only tools always may; writes
        only when the ToolSpec says ``"without_key": "allow"`` (default: reject)."""
        if self.side_effect_class is SideEffectClass.READ_ONLY:
            return True
        return str(self.idempotency.get("without_key", "reject")) == "allow"

    def retention_seconds(self, default: int) -> int:
        v = self.idempotency.get("retention_seconds", default)
        return int(v) if isinstance(v, int) else default

    @property
    def timeout_ms(self) -> int:
        v = self.timeout_policy.get("timeout_ms", 30000)
        return int(v) if isinstance(v, int) else 30000


@dataclass(frozen=True, slots=True)
class CompiledTool:
    spec: ToolSpec
    schema: CompiledSchema
    """Compiled ``input_schema``: what the model may send."""
    normalized_schema: CompiledSchema
    """Compiled ``normalized_schema`` (default: ``input_schema``): what the normalized arguments
    must satisfy before anything is authorized (6.4 layer 3, 6.14 row 3)."""
    normalizers: NormalizerChain
    resource: ResourceTemplate
    input_schema_json: str
    output_schema: CompiledSchema | None = None
    """Compiled ``output_schema``: what an ``ok`` result must satisfy before the model sees it."""
    output_schema_json: str = ""
    """``output_schema`` as JSON text (ListTools), empty when the ToolSpec has none."""
    times: tuple[TimeField, ...] = ()
    """The top-level arguments that reach the policies as time values (``format`` ``date``,
    ``date-time``, ``duration`` in the normalized schema: :mod:`callgate.policy.timevalues`)."""
    text_policy: TextPolicy = NO_TEXT_POLICY
    """Which strings are identifiers that must not hide characters (issue 33, ``text_policy``)."""
    meters: tuple[MeterSpec, ...] = ()
    labels: tuple[str, ...] = ()
    """``result_labels``: what every result of the tool carries into its session."""
    """Declared meters (``context.usage``, issue 30: :mod:`callgate.policy.meters`)."""
    unseen: frozenset[str] = frozenset()
    """Field pointers of the arguments and members (``/where/meta``, ``/points/*/meta``) with no
    policy type that the generated actions leave out of ``context.args``
    (:attr:`callgate.policy.declare.Unseen.field`; set by the snapshot)."""

    def seen(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` as ``context.args`` carries them: without the :attr:`unseen` arguments and
        members (the rest of an argument kept; copies along the way, ``args`` unchanged)."""
        out = args if isinstance(args, dict) else dict(args)
        for field in sorted(self.unseen):
            out = _without(out, jsonpointer.split(field))
        return out


def _without(value: Any, tokens: tuple[str, ...]) -> Any:
    """``value`` without the member at ``tokens`` (``*``: in every item of an array)."""
    head, rest = tokens[0], tokens[1:]
    if head == "*" and isinstance(value, list):
        return [_without(v, rest) for v in value] if rest else value
    if not isinstance(value, dict) or head not in value:
        return value
    if not rest:
        return {k: v for k, v in value.items() if k != head}
    return {**value, head: _without(value[head], rest)}


class ToolRegistry:
    """Immutable map ``name@version`` -> :class:`CompiledTool`."""

    def __init__(self, tools: Mapping[str, CompiledTool]) -> None:
        self._tools = dict(tools)
        self._sorted = tuple(sorted(self._tools.values(), key=lambda t: t.spec.key))

    def get(self, name: str, version: str) -> CompiledTool | None:
        return self._tools.get(f"{name}@{version}")

    def __iter__(self) -> Iterator[CompiledTool]:
        return iter(self._sorted)  # sorted once (issue 15 A4)

    def __len__(self) -> int:
        return len(self._tools)


def _line_for_pointer(text: str, pointer: str, nth: int = 1) -> str:
    """``line:column`` of the member a JSON pointer names (of its nearest present ancestor when
    it is missing), from a position-tracking scan of the file (:mod:`callgate.base.jsonpositions`).
    With duplicate members (``nth`` 2) the later one is named."""
    line, col = jsonpositions.locate(text, pointer)
    return f"{line}:{col}"


def _meta_violations(doc: Any) -> list[Violation]:
    """Every problem ``toolspec.schema.json`` finds, sorted by pointer; an unexpected member
    is reported at its own pointer (not at the object holding it)."""
    out: list[Violation] = []
    for e in _META.iter_errors(doc):
        pointer = "".join(f"/{jsonpointer.escape(str(p))}" for p in e.absolute_path)
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            declared = e.schema.get("properties", {}) if isinstance(e.schema, dict) else {}
            for key in sorted(k for k in e.instance if k not in declared):
                out.append(
                    Violation(
                        pointer=f"{pointer}/{jsonpointer.escape(key)}",
                        message=f"unknown ToolSpec member {key!r}",
                        keyword="additionalProperties",
                    )
                )
            continue
        out.append(Violation(pointer=pointer, message=e.message, keyword=str(e.validator)))
    return sorted(out, key=lambda v: (v.pointer, v.keyword, v.message))


def compile_tool(path: Path) -> CompiledTool:
    """Load one ToolSpec file. Raises LoadError with ``file:line``."""
    return compile_tool_bytes(path.read_bytes(), str(path))


def compile_tool_bytes(raw: bytes, source: str) -> CompiledTool:
    """One ToolSpec from its bytes (``callgate mcp import`` checks a ToolSpec before writing it);
    ``source`` names it in errors (``source:line``). Raises LoadError."""
    text = raw.decode("utf-8", errors="replace")
    try:
        doc = parse_json_document(raw, ParseLimits(max_bytes=4 * 1024 * 1024, max_depth=256))
    except RejectedError as exc:
        line = exc.metadata.get("line", "")
        if line and exc.metadata.get("column"):
            line = f"{line}:{exc.metadata['column']}"
        if not line and exc.violations:
            line = str(
                _line_for_pointer(
                    text, exc.violations[0].pointer, nth=2 if exc.code is ErrorCode.DUPLICATE_KEY else 1
                )
            )
        raise toolspec_invalid(
            f"not strict JSON: {exc.message}",
            source=f"{source}:{line}" if line else source,
            violations=exc.violations,
        ) from None
    problems = _meta_violations(doc)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise toolspec_invalid(
            f"{first.pointer or '/'}: {first.message}{more}",
            source=f"{source}:{_line_for_pointer(text, first.pointer)}",
            violations=problems,
        )
    assert isinstance(doc, dict)
    name, version = doc["name"], doc["version"]
    problem = tool_name_problem(name)
    if problem is not None:
        raise toolspec_invalid(
            f"tool name '{name[:64]}' {problem}",
            source=f"{source}:{_line_for_pointer(text, '/name')}",
        )

    def located(exc: LoadError) -> LoadError:
        ptr = exc.violations[0].pointer if exc.violations else ""
        return exc.located(f"{source}:{_line_for_pointer(text, ptr)}")

    def compile_member(member: str) -> CompiledSchema:
        """One of the ToolSpec's schemas, its violations located under ``/<member>``."""
        try:
            return CompiledSchema.compile(doc[member], source=source, dialect=doc["schema_dialect"])
        except LoadError as exc:
            prefixed = [Violation(f"/{member}{v.pointer}", v.message, v.keyword) for v in exc.violations]
            raise located(exc.located(exc.source, violations=prefixed)) from None

    unknown = [
        v
        for member in ("input_schema", "normalized_schema", "output_schema")
        if member in doc
        for v in unknown_keywords(doc[member], f"/{member}")
    ]
    if unknown:
        first = unknown[0]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise toolspec_invalid(
            f"{first.pointer}: {first.message}{more}",
            source=f"{source}:{_line_for_pointer(text, first.pointer)}",
            violations=unknown,
        )
    schema = compile_member("input_schema")
    normalized_schema = compile_member("normalized_schema") if "normalized_schema" in doc else schema
    output_schema = compile_member("output_schema") if "output_schema" in doc else None
    try:
        chain = NormalizerChain.build(doc.get("normalizers", []), source=source)
    except LoadError as exc:
        raise located(exc) from None
    try:
        limits_from_spec(doc.get("result_limits", {}))
    except ValueError as exc:
        raise toolspec_invalid(
            str(exc), source=f"{source}:{_line_for_pointer(text, '/result_limits')}"
        ) from None
    resource = ResourceTemplate.compile(
        doc["resource_template"], source=f"{source}:{_line_for_pointer(text, '/resource_template')}"
    )
    try:
        text_policy = TextPolicy.build(
            doc.get("text_policy"), doc["input_schema"], resource.fields, source=source
        )
    except LoadError as exc:
        raise located(exc) from None
    meters = parse_meters(doc, f"{source}:{_line_for_pointer(text, '/meters')}")
    labels = parse_labels(doc, f"{source}:{_line_for_pointer(text, '/result_labels')}")
    spec = ToolSpec(
        name=name,
        version=version,
        description=doc.get("description", ""),
        input_schema=doc["input_schema"],
        schema_dialect=doc["schema_dialect"],
        side_effect_class=SideEffectClass(doc["side_effect_class"]),
        required_capabilities=tuple(doc["required_capabilities"]),
        resource_template=doc["resource_template"],
        timeout_policy=doc.get("timeout_policy", {}),
        retry_policy=doc.get("retry_policy", {}),
        idempotency=doc.get("idempotency", {}),
        result_limits=doc.get("result_limits", {}),
        normalizers=tuple(doc.get("normalizers", [])),
        spec_digest="sha256:" + hashlib.sha256(raw).hexdigest(),
        source=source,
        output_schema=doc.get("output_schema"),
    )
    return CompiledTool(
        spec=spec,
        schema=schema,
        normalized_schema=normalized_schema,
        normalizers=chain,
        resource=resource,
        input_schema_json=json.dumps(doc["input_schema"], ensure_ascii=False, sort_keys=True),
        output_schema=output_schema,
        times=time_fields(doc.get("normalized_schema", doc["input_schema"])),
        text_policy=text_policy,
        meters=meters,
        labels=labels,
        output_schema_json=(
            json.dumps(doc["output_schema"], ensure_ascii=False, sort_keys=True)
            if "output_schema" in doc
            else ""
        ),
    )


def load_tools(directory: Path) -> ToolRegistry:
    """Load every ``*.json`` under ``directory``; duplicates of ``name@version`` are an error."""
    if not directory.is_dir():
        raise toolspec_invalid("ToolSpec directory not found", source=str(directory))
    tools: dict[str, CompiledTool] = {}
    for path in sorted(directory.glob("*.json")):
        tool = compile_tool(path)
        if tool.spec.key in tools:
            raise toolspec_invalid(
                f"{tool.spec.key} is defined twice (also in {tools[tool.spec.key].spec.source})",
                source=str(path),
            )
        tools[tool.spec.key] = tool
    if not tools:
        raise toolspec_invalid("no ToolSpec files (*.json)", source=str(directory))
    return ToolRegistry(tools)
