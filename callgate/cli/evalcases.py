"""Proposal case files shared by ``callgate eval`` and the test suite.

A case is a JSON object::

    {"name": "...", "subject": {"tenant": "acme", "id": "alice"}, "timezone": "Asia/Shanghai",
     "reference_clock": "2026-07-19T14:00:00+08:00", "tool": "weather.get@v1",
     "arguments": {...} | "arguments_raw": "<exact bytes as a string>", "idempotency_key": "...",
     "expect": "allow" | {"state": ..., "effect": ..., "code": ..., "pointer": ...,
                          "policy_ids": [...], "reason": ..., "normalized": {...}}}

Every key of ``expect`` is optional; a string ``expect`` is the wanted effect (or final state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def case_arguments(case: Mapping[str, Any]) -> bytes:
    import json

    if "arguments_raw" in case:
        return str(case["arguments_raw"]).encode("utf-8")
    return json.dumps(case.get("arguments", {}), ensure_ascii=False).encode("utf-8")


def mismatches(result: Mapping[str, Any], expect: Any) -> list[str]:
    """Compare an eval result (see ``callgate eval`` output) with a case's ``expect``."""
    decision = result.get("decision") or {}
    rejection = result.get("rejection") or {}
    if isinstance(expect, str):
        got = decision.get("effect") or result.get("state")
        return [] if got == expect else [f"wanted {expect}, got {got}"]
    out: list[str] = []

    def want(label: str, wanted: Any, got: Any) -> None:
        if wanted != got:
            out.append(f"{label}: wanted {wanted!r}, got {got!r}")

    if "state" in expect:
        want("state", expect["state"], result.get("state"))
    if "effect" in expect:
        want("effect", expect["effect"], decision.get("effect"))
    if "code" in expect:
        want("code", expect["code"], rejection.get("code") or decision.get("error_code") or None)
    if "pointer" in expect:
        pointers = [v.get("pointer") for v in rejection.get("violations", [])]
        if expect["pointer"] not in pointers:
            out.append(f"pointer: wanted {expect['pointer']!r} among {pointers!r}")
    if "policy_ids" in expect:
        want("policy_ids", list(expect["policy_ids"]), list(decision.get("policy_ids", [])))
    if "reason" in expect:
        codes = [r.get("code") for r in decision.get("reasons", [])]
        if expect["reason"] not in codes:
            out.append(f"reason: wanted {expect['reason']!r} among {codes!r}")
    if "normalized" in expect:
        want("normalized", expect["normalized"], result.get("normalized_arguments"))
    return out
