"""callgate: an authorization sidecar for AI-agent tool calls.

A language model only proposes a tool call; callgate turns the proposal into an invocation the
runtime may execute, or a structured refusal, and records every step (spec chapter 6).

The folders are the architecture (drawn in docs/ARCHITECTURE.md):

    base/         shared vocabulary: model types, errors, event kinds, states, registries
    arguments/    the argument library: strict parse, JSON Schema, normalizers, RFC 8785 digest
    propose/      the Propose chain: lookup -> parse -> validate -> normalize -> authorize -> decide
    execute/      attempts, retries, budgets, secrets, redaction, result encoding
    credentials/  the one claims type, the issuer and the executors' offline verifier
    policy/       ToolSpecs, policy snapshots, their lifecycle, the engines and their registry
    store/        events, invocations and idempotency keys; the trail of one call
    server/       the composition root, the interceptor, thin servicers, status mapping
    observability/ metrics, decision logs and traces fed by committed events
    native/       the one bridge to the compiled core (callgate._native, docs/NATIVE.md)
    cli/          serve, check, eval, policy test, explain, console, mcp
    client/       the Python client (slim install: grpcio and protobuf only)
    adapters/     openai-agents and LangGraph in front of callgate (each its own extra)
    mcp/          the MCP gateway (the ``mcp`` extra)
    console/      the confirmation console
    gen/          generated protobuf stubs (do not edit)

``callgate.__version__`` is the installed distribution's version (read from its metadata on
first use, so importing the package stays free of it).
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("callgate")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'callgate' has no attribute {name!r}")
