"""callgate's Python client: sessions, tools in a provider's dialect, typed proposal outcomes,
waiting for a confirmation (``WatchInvocation``) and the executor helper.

Imports only grpcio, protobuf, grpcio-status, the generated stubs (:mod:`callgate.gen.v1`) and
the standard library (opentelemetry optionally, for ``traceparent``): never the server's modules
(``tests/test_client.py`` checks it). The loop (docs/CLIENTS.md)::

    with Client("run/agent.sock", executor="run/executor.sock") as cg:
        s = cg.session("acme", user_id)                  # the runtime's own auth
        tools = s.tools("mc-1", "openai")
        for call in model(tools):
            out = s.propose(ToolCall(call.id, call.name, call.arguments))
            if isinstance(out, NeedsConfirmation) and s.wait_confirmed(out, timeout=60):
                out = Allowed(out.invocation_id, out.digest, out.tool_call_id, out.normalized_arguments)
            msg = cg.run(out.invocation_id, tool_fn, executor_id="x").message \\
                if isinstance(out, Allowed) else out.message

Exceptions (every one has a stable ``code``; none is ever an outcome to execute)::

    CallgateClientError                 base                         code
     +-- TransportError                 sidecar unreachable, lost    unavailable
     |    +-- DeadlineExceeded          the call's deadline passed   deadline_exceeded
     +-- MalformedAnswer                an answer we cannot trust    malformed_answer
     +-- CallRefused                    the sidecar refused the call ErrorInfo.reason (docs/ERRORS.md)
     +-- ExecutionError                 the executor helper stopped  execution_stopped

The tool-name rule (:mod:`callgate.client.names`: upstream, callgate and wire names) is exported
here too: the MCP gateway and importer use it through this package only.
"""

from callgate.client._wire import ToolCall, idempotency_key
from callgate.client.aio import AsyncClient, AsyncConfirmer, AsyncSession
from callgate.client.errors import (
    CallgateClientError,
    CallRefused,
    DeadlineExceeded,
    ExecutionError,
    MalformedAnswer,
    TransportError,
)
from callgate.client.executor import (
    BusinessRejection,
    Committed,
    NotReached,
    OutcomeUnknown,
    Stage,
    ToolContext,
    ToolFailure,
    ToolResult,
    Transient,
)
from callgate.client.names import (
    HASHED,
    MAX_NAME,
    MAX_WIRE,
    MCP_NAME,
    NAME_RULE,
    TOOL_NAME,
    UPSTREAM_NAME,
    WIRE_NAME,
    capability_of,
    distinct_capability,
    import_name,
    name_of_wire,
    tool_name_problem,
    wire_name,
)
from callgate.client.outcomes import (
    Allowed,
    Denied,
    NeedsConfirmation,
    Outcome,
    Pending,
    Rejected,
    Replayed,
    tool_message,
)
from callgate.client.sync import Client, Confirmer, Session
from callgate.client.tools import LEGAL_NAME, Dialect, Tool, ToolNames, legal_name, strict_schema

__all__ = [
    "HASHED",
    "LEGAL_NAME",
    "MAX_NAME",
    "MAX_WIRE",
    "MCP_NAME",
    "NAME_RULE",
    "TOOL_NAME",
    "UPSTREAM_NAME",
    "WIRE_NAME",
    "Allowed",
    "AsyncClient",
    "AsyncConfirmer",
    "AsyncSession",
    "BusinessRejection",
    "CallRefused",
    "CallgateClientError",
    "Client",
    "Committed",
    "Confirmer",
    "DeadlineExceeded",
    "Denied",
    "Dialect",
    "ExecutionError",
    "MalformedAnswer",
    "NeedsConfirmation",
    "NotReached",
    "Outcome",
    "OutcomeUnknown",
    "Pending",
    "Rejected",
    "Replayed",
    "Session",
    "Stage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailure",
    "ToolNames",
    "ToolResult",
    "Transient",
    "TransportError",
    "capability_of",
    "distinct_capability",
    "idempotency_key",
    "import_name",
    "tool_message",
    "legal_name",
    "name_of_wire",
    "strict_schema",
    "tool_name_problem",
    "wire_name",
]
