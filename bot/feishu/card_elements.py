"""The Card 2.0 elements every card of the bot is built from, written once."""

from __future__ import annotations

from typing import Any


def markdown(element_id: str, content: str, *, size: str | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {"tag": "markdown", "element_id": element_id, "content": content}
    if size:
        element["text_size"] = size
    return element


def footer(text: str) -> dict[str, Any]:
    """Plain text in small grey type: shown as it is."""
    return {
        "tag": "div",
        "element_id": "footer",
        "text": {
            "tag": "plain_text",
            "content": text,
            "text_size": "notation",
            "text_color": "grey",
        },
    }
