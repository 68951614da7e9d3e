"""Embedded Rego engine (regopy: Microsoft's rego-cpp), for pods that run no OPA server.

Policy files: ``<policy dir>/rego/`` (see :func:`callgate.policy.engines.rego_contract.load_rego_dir`): Rego v1
modules under ``package callgate...`` and ``data.json``. The contract (input document, decision
document at ``data.callgate.authz.decision``, reason codes) is the one of
:mod:`callgate.policy.engines.rego_contract`, shared with the OPA engine and equivalent to the Cedar engine's.

How it runs (field notes, docs/ENGINES.md):

* **compiled once**: the modules and data are compiled into a rego-cpp *bundle* with the decision
  path as its entrypoint (``Interpreter.build``); each call is ``set_input`` +
  ``query_bundle_entrypoint`` (~0.4 ms for the example policies; ``Interpreter.query`` would
  recompile every time, ~7 ms). The policies are compiled once at construction -- a broken set is a
  :class:`LoadError`, with ``file:line`` where rego-cpp gives one -- and the decision path must be
  defined for an empty input (a ``default`` decision: default deny).
* **one interpreter per thread**: an interpreter holds its input, so each thread has its own
  interpreter and its own bundle (``threading.local``), compiled on the thread's first call; no
  rego-cpp object is ever shared between threads.
* **strict built-in errors**: a built-in error (``to_number("x")``, a division by zero) fails the
  query instead of silently making a rule undefined -- an undefined ``forbid`` would otherwise be
  skipped, the Rego form of Cedar's erroring-forbid gotcha. It is a deny with
  ``policy_evaluation_error``.
* **shadow mode**: the config's shadow policy ids (``RegoPolicies.shadow``) go in every input
  document as ``input.shadow``, exactly as the OPA engine sends them, so both Rego engines
  evaluate the same input; ``data.callgate.shadow`` (``data.json``) is compiled in with the rest
  of the data. The decision document's ``shadow`` member becomes ``Decision.shadow_effect`` /
  ``shadow_policy_ids``.
* **off the event loop**: batches run on a small thread pool (rego-cpp is reached through
  ctypes, which releases the GIL), so the loop keeps serving while a policy evaluates;
  ``offload=False`` evaluates inline instead (see docs/ENGINES.md for the measured trade-off).

Fail closed: a request outside the contract's domain -> ``engine_error``; a query error ->
``policy_evaluation_error``; an undefined decision -> ``engine_undefined``; a document of the
wrong shape -> ``engine_malformed``; any exception -> ``engine_error``.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import regopy  # type: ignore[import-untyped, unused-ignore]

from callgate.base.errors import ErrorCode, LoadError, config_invalid, policy_invalid
from callgate.base.model import AuthzRequest, Decision
from callgate.policy.engines.base import NotCompiled, Readiness
from callgate.policy.engines.rego_contract import (
    DEFAULT_DECISION_PATH,
    ENGINE_MALFORMED,
    ENGINE_UNDEFINED,
    MalformedDecision,
    RegoPolicies,
    RequestError,
    build_input,
    decision_from_document,
    engine_fault,
    load_rego_dir,
    normalize_decision_path,
)

ENGINE_NAME = "rego"
DEFAULT_WORKERS = 2

# rego-cpp errors look like `(error 15:policies/x.rego|16|2 (errormsg 16:this is unclosed) ...`:
# length-prefixed file name, byte offset, length, then a length-prefixed message.
_REGO_ERROR = re.compile(r"\(error \d+:([^|\s]*)\|(\d+)\|\d+\s*\(errormsg \d+:([^)\n]*)")


class _Compiled:
    """One policy snapshot for rego-cpp: the sources and the entrypoint. Threads compile their
    own interpreter + bundle from it (rego-cpp objects never cross threads)."""

    __slots__ = ("policies", "entrypoint")

    def __init__(self, policies: RegoPolicies, entrypoint: str) -> None:
        self.policies = policies
        self.entrypoint = entrypoint

    def compile(self) -> tuple[Any, Any]:
        """A fresh (interpreter, bundle) pair. Raises regopy.RegoError."""
        interp = regopy.Interpreter()
        interp.log_level = regopy.LogLevel.NONE  # errors come back as RegoError, not on stdout
        for rel, text in self.policies.modules:
            interp.add_module(rel, text)
        interp.add_data_json(self.policies.data_text)
        bundle = interp.build(None, [self.entrypoint])
        if not bundle.ok():
            raise regopy.RegoError("the bundle did not build")
        interp.strict_built_in_errors = True
        return interp, bundle


def _load_error_from(exc: Exception, policies: RegoPolicies) -> LoadError:
    text = str(exc)
    m = _REGO_ERROR.search(text)
    if not m:
        return policy_invalid(f"rego-cpp: {text.strip()[:500]}", source=str(policies.directory))
    name, offset, msg = m.group(1), int(m.group(2)), m.group(3).strip()
    source = dict(policies.modules).get(name)
    line = source.encode()[:offset].count(b"\n") + 1 if source is not None else 0
    where = f"{policies.directory / name}:{line}" if line else str(policies.directory / name)
    return policy_invalid(f"rego-cpp: {msg}", source=where)


def compile_rego(policies: RegoPolicies, decision_path: str = DEFAULT_DECISION_PATH) -> _Compiled:
    """Compile once to check the policies and the decision path. Raises :class:`LoadError`."""
    try:
        entrypoint = normalize_decision_path(decision_path)
    except ValueError as exc:
        raise config_invalid(str(exc)) from None
    compiled = _Compiled(policies, entrypoint)
    try:
        interp, bundle = compiled.compile()
        interp.set_input(regopy.Input({}))
        out = interp.query_bundle_entrypoint(bundle, entrypoint)
    except Exception as exc:
        raise _load_error_from(exc, policies) from None
    if not out.ok() or not out.results or not out.results[0].expressions:
        raise policy_invalid(
            f"data.{entrypoint.replace('/', '.')} is undefined for an empty input: "
            "the policies need a `default` decision (default deny)",
            source=str(policies.directory),
        )
    return compiled


class RegoEngine(NotCompiled):
    """:class:`~callgate.policy.engines.base.Engine` over regopy (rego-cpp), compiled once, one
    interpreter per thread, strict built-in errors, fail closed."""

    def __init__(
        self,
        policies: RegoPolicies,
        *,
        decision_path: str = DEFAULT_DECISION_PATH,
        offload: bool = True,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        """Compiles the policies (raises :class:`LoadError`). ``offload`` runs batches on a pool of
        ``workers`` threads instead of on the caller's (event loop) thread."""
        self._c = compile_rego(policies, decision_path)
        self._local = threading.local()
        self._offload = offload
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    @classmethod
    def from_dir(cls, directory: Path, *, shadow: Sequence[str] = (), **kw: Any) -> RegoEngine:
        """Load ``directory`` (``<policy dir>/rego``) and compile it; ``shadow``: the config's
        shadow policy ids (``policy.shadow``). Raises :class:`LoadError`."""
        return cls(load_rego_dir(directory, shadow), **kw)

    @property
    def name(self) -> str:
        return ENGINE_NAME

    @property
    def revision(self) -> str:
        return self._c.policies.revision

    @property
    def policies(self) -> RegoPolicies:
        return self._c.policies

    # -- evaluation -------------------------------------------------------------------------
    def _state(self, c: _Compiled) -> tuple[Any, Any]:
        st = getattr(self._local, "state", None)
        if st is None or st[0] is not c:
            interp, bundle = c.compile()
            st = (c, interp, bundle)
            self._local.state = st
        return st[1], st[2]

    def _decide(self, c: _Compiled, req: AuthzRequest) -> Decision:
        try:
            doc_input = build_input(req, c.policies.shadow, c.policies.context_names)
        except RequestError as exc:
            return engine_fault(
                ENGINE_NAME, ErrorCode.ENGINE_ERROR.value, f"request outside the contract: {exc}"
            )
        try:
            interp, bundle = self._state(c)
            interp.set_input(regopy.Input(doc_input))
            out = interp.query_bundle_entrypoint(bundle, c.entrypoint)
            if not out.ok():
                return engine_fault(
                    ENGINE_NAME,
                    ErrorCode.POLICY_EVALUATION_ERROR.value,
                    "a rule failed to evaluate (built-in error)",
                )
            results = out.results
        except Exception:
            return engine_fault(
                ENGINE_NAME, ErrorCode.ENGINE_ERROR.value, "the Rego engine raised an exception"
            )
        if not results or not results[0].expressions:
            return engine_fault(ENGINE_NAME, ENGINE_UNDEFINED, "the decision is undefined")
        try:
            return decision_from_document(results[0].expressions[0], ENGINE_NAME)
        except MalformedDecision as exc:
            return engine_fault(ENGINE_NAME, ENGINE_MALFORMED, f"malformed decision document: {exc}")

    def authorize_batch_sync(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        """Decide a batch on the calling thread (one snapshot for the whole batch)."""
        c = self._c
        return [self._decide(c, r) for r in requests]

    async def authorize_batch(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        if not self._offload or self._closed or not requests:
            return self.authorize_batch_sync(requests)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="callgate-rego")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self.authorize_batch_sync, requests)
        except RuntimeError:  # executor shut down concurrently: decide inline, still correct
            return self.authorize_batch_sync(requests)

    async def ready(self) -> bool:
        return not self._closed

    async def readiness(self) -> Readiness:
        """Embedded: ready once compiled, until closed."""
        if self._closed:
            return Readiness(False, "engine closed")
        return Readiness(True, f"embedded Rego policies {self.revision}")

    async def load_policies(self) -> None:
        """Embedded: the policies are compiled in process already (no-op)."""
        return None

    async def close(self) -> None:
        self._closed = True
        ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=False)
