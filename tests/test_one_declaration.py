"""Issue 12 item 2 (and 3): one declaration per tool, through the real CLI and a real ``callgate
serve`` on every engine.

The policy folder is the project's example, moved to one principals file (users and roles once,
for both engines; ``dana`` is in role finance). Adding ``payments.refund@v1`` (amount, currency,
order_id; over 100 needs confirmation; only finance may refund) is then: ``callgate new tool``,
an edit of the ToolSpec, of the Cedar rules and of the Rego rules. The test checks that nothing
else changed, that ``callgate check`` passes, and that a real sidecar answers finance 50 -> allow,
finance 150 -> confirm, non-finance -> deny on Cedar (cedarpy and the compiled core), embedded
Rego and a real OPA server the sidecar uploads to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.gen.v1 import callgate_pb2 as pb
from callgate.gen.v1 import callgate_pb2_grpc as pb_grpc
from tests.conftest import POLICIES, ROOT, serve_toml
from tests.opa_fixture import OpaServer
from tests.test_shared_idempotency import wait_serving

TOOL = "payments.refund@v1"

PRINCIPALS = {
    "tenants": ["acme"],
    "roles": {"scheduler": {}, "admin": {}, "finance": {}},
    "users": {
        "alice": {"tenant": "acme", "roles": ["scheduler"]},
        "bob": {"tenant": "acme"},
        "carol": {"tenant": "acme", "roles": ["admin"]},
        "dana": {"tenant": "acme", "roles": ["finance"]},
    },
}

REFUND_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "amount": {"type": ["number", "string"]},
        "currency": {"type": "string", "enum": ["EUR", "USD", "CNY"]},
        "order_id": {"type": "string", "minLength": 1, "maxLength": 64},
    },
    "required": ["amount", "currency", "order_id"],
    "additionalProperties": False,
}

CEDAR_RULES = """
// payments.refund@v1: only finance refunds, in its own tenant; over 100 the user confirms.
@id("refund-finance")
permit (principal in Role::"finance", action == Action::"payments.refund", resource)
when { principal.tenant == context.tenant && !context.args.amount.greaterThan(decimal("100.00")) };

@id("refund-over-100")
@confirm("a refund over 100 needs the user's confirmation")
permit (principal in Role::"finance", action == Action::"payments.refund", resource)
when { principal.tenant == context.tenant && context.args.amount.greaterThan(decimal("100.00")) };
"""

REGO_RULES = """# payments.refund@v1: the twin of its Cedar rules.
package callgate.authz

permit contains "refund-finance" if {
	input.capability == "payments.refund"
	principal_in_role("finance")
	principal.tenant == input.context.tenant
	input.context.args.amount <= 100
}

permit contains "refund-over-100" if {
	input.capability == "payments.refund"
	principal_in_role("finance")
	principal.tenant == input.context.tenant
	input.context.args.amount > 100
}

confirm["refund-over-100"] := "a refund over 100 needs the user's confirmation"
"""


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "callgate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def one_principals_file(policies: Path) -> None:
    """The example folder with users and roles in principals.json only (the legacy copies gone)."""
    (policies / "cedar" / "entities.json").unlink()
    data = json.loads((policies / "rego" / "data.json").read_text())
    del data["callgate"]["entities"]
    (policies / "rego" / "data.json").write_text(json.dumps(data, indent=2))
    (policies / "principals.json").write_text(json.dumps(PRINCIPALS, indent=2))


def add_refund(policies: Path) -> dict[str, Any]:
    """What the author does after the scaffold: type the arguments, write the rules."""
    spec_path = policies / "tools" / f"{TOOL}.json"
    spec = json.loads(spec_path.read_text())
    spec.update(
        description="Refund an order (amount in the order's currency).",
        input_schema=REFUND_SCHEMA,
        resource_template="order:{order_id}",
        normalizers=[{"kind": "decimal", "field": "/amount", "scale": 2}],
    )
    spec_path.write_text(json.dumps(spec, indent=2))
    cedar = policies / "cedar" / "policies.cedar"
    text = cedar.read_text()
    scaffolded = text[text.index("\n// payments.refund@v1 (callgate new tool)") :]
    cedar.write_text(text.replace(scaffolded, CEDAR_RULES))
    (policies / "rego" / "payments_refund.rego").write_text(REGO_RULES)
    # the scaffolded test request, with the refund's arguments, and one case per effect
    for folder, who, amount, reasons in (
        ("DENY", "nobody", "50.00", []),
        ("ALLOW", "dana", "100.00", ["refund-finance"]),
        ("CONFIRM", "dana", "100.01", ["refund-over-100"]),
    ):
        case = {
            "principal": {"tenant": "acme", "id": who},
            "action": "payments.refund",
            "resource": "order:o-1",
            "context": {"tool": TOOL, "args": {"amount": amount, "currency": "EUR", "order_id": "o-1"}},
            "expect_reasons": reasons,
        }
        name = "unknown-user" if folder == "DENY" else folder.lower()
        (policies / "tests" / folder / f"payments_refund-{name}.json").write_text(json.dumps(case, indent=2))
    return spec


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-decl-", dir="/tmp"))
    policies = tmp / "policies"
    shutil.copytree(POLICIES, policies)
    one_principals_file(policies)
    before = tree(policies)
    r = cli("new", "tool", TOOL, "--dir", str(policies), "--side-effect", "modify")
    assert r.returncode == 0, r.stderr
    assert "created" in r.stdout and "appended" in r.stdout
    add_refund(policies)
    after = tree(policies)
    changed = {p for p in after if before.get(p) != after[p]}
    assert set(before) <= set(after)  # nothing removed
    assert changed == {
        f"tools/{TOOL}.json",
        "cedar/policies.cedar",
        "rego/payments_refund.rego",
        "tests/DENY/payments_refund-unknown-user.json",
        "tests/ALLOW/payments_refund-allow.json",
        "tests/CONFIRM/payments_refund-confirm.json",
    }, changed
    try:
        yield policies
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def config(tmp: Path, policies: Path, policy_toml: str, core: str = "auto") -> Path:
    toml = tmp / "callgate.toml"
    toml.write_text(
        serve_toml(tmp, policies=policies)
        + f"""{policy_toml}
[store]
path = "{tmp}/callgate.db"
[idempotency]
path = "{tmp}/idempotency.db"
[core]
engine = "{core}"
"""
    )
    return toml


def test_check_passes_and_policy_test_runs(folder: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="cg-decl-", dir="/tmp"))
    try:
        for engine in ("cedar", "rego"):
            toml = config(tmp, folder, f'engine = "{engine}"')
            r = cli("check", "--config", str(toml))
            assert r.returncode == 0, r.stdout + r.stderr
            assert TOOL in r.stdout
            r = cli("policy", "test", str(folder / "tests"), "--config", str(toml))
            assert r.returncode == 0, r.stdout + r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def propose_all(target: str) -> dict[str, tuple[str, str, str, tuple[str, ...]]]:
    """Each case's (state, rejection code, policy ids) from a real sidecar."""
    ch = grpc.insecure_channel(target)
    gate = pb_grpc.GateStub(ch)
    out: dict[str, tuple[str, str, str, tuple[str, ...]]] = {}
    cases: list[tuple[str, str, Any]] = [
        ("finance 50", "dana", 50),
        ("finance 50.0", "dana", 50.0),
        ('finance "50.00"', "dana", "50.00"),
        ("finance 49.99", "dana", 49.99),
        ("finance 100", "dana", 100),
        ("finance 100.01", "dana", "100.01"),
        ("finance 150", "dana", 150),
        ("finance 1.005", "dana", 1.005),
        ("non-finance 50", "bob", 50),
        ("scheduler 50", "alice", 50),
    ]
    sessions: dict[str, str] = {}
    try:
        for n, (name, who, amount) in enumerate(cases):
            if who not in sessions:
                sessions[who] = gate.OpenSession(
                    pb.OpenSessionRequest(
                        subject=pb.Subject(tenant="acme", id=who), timezone="UTC", locale="en"
                    ),
                    timeout=10,
                ).session_id
                gate.ListTools(pb.ListToolsRequest(session_id=sessions[who], model_call_id="m"), timeout=10)
            args = {"amount": amount, "currency": "EUR", "order_id": f"o-{n}"}
            r = gate.Propose(
                pb.ProposeRequest(
                    session_id=sessions[who], model_call_id="m", proposal_id=f"p{n}", tool_name="payments.refund",
                    tool_version="v1", arguments=json.dumps(args).encode(), idempotency_key=f"k{n}",
                ),
                timeout=10,
            )  # fmt: skip
            out[name] = (
                pb.State.Name(r.state),
                pb.Effect.Name(r.decision.effect),
                r.rejection.code if r.HasField("rejection") else "",
                tuple(r.decision.policy_ids),
            )
    finally:
        ch.close()
    return out


ALLOW = ("PREPARED", "ALLOW", "", ("refund-finance",))
CONFIRM = ("AUTHORIZED", "CONFIRM", "", ("refund-over-100",))
DENY = ("AUTHORIZATION_REJECTED", "DENY", "", ())
EXPECTED = {
    "finance 50": ALLOW,
    "finance 50.0": ALLOW,
    'finance "50.00"': ALLOW,
    "finance 49.99": ALLOW,
    "finance 100": ALLOW,
    "finance 100.01": CONFIRM,
    "finance 150": CONFIRM,
    "finance 1.005": ("VALIDATION_REJECTED", "EFFECT_UNSPECIFIED", "decimal_invalid", ()),
    "non-finance 50": DENY,
    "scheduler 50": DENY,
}


def serve_and_propose(folder: Path, policy_toml: str, core: str = "auto") -> tuple[dict[str, Any], str]:
    tmp = Path(tempfile.mkdtemp(prefix="cg-decl-", dir="/tmp"))
    toml = config(tmp, folder, policy_toml, core)
    log_path = tmp / "log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "callgate", "serve", "--config", str(toml)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=log, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        wait_serving(f"unix:{tmp}/agent.sock", proc, log_path).close()
        return propose_all(f"unix:{tmp}/agent.sock"), log_path.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("core", ["python", "native"])
def test_refund_on_cedar(folder: Path, core: str) -> None:
    got, log = serve_and_propose(folder, 'engine = "cedar"', core)
    assert got == EXPECTED
    assert f"core: {core}; Cedar decisions: {core}" in log, log
    if core == "native":  # the compiled core runs the decimal normalizer; the engine decides
        line = next(x for x in log.splitlines() if "core: native" in x)
        assert "payments.refund@v1" not in line, log


def test_refund_on_rego(folder: Path) -> None:
    got, _ = serve_and_propose(folder, 'engine = "rego"')
    assert got == EXPECTED


@pytest.mark.opa
def test_refund_on_opa(folder: Path, opa_factory: Callable[..., OpaServer]) -> None:
    empty = opa_factory(None)
    got, _ = serve_and_propose(folder, f'engine = "opa"\nopa_url = "{empty.url}"\nopa_upload_policies = true')
    assert got == EXPECTED
