"""What the gateway tells its clients besides answers: upstream log messages and
``notifications/tools/list_changed``.

**Logging.** An upstream's ``notifications/message`` is not tied to a request in MCP, and one
upstream connection can carry the calls of several users. So a log message is forwarded only to
the client of *the* call running on that connection, when exactly one runs (else it goes to the
gateway's own log at debug level and nowhere else: one user never sees another's upstream
output). It is upstream text: every string in ``data`` is redacted with the secrets redeemed for
that call and the configured patterns, and neutralized (docs/RESULT-ENCODING.md), and it is sent
as ``{"upstream": <name>, "data": ...}`` with the logger ``upstream.<name>[.<logger>]``, at the
client's ``logging/setLevel`` level or above (handshake protocol versions; on 2026-07-28 the SDK
sends it only to a request that opted in through ``_meta``).

**list_changed.** The gateway declares ``tools.listChanged`` and sends
``notifications/tools/list_changed`` to every connected client (on 2026-07-28, to every
``subscriptions/listen`` stream that asked for tool changes) when what ``tools/list`` shows
may have changed: an upstream's own ``tools/list_changed`` (after it was listed again), an
upstream's first listing after a ``tools/list`` showed its tools from their pins (hosting.py), and
a change in the policy folder (a re-pinned or edited ToolSpec, a policy file: the files the
sidecar reloads), seen by front.py's :class:`~callgate.mcp.front.FolderWatch` (watching from the process's
start, before ``initialize`` is answered). The clients told are front.py's
:class:`~callgate.mcp.front.Listeners`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp.shared.exceptions import MCPDeprecationWarning

from callgate.execute.encode import neutralize
from callgate.execute.redaction import Redactor
from callgate.mcp.upstreams import LogFn

log = logging.getLogger("callgate.mcp")

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""RFC 5424 severities as MCP names them, lowest first."""


def at_least(level: str, floor: str) -> bool:
    """Whether ``level`` is ``floor`` or more severe (unknown levels are never sent)."""
    return level in LEVELS and floor in LEVELS and LEVELS.index(level) >= LEVELS.index(floor)


def cleaned(value: Any, redactor: Redactor | None, depth: int = 0) -> Any:
    """``value`` with every string (keys too) redacted and neutralized; None past 32 levels."""
    if depth > 32:
        return None
    if isinstance(value, str):
        text = redactor.redact(value)[0] if redactor is not None else value
        return neutralize(text)[0]
    if isinstance(value, Mapping):
        return {
            cleaned(str(k), redactor, depth + 1): cleaned(v, redactor, depth + 1) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [cleaned(v, redactor, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return cleaned(str(value), redactor, depth + 1)


def call_redactor(server: str, secrets: Sequence[str]) -> Callable[[], Redactor | None]:
    """The redactor of one call's upstream text (log and progress messages) with the secrets
    redeemed for it, built at first use (most calls send none); None when none can be built (a
    secret too short for redaction): then no upstream text of the call is forwarded."""
    redactors: list[Redactor | None] = []

    def redactor() -> Redactor | None:
        if not redactors:
            try:
                redactors.append(Redactor({f"secret_{i}": s for i, s in enumerate(secrets)}))
            except ValueError:
                log.debug("upstream %s: messages of this call are not forwarded (secret too short)", server)
                redactors.append(None)
        return redactors[0]

    return redactor


def progress_text(server: str, secrets: Sequence[str]) -> Callable[[str | None], str | None]:
    """An upstream progress message of one call, redacted like its log messages (None: no
    message). Before, it reached the client with only neutralization: a secret the upstream
    put in a progress message was shown."""
    redactor = call_redactor(server, secrets)

    def text(message: str | None) -> str | None:
        if not message:
            return None
        r = redactor()
        return r.redact(message)[0] if r is not None else None

    return text


def call_log(ctx: Any, server: str, secrets: Sequence[str], floor: Callable[[], str]) -> LogFn:
    """The sink of one call's upstream log messages (redacted by :func:`call_redactor`)."""
    redactor = call_redactor(server, secrets)

    async def sink(level: str, data: Any, logger: str | None) -> None:
        if not at_least(level, floor()):
            return
        r = redactor()
        if r is None:
            return
        name = f"upstream.{server}" + (f".{neutralize(logger)[0][:100]}" if logger else "")
        payload = {"upstream": server, "data": cleaned(data, r)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await ctx.session.send_log_message(
                    level, payload, logger=name, related_request_id=ctx.request_id
                )
        except Exception as exc:  # a log line is best effort; never fails the call
            log.debug("log message not forwarded: %s", type(exc).__name__)

    return sink


__all__ = [
    "LEVELS",
    "at_least",
    "call_log",
    "call_redactor",
    "cleaned",
    "progress_text",
]
