"""The frames the bot and a reader process exchange: a job, and its answer.

A frame is two big-endian 32-bit lengths, a JSON header of that many bytes and a payload of
raw bytes (the file going out, the shrunk image coming back). JSON, not pickle, both ways:
a reader process works on hostile bytes, and if a parser bug ever let a file take it over,
what it sends back must still be only data to the bot, never code the bot would run on
unpickling. The bot reads an answer within bounds (``MAX_HEADER_BYTES`` and the payload
size the job allows) and rebuilds it as the typed result or ``MediaError`` the in-process
readers return, so a caller cannot tell the two apart.
"""

from __future__ import annotations

import json
import struct
from typing import Any, cast, get_args

from bot.media.documents import DocumentKind, ExtractedText
from bot.media.errors import (
    CorruptMedia,
    EncryptedDocument,
    MediaError,
    MediaTooCostly,
    MediaTooLarge,
    UnsupportedMedia,
)
from bot.media.images import PreparedImage

__all__ = [
    "FRAME_HEAD",
    "MAX_HEADER_BYTES",
    "MAX_INPUT_BYTES",
    "BadFrame",
    "decode_error",
    "decode_header",
    "encode_error",
    "encode_frame",
    "extracted_from",
    "extracted_to",
    "image_from",
    "image_to",
]

FRAME_HEAD = struct.Struct(">II")
# The largest file a reader is sent: well over the 20 MiB download limit, and a bound a
# reader process checks before it reads a job into memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024
# An answer's header holds at most a document's text cut to its budget (a few hundred
# KiB as JSON-escaped UTF-8); anything longer is not an answer a reader process writes.
MAX_HEADER_BYTES = 8 * 1024 * 1024


class BadFrame(Exception):
    """What a reader process sent is not a frame it could have meant."""


def encode_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return FRAME_HEAD.pack(len(head), len(payload)) + head + payload


def decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadFrame("the header is not JSON") from exc
    if not isinstance(header, dict):
        raise BadFrame("the header is not an object")
    return header


def extracted_to(result: ExtractedText) -> dict[str, Any]:
    return {
        "text": result.text,
        "kind": result.kind,
        "truncated": result.truncated,
        "total_chars": result.total_chars,
        "note": result.note,
        "total_exact": result.total_exact,
    }


def extracted_from(fields: dict[str, Any]) -> ExtractedText:
    try:
        return ExtractedText(
            text=_typed(fields, "text", str),
            kind=_document_kind(fields),
            truncated=_typed(fields, "truncated", bool),
            total_chars=_typed(fields, "total_chars", int),
            note=_optional_text(fields.get("note")),
            total_exact=_typed(fields, "total_exact", bool),
        )
    except KeyError as exc:
        raise BadFrame(f"the result has no {exc}") from exc


def image_to(result: PreparedImage) -> tuple[dict[str, Any], bytes]:
    fields = {
        "mime": result.mime,
        "width": result.width,
        "height": result.height,
        "sha256": result.sha256,
        "reencoded": result.reencoded,
    }
    return fields, result.data


def image_from(fields: dict[str, Any], data: bytes) -> PreparedImage:
    import hashlib

    try:
        mime = _typed(fields, "mime", str)
        if mime not in ("image/png", "image/jpeg", "image/gif", "image/webp"):
            raise BadFrame(f"not an image type the model takes: {mime[:40]!r}")
        # Recomputed, not taken on trust: the digest keys caches of what the model saw.
        digest = hashlib.sha256(data).hexdigest()
        return PreparedImage(
            mime=mime,
            data=data,
            width=_typed(fields, "width", int),
            height=_typed(fields, "height", int),
            sha256=digest,
            reencoded=_typed(fields, "reencoded", bool),
        )
    except KeyError as exc:
        raise BadFrame(f"the result has no {exc}") from exc


def encode_error(error: MediaError) -> dict[str, Any]:
    """The constructor's arguments of ``error``, so the bot rebuilds the same error."""
    if isinstance(error, UnsupportedMedia):
        args: dict[str, Any] = {
            "kind": error.kind,
            "supported": list(error.supported),
            "hint": error.hint,
        }
    elif isinstance(error, EncryptedDocument):
        args = {"kind": error.kind}
    elif isinstance(error, CorruptMedia):
        args = {"kind": error.kind, "detail": error.detail}
    elif isinstance(error, MediaTooLarge):
        args = {"size": error.size, "limit": error.limit, "what": error.what, "unit": error.unit}
    elif isinstance(error, MediaTooCostly):
        args = {"cost": error.cost, "limit": error.limit}
    else:
        args = {"kind": "file", "detail": error.reason}
        return {"type": "CorruptMedia", "args": args}
    return {"type": type(error).__name__, "args": args}


def decode_error(fields: dict[str, Any]) -> MediaError:
    args = fields.get("args")
    if not isinstance(args, dict):
        raise BadFrame("the error has no arguments")
    try:
        kind = fields.get("type")
        if kind == "UnsupportedMedia":
            supported = args["supported"]
            if not isinstance(supported, list) or not all(isinstance(s, str) for s in supported):
                raise BadFrame("the supported kinds are not a list of names")
            return UnsupportedMedia(
                _typed(args, "kind", str), supported, hint=_typed(args, "hint", str)
            )
        if kind == "EncryptedDocument":
            return EncryptedDocument(_typed(args, "kind", str))
        if kind == "CorruptMedia":
            return CorruptMedia(_typed(args, "kind", str), _typed(args, "detail", str))
        if kind == "MediaTooLarge":
            return MediaTooLarge(
                _typed(args, "size", int),
                _typed(args, "limit", int),
                what=_typed(args, "what", str),
                unit=_typed(args, "unit", str),
            )
        if kind == "MediaTooCostly":
            cost = _typed(args, "cost", str)
            if cost not in ("memory", "time"):
                raise BadFrame(f"an unknown cost {cost[:20]!r}")
            return MediaTooCostly(
                "memory" if cost == "memory" else "time", _typed(args, "limit", int)
            )
    except KeyError as exc:
        raise BadFrame(f"the error has no {exc}") from exc
    raise BadFrame("an unknown error type")


def _document_kind(fields: dict[str, Any]) -> DocumentKind:
    kind = _typed(fields, "kind", str)
    if kind not in get_args(DocumentKind):
        raise BadFrame(f"an unknown document kind {kind[:20]!r}")
    return cast(DocumentKind, kind)


def _typed(fields: dict[str, Any], name: str, kind: type[Any]) -> Any:
    value = fields[name]
    # bool is an int in Python: a count must not be True, a flag must not be 1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadFrame(f"{name} is not {kind.__name__}")
    if isinstance(value, str) and len(value) > MAX_HEADER_BYTES:
        raise BadFrame(f"{name} is too long")
    return value


def _optional_text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BadFrame("note is not text")
