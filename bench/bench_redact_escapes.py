"""What reading a text behind its escapes costs the redactor (callgate/execute/redaction.py).

The redactor reads a text behind its JSON escapes, HTML character references and percent-escapes
when it holds a ``\\``, ``&`` or ``%``. Measured here per text, in µs of process CPU time (median
of ``--rounds`` rounds of ``--calls`` calls), for the presence check the encoder runs on every
result (``might_contain``), a whole ``redact`` and ``encode_result`` of a small result holding the
text, with 5 configured secrets and the default patterns, on texts of about 2 KB without a
secret: plain prose (none of the three characters), an HTML page with entities and links, URLs
with percent-escapes, and a JSON body with backslashes. ``--against REV`` measures the module as
it was at that git revision too, interleaved in the same run (the same texts, the same secrets).

    .venv/bin/python bench/bench_redact_escapes.py [--rounds 7] [--calls 2000] [--against HEAD~1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import callgate.execute.redaction as current  # noqa: E402
from callgate.execute.encode import EncodeInput, encode_result  # noqa: E402

SECRETS = {
    "calendar_api_token": "sk-CANARY-9f8e7d6c5b4a39281706",
    "db_password": "c0rrect-h0rse-battery",
    "webhook": "whsec_4f7a1c9e2b8d6f03",
    "s3": "AKIAZZZ-not-a-real-one-77",
    "amped": 'p&ss<W0rd>&key/9="q"',
}

PROSE = (
    "The meeting about the quarterly roadmap moved to Thursday at ten. Bring the draft of the "
    "budget, the list of open hiring requests and the notes from the customer calls. "
) * 12
HTML = (
    '<p>Tom &amp; Jerry &lt;3 &nbsp;&copy; 2026 &#169; <a href="/q?a=1&amp;b=2&c=%20x">more</a> '
    "&mdash; 10&percnt; off &eacute;t&eacute;</p>\n"
) * 14
URLS = "https://example.com/search?q=caf%C3%A9%20cr%C3%A8me&page=2&sort=asc%2Cdesc&next=%2Fhome\n" * 22
JSON_BODY = json.dumps(
    {"path": "C:\\tmp\\build\\out", "quote": 'he said "ok"', "items": [f"line {i}\n" for i in range(40)]}
    | {"text": PROSE[:900]}
)
TEXTS = {
    "prose (no \\ & %)": PROSE,
    "HTML with entities": HTML,
    "URLs with %xx": URLS,
    "JSON with \\": JSON_BODY,
}


def module_at(rev: str) -> ModuleType:
    """callgate/execute/redaction.py as it was at ``rev``, imported under a name of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:callgate/execute/redaction.py"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "redaction_at_rev.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("redaction_at_rev", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["redaction_at_rev"] = mod
    spec.loader.exec_module(mod)
    return mod


def us_per_call(fn: Callable[[str], object], copies: list[str]) -> float:
    """Each call gets a string object of its own (the redactor remembers the last text it decoded
    by identity: one text checked twice in a row is decoded once, not a text per call)."""
    t0 = time.process_time()
    for text in copies:
        fn(text)
    return (time.process_time() - t0) / len(copies) * 1e6


def encode(redactor: Any, text: str) -> Any:
    return encode_result(
        EncodeInput(
            invocation_id="inv_b",
            tool_call_id="call_b",
            tool_name="http.get",
            tool_version="v1",
            status="ok",
            value={"status": 200, "body": text},
            commit_status="NOT_APPLICABLE",
            max_bytes=1 << 16,
        ),  # fmt: skip
        redactor,
        continuation_token="pg_b",
        nonce_key=b"k" * 32,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--against", default="", help="a git revision to measure interleaved")
    args = ap.parse_args()
    modules = {"now": current}
    if args.against:
        modules[args.against] = module_at(args.against)
    redactors = {name: mod.Redactor(SECRETS) for name, mod in modules.items()}
    ops: dict[str, Callable[[Any, str], object]] = {
        "might_contain": lambda r, t: r.might_contain(t),
        "redact": lambda r, t: r.redact(t),
        "encode_result": lambda r, t: encode(r, t),
    }
    for label, text in TEXTS.items():
        for op, fn in ops.items():
            calls = max(args.calls // (20 if op == "encode_result" else 1), 50)
            copies = ["".join([text[:1], text[1:]]) for _ in range(calls)]
            samples: dict[str, list[float]] = {name: [] for name in redactors}
            for _ in range(args.rounds):  # interleaved: each round measures every module once
                for name, red in redactors.items():
                    assert red.redact(text)[1] == 0, (label, name)  # no secret, no false positive
                    samples[name].append(us_per_call(lambda t, red=red, fn=fn: fn(red, t), copies))
            cells = "  ".join(f"{name} {statistics.median(v):8.2f} µs" for name, v in samples.items())
            print(f"{label:20} {len(text):5} chars  {op:14} {cells}", flush=True)


if __name__ == "__main__":
    main()
