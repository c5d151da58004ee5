"""Images people send, checked and shrunk to what a vision model takes.

``prepare_image`` trusts nothing about the bytes: Pillow must recognise them as one of the
formats below (``formats=`` keeps Pillow's rarer parsers away from hostile input), ``verify()``
must pass, and the declared size must be within ``max_pixels`` *before* anything is decoded,
so a 40,000 × 40,000 PNG of a few KiB is refused, not expanded into gigabytes.

We check the pixel count ourselves instead of lowering ``Image.MAX_IMAGE_PIXELS``: that is
process-wide state (charts are drawn with Pillow too), and ``warnings.catch_warnings`` is not
thread-safe while images are prepared in worker threads. Pillow's own bomb check still fires
above its default and is mapped to ``MediaTooLarge`` like ours.

The output is what OpenAI-compatible endpoints all accept: PNG or JPEG (WebP and a still GIF
pass through untouched when already within the limits). Shrinking keeps the aspect ratio;
PNG is tried first for lossless sources (screenshots stay sharp), then JPEG at falling quality,
then smaller sides, until both ``max_side`` and ``max_bytes`` hold.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.media.errors import CorruptMedia, MediaError, MediaTooLarge, UnsupportedMedia

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_FORMATS",
    "PreparedImage",
    "looks_like_image",
    "prepare_image",
]

# A 48-megapixel phone photo (8064 × 6048) fits; a decoded RGBA frame at the limit is
# 200 MB, which a reader process's 448 MiB holds with room to shrink it (64 MP did not).
DEFAULT_MAX_PIXELS = 50_000_000

# What Pillow may parse, and how we name it to a person.
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")
_SUPPORTED = ("PNG", "JPEG", "WebP", "GIF", "BMP", "TIFF images")
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
# Modes a model's decoder reads without surprises, per format kept as is.
_KEEP_MODES = {
    "PNG": {"1", "L", "LA", "P", "RGB", "RGBA"},
    "JPEG": {"L", "RGB"},
    "GIF": {"L", "P"},
    "WEBP": {"RGB", "RGBA"},
}
_JPEG_QUALITIES = (85, 75, 65, 55, 45, 35)
_EXIF_ORIENTATION = 0x0112

_MAGIC = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",
    b"MM\x00*",
)


@dataclass(frozen=True)
class PreparedImage:
    """An image ready for an ``image_url`` part; ``sha256`` (of ``data``) is a cache key."""

    mime: str
    data: bytes = field(repr=False)
    width: int
    height: int
    sha256: str
    # False when the sender's bytes went through untouched.
    reencoded: bool

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


def looks_like_image(data: bytes) -> bool:
    """Whether the bytes start like an image format we read (cheap; no decoding).

    For routing a *file* message that is really a picture to ``prepare_image``.
    """
    head = data[:16]
    if head.startswith(_MAGIC):
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return True
    return head[:2] == b"BM" and len(data) > 26 and data[14:15] in (b"\x0c", b"(", b"@", b"l", b"|")


def prepare_image(
    data: bytes, *, max_side: int, max_bytes: int, max_pixels: int = DEFAULT_MAX_PIXELS
) -> PreparedImage:
    """Check that ``data`` is an image and return it within ``max_side`` and ``max_bytes``.

    Raises ``UnsupportedMedia`` (not an image we read), ``CorruptMedia`` (an image that does
    not decode), ``MediaTooLarge`` (more than ``max_pixels``, or no encoding fits
    ``max_bytes``). Nothing else escapes: every Pillow error is mapped to one of these.
    """
    if max_side < 1 or max_bytes < 1 or max_pixels < 1:
        raise ValueError("max_side, max_bytes and max_pixels must be positive")
    try:
        return _prepare(data, max_side, max_bytes, max_pixels)
    except (MediaError, MemoryError):
        # MemoryError is the reader process's limit speaking, not a damaged image.
        raise
    except Exception as exc:
        # Pillow's decoders raise OSError, ValueError, SyntaxError, struct.error, EOFError,
        # zlib errors, even IndexError on crafted input: any of them means a damaged image.
        raise CorruptMedia("image", _short(exc)) from exc


def _prepare(data: bytes, max_side: int, max_bytes: int, max_pixels: int) -> PreparedImage:
    from PIL import Image

    fmt = _verified_format(data, max_pixels)
    with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as image:
        width, height = image.size
        _check_pixels(width, height, max_pixels)
        if _can_keep(image, fmt, len(data), max_side, max_bytes):
            image.load()  # decode once: a truncated file must fail here, not at the model
            return _result(_MIME[fmt], data, width, height, reencoded=False)
        frame = _first_frame(image, max_side)
    lossless = fmt in {"PNG", "GIF", "BMP", "TIFF"}
    return _encode_within(frame, lossless=lossless, max_bytes=max_bytes)


def _verified_format(data: bytes, max_pixels: int) -> str:
    """The Pillow format name of ``data``, after ``verify()`` has walked its structure."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as probe:
            fmt = str(probe.format)
            # Before verify(): nothing of an oversized image is decoded, not even to check it.
            _check_pixels(probe.size[0], probe.size[1], max_pixels)
            probe.verify()
    except UnidentifiedImageError as exc:
        # Pillow says "unidentified" for a PNG whose header is broken too: the magic tells.
        if looks_like_image(data):
            raise CorruptMedia("image", "its header does not parse") from exc
        raise UnsupportedMedia(_what_it_is(data), _SUPPORTED) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow refused it in open(), before we saw the size; its message has the count.
        found = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = int(found.group(1)) if found else max_pixels + 1
        raise MediaTooLarge(pixels, max_pixels, what="The image", unit="pixels") from exc
    return fmt


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise CorruptMedia("image", f"it claims to be {width} × {height} pixels")
    if width * height > max_pixels:
        raise MediaTooLarge(
            width * height,
            max_pixels,
            what=f"The image ({width:,} × {height:,})",
            unit="pixels",
        )


def _can_keep(image: Image, fmt: str, size: int, max_side: int, max_bytes: int) -> bool:
    """Whether the sender's bytes can go to the model as they are."""
    if fmt not in _MIME or image.mode not in _KEEP_MODES[fmt]:
        return False
    if size > max_bytes or max(image.size) > max_side:
        return False
    if getattr(image, "n_frames", 1) > 1:
        return False  # animated: models read one frame, so we pick it rather than them
    # A rotated camera JPEG would reach the model on its side.
    orientation: object = image.getexif().get(_EXIF_ORIENTATION, 1)
    return orientation == 1


def _first_frame(image: Image, max_side: int) -> Image:
    """The first frame, upright, in a mode PNG or JPEG can hold, no larger than ``max_side``."""
    image.seek(0)
    if image.format == "JPEG" and max(image.size) > 2 * max_side:
        # Lets libjpeg decode at 1/2, 1/4 or 1/8 scale: a fraction of the memory and time.
        image.draft("RGB", (max_side, max_side))
    image.load()
    frame = _upright(image)
    frame = _plain_mode(frame)
    if max(frame.size) > max_side:
        scale = max_side / max(frame.size)
        # At least one pixel a side: ImageOps.contain rounds a 1 × 32 strip down to 0 × 16.
        size = (max(1, round(frame.width * scale)), max(1, round(frame.height * scale)))
        frame = frame.resize(size, _lanczos(), reducing_gap=3.0)
    return frame


def _upright(image: Image) -> Image:
    """The image turned as its EXIF orientation says, in place: a copy of a 48-megapixel
    frame is 192 MB more, which a reader process's memory limit does not have."""
    from PIL import ImageOps

    try:
        ImageOps.exif_transpose(image, in_place=True)
    except MemoryError:
        raise
    except Exception:
        # A broken EXIF block is common and harmless: the pixels are fine, keep them as stored.
        pass
    return image


def _plain_mode(image: Image) -> Image:
    """Convert to L, LA, RGB or RGBA (CMYK, YCbCr and the rest become RGB), keeping alpha."""
    mode = image.mode
    if mode in {"L", "LA", "RGB", "RGBA"}:
        return image
    if mode in {"I", "I;16", "I;16B", "I;16L", "I;16N", "F"}:
        # 16-bit and float greys: stretch to 8 bits, a plain convert would clip to white.
        wide = image.convert("F")
        low, high = _extrema(wide)
        scale = 255.0 / (high - low) if high > low else 1.0
        return wide.point(lambda v: (v - low) * scale).convert("L")
    if mode == "1":
        return image.convert("L")
    if mode in {"P", "PA"}:
        has_alpha = mode == "PA" or "transparency" in image.info
        return image.convert("RGBA" if has_alpha else "RGB")
    return image.convert("RGBA" if "A" in mode else "RGB")


def _encode_within(frame: Image, *, lossless: bool, max_bytes: int) -> PreparedImage:
    """Encode ``frame`` (already within ``max_side``) to fit ``max_bytes``, shrinking if needed."""
    has_alpha = frame.mode in {"LA", "RGBA"} and _uses_alpha(frame)
    if lossless or has_alpha:
        png = _encode(frame if has_alpha else _drop_alpha(frame), "PNG")
        if len(png) <= max_bytes:
            return _result("image/png", png, frame.width, frame.height, reencoded=True)
    opaque = _flatten(frame) if has_alpha else _drop_alpha(frame)
    while True:
        jpeg = b""
        for quality in _JPEG_QUALITIES:
            jpeg = _encode(opaque, "JPEG", quality=quality)
            if len(jpeg) <= max_bytes:
                return _result("image/jpeg", jpeg, opaque.width, opaque.height, reencoded=True)
        if opaque.width == 1 and opaque.height == 1:
            raise MediaTooLarge(len(jpeg), max_bytes, what="The smallest version of the image")
        opaque = _smaller(opaque, len(jpeg), max_bytes)


def _smaller(image: Image, size: int, max_bytes: int) -> Image:
    # JPEG size grows roughly with the pixel count: aim just under the budget, but always
    # shrink by at least 15% so the loop ends, and at most to 30% per step to stay sharp.
    factor = min(0.85, max(0.3, math.sqrt(max_bytes / size) * 0.95))
    width = max(1, int(image.width * factor))
    height = max(1, int(image.height * factor))
    return image.resize((width, height), _lanczos())


def _lanczos() -> Any:
    from PIL import Image as PILImage

    return PILImage.Resampling.LANCZOS


def _extrema(band: Image) -> tuple[float, float]:
    """``getextrema()`` of a one-band image (typed for every band count, hence the check)."""
    low, high = band.getextrema()
    assert not isinstance(low, tuple) and not isinstance(high, tuple)
    return float(low), float(high)


def _uses_alpha(image: Image) -> bool:
    low, _high = _extrema(image.getchannel("A"))
    return low < 255


def _drop_alpha(image: Image) -> Image:
    if image.mode == "LA":
        return image.convert("L")
    if image.mode == "RGBA":
        return image.convert("RGB")
    return image


def _flatten(image: Image) -> Image:
    """Transparent pixels onto white, as a chat client shows them, for JPEG."""
    from PIL import Image as PILImage

    rgba = image.convert("RGBA")
    background = PILImage.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def _encode(image: Image, fmt: str, *, quality: int = 85) -> bytes:
    out = io.BytesIO()
    if fmt == "JPEG":
        image.save(out, "JPEG", quality=quality, optimize=True)
    else:
        image.save(out, "PNG", compress_level=6)
    return out.getvalue()


def _result(mime: str, data: bytes, width: int, height: int, *, reencoded: bool) -> PreparedImage:
    digest = hashlib.sha256(data).hexdigest()
    return PreparedImage(mime, data, width, height, digest, reencoded)


def _what_it_is(data: bytes) -> str:
    """A name for bytes Pillow did not recognise, for the refusal."""
    head = data[:32]
    if not head:
        return "an empty file as an image"
    if head[4:8] == b"ftyp" and head[8:12] in {b"heic", b"heix", b"mif1", b"msf1", b"avif"}:
        return "HEIC/AVIF images"
    if head.startswith(b"<svg") or b"<svg" in data[:512]:
        return "SVG images"
    return "this kind of file as an image"


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
