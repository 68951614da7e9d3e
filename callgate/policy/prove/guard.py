"""The reload guard (``policy.reload_prove``): a hot reload that loosens a ``guard`` property is
refused like a broken set (docs/PROVE.md, "The reload guard").

For every property of ``properties.toml`` marked ``guard = true``, the new set must be no looser
than the serving one within that property's scope: nothing admitted (allowed or confirmed) that the
serving set denies, nothing allowed without confirmation that it confirmed or denied, and the
property itself must still hold. Anything but *proved* refuses the reload (fail closed): a
counterexample, an unknown (time limit), a prover or solver that is not installed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from callgate.base.errors import LoadError
from callgate.policy.check import Finding, Severity, load_error_findings
from callgate.policy.engines.cedar import policy_files
from callgate.policy.prove.properties import PROPERTIES_FILE, Kind, Property, View, load_properties
from callgate.policy.prove.runner import (
    CedarSource,
    PropertyResult,
    ProverUnavailable,
    Status,
    run_checks,
)

if TYPE_CHECKING:
    from callgate.config import Config

WALL_SECONDS = 60.0


def serving_source(cfg: Config) -> CedarSource:
    """The Cedar texts of the policy folder as they are now (taken with the snapshot they load)."""
    return CedarSource.load(cfg.path(cfg.policy.dir) / "cedar", cfg.policy.shadow)


def _relations(prop: Property, serving: Path) -> list[Property]:
    """``prop`` itself and the new set against the serving one, in ``prop``'s scope."""
    out = [prop]
    for view in (View.ADMITTED, View.ALLOWED):
        out.append(
            replace(
                prop,
                name=f"{prop.name} (no looser than the serving set, {view.value})",
                kind=Kind.IMPLIES,
                other=serving,
                view=view,
                revision="",
            )
        )
    return out


def guard_findings(cfg: Config, new: CedarSource, old: CedarSource | None) -> list[Finding]:
    """Problems that refuse ``new`` (empty: the reload may go on)."""
    props_path = cfg.path(cfg.policy.dir) / PROPERTIES_FILE
    if old is None or not props_path.exists():
        return []
    try:
        guarded = [p for p in load_properties(props_path) if p.guard]
    except LoadError as exc:
        return load_error_findings(exc)
    if not guarded or (new.policies == old.policies and new.schema == old.schema):
        return []
    import tempfile

    with tempfile.TemporaryDirectory(prefix="callgate-guard-") as tmp:
        serving = Path(tmp) / "serving.cedar"
        serving.write_text(old.policies, encoding="utf-8")
        props = [q for p in guarded for q in _relations(p, serving)]
        try:
            results = run_checks(props, new, wall_seconds=WALL_SECONDS)
        except ProverUnavailable as exc:
            return [Finding(Severity.ERROR, str(props_path), f"policy.reload_prove: cannot prove: {exc}")]
        except LoadError as exc:
            return load_error_findings(exc)
    return [_finding(r, new) for r in results if r.status is not Status.PROVED]


def _finding(r: PropertyResult, new: CedarSource) -> Finding:
    file, _, line = r.prop.source.rpartition(":")
    what = f"guard property {r.prop.name}: {r.status.value}"
    if r.detail:
        what += f" ({r.detail})"
    cex = r.counterexample
    if cex is not None:
        request = {k: v for k, v in cex.request_json().items() if k != "entities"}
        what += f"; counterexample {json.dumps(request, sort_keys=True)}"
    files = ", ".join(p.name for p in policy_files(new.directory))
    return Finding(Severity.ERROR, file or r.prop.source, f"{what} (policies: {files})", line)
