"""Files in and out of chats: message resources, message reads, image and file uploads.

A mixin of :class:`~bot.feishu.client.FeishuClient`, so these calls share its plumbing
(tenant token, refresh and retry once, ``call_counts``, ``on_call``, the error tree):

- ``download_resource`` (``GET /open-apis/im/v1/messages/:message_id/resources/:file_key
  ?type=image|file``, lark-oapi's ``GetMessageResourceRequest``): the body is the file.
  A ``Content-Length`` over ``max_bytes`` is refused before the body is read, and a body
  that keeps coming is cut off just past it (:class:`FeishuResourceTooLarge`); Feishu's
  own refusals arrive as JSON (HTTP 400) and map to the error tree (234003 key not in
  that message, 234004 bot not in the chat, 234037 over 100 MB, ...). ``type`` is
  ``image`` for images (in image and post messages), ``file`` for files, audio and video.
  Stickers cannot be downloaded at all.
- ``get_message`` (``GetMessageRequest``): the message, and for a merge_forward the
  messages it forwards (:mod:`bot.feishu.fetched`).
- ``upload_image`` / ``upload_file`` (``CreateImageRequest`` / ``CreateFileRequest``,
  multipart/form-data): the ``image_key`` / ``file_key`` to send as a message with the
  client's ``send_message``/``reply_message``, msg_type ``"image"`` and content
  ``{"image_key": ...}``, or ``"file"`` and ``{"file_key": ...}``.

Header values of a download (Content-Type, Content-Disposition) come from outside and are
only ever read into a safe media type and a bare file name; the bytes are not looked at.
"""

from __future__ import annotations

import contextlib
import io
import re
import unicodedata
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    GetMessageRequest,
    GetMessageResourceRequest,
)
from lark_oapi.core.model import RawResponse
from lark_oapi.core.utils import Files

from .errors import FeishuResourceTooLarge, FeishuTransportError
from .fetched import FetchedMessage, fetched_messages
from .transport import BodyTooLarge, PooledTransport

__all__ = [
    "FILE_UPLOAD_LIMIT",
    "IMAGE_UPLOAD_LIMIT",
    "Resource",
    "ResourceCalls",
    "file_name_from",
    "file_type_for",
    "media_type_from",
]

Send = Callable[[lark.RequestOption], Awaitable[Any]]

# Feishu's documented upload limits: images up to 10 MB, files up to 30 MB, neither empty.
IMAGE_UPLOAD_LIMIT = 10 * 1024 * 1024
FILE_UPLOAD_LIMIT = 30 * 1024 * 1024
IMAGE_TYPES = ("message", "avatar")
# CreateFileRequestBody.file_type: opus audio, mp4 video, pdf/doc/xls/ppt, "stream" for any other.
FILE_TYPES = ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream")
_FILE_TYPE_BY_EXTENSION = {
    "opus": "opus",
    "mp4": "mp4",
    "pdf": "pdf",
    "doc": "doc",
    "docx": "doc",
    "xls": "xls",
    "xlsx": "xls",
    "ppt": "ppt",
    "pptx": "ppt",
}
OCTET_STREAM = "application/octet-stream"
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
# One ``; name=value`` parameter: a token name, then a quoted string or a bare value.
_PARAMETER = re.compile(r';\s*([A-Za-z0-9!#$&+.^_`|~*-]{1,64})\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_QUOTED_PAIR = re.compile(r"\\(.)")
_MAX_HEADER = 4096
_MAX_NAME = 255
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class Resource:
    """A downloaded message resource."""

    data: bytes = field(repr=False)
    content_type: str  # a lower-case media type without parameters; octet-stream if unusable
    file_name: str  # from Content-Disposition, reduced to a bare name; "" when not given
    size: int  # len(data)


class ResourceCalls:
    """The resource, message-read and upload calls of ``FeishuClient``."""

    transport: PooledTransport

    if TYPE_CHECKING:  # provided by FeishuClient

        async def _call(
            self, endpoint: str, send: Send, *, binary: bool = False
        ) -> tuple[Any, dict[str, Any]]: ...

        async def _request(
            self, endpoint: str, request: lark.BaseRequest
        ) -> tuple[Any, dict[str, Any]]: ...

        def _malformed(self, endpoint: str, what: str) -> FeishuTransportError: ...

    async def download_resource(
        self,
        message_id: str,
        key: str,
        *,
        kind: str,
        max_bytes: int,
        deadline_s: float = 120.0,
    ) -> Resource:
        """The file ``key`` of message ``message_id``: ``kind`` "image" or "file".

        Raises :class:`FeishuResourceTooLarge` over ``max_bytes`` (our limit: ``code``
        None) and the mapped FeishuError for Feishu's refusals. ``deadline_s`` bounds the
        whole download (a 20 MB file takes longer than an ordinary call may).
        """
        if kind not in ("image", "file"):
            raise ValueError(f"kind must be 'image' or 'file', not {kind!r}")
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        endpoint = "im.message.resource"
        request = (
            GetMessageResourceRequest.builder().message_id(message_id).file_key(key).type(kind)
        ).build()

        async def send(option: lark.RequestOption) -> _Answer:
            try:
                raw = await self.transport.download(
                    request, option, max_bytes=max_bytes, seconds=deadline_s
                )
            except BodyTooLarge as exc:
                raise FeishuResourceTooLarge.over_limit(
                    size=exc.declared, limit=max_bytes, read=exc.read, endpoint=endpoint
                ) from None
            return _Answer(raw)

        answer, _ = await self._call(endpoint, send, binary=True)
        return _resource(answer.raw)

    async def get_message(self, message_id: str) -> list[FetchedMessage]:
        """The message (first) and, for a merge_forward, the messages it forwards."""
        request = GetMessageRequest.builder().message_id(message_id).build()
        _, body = await self._request("im.message.get", request)
        messages = fetched_messages(body.get("data"), message_id)
        if not messages:
            raise self._malformed("im.message.get", "no message in the answer")
        return messages

    async def upload_image(
        self, data: bytes, *, image_type: str = "message", deadline_s: float = 120.0
    ) -> str:
        """Upload an image (JPEG, PNG, WEBP, GIF, BMP, ICO, TIFF, HEIC; at most 10 MB);
        its ``image_key``. ``image_type`` "message" for images sent in chats."""
        if image_type not in IMAGE_TYPES:
            raise ValueError(f"image_type must be one of {IMAGE_TYPES}, not {image_type!r}")
        endpoint = "im.image.create"
        _check_upload(data, IMAGE_UPLOAD_LIMIT, endpoint)
        body = CreateImageRequestBody.builder().image_type(image_type)
        body.image(_stream(data, "image"))
        request = CreateImageRequest.builder().request_body(body.build()).build()
        return await self._upload(endpoint, request, "image_key", deadline_s)

    async def upload_file(
        self,
        data: bytes,
        *,
        file_name: str,
        file_type: str | None = None,
        duration_ms: int | None = None,
        deadline_s: float = 120.0,
    ) -> str:
        """Upload a file (at most 30 MB) to send as a file message; its ``file_key``.

        ``file_type`` defaults to the one ``file_name``'s extension calls for
        (:func:`file_type_for`); ``duration_ms`` is for opus and mp4 files.
        """
        if not file_name.strip():
            raise ValueError("file_name must not be empty")
        file_type = file_type or file_type_for(file_name)
        if file_type not in FILE_TYPES:
            raise ValueError(f"file_type must be one of {FILE_TYPES}, not {file_type!r}")
        endpoint = "im.file.create"
        _check_upload(data, FILE_UPLOAD_LIMIT, endpoint)
        body = CreateFileRequestBody.builder().file_type(file_type).file_name(file_name)
        if duration_ms is not None:
            body.duration(duration_ms)
        body.file(_stream(data, file_name))
        request = CreateFileRequest.builder().request_body(body.build()).build()
        return await self._upload(endpoint, request, "file_key", deadline_s)

    async def _upload(
        self, endpoint: str, request: lark.BaseRequest, key_name: str, deadline_s: float
    ) -> str:
        # As lark-oapi's own upload calls do: the file moves from the body to
        # ``request.files``, which makes the transport send multipart/form-data.
        request.files = Files.extract_files(request.body)

        async def send(option: lark.RequestOption) -> Any:
            return await self.transport.send_raw_response(request, option, seconds=deadline_s)

        _, body = await self._call(endpoint, send)
        data = body.get("data")
        key = data.get(key_name) if isinstance(data, dict) else None
        if not isinstance(key, str) or not key:
            raise self._malformed(endpoint, f"no {key_name} in the answer")
        return key


class _Answer:
    def __init__(self, raw: RawResponse) -> None:
        self.raw = raw


def file_type_for(file_name: str) -> str:
    """The ``file_type`` Feishu wants for a file of that name ("stream" when none fits)."""
    extension = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    return _FILE_TYPE_BY_EXTENSION.get(extension, "stream")


def media_type_from(header: str | None) -> str:
    """The media type of a Content-Type header: lower case, without parameters, or
    ``application/octet-stream`` when absent or not a plausible ``type/subtype``."""
    value = (header or "")[:_MAX_HEADER].split(";", 1)[0].strip().lower()
    return value if _MEDIA_TYPE.fullmatch(value) else OCTET_STREAM


def file_name_from(header: str | None) -> str:
    """The file name of a Content-Disposition header, reduced to a bare, printable name
    of at most 255 characters ("" when there is none).

    ``filename*`` (RFC 5987, ``UTF-8''...``) wins over ``filename``; a plain ``filename``
    is percent-decoded and, like lark-oapi does, read as UTF-8 when it arrived as Latin-1.
    """
    params: dict[str, str] = {}
    for match in _PARAMETER.finditer((header or "")[:_MAX_HEADER]):
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = _QUOTED_PAIR.sub(r"\1", value[1:-1])
        params.setdefault(match.group(1).lower(), value)
    if "filename*" in params:
        name = _extended_value(params["filename*"])
    elif "filename" in params:
        name = urllib.parse.unquote(params["filename"], errors="replace")
        with contextlib.suppress(UnicodeError):  # it was not UTF-8 read as Latin-1
            name = name.encode("latin-1").decode("utf-8")
    else:
        return ""
    return _bare_name(name)


def _extended_value(value: str) -> str:
    charset, _, rest = value.partition("'")
    _, _, encoded = rest.partition("'")
    if not encoded:  # not charset'language'value: take it as it stands
        encoded, charset = value, "utf-8"
    try:
        return urllib.parse.unquote(encoded, encoding=charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return urllib.parse.unquote(encoded, errors="replace")


def _bare_name(name: str) -> str:
    # No directories; no control, format, private or unassigned characters, nor line
    # breaks (a right-to-left override makes "txt.exe" look like "exe.txt"); no
    # surrounding blanks; "." and ".." are no name.
    name = re.split(r"[/\\]", name)[-1]
    name = "".join(c for c in name if unicodedata.category(c) not in _UNSAFE_CATEGORIES)
    name = name.strip()
    if len(name) > _MAX_NAME:
        stem, dot, extension = name.rpartition(".")
        if dot and stem and 0 < len(extension) <= 16:
            name = stem[: _MAX_NAME - len(extension) - 1].rstrip() + "." + extension
        else:
            name = name[:_MAX_NAME].rstrip()
    return "" if name in (".", "..") else name


def _resource(raw: RawResponse) -> Resource:
    headers = {str(k).lower(): str(v) for k, v in (raw.headers or {}).items()}
    data = raw.content or b""
    return Resource(
        data=data,
        content_type=media_type_from(headers.get("content-type")),
        file_name=file_name_from(headers.get("content-disposition")),
        size=len(data),
    )


def _check_upload(data: bytes, limit: int, endpoint: str) -> None:
    # Both are refused by Feishu anyway; saying so here costs no call.
    if not data:
        raise ValueError("nothing to upload: Feishu refuses empty files")
    if len(data) > limit:
        raise FeishuResourceTooLarge.over_limit(
            size=len(data), limit=limit, read=0, endpoint=endpoint
        )


def _stream(data: bytes, name: str) -> io.BytesIO:
    stream = io.BytesIO(data)
    stream.name = name  # the multipart part's filename
    return stream
