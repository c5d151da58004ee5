"""The /memory card: what the bot remembers for the viewer (in a direct message) or for the
group (in a group), each with a Forget button for those the viewer may forget, and the
confirmation of ``/memory clear``.

A pure function of a view model. A button's value names the memory and where the card was
drawn (the runtime seals it); who pressed it is checked again when the click arrives.
Memories are shown as quotations (``escape_markdown``): a memory that holds markdown or an
@mention shows as text and notifies nobody.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .approval_card import escape_markdown
from .card_elements import markdown as _markdown

MEMORY_ACTION = "memory"  # the "action" field of every memory-card button value
SHOWN = 30  # a card has an element budget: beyond this, the console lists them all


@dataclass(frozen=True, slots=True)
class MemoryRow:
    memory_id: str
    text: str
    whose: str  # "yours", "this group's", "everyone's"
    stored: str  # "Thu 3 Dec 09:00"
    can_forget: bool
    button: Mapping[str, Any] | None = None  # the Forget button's value, sealed


def forget_value(memory_id: str, *, drawn_in: str) -> dict[str, Any]:
    return {"action": MEMORY_ACTION, "op": "forget", "memory_id": memory_id, "chat": drawn_in}


def clear_value(owner: str, *, drawn_in: str) -> dict[str, Any]:
    return {"action": MEMORY_ACTION, "op": "clear", "owner": owner, "chat": drawn_in}


def memory_card(
    rows: Sequence[MemoryRow], *, title: str, notice: str = "", empty: str = ""
) -> dict[str, Any]:
    elements: list[dict[str, Any]] = []
    if notice:
        elements.append(_markdown("notice", escape_markdown(notice)))
    if not rows:
        elements.append(_markdown("empty", empty or "Nothing remembered. Ask me to remember."))
    for index, row in enumerate(rows[:SHOWN]):
        line = f"> {escape_markdown(row.text)}\n{row.whose} · {row.stored} · `{row.memory_id}`"
        elements.append(_markdown(f"memory_{index}", line))
        if row.can_forget and row.button is not None:
            elements.append(_button(f"forget_{index}", "Forget", row.button, row.text))
    if len(rows) > SHOWN:
        elements.append(_markdown("more", f"… and {len(rows) - SHOWN} more."))
    return _card(title, elements)


def clear_card(count: int, button: Mapping[str, Any], *, notice: str = "") -> dict[str, Any]:
    """The confirmation of /memory clear: one button, for the person it was drawn for."""
    if notice:
        return _card("Forget everything?", [_markdown("notice", escape_markdown(notice))])
    text = f"Forget all {count} memories I keep for you? This cannot be undone."
    elements = [_markdown("ask", text)]
    if count:
        elements.append(_button("clear", f"Forget all {count}", button, None))
    return _card("Forget everything?", elements)


def _card(title: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": title}},
        "header": {"title": {"tag": "plain_text", "content": title}, "template": "purple"},
        "body": {"direction": "vertical", "elements": elements},
    }


def _button(
    element_id: str, label: str, value: Mapping[str, Any], confirm: str | None
) -> dict[str, Any]:
    button: dict[str, Any] = {
        "tag": "button",
        "element_id": element_id,
        "type": "danger",
        "size": "small",
        "text": {"tag": "plain_text", "content": label},
        "behaviors": [{"type": "callback", "value": dict(value)}],
    }
    if confirm is not None:
        button["confirm"] = {
            "title": {"tag": "plain_text", "content": "Forget this?"},
            "text": {"tag": "plain_text", "content": confirm[:200]},
        }
    return button
