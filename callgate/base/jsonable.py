"""Records as JSON values: dataclasses as objects, bytes as ``{"utf8", "base64", "length"}``.

Shared by ``callgate explain --json`` and the retention export (callgate/store/retention.py), so an
exported record reads exactly like the explain answer it came from.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any


def bytes_json(data: bytes) -> dict[str, Any]:
    """``{"utf8": text or null, "base64": ..., "length": n}``."""
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"utf8": text, "base64": base64.b64encode(data).decode("ascii"), "length": len(data)}


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses, mappings, sequences and bytes made JSON-ready (enums that are
    ``str`` subclasses pass as their value)."""
    if isinstance(value, bytes):
        return bytes_json(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


__all__ = ["bytes_json", "jsonable"]
