"""Docs derived from code, so they cannot drift (``scripts/gen-docs``; checked by tests)."""

from __future__ import annotations

import ast
import dataclasses
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from callgate import config as config_module
from callgate.base.errors import DESCRIPTION, ErrorCode
from callgate.server.status import RULES, Audience

_HEADER = """# Error codes

Stable `snake_case` codes (`callgate/base/errors.py`). The same string appears everywhere a code
appears: `Rejection.code` and `Decision.error_code` in answers, `google.rpc.ErrorInfo.reason`
(domain `callgate.dev`) on gRPC errors, events and metric labels. Who each code is for, its gRPC
status and whether it is final or retryable are defined once, in the table `RULES` of
`callgate/server/status.py`. This page is generated from it by `scripts/gen-docs`;
`tests/test_docs.py` fails when it is stale, `tests/test_codes.py` checks the table is
exhaustive and that behaviour follows it.

## The rule

- **model**: the proposal itself is at fault and the model can act on it (propose other
  arguments, pick another tool it was shown, or stop and tell the user). `Propose` never fails
  with such a code: it answers **OK**, the invocation is recorded in its terminal state and the
  code is `rejection.code` (a refused proposal) or `decision.error_code` (a fail-closed deny);
  the runtime hands it to the model in the tool message. The gRPC status in the table is used
  only when another RPC raises the same code for its own caller (e.g. `EncodeResult` refusing an
  executor's result value as `invalid_json`).
- **runtime**: only the code around the model can fix it: sessions, ids, idempotency keys and
  deadlines come from the runtime (spec 6.1), and confirmations, the executor protocol, budgets
  and availability are the runtime's to handle. Always a **gRPC error** with the status below.
  When `Propose` refuses a proposal for such a reason (`tools_not_listed`, `idempotency_key_*`),
  the refusal is still recorded (events, terminal state, usage) and `ErrorInfo.metadata` names it
  (`invocation_id`, `state`): the runtime fixes its request (lists the tools, supplies a key,
  uses a new key) and proposes again; the model is not told.
- **operator**: configuration, policies, secret bindings or a defect: a load failure or a
  **gRPC error**; neither the model nor the runtime can fix it by changing the request.

Retry: **final** = the same request gets the same answer, change something first; **retryable**
= the same request may succeed later (back off, within the invocation's deadline);
**retry_after** = retry only at `metadata.retry_after` when the error carries it, else final.

| code | audience | delivered as | gRPC status | retry | meaning |
|---|---|---|---|---|---|
"""


def errors_markdown() -> str:
    rows = []
    for c in ErrorCode:
        rule = RULES[c]
        where = "OK answer" if rule.audience is Audience.MODEL else "gRPC error"
        rows.append(
            f"| `{c.value}` | {rule.audience.value} | {where} | `{rule.status.name}` | "
            f"{rule.retry.value} | {DESCRIPTION[c]} |"
        )
    return _HEADER + "\n".join(rows) + "\n" + _ERRORS_FOOTER


_ERRORS_FOOTER = """
**Overload refusals that carry no callgate code.** Two refusals under overload come from gRPC
itself, not from the sidecar's Python, and carry no `ErrorInfo` and no `RetryInfo` (no
`grpc-status-details-bin`, no `grpc-retry-pushback-ms`):

- **gRPC core's pending bound** (`server.max_pending_rpcs`, docs/OPERATE.md "Overload", item
  4): a call that finds its method's queue in front of the event loop full (refusals start at
  `max_pending_rpcs` waiting calls; all are refused at twice it) is dropped before any Python
  runs, and the caller sees gRPC `CANCELLED` (measured with grpcio 1.85 and grpc-go clients).
  Nothing was recorded. Treat a `CANCELLED` the caller did not cause itself as `overloaded`
  without a hint: retry with jittered exponential backoff from about 50 ms. At several times
  capacity most refusals are these; each costs the sidecar about 60 µs of CPU, against about
  350 µs for an `overloaded` refusal in Python (docs/BENCHMARKS.md, "Issue 34 item 7: where
  goodput goes").
  While the admission's limit is full the event loop takes no call from this queue
  (`callgate/server/intake.py`), so a call beyond the limit waits here and is served in turn,
  is dropped (`CANCELLED`), ends at its own deadline (`DEADLINE_EXCEEDED` at the caller, nothing
  recorded), or, when nothing in flight ends for a latency target, is refused `overloaded`.
- **`server.max_streams_per_connection`** (off by default; HTTP/2 `MAX_CONCURRENT_STREAMS`): a
  client at the limit holds further calls itself. grpcio clients wait (the call ends at its
  deadline with `DEADLINE_EXCEEDED` if no stream frees); grpc-go clients in
  `bench/bench_overload.py` got `UNAVAILABLE` (`REFUSED_STREAM` from gRPC core), even at a
  quarter of capacity. Either way nothing reached the sidecar's Python and nothing was recorded.
- **`admission_target_ms = 0`** (the admission off): gRPC's own fixed limit of
  `max_concurrent_rpcs` answers `RESOURCE_EXHAUSTED` "Concurrent RPC limit exceeded!" without a
  hint, and counts health too.

Health (`grpc.health.v1.Health`) is never refused by the admission. It has a gRPC core queue of
its own, because it is a registered method like every `callgate.v1` method, so a flood of
another method's calls never drops a probe (`tests/test_admission.py`).
"""
"""After the table: the overload refusals gRPC answers itself, without a callgate code."""


_CONFIG_HEADER = """# Configuration reference

`callgate serve --config callgate.toml` (and `check`, `eval`, `policy test`, `explain`) read one
TOML file. Every key has a default that runs the embedded setup (Cedar + SQLite on Unix
sockets); unknown keys and sections are errors, so a typo never silently falls back to a default.
Relative paths are resolved against the directory of the config file. This page is generated from
the docstrings of `callgate/config.py` by `scripts/gen-docs`; `tests/test_docs.py` fails when it is
stale. The `[mcp]` tables are read and validated by `callgate mcp` (docs/MCP.md); `callgate serve`
skips them, so one file configures both.
"""


def _field_docs(cls: type[Any]) -> dict[str, str]:
    """Attribute docstrings (the string literal after each field) of a config dataclass."""
    tree = ast.parse(Path(sys.modules[cls.__module__].__file__ or "").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            docs: dict[str, str] = {}
            body = node.body
            for i, stmt in enumerate(body):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and i + 1 < len(body)
                ):
                    nxt = body[i + 1]
                    if (
                        isinstance(nxt, ast.Expr)
                        and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)
                    ):
                        docs[stmt.target.id] = " ".join(nxt.value.value.split())
            return docs
    return {}


def _default(value: Any) -> str:
    if isinstance(value, Enum):
        return f'`"{value.value}"`'
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    if dataclasses.is_dataclass(value):
        parts = [
            f"{f.name} = {_default(getattr(value, f.name)).strip('`')}" for f in dataclasses.fields(value)
        ]
        return "`{ " + ", ".join(parts) + " }`"
    return f"`{value}`"


def _extension_sections() -> list[tuple[str, type[Any]]]:
    """Sections other loaders own (``config.EXTENSION_SECTIONS``): the MCP gateway's ``[mcp]``."""
    from callgate.mcp import config as mcp_config

    return [
        ("mcp", mcp_config.McpConfig),
        ("mcp.identity", mcp_config.McpIdentityConfig),
        ("mcp.http", mcp_config.McpHttpConfig),
        ("[mcp.upstreams]", mcp_config.McpUpstreamConfig),
    ]


def config_markdown() -> str:
    out = [_CONFIG_HEADER]
    sections: list[tuple[str, type[Any]]] = [
        *config_module._SECTIONS.items(),
        ("[secrets]", config_module.SecretConfig),
    ]
    sections += _extension_sections()
    at = [name for name, _ in sections].index("store") + 1
    sections.insert(at, ("store.retention", config_module.RetentionConfig))  # a table of [store]
    for name, cls in sections:
        title = f"[{name}]"
        doc = " ".join((cls.__doc__ or "").split())
        out.append(f"\n## `{title}`\n")
        if doc and not doc.startswith(cls.__name__ + "("):
            out.append(doc + "\n")
        out.append("| key | default | meaning |\n|---|---|---|")
        docs = _field_docs(cls)
        instance = cls()
        for f in dataclasses.fields(cls):
            value = getattr(instance, f.name)
            shown = (
                "see below" if dataclasses.is_dataclass(value) or f.name == "upstreams" else _default(value)
            )
            if cls.__name__ == "McpUpstreamConfig" and f.name in ("env", "headers"):
                shown = "`{}`"  # TOML tables, held as tuples of pairs
            out.append(f"| `{f.name}` | {shown} | {docs.get(f.name, '')} |")
    return "\n".join(out) + "\n"
