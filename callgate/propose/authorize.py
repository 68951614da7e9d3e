"""Authorization stage (spec 6.6): NormalizedArguments + session subject -> Decision.

The subject and tenant come from the session the runtime opened; the arguments only ever reach
the policy as ``context.args`` and as the rendered resource, so an argument claiming
``"role": "admin"`` cannot change who is asking (6.14 row 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from callgate.core.errors import CallgateError, ErrorCode, internal
from callgate.core.model import AuthzRequest, Decision, NormalizedArguments, Subject
from callgate.policy.engines.base import Engine, combine, fault
from callgate.policy.toolspecs import CompiledTool
from callgate.propose.normalize import as_policy_values


@dataclass(frozen=True, slots=True)
class AuthorizationResult:
    decision: Decision
    resource: str
    requests: tuple[AuthzRequest, ...]


async def authorize_invocation(
    engine: Engine, tool: CompiledTool, normalized: NormalizedArguments, subject: Subject
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
    # decimal arguments reach the engines as decimals (Cedar ``decimal``, Rego number)
    context = {"tool": tool.spec.key, "args": as_policy_values(args, tool.normalizers)}
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
