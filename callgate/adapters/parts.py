"""A tool result in parts (text, images, files), through ``EncodeResult`` without flattening it.

An SDK's tool may answer with several parts (the OpenAI Agents SDK's ``ToolOutputText`` /
``ToolOutputImage`` / ``ToolOutputFileContent``). Serialized whole, an image would reach the model
as base64 text inside the untrusted-data markers. Instead, as the MCP gateway does with an
upstream's blocks (docs/RESULT-ENCODING.md, "Over MCP"), ``EncodeResult`` gets
``{"mcp_content": [...]}``: one descriptor per part, a text part as its text (recorded, redacted,
marked), any other part as its type, size and sha256 (recorded, never text). The answer is rebuilt
from the encoded message: text parts with the marked, redacted text, other parts as the tool gave
them, in order; anything else (an error, a truncated or withheld result, a replay whose parts are
gone) stays the encoded message's text.

Plain mappings only (``{"type": "text", "text": ...}`` and any other ``{"type": ...}``): each SDK
adapter converts its own part objects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

BLOCKS_KEY = "mcp_content"
"""The one member of the value ``EncodeResult`` gets for a result in parts (the MCP gateway's)."""


def _text(part: Mapping[str, Any]) -> str | None:
    text = part.get("text")
    return text if part.get("type") == "text" and isinstance(text, str) else None


def descriptor(part: Mapping[str, Any]) -> dict[str, Any]:
    """What ``EncodeResult`` records of one part: a text part's text; of any other its type, the
    size and sha256 of its canonical JSON (an image's data or URL is never text for the model)."""
    text = _text(part)
    if text is not None:
        return {"type": "text", "text": text}
    raw = json.dumps(part, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
    return {
        "type": str(part.get("type", "unknown")),
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def encoded_value(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The value ``EncodeResult`` gets for ``parts``."""
    return {BLOCKS_KEY: [descriptor(p) for p in parts]}


def rebuilt(
    message: str, parts: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """From the encoded tool message of ``parts``: the envelope (the content without ``data``)
    and the parts for the model (text parts with the encoded text, the others as given). None
    unless the message is a complete ``ok`` one with one encoded descriptor per part (then the
    caller answers with the message's text)."""
    try:
        content = json.loads(message)["content"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(content, dict) or content.get("status") != "ok" or content.get("truncated"):
        return None
    data = content.get("data")
    encoded = data.get(BLOCKS_KEY) if isinstance(data, dict) and len(data) == 1 else None
    if not isinstance(encoded, list) or len(encoded) != len(parts):
        return None
    out: list[dict[str, Any]] = []
    for part, enc in zip(parts, encoded, strict=True):
        if not isinstance(enc, dict):
            return None
        if _text(part) is not None:
            text = enc.get("text")
            if not isinstance(text, str):
                return None
            out.append({"type": "text", "text": text})
        else:  # its descriptor's strings are marked like any data: the part passes as given
            out.append(dict(part))
    envelope = {k: v for k, v in content.items() if k != "data"}
    return envelope, out


def answer_parts(message: str, parts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """What the model gets for ``parts`` (:func:`rebuilt`): callgate's envelope (the status, the
    markers' nonce) as the first text part, then the parts; None when :func:`rebuilt` is."""
    found = rebuilt(message, parts) if parts else None
    if found is None:
        return None
    envelope, shown = found
    head = {"type": "text", "text": json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))}
    return [head, *shown]


__all__ = ["BLOCKS_KEY", "answer_parts", "descriptor", "encoded_value", "rebuilt"]
