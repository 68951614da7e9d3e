"""Issue 33 item 1: free text that hides characters, as the policies see it, one fixture on
every engine.

tests/data/text_context/ is a policy folder (a ToolSpec whose title, body and tags are free
text, ``principals.json``, Cedar rules and their Rego twin: "confirm when free text hides
characters", "never a title with hidden characters", "never a channel with a whitespace run") and
``cases.json`` a table of proposals with the decision every engine must give and the
``context.text`` the policies see. Every case is decided by Cedar on cedarpy, Cedar in the
compiled core (its one-call decision where nothing is flagged, the engine's JSON path where
something is: the core does not build ``context.text``), embedded Rego (regopy) and a real OPA
server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callgate.arguments.parse import ParseLimits
from callgate.base.model import AuthzRequest, Subject
from callgate.policy.declare import cedar_text_actions, declared
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.engines.rego import RegoEngine
from callgate.policy.engines.rego_contract import build_input, load_rego_dir
from callgate.policy.snapshot import load_snapshot
from callgate.policy.textflags import TEXT_KEY, may_flag, text_context
from callgate.propose.authorize import policy_context
from callgate.propose.steps import _declares_text, _hides_text
from tests import policy_tables
from tests.conftest import POLICIES
from tests.opa_fixture import OpaServer, opa_factory  # noqa: F401 - the fixture
from tests.policy_tables import (
    cases,
    check_and_policy_test,
    copy_folder,
    decide,
    native_snapshot,
    normalized,
    opa_decisions,
    python_snapshot,
    summary,
    want,
)

FIXTURE = Path(__file__).resolve().parent / "data" / "text_context"
CASES = cases(FIXTURE)
IDS = [c["name"] for c in CASES]
LIMITS = ParseLimits()
loop = policy_tables.loop


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_folder(tmp_path_factory, FIXTURE)


def test_the_table_covers_every_effect_and_flag() -> None:
    assert {c["expect"]["effect"] for c in CASES} == {"allow", "deny", "confirm"}
    texts = [c["expect"]["text"] for c in CASES if "text" in c["expect"]]
    assert all(any(t[k] for t in texts) for k in ("hidden", "mixed_script", "whitespace_run"))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_context_policies_see(folder: Path, case: dict[str, Any]) -> None:
    """``context.text`` is there exactly when a string hides something, with its pointers."""
    tool, norm = normalized(python_snapshot(folder), case)
    ctx = policy_context(tool, norm)
    assert ctx.get(TEXT_KEY) == case["expect"].get("text")
    assert text_context(case["args"]) == case["expect"].get("text")
    canonical = norm.canonical
    assert may_flag(canonical) or TEXT_KEY not in ctx  # the cheap test never misses one
    assert _hides_text(canonical) is (TEXT_KEY in ctx)


def test_generated_schema_declares_text(folder: Path) -> None:
    """Cedar: an optional ``text`` record on every generated action; Rego: an optional context
    attribute. A hand-written schema or data.json that does not declare it never gets it."""
    decl = declared(folder)
    schema = decl.cedar_schema(None)
    assert "text?: { hidden: Bool, mixed_script: Bool, whitespace_run: Bool, hidden_at: Set<String>" in schema
    assert cedar_text_actions(schema) == {"notes.post"}
    assert cedar_text_actions((POLICIES / "cedar" / "schema.cedarschema").read_text()) == frozenset()
    rego = decl.rego_data({}, "data.json")["callgate"]["schema"]
    assert rego["optional_context"] == {"text": "Record"}
    legacy = {
        "callgate": {
            "schema": json.loads((POLICIES / "rego" / "data.json").read_text())["callgate"]["schema"]
        }
    }
    assert "optional_context" not in decl.rego_data(legacy, "data.json")["callgate"]["schema"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cedarpy(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    engine = CedarEngine(load_cedar_dir(folder / "cedar", cores=SnapshotCores.PYTHON))
    assert decide(engine, python_snapshot(folder), case, loop) == want(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compiled_core(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """The compiled core: its one-call decision where nothing is flagged (the context it builds
    has no ``text``, as the Python one has none), else the Python stages with the compiled Cedar
    engine's JSON path (what :func:`callgate.propose.steps.front` does)."""
    snap, core = native_snapshot(folder)
    tool, _ = normalized(snap, case)
    raw = json.dumps(case["args"]).encode()
    principal = case["principal"]
    answer = core.front(snap, tool, raw, principal["tenant"], "en", case["clock"], LIMITS, principal["id"])
    assert answer is not None and answer.code is None and answer.authz is not None, case["name"]
    assert _declares_text(snap, tool)
    if _hides_text(answer.canonical):
        assert "text" in case["expect"]
        got = decide(snap.engine, snap, case, loop)
    else:
        assert "text" not in case["expect"]
        got = summary(snap.engine.native_decision(answer.authz))
    assert got == want(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_embedded_rego(folder: Path, case: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    assert decide(RegoEngine.from_dir(folder / "rego"), python_snapshot(folder), case, loop) == want(case)


@pytest.mark.opa
def test_opa(
    folder: Path,
    opa_factory: Callable[..., OpaServer],  # noqa: F811
    loop: asyncio.AbstractEventLoop,
) -> None:
    got = opa_decisions(folder, opa_factory, loop, CASES)
    assert got == {c["name"]: want(c) for c in CASES}


def test_a_schema_without_text_keeps_the_one_call() -> None:
    """The example folder's hand-written Cedar schema declares no ``text``: a flagged proposal
    there is no reason to leave the compiled core's one-call decision."""
    snap = load_snapshot(POLICIES)
    tool = snap.tools.get("calendar.create_event", "v1")
    assert tool is not None and not _declares_text(snap, tool)


def test_undeclared_text_is_not_sent(folder: Path) -> None:
    """The Rego input carries ``text`` where the data declares it, and not for a legacy
    data.json; the example policies (hand-written schemas) decide as before."""
    snap = python_snapshot(folder)
    case = next(c for c in CASES if c["name"] == "zero-width characters in the body")
    tool, norm = normalized(snap, case)
    req = AuthzRequest(Subject("acme", "ana"), "notes.post", "channel:general", policy_context(tool, norm))
    doc = build_input(req, (), load_rego_dir(folder / "rego").context_names)
    assert doc["context"]["text"] == case["expect"]["text"]
    legacy = build_input(req, (), load_rego_dir(POLICIES / "rego").context_names)
    assert "text" not in legacy["context"]


@pytest.mark.parametrize("engine", ["cedar", "rego"])
def test_check_and_policy_tests_pass(folder: Path, tmp_path: Path, engine: str) -> None:
    """``callgate check`` accepts the generated declarations, and the request files in ``tests/``
    get ``context.text`` from their arguments as Propose computes it."""
    out = check_and_policy_test(folder, tmp_path, engine)
    assert "3 passed" in out, out


def test_through_a_real_sidecar(folder: Path) -> None:
    """gRPC end to end (the sidecar's own core, compiled when built): plain text is allowed,
    zero-width characters in free text park the call for confirmation, a soft hyphen in the
    title is denied; ``Authorize`` computes ``text`` from the arguments and ignores a caller's."""
    from google.protobuf import struct_pb2

    from callgate.gen.v1 import callgate_pb2 as pb
    from tests.conftest import start_sidecar, stop_sidecar

    by_name = {c["name"]: c for c in CASES}
    sc, tmp = start_sidecar(folder)
    try:
        sid = sc.open_session(subject="ana")
        sc.list_tools(sid)
        effects = {}
        for i, name in enumerate(
            ["plain ASCII", "zero-width characters in the body", "a soft hyphen in the title"]
        ):
            out = sc.propose(
                sid, "notes.post@v1", by_name[name]["args"], idempotency_key=f"k{i}", proposal_id=f"c{i}"
            )
            effects[name] = pb.Effect.Name(out.decision.effect).lower()
        assert effects == {
            "plain ASCII": "allow",
            "zero-width characters in the body": "confirm",
            "a soft hyphen in the title": "deny",
        }

        def authorize(context: dict[str, Any]) -> Any:
            ctx = struct_pb2.Struct()
            ctx.update(context)
            return sc.authorizer.Authorize(
                pb.AuthorizeRequest(
                    subject=pb.Subject(tenant="acme", id="ana"), capability="notes.post",
                    resource="channel:general", context=ctx,
                )
            )  # fmt: skip

        hidden = {"tool": "notes.post@v1", "args": by_name["zero-width characters in the body"]["args"]}
        assert authorize(hidden).decision.effect == pb.CONFIRM
        plain = {"tool": "notes.post@v1", "args": by_name["plain ASCII"]["args"]}
        forged = {"hidden": True, "mixed_script": False, "whitespace_run": False,
                  "hidden_at": ["/title"], "mixed_script_at": [], "whitespace_run_at": []}  # fmt: skip
        assert authorize({**plain, "text": forged}).decision.effect == pb.ALLOW
    finally:
        stop_sidecar(sc, tmp)
