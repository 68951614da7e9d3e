"""The idempotency-key contract (spec 6.8), one suite run against every backend.

``sqlite``: a file in a temporary directory. ``postgres``: a real PostgreSQL server started by
``tests/pg_fixture.py`` through ``scripts/postgres`` (installed from Debian's packages when
missing; never mocked, never skipped). Each test uses its own tenant, so tests sharing the
PostgreSQL database do not see each other's keys.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import pytest

from callgate.base.errors import CallgateError, ErrorCode
from callgate.store.idempotency.base import (
    ClaimKind,
    ClaimResult,
    ExpiredPolicy,
    IdempotencyError,
    IdempotencyKey,
    IdempotencyStore,
)
from callgate.store.idempotency.postgres import PostgresIdempotencyStore
from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore

pytest_plugins = ["tests.pg_fixture"]

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 7, 19, 6, 0, tzinfo=UTC)
DAY = timedelta(days=1)
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
REJECT = ExpiredPolicy.REJECT
NEW = ExpiredPolicy.NEW
R = TypeVar("R")


@dataclass
class Backend:
    kind: str
    target: str  # SQLite file path or PostgreSQL DSN

    def make(self) -> IdempotencyStore:
        if self.kind == "sqlite":
            return SQLiteIdempotencyStore(self.target)
        return PostgresIdempotencyStore(self.target, max_size=8)

    def run(self, body: Callable[[IdempotencyStore], Awaitable[R]]) -> R:
        async def main() -> R:
            store = self.make()
            await store.start()
            try:
                return await body(store)
            finally:
                await store.close()

        return asyncio.run(main())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "idempotency.db"))
    else:
        yield Backend("postgres", request.getfixturevalue("postgres_dsn"))


def scope() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def K(
    tenant: str,
    key: str = "k-1",
    *,
    subject: str = "alice",
    tool: str = "calendar.create",
    version: str = "v1",
) -> IdempotencyKey:
    return IdempotencyKey(tenant=tenant, subject=subject, tool_name=tool, tool_version=version, key=key)


async def claim(
    s: IdempotencyStore,
    k: IdempotencyKey,
    digest: str,
    inv: str,
    at: datetime = T0,
    policy: ExpiredPolicy = REJECT,
) -> ClaimResult:
    return await s.claim(k, digest, inv, now=at, retention=DAY, expired_policy=policy)


# ---------------------------------------------------------------------- 6.8 rules 1-3


def test_new_in_progress_completed_replay(backend: Backend) -> None:
    k = K(scope())
    message = b'{"role":"tool","content":{"status":"ok","event_id":"ev-9"}}'

    async def body(s: IdempotencyStore) -> None:
        first = await claim(s, k, D1, "inv-a")
        assert first.kind is ClaimKind.NEW and first.record is not None
        assert (first.record.state, first.record.invocation_id, first.record.digest) == (
            "claimed",
            "inv-a",
            D1,
        )
        assert first.record.expires_at == T0 + DAY and first.record.result is None

        dup = await claim(s, k, D1, "inv-b", T0 + timedelta(seconds=1))
        assert dup.kind is ClaimKind.IN_PROGRESS and dup.record is not None
        assert dup.record.invocation_id == "inv-a"  # who holds it

        done_at = T0 + timedelta(minutes=5)
        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="ev-9", now=done_at)
        await s.set_result(k, "inv-a", message, now=done_at)

        again = await claim(s, k, D1, "inv-c", T0 + timedelta(hours=1))
        assert again.kind is ClaimKind.COMPLETED and again.record is not None
        assert again.record.result == message
        assert (again.record.outcome, again.record.external_resource_id) == ("COMMITTED", "ev-9")
        assert again.record.invocation_id == "inv-a"
        # the retention window restarts at completion
        assert again.record.expires_at == done_at + DAY
        assert again.record.created_at == T0 and again.record.updated_at == done_at

        stored = await s.get(k)
        assert stored == again.record

    backend.run(body)


def test_result_may_be_stored_before_completion(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        await s.set_result(k, "inv-a", b"\x00\xff tool message", now=T0)
        assert (await claim(s, k, D1, "inv-b")).kind is ClaimKind.IN_PROGRESS  # not complete yet
        await s.complete(k, "inv-a", outcome="FAILED_AFTER_COMMIT", external_resource_id="", now=T0)
        r = await claim(s, k, D1, "inv-c")
        assert r.kind is ClaimKind.COMPLETED and r.record is not None
        assert (r.record.result, r.record.outcome) == (b"\x00\xff tool message", "FAILED_AFTER_COMMIT")

    backend.run(body)


def test_other_digest_is_key_reuse_and_never_overwrites(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        r = await claim(s, k, D2, "inv-b")
        assert r.kind is ClaimKind.MISMATCH and r.record is not None and r.record.digest == D1
        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="x", now=T0)
        await s.set_result(k, "inv-a", b"secret result of request 1", now=T0)
        r = await claim(s, k, D2, "inv-c")
        assert r.kind is ClaimKind.MISMATCH and r.record is not None
        assert r.record.result is None  # another request's result is not handed out
        stored = await s.get(k)
        assert stored is not None and (stored.digest, stored.invocation_id, stored.result) == (
            D1, "inv-a", b"secret result of request 1",
        )  # fmt: skip

    backend.run(body)


def test_released_key_is_new_for_any_digest(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        await s.release(k, "inv-a", now=T0 + timedelta(seconds=2))
        assert (await s.get(k)) is not None
        r = await claim(s, k, D2, "inv-b", T0 + timedelta(seconds=3))
        assert r.kind is ClaimKind.NEW and r.record is not None
        assert (r.record.digest, r.record.invocation_id, r.record.state) == (D2, "inv-b", "claimed")
        assert r.record.created_at == T0 + timedelta(seconds=3)
        # the earlier owner lost the key
        with pytest.raises(IdempotencyError) as ei:
            await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="", now=T0)
        assert ei.value.reason == "not_owner" and ei.value.code is ErrorCode.ILLEGAL_TRANSITION
        # released keys are free even past their retention window, whatever the policy
        await s.release(k, "inv-b", now=T0)
        r = await claim(s, k, D1, "inv-c", T0 + 3 * DAY, REJECT)
        assert r.kind is ClaimKind.NEW

    backend.run(body)


def test_claim_retried_by_its_owner_is_still_new(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        first = await claim(s, k, D1, "inv-a")
        retry = await claim(s, k, D1, "inv-a", T0 + timedelta(seconds=1))
        assert retry.kind is ClaimKind.NEW and retry.record == first.record
        assert (await claim(s, k, D2, "inv-a")).kind is ClaimKind.MISMATCH

    backend.run(body)


# ---------------------------------------------------------------------- 6.8 rule 4: retention


def test_expired_completed_record_with_reject_policy(backend: Backend) -> None:
    k = K(scope())
    done = T0 + timedelta(hours=1)

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="r", now=done)
        await s.set_result(k, "inv-a", b"m", now=done)
        just_before = done + DAY - timedelta(microseconds=1)
        assert (await claim(s, k, D1, "inv-b", just_before)).kind is ClaimKind.COMPLETED
        for digest in (D1, D2):  # the policy, never a digest guess
            r = await claim(s, k, digest, "inv-c", done + DAY, REJECT)
            assert r.kind is ClaimKind.EXPIRED_REJECTED and r.record is not None and r.record.result is None
        stored = await s.get(k)
        assert stored is not None
        assert (stored.invocation_id, stored.state, stored.result) == ("inv-a", "completed", b"m")

    backend.run(body)


def test_expired_record_with_new_policy_is_replaced(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="r", now=T0)
        later = T0 + DAY
        r = await claim(s, k, D2, "inv-b", later, NEW)
        assert r.kind is ClaimKind.NEW and r.record is not None
        stored = await s.get(k)
        assert stored is not None
        assert (stored.digest, stored.invocation_id, stored.state, stored.outcome, stored.result) == (
            D2, "inv-b", "claimed", "", None,
        )  # fmt: skip
        assert stored.created_at == later and stored.expires_at == later + DAY
        with pytest.raises(IdempotencyError):
            await s.set_result(k, "inv-a", b"late", now=later)

    backend.run(body)


def test_claim_that_never_completed_expires_too(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")  # e.g. the sidecar died before the commit boundary answer
        assert (await claim(s, k, D1, "inv-b", T0 + DAY - timedelta(seconds=1))).kind is ClaimKind.IN_PROGRESS
        assert (await claim(s, k, D1, "inv-b", T0 + DAY, REJECT)).kind is ClaimKind.EXPIRED_REJECTED
        assert (await claim(s, k, D1, "inv-b", T0 + DAY, NEW)).kind is ClaimKind.NEW

    backend.run(body)


# ---------------------------------------------------------------------- owners and states


def test_only_the_owner_changes_a_record(backend: Backend) -> None:
    t = scope()
    k = K(t)

    async def body(s: IdempotencyStore) -> None:
        async def refused(reason: str, op: Awaitable[None]) -> None:
            with pytest.raises(IdempotencyError) as ei:
                await op
            assert ei.value.reason == reason

        await refused(
            "no_record", s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="", now=T0)
        )
        await refused("no_record", s.release(k, "inv-a", now=T0))
        await refused("no_record", s.set_result(k, "inv-a", b"x", now=T0))
        await claim(s, k, D1, "inv-a")
        await refused(
            "not_owner", s.complete(k, "inv-b", outcome="COMMITTED", external_resource_id="", now=T0)
        )
        await refused("not_owner", s.set_result(k, "inv-b", b"x", now=T0))
        await refused("not_owner", s.release(k, "inv-b", now=T0))
        assert (await claim(s, k, D1, "inv-b")).kind is ClaimKind.IN_PROGRESS

        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="e1", now=T0)
        # a repeat is a no-op (it does not move expires_at either)
        await s.complete(
            k, "inv-a", outcome="COMMITTED", external_resource_id="e1", now=T0 + timedelta(hours=1)
        )
        other_outcome = s.complete(
            k, "inv-a", outcome="FAILED_AFTER_COMMIT", external_resource_id="e1", now=T0
        )
        await refused("wrong_state", other_outcome)
        await refused("wrong_state", s.release(k, "inv-a", now=T0))  # past the commit boundary
        await s.set_result(k, "inv-a", b"one", now=T0)
        await s.set_result(k, "inv-a", b"one", now=T0)  # repeat
        await refused("result_already_set", s.set_result(k, "inv-a", b"two", now=T0))
        stored = await s.get(k)
        assert stored is not None and (stored.result, stored.expires_at) == (b"one", T0 + DAY)

        k2 = K(t, "k-2")
        await claim(s, k2, D1, "inv-x")
        await s.release(k2, "inv-x", now=T0)
        await s.release(k2, "inv-x", now=T0)  # repeat
        await refused(
            "wrong_state", s.complete(k2, "inv-x", outcome="COMMITTED", external_resource_id="", now=T0)
        )
        await refused("wrong_state", s.set_result(k2, "inv-x", b"x", now=T0))

    backend.run(body)


def test_scope_tool_and_version_separate_keys(backend: Backend) -> None:
    t = scope()
    base = K(t, "same-key")
    others = [
        K(t, "same-key", subject="bob"),
        K(scope(), "same-key"),
        K(t, "same-key", tool="calendar.delete"),
        K(t, "same-key", version="v2"),
        K(t, "other-key"),
    ]

    async def body(s: IdempotencyStore) -> None:
        assert (await claim(s, base, D1, "inv-0")).kind is ClaimKind.NEW
        await s.complete(base, "inv-0", outcome="COMMITTED", external_resource_id="", now=T0)
        for i, k in enumerate(others, 1):
            r = await claim(s, k, D2, f"inv-{i}")
            assert r.kind is ClaimKind.NEW, k
        stored = await s.get(base)
        assert stored is not None and (stored.invocation_id, stored.state) == ("inv-0", "completed")

    backend.run(body)


def test_records_survive_a_restart(backend: Backend) -> None:
    k = K(scope())
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value

    async def first(s: IdempotencyStore) -> None:
        await claim(s, k, D1, "inv-a")
        await s.complete(k, "inv-a", outcome="COMMITTED", external_resource_id="ext", now=T0)
        await s.set_result(k, "inv-a", payload, now=T0)

    async def second(s: IdempotencyStore) -> None:
        r = await claim(s, k, D1, "inv-b")
        assert r.kind is ClaimKind.COMPLETED and r.record is not None and r.record.result == payload

    backend.run(first)
    backend.run(second)


def test_inputs_are_checked(backend: Backend) -> None:
    k = K(scope())

    async def body(s: IdempotencyStore) -> None:
        with pytest.raises(ValueError):
            await s.claim(k, D1, "inv-a", now=datetime(2026, 7, 19), retention=DAY, expired_policy=REJECT)
        with pytest.raises(ValueError):
            await s.claim(k, D1, "inv-a", now=T0, retention=timedelta(0), expired_policy=REJECT)
        with pytest.raises(ValueError):
            await s.claim(k, "", "inv-a", now=T0, retention=DAY, expired_policy=REJECT)
        await claim(s, k, D1, "inv-a")
        with pytest.raises(ValueError):
            await s.complete(k, "inv-a", outcome="", external_resource_id="", now=T0)
        # other zones are the same instants
        shanghai = timezone(timedelta(hours=8))
        r = await s.claim(
            K(k.tenant, "k-tz"),
            D1,
            "inv-b",
            now=T0.astimezone(shanghai),
            retention=DAY,
            expired_policy=REJECT,
        )
        assert r.record is not None and r.record.created_at == T0 and r.record.created_at.tzinfo == UTC

    backend.run(body)
    with pytest.raises(ValueError):
        IdempotencyKey(tenant="acme", subject="alice", tool_name="t", tool_version="v1", key="")


def test_unreachable_backend_is_store_unavailable(backend: Backend, tmp_path: Path) -> None:
    async def body() -> None:
        if backend.kind == "sqlite":
            (tmp_path / "a-directory.db").mkdir()
            with pytest.raises(CallgateError) as ei:
                SQLiteIdempotencyStore(tmp_path / "a-directory.db")
        else:
            port = _closed_port()
            dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            store = PostgresIdempotencyStore(dsn, connect_timeout=1)
            with pytest.raises(CallgateError) as ei:
                await store.start()
            await store.close()
        assert ei.value.code is ErrorCode.STORE_UNAVAILABLE

    asyncio.run(body())


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------- concurrency


def test_concurrent_claims_in_one_process_exactly_one_new(backend: Backend) -> None:
    t = scope()

    async def body(s: IdempotencyStore) -> None:
        # a fresh key, a released key, an expired key under ExpiredPolicy.NEW: 20 claimers each
        fresh, rel, exp = K(t, "fresh"), K(t, "released"), K(t, "expired")
        await claim(s, rel, D1, "old")
        await s.release(rel, "old", now=T0)
        await claim(s, exp, D1, "old")
        at = T0 + 2 * DAY
        for k in (fresh, rel, exp):
            results = await asyncio.gather(*(claim(s, k, D1, f"inv-{i}", at, NEW) for i in range(20)))
            kinds = [r.kind for r in results]
            assert kinds.count(ClaimKind.NEW) == 1, (k.key, kinds)
            assert kinds.count(ClaimKind.IN_PROGRESS) == 19, (k.key, kinds)
            winner = f"inv-{kinds.index(ClaimKind.NEW)}"
            assert {r.record.invocation_id for r in results if r.record is not None} == {winner}
            stored = await s.get(k)
            assert stored is not None and stored.invocation_id == winner

    backend.run(body)


_WORKER = r"""
import asyncio, json, os, sys, time
from datetime import datetime, timedelta
from callgate.store.idempotency.base import ExpiredPolicy, IdempotencyKey

async def main():
    spec = json.loads(sys.argv[1])
    if spec["kind"] == "sqlite":
        from callgate.store.idempotency.sqlite import SQLiteIdempotencyStore
        store = SQLiteIdempotencyStore(spec["target"])
    else:
        from callgate.store.idempotency.postgres import PostgresIdempotencyStore
        store = PostgresIdempotencyStore(spec["target"], max_size=2)
    await store.start()
    open(spec["ready"], "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(spec["go"]):
        if time.monotonic() > deadline:
            sys.exit("no start signal")
        time.sleep(0.001)
    start = float(open(spec["go"]).read())
    now = datetime.fromisoformat(spec["now"])
    out = []
    for i, key in enumerate(spec["keys"]):
        slot = start + i * spec["slot"]
        while time.time() < slot:  # spin: both processes fire each claim at the same instant
            pass
        k = IdempotencyKey(tenant=spec["tenant"], subject="alice", tool_name="calendar.create",
                           tool_version="v1", key=key)
        r = await store.claim(k, spec["digest"], spec["name"] + ":" + key, now=now,
                              retention=timedelta(days=1), expired_policy=ExpiredPolicy.NEW)
        out.append([key, r.kind.value, r.record.invocation_id if r.record else ""])
    await store.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def test_two_processes_race_exactly_one_new_per_key(backend: Backend, tmp_path: Path) -> None:
    """Two separate Python processes (two sidecars sharing the backend) claim the same keys at
    the same moment: both wait for one wall-clock start time and fire claim i at start + i*5 ms
    (fresh keys, then released keys to take over)."""
    t = scope()
    fresh = [f"fresh-{i}" for i in range(20)]
    rel = [f"released-{i}" for i in range(10)]

    async def seed(s: IdempotencyStore) -> None:
        for key in rel:
            await claim(s, K(t, key), D2, "old")
            await s.release(K(t, key), "old", now=T0)

    backend.run(seed)
    go = tmp_path / "go"
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    for name in ("p1", "p2"):
        spec = {
            "kind": backend.kind, "target": backend.target, "tenant": t, "keys": fresh + rel,
            "digest": D1, "name": name, "now": T0.isoformat(), "ready": str(tmp_path / f"ready-{name}"),
            "go": str(go), "slot": 0.005,
        }  # fmt: skip
        procs.append((name, subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(spec)], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )))  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{n}").exists() for n, _ in procs):
            assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs]
            assert time.monotonic() < deadline, "workers did not get ready"
            time.sleep(0.005)
        tmp_go = tmp_path / "go.tmp"
        tmp_go.write_text(repr(time.time() + 0.1))
        tmp_go.rename(go)  # atomic: a worker never reads a half-written start time
        outputs: dict[str, list[list[str]]] = {}
        for name, p in procs:
            stdout, stderr = p.communicate(timeout=60)
            assert p.returncode == 0, stderr
            outputs[name] = json.loads(stdout)
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    wins = {"p1": 0, "p2": 0}
    for i, key in enumerate(fresh + rel):
        (k1, kind1, holder1), (k2, kind2, holder2) = outputs["p1"][i], outputs["p2"][i]
        assert k1 == k2 == key
        assert sorted([kind1, kind2]) == ["in_progress", "new"], (key, kind1, kind2)
        winner = "p1" if kind1 == "new" else "p2"
        wins[winner] += 1
        assert holder1 == holder2 == f"{winner}:{key}"

    async def check(s: IdempotencyStore) -> None:
        for key in fresh + rel:
            stored = await s.get(K(t, key))
            assert stored is not None and stored.state == "claimed" and stored.digest == D1
            assert stored.invocation_id.endswith(":" + key)

    backend.run(check)
    print(f"{backend.kind}: keys won p1={wins['p1']} p2={wins['p2']}")


def test_stored_times_read_back_exactly_and_malformed_ones_still_fail() -> None:
    """The SQLite key store reads its fixed-width UTC text by ``fromisoformat`` (a keyed Propose
    reads six): every value it writes reads back equal, in UTC, as ``strptime`` read it."""
    from datetime import UTC, datetime, timedelta, timezone

    from callgate.store.idempotency import sqlite as keys_sqlite

    start = datetime(2026, 7, 19, 6, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-7)))
    for step in range(0, 10**12, 37_123_456_789):  # ~11 days apart, odd microseconds
        t = start + timedelta(microseconds=step)
        text = keys_sqlite._ts(t)
        got = keys_sqlite._parse_ts(text)
        assert got == t and got.tzinfo is UTC and got.utcoffset() == timedelta(0)
        assert got == datetime.strptime(text, keys_sqlite._TS).replace(tzinfo=UTC)
    for bad in ("2026-07-19T06:00:00.12345xZ", "2026-07-19 06:00:00.123456Z", "2026-07-19T06:00:00Z", ""):
        with pytest.raises(ValueError):
            keys_sqlite._parse_ts(bad)
