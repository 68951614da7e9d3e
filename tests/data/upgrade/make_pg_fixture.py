"""Write a PostgreSQL store fixture with the code of the checkout it runs in (tests/test_upgrades.py).

    cd <a checkout of the version to freeze> && .venv/bin/python <this file> DSN OUT

``DSN``: a PostgreSQL server (``scripts/postgres start DIR`` prints one); a fresh database is
created on it. Runs a real sidecar of that checkout on it (its own ``tests.conftest.start_sidecar``,
a FixedClock) and drives the calls of :func:`make_fixture.drive` (every state a database keeps).
Writes ``OUT.sql`` (``pg_dump --no-owner``) and ``OUT.json``: the invocation ids by state and each
invocation's ``GetInvocation`` answer (the record and its events) as that version gave it. The
upgrade test restores the dump, opens it with a sidecar of the current code (the real start-up
migrates it) and asks for the same answers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))

from google.protobuf import json_format

from callgate.config import StoreConfig
from callgate.gen.v1 import callgate_pb2 as pb
from tests.conftest import start_sidecar, stop_sidecar

DSN_ENV = "CALLGATE_FIXTURE_PG_DSN"
HERE = Path(__file__).resolve().parent


def _drive() -> Any:
    spec = importlib.util.spec_from_file_location("make_fixture", HERE / "make_fixture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.drive


def answers(sc: Any, ids: dict[str, str]) -> dict[str, Any]:
    """Each invocation's ``GetInvocation`` answer (as a JSON object), by state."""
    out = {}
    for state, iid in ids.items():
        if state == "sessions":
            continue
        got = sc.gate.GetInvocation(pb.GetInvocationRequest(session_id=sc.session_of(iid), invocation_id=iid))
        out[state] = json_format.MessageToDict(got)
    return out


def pg_bin(root: Path, name: str) -> str:
    """A PostgreSQL client program of the server ``scripts/postgres`` installed."""
    out = subprocess.run(
        ["bash", str(root / "scripts" / "postgres"), "install"], capture_output=True, text=True, timeout=1800
    )
    return str(Path(out.stdout.strip().splitlines()[-1]) / name)


def fresh_database(dsn: str) -> str:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"cg_fixture_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


def main(dsn: str, out: Path) -> None:
    db = fresh_database(dsn)
    os.environ[DSN_ENV] = db
    running, tmp = start_sidecar(store=StoreConfig(backend="postgres", dsn_env=DSN_ENV))
    try:
        ids = _drive()(running)
        got = answers(running, ids)
    finally:
        stop_sidecar(running, tmp)
    dump = out.with_suffix(".sql")
    r = subprocess.run(
        [pg_bin(Path.cwd(), "pg_dump"), "--no-owner", "--dbname", db, "-f", str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    manifest = {"ids": ids, "answers": got}
    out.with_suffix(".json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(json.dumps(ids))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]).resolve())
