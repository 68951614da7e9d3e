"""Policy lifecycle: load, watch, reload atomically, gate readiness.

* The sidecar never serves traffic on half-loaded or broken policies: until the first good
  snapshot is loaded (and, for OPA, until the server answers with that snapshot's revision) the
  gate refuses every call with ``not_ready`` and gRPC health reports NOT_SERVING.
* A bad policy set at start does not crash the process: it stays up, NOT_SERVING, reports the
  error, and picks up the fixed files (a typical ConfigMap update) by itself.
* Reload (file change or SIGHUP) builds a complete new snapshot first, in a worker thread (the
  engines' long parse and validation calls release the GIL), and swaps it in with one reference
  assignment on the event loop: serving, health included, never waits for a load (issue 15). The
  watcher hashes the files in a worker thread too. One that fails to parse or
  validate is rejected, logged, reported on the health service ``callgate.v1.PolicySnapshot``
  (NOT_SERVING while the newest files are broken) and the last good snapshot keeps serving.
* Every snapshot that starts serving is recorded in the store (revision, engine, shadow policies),
  so a change of policy, including switching a policy from shadow to enforcing, is on record.
* Before a snapshot serves, its engine is given its policies (:meth:`Engine.load_policies`) when
  the engine's registration says the config asks for it (OPA with ``policy.opa_upload_policies``).

Expiring unconfirmed calls is not the watcher's job: :mod:`callgate.server.sweeper` runs it.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callgate.base.clock import Clock, rfc3339
from callgate.base.errors import LoadError
from callgate.policy.check import Finding, Severity, check_snapshot, errors, load_error_findings
from callgate.policy.engines.registry import ENGINES
from callgate.policy.serving import ServingSnapshot
from callgate.policy.snapshot import PolicySnapshot, load_snapshot_from_config
from callgate.store.base import Store

if TYPE_CHECKING:
    from callgate.config import Config

log = logging.getLogger("callgate.policy")

SNAPSHOT_HEALTH_SERVICE = "callgate.v1.PolicySnapshot"

LOAD_ATTEMPTS = 3
"""Loads of a set that changes while it loads, before the reload gives up (the watcher tries
again at its next tick)."""
MAX_ERRORS_SHOWN = 10
"""Problems kept in :attr:`PolicyLifecycle.last_error` (all of them are logged)."""

HealthSetter = Callable[[bool, bool], Awaitable[None]]
"""``(ready, latest_files_ok)`` -> update health statuses."""


def fingerprint(directory: Path) -> str:
    """Content digest of every file under ``directory`` (follows the symlinks a Kubernetes
    ConfigMap volume swaps atomically). Unreadable files count as their error."""
    h = hashlib.sha256()
    if not directory.exists():
        return "missing"
    for root, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".."))
        for name in sorted(files):
            path = Path(root) / name
            rel = path.relative_to(directory).as_posix()
            if rel.startswith("..") or "/.." in rel:
                continue
            h.update(rel.encode() + b"\x00")
            try:
                h.update(hashlib.sha256(path.read_bytes()).digest())
            except OSError as exc:
                h.update(f"error:{exc.errno}".encode())
    return h.hexdigest()


RELOAD_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while a load runs in its worker thread. At the default
5 ms, every time the event loop gives up the GIL (each await on I/O) it waits up to 5 ms to get
it back from the busy loader, several times per RPC; a short interval keeps a health check's
latency during a reload of 10,000 policies in the tens of milliseconds (docs/LIMITS.md)."""
_loads_running = 0
_saved_interval = 0.0
_gc_was_enabled = True


async def _off_the_loop(fn: Callable[[Config], PolicySnapshot], cfg: Config) -> PolicySnapshot:
    """Run a snapshot load in a worker thread with a short switch interval (restored when the
    last load running in the process ends)."""
    global _loads_running, _saved_interval, _gc_was_enabled
    if _loads_running == 0:
        _saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(_saved_interval, RELOAD_SWITCH_INTERVAL_S))
        # A load allocates ~100 objects per policy; the cyclic collector would walk them all
        # (tens of ms holding the GIL, in whichever thread triggers it). The load's objects are
        # freed by reference counting when it ends; collection resumes then.
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _loads_running += 1
    try:
        return await asyncio.to_thread(fn, cfg)
    finally:
        _loads_running -= 1
        if _loads_running == 0:
            sys.setswitchinterval(_saved_interval)
            if _gc_was_enabled:
                # What the load left alive (the new snapshot) joins the permanent generation, as
                # startup's objects do (``callgate serve``): with the collector paused it all sat
                # in generation 0, and the first collection after the load walked it on the
                # event loop (~100 ms for 10,000 policies, measured). The retired snapshot is
                # freed by reference counting either way.
                gc.freeze()
                gc.enable()


async def load_off_the_loop(cfg: Config) -> PolicySnapshot:
    """:func:`load_snapshot_from_config` in a worker thread (as a reload runs it): the event loop
    keeps answering meanwhile (``callgate mcp serve`` answers MCP clients while its embedded
    sidecar starts). Raises what the load raises."""
    return await _off_the_loop(load_snapshot_from_config, cfg)


RETRY_LOG_EVERY_S = 60.0
"""While no snapshot serves, the watcher retries the load every ``policy.watch_interval_ms``; the
same refusal is logged at ERROR again at most this often (a changed one at once)."""


@dataclass
class PolicyLifecycle:
    config: Config
    serving: ServingSnapshot
    """The snapshot every request reads: swapped here (its listeners, e.g. the compiled core,
    prepare each snapshot first), readiness set here."""
    store: Store
    clock: Clock
    set_health: HealthSetter
    on_reload: Callable[[bool], None] = lambda ok: None
    last_error: str = ""
    """The newest files' load error ("" when they are good)."""
    problems: tuple[Finding, ...] = ()
    """The newest files' problems, each with file, place and problem (``()`` when good);
    served by ``callgate.v1.PolicyStatus`` and printed by ``callgate status``."""
    refused_at: str = ""
    """When the newest files were refused (RFC 3339), "" when they are good."""
    ready: bool = False
    """The gate answers (a good snapshot is loaded and its engine is ready), as last computed."""
    _fingerprint: str = ""
    _task: asyncio.Task[None] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _retired: list[PolicySnapshot] = field(default_factory=list)
    _refused_revision: str = ""
    """A snapshot loaded before :meth:`start` that failed the checks: it never serves."""
    _sources: tuple[Any, Any] = (None, None)
    """``policy.reload_prove``: the Cedar texts serving and those of the set being loaded
    (:mod:`callgate.policy.prove.guard`)."""
    _logged: tuple[tuple[str, ...], float] = ((), float("-inf"))
    """The problems last logged at ERROR and when (monotonic): a retry that finds the same ones
    logs them at DEBUG, at ERROR again once :data:`RETRY_LOG_EVERY_S` has passed."""

    @property
    def policy_dir(self) -> Path:
        return self.config.path(self.config.policy.dir)

    def _uploads_policies(self) -> bool:
        """Whether the configured engine's policies are uploaded before a snapshot serves."""
        pc = self.config.policy
        return ENGINES.get(pc.engine).uploads_policies(pc)

    async def _activate(self, snap: PolicySnapshot) -> None:
        if self._uploads_policies():
            await snap.engine.load_policies()
        old = self.serving.current_or_none
        self.serving.swap(snap)
        if old is not None and old.engine is not snap.engine:
            self._retired.append(old)
            asyncio.get_running_loop().call_later(
                5.0, lambda: asyncio.ensure_future(self._close_retired(old))
            )
        await self._record(snap)

    async def _record(self, snap: PolicySnapshot) -> None:
        """Put the snapshot that starts serving on record (revision, engine, tools)."""
        await self.store.record_snapshot(
            snap.revision,
            rfc3339(self.clock.now()),
            {
                "engine": snap.engine.name,
                "engine_revision": snap.engine.revision,
                "tools": [t.spec.key for t in snap.tools],
            },
        )

    async def _close_retired(self, snap: PolicySnapshot) -> None:
        if snap in self._retired:
            self._retired.remove(snap)
            await snap.engine.close()

    async def _checked(self, snap: PolicySnapshot) -> list[Finding]:
        """The snapshot checks' errors (``policy.reload_checks``); a check that raises is an
        error too (fail closed)."""
        if not self.config.policy.reload_checks:
            return []
        try:
            return errors(await check_snapshot(self.config, snap))
        except LoadError as exc:
            return load_error_findings(exc)
        except Exception as exc:  # any failure of the checks refuses the set (fail closed)
            log.exception("snapshot checks failed")
            return [Finding(Severity.ERROR, str(self.policy_dir), f"the snapshot checks failed: {exc!r}")]

    async def _proved(self) -> list[Finding]:
        """``policy.reload_prove``: the guard properties against the serving set (fail closed)."""
        if not self.config.policy.reload_prove:
            return []
        from callgate.policy.prove.guard import guard_findings, serving_source

        try:
            new = await asyncio.to_thread(serving_source, self.config)
            self._sources = (self._sources[0], new)
            return await asyncio.to_thread(guard_findings, self.config, new, self._sources[0])
        except LoadError as exc:
            return load_error_findings(exc)
        except Exception as exc:  # the guard failing refuses the set (fail closed)
            log.exception("the reload guard failed")
            return [Finding(Severity.ERROR, str(self.policy_dir), f"the reload guard failed: {exc!r}")]

    async def _refuse(self, reason: str, current: PolicySnapshot | None, problems: list[Finding]) -> bool:
        """Log a refused set (each problem: file, place, problem) and keep what serves."""
        self.problems = tuple(problems)
        self.refused_at = rfc3339(self.clock.now())
        self.last_error = "; ".join(f.render() for f in problems[:MAX_ERRORS_SHOWN])
        if len(problems) > MAX_ERRORS_SHOWN:
            self.last_error += f"; ... ({len(problems) - MAX_ERRORS_SHOWN} more)"
        rendered, now = tuple(f.render() for f in problems), time.monotonic()
        again = (
            reason == "retry" and rendered == self._logged[0] and now - self._logged[1] < RETRY_LOG_EVERY_S
        )
        if not again:
            self._logged = (rendered, now)
        level = logging.DEBUG if again else logging.ERROR  # NOT_READY retries: say it once
        for line in rendered:
            log.log(level, "policy load (%s) refused: %s", reason, line)
        if current is not None and self._refused_revision != current.revision:
            log.warning(
                "policy load (%s) refused; serving revision %s kept (restored: the refused set never served)",
                reason,
                current.revision,
            )
        else:
            log.log(level, "policy load (%s) refused; not ready (no good snapshot yet)", reason)
        self.on_reload(False)
        await self.refresh_health()
        return False

    async def reload(self, reason: str = "signal") -> bool:
        """Load the files now; swap on success, keep the old snapshot on failure. The set is
        loaded atomically: the files must not change while they load (else it is loaded again,
        at most :data:`LOAD_ATTEMPTS` times) and it must pass the snapshot checks."""
        async with self._lock:
            current = self.serving.current_or_none
            for _attempt in range(LOAD_ATTEMPTS):
                before = await asyncio.to_thread(fingerprint, self.policy_dir)
                self._fingerprint = before
                try:
                    snap = await _off_the_loop(load_snapshot_from_config, self.config)
                except LoadError as exc:
                    return await self._refuse(reason, current, load_error_findings(exc))
                problems = await self._checked(snap)
                problems = problems or await self._proved()
                if await asyncio.to_thread(fingerprint, self.policy_dir) == before:
                    break
                await snap.engine.close()
                log.warning("policy load (%s): files changed while loading; loading the set again", reason)
                await asyncio.sleep(self.config.policy.reload_quiet_ms / 1000)
            else:
                return await self._refuse(
                    reason,
                    current,
                    [Finding(Severity.ERROR, str(self.policy_dir), "the files kept changing while loading")],
                )
            if problems:
                await snap.engine.close()
                return await self._refuse(reason, current, problems)
            self.last_error, self.problems, self.refused_at = "", (), ""
            never_served, self._refused_revision = self._refused_revision, ""
            if current is not None and snap.revision == current.revision and not never_served:
                await snap.engine.close()
                await self.refresh_health()
                return True
            await self._activate(snap)
            self._sources = (self._sources[1], None)
            log.info("policy snapshot %s serving (%s, engine %s)", snap.revision, reason, snap.engine.name)
            self.on_reload(True)
            await self.refresh_health()
            return True

    async def refresh_health(self) -> None:
        snap = self.serving.current_or_none
        ready = snap is not None and snap.revision != self._refused_revision and await snap.engine.ready()
        self.ready = ready
        self.serving.set_ready(ready)
        await self.set_health(ready, not self.last_error)

    async def _settle(self, seen: str) -> None:
        """Debounce: wait until the directory has not changed for ``policy.reload_quiet_ms``
        (bounded: at most 20 quiet intervals), so a multi-file edit is loaded as one set."""
        quiet = self.config.policy.reload_quiet_ms / 1000
        for _ in range(20):
            if quiet <= 0:
                return
            await asyncio.sleep(quiet)
            now = await asyncio.to_thread(fingerprint, self.policy_dir)
            if now == seen:
                return
            seen = now

    async def _watch(self) -> None:
        interval = max(0.05, self.config.policy.watch_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            try:
                seen = await asyncio.to_thread(fingerprint, self.policy_dir)
                if self.config.policy.watch and seen != self._fingerprint:
                    await self._settle(seen)
                    await self.reload("file change")
                elif self.serving.current_or_none is None:
                    await self.reload("retry")
                else:
                    await self.refresh_health()  # e.g. OPA came up, or went away
            except Exception:
                log.exception("policy watcher error")

    async def start(self) -> None:
        if self.serving.current_or_none is None:
            await self.reload("start")
        else:
            self._fingerprint = await asyncio.to_thread(fingerprint, self.policy_dir)
            snap = self.serving.current_or_none
            assert snap is not None
            problems = await self._checked(snap)
            if problems:
                self._refused_revision = snap.revision
                await self._refuse("start", None, problems)
                self._task = asyncio.ensure_future(self._watch())
                return
            await self._proved()  # the serving texts, for the reload guard
            self._sources = (self._sources[1], None)
            if self._uploads_policies():
                try:
                    await snap.engine.load_policies()
                except Exception as exc:
                    log.error("uploading policies to the %s engine failed: %s", snap.engine.name, exc)
            await self._record(snap)
            await self.refresh_health()
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for snap in list(self._retired):
            await self._close_retired(snap)
