"""What can go wrong with a file or an image someone sent, as errors that say so to a person.

Every error carries ``reason``: one sentence the bot can post as it is ("The PDF is protected
by a password, ..."). The readers in this package map every library exception to one of these
(``MediaTooCostly`` comes from the reader process's limits, not from a parser), so a caller
needs ``except MediaError`` and nothing else: hostile bytes never surface as a
``KeyError`` from deep inside a parser, and the person always learns why nothing came of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = [
    "CorruptMedia",
    "EncryptedDocument",
    "MediaError",
    "MediaTooCostly",
    "MediaTooLarge",
    "UnsupportedMedia",
    "format_size",
]

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def format_size(size: int) -> str:
    """``25480396`` → ``"24.3 MiB"``; whole numbers lose the decimal (``"20 MiB"``)."""
    if size < 1024:
        return f"{size} bytes" if size != 1 else "1 byte"
    value = size / 1024
    index = 0
    while value >= 1024 and index < len(_UNITS) - 1:
        value /= 1024
        index += 1
    text = f"{value:.1f}".removesuffix(".0")
    return f"{text} {_UNITS[index]}"


class MediaError(Exception):
    """Base of the media errors; ``reason`` is what the person is told."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsupportedMedia(MediaError):
    """A kind of file the bot does not read: names the kind and what it does read."""

    def __init__(self, kind: str, supported: Sequence[str], *, hint: str = "") -> None:
        self.kind = kind
        self.supported = tuple(supported)
        self.hint = hint
        listed = ", ".join(self.supported[:-1])
        if len(self.supported) > 1:
            listed = f"{listed} and {self.supported[-1]}"
        else:
            listed = "".join(self.supported)
        tail = f" {hint}" if hint else ""
        super().__init__(f"I can't read {kind}. I can read {listed}.{tail}")


class EncryptedDocument(MediaError):
    """A PDF or Office file locked with a password: the bot has no way to open it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(
            f"The {kind} is protected by a password, so I can't read it. "
            "Send a copy without the password."
        )


class CorruptMedia(MediaError):
    """Bytes that claim to be a kind of file but do not parse as one."""

    def __init__(self, kind: str, detail: str = "") -> None:
        self.kind = kind
        self.detail = detail
        tail = f" ({detail})" if detail else ""
        super().__init__(f"The {kind} looks damaged and I can't open it{tail}.")


class MediaTooLarge(MediaError):
    """Over a limit: bytes (``"24.3 MiB, the limit is 20 MiB"``) or another measure.

    ``size`` and ``limit`` are in ``unit`` ("bytes" unless said otherwise); bytes are
    formatted in binary units, anything else as a plain count ("9,000 megapixels").
    """

    def __init__(
        self, size: int, limit: int, *, what: str = "The file", unit: str = "bytes"
    ) -> None:
        self.size = size
        self.limit = limit
        self.what = what
        self.unit = unit
        if unit == "bytes":
            shown, cap = format_size(size), format_size(limit)
        else:
            shown, cap = f"{size:,} {unit}", f"{limit:,} {unit}"
        super().__init__(f"{what} is {shown}, the limit is {cap}.")


class MediaTooCostly(MediaError):
    """A file that needs more memory or time to read than one file may have: the reader
    process was stopped at the limit (``cost`` says which; ``limit`` is bytes or seconds)."""

    def __init__(self, cost: Literal["memory", "time"], limit: int) -> None:
        self.cost = cost
        self.limit = limit
        if cost == "memory":
            needs = f"more than the {format_size(limit)} of memory"
        else:
            needs = f"longer than the {limit} seconds"
        super().__init__(
            f"Reading it needs {needs} I give one file, so I stopped. "
            "If it is a real document, try a smaller part of it or another format (e.g. PDF)."
        )
