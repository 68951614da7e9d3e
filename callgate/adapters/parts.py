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

No secret reaches the model in any part (spec 6.10): the strings of a non-text part (a URL, a
file name, a file id) go to ``EncodeResult`` too, and a part whose string the sidecar's redactor
changed is withheld; every string of every part, its base64 data included, is also checked for
the values redeemed for the call and its credential (:func:`watched` records them) with the MCP
gateway's own check (:func:`callgate.client.resultforms.holds_secret`): such a part becomes a
``callgate_withheld`` text part, as in the gateway. A configured secret the tool never redeemed
is known to the sidecar only (it never sends one to a client): :func:`committed` sends each
non-text part's canonical JSON (what its descriptor's size and sha256 cover) with
``EncodeResult`` (``parts``, checked by :mod:`callgate.execute.partcheck`, never stored), and
a part is shown only when the sidecar answered ``PART_CLEAN`` for it; any other verdict, none
(an older sidecar), or a part past :data:`MAX_CHECKED_BYTES` that was not sent: withheld.

Plain mappings only (``{"type": "text", "text": ...}`` and any other ``{"type": ...}``): each SDK
adapter converts its own part objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from callgate.client import Committed, ToolContext
from callgate.client.executor import dumps
from callgate.client.resultforms import holds_secret, unmarked_data, withheld_note
from callgate.gen.v1 import callgate_pb2 as pb

BLOCKS_KEY = "mcp_content"
"""The one member of the value ``EncodeResult`` gets for a result in parts (the MCP gateway's)."""

BINARY_KEYS = frozenset({"data", "base64", "file_data"})
"""Members of a part that hold its bytes (also any ``data:`` URL): recorded as size and sha256."""

MAX_CHECKED_BYTES = 3 * 1024 * 1024
"""Most bytes of one ``EncodeResult`` of a result in parts: the value's JSON (descriptors, text
parts) and the parts sent for the sidecar's secret check, under gRPC's default 4 MiB message
limit. Non-text parts are sent in order while they fit; a part that does not is withheld
unchecked (fail closed)."""

UNCHECKED = "it could not be checked for secrets"
"""The withheld note's reason for a part without a ``PART_CLEAN`` verdict."""


def _text(part: Mapping[str, Any]) -> str | None:
    text = part.get("text")
    return text if part.get("type") == "text" and isinstance(text, str) else None


def _binary(value: str) -> bool:
    return value.startswith("data:")


def _strings(part: Mapping[str, Any]) -> dict[str, str]:
    """Every string of a non-text part that is not its bytes (URL, name, id, nested ones too),
    by its JSON Pointer."""
    out: dict[str, str] = {}

    def walk(value: Any, at: str, key: str) -> None:
        if isinstance(value, str):
            if key not in BINARY_KEYS and not _binary(value):
                out[at] = value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{at}/{str(k).replace('~', '~0').replace('/', '~1')}", str(k))
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{at}/{i}", key)

    walk(part, "", "")
    return out


def descriptor(part: Mapping[str, Any]) -> dict[str, Any]:
    """What ``EncodeResult`` records of one part: a text part's text; of any other its type, the
    size and sha256 of its canonical JSON (an image's data is never text for the model) and its
    other strings under ``strings`` (redacted and marked like any result string)."""
    text = _text(part)
    if text is not None:
        return {"type": "text", "text": text}
    return _binary_descriptor(part, canonical(part))


def canonical(part: Mapping[str, Any]) -> bytes:
    """A part's canonical JSON: what its descriptor's size and sha256 cover, and what the
    sidecar's secret check reads."""
    return json.dumps(part, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def _binary_descriptor(part: Mapping[str, Any], raw: bytes) -> dict[str, Any]:
    return {
        "type": str(part.get("type", "unknown")),
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "strings": _strings(part),
    }


def encoded_value(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The value ``EncodeResult`` gets for ``parts``."""
    return {BLOCKS_KEY: [descriptor(p) for p in parts]}


def committed(parts: Sequence[Mapping[str, Any]], external_resource_id: str = "") -> Committed:
    """The :class:`Committed` of a result in parts: the value (:func:`encoded_value`) and each
    non-text part's canonical JSON for the sidecar's secret check, in order while they and the
    value's JSON stay within :data:`MAX_CHECKED_BYTES` (a part that does not fit is not sent,
    hence withheld)."""
    blocks: list[dict[str, Any]] = []
    raws: list[tuple[int, bytes]] = []
    for i, part in enumerate(parts):
        text = _text(part)
        if text is not None:
            blocks.append({"type": "text", "text": text})
            continue
        raw = canonical(part)
        blocks.append(_binary_descriptor(part, raw))
        raws.append((i, raw))
    value = {BLOCKS_KEY: blocks}
    room = MAX_CHECKED_BYTES - len(dumps(value))  # the request carries both
    sent: list[tuple[int, bytes]] = []
    for i, raw in raws:
        if len(raw) <= room:
            sent.append((i, raw))
            room -= len(raw)
    return Committed(value, external_resource_id, parts=tuple(sent))


def watched(ctx: ToolContext, seen: list[str | bytes]) -> ToolContext:
    """``ctx`` whose ``redeem`` records each value it returns (sync or awaitable) in ``seen``,
    with the attempt's credential: what :func:`answer_parts` checks every part for."""
    if ctx.credential:
        seen.append(ctx.credential)
    redeem = ctx.redeem

    async def later(pending: Awaitable[Any]) -> Any:
        value = await pending
        _record(value, seen)
        return value

    def recording(name: str) -> Any:
        value = redeem(name)
        if inspect.isawaitable(value):
            return later(value)
        _record(value, seen)
        return value

    return dataclasses.replace(ctx, redeem=recording)


def _record(value: Any, seen: list[str | bytes]) -> None:
    if isinstance(value, str | bytes) and value:
        seen.append(value)


def _all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (*_all_strings(k), *_all_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _all_strings(v)]
    return []


def _shown(
    part: Mapping[str, Any], enc: Any, plain: Any, secrets: Sequence[str | bytes], verdict: int | None
) -> dict[str, Any] | None:
    """Part ``i`` for the model from its encoded descriptor ``enc`` (marked) and ``plain`` (the
    same without the marks); a withheld note when a secret is in it or, for a non-text part, the
    sidecar's ``verdict`` is not ``PART_CLEAN``; None when ``enc`` does not fit the part."""
    if not isinstance(enc, dict):
        return None
    kind = str(part.get("type", "unknown"))
    if _text(part) is not None:
        text = enc.get("text")
        if not isinstance(text, str):
            return None
        if holds_secret(text, secrets):
            return {"type": "text", "text": withheld_note(kind)}
        return {"type": "text", "text": text}
    strings = plain.get("strings") if isinstance(plain, dict) else None
    # a string the sidecar's redactor changed (a configured secret or pattern in a URL or a
    # name) or a redeemed value anywhere in the part: the part is withheld
    if strings != _strings(part) or any(holds_secret(s, secrets) for s in _all_strings(part)):
        return {"type": "text", "text": withheld_note(kind)}
    if verdict == pb.PART_HOLDS_SECRET:  # a configured secret in its bytes (the sidecar's check)
        return {"type": "text", "text": withheld_note(kind)}
    if verdict != pb.PART_CLEAN:  # not sent (too large), not answered (an older sidecar): closed
        return {"type": "text", "text": withheld_note(kind, UNCHECKED)}
    return dict(part)


def _ok_blocks(message: str) -> tuple[dict[str, Any], Any] | None:
    """The content of a complete ``ok`` encoded tool message and its encoded part descriptors
    (``data``'s one :data:`BLOCKS_KEY` member, None when ``data`` is anything else); None for any
    other message."""
    try:
        content = json.loads(message)["content"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(content, dict) or content.get("status") != "ok" or content.get("truncated"):
        return None
    data = content.get("data")
    return content, data.get(BLOCKS_KEY) if isinstance(data, dict) and len(data) == 1 else None


def rebuilt(
    message: str,
    parts: Sequence[Mapping[str, Any]],
    secrets: Sequence[str | bytes] = (),
    verdicts: Sequence[tuple[int, int]] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """From the encoded tool message of ``parts``: the envelope (the content without ``data``)
    and the parts for the model (text parts with the encoded text, the others as given when the
    sidecar's ``verdicts`` (:attr:`callgate.client.ToolResult.part_verdicts`) call them clean,
    any part holding a secret or unchecked as a withheld note). None unless the message is a
    complete ``ok`` one with one encoded descriptor per part (then the caller answers with the
    message's text)."""
    verdict_of = dict(verdicts)
    read = _ok_blocks(message)
    if read is None:
        return None
    content, encoded = read
    found, plain_data = unmarked_data(content)
    plain = plain_data.get(BLOCKS_KEY) if found and isinstance(plain_data, dict) else None
    if not isinstance(encoded, list) or len(encoded) != len(parts):
        return None
    if not isinstance(plain, list) or len(plain) != len(parts):
        return None
    out: list[dict[str, Any]] = []
    for i, (part, enc, unmarked) in enumerate(zip(parts, encoded, plain, strict=True)):
        shown = _shown(part, enc, unmarked, secrets, verdict_of.get(i))
        if shown is None:
            return None
        out.append(shown)
    envelope = {k: v for k, v in content.items() if k != "data"}
    return envelope, out


def answer_parts(
    message: str,
    parts: Sequence[Mapping[str, Any]],
    secrets: Sequence[str | bytes] = (),
    verdicts: Sequence[tuple[int, int]] = (),
) -> list[dict[str, Any]] | None:
    """What the model gets for ``parts`` (:func:`rebuilt`): callgate's envelope (the status, the
    markers' nonce) as the first text part, then the parts; None when :func:`rebuilt` is."""
    found = rebuilt(message, parts, secrets, verdicts) if parts else None
    if found is None:
        return None
    envelope, shown = found
    head = {"type": "text", "text": json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))}
    return [head, *shown]


def replayed_parts(message: str) -> list[dict[str, Any]] | None:
    """What a replay's model gets for a stored ``ok`` message in parts (any process: only the
    message is at hand), as the MCP gateway answers a replay: the envelope, then each text part
    with the text the first answer had (marked, redacted), each other part as a
    ``callgate_not_replayed`` text part naming its descriptor (type, size, sha256, its redacted
    strings, all marked: its bytes were never kept). None for any other message."""
    read = _ok_blocks(message)
    if read is None:
        return None
    content, encoded = read
    if not isinstance(encoded, list) or not encoded:
        return None
    envelope = {k: v for k, v in content.items() if k != "data"}
    out = [{"type": "text", "text": json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))}]
    for enc in encoded:
        text = enc.get("text") if isinstance(enc, dict) else None
        if isinstance(text, str) and not any(k in enc for k in ("bytes", "strings")):  # type is marked
            out.append({"type": "text", "text": text})
        else:
            doc = {
                "type": "callgate_not_replayed",
                "message": "a part of the first answer that a replay does not carry (only its digest was kept)",
                "part": enc,
            }
            out.append({"type": "text", "text": json.dumps(doc, ensure_ascii=False, sort_keys=True)})
    return out


__all__ = [
    "BINARY_KEYS",
    "BLOCKS_KEY",
    "MAX_CHECKED_BYTES",
    "UNCHECKED",
    "answer_parts",
    "canonical",
    "committed",
    "descriptor",
    "encoded_value",
    "rebuilt",
    "replayed_parts",
    "watched",
]
