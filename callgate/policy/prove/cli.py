"""``callgate policy prove``: print each property's answer, refutations with their counterexample
and what the real engines decide on it. Exit 0 only when every property is proved; 1 when one is
refuted, unknown or cannot be checked; 2 when the prover cannot run (no solver, no binary, a
properties file that does not read)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from callgate.policy.prove import DEFAULT_SOLVER_TIMEOUT_MS, DEFAULT_WALL_SECONDS

if TYPE_CHECKING:  # the parser is built for every command: the prover's modules load when it runs
    from callgate.policy.prove.properties import Property
    from callgate.policy.prove.runner import CedarSource, PropertyResult

PROPERTIES_FILE = "properties.toml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", "-c", help="TOML config (default: ./callgate.toml, else the built-in defaults)"
    )
    p.add_argument(
        "--properties",
        help=f"the properties file (default: {PROPERTIES_FILE} in the config's policy.dir)",
    )
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_SOLVER_TIMEOUT_MS / 1000, help="seconds per query"
    )
    p.add_argument(
        "--wall", type=float, default=DEFAULT_WALL_SECONDS, help="seconds for the whole run (then unknown)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per property")


def _uid(u: object) -> str:
    if isinstance(u, dict):
        return f"{u.get('type')}::{json.dumps(u.get('id'))}"
    return str(u)


def print_result(r: PropertyResult, source: CedarSource, out: TextIO, *, as_json: bool = False) -> None:
    from callgate.base.errors import CallgateError
    from callgate.policy.prove.replay import replay
    from callgate.policy.prove.runner import PropertyResult

    replayed = []
    if r.counterexample is not None:
        try:
            replayed = replay(r.counterexample, source.policies, source.schema, source.shadow)
        except CallgateError as exc:  # the counterexample's store does not load: say so, keep going
            replayed = []
            r = PropertyResult(r.prop, r.status, f"replay failed: {exc}", r.counterexample)
    if as_json:
        doc: dict[str, object] = {"name": r.prop.name, "status": r.status.value, "source": r.prop.source}
        if r.detail:
            doc["detail"] = r.detail
        if r.counterexample is not None:
            doc["counterexample"] = r.counterexample.request_json()
            doc["replayed"] = {x.core.value: x.decision.effect.value for x in replayed}
        print(json.dumps(doc, sort_keys=True), file=out)
        return
    print(f"{r.status.value:<8} {r.prop.name}  ({r.prop.kind.value}, {r.prop.source})", file=out)
    if r.detail:
        print(f"         {r.detail}", file=out)
    cex = r.counterexample
    if cex is not None:
        print(
            f"         counterexample: principal {_uid(cex.principal)}, action {_uid(cex.action)}, "
            f"resource {_uid(cex.resource)}",
            file=out,
        )
        print(f"         context: {json.dumps(cex.context, sort_keys=True)}", file=out)
        print(f"         entities: {json.dumps(list(cex.entities), sort_keys=True)}", file=out)
        if cex.policy:
            print(f"         erroring policy: {cex.policy}", file=out)
        for x in replayed:
            ids = ", ".join(reason.policy_id or reason.code for reason in x.decision.reasons)
            print(f"         replayed on {x.core.value}: {x.decision.effect.value.upper()} ({ids})", file=out)


def prove(
    props: tuple[Property, ...],
    source: CedarSource,
    out: TextIO,
    err: TextIO,
    *,
    against: str = "",
    timeout: float = DEFAULT_SOLVER_TIMEOUT_MS / 1000,
    wall: float = DEFAULT_WALL_SECONDS,
    as_json: bool = False,
) -> int:
    from callgate.policy.prove.runner import ProverUnavailable, Status, run_checks

    try:
        results = run_checks(
            props, source, against=against, solver_timeout_ms=int(timeout * 1000), wall_seconds=wall
        )
    except ProverUnavailable as exc:
        print(f"error: cannot prove: {exc}", file=err)
        return 2
    for r in results:
        print_result(r, source, out, as_json=as_json)
    return 0 if all(r.status is Status.PROVED for r in results) else 1


def cmd_policy_prove(args: argparse.Namespace, out: TextIO, err: TextIO, cfg_loader: object) -> int:
    """The ``callgate policy prove`` command; ``cfg_loader`` reads ``--config`` (the CLI's own)."""
    from callgate.base.errors import CallgateError
    from callgate.policy.prove.properties import load_properties
    from callgate.policy.prove.runner import CedarSource

    try:
        cfg = cfg_loader(args.config)  # type: ignore[operator]
        policy_dir = Path(cfg.path(cfg.policy.dir))
        path = Path(args.properties) if args.properties else policy_dir / PROPERTIES_FILE
        props = load_properties(path)
        source = CedarSource.load(policy_dir / "cedar", cfg.policy.shadow)
    except CallgateError as exc:
        print(f"error: {exc}", file=err)
        return 2
    return prove(props, source, out, err, timeout=args.timeout, wall=args.wall, as_json=args.json)


def check_against(policy_dir: Path, shadow: tuple[str, ...], revision: str, out: TextIO, err: TextIO) -> int:
    """``callgate check --against REV``: what the working policies loosen compared with git
    ``revision`` (a ``no_looser_than`` property over every request), as counterexamples."""
    from callgate.base.errors import CallgateError
    from callgate.policy.prove.properties import Kind, Property
    from callgate.policy.prove.runner import CedarSource

    prop = Property(
        name=f"no-looser-than-{revision}",
        kind=Kind.NO_LOOSER_THAN,
        source=f"--against {revision}",
        revision=revision,
    )
    try:
        source = CedarSource.load(policy_dir / "cedar", shadow)
    except CallgateError as exc:
        print(f"error: {exc}", file=err)
        return 2
    return prove((prop,), source, out, err)
