"""The call surface of the compiled core ``callgate._native`` (the Rust crate in ``native/``,
PyO3; ``native/src/lib.rs`` registers it). mypy checks every call through
:mod:`callgate.native` against these signatures; keep them in step with the crate's
``#[pyfunction]`` / ``#[pymethods]`` (tests/test_native_stub.py compares the names)."""

from typing import Any, final

Answer = tuple[str, list[tuple[str, str, str]], str]
"""One Cedar decision: (effect, [(code, policy id, message)], error code)."""
FrontResult = tuple[str | None, int, Any, Any, bytes, str, list[str]]
"""code (None: accepted, ``defer``, or a refusal code), top-level keys, parsed value,
normalized value, RFC 8785 bytes, digest, applied normalizers."""
Authz = tuple[str, list[tuple[Answer, Answer | None]]]
"""(resource, [(enforcing, shadow)] per capability)."""
RuleDay = tuple[str, int, int, int, int, int, int, int]

__version__: str
__build__: str
"""The profile, optimization level, target and rustc of this build (native/build.rs)."""
__source__: str
"""``callgate-native-source:`` and the hash of the sources scripts/native built (``?`` elsewhere)."""

def parse_code(raw: bytes, max_bytes: int, max_depth: int, document: bool = False) -> str | None: ...
def parse_value(raw: bytes, max_bytes: int, max_depth: int) -> tuple[str | None, Any]: ...
def canonical_of(raw: bytes, max_bytes: int, max_depth: int) -> tuple[str | None, bytes]: ...
def format_number(f: float) -> str: ...
def invocation_digest(tenant: str, tool_name: str, tool_version: str, canonical: bytes) -> str: ...
def cedar_context_of(raw: bytes) -> str | None: ...
def render_resource(template: str, raw: bytes) -> str | None: ...
def set_text_table(ranges: list[tuple[int, int]], mapped: dict[str, tuple[str, str, str]]) -> bool: ...

@final
class Zone:
    def __new__(
        cls,
        trans_utc: list[int],
        trans_idx: list[int],
        utcoff: list[int],
        isdst: list[bool],
        after: tuple[str, int, int, RuleDay | None, RuleDay | None] | None,
    ) -> Zone: ...
    def utcoffset(self, ts: int, fold: bool) -> int: ...
    def fromutc(self, ts: int) -> tuple[int, bool]: ...

@final
class Vocab:
    def __new__(
        cls,
        fixed: dict[str, int],
        counts: list[tuple[str, int]],
        units: dict[str, int],
        weekdays: dict[str, int],
        articles: set[str],
        prefixes: dict[str, str],
        suffixes: dict[str, str],
    ) -> Vocab: ...

@final
class CedarSnapshot:
    def __new__(
        cls,
        schema_text: str,
        sources: list[tuple[str, bool, list[str]]],
        enforcing: dict[str, int],
        enforcing_default: int,
        shadow: tuple[dict[str, int], int] | None,
        policy_ids: dict[str, str],
        confirm: dict[str, str],
        fragments: list[str],
        edges: dict[int, list[int]],
        always: list[int],
        cache_max: int,
        project: bool = True,
    ) -> CedarSnapshot: ...
    @staticmethod
    def load(
        schema_text: str,
        sources: list[tuple[str, bool, list[str]]],
        enforcing: dict[str, int],
        enforcing_default: int,
        shadow: tuple[dict[str, int], int] | None,
        policy_ids: dict[str, str],
        confirm: dict[str, str],
        entities_json: str,
        literals: list[tuple[str, str]],
        cache_max: int,
        project: bool = True,
    ) -> CedarSnapshot: ...
    @staticmethod
    def dropped_apart() -> int: ...
    def authorize(
        self, principal: str, action: str, resource: str, tenant: str, context_json: str, detach: bool = True
    ) -> tuple[Answer, Answer | None]: ...
    def declare_now(self, actions: list[str]) -> bool: ...
    def slice_size(self, action: str) -> int: ...
    def projection(self, action: str) -> str | None: ...
    def projected_actions(self) -> int: ...
    def projected_decisions(self) -> int: ...
    def cached(self) -> int: ...

@final
class Tool:
    def __new__(
        cls,
        name: str,
        version: str,
        normalizers: list[tuple[str, str, str, dict[str, str]]],
        schema_json: str | None = None,
        normalized_schema_json: str | None = None,
        resource_template: str | None = None,
    ) -> Tool: ...
    @property
    def schema_native(self) -> bool: ...
    def normalize(
        self, raw: bytes, reference_clock: str, zone: Zone | None = None, vocab: Vocab | None = None
    ) -> tuple[str | None, Any, bytes, list[str]]: ...
    def is_valid(self, raw: bytes, normalized: bool = False) -> bool | None: ...
    def front(
        self,
        raw: bytes,
        tenant: str,
        locale: str,
        reference_clock: str,
        max_bytes: int,
        max_depth: int,
        detach: bool = True,
        zone: Zone | None = None,
        vocab: Vocab | None = None,
    ) -> FrontResult: ...
    def decide(
        self,
        raw: bytes,
        tenant: str,
        locale: str,
        reference_clock: str,
        max_bytes: int,
        max_depth: int,
        cedar: CedarSnapshot,
        principal: str,
        capabilities: list[str],
        detach: bool,
        zone: Zone | None = None,
        vocab: Vocab | None = None,
        now: str | None = None,
    ) -> tuple[FrontResult, Authz | None]: ...
    def decide_metered(
        self,
        canonical: bytes,
        tenant: str,
        cedar: CedarSnapshot,
        principal: str,
        capabilities: list[str],
        members: dict[str, Any],
        now: str | None = None,
    ) -> Authz | None: ...
