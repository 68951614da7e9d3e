"""callgate's own log as JSON lines (``[log] format = "json"``, callgate/observability/logs.py).

A real ``callgate serve`` with the JSON format: every line of its stderr is one JSON object with
time, level, logger, message and trace_id, and neither the arguments of proposals nor a secret's
value ever reaches it. The trace id of a record made inside an RPC is the caller's (a real
``grpc.aio`` server with callgate's interceptor).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.base.errors import LoadError
from callgate.config import LogFormat, load_config
from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from callgate.observability.logs import TEXT_FORMAT, JsonFormatter, apply_log_format
from callgate.server import healthcheck
from callgate.server.interceptors import CallgateInterceptor

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"time", "level", "logger", "message", "trace_id"}
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ARGUMENT_MARKER = "arg-marker-7f3a9c"
SECRET_MARKER = "secret-marker-e41b02"


def test_log_format_setting(tmp_path: Path) -> None:
    toml = tmp_path / "callgate.toml"
    toml.write_text("")
    assert load_config(toml).log.format is LogFormat.TEXT  # the CLI's default
    toml.write_text('[log]\nformat = "json"\n')
    assert load_config(toml).log.format is LogFormat.JSON
    toml.write_text('[log]\nformat = "xml"\n')
    with pytest.raises(LoadError, match=r"'log.format' must be one of text, json, got 'xml'"):
        load_config(toml)
    toml.write_text('[log]\nformat = "json"\nlevel = "debug"\n')
    with pytest.raises(LoadError, match=r"unknown key 'log.level'"):
        load_config(toml)


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("callgate.test", logging.ERROR, __file__, 1, message, args, exc_info)


def test_json_formatter_one_object_per_line() -> None:
    line = JsonFormatter().format(_record("reload refused: %s\n(see %s)", "bad file", "docs"))
    assert "\n" not in line
    entry = json.loads(line)
    assert set(entry) == KEYS and TIME.match(entry["time"]), entry
    assert entry["level"] == "ERROR" and entry["logger"] == "callgate.test"
    assert entry["message"] == "reload refused: bad file\n(see docs)" and entry["trace_id"] is None
    with_exc = JsonFormatter().format(_record("failed", exc=True))
    assert "\n" not in with_exc
    entry = json.loads(with_exc)
    assert set(entry) == KEYS | {"exception"} and "ValueError: boom" in entry["exception"]
    # only the formatted message: attributes given with extra= never reach the line
    rec = _record("plain")
    rec.arguments = {"secret": SECRET_MARKER}
    assert SECRET_MARKER not in JsonFormatter().format(rec)


def test_apply_log_format_swaps_the_root_formatter() -> None:
    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    root.addHandler(handler)
    try:
        apply_log_format(LogFormat.JSON)
        assert isinstance(handler.formatter, JsonFormatter)
        apply_log_format(LogFormat.TEXT)
        assert handler.formatter is not None and handler.formatter._fmt == TEXT_FORMAT
    finally:
        root.removeHandler(handler)
        logging.captureWarnings(False)


def test_trace_id_is_the_rpcs_inside_a_call() -> None:
    """A record made while callgate's interceptor serves an RPC carries that RPC's trace id (the
    caller's traceparent); one made outside an RPC has null."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("callgate.test.rpc")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        log.info("inside the call")
        return request

    async def run(target: str) -> None:
        server = grpc.aio.server(interceptors=[CallgateInterceptor()])
        handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("callgate.v1.LogTest", handlers)]
        )
        server.add_insecure_port(target)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                call = channel.unary_unary("/callgate.v1.LogTest/Echo")
                await call(
                    b"x", metadata=(("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),), timeout=10
                )
                await call(b"y", timeout=10)  # no traceparent: callgate starts a trace
        finally:
            await server.stop(None)

    sock = Path(f"/tmp/cglog-{os.getpid()}.sock")
    try:
        asyncio.run(run(f"unix:{sock}"))
        log.info("outside")
    finally:
        log.removeHandler(handler)
        sock.unlink(missing_ok=True)
    first, second, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "inside the call" and first["trace_id"] == trace_id
    assert re.fullmatch(r"[0-9a-f]{32}", second["trace_id"]) and second["trace_id"] != trace_id
    assert outside["trace_id"] is None


# --------------------------------------------------------------------------------------------
# a real callgate serve


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(f"/tmp/cglog-{os.getpid()}-{time.monotonic_ns()}")  # short: Unix socket paths
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _lines(text: str) -> list[dict[str, Any]]:
    entries = []
    for line in text.splitlines():
        entry = json.loads(line)  # every line is one JSON object, nothing else
        assert isinstance(entry, dict) and KEYS <= set(entry) <= KEYS | {"exception", "stack"}, line
        assert TIME.match(entry["time"]) and entry["level"] in ("DEBUG", "INFO", "WARNING", "ERROR"), line
        entries.append(entry)
    return entries


def test_serve_logs_json_lines_without_arguments_or_secrets(tmp: Path) -> None:
    shutil.copytree(ROOT / "policies", tmp / "policies", ignore=shutil.ignore_patterns("tests"))
    (tmp / "callgate.toml").write_text(
        f"""
[server]
agent = {{ socket = "{tmp}/agent.sock" }}
executor = {{ socket = "{tmp}/executor.sock" }}
[policy]
dir = "{tmp}/policies"
watch = true
watch_interval_ms = 100
[store]
path = "{tmp}/events.db"
[observability]
decision_log = "stdout"
[log]
format = "json"
[[secrets]]
name = "weather-api-key"
env = "CALLGATE_TEST_WEATHER_KEY"
tools = ["weather.get"]
"""
    )
    env = {**os.environ, "CALLGATE_TEST_WEATHER_KEY": SECRET_MARKER}
    err = tmp / "stderr"
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "callgate", "--verbose", "serve", "--config", str(tmp / "callgate.toml")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        target = f"unix:{tmp}/agent.sock"
        deadline = time.monotonic() + 60
        while healthcheck.check(target, timeout=1) != "SERVING":
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        with grpc.insecure_channel(target) as channel:
            gate = pb_grpc.GateStub(channel)
            session = gate.OpenSession(
                pb.OpenSessionRequest(subject=pb.Subject(tenant="acme", id="alice"), timezone="UTC"),
                timeout=10,
            ).session_id
            gate.ListTools(pb.ListToolsRequest(session_id=session, model_call_id="m"), timeout=10)
            cases = [
                json.dumps({"title": ARGUMENT_MARKER, "start": "2026-07-20T09:00:00+00:00"}),  # proposed
                json.dumps({"title": ARGUMENT_MARKER, "start": ARGUMENT_MARKER}),  # a schema violation
                json.dumps({"title": ARGUMENT_MARKER, ARGUMENT_MARKER: 1}),  # an unknown property
                '{"title": "' + ARGUMENT_MARKER + '"',  # not JSON: refused with a code
            ]
            for i, args in enumerate(cases):
                gate.Propose(
                    pb.ProposeRequest(
                        session_id=session,
                        model_call_id="m",
                        proposal_id=f"p{i}",
                        tool_name="calendar.create_event",
                        tool_version="v1",
                        arguments=args.encode(),
                        idempotency_key=f"k-{i}",
                    ),
                    timeout=10,
                )
        # a refused reload is logged (an ERROR line, outside any RPC)
        (tmp / "policies" / "cedar" / "policies.cedar").write_text("permit (principal, action, resource")
        deadline = time.monotonic() + 30
        while "refused" not in err.read_text() and "reject" not in err.read_text():
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    text = err.read_text()
    entries = _lines(text)
    assert ARGUMENT_MARKER not in text and SECRET_MARKER not in text
    levels = {e["level"] for e in entries}
    assert {"INFO", "ERROR"} <= levels, text
    assert any(e["logger"].startswith("callgate") for e in entries)
    assert entries[-1]["message"] == "shutting down" or any(e["message"] == "shutting down" for e in entries)
    assert all(e["trace_id"] is None or re.fullmatch(r"[0-9a-f]{32}", e["trace_id"]) for e in entries)
