"""A call's arguments on its approval card: whole, or saying exactly what is not shown.

An approver must see what will run. Short arguments sit in one code block. Longer ones go
into a collapsible panel of several code blocks (one markdown element drops text past a few
thousand characters, so none holds more than ``CHUNK_CHARS``), up to what a card can carry
(Feishu refuses a card of more than about 30 KB of JSON). Past that, the card says how many
characters are not shown and where the whole call can be read (the web console); without a
console it says the call cannot be approved from the card at all.

Text from outside is data: inside a code block nothing can close the block or write a
mention (runs of three or more backticks become lookalikes, ``<at`` is broken up), and
invisible characters (bidi overrides, zero-width joiners, controls) show as ``\\uXXXX``, so
what the approver reads is what the tool receives.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from .card_elements import markdown as _markdown

INLINE_CHARS = 1_500  # up to this (and INLINE_LINES), the arguments show without a panel
INLINE_LINES = 40
CHUNK_CHARS = 2_000  # one markdown element each: well under what an element drops
# What the arguments' elements may take of a card's JSON (bytes, UTF-8): the rest of the
# approval card stays under ~4 KB, and Feishu's limit is ~30 KB.
ARGUMENTS_BUDGET_BYTES = 24_000

_FENCE_RUN = re.compile(r"`{3,}")
_AT_TAG = re.compile(r"<(?=/?at\b)", re.IGNORECASE)
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class ShownArguments:
    """The card elements for a call's arguments, and how much of them they show."""

    elements: tuple[dict[str, Any], ...]
    total_chars: int
    shown_chars: int

    @property
    def complete(self) -> bool:
        return self.shown_chars >= self.total_chars

    @property
    def hidden_chars(self) -> int:
        return self.total_chars - self.shown_chars


def arguments_elements(
    arguments: str, *, console_url: str | None, budget_bytes: int = ARGUMENTS_BUDGET_BYTES
) -> ShownArguments:
    """The elements that show ``arguments`` on a card, within ``budget_bytes`` of JSON.

    ``console_url``: where the whole call can be read ("" when the console is on but its
    address is unknown; None when there is no console).
    """
    raw = arguments.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    total = len(raw)
    language = "json" if raw.lstrip().startswith(("{", "[")) else ""
    if total <= INLINE_CHARS and raw.count("\n") < INLINE_LINES:
        block = _markdown("args", "**Arguments**\n" + _code_block(raw, language))
        return ShownArguments((block,), total, total)

    chunks, shown = _chunks_within(raw, language, budget_bytes)
    lines = raw.count("\n") + 1
    title = f"**Arguments** · {total:,} characters, {lines:,} lines · tap to read them all"
    panel = {
        "tag": "collapsible_panel",
        "element_id": "args",
        "expanded": False,
        "header": {"title": {"tag": "markdown", "content": title}},
        "border": {"color": "grey", "corner_radius": "4px"},
        "vertical_spacing": "4px",
        "elements": chunks,
    }
    elements: list[dict[str, Any]] = [panel]
    if shown < total:
        elements.append(_markdown("args_hidden", _hidden_note(total - shown, total, console_url)))
    return ShownArguments(tuple(elements), total, shown)


def _chunks_within(raw: str, language: str, budget_bytes: int) -> tuple[list[dict[str, Any]], int]:
    """Code-block elements for ``raw`` from its start, as many as fit; and the characters
    of ``raw`` they cover."""
    chunks: list[dict[str, Any]] = []
    used = 0
    covered = 0
    for piece in _pieces(raw):
        element = _markdown(f"args_{len(chunks)}", _code_block(piece, language))
        size = _json_bytes(element)
        if used + size > budget_bytes:
            # Fill what is left with the start of this piece, so a long single line still
            # shows as much as fits.
            fitted = _fit(piece, language, budget_bytes - used, len(chunks))
            if fitted is not None:
                chunks.append(fitted[0])
                covered += fitted[1]
            break
        chunks.append(element)
        used += size
        covered += len(piece)
    return chunks, covered


def _pieces(raw: str) -> list[str]:
    """``raw`` cut into consecutive pieces of at most CHUNK_CHARS, at line ends when one is
    near; joined, they are ``raw`` again."""
    pieces: list[str] = []
    start = 0
    while start < len(raw):
        end = min(len(raw), start + CHUNK_CHARS)
        if end < len(raw):
            newline = raw.rfind("\n", start + CHUNK_CHARS // 2, end)
            if newline != -1:
                end = newline + 1
        pieces.append(raw[start:end])
        start = end
    return pieces


def _fit(piece: str, language: str, room: int, index: int) -> tuple[dict[str, Any], int] | None:
    """The longest start of ``piece`` whose element fits in ``room`` bytes (binary search)."""
    low, high, best = 1, len(piece) - 1, None
    while low <= high:
        middle = (low + high) // 2
        element = _markdown(f"args_{index}", _code_block(piece[:middle], language))
        if _json_bytes(element) <= room:
            best, low = (element, middle), middle + 1
        else:
            high = middle - 1
    return best


def _hidden_note(hidden: int, total: int, console_url: str | None) -> str:
    lead = (
        f"⚠️ **{hidden:,} of {total:,} characters are not shown** on this card "
        "(a card holds about 30 KB)."
    )
    if console_url:
        return f"{lead} Read the whole call before deciding: [web console]({console_url})."
    if console_url == "":
        return f"{lead} Read the whole call before deciding in the web console (Approvals)."
    return (
        f"{lead} The web console is off, so nobody can read the whole call: it cannot be "
        "approved from this card. Deny it, or ask the operator to set LARKGATE_CONSOLE_TOKEN."
    )


def _code_block(text: str, language: str) -> str:
    shown = visible(text, keep="\n\t")
    # Neither a fence nor a mention can be written from inside the block.
    shown = _FENCE_RUN.sub(lambda match: "ˋ" * len(match.group()), shown)
    shown = _AT_TAG.sub("<\u200b", shown)
    return f"```{language}\n{shown.rstrip(chr(10)) or '(none)'}\n```"


def visible(text: str, keep: str = "") -> str:
    """Control, format and separator characters as ``\\uXXXX`` so they can be seen."""
    return "".join(
        f"\\u{ord(ch):04x}" if ch not in keep and unicodedata.category(ch) in _HIDDEN else ch
        for ch in text
    )


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())
