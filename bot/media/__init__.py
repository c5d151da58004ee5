"""Bytes people send, made into what a model can take: images as data URLs, files as text.

Knows nothing of Feishu or the engine: the caller downloads, this package checks and
converts, and says in a typed error (``MediaError.reason``) why it could not. Importing it is
cheap: Pillow, pypdf, python-docx, openpyxl and python-pptx load when first needed.

- ``prepare_image(data, max_side=, max_bytes=)`` → ``PreparedImage`` (``data_url()``)
- ``extract_text(data, file_name=, max_chars=)`` → ``ExtractedText``
- ``looks_like_image(data)``: route a file message that is really a picture
"""

from bot.media.documents import SUPPORTED_DOCUMENTS, DocumentKind, ExtractedText, extract_text
from bot.media.errors import (
    CorruptMedia,
    EncryptedDocument,
    MediaError,
    MediaTooLarge,
    UnsupportedMedia,
    format_size,
)
from bot.media.images import IMAGE_FORMATS, PreparedImage, looks_like_image, prepare_image

__all__ = [
    "IMAGE_FORMATS",
    "SUPPORTED_DOCUMENTS",
    "CorruptMedia",
    "DocumentKind",
    "EncryptedDocument",
    "ExtractedText",
    "MediaError",
    "MediaTooLarge",
    "PreparedImage",
    "UnsupportedMedia",
    "extract_text",
    "format_size",
    "looks_like_image",
    "prepare_image",
]
