"""Property tests: whatever bytes arrive, the readers answer or raise a typed ``MediaError``.

Random bytes rarely get past the magic-byte checks, so most examples here start from a valid
file of each format and damage it (bytes flipped, cut short, spliced): that is what reaches
the parsers' deep code paths, where an unmapped ``KeyError`` would otherwise hide.
"""

from __future__ import annotations

import io
import os
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from bot.media import MediaError, extract_text, prepare_image

from .samples import docx_bytes, image_bytes, pdf_bytes, pptx_bytes, xlsx_bytes

NAMES = [
    "a.pdf",
    "a.docx",
    "a.xlsx",
    "a.csv",
    "a.tsv",
    "a.pptx",
    "a.txt",
    "a.md",
    "a.json",
    "a.py",
    "a.yaml",
    "Dockerfile",
    "a",
    "a.zip",
    "a.doc",
]
_SETTINGS = settings(
    max_examples=int(os.environ.get("MEDIA_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@cache
def _valid_files() -> dict[str, bytes]:
    return {
        "a.pdf": pdf_bytes(["Hello (world)", "page two"]),
        "a.docx": docx_bytes([("heading1", "H"), ("table", [["a", "b"], ["1", "2"]])]),
        "a.xlsx": xlsx_bytes({"S": [["a", 1, 2.5], ["b", None, True]]}),
        "a.pptx": pptx_bytes([{"title": "T", "body": ["x"], "table": [["a"], ["b"]]}]),
        "a.csv": b"a,b\n1,2\n",
        "a.json": b'{"a": [1, 2, {"b": null}]}',
        "a.png": image_bytes(Image.new("RGBA", (40, 30), (1, 2, 3, 128)), "PNG"),
        "a.jpg": image_bytes(Image.new("RGB", (40, 30), "red"), "JPEG"),
        "a.gif": image_bytes(Image.new("P", (40, 30)), "GIF"),
        "a.webp": image_bytes(Image.new("RGB", (40, 30)), "WEBP"),
    }


@st.composite
def damaged(draw: st.DrawFn) -> tuple[str, bytes]:
    name, data = draw(st.sampled_from(sorted(_valid_files().items())))
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        how = draw(st.sampled_from(["flip", "cut", "splice", "zero"]))
        at = draw(st.integers(0, max(len(buffer) - 1, 0)))
        if how == "flip" and buffer:
            buffer[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del buffer[at:]
        elif how == "splice":
            buffer[at:at] = draw(st.binary(max_size=64))
        elif buffer:
            buffer[at : at + 16] = bytes(len(buffer[at : at + 16]))
    return name, bytes(buffer)


def _extract_or_refuse(data: bytes, name: str, max_chars: int = 500) -> None:
    try:
        result = extract_text(data, file_name=name, max_chars=max_chars)
    except MediaError as refused:
        reason = refused.reason
    else:
        reason = "answered"
        assert len(result.text) <= max_chars
        assert result.truncated == (result.note is not None and result.note.startswith("[cut"))
    assert reason


def _prepare_or_refuse(data: bytes) -> None:
    try:
        prepared = prepare_image(data, max_side=64, max_bytes=20_000)
    except MediaError as refused:
        reason = refused.reason
    else:
        reason = "answered"
        assert len(prepared.data) <= 20_000 and max(prepared.width, prepared.height) <= 64
    assert reason


@_SETTINGS
@given(data=st.binary(max_size=4096), name=st.sampled_from(NAMES))
def test_arbitrary_bytes_with_any_name_raise_only_typed_errors(data: bytes, name: str) -> None:
    _extract_or_refuse(data, name)


@_SETTINGS
@given(
    prefix=st.sampled_from([b"%PDF-1.4\n", b"PK\x03\x04", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"]),
    rest=st.binary(max_size=2048),
    name=st.sampled_from(NAMES),
)
def test_bytes_behind_a_real_magic_number_raise_only_typed_errors(
    prefix: bytes, rest: bytes, name: str
) -> None:
    _extract_or_refuse(prefix + rest, name)


@_SETTINGS
@given(sample=damaged(), name=st.sampled_from(NAMES))
def test_damaged_documents_raise_only_typed_errors(sample: tuple[str, bytes], name: str) -> None:
    _extract_or_refuse(sample[1], name)


@_SETTINGS
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_as_an_image_raise_only_typed_errors(data: bytes) -> None:
    _prepare_or_refuse(data)


@_SETTINGS
@given(sample=damaged())
def test_damaged_images_raise_only_typed_errors(sample: tuple[str, bytes]) -> None:
    _prepare_or_refuse(sample[1])


@st.composite
def images(draw: st.DrawFn) -> bytes:
    mode, fmt = draw(
        st.sampled_from(
            [
                ("RGB", "PNG"),
                ("RGBA", "PNG"),
                ("L", "PNG"),
                ("P", "PNG"),
                ("RGB", "JPEG"),
                ("L", "JPEG"),
                ("CMYK", "JPEG"),
                ("RGB", "WEBP"),
                ("RGBA", "WEBP"),
                ("P", "GIF"),
                ("RGB", "BMP"),
                ("RGB", "TIFF"),
            ]
        )
    )
    width = draw(st.integers(1, 900))
    height = draw(st.integers(1, 900))
    bands = len(Image.new(mode, (1, 1)).getbands())
    # A seeded noise tile, repeated: incompressible enough to press the byte limit, cheap.
    seed = draw(st.binary(min_size=bands * 64, max_size=bands * 64))
    tile = (
        Image.frombytes(mode, (8, 8), seed) if mode != "P" else Image.frombytes("P", (8, 8), seed)
    )
    image = Image.new(mode, (width, height))
    for x in range(0, width, 8):
        for y in range(0, height, 8):
            image.paste(tile, (x, y))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=images(),
    max_side=st.integers(16, 1200),
    max_bytes=st.integers(2_000, 400_000),
)
def test_any_valid_image_comes_out_within_the_limits(
    data: bytes, max_side: int, max_bytes: int
) -> None:
    prepared = prepare_image(data, max_side=max_side, max_bytes=max_bytes)
    assert len(prepared.data) <= max_bytes
    assert max(prepared.width, prepared.height) <= max_side
    decoded = Image.open(io.BytesIO(prepared.data))
    decoded.load()
    assert decoded.size == (prepared.width, prepared.height)
    assert Image.MIME[str(decoded.format)] == prepared.mime
    original = Image.open(io.BytesIO(data))
    # The aspect ratio survives shrinking, to the pixel that rounding costs.
    if min(original.size) > 20 and min(decoded.size) > 20:
        ratio = original.width / original.height
        assert decoded.width / decoded.height == pytest.approx(ratio, rel=0.1)
