"""The TypeScript client installs the way npm users install it, with no manual build (issue 28
item 4), by the commands of clients/ts/README.md "Install" run as written from an empty folder:
``npm pack /path/to/callgate/clients/ts`` and ``npm install ./callgate-client-0.1.0.tgz``, then
the client loop (examples/node/agent.mjs, importing ``@callgate/client``) run from that folder
against a real sidecar; and ``npm install /path/to/callgate/clients/ts`` of a checkout without
node_modules or dist (a fresh clone). npm reads the registry through the project's cache
(.cache/npm)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Running
from tests.markers import Needs, require

ROOT = Path(__file__).resolve().parents[1]
TS = ROOT / "clients" / "ts"
EXAMPLE = ROOT / "examples" / "node" / "agent.mjs"
IMPORTED = '"../../clients/ts/dist/index.js"'

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]


def readme_install() -> list[list[str]]:
    """The commands of clients/ts/README.md "Install" (comments dropped), each as argv."""
    text = (TS / "README.md").read_text(encoding="utf-8").split("## Install\n", 1)[1].split("\n## ", 1)[0]
    (sh,) = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    return [shlex.split(line, comments=True) for line in sh.splitlines() if shlex.split(line, comments=True)]


def _npm(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "npm_config_cache": str(ROOT / ".cache" / "npm"),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    proc = subprocess.run(
        ["npm", *args, "--loglevel=error"], cwd=cwd, env=env, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, (
        f"npm {' '.join(args)} (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def _app(folder: Path) -> Path:
    folder.mkdir()
    (folder / "package.json").write_text(json.dumps({"name": "app", "private": True, "type": "module"}))
    return folder


def _run_loop(app: Path, server: Running) -> str:
    agent = EXAMPLE.read_text(encoding="utf-8")
    assert agent.count(IMPORTED) == 1  # the example's only import of the client
    (app / "agent.mjs").write_text(agent.replace(IMPORTED, '"@callgate/client"'), encoding="utf-8")
    run_dir = Path(server.config.server.agent.socket).parent
    proc = subprocess.run(
        ["node", "agent.mjs"], cwd=app, env={**os.environ, "CALLGATE_RUN_DIR": str(run_dir)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_packed_tarball_installs_into_an_empty_folder_and_runs_the_loop(
    server: Running, tmp_path: Path
) -> None:
    require(Needs.NODE)
    folder, pack, install = readme_install()
    assert folder == ["npm", "install", "/path/to/callgate/clients/ts"]
    assert pack == ["npm", "pack", "/path/to/callgate/clients/ts"], pack  # into the current folder
    assert install == ["npm", "install", "./callgate-client-0.1.0.tgz"], install
    app = _app(tmp_path / "app")
    packed = _npm(*pack[1:-1], str(TS), cwd=app).strip().splitlines()[-1]
    assert packed == Path(install[-1]).name and (app / packed).is_file()
    _npm(*install[1:], cwd=app)
    installed = app / "node_modules" / "@callgate" / "client"
    assert not installed.is_symlink() and (installed / "dist" / "index.js").is_file()
    assert (installed / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()  # package.json's Apache-2.0
    out = _run_loop(app, server)
    assert "weather__get: allowed" in out and "calendar__create_event: denied" in out, out
    assert '["ok","ok","denied","rejected"]' in out, out


def test_a_checkout_folder_installs_with_no_build_step(server: Running, tmp_path: Path) -> None:
    require(Needs.NODE)
    clone = tmp_path / "clone"
    shutil.copytree(TS, clone, ignore=shutil.ignore_patterns("node_modules", "dist"))
    app = _app(tmp_path / "app")
    folder = readme_install()[0]
    _npm(*folder[1:-1], str(clone), cwd=app)  # /path/to/callgate/clients/ts: the clone
    assert (clone / "dist" / "index.js").is_file()  # built by npm's prepare step
    out = _run_loop(app, server)
    assert '["ok","ok","denied","rejected"]' in out, out
