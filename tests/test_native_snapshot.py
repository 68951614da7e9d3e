"""Issue 15 (memory, reloads, arguments): a Cedar snapshot prepared for the compiled core alone.

* ``SnapshotCores.NATIVE`` (what ``callgate serve`` loads when the compiled core decides): no
  cedarpy policy sets, no Python entity index; the core reads ``entities.json`` itself and holds
  it once. Its decisions equal cedarpy's over a snapshot loaded with both forms (the reference).
* A snapshot the core cannot take falls back to cedarpy's form; one neither can take is refused
  with cedarpy's message (fail closed).
* The context is built from Cedar values directly (not Cedar's JSON reader); whatever that
  fast form does not conform to goes through Cedar's schema-directed reading, so the implicit
  entity form and every refusal stay the reference's.

The compiled core must be built (a missing build fails, it never skips)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from callgate.base.errors import LoadError
from callgate.base.model import AuthzRequest, Effect, Subject
from callgate.policy.engines.cedar import CedarEngine, SnapshotCores, load_cedar_dir
from callgate.policy.engines.cedar_slices import release_incrementally
from callgate.propose.core import load_native
from tests.conftest import POLICIES
from tests.test_native_cedar import GRID_ACTIONS, GRID_RESOURCES, GRID_USERS, check
from tests.test_native_cedar import cedar_dir as cedar_dir

NATIVE = load_native()
if NATIVE is None or not hasattr(getattr(NATIVE, "CedarSnapshot", None), "load"):
    pytest.fail(
        "the compiled core (with CedarSnapshot.load) is not built (scripts/native build)", pytrace=False
    )

RECORDS_SCHEMA = """
action "records.put" in [create] appliesTo { principal: User, resource: Resource,
  context: { tenant: String, tool: String,
             args: { table: String, records: Set<{ id: Long, name: String, ok: Bool, w: decimal }> } } };
action "owned.read" appliesTo { principal: User, resource: Resource,
  context: { tenant: String, tool: String, args: { owner: User } } };
"""
RECORDS_POLICIES = """
@id("records-own-tenant")
permit (principal, action == Action::"records.put", resource)
when { principal.tenant == context.tenant && context.args.table == "t" };

@id("records-heavy")
forbid (principal, action == Action::"records.put", resource)
when { context.args.records.contains({id: 7, name: "n7", ok: false, w: decimal("0.5")}) };

@id("owner-reads")
permit (principal, action == Action::"owned.read", resource)
when { context.args.owner == principal };
"""


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("native-records") / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    (d / "schema.cedarschema").write_text((d / "schema.cedarschema").read_text() + RECORDS_SCHEMA)
    (d / "policies.cedar").write_text((d / "policies.cedar").read_text() + RECORDS_POLICIES)
    return d


def _only(d: Path, shadow: tuple[str, ...] = ()) -> CedarEngine:
    p = load_cedar_dir(d, shadow=shadow, cores=SnapshotCores.NATIVE)
    assert p.native is not None and not p.python
    return CedarEngine(p)


def test_native_only_holds_no_cedarpy_form(cedar_dir: Path) -> None:
    p = load_cedar_dir(cedar_dir, cores=SnapshotCores.NATIVE)
    assert not p.python and p.entities is None and p.native is not None
    assert all(s.policy_set is None for s in p.slices.by_action.values())
    engine = CedarEngine(p)
    assert engine.native
    assert engine.use_native(False)  # no cedarpy form: the core decides either way
    both = load_cedar_dir(cedar_dir)
    assert both.python and both.entities is not None
    assert p.revision == both.revision
    py = load_cedar_dir(cedar_dir, cores=SnapshotCores.PYTHON)
    assert py.native is None and py.python and not CedarEngine(py).use_native(True)


@pytest.mark.parametrize("shadow", [(), ("no-blocked", "carol-tenant")])
def test_native_only_grid_equals_cedarpy(cedar_dir: Path, shadow: tuple[str, ...]) -> None:
    """tests/test_native_cedar.py's grid: the core's own entity load against cedarpy's."""
    ref = CedarEngine(load_cedar_dir(cedar_dir, shadow=shadow))
    only = _only(cedar_dir, shadow)
    n = 0
    for tenant, user in GRID_USERS:
        for action in GRID_ACTIONS:
            for resource in GRID_RESOURCES:
                args: dict[str, Any] = {"city": "Paris", "date": "2026-07-20"}
                if action == "calendar.create":
                    args = {"calendar_id": "c", "title": "x", "start": "s", "duration_minutes": 30}
                check(
                    ref,
                    only,
                    AuthzRequest(Subject(tenant, user), action, resource, {"tool": "t@v1", "args": args}),
                )
                n += 1
    assert n == len(GRID_USERS) * len(GRID_ACTIONS) * len(GRID_RESOURCES)


def test_entities_neither_core_takes_are_refused_with_cedarpys_message(tmp_path: Path) -> None:
    d = tmp_path / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    ents = json.loads((d / "entities.json").read_text())
    ents.append({"uid": {"type": "User", "id": "x"}, "attrs": {"tenant": 5}, "parents": []})
    (d / "entities.json").write_text(json.dumps(ents))
    with pytest.raises(LoadError) as py_err:
        load_cedar_dir(d, cores=SnapshotCores.PYTHON)
    with pytest.raises(LoadError) as nat_err:
        load_cedar_dir(d, cores=SnapshotCores.NATIVE)
    assert str(nat_err.value) == str(py_err.value)


def _records(n: int, **change: Any) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [
        {"id": i, "name": f"n{i:05d}", "ok": i % 2 == 0, "w": i % 50 + 0.5} for i in range(n)
    ]
    if change:
        recs[-1] = {**recs[-1], **change}
    return recs


def test_records_context_equal_and_fast(records_dir: Path) -> None:
    """60 KB of records: the same answers as cedarpy (allow, the forbid that finds one record,
    non-conforming records denied), and the native decision no longer pays Cedar's JSON reader."""
    ref = CedarEngine(load_cedar_dir(records_dir))
    only = _only(records_dir)

    def req(recs: Any, table: str = "t") -> AuthzRequest:
        return AuthzRequest(
            Subject("acme", "bob"), "records.put", "records:t", {"tool": "records.put@v1", "args": {"table": table, "records": recs}}
        )  # fmt: skip

    big = _records(1390)
    assert len(json.dumps(big)) > 60_000
    assert check(ref, only, req(big)).effect is Effect.ALLOW
    assert check(ref, only, req(big, "u")).effect is Effect.DENY
    heavy = _records(10)
    heavy[7] = {"id": 7, "name": "n7", "ok": False, "w": 0.5}
    assert check(ref, only, req(heavy)).effect is Effect.DENY
    for bad in (_records(5, ok="yes"), _records(5, extra=1), [{"id": 1}], [1, 2], _records(5, w=1e-7)):
        d = check(ref, only, req(bad))
        assert d.effect is Effect.DENY and d.error_code, d
    assert check(ref, only, req([])).effect is Effect.ALLOW
    r = req(big)
    only.authorize_batch_sync([r])
    t0 = time.process_time()
    for _ in range(5):
        only.authorize_batch_sync([r])
    per_call = (time.process_time() - t0) / 5
    # Cedar's JSON reader took ~30 ms here; generous bound, a shared box (not a speed test)
    assert per_call < 0.5, per_call


def test_implicit_entity_in_context_takes_the_reference_reading(records_dir: Path) -> None:
    """``{"type", "id"}`` where the schema declares an entity: the fast form (a record) does not
    conform, so Cedar's schema-directed reading decides, as in cedarpy."""
    ref = CedarEngine(load_cedar_dir(records_dir))
    only = _only(records_dir)
    for owner in ({"type": "User", "id": "bob"}, {"type": "User", "id": "alice"}, {"id": "bob"}, "bob"):
        a = check(ref, only, AuthzRequest(Subject("acme", "bob"), "owned.read", "x:y", {"tool": "t", "args": {"owner": owner}}))  # fmt: skip
        assert (a.effect is Effect.ALLOW) == (owner == {"type": "User", "id": "bob"}), (owner, a)


def test_release_incrementally_empties() -> None:
    table = {i: {"x": [i]} for i in range(1000)}
    release_incrementally(table)
    assert table == {}


def test_a_load_leaves_its_objects_frozen() -> None:
    """What a reload leaves alive joins the permanent generation (docs/LIMITS.md, "Reloads"): the
    first collection after it must not walk the new snapshot on the event loop."""
    import asyncio
    import gc

    from callgate.policy import lifecycle

    before = gc.get_freeze_count()
    kept = asyncio.run(lifecycle._off_the_loop(lambda _cfg: [{"n": [i]} for i in range(5000)], None))  # type: ignore[arg-type,return-value,misc]
    assert len(kept) == 5000
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + 5000


def _many_actions(tmp: Path, actions: int) -> Path:
    """The example policies plus ``actions`` actions, each with one policy reading a part of its
    context (so each action has a context projection)."""
    d = tmp / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    more = {
        "schema.cedarschema": [
            f'action "many.a{i}" appliesTo {{ principal: User, resource: Resource, '
            f"context: {{ tenant: String, tool: String, args: {{ city: String, n: Long }} }} }};"
            for i in range(actions)
        ],
        "policies.cedar": [
            f'@id("many-{i}")\npermit (principal, action == Action::"many.a{i}", resource)\n'
            f'when {{ principal.tenant == context.tenant && context.args.city == "c{i}" }};'
            for i in range(actions)
        ],
    }
    for name, lines in more.items():
        (d / name).write_text((d / name).read_text() + "\n".join(lines))
    return d


def test_a_large_snapshot_is_freed_apart_and_the_next_one_decides(tmp_path: Path) -> None:
    """A retired snapshot's last reference goes away on the event loop; a large one (here: 300
    actions, each with a context projection) hands its policy sets, schemas and projections to a
    thread of its own instead of freeing them there (docs/LIMITS.md, "Reloads"). A small one is
    freed in place. Either way the snapshot serving next decides as before."""
    import gc

    d = _many_actions(tmp_path, 300)

    def decide(engine: CedarEngine, city: str) -> Effect:
        req = AuthzRequest(Subject("acme", "alice"), "many.a7", "x:y", {"tool": "t@v1", "args": {"city": city, "n": 1}})  # fmt: skip
        (decision,) = engine.authorize_batch_sync([req])
        return decision.effect

    first = _only(d)
    assert (decide(first, "c7"), decide(first, "c8")) == (Effect.ALLOW, Effect.DENY)
    apart = NATIVE.CedarSnapshot.dropped_apart()
    del first
    gc.collect()
    assert NATIVE.CedarSnapshot.dropped_apart() == apart + 1
    second = _only(d)
    assert (decide(second, "c7"), decide(second, "c8")) == (Effect.ALLOW, Effect.DENY)

    small = _only(POLICIES / "cedar")
    del small
    gc.collect()
    assert NATIVE.CedarSnapshot.dropped_apart() == apart + 1  # freed in place
    assert decide(second, "c7") is Effect.ALLOW


def _chunked_dir(tmp: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    """The example set with its entities spread over three of the core's read chunks (4,096
    entities each): the roles first, 9,000 other users, then a role whose parent is in the first
    chunk, more users, and the example users last (their roles two chunks away). Roles may be in
    roles here, so an ancestor two chunks away is reached only through one in between."""
    d = tmp / "cedar"
    shutil.copytree(POLICIES / "cedar", d)
    schema = (d / "schema.cedarschema").read_text().replace("entity Role;", "entity Role in [Role];")
    (d / "schema.cedarschema").write_text(schema)
    ents = json.loads((d / "entities.json").read_text())
    roles = [e for e in ents if e["uid"]["type"] == "Role"]
    users = [e for e in ents if e["uid"]["type"] != "Role"]
    filler = [
        {"uid": {"type": "User", "id": f"user{i}"}, "attrs": {"tenant": f"t{i % 7}"}, "parents": []}
        for i in range(9000)
    ]
    deputy = {
        "uid": {"type": "Role", "id": "deputy"},
        "attrs": {},
        "parents": [{"type": "Role", "id": "scheduler"}],
    }
    dave = {"uid": {"type": "User", "id": "dave"}, "attrs": {"tenant": "acme"}, "parents": [{"type": "Role", "id": "deputy"}]}  # fmt: skip
    ents = [*roles, *filler[:6000], deputy, *filler[6000:], *users, dave, *(extra or [])]
    (d / "entities.json").write_text(json.dumps(ents))
    return d


def test_entities_over_several_read_chunks_decide_as_cedarpy(tmp_path: Path) -> None:
    """Issue 34 item 6: the core reads ``entities.json`` in chunks (its peak memory follows the
    chunk, not the file); decisions equal cedarpy's over the whole file, an ancestor two chunks
    away included (dave -> deputy -> scheduler may create calendar events, with confirmation)."""
    d = _chunked_dir(tmp_path)
    ref = CedarEngine(load_cedar_dir(d))
    only = _only(d)
    for tenant, user in [*GRID_USERS, ("t3", "user8999"), ("t0", "user0")]:
        for action in GRID_ACTIONS:
            for resource in GRID_RESOURCES:
                args: dict[str, Any] = {"city": "Paris", "date": "2026-07-20"}
                if action == "calendar.create":
                    args = {"calendar_id": "c", "title": "x", "start": "s", "duration_minutes": 30}
                check(
                    ref,
                    only,
                    AuthzRequest(Subject(tenant, user), action, resource, {"tool": "t@v1", "args": args}),
                )
    args = {"calendar_id": "c", "title": "x", "start": "s", "duration_minutes": 30}
    dave = AuthzRequest(
        Subject("acme", "dave"), "calendar.create", "calendar:primary", {"tool": "t@v1", "args": args}
    )
    assert check(ref, only, dave).effect is Effect.CONFIRM


def test_an_entity_listed_twice_in_different_chunks_reads_as_cedar_reads_it(tmp_path: Path) -> None:
    """Cedar keeps an entity listed twice alike once and refuses two different ones; so does
    the chunked read when the two are in different chunks (user5 is in the first)."""
    same = {"uid": {"type": "User", "id": "user5"}, "attrs": {"tenant": "t5"}, "parents": []}
    d = _chunked_dir(tmp_path / "same", [same])
    ref = CedarEngine(load_cedar_dir(d, cores=SnapshotCores.PYTHON))
    only = _only(d)
    check(ref, only, AuthzRequest(Subject("t5", "user5"), "weather.read", "weather:Paris", {"tool": "t@v1"}))
    other = {**same, "attrs": {"tenant": "t6"}}
    d = _chunked_dir(tmp_path / "other", [other])
    with pytest.raises(LoadError):
        load_cedar_dir(d, cores=SnapshotCores.PYTHON)
    with pytest.raises(LoadError, match="duplicate entity entry"):
        load_cedar_dir(d, cores=SnapshotCores.NATIVE)
