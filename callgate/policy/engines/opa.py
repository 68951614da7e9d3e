"""OPA engine: decisions from a real OPA server over its REST Data API, with opa-python-client's
async client (``opa_client.AsyncOpaClient``, aiohttp), so the sidecar's event loop stays free.

The server is the OPA container in the same pod (``http://127.0.0.1:8181``, the default) or any
configured URL. It serves the Rego policies of ``<policy dir>/rego/`` (the same files the embedded
Rego engine compiles; see :mod:`callgate.policy.engines.rego_contract` for the contract): started with them
(``opa run --server --ignore '*_test.rego' policies/rego``), fed by a bundle, or given them by
:meth:`OpaEngine.load_policies`.

One decision is one ``POST /v1/data/<decision path>?strict-builtin-errors=true`` with
``{"input": <input document>}``, bounded by ``timeout`` (default 250 ms) and never retried: a slow
or absent policy server must fail closed fast, not hold the call. Faults are denies:

=============================================  ===========================
what happens                                   decision (``error_code``)
=============================================  ===========================
no answer within ``timeout``                   ``engine_timeout``
connection refused/reset, HTTP 502/503/504...  ``engine_unavailable``
HTTP 500 (OPA could not evaluate: built-in
error under strict mode, conflicting outputs)  ``policy_evaluation_error``
other HTTP 4xx/5xx                             ``engine_error``
``{}``: the decision is undefined              ``engine_undefined``
a document not of the contract's shape         ``engine_malformed``
a request outside the contract's domain        ``engine_error`` (never sent)
=============================================  ===========================

Readiness (``ready()``) is true only when the server answers ``/health`` **and** serves the
expected policy revision: every non-test module it holds under ``package callgate...`` is, byte
for byte, one of the engine's modules and vice versa (compared by sha256 of the text, so module
ids and mount paths do not matter), and the base documents under ``data.callgate`` equal
``data.json`` (and ``data.callgate.shadow`` is undefined or empty when ``data.json`` has none).
The engine's :attr:`revision` is the sha256 of those same files (plus the config's shadow ids, if
any), so a sidecar never reports ready against an OPA that still serves an older (or newer)
policy set.

Shadow mode: ``data.callgate.shadow`` is part of ``data.json`` (served by OPA, checked by
readiness); the config's ``policy.shadow`` ids are sent in every request as ``input.shadow``, so
they need nothing from the server and an OPA serving exactly the policy files stays ready.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient  # type: ignore[import-untyped, unused-ignore]
from opa_client.errors import PolicyNotFoundError  # type: ignore[import-untyped, unused-ignore]

from callgate.base.errors import ErrorCode
from callgate.base.model import AuthzRequest, Decision
from callgate.policy.engines.base import NotCompiled, Readiness
from callgate.policy.engines.rego_contract import (
    DEFAULT_DECISION_PATH,
    ENGINE_MALFORMED,
    ENGINE_TIMEOUT,
    ENGINE_UNAVAILABLE,
    ENGINE_UNDEFINED,
    PACKAGE_ROOT,
    SHADOW_KEY,
    TEST_SUFFIX,
    MalformedDecision,
    RegoPolicies,
    RequestError,
    build_input,
    decision_from_document,
    engine_fault,
    load_rego_dir,
    module_digests,
    normalize_decision_path,
)

ENGINE_NAME = "opa"
DEFAULT_URL = "http://127.0.0.1:8181"
DEFAULT_TIMEOUT = 0.25
"""Seconds a decision may take (connect + evaluate + answer) before it is an ``engine_timeout``."""
DEFAULT_ADMIN_TIMEOUT = 2.0
"""Seconds for readiness checks and policy uploads."""
_DECISION_PARAMS = {"strict-builtin-errors": "true"}


def parse_url(url: str) -> tuple[str, int, bool]:
    """``http[s]://host[:port]`` -> (host, port, https). Raises ValueError (the client always
    talks to ``<url>/v1/...``, so a path prefix cannot be honoured)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"OPA URL '{url}' must be http://host:port or https://host:port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"OPA URL '{url}' must not have a path, query or fragment")
    port = parts.port or (443 if parts.scheme == "https" else 8181)
    return parts.hostname, port, parts.scheme == "https"


def _package_of(module: Mapping[str, Any]) -> tuple[str, ...]:
    path = module.get("ast", {}).get("package", {}).get("path", [])
    return tuple(str(t.get("value", "")) for t in path if isinstance(t, dict))[1:]  # drop "data"


class OpaEngine(NotCompiled):
    """:class:`~callgate.policy.engines.base.Engine` over an OPA server (async, fail closed)."""

    def __init__(
        self,
        policies: RegoPolicies,
        *,
        url: str = DEFAULT_URL,
        decision_path: str = DEFAULT_DECISION_PATH,
        timeout: float = DEFAULT_TIMEOUT,
        admin_timeout: float = DEFAULT_ADMIN_TIMEOUT,
        token: str | None = None,
    ) -> None:
        """``policies``: the Rego directory the server is expected to serve (its revision is the
        engine's). ``url``: loopback OPA in the same pod by default. ``timeout``: per decision,
        no retries. ``token``: bearer token if the server requires one. Raises ValueError on a
        bad URL or decision path."""
        if timeout <= 0 or admin_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self._p = policies
        self._host, self._port, self._https = parse_url(url)
        self.url = url
        self._path = normalize_decision_path(decision_path)
        self._timeout = timeout
        self._admin_timeout = admin_timeout
        self._token = token
        self._clients: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @classmethod
    def from_dir(cls, directory: Path, *, shadow: Sequence[str] = (), **kw: Any) -> OpaEngine:
        """Engine for the Rego policies in ``directory``; ``shadow``: the config's shadow policy
        ids (``policy.shadow``, sent as ``input.shadow``). Raises LoadError / ValueError."""
        return cls(load_rego_dir(directory, shadow), **kw)

    @property
    def name(self) -> str:
        return ENGINE_NAME

    @property
    def revision(self) -> str:
        return self._p.revision

    @property
    def policies(self) -> RegoPolicies:
        return self._p

    @property
    def decision_path(self) -> str:
        return self._path

    # -- clients ----------------------------------------------------------------------------
    async def _client(self, kind: str) -> Any:
        """The aiohttp-backed client for ``decide`` or ``admin``, created on the running loop
        (a session belongs to one loop; a new loop gets new sessions)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._clients = {}
            self._loop = loop
        client = self._clients.get(kind)
        if client is None:
            client = AsyncOpaClient(
                host=self._host,
                port=self._port,
                ssl=self._https,
                token=self._token,
                retries=0,
                timeout=self._timeout if kind == "decide" else self._admin_timeout,
            )
            await client.__aenter__()  # opens the aiohttp session; closed in close()
            self._clients[kind] = client
        return client

    async def close(self) -> None:
        self._closed = True
        clients, self._clients = self._clients, {}
        if self._loop is asyncio.get_running_loop():
            for c in clients.values():
                try:
                    await c.close_connection()
                except Exception:
                    pass

    # -- decisions --------------------------------------------------------------------------
    async def _query(self, doc_input: dict[str, Any]) -> Any:
        client = await self._client("decide")
        package, _, rule = self._path.rpartition("/")
        return await client.query_rule(doc_input, package, rule, query_params=_DECISION_PARAMS)

    async def _decide(self, req: AuthzRequest) -> Decision:
        try:
            doc_input = build_input(req, self._p.shadow, self._p.context_names)
        except RequestError as exc:
            return engine_fault(
                ENGINE_NAME, ErrorCode.ENGINE_ERROR.value, f"request outside the contract: {exc}"
            )
        try:
            body = await asyncio.wait_for(self._query(doc_input), self._timeout)
        except TimeoutError:  # asyncio.TimeoutError and aiohttp's timeouts are TimeoutErrors
            return engine_fault(
                ENGINE_NAME, ENGINE_TIMEOUT, f"OPA did not answer within {self._timeout * 1000:.0f} ms"
            )
        except (aiohttp.ContentTypeError, json.JSONDecodeError):  # ContentTypeError first: a subclass
            return engine_fault(ENGINE_NAME, ENGINE_MALFORMED, "OPA answered with a body that is not JSON")
        except aiohttp.ClientResponseError as exc:
            return self._http_fault(exc.status)
        except (aiohttp.ClientConnectionError, OSError):
            return engine_fault(ENGINE_NAME, ENGINE_UNAVAILABLE, "OPA is unreachable")
        except Exception:
            return engine_fault(
                ENGINE_NAME, ErrorCode.ENGINE_ERROR.value, "the OPA engine raised an exception"
            )
        if not isinstance(body, dict):
            return engine_fault(
                ENGINE_NAME, ENGINE_MALFORMED, "OPA answered with a body that is not an object"
            )
        if "result" not in body:
            return engine_fault(
                ENGINE_NAME, ENGINE_UNDEFINED, f"data.{self._path.replace('/', '.')} is undefined"
            )
        try:
            return decision_from_document(body["result"], ENGINE_NAME)
        except MalformedDecision as exc:
            return engine_fault(ENGINE_NAME, ENGINE_MALFORMED, f"malformed decision document: {exc}")

    @staticmethod
    def _http_fault(status: int) -> Decision:
        if status == 500:
            return engine_fault(
                ENGINE_NAME,
                ErrorCode.POLICY_EVALUATION_ERROR.value,
                "OPA could not evaluate the policy (HTTP 500)",
            )
        if status in (502, 503, 504):
            return engine_fault(ENGINE_NAME, ENGINE_UNAVAILABLE, f"OPA is unavailable (HTTP {status})")
        return engine_fault(
            ENGINE_NAME, ErrorCode.ENGINE_ERROR.value, f"OPA refused the query (HTTP {status})"
        )

    async def authorize_batch(self, requests: Sequence[AuthzRequest]) -> list[Decision]:
        """Decide the requests concurrently (one POST each, each bounded by ``timeout``)."""
        if not requests:
            return []
        return list(await asyncio.gather(*(self._decide(r) for r in requests)))

    # -- readiness and policy upload ---------------------------------------------------------
    async def readiness(self) -> Readiness:
        """(ready, why not). Never raises."""
        if self._closed:
            return Readiness(False, "engine closed")
        try:
            ok, why = await asyncio.wait_for(self._readiness(), self._admin_timeout * 2)
        except TimeoutError:
            return Readiness(False, "OPA did not answer the readiness checks in time")
        except Exception as exc:
            return Readiness(False, f"OPA readiness check failed: {type(exc).__name__}")
        return Readiness(ok, why)

    async def _readiness(self) -> tuple[bool, str]:
        client = await self._client("admin")
        if not await client.check_health():
            return False, "OPA does not answer /health"
        served: list[str] = []
        for pid in await client.get_policies_list():
            if str(pid).endswith(TEST_SUFFIX):
                continue
            body = await client.get_policy(str(pid).lstrip("/"))
            module = body.get("result", {}) if isinstance(body, dict) else {}
            pkg = _package_of(module)
            if pkg[:1] == (PACKAGE_ROOT,):
                served.append(str(module.get("raw", "")))
        expected = module_digests([text for _, text in self._p.modules])
        got = module_digests(served)
        if got != expected:
            return False, (
                f"OPA serves another policy revision: {len(got - expected)} unexpected and "
                f"{len(expected - got)} missing module(s) under package {PACKAGE_ROOT}"
            )
        base: Mapping[str, Any] = self._p.data.get(PACKAGE_ROOT, {})
        for key, want in base.items():
            try:
                body = await client.get_data(f"{PACKAGE_ROOT}/{key}")
            except Exception:
                return False, f"OPA has no data.{PACKAGE_ROOT}.{key}"
            if body.get("result") != want:
                return False, f"OPA serves other data at data.{PACKAGE_ROOT}.{key}"
        if SHADOW_KEY not in base:
            # data.json has no shadow ids: OPA must have none either (stale ids left by an older
            # upload would silently stop enforcing those policies)
            try:
                body = await client.get_data(f"{PACKAGE_ROOT}/{SHADOW_KEY}")
            except PolicyNotFoundError:
                body = {}
            if body.get("result", []) != []:
                return False, f"OPA serves other data at data.{PACKAGE_ROOT}.{SHADOW_KEY}"
        return True, f"OPA serves {self._p.revision}"

    async def ready(self) -> bool:
        ok, _ = await self.readiness()
        return ok

    async def load_policies(self) -> None:
        """Upload the engine's modules (``PUT /v1/policies/callgate/<path>``) and base document
        (``PUT /v1/data/callgate``, replacing what was there) to the server, for an OPA started
        without them.
        Modules of an older upload that no longer exist are deleted. Raises on failure.

        OPA compiles each PUT against the modules it already has, so a module that uses rules of
        a module not uploaded yet is refused: uploads (and deletions) are retried until a pass
        makes no progress. Modules that depend on each other in a cycle cannot be uploaded one
        at a time; serve such a set from files or a bundle instead."""
        client = await self._client("admin")
        # the whole base document in one PUT: keys an older upload had and data.json no longer
        # has (stale shadow ids, say) do not survive, and non-object values (the shadow id
        # array) need no per-key upload
        await client.update_or_create_data(dict(self._p.data.get(PACKAGE_ROOT, {})), PACKAGE_ROOT)
        puts = {f"{PACKAGE_ROOT}/{rel}": text for rel, text in self._p.modules}
        deletes = {
            str(pid)
            for pid in await client.get_policies_list()
            if str(pid).startswith(f"{PACKAGE_ROOT}/") and pid not in puts
        }
        last: Exception | None = None
        while puts or deletes:
            progress = False
            for pid in sorted(deletes):
                try:
                    await client.delete_policy(pid)
                except Exception as exc:
                    last = exc
                else:
                    deletes.discard(pid)
                    progress = True
            for pid, text in sorted(puts.items()):
                try:
                    await client.update_policy_from_string(text, pid, rego_compat=False)
                except Exception as exc:
                    last = exc
                else:
                    del puts[pid]
                    progress = True
            if not progress:
                assert last is not None
                raise last
