"""prepare_image: what reaches the model is a real image within the limits, or a typed refusal."""

from __future__ import annotations

import base64
import hashlib
import io
import os

import pytest
from PIL import Image

from bot.media import (
    CorruptMedia,
    MediaTooLarge,
    PreparedImage,
    UnsupportedMedia,
    looks_like_image,
    prepare_image,
)

from .samples import image_bytes, png_with_declared_size

MiB = 1024 * 1024


def _open(prepared: PreparedImage) -> Image.Image:
    image = Image.open(io.BytesIO(prepared.data))
    assert Image.MIME[str(image.format)] == prepared.mime
    assert image.size == (prepared.width, prepared.height)
    return image


def _noise(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """Random pixels: they do not compress, so byte limits really bite."""
    bands = len(Image.new(mode, (1, 1)).getbands())
    return Image.frombytes(mode, size, os.urandom(size[0] * size[1] * bands))


def test_a_small_png_within_the_limits_goes_through_untouched() -> None:
    data = image_bytes(Image.new("RGB", (64, 32), (10, 200, 30)), "PNG")
    prepared = prepare_image(data, max_side=2048, max_bytes=MiB)
    assert prepared.data == data
    assert (prepared.mime, prepared.width, prepared.height) == ("image/png", 64, 32)
    assert prepared.reencoded is False
    assert prepared.sha256 == hashlib.sha256(data).hexdigest()


def test_a_small_jpeg_goes_through_untouched_and_its_data_url_decodes_to_it() -> None:
    data = image_bytes(_noise((120, 80)), "JPEG", quality=80)
    prepared = prepare_image(data, max_side=2048, max_bytes=MiB)
    assert prepared.data == data and prepared.mime == "image/jpeg"
    head, _, body = prepared.data_url().partition(",")
    assert head == "data:image/jpeg;base64"
    assert base64.b64decode(body) == data


def test_the_bytes_are_not_in_the_repr() -> None:
    prepared = prepare_image(image_bytes(Image.new("L", (4, 4)), "PNG"), max_side=9, max_bytes=MiB)
    assert "data=" not in repr(prepared)


def test_a_wide_image_is_shrunk_to_the_longest_side_keeping_its_shape() -> None:
    data = image_bytes(Image.new("RGB", (10_000, 500), "white"), "PNG")
    prepared = prepare_image(data, max_side=1000, max_bytes=MiB)
    assert (prepared.width, prepared.height) == (1000, 50)
    assert prepared.reencoded
    _open(prepared)


def test_a_screenshot_stays_png_when_it_fits_and_a_photo_becomes_jpeg() -> None:
    screenshot = image_bytes(Image.new("RGB", (3000, 2000), "white"), "PNG")
    assert prepare_image(screenshot, max_side=1500, max_bytes=MiB).mime == "image/png"
    photo = image_bytes(_noise((1600, 1200)), "PNG")
    prepared = prepare_image(photo, max_side=1600, max_bytes=300_000)
    assert prepared.mime == "image/jpeg"
    assert len(prepared.data) <= 300_000


def test_a_big_photo_is_brought_under_the_byte_limit() -> None:
    data = image_bytes(_noise((1024, 1024)), "JPEG", quality=100)
    prepared = prepare_image(data, max_side=4096, max_bytes=50_000)
    assert len(prepared.data) <= 50_000
    assert max(prepared.width, prepared.height) <= 1024
    _open(prepared).load()


def test_an_exif_rotated_photo_reaches_the_model_upright() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    data = image_bytes(Image.new("RGB", (200, 100), "red"), "JPEG", exif=exif.tobytes())
    prepared = prepare_image(data, max_side=2048, max_bytes=MiB)
    assert (prepared.width, prepared.height) == (100, 200)
    assert prepared.reencoded


def test_an_animated_gif_becomes_its_first_frame() -> None:
    frames = [Image.new("RGB", (40, 30), color) for color in ("red", "green", "blue")]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    prepared = prepare_image(out.getvalue(), max_side=2048, max_bytes=MiB)
    image = _open(prepared).convert("RGB")
    assert prepared.mime == "image/png"
    assert getattr(image, "n_frames", 1) == 1
    red, green, blue = image.getpixel((5, 5))  # type: ignore[misc]
    assert red > 200 and green < 50 and blue < 50


def test_transparency_is_kept_as_png() -> None:
    image = Image.new("RGBA", (3000, 100), (255, 0, 0, 0))
    image.paste((0, 0, 255, 255), (0, 0, 1500, 100))
    prepared = prepare_image(image_bytes(image, "PNG"), max_side=1500, max_bytes=MiB)
    assert prepared.mime == "image/png"
    assert _open(prepared).mode == "RGBA"


def test_transparency_that_does_not_fit_as_png_is_flattened_to_jpeg() -> None:
    image = _noise((800, 800), "RGBA")
    prepared = prepare_image(image_bytes(image, "PNG"), max_side=800, max_bytes=100_000)
    assert prepared.mime == "image/jpeg" and len(prepared.data) <= 100_000


@pytest.mark.parametrize(
    ("mode", "fmt"),
    [
        ("1", "PNG"),
        ("L", "PNG"),
        ("LA", "PNG"),
        ("P", "PNG"),
        ("I;16", "PNG"),
        ("I", "TIFF"),
        ("F", "TIFF"),
        ("CMYK", "JPEG"),
        ("CMYK", "TIFF"),
        ("RGB", "BMP"),
        ("RGBA", "WEBP"),
        ("RGB", "WEBP"),
        ("YCbCr", "TIFF"),
        ("LAB", "TIFF"),
    ],
)
def test_every_mode_comes_out_as_something_a_model_reads(mode: str, fmt: str) -> None:
    image = Image.new(mode, (300, 200))
    if mode == "I;16":
        image = Image.linear_gradient("L").resize((300, 200)).convert("I").point(lambda v: v * 256)
        image = image.convert("I;16")
    data = image_bytes(image, fmt)
    prepared = prepare_image(data, max_side=256, max_bytes=MiB)
    decoded = _open(prepared)
    assert decoded.mode in {"L", "LA", "RGB", "RGBA", "P", "1"}
    assert max(prepared.width, prepared.height) <= 256
    assert prepared.mime in {"image/png", "image/jpeg", "image/webp", "image/gif"}


def test_sixteen_bit_grey_keeps_its_contrast() -> None:
    gradient = Image.linear_gradient("L").convert("I").point(lambda v: v * 257).convert("I;16")
    prepared = prepare_image(image_bytes(gradient, "PNG"), max_side=128, max_bytes=MiB)
    low, high = _open(prepared).convert("L").getextrema()  # type: ignore[misc]
    assert low < 20 and high > 235  # not clipped to white, as a plain convert("L") would


def test_a_png_claiming_a_huge_size_is_refused_before_it_is_decoded() -> None:
    bomb = png_with_declared_size(30_000, 30_000)  # 900 megapixels in a few bytes
    with pytest.raises(MediaTooLarge) as caught:
        prepare_image(bomb, max_side=2048, max_bytes=MiB)
    assert caught.value.unit == "pixels"
    assert "900,000,000 pixels" in caught.value.reason


def test_an_image_over_our_pixel_limit_but_under_pillows_is_refused() -> None:
    data = png_with_declared_size(9000, 9000)  # 81 MP: Pillow only warns; we refuse
    with pytest.raises(MediaTooLarge, match="the limit is 50,000,000 pixels"):
        prepare_image(data, max_side=2048, max_bytes=MiB)


def test_the_pixel_limit_is_the_callers() -> None:
    data = image_bytes(Image.new("RGB", (100, 100)), "PNG")
    with pytest.raises(MediaTooLarge):
        prepare_image(data, max_side=2048, max_bytes=MiB, max_pixels=9999)


def test_a_truncated_png_is_corrupt() -> None:
    data = image_bytes(_noise((200, 200)), "PNG")
    with pytest.raises(CorruptMedia) as caught:
        prepare_image(data[: len(data) // 2], max_side=2048, max_bytes=10 * MiB)
    assert caught.value.reason.startswith("The image looks damaged")


def test_a_truncated_jpeg_is_corrupt() -> None:
    data = image_bytes(_noise((200, 200)), "JPEG")
    with pytest.raises(CorruptMedia):
        prepare_image(data[: len(data) // 2], max_side=2048, max_bytes=10 * MiB)


def test_a_png_signature_on_garbage_is_corrupt_not_unsupported() -> None:
    with pytest.raises(CorruptMedia):
        prepare_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, max_side=64, max_bytes=MiB)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b"", "an empty file"),
        (b"%PDF-1.4 hello", "this kind of file"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "SVG images"),
        (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 32, "HEIC/AVIF images"),
    ],
)
def test_what_is_not_an_image_is_unsupported_and_says_what_is(data: bytes, named: str) -> None:
    with pytest.raises(UnsupportedMedia) as caught:
        prepare_image(data, max_side=64, max_bytes=MiB)
    assert named in caught.value.reason
    assert "PNG, JPEG, WebP, GIF, BMP and TIFF images" in caught.value.reason


def test_limits_that_no_encoding_can_meet_are_too_large_not_a_crash() -> None:
    data = image_bytes(_noise((50, 50)), "PNG")
    with pytest.raises(MediaTooLarge):
        prepare_image(data, max_side=50, max_bytes=10)


def test_nonsense_limits_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        prepare_image(b"", max_side=0, max_bytes=1)


def test_looks_like_image_is_a_cheap_router() -> None:
    assert looks_like_image(image_bytes(Image.new("RGB", (2, 2)), "PNG"))
    assert looks_like_image(image_bytes(Image.new("RGB", (2, 2)), "JPEG"))
    assert looks_like_image(image_bytes(Image.new("RGB", (2, 2)), "WEBP"))
    assert looks_like_image(image_bytes(Image.new("RGB", (2, 2)), "BMP"))
    assert not looks_like_image(b"%PDF-1.7")
    assert not looks_like_image(b"BMW annual report")
