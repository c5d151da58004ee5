"""What a person attaches on the chat page: the upload, read within a limit, and the
messages Feishu would carry it in.

- An image (Pillow reads its bytes, whatever the browser called it) is an image message;
  with a caption or a mention of the bot it is a post of the words and the image, as
  Feishu sends a screenshot pasted next to text.
- Anything else is a file message with its name: the bot decides what it can read and
  says so. Feishu's file messages carry no text, so a caption follows as its own text
  message, the question the bot reads the file with (in a group the file waits for it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from aiohttp import BodyPartReader, web

from .files import format_size, image_info
from .people import BOT_NAME, BOT_OPEN_ID
from .push import MentionSpec

# The bot's default download limit (Feishu itself takes up to 100 MB).
UPLOAD_LIMIT = 20 * 1024 * 1024
_FORM_SLACK = 64 * 1024  # the form's other fields and boundaries, besides the file
_FIELD_LIMIT = 64 * 1024  # a caption, the user, the chat
_NAME_LIMIT = 200
# A refused body is read to its end, up to this much, before the answer: a browser that is
# answered while it still sends often reports a broken connection instead of the answer.
_DRAIN_LIMIT = 200 * 1024 * 1024
_CHUNK = 256 * 1024
BOT_KEY = "@_user_1"  # the placeholder of the bot's mention, in the text and the post
BOT_MENTION: MentionSpec = (BOT_KEY, BOT_OPEN_ID, BOT_NAME)


@dataclass(frozen=True, slots=True)
class Upload:
    fields: dict[str, str]  # the form's text fields
    file_name: str
    content_type: str  # as the browser declared it
    data: bytes


@dataclass(frozen=True, slots=True)
class SeededFile:
    """A file to seed in the emulator with its message, for the bot to download."""

    key: str
    data: bytes
    kind: str  # "image" | "file"
    content_type: str
    file_name: str | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message a person sends: its type, content (decoded), mentions and files."""

    message_type: str
    content: dict[str, Any]
    mentions: tuple[MentionSpec, ...] = ()
    files: tuple[SeededFile, ...] = ()


def text_message(text: str, *, mention: bool) -> Outgoing:
    if mention:
        return Outgoing("text", {"text": f"{BOT_KEY} {text}"}, (BOT_MENTION,))
    return Outgoing("text", {"text": text})


def attachment_messages(upload: Upload, *, caption: str, mention: bool) -> list[Outgoing]:
    """The messages that carry ``upload`` (and its caption), in the order they are sent."""
    info = image_info(upload.data)
    if info is None:
        key = f"file_v3_sandbox_{uuid.uuid4().hex[:16]}"
        declared = _declared(upload.content_type)
        seeded = SeededFile(key, upload.data, "file", declared, upload.file_name)
        named = {"file_key": key, "file_name": upload.file_name}
        sent = [Outgoing("file", named, files=(seeded,))]
        return [*sent, text_message(caption, mention=mention)] if caption else sent
    key = f"img_v3_sandbox_{uuid.uuid4().hex[:16]}"
    image = SeededFile(key, upload.data, "image", info.content_type)
    if not caption and not mention:
        return [Outgoing("image", {"image_key": key}, files=(image,))]
    words: list[dict[str, Any]] = []
    if mention:  # as a received post carries it: the mention's placeholder as user_id
        words.append({"tag": "at", "user_id": BOT_KEY, "user_name": BOT_NAME})
    if caption:
        words.append({"tag": "text", "text": f" {caption}" if mention else caption})
    picture = {"tag": "img", "image_key": key, "width": info.width, "height": info.height}
    post = {"title": "", "content": [words, [picture]]}
    return [Outgoing("post", post, (BOT_MENTION,) if mention else (), (image,))]


async def read_upload(request: web.Request, limit: int = UPLOAD_LIMIT) -> Upload:
    """The form's fields and its ``file`` part; 413 past ``limit``, 400 for a bad form."""
    if request.content_type != "multipart/form-data":
        raise web.HTTPBadRequest(text="send the file as multipart/form-data")
    declared = request.content_length
    if declared is not None and declared > limit + _FORM_SLACK:
        raise await _too_large(request, limit, f"the upload is {format_size(declared)}")
    fields: dict[str, str] = {}
    file: tuple[str, str, bytes] | None = None
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise web.HTTPBadRequest(text="nested multipart bodies are not taken")
            if part.name == "file" and part.filename is not None and file is None:
                data = await _read_part(part, limit)
                if data is None:
                    what = f"{part.filename} is over {format_size(limit)}"
                    raise await _too_large(request, limit, what)
                declared_type = part.headers.get("Content-Type", "")
                file = (_clean_name(part.filename), declared_type, data)
            elif part.name and (value := await _read_part(part, _FIELD_LIMIT)) is not None:
                fields[part.name] = value.decode("utf-8", "replace")
            elif part.name:
                raise web.HTTPBadRequest(text=f"the field {part.name} is too long")
    except ValueError as exc:  # aiohttp's word for a body that is not a valid form
        raise web.HTTPBadRequest(text=f"the form does not parse: {exc}") from None
    if file is None:
        raise web.HTTPBadRequest(text="no file: send it as the form's 'file' part")
    if not file[2]:
        raise web.HTTPBadRequest(text=f"{file[0]} is empty")
    return Upload(fields, *file)


async def _read_part(part: BodyPartReader, limit: int) -> bytes | None:
    """The part's bytes, or None once it is over ``limit`` (the rest is left unread)."""
    data = bytearray()
    while chunk := await part.read_chunk(_CHUNK):
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


async def _too_large(request: web.Request, limit: int, what: str) -> web.HTTPRequestEntityTooLarge:
    """The 413 to raise, once the rest of the body is read (see ``_DRAIN_LIMIT``)."""
    drained = 0
    while drained < _DRAIN_LIMIT and (chunk := await request.content.readany()):
        drained += len(chunk)
    return web.HTTPRequestEntityTooLarge(
        limit,
        0,
        text=f"{what}; the sandbox takes files up to {format_size(limit)}",
    )


def _clean_name(raw: str) -> str:
    """The file's own name: no folders, no control characters, not too long."""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if c.isprintable()).strip() or "file"
    if len(name) <= _NAME_LIMIT:
        return name
    suffix = PurePosixPath(name).suffix[:16]
    return name[: _NAME_LIMIT - len(suffix)] + suffix


def _declared(content_type: str) -> str:
    """The browser's type for the file when it looks like one (the bot reads the bytes)."""
    value = content_type.partition(";")[0].strip().lower()
    main, _, sub = value.partition("/")
    if main and sub and value.isascii() and value.isprintable() and " " not in value:
        return value
    return "application/octet-stream"
