"""MCP in, MCP out: how an upstream's ``CallToolResult`` becomes the gateway's answer.

Spec 6.10: the model sees the tool message, so every string an upstream sends passes through the
sidecar's ``EncodeResult`` (recorded, redacted, neutralized, marked ``⟦untrusted:N⟧``), while
what MCP carries keeps its shape (docs/MCP.md, "Results"):

* a result without ``output_schema`` goes to ``EncodeResult`` as ``{"mcp_content": [...]}``: one
  descriptor per upstream block, its strings as text, binary data (image, audio, blob) as its
  size and sha256 (recorded in the trail, never text). The answer has the same blocks in the same
  order with their types and annotations: text blocks carry the marked, redacted text, binary
  blocks pass as they came (never base64 inside text), resource links and embedded resources keep
  their URI and get marked names and texts. The envelope (``status``, ``commit_status``, ``nonce``,
  ``truncated`` ...) is the answer's ``_meta["io.callgate/result"]``;
* a result of a ToolSpec with ``output_schema`` keeps the one-envelope-text form and the
  validated ``structuredContent`` beside it (docs/RESULT-ENCODING.md, "Output schemas");
* a replayed call is answered like the first one (:func:`replayed_result`); the encoded result
  of an attempt becomes the answer in :func:`answer_of`;
* a truncated answer ends with one text block of the gateway's own naming the paging tool
  :data:`PAGE_TOOL`, the invocation and the page token: ``GetResult`` pages on the caller's own
  callgate session (another session's invocation answers ``invocation_not_found``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from callgate.adapters.parts import MAX_CHECKED_BYTES
from callgate.client import Replayed, ToolResult
from callgate.execute.encode import unmarked_data
from callgate.execute.redaction import holds_secret, withheld_note
from callgate.mcp.codes import McpCode

BLOCKS_KEY = "mcp_content"
"""The one member of the value ``EncodeResult`` gets for a result in block form."""

RESULT_META_KEY = "io.callgate/result"
"""``_meta`` member of an answer in block form: the tool message's envelope without ``data``."""

PAGE_TOOL = "callgate_result_page"
"""The paging tool every ``tools/list`` of the gateway shows: reads the rest of a truncated
result (``GetResult`` on the caller's session). The name is reserved: no upstream tool maps to it."""

PAGE_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invocation_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "page_token": {"type": "string", "minLength": 1, "maxLength": 512},
    },
    "required": ["invocation_id", "page_token"],
    "additionalProperties": False,
}


def page_tool() -> types.Tool:
    """The ``tools/list`` entry of :data:`PAGE_TOOL`."""
    return types.Tool(
        name=PAGE_TOOL,
        title="Read the rest of a truncated result",
        description=(
            "Returns the next page of a tool result that callgate truncated. Pass the "
            "invocation_id and page_token named at the end of the truncated result; each page "
            "names the next token until the last. Only results of this session can be read."
        ),
        input_schema=PAGE_TOOL_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Read the rest of a truncated result",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )


# ------------------------------------------------------------------------------ errors and text


def _error_text(code: str, message: str, **extra: Any) -> str:
    return json.dumps(
        {"status": "error", "code": code, "message": message, **extra}, ensure_ascii=False, sort_keys=True
    )


def error_result(code: Any, message: str, **extra: Any) -> types.CallToolResult:
    """An ``isError`` answer of the gateway's own (``code`` an enum member or a string)."""
    value = code.value if hasattr(code, "value") else str(code)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_error_text(value, message, **extra))], is_error=True
    )


def model_text(message: str) -> str:
    """What an MCP client gets as text: the ``content`` of the sidecar's tool message.

    The sidecar (and callgate.client) speak in ``{"role": "tool", "tool_call_id": ..., "content":
    {...}}`` (docs/RESULT-ENCODING.md); MCP has no tool-call id and carries the role itself, so the
    gateway sends the inner object, flat like its own errors (``status``, ``message``, ``code``...).
    A message in any other shape is passed as it is."""
    try:
        msg = json.loads(message)
    except ValueError:
        return message
    if isinstance(msg, dict) and msg.get("role") == "tool" and isinstance(msg.get("content"), dict):
        return json.dumps(msg["content"], ensure_ascii=False, sort_keys=True)
    return message


def text_result(
    text: str, *, is_error: bool, structured: dict[str, Any] | None = None
) -> types.CallToolResult:
    """One text block (the tool message's content); a stored ``ok`` message in block form
    (a replayed answer) comes back as its text blocks (:func:`stored_answer`)."""
    if not is_error and structured is None:
        stored = stored_answer(text)
        if stored is not None:
            return stored
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=model_text(text))],
        is_error=is_error,
        structured_content=structured,
    )


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


# ------------------------------------------------------------------------------ upstream -> value


def _raw(data: str) -> bytes:
    """The bytes of base64 data (the text as sent when it is not valid base64)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data.encode()


def _binary(data: str) -> dict[str, Any]:
    """Size and sha256 of base64 data (:func:`_raw`)."""
    raw = _raw(data)
    return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def _binary_data(block: types.ContentBlock) -> str | None:
    """The base64 data of an image, audio or blob resource block (None for any other block)."""
    if isinstance(block, types.ImageContent | types.AudioContent):
        return block.data
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.BlobResourceContents):
        return block.resource.blob
    return None


def _descriptor(block: types.ContentBlock) -> dict[str, Any]:
    """One block as ``EncodeResult`` sees it: strings as text, binary as size and digest."""
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return {"type": block.type, "mimeType": block.mime_type, **_binary(block.data)}
    if isinstance(block, types.ResourceLink):
        d: dict[str, Any] = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        for key, value in (("title", block.title), ("description", block.description)):
            if value is not None:
                d[key] = value
        return d
    if isinstance(block, types.EmbeddedResource):
        r = block.resource
        e: dict[str, Any] = {"type": "resource", "uri": str(r.uri)}
        if r.mime_type is not None:
            e["mimeType"] = r.mime_type
        if isinstance(r, types.TextResourceContents):
            e["text"] = r.text
        else:
            e.update(_binary(r.blob))
        return e
    return {"type": str(getattr(block, "type", "unknown"))}


def checked_parts(result: types.CallToolResult, value: Any) -> tuple[tuple[int, bytes], ...]:
    """The bytes each binary block's descriptor covers, by the block's position, for the
    sidecar's secret check (``EncodeResultRequest.parts``, never stored): in order while they and
    ``value``'s JSON fit :data:`~callgate.adapters.parts.MAX_CHECKED_BYTES`; a block left out
    gets no verdict and is withheld (:func:`block_answer`). Empty for a value not in block form."""
    if not (isinstance(value, dict) and set(value) == {BLOCKS_KEY}):
        return ()
    room = MAX_CHECKED_BYTES - len(json_bytes(value))
    sent: list[tuple[int, bytes]] = []
    for i, block in enumerate(result.content):
        data = _binary_data(block)
        raw = None if data is None else _raw(data)
        if raw is not None and len(raw) <= room:
            sent.append((i, raw))
            room -= len(raw)
    return tuple(sent)


def uses_blocks(result: types.CallToolResult, *, has_output_schema: bool) -> bool:
    """Block form, unless the ToolSpec validates a structured result (``output_schema``)."""
    return not (has_output_schema and result.structured_content is not None)


def encode_value(result: types.CallToolResult, *, has_output_schema: bool) -> Any:
    """The value ``EncodeResult`` gets for an ``ok`` upstream result."""
    if not uses_blocks(result, has_output_schema=has_output_schema):
        return result.structured_content
    return {BLOCKS_KEY: [_descriptor(b) for b in result.content]}


# ------------------------------------------------------------------------------ message -> answer


@dataclass(frozen=True)
class Truncation:
    """How to read the rest of a truncated result."""

    invocation_id: str
    page_token: str
    remaining_bytes: int

    def note(self) -> types.TextContent:
        """The gateway's own block at the end of a truncated answer (not upstream text)."""
        doc = {
            "type": "callgate_truncated",
            "message": (
                "callgate truncated this result: parts are missing, do not present it as complete. "
                f"Call the tool {PAGE_TOOL} with this invocation_id and page_token to read the rest."
            ),
            "tool": PAGE_TOOL,
            "invocation_id": self.invocation_id,
            "page_token": self.page_token,
            "remaining_bytes": self.remaining_bytes,
        }
        return types.TextContent(type="text", text=json.dumps(doc, ensure_ascii=False, sort_keys=True))


def truncation_of(content: Mapping[str, Any], page_token: str) -> Truncation | None:
    """The continuation of a truncated tool message's ``content`` (None when complete)."""
    if content.get("truncated") is not True:
        return None
    cont = content.get("continuation")
    remaining = cont.get("remaining_bytes") if isinstance(cont, dict) else None
    token = page_token or (cont.get("token") if isinstance(cont, dict) else "")
    if not isinstance(token, str) or not token:
        return None
    return Truncation(
        str(content.get("invocation_id", "")), token, remaining if isinstance(remaining, int) else 0
    )


def _marked(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _rebuild(original: types.ContentBlock, enc: Any) -> types.ContentBlock | None:
    """The answer's block ``i``: marked strings from the encoded descriptor ``enc``, everything
    else (URI, MIME type, binary data, annotations) from the upstream's block. None when the
    encoder left the descriptor (or a member the block needs) out."""
    if not isinstance(enc, dict) or "type" not in enc:  # its values are marked: compared by position
        return None
    if isinstance(original, types.TextContent):
        text = _marked(enc.get("text"))
        return (
            None
            if text is None
            else types.TextContent(type="text", text=text, annotations=original.annotations)
        )
    if isinstance(original, types.ImageContent | types.AudioContent):
        return original.model_copy(update={"meta": None})
    if isinstance(original, types.ResourceLink):
        name = _marked(enc.get("name"))
        if name is None:
            return None
        return original.model_copy(
            update={
                "name": name,
                "title": _marked(enc.get("title")),
                "description": _marked(enc.get("description")),
                "meta": None,
                "icons": None,
            }
        )
    if isinstance(original, types.EmbeddedResource):
        r = original.resource
        if isinstance(r, types.TextResourceContents):
            text = _marked(enc.get("text"))
            if text is None:
                return None
            r = types.TextResourceContents(uri=r.uri, mime_type=r.mime_type, text=text)
        else:
            r = r.model_copy(update={"meta": None})
        return types.EmbeddedResource(type="resource", resource=r, annotations=original.annotations)
    return None


def _holds_secret(block: types.ContentBlock, secrets: Iterable[str], clean: bool) -> bool:
    """Binary data the sidecar did not find clean (``clean``: its verdict ``PART_CLEAN``; a block
    not sent or without a verdict stays unchecked), or that contains a secret redeemed for this
    call (:func:`holds_secret`)."""
    data = _binary_data(block)
    return data is not None and (not clean or holds_secret(data, secrets))


def _withheld_block(block: types.ContentBlock) -> types.TextContent:
    return types.TextContent(type="text", text=withheld_note(block.type))


def block_answer(
    message: bytes | str, upstream: types.CallToolResult, *, page_token: str, secrets: Sequence[str] = (),
    clean: frozenset[int] = frozenset(),
) -> types.CallToolResult | None:  # fmt: skip
    """The answer in block form from the encoded tool message and the upstream's result. None
    when the message is not an ``ok`` block-form message (then the caller answers with text).
    A binary block is shown only when its position is in ``clean`` (the sidecar's
    ``PART_CLEAN``), else it is the gateway's withheld note."""
    found = _ok_blocks(message)
    if found is None:
        return None
    content, encoded = found
    blocks: list[types.ContentBlock] = []
    for i, (original, enc) in enumerate(zip(upstream.content, encoded, strict=False)):
        block = _rebuild(original, enc)
        if block is None:
            continue
        blocks.append(_withheld_block(block) if _holds_secret(block, secrets, i in clean) else block)
    cut = truncation_of(content, page_token)
    if cut is not None:
        blocks.append(cut.note())
    envelope = {k: v for k, v in content.items() if k != "data"}
    return types.CallToolResult(content=blocks, is_error=False, _meta={RESULT_META_KEY: envelope})


def _ok_blocks(message: bytes | str) -> tuple[dict[str, Any], list[Any]] | None:
    """The ``content`` of an ``ok`` block-form tool message and its encoded blocks, else None."""
    try:
        msg = json.loads(message)
    except ValueError:
        return None
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, dict) or content.get("status") != "ok":
        return None
    encoded = _encoded_blocks(content)
    return None if encoded is None else (content, encoded)


def _encoded_blocks(content: Mapping[str, Any]) -> list[Any] | None:
    data = content.get("data")
    blocks = data.get(BLOCKS_KEY) if isinstance(data, dict) and len(data) == 1 else None
    return blocks if isinstance(blocks, list) else None


def stored_answer(message: str) -> types.CallToolResult | None:
    """A stored block-form ``ok`` message (what a replay has): its text blocks as they were
    answered (marked), every other block as a note of the gateway's naming its type (binary data
    is recorded as size and sha256 only). None for any other message."""
    found = _ok_blocks(message)
    if found is None:
        return None
    content, encoded = found
    blocks: list[types.ContentBlock] = []
    for enc in encoded:
        text = enc.get("text") if isinstance(enc, dict) else None
        if isinstance(text, str) and not any(k in enc for k in ("uri", "bytes")):
            blocks.append(types.TextContent(type="text", text=text))
        else:
            doc = {
                "type": "callgate_not_replayed",
                "message": "a block of the first answer that a replay does not carry (only its digest was kept)",
                "block": enc,
            }
            blocks.append(
                types.TextContent(type="text", text=json.dumps(doc, ensure_ascii=False, sort_keys=True))
            )
    cut = truncation_of(content, "")
    if cut is not None:
        blocks.append(cut.note())
    envelope = {k: v for k, v in content.items() if k != "data"}
    return types.CallToolResult(content=blocks, is_error=False, _meta={RESULT_META_KEY: envelope})


def with_truncation_note(
    answer: types.CallToolResult, message: bytes | str, page_token: str
) -> types.CallToolResult:
    """A text-form answer of a truncated message gets the same note as the block form."""
    try:
        msg = json.loads(message)
    except ValueError:
        return answer
    content = msg.get("content") if isinstance(msg, dict) else None
    cut = truncation_of(content, page_token) if isinstance(content, dict) else None
    if cut is None:
        return answer
    return answer.model_copy(update={"content": [*answer.content, cut.note()]})


def page_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(invocation_id, page_token)`` of a :data:`PAGE_TOOL` call, None when malformed."""
    args = dict(arguments or {})
    inv, token = args.get("invocation_id"), args.get("page_token")
    if set(args) - {"invocation_id", "page_token"}:
        return None
    if not (
        isinstance(inv, str) and isinstance(token, str) and 0 < len(inv) <= 256 and 0 < len(token) <= 512
    ):
        return None
    return inv, token


def page_answer(message: bytes, truncated: bool, next_page_token: str) -> types.CallToolResult:
    """A page from ``GetResult``: the page message's content (its fragment is marked untrusted
    by the sidecar) and, when more remains, the token of the next page."""
    blocks: list[types.ContentBlock] = [
        types.TextContent(type="text", text=model_text(bytes(message).decode("utf-8", "replace")))
    ]
    if truncated and next_page_token:
        doc = {"type": "callgate_next_page", "tool": PAGE_TOOL, "page_token": next_page_token}
        blocks.append(types.TextContent(type="text", text=json.dumps(doc, sort_keys=True)))
    return types.CallToolResult(content=blocks, is_error=False)


def answer_of(
    res: ToolResult, answered: types.CallToolResult | None, *, has_output_schema: bool,
    secrets: Sequence[str] = (), structured_out: bool = True,
) -> types.CallToolResult:  # fmt: skip
    """The answer from the executor's encoded result (``answered``: the upstream's result of a
    committed call, None for an error): block form, or one envelope text (errors, and results
    validated against an ``output_schema``, with ``structuredContent`` unless ``structured_out``
    is false: ``[mcp] structured_content = "omit"``, the client was shown no ``outputSchema``)."""
    if res.withheld:
        return error_result(McpCode.RESULT_WITHHELD, "The call was cancelled; its result is withheld.")
    # A result its output schema refused comes back as a refusal (result_schema_invalid).
    ok = answered is not None and not res.error_code
    if ok and answered is not None and uses_blocks(answered, has_output_schema=has_output_schema):
        clean = res.clean_parts
        blocks = block_answer(
            res.message, answered, page_token=res.next_page_token, secrets=secrets, clean=clean
        )
        if blocks is not None:
            return blocks
    structured: dict[str, Any] | None = None
    if ok and res.structured_json and structured_out:
        # Validated against the output schema and redacted by the sidecar, without the
        # untrusted-data marks (MCP clients check structuredContent against outputSchema);
        # the marked envelope is the text content beside it.
        structured = json.loads(res.structured_json)
    # A truncated result of a tool with an output schema has no structured result to hand out
    # (the sidecar validates only a whole one), and MCP clients refuse a successful answer of such
    # a tool without one (the SDKs raise before the caller sees the text): answered as an error,
    # which clients do not check, carrying the truncated text and the paging note.
    short = ok and has_output_schema and structured_out and structured is None and bool(res.next_page_token)
    answer = text_result(res.message, is_error=not ok or short, structured=structured)
    return with_truncation_note(answer, res.message, res.next_page_token)


def replayed_result(out: Replayed, has_output_schema: bool) -> types.CallToolResult:
    """A replayed call answered like the first one: the stored tool message, ``isError`` as it
    was, and for a tool with an output schema the same ``structuredContent`` (recovered from the
    stored message: its data without the boundary marks is the validated structured result;
    a result the schema refused was stored as an error message and stays one)."""
    try:
        msg = json.loads(out.message)
    except ValueError:
        msg = None
    content = msg.get("content") if isinstance(msg, dict) else None
    failed = _replay_failed(out.state) or (isinstance(content, dict) and content.get("status") == "error")
    structured: dict[str, Any] | None = None
    if not failed and has_output_schema and isinstance(content, dict):
        found, data = unmarked_data(content)
        if found and isinstance(data, dict):
            structured = data
    # a truncated first answer (no whole structured result): an error answer again, as it was
    short = not failed and has_output_schema and structured is None
    return text_result(out.message, is_error=failed or short, structured=structured)


def _replay_failed(state: str) -> bool:
    return state not in ("OBSERVED", "COMMITTED", "PREPARED", "EXECUTING", "AUTHORIZED")


__all__ = [
    "PAGE_TOOL",
    "RESULT_META_KEY",
    "Truncation",
    "BLOCKS_KEY",
    "answer_of",
    "block_answer",
    "checked_parts",
    "encode_value",
    "error_result",
    "json_bytes",
    "model_text",
    "page_answer",
    "page_arguments",
    "page_tool",
    "replayed_result",
    "stored_answer",
    "text_result",
    "uses_blocks",
    "with_truncation_note",
]
