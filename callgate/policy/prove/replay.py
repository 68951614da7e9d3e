"""A counterexample run through callgate's real Cedar engines: cedarpy and the compiled core.

The counterexample's entity store becomes the snapshot's ``entities.json`` beside the same policies
and schema, loaded by :func:`callgate.policy.engines.cedar.load_cedar_dir` exactly as a sidecar
loads them; the request is the :class:`AuthzRequest` callgate would build (the session's tenant is
the context's ``tenant``, which callgate sets from the session).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from callgate.base.model import AuthzRequest, Decision, JSONValue, Subject
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.prove.runner import Counterexample


class Core(StrEnum):
    PYTHON = "cedarpy"
    NATIVE = "compiled core"


@dataclass(frozen=True, slots=True)
class Replayed:
    core: Core
    decision: Decision


def authz_request(cex: Counterexample) -> AuthzRequest:
    context: dict[str, JSONValue] = {k: v for k, v in cex.context.items() if k != "tenant"}
    tenant = cex.context.get("tenant")
    if not isinstance(tenant, str):
        principal = next((e for e in cex.entities if e.get("uid") == dict(cex.principal)), {})
        tenant = str((principal.get("attrs") or {}).get("tenant", ""))
    return AuthzRequest(
        subject=Subject(tenant=tenant, id=cex.principal["id"]),
        capability=cex.action["id"],
        resource=cex.resource["id"],
        context=context,
    )


def replay(cex: Counterexample, policies: str, schema: str, shadow: Sequence[str] = ()) -> list[Replayed]:
    """The decision of each engine built here (the compiled core when it is built) on ``cex``."""
    with tempfile.TemporaryDirectory(prefix="callgate-replay-") as tmp:
        cedar = Path(tmp) / "cedar"
        cedar.mkdir()
        (cedar / "policies.cedar").write_text(policies, encoding="utf-8")
        (cedar / "schema.cedarschema").write_text(schema, encoding="utf-8")
        (cedar / "entities.json").write_text(json.dumps(list(cex.entities)), encoding="utf-8")
        engine = CedarEngine(load_cedar_dir(cedar, shadow, SnapshotCores.BOTH))
    request = authz_request(cex)
    out: list[Replayed] = []
    engine.use_native(False)
    out.append(Replayed(Core.PYTHON, engine.authorize_batch_sync([request])[0]))
    if engine.use_native(True):
        out.append(Replayed(Core.NATIVE, engine.authorize_batch_sync([request])[0]))
    return out
