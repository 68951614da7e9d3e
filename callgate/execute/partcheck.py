"""The bytes of a result's non-text parts, checked for the sidecar's known secrets and configured
secret patterns, and never kept
(spec 6.10: "结果中的秘密、个人数据和凭证在回填前如何过滤").

A result in parts reaches ``EncodeResult`` as ``{"mcp_content": [...]}``: a text part as its text
(redacted, marked, recorded), any other part (an image, a file) as its type, size and sha256
(:mod:`callgate.adapters.parts`). Only the sidecar knows every configured secret, redeemed for
the call or not, and it must never send one to a client; so the client sends each non-text
part's canonical JSON beside the value (``EncodeResultRequest.parts``), and the sidecar answers
a verdict per part (``part_verdicts``): :attr:`PartVerdict.HOLDS_SECRET` when any string of the
part (its base64 data decoded, a ``data:`` URL, a name) holds a known secret in any form the
redactor knows (:meth:`~callgate.execute.redaction.Redactor.holds_known_secret`), or a configured
secret pattern (an ``sk-...`` key, a PEM private key ...) matches in it or in the bytes it stands
for read as Latin-1 (:meth:`~callgate.execute.redaction.Redactor.part_matches_pattern`). The client
withholds every part that is not :attr:`PartVerdict.CLEAN`.

The data must be exactly what the part's descriptor covers (its ``bytes`` and ``sha256``), so the
digest the trail keeps names what was checked; anything else is refused (``invalid_request``,
naming ``parts[i]``) before the result is recorded. Data that is not a JSON object is a part's
raw bytes (the MCP gateway's image, audio and blob blocks, whose descriptors cover the decoded
bytes): checked as the decoded bytes of base64 data are (:func:`_raw_holds`). The data is read
here and dropped: nothing of it reaches the store, the events (they get the withheld parts'
positions) or a log.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from callgate.base.errors import invalid_request
from callgate.execute.redaction import Redactor

BLOCKS_KEY = "mcp_content"
"""The one member of a result in parts (as :data:`callgate.adapters.parts.BLOCKS_KEY`)."""


class PartVerdict(Enum):
    """What the check found in one part (the wire's ``PartVerdict`` numbers)."""

    CLEAN = 1
    HOLDS_SECRET = 2


@dataclass(frozen=True, slots=True)
class PartData:
    """One ``ResultPart`` of the request: the descriptor's position and the part's JSON."""

    index: int
    data: bytes


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _descriptors(value: Any) -> list[Any]:
    blocks = value.get(BLOCKS_KEY) if isinstance(value, dict) and len(value) == 1 else None
    if not isinstance(blocks, list):
        raise invalid_request(f'parts: sent only with a result in parts (value {{"{BLOCKS_KEY}": [...]}})')
    return blocks


def _matches(part: PartData, at: int, blocks: list[Any], taken: set[int]) -> None:
    """Refuse ``parts[at]`` unless its data is what descriptor ``index`` covers, once."""
    where = f"parts[{at}]"
    if part.index >= len(blocks) or part.index in taken:
        raise invalid_request(f"{where}: index {part.index} names no descriptor, or one named before")
    desc = blocks[part.index]
    size = desc.get("bytes") if isinstance(desc, dict) else None
    digest = desc.get("sha256") if isinstance(desc, dict) else None
    if not isinstance(size, int) or not isinstance(digest, str):
        raise invalid_request(f"{where}: descriptor {part.index} is not a non-text part (bytes, sha256)")
    if size != len(part.data) or digest != hashlib.sha256(part.data).hexdigest():
        raise invalid_request(f"{where}: data is not what descriptor {part.index} covers (size, sha256)")
    taken.add(part.index)


def _json_object(data: bytes) -> dict[str, Any] | None:
    """A part's canonical JSON (an object), None for raw bytes. Numbers are kept as their text
    (a JSON object among raw bytes has every string and number checked)."""
    if not data.lstrip().startswith(b"{"):
        return None
    try:
        doc = json.loads(data, parse_int=str, parse_float=str, parse_constant=str)
    except ValueError:  # UnicodeDecodeError is one
        return None
    return doc if isinstance(doc, dict) else None


def _raw_holds(data: bytes, redactor: Redactor) -> bool:
    """Raw bytes hold a known secret: the views of their base64 (the bytes themselves, read as
    Latin-1 and as UTF-8), what a part's base64 ``data`` gets; or a configured pattern matches
    in the bytes read as Latin-1."""
    return redactor.holds_known_secret(
        base64.b64encode(data).decode("ascii")
    ) or redactor.part_matches_pattern(base64.b64encode(data).decode("ascii"))


def _string_holds(value: str, redactor: Redactor) -> bool:
    """A string of a part's JSON holds a known secret or a configured pattern's match (in the
    string or the bytes it stands for)."""
    return redactor.holds_known_secret(value) or redactor.part_matches_pattern(value)


def check_parts(value: Any, parts: Sequence[PartData], redactor: Redactor) -> tuple[PartVerdict, ...]:
    """One verdict per part, in order (empty for no parts).

    Raises:
        CallgateError: ``invalid_request`` for parts beside a value not in parts, a part naming
            no descriptor (or one twice), data that does not match its descriptor's size and
            sha256.
    """
    if not parts:
        return ()
    blocks = _descriptors(value)
    taken: set[int] = set()
    out: list[PartVerdict] = []
    for at, part in enumerate(parts):
        _matches(part, at, blocks, taken)
        doc = _json_object(part.data)
        if doc is None:
            found = _raw_holds(part.data, redactor)
        else:
            found = any(_string_holds(s, redactor) for s in _strings(doc))
        out.append(PartVerdict.HOLDS_SECRET if found else PartVerdict.CLEAN)
    return tuple(out)


def part_bytes(parts: Sequence[PartData]) -> int:
    """The data's total size (what decides whether the check runs off the event loop)."""
    return sum(len(p.data) for p in parts)


__all__ = ["PartData", "PartVerdict", "check_parts", "part_bytes"]
