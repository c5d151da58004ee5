"""What a memory's text may be: one plain statement, cleaned of what no person types."""

from __future__ import annotations

import re
import unicodedata

MAX_CHARS = 500
_SPACES = re.compile(r"\s+")


class MemoryTextError(ValueError):
    """Text that cannot be a memory; the message says why, for the model to hear."""


def clean_text(text: str, *, max_chars: int = MAX_CHARS) -> str:
    """``text`` as stored: control and format characters out (NUL, escapes, bidi
    overrides), whitespace runs (newlines too) as one space, trimmed; MemoryTextError when
    nothing is left or it is longer than ``max_chars``."""
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in unicodedata.normalize("NFC", text)
        if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )
    cleaned = _SPACES.sub(" ", kept).strip()
    if not cleaned:
        raise MemoryTextError("there is nothing to remember in that text")
    if len(cleaned) > max_chars:
        raise MemoryTextError(
            f"a memory is at most {max_chars} characters; this one has {len(cleaned)}: "
            "keep the one fact worth remembering"
        )
    return cleaned
