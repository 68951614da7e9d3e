from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_UNSPECIFIED: _ClassVar[State]
    PROPOSED: _ClassVar[State]
    PARSED: _ClassVar[State]
    VALIDATED: _ClassVar[State]
    AUTHORIZED: _ClassVar[State]
    PREPARED: _ClassVar[State]
    EXECUTING: _ClassVar[State]
    COMMITTED: _ClassVar[State]
    OBSERVED: _ClassVar[State]
    PARSE_REJECTED: _ClassVar[State]
    VALIDATION_REJECTED: _ClassVar[State]
    AUTHORIZATION_REJECTED: _ClassVar[State]
    CANCELLED_BEFORE_COMMIT: _ClassVar[State]
    FAILED_BEFORE_COMMIT: _ClassVar[State]
    OUTCOME_UNKNOWN: _ClassVar[State]
    FAILED_AFTER_COMMIT: _ClassVar[State]

class Effect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_UNSPECIFIED: _ClassVar[Effect]
    ALLOW: _ClassVar[Effect]
    DENY: _ClassVar[Effect]
    CONFIRM: _ClassVar[Effect]

class FailureClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_CLASS_UNSPECIFIED: _ClassVar[FailureClass]
    NOT_REACHED: _ClassVar[FailureClass]
    TRANSIENT: _ClassVar[FailureClass]
    TIMEOUT: _ClassVar[FailureClass]
    BUSINESS_REJECTION: _ClassVar[FailureClass]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_COMMITTED: _ClassVar[Outcome]
    OUTCOME_FAILED_BEFORE_COMMIT: _ClassVar[Outcome]
    OUTCOME_UNKNOWN_COMMIT: _ClassVar[Outcome]
    OUTCOME_FAILED_AFTER_COMMIT: _ClassVar[Outcome]

class PartVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PART_VERDICT_UNSPECIFIED: _ClassVar[PartVerdict]
    PART_CLEAN: _ClassVar[PartVerdict]
    PART_HOLDS_SECRET: _ClassVar[PartVerdict]

class ReconcileFinding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECONCILE_FINDING_UNSPECIFIED: _ClassVar[ReconcileFinding]
    RECONCILE_COMMITTED: _ClassVar[ReconcileFinding]
    RECONCILE_NOT_COMMITTED: _ClassVar[ReconcileFinding]
    RECONCILE_FAILED_AFTER_COMMIT: _ClassVar[ReconcileFinding]
STATE_UNSPECIFIED: State
PROPOSED: State
PARSED: State
VALIDATED: State
AUTHORIZED: State
PREPARED: State
EXECUTING: State
COMMITTED: State
OBSERVED: State
PARSE_REJECTED: State
VALIDATION_REJECTED: State
AUTHORIZATION_REJECTED: State
CANCELLED_BEFORE_COMMIT: State
FAILED_BEFORE_COMMIT: State
OUTCOME_UNKNOWN: State
FAILED_AFTER_COMMIT: State
EFFECT_UNSPECIFIED: Effect
ALLOW: Effect
DENY: Effect
CONFIRM: Effect
FAILURE_CLASS_UNSPECIFIED: FailureClass
NOT_REACHED: FailureClass
TRANSIENT: FailureClass
TIMEOUT: FailureClass
BUSINESS_REJECTION: FailureClass
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_COMMITTED: Outcome
OUTCOME_FAILED_BEFORE_COMMIT: Outcome
OUTCOME_UNKNOWN_COMMIT: Outcome
OUTCOME_FAILED_AFTER_COMMIT: Outcome
PART_VERDICT_UNSPECIFIED: PartVerdict
PART_CLEAN: PartVerdict
PART_HOLDS_SECRET: PartVerdict
RECONCILE_FINDING_UNSPECIFIED: ReconcileFinding
RECONCILE_COMMITTED: ReconcileFinding
RECONCILE_NOT_COMMITTED: ReconcileFinding
RECONCILE_FAILED_AFTER_COMMIT: ReconcileFinding

class Subject(_message.Message):
    __slots__ = ("tenant", "id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    id: str
    def __init__(self, tenant: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ("code", "policy_id", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    policy_id: str
    message: str
    def __init__(self, code: _Optional[str] = ..., policy_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("effect", "reasons", "policy_ids", "error_code", "engine")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    effect: Effect
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    error_code: str
    engine: str
    def __init__(self, effect: _Optional[_Union[Effect, str]] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., error_code: _Optional[str] = ..., engine: _Optional[str] = ...) -> None: ...

class Violation(_message.Message):
    __slots__ = ("pointer", "message", "keyword")
    POINTER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_FIELD_NUMBER: _ClassVar[int]
    pointer: str
    message: str
    keyword: str
    def __init__(self, pointer: _Optional[str] = ..., message: _Optional[str] = ..., keyword: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("code", "message", "violations")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ...) -> None: ...

class Budgets(_message.Message):
    __slots__ = ("max_model_calls", "max_tool_calls", "max_wall_clock_seconds", "max_result_bytes", "max_external_cost_micros")
    MAX_MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_WALL_CLOCK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_EXTERNAL_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    max_model_calls: int
    max_tool_calls: int
    max_wall_clock_seconds: int
    max_result_bytes: int
    max_external_cost_micros: int
    def __init__(self, max_model_calls: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_wall_clock_seconds: _Optional[int] = ..., max_result_bytes: _Optional[int] = ..., max_external_cost_micros: _Optional[int] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema_json", "schema_dialect", "side_effect_class", "required_capabilities", "resource_template", "spec_digest", "output_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_DIALECT_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_CLASS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema_json: str
    schema_dialect: str
    side_effect_class: str
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    resource_template: str
    spec_digest: str
    output_schema_json: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., schema_dialect: _Optional[str] = ..., side_effect_class: _Optional[str] = ..., required_capabilities: _Optional[_Iterable[str]] = ..., resource_template: _Optional[str] = ..., spec_digest: _Optional[str] = ..., output_schema_json: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("subject", "timezone", "locale", "budgets", "tool_allowlist", "session_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    TOOL_ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    subject: Subject
    timezone: str
    locale: str
    budgets: Budgets
    tool_allowlist: _containers.RepeatedScalarFieldContainer[str]
    session_id: str
    def __init__(self, subject: _Optional[_Union[Subject, _Mapping]] = ..., timezone: _Optional[str] = ..., locale: _Optional[str] = ..., budgets: _Optional[_Union[Budgets, _Mapping]] = ..., tool_allowlist: _Optional[_Iterable[str]] = ..., session_id: _Optional[str] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "opened_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OPENED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    opened_at: str
    def __init__(self, session_id: _Optional[str] = ..., opened_at: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("session_id", "model_call_id", "fed_invocation_ids")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    FED_INVOCATION_IDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    model_call_id: str
    fed_invocation_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., model_call_id: _Optional[str] = ..., fed_invocation_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "tool_set_digest")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_SET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    tool_set_digest: str
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., tool_set_digest: _Optional[str] = ...) -> None: ...

class ProposeRequest(_message.Message):
    __slots__ = ("session_id", "model_call_id", "proposal_id", "tool_name", "tool_version", "arguments", "idempotency_key", "omit_normalized_arguments")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OMIT_NORMALIZED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    model_call_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    arguments: bytes
    idempotency_key: str
    omit_normalized_arguments: bool
    def __init__(self, session_id: _Optional[str] = ..., model_call_id: _Optional[str] = ..., proposal_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_version: _Optional[str] = ..., arguments: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., omit_normalized_arguments: _Optional[bool] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("invocation_id", "state", "decision", "digest", "normalized_arguments", "rejection", "confirmation_expires_at", "schema_dialect", "validator", "idempotent_replay", "replayed_message", "masked_arguments")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_DIALECT_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_REPLAY_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASKED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    state: State
    decision: Decision
    digest: str
    normalized_arguments: bytes
    rejection: Rejection
    confirmation_expires_at: str
    schema_dialect: str
    validator: str
    idempotent_replay: bool
    replayed_message: bytes
    masked_arguments: bytes
    def __init__(self, invocation_id: _Optional[str] = ..., state: _Optional[_Union[State, str]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., digest: _Optional[str] = ..., normalized_arguments: _Optional[bytes] = ..., rejection: _Optional[_Union[Rejection, _Mapping]] = ..., confirmation_expires_at: _Optional[str] = ..., schema_dialect: _Optional[str] = ..., validator: _Optional[str] = ..., idempotent_replay: _Optional[bool] = ..., replayed_message: _Optional[bytes] = ..., masked_arguments: _Optional[bytes] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("invocation_id", "reason", "session_id")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    reason: str
    session_id: str
    def __init__(self, invocation_id: _Optional[str] = ..., reason: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: State
    def __init__(self, state: _Optional[_Union[State, str]] = ...) -> None: ...

class GetInvocationRequest(_message.Message):
    __slots__ = ("invocation_id", "session_id")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    session_id: str
    def __init__(self, invocation_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "invocation_id", "seq", "at", "kind", "from_state", "to_state", "trace_id", "span_id", "data")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    invocation_id: str
    seq: int
    at: str
    kind: str
    from_state: State
    to_state: State
    trace_id: str
    span_id: str
    data: _struct_pb2.Struct
    def __init__(self, event_id: _Optional[str] = ..., invocation_id: _Optional[str] = ..., seq: _Optional[int] = ..., at: _Optional[str] = ..., kind: _Optional[str] = ..., from_state: _Optional[_Union[State, str]] = ..., to_state: _Optional[_Union[State, str]] = ..., trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Invocation(_message.Message):
    __slots__ = ("invocation_id", "session_id", "model_call_id", "proposal_id", "tool_name", "tool_version", "subject", "state", "digest", "normalized_arguments", "raw_arguments", "decision", "idempotency_key", "created_at", "updated_at", "confirmation_expires_at", "rejection", "attempts", "external_resource_id", "commit_time", "cancel_requested_at", "deadline", "masked_arguments")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RAW_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MASKED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    session_id: str
    model_call_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    subject: Subject
    state: State
    digest: str
    normalized_arguments: bytes
    raw_arguments: bytes
    decision: Decision
    idempotency_key: str
    created_at: str
    updated_at: str
    confirmation_expires_at: str
    rejection: Rejection
    attempts: int
    external_resource_id: str
    commit_time: str
    cancel_requested_at: str
    deadline: str
    masked_arguments: bytes
    def __init__(self, invocation_id: _Optional[str] = ..., session_id: _Optional[str] = ..., model_call_id: _Optional[str] = ..., proposal_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_version: _Optional[str] = ..., subject: _Optional[_Union[Subject, _Mapping]] = ..., state: _Optional[_Union[State, str]] = ..., digest: _Optional[str] = ..., normalized_arguments: _Optional[bytes] = ..., raw_arguments: _Optional[bytes] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., confirmation_expires_at: _Optional[str] = ..., rejection: _Optional[_Union[Rejection, _Mapping]] = ..., attempts: _Optional[int] = ..., external_resource_id: _Optional[str] = ..., commit_time: _Optional[str] = ..., cancel_requested_at: _Optional[str] = ..., deadline: _Optional[str] = ..., masked_arguments: _Optional[bytes] = ...) -> None: ...

class GetInvocationResponse(_message.Message):
    __slots__ = ("invocation", "events")
    INVOCATION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    invocation: Invocation
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, invocation: _Optional[_Union[Invocation, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class GetResultRequest(_message.Message):
    __slots__ = ("invocation_id", "page_token", "tool_call_id", "session_id")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    page_token: str
    tool_call_id: str
    session_id: str
    def __init__(self, invocation_id: _Optional[str] = ..., page_token: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class GetResultResponse(_message.Message):
    __slots__ = ("message", "truncated", "next_page_token")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    message: bytes
    truncated: bool
    next_page_token: str
    def __init__(self, message: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListParkedRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListParkedResponse(_message.Message):
    __slots__ = ("invocations",)
    INVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    invocations: _containers.RepeatedCompositeFieldContainer[Invocation]
    def __init__(self, invocations: _Optional[_Iterable[_Union[Invocation, _Mapping]]] = ...) -> None: ...

class FindInvocationRequest(_message.Message):
    __slots__ = ("session_id", "tool_name", "tool_version", "idempotency_key")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_name: str
    tool_version: str
    idempotency_key: str
    def __init__(self, session_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_version: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class WatchInvocationRequest(_message.Message):
    __slots__ = ("invocation_id", "session_id", "cancel_on_close")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ON_CLOSE_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    session_id: str
    cancel_on_close: bool
    def __init__(self, invocation_id: _Optional[str] = ..., session_id: _Optional[str] = ..., cancel_on_close: _Optional[bool] = ...) -> None: ...

class WatchInvocationResponse(_message.Message):
    __slots__ = ("invocation", "events", "terminal")
    INVOCATION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    invocation: Invocation
    events: _containers.RepeatedCompositeFieldContainer[Event]
    terminal: bool
    def __init__(self, invocation: _Optional[_Union[Invocation, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., terminal: _Optional[bool] = ...) -> None: ...

class BeginAttemptRequest(_message.Message):
    __slots__ = ("invocation_id", "executor_id")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    executor_id: str
    def __init__(self, invocation_id: _Optional[str] = ..., executor_id: _Optional[str] = ...) -> None: ...

class BeginAttemptResponse(_message.Message):
    __slots__ = ("attempt_id", "attempt_number", "credential", "credential_expires_at", "tool_name", "tool_version", "normalized_arguments", "idempotency_key", "deadline", "state")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    attempt_number: int
    credential: str
    credential_expires_at: str
    tool_name: str
    tool_version: str
    normalized_arguments: bytes
    idempotency_key: str
    deadline: str
    state: State
    def __init__(self, attempt_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., credential: _Optional[str] = ..., credential_expires_at: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_version: _Optional[str] = ..., normalized_arguments: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., deadline: _Optional[str] = ..., state: _Optional[_Union[State, str]] = ...) -> None: ...

class RetryAdvice(_message.Message):
    __slots__ = ("retry", "reason", "backoff_ms", "attempts_left", "same_key")
    RETRY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_LEFT_FIELD_NUMBER: _ClassVar[int]
    SAME_KEY_FIELD_NUMBER: _ClassVar[int]
    retry: bool
    reason: str
    backoff_ms: int
    attempts_left: int
    same_key: bool
    def __init__(self, retry: _Optional[bool] = ..., reason: _Optional[str] = ..., backoff_ms: _Optional[int] = ..., attempts_left: _Optional[int] = ..., same_key: _Optional[bool] = ...) -> None: ...

class ReportOutcomeRequest(_message.Message):
    __slots__ = ("attempt_id", "outcome", "failure_class", "external_resource_id", "commit_time", "http_status", "cost_micros", "message")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    outcome: Outcome
    failure_class: FailureClass
    external_resource_id: str
    commit_time: str
    http_status: int
    cost_micros: int
    message: str
    def __init__(self, attempt_id: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., failure_class: _Optional[_Union[FailureClass, str]] = ..., external_resource_id: _Optional[str] = ..., commit_time: _Optional[str] = ..., http_status: _Optional[int] = ..., cost_micros: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReportOutcomeResponse(_message.Message):
    __slots__ = ("state", "retry")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    state: State
    retry: RetryAdvice
    def __init__(self, state: _Optional[_Union[State, str]] = ..., retry: _Optional[_Union[RetryAdvice, _Mapping]] = ...) -> None: ...

class EncodeResultRequest(_message.Message):
    __slots__ = ("invocation_id", "status", "value", "parts")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    status: str
    value: bytes
    parts: _containers.RepeatedCompositeFieldContainer[ResultPart]
    def __init__(self, invocation_id: _Optional[str] = ..., status: _Optional[str] = ..., value: _Optional[bytes] = ..., parts: _Optional[_Iterable[_Union[ResultPart, _Mapping]]] = ...) -> None: ...

class ResultPart(_message.Message):
    __slots__ = ("index", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    data: bytes
    def __init__(self, index: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class EncodeResultResponse(_message.Message):
    __slots__ = ("message", "truncated", "next_page_token", "state", "redactions", "withheld", "structured_json", "error_code", "part_verdicts")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REDACTIONS_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PART_VERDICTS_FIELD_NUMBER: _ClassVar[int]
    message: bytes
    truncated: bool
    next_page_token: str
    state: State
    redactions: int
    withheld: bool
    structured_json: str
    error_code: str
    part_verdicts: _containers.RepeatedScalarFieldContainer[PartVerdict]
    def __init__(self, message: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., next_page_token: _Optional[str] = ..., state: _Optional[_Union[State, str]] = ..., redactions: _Optional[int] = ..., withheld: _Optional[bool] = ..., structured_json: _Optional[str] = ..., error_code: _Optional[str] = ..., part_verdicts: _Optional[_Iterable[_Union[PartVerdict, str]]] = ...) -> None: ...

class GetJwksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetJwksResponse(_message.Message):
    __slots__ = ("jwks_json",)
    JWKS_JSON_FIELD_NUMBER: _ClassVar[int]
    jwks_json: str
    def __init__(self, jwks_json: _Optional[str] = ...) -> None: ...

class RedeemSecretRequest(_message.Message):
    __slots__ = ("credential", "secret_name")
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    SECRET_NAME_FIELD_NUMBER: _ClassVar[int]
    credential: str
    secret_name: str
    def __init__(self, credential: _Optional[str] = ..., secret_name: _Optional[str] = ...) -> None: ...

class RedeemSecretResponse(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    def __init__(self, value: _Optional[bytes] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("invocation_id", "finding", "external_resource_id", "commit_time", "message", "executor_id")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    FINDING_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    finding: ReconcileFinding
    external_resource_id: str
    commit_time: str
    message: str
    executor_id: str
    def __init__(self, invocation_id: _Optional[str] = ..., finding: _Optional[_Union[ReconcileFinding, str]] = ..., external_resource_id: _Optional[str] = ..., commit_time: _Optional[str] = ..., message: _Optional[str] = ..., executor_id: _Optional[str] = ...) -> None: ...

class ReconcileResponse(_message.Message):
    __slots__ = ("state", "already_recorded")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALREADY_RECORDED_FIELD_NUMBER: _ClassVar[int]
    state: State
    already_recorded: bool
    def __init__(self, state: _Optional[_Union[State, str]] = ..., already_recorded: _Optional[bool] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ("invocation_id", "digest", "confirmed_by", "tenant", "note")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_BY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    digest: str
    confirmed_by: str
    tenant: str
    note: str
    def __init__(self, invocation_id: _Optional[str] = ..., digest: _Optional[str] = ..., confirmed_by: _Optional[str] = ..., tenant: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ConfirmResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: State
    def __init__(self, state: _Optional[_Union[State, str]] = ...) -> None: ...

class ListPendingRequest(_message.Message):
    __slots__ = ("tenant", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class PendingConfirmation(_message.Message):
    __slots__ = ("invocation_id", "digest", "tool_name", "tool_version", "subject", "normalized_arguments", "expires_at", "reasons", "raw_arguments", "created_at")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    RAW_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    digest: str
    tool_name: str
    tool_version: str
    subject: Subject
    normalized_arguments: bytes
    expires_at: str
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    raw_arguments: bytes
    created_at: str
    def __init__(self, invocation_id: _Optional[str] = ..., digest: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_version: _Optional[str] = ..., subject: _Optional[_Union[Subject, _Mapping]] = ..., normalized_arguments: _Optional[bytes] = ..., expires_at: _Optional[str] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., raw_arguments: _Optional[bytes] = ..., created_at: _Optional[str] = ...) -> None: ...

class ListPendingResponse(_message.Message):
    __slots__ = ("pending", "next_page_token")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pending: _containers.RepeatedCompositeFieldContainer[PendingConfirmation]
    next_page_token: str
    def __init__(self, pending: _Optional[_Iterable[_Union[PendingConfirmation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DenyRequest(_message.Message):
    __slots__ = ("invocation_id", "digest", "denied_by", "tenant", "note")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DENIED_BY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    digest: str
    denied_by: str
    tenant: str
    note: str
    def __init__(self, invocation_id: _Optional[str] = ..., digest: _Optional[str] = ..., denied_by: _Optional[str] = ..., tenant: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class DenyResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: State
    def __init__(self, state: _Optional[_Union[State, str]] = ...) -> None: ...

class WatchPendingRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class WatchPendingResponse(_message.Message):
    __slots__ = ("pending",)
    PENDING_FIELD_NUMBER: _ClassVar[int]
    pending: _containers.RepeatedCompositeFieldContainer[PendingConfirmation]
    def __init__(self, pending: _Optional[_Iterable[_Union[PendingConfirmation, _Mapping]]] = ...) -> None: ...

class GetTenantInvocationRequest(_message.Message):
    __slots__ = ("invocation_id", "tenant")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    tenant: str
    def __init__(self, invocation_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class AuthorizeRequest(_message.Message):
    __slots__ = ("subject", "capability", "resource", "context")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    subject: Subject
    capability: str
    resource: str
    context: _struct_pb2.Struct
    def __init__(self, subject: _Optional[_Union[Subject, _Mapping]] = ..., capability: _Optional[str] = ..., resource: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AuthorizeResponse(_message.Message):
    __slots__ = ("decision", "decision_id")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    decision_id: str
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ..., decision_id: _Optional[str] = ...) -> None: ...

class GetPolicyStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyProblem(_message.Message):
    __slots__ = ("file", "line", "place", "problem")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    PLACE_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: str
    place: str
    problem: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[str] = ..., place: _Optional[str] = ..., problem: _Optional[str] = ...) -> None: ...

class GetPolicyStatusResponse(_message.Message):
    __slots__ = ("serving_revision", "ready", "latest_files_ok", "last_error", "problems", "refused_at")
    SERVING_REVISION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    LATEST_FILES_OK_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_AT_FIELD_NUMBER: _ClassVar[int]
    serving_revision: str
    ready: bool
    latest_files_ok: bool
    last_error: str
    problems: _containers.RepeatedCompositeFieldContainer[PolicyProblem]
    refused_at: str
    def __init__(self, serving_revision: _Optional[str] = ..., ready: _Optional[bool] = ..., latest_files_ok: _Optional[bool] = ..., last_error: _Optional[str] = ..., problems: _Optional[_Iterable[_Union[PolicyProblem, _Mapping]]] = ..., refused_at: _Optional[str] = ...) -> None: ...
