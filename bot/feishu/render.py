"""Markdown answers as Feishu cards (JSON 2.0) that render correctly and fit the limits.

A card's markdown component renders headings, lists, code blocks, links and tables,
but silently drops text past a few thousand characters, a card holds about 30 KB of
JSON, and only a few tables render per card. So an answer is split into chunks at
paragraph boundaries (never inside a code block: a split block is closed and
reopened), each chunk is one markdown element, elements are packed into cards under
the size budget, and tables past the per-card limit are shown as preformatted text.
"""

from __future__ import annotations

import json
import re
from typing import Any

ELEMENT_CHARS = 3000
CARD_BYTES = 24_000  # leaves headroom under the ~30 KB card limit for the wrapper
TABLES_PER_CARD = 3

_FENCE = re.compile(r"^\s*(```+|~~~+)")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def answer_cards(markdown: str, *, footer: str | None = None) -> list[dict[str, Any]]:
    """The card(s) that show ``markdown``; continuation cards say they continue."""
    text = markdown.strip() or "(empty answer)"
    chunks = split_markdown(text, ELEMENT_CHARS)
    cards: list[list[str]] = [[]]
    size = 0
    for chunk in chunks:
        chunk_size = len(json.dumps(chunk, ensure_ascii=False).encode())
        if cards[-1] and size + chunk_size > CARD_BYTES:
            cards.append([])
            size = 0
        cards[-1].append(chunk)
        size += chunk_size
    built = []
    for index, card_chunks in enumerate(cards):
        elements = [_markdown(c, f"part_{i}") for i, c in enumerate(_limit_tables(card_chunks))]
        if footer and index == len(cards) - 1:
            elements.append(_markdown(footer, "footer", size="notation"))
        summary = _summary(card_chunks[0]) if index == 0 else "(continued)"
        built.append(_card(elements, summary))
    return built


def notice_card(text: str) -> dict[str, Any]:
    """A one-element card for short bot notices (help, errors, command answers)."""
    return _card([_markdown(text, "notice")], _summary(text))


def split_markdown(text: str, limit: int) -> list[str]:
    """Chunks of at most ``limit`` characters, split between paragraphs or lines."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None
    for line in text.split("\n"):
        pieces = _hard_wrap(line, limit - 8) if len(line) > limit - 8 else [line]
        for piece in pieces:
            if current and size + len(piece) + 1 > limit - (len(fence) + 1 if fence else 0):
                if fence:
                    current.append(fence)
                chunks.append("\n".join(current).strip("\n"))
                current = [fence] if fence else []
                size = len(fence) + 1 if fence else 0
            current.append(piece)
            size += len(piece) + 1
            match = _FENCE.match(piece)
            if match:
                fence = None if fence else match.group(1)
    if current:
        chunks.append("\n".join(current).strip("\n"))
    return [c for c in chunks if c.strip()] or [text[:limit]]


def _hard_wrap(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)] or [""]


def _limit_tables(chunks: list[str]) -> list[str]:
    """Keep the first TABLES_PER_CARD tables of a card; later ones become preformatted."""
    out = []
    seen = 0
    for chunk in chunks:
        text, seen = _degrade_tables(chunk, TABLES_PER_CARD, seen)
        out.append(text)
    return out


def limit_tables(text: str, limit: int) -> str:
    """``text`` with every table after the first ``limit`` shown as preformatted text."""
    return _degrade_tables(text, limit, 0)[0]


def _degrade_tables(text: str, limit: int, seen: int) -> tuple[str, int]:
    lines = text.split("\n")
    result: list[str] = []
    i = 0
    while i < len(lines):
        if _starts_table(lines, i):
            end = i + 2
            while end < len(lines) and _TABLE_ROW.match(lines[end]):
                end += 1
            seen += 1
            table = lines[i:end]
            result.extend(table if seen <= limit else ["```", *table, "```"])
            i = end
        else:
            result.append(lines[i])
            i += 1
    return "\n".join(result), seen


def _starts_table(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and _TABLE_ROW.match(lines[i]) is not None
        and _TABLE_RULE.match(lines[i + 1]) is not None
    )


def _markdown(content: str, element_id: str, *, size: str | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {"tag": "markdown", "element_id": element_id, "content": content}
    if size:
        element["text_size"] = size
    return element


def _card(elements: list[dict[str, Any]], summary: str) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": summary}},
        "body": {"direction": "vertical", "elements": elements},
    }


def _summary(text: str) -> str:
    plain = " ".join(re.sub(r"[#*`>|_\[\]]", "", text).split())
    return plain[:60] + ("…" if len(plain) > 60 else "")
