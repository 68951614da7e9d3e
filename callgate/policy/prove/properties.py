"""The properties file: what ``callgate policy prove`` checks (docs/PROVE.md, "The properties file").

TOML beside the policies (``policies/properties.toml``), one ``[[property]]`` table each, checked
against ``properties.schema.json`` (JSON Schema 2020-12). Errors name the file and the line of the
property's ``[[property]]`` header.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from callgate.base.errors import LoadError, policy_invalid
from callgate.policy.prove.cli import PROPERTIES_FILE as PROPERTIES_FILE

SCHEMA_FILE = Path(__file__).with_name("properties.schema.json")

_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*property[ \t]*\]\]", re.MULTILINE)


class Kind(StrEnum):
    """What a property asserts over every request in its scope (callgate's answers)."""

    NEVER_ALLOWED = "never_allowed"
    """No request is allowed or confirmed."""
    NEVER_ALLOWED_WITHOUT_CONFIRM = "never_allowed_without_confirm"
    """No request is allowed outright (a confirmation may still let it run)."""
    ALWAYS_DENIED = "always_denied"
    """Every request is denied (Cedar's always-denies: the same answers as ``never_allowed``)."""
    NEVER_ERRORS = "never_errors"
    """No policy errors on any request (an error is a fail-closed deny, ``policy_evaluation_error``)."""
    IMPLIES = "implies"
    """Every request this set admits, the ``other`` set admits."""
    EQUIVALENT = "equivalent"
    """This set and ``other`` admit the same requests."""
    DISJOINT = "disjoint"
    """No request is admitted by both sets."""
    NO_LOOSER_THAN = "no_looser_than"
    """Nothing admitted now that ``revision`` denied, nothing allowed outright that it did not."""


class View(StrEnum):
    """Which of callgate's answers a set comparison reads (native/prove/src/main.rs)."""

    ADMITTED = "admitted"
    """ALLOW or CONFIRM."""
    ALLOWED = "allowed"
    """ALLOW without confirmation."""
    CONFIRMED = "confirmed"
    """CONFIRM."""


def _error(message: str, source: str) -> LoadError:
    """A properties file that cannot be read (``policy_invalid``), naming ``file:line``."""
    return policy_invalid(message, source=source)


@dataclass(frozen=True, slots=True)
class Property:
    name: str
    kind: Kind
    source: str
    """``file:line`` of its ``[[property]]`` header."""
    description: str = ""
    actions: tuple[str, ...] | None = None
    principals: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    when: str = ""
    other: Path | None = None
    view: View = View.ADMITTED
    revision: str = ""
    guard: bool = False

    def scope(self) -> str | None:
        """The Cedar condition the property covers (None: every request)."""
        parts: list[str] = []
        if self.principals:
            parts.append("(" + " || ".join(f"principal in {u}" for u in self.principals) + ")")
        if self.resources:
            parts.append("(" + " || ".join(f"resource in {u}" for u in self.resources) + ")")
        if self.when:
            parts.append(f"({self.when})")
        return " && ".join(parts) or None


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def load_properties(path: Path) -> tuple[Property, ...]:
    """Read and check ``path``. Raises :class:```policy_invalid``` naming ``file:line``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _error(f"cannot read: {exc.strerror}", str(path)) from None
    try:
        doc: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_in_message(str(exc))
        raise _error(f"not valid TOML: {exc}", f"{path}:{line}") from None
    headers = [text.count("\n", 0, m.start()) + 1 for m in _HEADER.finditer(text)]

    def where(index: int | None) -> str:
        if index is not None and 0 <= index < len(headers):
            return f"{path}:{headers[index]}"
        return f"{path}:1"

    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        at = list(err.absolute_path)
        index = at[1] if len(at) > 1 and at[0] == "property" and isinstance(at[1], int) else None
        field = ".".join(str(p) for p in at[2:]) if index is not None else ".".join(str(p) for p in at)
        raise _error(f"{field or 'property'}: {err.message}", where(index))
    out: list[Property] = []
    names: set[str] = set()
    for i, raw in enumerate(doc["property"]):
        if raw["name"] in names:
            raise _error(f"duplicate property name '{raw['name']}'", where(i))
        names.add(raw["name"])
        other = raw.get("other")
        out.append(
            Property(
                name=raw["name"],
                kind=Kind(raw["kind"]),
                source=where(i),
                description=raw.get("description", ""),
                actions=tuple(raw["actions"]) if "actions" in raw else None,
                principals=tuple(raw.get("principals", ())),
                resources=tuple(raw.get("resources", ())),
                when=raw.get("when", ""),
                other=(path.parent / other) if other else None,
                view=View(raw.get("view", View.ADMITTED.value)),
                revision=raw.get("revision", ""),
                guard=bool(raw.get("guard", False)),
            )
        )
    return tuple(out)


def _line_in_message(message: str) -> int:
    m = re.search(r"line (\d+)", message)
    return int(m.group(1)) if m else 1
