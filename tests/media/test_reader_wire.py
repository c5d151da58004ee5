"""The frames from a reader process are data the bot checks, whatever a reader sends.

A reader works on hostile bytes; if a parser bug ever handed a file control of one, what
it writes back must still come out as a typed result, a ``MediaError`` or ``BadFrame``
(which the pool answers as "not understood" and kills the reader), never anything else.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from bot.media import (
    CorruptMedia,
    EncryptedDocument,
    ExtractedText,
    MediaError,
    MediaTooLarge,
    PreparedImage,
    UnsupportedMedia,
)
from bot.media.errors import MediaTooCostly
from bot.media.reader_wire import (
    BadFrame,
    decode_error,
    decode_header,
    encode_error,
    extracted_from,
    extracted_to,
    image_from,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=20,
)
FIELDS = st.dictionaries(
    st.sampled_from(
        ["text", "kind", "truncated", "total_chars", "note", "total_exact", "mime", "width",
         "height", "reencoded", "type", "args", "size", "limit", "what", "unit", "cost",
         "detail", "supported", "hint", "sha256"]
    ),
    JSON,
)  # fmt: skip


@given(st.binary(max_size=512))
def test_any_header_bytes_are_an_object_or_a_bad_frame(raw: bytes) -> None:
    try:
        header = decode_header(raw)
    except BadFrame:
        return
    assert isinstance(header, dict)


def test_a_deep_header_is_a_bad_frame_not_a_recursion_error() -> None:
    try:
        decode_header(b"[" * 100_000)
    except BadFrame:
        return
    raise AssertionError("a 100,000-deep header was accepted")


@given(FIELDS)
def test_any_result_fields_are_a_typed_result_or_a_bad_frame(fields: dict) -> None:
    try:
        extracted = extracted_from(fields)
    except BadFrame:
        pass
    else:
        assert isinstance(extracted, ExtractedText)
        assert isinstance(extracted.text, str) and isinstance(extracted.total_chars, int)
        assert not isinstance(extracted.total_chars, bool)
    try:
        image = image_from(fields, b"\x89PNG")
    except BadFrame:
        pass
    else:
        assert isinstance(image, PreparedImage)
        assert image.mime in ("image/png", "image/jpeg", "image/gif", "image/webp")


@given(FIELDS, st.one_of(st.none(), st.sampled_from(
    ["UnsupportedMedia", "EncryptedDocument", "CorruptMedia", "MediaTooLarge", "MediaTooCostly",
     "KeyError", "__class__"]
)))  # fmt: skip
def test_any_error_fields_are_a_media_error_or_a_bad_frame(fields: dict, kind) -> None:
    try:
        error = decode_error({"type": kind, "args": fields})
    except BadFrame:
        return
    assert isinstance(error, MediaError) and isinstance(error.reason, str)


def test_every_media_error_crosses_the_wire_unchanged() -> None:
    errors: list[MediaError] = [
        UnsupportedMedia("ZIP archives", ("PDF", "Word"), hint="Send the files inside."),
        EncryptedDocument("PDF"),
        CorruptMedia("Word document", "the archive is broken"),
        MediaTooLarge(3, 2, what="The image", unit="pixels"),
        MediaTooLarge(200 * 1024 * 1024, 16 * 1024 * 1024, what="The part"),
        MediaTooCostly("memory", 512 * 1024 * 1024),
        MediaTooCostly("time", 20),
    ]
    for error in errors:
        wired = json.loads(json.dumps(encode_error(error)))
        back = decode_error(wired)
        assert type(back) is type(error) and back.reason == error.reason


def test_a_result_crosses_the_wire_unchanged() -> None:
    result = ExtractedText("text | cell", "docx", True, 99, "[cut: ...]", False)
    assert extracted_from(json.loads(json.dumps(extracted_to(result)))) == result
