"""docs/CLIENTS-TS.md "The lifecycle" and clients/ts/README.md "The loop": the TypeScript client's
loop runs as written against a real sidecar, and checks under ``tsc --strict`` against the
package's shipped typings (dist/*.d.ts), the way a TypeScript user compiles it. Only what the
reader supplies is defined here, before the block runs (``node --import``): ``userId``, ``model``
(four calls: one allowed, one that needs a person, one the policy denies, one name the model was
not shown), ``toolFn`` and ``sendToModel``; the sockets are put in place of the doc's; a person
confirms in the console (the confirmer listener) while the loop waits. The package is the
checkout's clients/ts (built by ``scripts/node-client build``: the locked npm dependencies, tsc),
seen as ``@callgate/client`` from a project of its own. Also the CommonJS paragraph of "Install":
a ``.cts`` importing the package compiles under ``module: nodenext`` and ``require`` loads it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.client import Client
from tests.conftest import ROOT, Running, start_sidecar, stop_sidecar
from tests.markers import Needs, require

TS = ROOT / "clients" / "ts"
DOCS = {"docs": (ROOT / "docs" / "CLIENTS-TS.md", "The lifecycle"), "readme": (TS / "README.md", "The loop")}

pytestmark = [pytest.mark.node, pytest.mark.timeout(300)]

READER = r"""
// What the reader of the doc supplies: the user (the runtime's own auth), the model, the tool,
// where answers go. Loaded with `node --import` before the block.
const out = { shown: [], ran: [], sent: {} };
globalThis.userId = "alice";
globalThis.model = async (definitions) => {
  out.shown = definitions.map((d) => d.function.name);
  return [
    { id: "c1", name: "weather__get", arguments: '{"city":"Paris","date":"2026-07-20"}' },
    { id: "c2", name: "calendar__create_event",
      arguments: '{"title":"Standup","start":"2026-07-20T09:00:00+08:00","duration_minutes":15,"calendar_id":null}' },
    { id: "c3", name: "calendar__create_event",
      arguments: '{"title":"Hackathon","start":"2026-07-21T09:00:00+02:00","duration_minutes":600,"calendar_id":null}' },
    { id: "c4", name: "send_money", arguments: '{"to":"mallory"}' },
  ];
};
globalThis.toolFn = async (ctx) => {
  out.ran.push([ctx.toolName, ctx.arguments]);
  return { value: { ok: true }, externalResourceId: ctx.toolName === "calendar.create_event" ? "evt_1" : undefined };
};
globalThis.sendToModel = (id, answer) => { out.sent[id] = JSON.parse(answer); };
process.on("exit", () => console.log("OUT " + JSON.stringify(out)));
"""

# The same names for tsc: the block is an ES module, these are its ambient globals.
READER_TYPES = """\
declare const userId: string;
declare function model(definitions: Record<string, unknown>[]): Promise<import("@callgate/client").ToolCall[]>;
declare function toolFn(ctx: import("@callgate/client").AttemptContext): Promise<import("@callgate/client").ToolSuccess>;
declare function sendToModel(toolCallId: string, answer: string): void;
"""

# "Install": a CommonJS TypeScript file importing the package (module nodenext), run with require.
CTS = """\
import { Callgate, Dialect, OutcomeKind, TransportError } from "@callgate/client";
const cg: Callgate = new Callgate({ agent: "unix:/nonexistent/agent.sock" });
cg.close();
console.log(`CJS ${typeof Callgate} ${Dialect.OpenAI} ${OutcomeKind.Allowed} ${TransportError.name}`);
"""


def block(doc: str) -> str:
    path, section = DOCS[doc]
    text = path.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```js\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, f"{path.name} {section!r}: {len(blocks)} js blocks"
    return blocks[0]


@pytest.fixture(scope="module")
def built() -> None:
    """clients/ts installed from its lock and compiled (dist/), once for the module."""
    require(Needs.NODE)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "node-client"), "build"],
        cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"scripts/node-client build: {proc.stdout}\n{proc.stderr}"


def _project(folder: Path) -> Path:
    """A user's project that has @callgate/client installed (the checkout's clients/ts, linked)."""
    (folder / "node_modules" / "@callgate").mkdir(parents=True)
    (folder / "node_modules" / "@callgate" / "client").symlink_to(TS, target_is_directory=True)
    (folder / "package.json").write_text(json.dumps({"name": "app", "private": True, "type": "module"}))
    return folder


@pytest.fixture
def sidecar() -> Iterator[Running]:
    running, tmp = start_sidecar()
    try:
        yield running
    finally:
        stop_sidecar(running, tmp)


def console(server: Running, stop: threading.Event) -> None:
    """A person in the console: confirms what waits."""
    with Client(confirmer=server.sidecar.addresses["confirmer"][0]) as cg:
        while not stop.is_set():
            for p in cg.confirmer().list_pending("acme"):
                cg.confirmer().confirm(p.invocation_id, p.digest, confirmed_by="bob@console")
            time.sleep(0.05)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_documented_loop_runs_as_written(built: None, sidecar: Running, tmp_path: Path, doc: str) -> None:
    code = block(doc)
    for role in ("agent", "executor"):
        assert code.count(f"unix:/abs/run/{role}.sock") == 1
        code = code.replace(f"unix:/abs/run/{role}.sock", sidecar.sidecar.addresses[role][0])
    app = _project(tmp_path / "app")
    (app / "reader.mjs").write_text(READER, encoding="utf-8")
    (app / "loop.mjs").write_text(code, encoding="utf-8")
    stop = threading.Event()
    person = threading.Thread(target=console, args=(sidecar, stop), daemon=True)
    person.start()
    try:
        proc = subprocess.run(
            ["node", "--import", "./reader.mjs", "loop.mjs"],
            cwd=app, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        stop.set()
        person.join()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    assert out["shown"] == ["calendar__create_event", "weather__get"]
    assert out["ran"] == [
        ["weather.get", {"city": "Paris", "date": "2026-07-20"}],
        ["calendar.create_event",  # normalized: the strict-mode null dropped, the default filled
         {"calendar_id": "primary", "duration_minutes": 15, "start": "2026-07-20T01:00:00+00:00", "title": "Standup"}],
    ]  # fmt: skip
    sent = out["sent"]
    assert {k: v["content"]["status"] for k, v in sent.items()} == {
        "c1": "ok", "c2": "ok", "c3": "denied", "c4": "rejected"
    }  # fmt: skip
    assert all(v["role"] == "tool" and v["tool_call_id"] == k for k, v in sent.items())
    assert sent["c4"]["content"]["code"] == "unknown_tool_version"


def test_the_documented_loop_and_commonjs_check_under_tsc_strict(built: None, tmp_path: Path) -> None:
    app = _project(tmp_path / "app")
    for doc in sorted(DOCS):
        (app / f"loop-{doc}.ts").write_text(block(doc), encoding="utf-8")  # verbatim, sockets too
    (app / "reader.d.ts").write_text(READER_TYPES, encoding="utf-8")
    (app / "cjs.cts").write_text(CTS, encoding="utf-8")
    tsconfig = {
        "compilerOptions": {
            "strict": True,
            "target": "ES2022",
            "module": "nodenext",
            "moduleResolution": "nodenext",
            "skipLibCheck": False,  # the shipped .d.ts are checked too
            "typeRoots": [str(TS / "node_modules" / "@types")],
            "types": ["node"],
            "outDir": "out",
        },
        "files": ["reader.d.ts", *(f"loop-{doc}.ts" for doc in sorted(DOCS)), "cjs.cts"],
    }
    (app / "tsconfig.json").write_text(json.dumps(tsconfig), encoding="utf-8")
    tsc = TS / "node_modules" / "typescript" / "bin" / "tsc"
    proc = subprocess.run(
        ["node", str(tsc), "-p", "tsconfig.json"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (app / "out" / "cjs.cjs").is_file()
    assert 'require("@callgate/client")' in (app / "out" / "cjs.cjs").read_text()
    ran = subprocess.run(
        ["node", "out/cjs.cjs"], cwd=app, capture_output=True, text=True, timeout=60, check=False
    )
    major, minor = (
        int(x)
        for x in subprocess.check_output(["node", "-p", "process.versions.node"], text=True).split(".")[:2]
    )
    if (major, minor) >= (20, 19):  # Node's require of an ES module (docs/CLIENTS-TS.md "Install")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert ran.stdout.strip() == "CJS function openai allowed TransportError"
    else:  # older Node 20: the documented `await import()` is the way
        assert ran.returncode != 0 and "ERR_REQUIRE_ESM" in ran.stderr, ran.stderr
