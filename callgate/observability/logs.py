"""callgate's own log (stderr) as text or as JSON lines (``[log] format``, docs/OPERATE.md).

The CLI sets up text logging before it reads any configuration; ``callgate serve`` then applies
the configured format with :func:`apply_log_format`. In ``json`` every record is one JSON object on
one line (a traceback is a string inside it, never extra lines)::

    {"time": "2026-07-19T06:00:00.123Z", "level": "INFO", "logger": "callgate.server",
     "message": "...", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}

``trace_id`` is the W3C trace id of the RPC being served when the record was made (the caller's
``traceparent``, or the one callgate started: the same id its events, decision-log lines and spans
carry), ``null`` outside an RPC. Only the message the code formatted is written: no record
attributes, no ``extra``, so nothing reaches the log that the code did not put in a message (and
messages never carry arguments, secret values or credentials). Python warnings are routed through
the log as well, so stderr stays one object per line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from callgate.config import LogFormat

__all__ = ["TEXT_FORMAT", "JsonFormatter", "apply_log_format"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text format (the CLI's default)."""

_INTERCEPTORS = "callgate.server.interceptors"


def _rpc_trace_id() -> str | None:
    """The trace id of the RPC being served, or None. Looked up only if the server module is
    loaded (a process that serves no RPC never imports grpc for its log)."""
    module: Any = sys.modules.get(_INTERCEPTORS)
    if module is None:
        return None
    trace = module.rpc_trace()
    return None if trace is None else str(trace.trace_id)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, trace_id (+ exception, stack)."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        millis = min(999, int((record.created - seconds) * 1000))
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": _rpc_trace_id(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)


def apply_log_format(fmt: LogFormat) -> None:
    """Give every handler of the root logger the formatter of ``fmt`` (``callgate serve`` calls
    it once its configuration is loaded)."""
    formatter = JsonFormatter() if fmt is LogFormat.JSON else logging.Formatter(TEXT_FORMAT)
    logging.captureWarnings(fmt is LogFormat.JSON)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
