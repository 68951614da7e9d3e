"""Authorization stage (spec 6.6): NormalizedArguments + session subject -> Decision.

The subject and tenant come from the session the runtime opened; the arguments only ever reach
the policy as ``context.args`` and as the rendered resource, so an argument claiming
``"role": "admin"`` cannot change who is asking (6.14 row 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from callgate.arguments.normalize import as_policy_values
from callgate.base.errors import CallgateError, ErrorCode, internal
from callgate.base.model import AuthzRequest, Decision, JSONValue, NormalizedArguments, Subject
from callgate.policy.engines.base import Engine, combine, fault
from callgate.policy.meters import SESSION_KEY, USAGE_KEY
from callgate.policy.textflags import TEXT_KEY, text_context
from callgate.policy.timevalues import NOW_KEY, TimeValueError, now_instant, time_values
from callgate.policy.toolspecs import CompiledTool, ToolRegistry


@dataclass(frozen=True, slots=True)
class AuthorizationResult:
    decision: Decision
    resource: str
    requests: tuple[AuthzRequest, ...]


def policy_context(
    tool: CompiledTool,
    normalized: NormalizedArguments,
    usage: Mapping[str, Any] | None = None,
    labels: Sequence[str] | None = None,
) -> dict[str, JSONValue]:
    """``context`` without the tenant (the engines add the session's): the tool, the arguments,
    ``now``, when a string argument hides characters ``text`` (callgate/policy/textflags.py), and
    for tools that declare them ``usage`` and ``session.labels`` (callgate/policy/meters.py).
    Decimal arguments reach the engines as decimals (Cedar ``decimal``, Rego number), time
    arguments and the reference clock as time values (Cedar ``datetime`` / ``duration``, Rego
    RFC 3339 text plus ``context.millis``: callgate/policy/timevalues.py). Raises
    :class:`TimeValueError`."""
    assert normalized.value is not None
    values = as_policy_values(tool.seen(normalized.value), tool.normalizers)
    if tool.times:
        values = time_values(values, tool.times)
    ctx = normalized.context
    now: Any = now_instant(ctx.reference_clock, ctx.reference_time)
    out: dict[str, Any] = {"tool": tool.spec.key, "args": values, NOW_KEY: now}
    text = text_context(normalized.value)  # free text that hides characters (issue 33)
    if text is not None:
        out[TEXT_KEY] = text
    if usage is not None:  # the declared meters (callgate/policy/meters.py)
        out[USAGE_KEY] = usage
    if labels is not None:  # the labels of results the session observed
        out[SESSION_KEY] = {"labels": list(labels)}
    return out


def caller_context(context: Mapping[str, Any], tools: ToolRegistry, now: Any) -> dict[str, Any]:
    """A caller's context (``Authorize``) as Propose builds it: ``now`` and ``text`` (replacing
    what the caller sent) and, when ``context.tool`` names a ToolSpec, its time arguments as time
    values. A text that is no exact time value stays text: Cedar's schema refuses it, Rego has no ``millis``
    for it (a deny either way)."""
    out = {**context, NOW_KEY: now}
    name, _, version = str(context.get("tool", "")).partition("@")
    tool = tools.get(name, version)
    args = context.get("args")
    out.pop(TEXT_KEY, None)  # computed from the arguments, as Propose does (never the caller's)
    text = text_context(args) if isinstance(args, Mapping) else None
    if text is not None:
        out[TEXT_KEY] = text
    if tool is not None and isinstance(args, Mapping):
        out["args"] = args = tool.seen(args)
        try:
            out["args"] = time_values(args, tool.times)
        except TimeValueError:
            pass
    return out


async def authorize_invocation(
    engine: Engine,
    tool: CompiledTool,
    normalized: NormalizedArguments,
    subject: Subject,
    usage: Mapping[str, Any] | None = None,
    labels: Sequence[str] | None = None,
) -> AuthorizationResult:
    """Build one request per required capability and combine the engine's answers.

    Never raises: an unresolvable resource or an engine exception is a fail-closed deny.
    """
    args = normalized.value
    try:
        if args is None:  # decided by the compiled core, which did not build them: fail closed
            raise internal("the proposal's arguments were not built in Python")
        resource = tool.resource.render(args)
    except CallgateError as exc:
        return AuthorizationResult(fault(engine.name, exc.code, exc.message), "", ())
    try:
        context = policy_context(tool, normalized, usage, labels)
    except TimeValueError:  # refused at validation already (steps.check_times): never reached
        return AuthorizationResult(
            fault(engine.name, ErrorCode.ENGINE_ERROR, "time value not representable"), resource, ()
        )
    requests = tuple(
        AuthzRequest(subject=subject, capability=cap, resource=resource, context=context)
        for cap in tool.spec.required_capabilities
    )
    try:
        decisions = await engine.authorize_batch(requests)
    except Exception:
        return AuthorizationResult(
            fault(engine.name, ErrorCode.ENGINE_ERROR, "engine raised"), resource, requests
        )
    return AuthorizationResult(combine(decisions, engine.name), resource, requests)
