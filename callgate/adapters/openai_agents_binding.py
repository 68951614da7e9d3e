"""How a user's ``@function_tool`` function is called with the arguments callgate approved.

The function keeps its body and signature. :func:`bind` checks, once, that its parameters match the
tool's ToolSpec (the only schema callgate accepts); per attempt, :meth:`Binding.call` validates the
canonical normalized arguments (``BeginAttempt``'s, i.e. exactly what was authorized and, for a
confirmation, what the person approved) with the function's own pydantic model, adds the injected
values, and calls it. Injected parameters never reach the model: the model sees the ToolSpec's
schema, not the function's.

Injection (``typing.Annotated`` metadata on a parameter)::

    @function_tool
    def create_event(title: str, start: str, duration_minutes: int, calendar_id: str,
                     token: Annotated[SecretStr, Secret("calendar_api_token")],
                     key: Annotated[str, Attempt.IDEMPOTENCY_KEY]) -> dict: ...

- :class:`Secret` ``(name)``: the upstream secret bound to this tool, redeemed for this attempt
  (``RedeemSecret`` with the attempt's credential) and validated into the parameter's type
  (``str``, ``pydantic.SecretStr``, ``bytes``...);
- :class:`Attempt`: a value of the attempt (its idempotency key for the upstream, the invocation
  id, the deadline, the scoped credential).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agents import FunctionTool
from agents.function_schema import FuncSchema, function_schema
from agents.tool import (
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
    ValidToolOutputPydanticModelsTypeAdapter,
)
from agents.tool_context import ToolContext as AgentsToolContext
from pydantic import TypeAdapter, ValidationError

from callgate.adapters.parts import committed
from callgate.client import CallgateClientError, Committed, NotReached, ToolContext


@dataclass(frozen=True)
class Secret:
    """``Annotated[T, Secret("name")]``: the upstream secret ``name`` bound to this tool."""

    name: str


class Attempt(Enum):
    """``Annotated[str, Attempt.X]``: a value of the current attempt."""

    IDEMPOTENCY_KEY = "idempotency_key"
    INVOCATION_ID = "invocation_id"
    DEADLINE = "deadline"
    CREDENTIAL = "credential"


Injection = Secret | Attempt

_JSON = TypeAdapter(Any)


def _injection(metadata: list[Any]) -> Injection | None:
    for m in metadata:
        if isinstance(m, Secret | Attempt):
            return m
    return None


@dataclass(frozen=True)
class Binding:
    """One user function, checked against one ToolSpec."""

    tool_name: str
    function: Callable[..., Any]
    schema: FuncSchema
    injected: Mapping[str, Injection]
    description: str
    parameter_descriptions: Mapping[str, str]
    external_id: Callable[[Any], str] | None = None
    """The external system's id of a write's side effect, read from the function's result."""

    def call(
        self,
        ctx: ToolContext,
        sdk_ctx: AgentsToolContext[Any],
        loop: asyncio.AbstractEventLoop,
        parts: list[dict[str, Any]] | None = None,
    ) -> Committed:
        """Run the function for one attempt (in a worker thread; an async function runs on
        ``loop``); its return value becomes :class:`Committed` (a ``Committed`` is kept as is).
        A result in the SDK's structured parts (``ToolOutputText`` / ``ToolOutputImage`` /
        ``ToolOutputFileContent``, one or a list) is committed as their descriptors
        (:mod:`callgate.adapters.parts`) and the parts are put in ``parts``, for the answer."""
        values: dict[str, Any] = dict(ctx.arguments)
        for param, inj in self.injected.items():
            values[param] = _injected_value(inj, ctx)
        try:
            parsed = self.schema.params_pydantic_model(**values)
        except ValidationError as err:  # names only: the values may hold a secret
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in err.errors()})
            # the function was not called: nothing reached the upstream (FAILED_BEFORE_COMMIT)
            raise NotReached(
                f"{self.tool_name}: arguments do not fit the function: {', '.join(fields)}"
            ) from None
        args, kwargs = self.schema.to_call_args(parsed)
        if self.schema.takes_context:
            args = [sdk_ctx, *args]
        if inspect.iscoroutinefunction(self.function):
            result = asyncio.run_coroutine_threadsafe(self.function(*args, **kwargs), loop).result()
        else:
            result = self.function(*args, **kwargs)
        if isinstance(result, Committed):
            return result
        found = structured_parts(result)
        if found is not None and parts is not None:
            parts[:] = found  # a write's external id is read from the parts (a function of them)
            return committed(found, self.external_id(found) if self.external_id is not None else "")
        value = _JSON.dump_python(result, mode="json")
        return Committed(value, self.external_id(value) if self.external_id is not None else "")


def structured_parts(result: Any) -> list[dict[str, Any]] | None:
    """The SDK's structured tool output as plain parts (one part, or a non-empty list whose
    every item is one: the SDK's own rule), else None."""
    items = list(result) if isinstance(result, list | tuple) else [result]
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, ToolOutputText | ToolOutputImage | ToolOutputFileContent):
            if not isinstance(item, dict) or "type" not in item:
                return None
            try:
                item = ValidToolOutputPydanticModelsTypeAdapter.validate_python(item)
            except ValidationError:
                return None
        out.append(item.model_dump(mode="json", exclude_none=True))
    return out or None


def _injected_value(inj: Injection, ctx: ToolContext) -> Any:
    if isinstance(inj, Secret):
        value = ctx.redeem(inj.name)
        try:
            return value.decode("utf-8") if isinstance(value, bytes) else value
        except UnicodeDecodeError:  # a binary secret: for a ``bytes`` parameter
            return value
    return getattr(ctx, inj.value)


ExternalId = str | Callable[[Any], str]
"""How a write's external id is read from the function's (JSON) result: a key of the returned
object, or a function of the result."""


def _external_id(spec: ExternalId | None) -> Callable[[Any], str] | None:
    if spec is None or callable(spec):
        return spec
    key = spec

    def read(value: Any) -> str:
        found = value.get(key) if isinstance(value, Mapping) else None
        return str(found) if found not in (None, "") else ""

    return read


def bind(
    tool_name: str,
    tool: FunctionTool,
    input_schema: Mapping[str, Any],
    *,
    writes: bool = False,
    external_id: ExternalId | None = None,
) -> Binding:
    """Check ``tool`` (a ``@function_tool``) against the ToolSpec's ``input_schema``: every
    ToolSpec property is a parameter of the function (else the function would silently drop part
    of what was approved) and every required parameter is a ToolSpec property or injected; a
    write names where its external id comes from (``external_id``) unless the function returns
    :class:`Committed` itself. Raises ``CallgateClientError(code="tool_mismatch")`` naming the
    tool and the parameter."""
    try:
        fn = tool.__wrapped__
    except AttributeError:
        raise CallgateClientError(
            f"{tool_name}: {tool.name!r} is not a @function_tool function (no wrapped callable)",
            code="tool_mismatch",
        ) from None
    schema = function_schema(fn)
    fields = schema.params_pydantic_model.model_fields
    injected = {n: inj for n, f in fields.items() if (inj := _injection(list(f.metadata))) is not None}
    plain = {n: f for n, f in fields.items() if n not in injected}
    props = set(input_schema.get("properties", {}))
    for name in sorted(props - set(plain)):
        raise CallgateClientError(
            f"{tool_name}: ToolSpec property {name!r} is not a parameter of {fn.__qualname__}",
            code="tool_mismatch",
        )
    for name, f in sorted(plain.items()):
        if f.is_required() and name not in props:
            raise CallgateClientError(
                f"{tool_name}: required parameter {name!r} of {fn.__qualname__} is not in the ToolSpec",
                code="tool_mismatch",
            )
    if writes and external_id is None and schema.return_annotation is not Committed:
        raise CallgateClientError(
            f"{tool_name}: the tool writes; name the result's external id (external_ids="
            f"{{{tool_name!r}: 'field'}}) or return Committed from {fn.__qualname__}",
            code="tool_mismatch",
        )
    params = tool.params_json_schema.get("properties", {})
    descriptions = {
        n: str(p["description"]) for n, p in params.items() if isinstance(p, dict) and p.get("description")
    }
    return Binding(
        tool_name, fn, schema, injected, tool.description or "", descriptions, _external_id(external_id)
    )


def with_descriptions(schema: Mapping[str, Any], binding: Binding) -> dict[str, Any]:
    """The ToolSpec's (strict) schema, with the function's docstring descriptions on properties
    the ToolSpec leaves undescribed."""
    out = dict(schema)
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {
            n: (
                {**p, "description": binding.parameter_descriptions[n]}
                if isinstance(p, dict) and "description" not in p and n in binding.parameter_descriptions
                else p
            )
            for n, p in props.items()
        }
    return out


__all__ = ["Attempt", "Binding", "ExternalId", "Injection", "Secret", "bind", "with_descriptions"]
