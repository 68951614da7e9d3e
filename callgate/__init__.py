"""callgate: an authorization sidecar for AI-agent tool calls.

A language model only proposes a tool call; callgate turns the proposal into an invocation the
runtime may execute, or a structured refusal, and records every step (spec chapter 6).

The folders are the architecture (drawn in docs/ARCHITECTURE.md):

    core/         shared vocabulary: model types, errors, event kinds, states, registries
    arguments/    the argument library: strict parse, JSON Schema, normalizers, RFC 8785 digest
    propose/      the Propose chain: lookup -> parse -> validate -> normalize -> authorize -> decide
    execute/      attempts, retries, budgets, secrets, redaction, result encoding
    credentials/  the one claims type, the issuer and the executors' offline verifier
    policy/       ToolSpecs, policy snapshots, their lifecycle, the engines and their registry
    store/        events, invocations and idempotency keys; the trail of one call
    server/       the composition root, the interceptor, thin servicers, status mapping
    observability/ metrics, decision logs and traces fed by committed events
    cli/          serve, check, eval, policy test, explain
    gen/          generated protobuf stubs (do not edit)
"""
