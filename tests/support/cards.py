"""Walking a Feishu card's JSON (schema 2.0 or 1.0): its objects, texts and buttons."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

TEXT_TAGS = ("markdown", "plain_text")


def nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in the card, depth first (a node before what it holds)."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from nodes(item)


def buttons(card: Any) -> list[dict[str, Any]]:
    """The card's button elements, in order."""
    return [node for node in nodes(card) if node.get("tag") == "button"]


def callback_values(card: Any) -> list[dict[str, Any]]:
    """The ``value`` of every behavior in the card (what a click sends back), in order."""
    return [behavior["value"] for node in nodes(card) for behavior in node.get("behaviors") or []]


def button_values(card: Any) -> dict[str, dict[str, Any]]:
    """Button label -> the value its one callback behavior sends, as a page finds them."""
    found: dict[str, dict[str, Any]] = {}
    for button in buttons(card):
        (behavior,) = [b for b in button["behaviors"] if b["type"] == "callback"]
        found[button["text"]["content"]] = behavior["value"]
    return found


def texts(card: Any) -> list[str]:
    """The content of every markdown and plain_text object, in order."""
    return [
        node["content"]
        for node in nodes(card)
        if node.get("tag") in TEXT_TAGS and isinstance(node.get("content"), str)
    ]
