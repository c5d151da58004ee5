"""Image and file uploads, multipart/form-data as Feishu takes them; what arrives is kept
for the tests (``uploaded_images[image_key]``, ``uploaded_files[file_key]``).

``POST /open-apis/im/v1/images``   fields ``image_type`` (message | avatar) and ``image``
    (the file part): ``data.image_key``. Refused (234001, "fake: ..." saying why): another
    image_type, no or an empty image, over 10 MB, or bytes that are not an image format
    Feishu reads (JPEG, PNG, WEBP, GIF, BMP, ICO, TIFF, HEIC; judged by their first bytes).
``POST /open-apis/im/v1/files``    fields ``file_type`` (opus | mp4 | pdf | doc | xls | ppt |
    stream), ``file_name``, ``duration`` (ms, optional) and ``file``: ``data.file_key``.
    Refused (234001): another file_type, no file_name, no or an empty file, over 30 MB,
    a duration that is not a number.
A body that is not multipart/form-data is refused with 234001 too. The limits are
Feishu's documented ones; the code of each refusal is the resource family's "invalid
request param", the one Feishu's documentation shows for these calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from urllib.parse import unquote

from aiohttp import web

from .core import EmulatorCore
from .wire import RECORDED, FakeError

IMAGE_TYPES = ("message", "avatar")
FILE_TYPES = ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream")
IMAGE_LIMIT = 10 * 1024 * 1024
FILE_LIMIT = 30 * 1024 * 1024
_IMAGE_MAGIC = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"BM",
    b"\x00\x00\x01\x00",  # ICO
    b"II*\x00",  # TIFF, little-endian
    b"MM\x00*",  # TIFF, big-endian
)
_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1")


@dataclass
class FormPart:
    data: bytes = field(repr=False)
    filename: str | None = None  # the part's filename, for a file part

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class UploadedImage:
    image_key: str
    data: bytes = field(repr=False)
    image_type: str
    filename: str | None = None  # the multipart part's filename


@dataclass
class UploadedFile:
    file_key: str
    data: bytes = field(repr=False)
    file_name: str
    file_type: str
    duration_ms: int | None = None
    filename: str | None = None  # the multipart part's filename


class UploadsApi(EmulatorCore):
    async def _upload_image(self, request: web.Request) -> web.Response:
        form = form_parts(request)
        image_type = form["image_type"].text if "image_type" in form else ""
        if image_type not in IMAGE_TYPES:
            raise FakeError(234001, f"fake: image_type must be one of {IMAGE_TYPES}")
        image = form.get("image")
        if image is None or image.filename is None or not image.data:
            raise FakeError(234001, "fake: no image file, or an empty one")
        if len(image.data) > IMAGE_LIMIT:
            raise FakeError(234001, "fake: the image is over 10 MB")
        if not looks_like_image(image.data):
            raise FakeError(234001, "fake: not an image format Feishu reads")
        key = f"img_v3_fake_{next(self._ids):04d}"
        self.uploaded_images[key] = UploadedImage(key, image.data, image_type, image.filename)
        return self._ok({"image_key": key})

    async def _upload_file(self, request: web.Request) -> web.Response:
        form = form_parts(request)
        file_type = form["file_type"].text if "file_type" in form else ""
        if file_type not in FILE_TYPES:
            raise FakeError(234001, f"fake: file_type must be one of {FILE_TYPES}")
        file_name = form["file_name"].text.strip() if "file_name" in form else ""
        if not file_name:
            raise FakeError(234001, "fake: file_name is required")
        upload = form.get("file")
        if upload is None or upload.filename is None or not upload.data:
            raise FakeError(234001, "fake: no file, or an empty one")
        if len(upload.data) > FILE_LIMIT:
            raise FakeError(234001, "fake: the file is over 30 MB")
        duration = form["duration"].text if "duration" in form else None
        if duration is not None and not duration.isdigit():
            raise FakeError(234001, "fake: duration must be milliseconds")
        key = f"file_v3_fake_{next(self._ids):04d}"
        self.uploaded_files[key] = UploadedFile(
            key,
            upload.data,
            file_name,
            file_type,
            int(duration) if duration is not None else None,
            upload.filename,
        )
        return self._ok({"file_key": key})


def form_parts(request: web.Request) -> dict[str, FormPart]:
    """The fields of a multipart/form-data body (already read by the middleware)."""
    content_type = request.headers.get("Content-Type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise FakeError(234001, "fake: the body must be multipart/form-data")
    raw = request[RECORDED].body
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=policy.HTTP).parsebytes(head + raw)
    if not message.is_multipart():
        raise FakeError(234001, "fake: the multipart body does not parse")
    parts: dict[str, FormPart] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        filename = part.get_filename()
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        parts.setdefault(name, FormPart(data, unquote(filename) if filename else None))
    return parts


def looks_like_image(data: bytes) -> bool:
    if data.startswith(_IMAGE_MAGIC):
        return True
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return True
    return data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS
