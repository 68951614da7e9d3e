"""One registry per extension point (engines, event stores, idempotency backends): config
validation, the CLI and the composition root read the same names; an unknown name is refused with
the config key, the file and the registered choices; every engine implements the whole Engine
Protocol (readiness and policy upload included)."""

from __future__ import annotations

import asyncio
import io
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from callgate.base.errors import ErrorCode, LoadError
from callgate.base.registry import Registry
from callgate.cli.main import cmd_check, main
from callgate.config import Config, IdempotencyConfig, PolicyConfig, StoreConfig, load_config, validate
from callgate.policy.engines.base import Engine, Readiness
from callgate.policy.engines.cedar import ENTITIES_WARN_BYTES
from callgate.policy.engines.registry import ENGINES, EngineFactory
from callgate.policy.policytest import build_engine
from callgate.policy.snapshot import load_snapshot
from callgate.server.app import build_idempotency
from callgate.store.idempotency import IDEMPOTENCY_BACKENDS
from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore
from callgate.store.registry import STORES
from callgate.store.sqlite import SQLiteStore
from tests.conftest import POLICIES, ROOT


def test_registered_names() -> None:
    assert ENGINES.names() == ("cedar", "rego", "opa")  # the first is the default
    assert STORES.names() == ("sqlite", "postgres")
    assert IDEMPOTENCY_BACKENDS.names() == ("sqlite", "postgres")
    defaults = Config()
    assert ENGINES.names()[0] == defaults.policy.engine
    assert STORES.names()[0] == defaults.store.backend
    assert IDEMPOTENCY_BACKENDS.names()[0] == defaults.idempotency.backend
    assert all(f.doc for f in (*ENGINES, *STORES, *IDEMPOTENCY_BACKENDS))


@pytest.mark.parametrize(
    "text,fragment",
    [
        (
            '[policy]\nengine = "magic"\n',
            "policy.engine 'magic' is not supported (registered: cedar, rego, opa)",
        ),
        (
            '[store]\nbackend = "redis"\n',
            "store.backend 'redis' is not supported (registered: sqlite, postgres)",
        ),
        (
            '[idempotency]\nbackend = "mysql"\n',
            "idempotency.backend 'mysql' is not supported (registered: sqlite, postgres)",
        ),
        ('[policy]\nengine = "opa"\nopa_url = "ftp://x"\n', "policy.opa_url: OPA URL 'ftp://x' must be"),
        ('[policy]\nengine = "opa"\nopa_timeout_ms = 0\n', "policy.opa_timeout_ms must be positive"),
        ('[store]\npath = ""\n', "store.path must name"),
        ('[idempotency]\npath = ""\n', "idempotency.path must name"),
        (
            '[idempotency]\nbackend = "postgres"\ndsn_env = ""\n',
            "needs idempotency.dsn_env or idempotency.dsn_file",
        ),
    ],
)
def test_unknown_names_and_bad_keys_name_the_key_file_and_choices(
    tmp_path: Path, text: str, fragment: str
) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(LoadError) as err:
        load_config(p)
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert fragment in err.value.message, err.value.message
    assert err.value.source == str(p)


def test_only_the_chosen_engine_checks_its_keys() -> None:
    validate(Config(policy=PolicyConfig(engine="cedar", opa_url="not a url", opa_timeout_ms=0)))


def test_a_second_registration_of_a_name_is_refused() -> None:
    reg: Registry[EngineFactory] = Registry("policy engine", "policy.engine")
    reg.register(ENGINES.get("cedar"))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(ENGINES.get("cedar"))
    with pytest.raises(LoadError, match=r"'rego' is not supported \(registered: cedar\)"):
        reg.get("rego")


def test_snapshot_loading_reads_the_registry() -> None:
    for name in ("cedar", "rego"):
        assert load_snapshot(POLICIES, name).engine.name == name
    with pytest.raises(LoadError, match="registered: cedar, rego, opa"):
        load_snapshot(POLICIES, "magic")


def test_policy_test_engine_choices_come_from_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["policy", "test", "x", "--engine", "magic"])
    assert "choose from 'cedar', 'rego', 'opa'" in capsys.readouterr().err
    cfg = load_config(ROOT / "callgate.toml")
    with pytest.raises(ValueError, match=r"registered: cedar, rego, opa"):
        build_engine(cfg, "magic")
    assert build_engine(cfg, "rego").name == "rego"


def test_embedded_engines_are_ready_at_once_and_need_no_upload() -> None:
    async def go(engine: Engine) -> tuple[Readiness, Readiness]:
        await engine.load_policies()  # no-op: the policies are in process
        first = await engine.readiness()
        await engine.close()
        return first, await engine.readiness()

    for name in ("cedar", "rego"):
        engine = ENGINES.get(name).load(POLICIES, PolicyConfig())
        (ok, why), after_close = asyncio.run(go(engine))
        assert ok and engine.revision in why
        assert ENGINES.get(name).uploads_policies(PolicyConfig(opa_upload_policies=True)) is False
        assert after_close.ready is (name == "cedar")  # a closed Rego engine has no thread pool


def test_only_opa_uploads_and_only_when_asked() -> None:
    opa = ENGINES.get("opa")
    assert opa.uploads_policies(PolicyConfig(engine="opa", opa_upload_policies=True))
    assert not opa.uploads_policies(PolicyConfig(engine="opa"))


def test_check_prints_the_engines_warnings(tmp_path: Path) -> None:
    shutil.copytree(POLICIES, tmp_path / "policies")
    shutil.copy(ROOT / "callgate.toml", tmp_path / "callgate.toml")
    entities = tmp_path / "policies" / "cedar" / "entities.json"
    entities.write_text(entities.read_text() + " " * ENTITIES_WARN_BYTES)  # same entities, more bytes
    assert ENGINES.get("cedar").warnings(tmp_path / "policies")
    assert ENGINES.get("rego").warnings(tmp_path / "policies") == []

    class Args:
        config = str(tmp_path / "callgate.toml")

    out = io.StringIO()
    cmd_check(Args(), out)  # type: ignore[arg-type]
    assert "warning: " in out.getvalue() and "KiB of entities" in out.getvalue()


def test_stores_are_built_by_their_registrations(tmp_path: Path) -> None:
    cfg = Config(
        store=StoreConfig(path=str(tmp_path / "e.db")),
        idempotency=IdempotencyConfig(path=str(tmp_path / "i.db")),
        base_dir=str(tmp_path),
    )

    async def go() -> None:
        store = await STORES.get("sqlite").open(cfg, {})
        assert isinstance(store, SQLiteStore)
        await store.close()
        idem = await build_idempotency(cfg)
        assert isinstance(idem, SQLiteIdempotencyStore)
        await idem.close()
        with pytest.raises(LoadError, match="needs a DSN"):
            await build_idempotency(
                replace(
                    cfg,
                    idempotency=IdempotencyConfig(backend="postgres", dsn_env="CALLGATE_TEST_NO_SUCH_DSN"),
                )
            )

    asyncio.run(go())
