"""The /schedules card: a person's scheduled tasks (an admin's: everyone's), each with a
Cancel button for those the viewer may cancel. In a group it shows only that chat's tasks
and counts the others (which tasks: ``bot.runtime.schedules.views``).

A pure function of a view model. The button's value names the task and where the card was
drawn (the runtime seals it); who pressed it is checked again when the click arrives (the
card may be forwarded), and the task's state is re-read then too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .approval_card import escape_markdown
from .card_elements import markdown as _markdown

SCHEDULE_ACTION = "schedule"  # the "action" field of every schedules-card button value
SHOWN = 30  # a card has an element budget: beyond this, the console lists them all


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    task_id: str
    name: str
    schedule: str  # in words
    next_run: str  # "Fri 4 Dec 09:00" or "none"
    last_run: str  # "never run" or "Thu 3 Dec 09:00: ok"
    state: str  # active | paused | cancelled | done
    can_cancel: bool
    creator: str = ""  # shown to admins
    # The Cancel button's value (``cancel_value``, sealed by the runtime); None: unsealed.
    button: Mapping[str, Any] | None = None


def cancel_value(task_id: str, *, drawn_in: str = "", private: bool = False) -> dict[str, Any]:
    """A Cancel button's value: the task, and the chat the card was drawn in and whether
    that is a direct message (the redraw after the click shows what that chat may see)."""
    return {
        "action": SCHEDULE_ACTION,
        "op": "cancel",
        "task_id": task_id,
        "chat": drawn_in,
        "private": private,
    }


def schedules_card(
    rows: Sequence[ScheduleRow],
    *,
    everyone: bool = False,
    notice: str = "",
    in_group: bool = False,
    elsewhere: str = "",
) -> dict[str, Any]:
    """The card (JSON 2.0). ``everyone``: an admin's view, with each task's creator;
    ``in_group``: the view of one group chat, whose other tasks ``elsewhere`` counts."""
    elements: list[dict[str, Any]] = []
    if notice:
        elements.append(_markdown("notice", notice))
    if not rows:
        elements.append(_markdown("empty", "No scheduled tasks. Ask me to schedule one."))
    for index, row in enumerate(rows[:SHOWN]):
        elements.append(_markdown(f"task_{index}", _describe(row, everyone)))
        if row.can_cancel and row.state in ("active", "paused"):
            elements.append(_cancel_button(index, row))
    if len(rows) > SHOWN:
        more = f"… and {len(rows) - SHOWN} more (the web console lists them all)."
        elements.append(_markdown("more", more))
    if elsewhere:
        elements.append(_markdown("elsewhere", escape_markdown(elsewhere)))
    title = "Scheduled tasks" + (" in this chat" if in_group else "")
    title += " (everyone's)" if everyone else ""
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": title}},
        "header": {"title": {"tag": "plain_text", "content": title}, "template": "blue"},
        "body": {"direction": "vertical", "elements": elements},
    }


def _describe(row: ScheduleRow, everyone: bool) -> str:
    state = "" if row.state == "active" else f" · **{row.state}**"
    who = f" · by <at id={row.creator}></at>" if everyone and row.creator else ""
    return (
        f"**{escape_markdown(row.name)}**{state}{who}\n"
        f"{escape_markdown(row.schedule)} · next: {row.next_run} · {escape_markdown(row.last_run)}"
        f"\n`{row.task_id}`"
    )


def _cancel_button(index: int, row: ScheduleRow) -> dict[str, Any]:
    return {
        "tag": "button",
        "element_id": f"cancel_{index}",
        "type": "danger",
        "size": "small",
        "text": {"tag": "plain_text", "content": "Cancel"},
        "behaviors": [{"type": "callback", "value": dict(row.button or cancel_value(row.task_id))}],
        "confirm": {
            "title": {"tag": "plain_text", "content": "Cancel this scheduled task?"},
            "text": {"tag": "plain_text", "content": row.name[:200]},
        },
    }
