"""The files in the sandbox's messages, read back from the emulator for the chat page.

A person's files are the emulator's message resources, seeded with their message; the
bot's are what it uploaded (``uploaded_images`` / ``uploaded_files``) and then sent by key.
The page gets them from ``GET /api/resource/<message_id>/<key>`` (:func:`file_response`),
never as something a browser would run: uploads are anything anyone dropped on the page,
so only bytes Pillow reads as a raster image are served as that image type (inline, for
the thumbnails); everything else goes out as an ``application/octet-stream`` attachment.
Both carry ``nosniff`` and a CSP that allows nothing, in case a browser thinks otherwise.
"""

from __future__ import annotations

import io
import urllib.parse
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from PIL import Image

from bot.feishu.post import flatten_post_json

from .emulator import FakeFeishu, FakeMessage

# Image formats Feishu takes in image messages that Pillow reads (HEIC needs a plugin; an
# SVG is a document that can hold scripts, so it stays a file).
_IMAGE_TYPES = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
    "ICO": "image/x-icon",
}
_SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Referrer-Policy": "no-referrer",
    # A key's bytes never change; the page redraws its thumbnails on every update.
    "Cache-Control": "private, max-age=3600",
}


@dataclass(frozen=True, slots=True)
class ImageInfo:
    content_type: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class StoredFile:
    kind: str  # "image" | "file": how the message carries it
    data: bytes
    name: str  # "" when nothing names it


def image_info(data: bytes) -> ImageInfo | None:
    """The type and size of ``data`` when Pillow reads it as an image; else None."""
    try:
        with Image.open(io.BytesIO(data), formats=list(_IMAGE_TYPES)) as image:
            found, (width, height) = image.format, image.size
            image.verify()
    # Pillow raises many kinds of error for bytes it cannot read (and for decompression
    # bombs): each one means "not an image we show".
    except Exception:
        return None
    content_type = _IMAGE_TYPES.get(found or "")
    return ImageInfo(content_type, width, height) if content_type else None


def message_files(message: FakeMessage) -> list[tuple[str, str]]:
    """(kind, key) of each file ``message`` carries, in order."""
    content: dict[str, Any] = message.content if isinstance(message.content, dict) else {}
    if message.msg_type in ("image", "file"):
        key = content.get("image_key" if message.msg_type == "image" else "file_key")
        return [(message.msg_type, key)] if isinstance(key, str) and key else []
    if message.msg_type == "post":
        flat = flatten_post_json(content)
        return [(kind, key) for kind, key in (flat.attachments if flat else ()) if kind == "image"]
    return []


def stored_file(emulator: FakeFeishu, message_id: str, key: str) -> StoredFile | None:
    """The bytes of file ``key`` of message ``message_id``, wherever the emulator holds
    them; None when the message does not carry that key or nobody stored its bytes."""
    message = emulator.message_by_id.get(message_id)
    if message is None or message.deleted:
        return None
    kind = dict((k, kind) for kind, k in message_files(message)).get(key)
    if kind is None:
        return None
    content = message.content if isinstance(message.content, dict) else {}
    named = str(content.get("file_name") or "")
    resource = emulator.resources.get((message_id, key))
    if resource is None:
        # The bot may send the key of a file someone sent, as Feishu lets it.
        resource = next((r for (_, k), r in emulator.resources.items() if k == key), None)
    if resource is not None:
        return StoredFile(kind, resource.data, resource.file_name or named)
    if kind == "image" and (image := emulator.uploaded_images.get(key)) is not None:
        return StoredFile(kind, image.data, "")
    if kind == "file" and (upload := emulator.uploaded_files.get(key)) is not None:
        return StoredFile(kind, upload.data, upload.file_name or named)
    return None


def file_response(stored: StoredFile) -> web.Response:
    """``stored`` for the browser: an image inline as its type, anything else as a download."""
    info = image_info(stored.data) if stored.kind == "image" else None
    headers = dict(_SAFE_HEADERS)
    if info is not None:
        headers["Content-Type"] = info.content_type
        headers["Content-Disposition"] = _disposition("inline", stored.name)
    else:
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Disposition"] = _disposition("attachment", stored.name or "file")
    return web.Response(body=stored.data, headers=headers)


def format_size(size: int) -> str:
    """``size`` bytes as people read it: "812 B", "14.2 KiB", "20 MiB"."""
    if size < 1024:
        return f"{size} B"
    kib = size / 1024
    shown = f"{kib:.1f} KiB" if kib < 1024 else f"{kib / 1024:.1f} MiB"
    return shown.replace(".0 ", " ")


def _disposition(disposition: str, name: str) -> str:
    if not name:
        return disposition
    # The plain filename is ASCII without quotes or controls; filename* keeps the real name.
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    encoded = urllib.parse.quote(name, safe="")
    return f"{disposition}; filename=\"{plain}\"; filename*=UTF-8''{encoded}"
