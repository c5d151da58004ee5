"""The admin card: read-only mode at a glance, with one button to toggle it.

A pure function of a small view model, like the approval card. The button carries
``admin_button_value("read_only", "on"|"off", version)`` plus the seal governance computed
over it: the version the card was rendered for, so a stale card cannot switch a newer state,
and a seal, so only a value this bot wrote switches anything. Turning read-only on asks for
confirmation first, turning it off does not. The card says when the mode last changed with
the date, since that may be days ago.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .approval_card import format_time, mention, mentions
from .card_elements import markdown as _markdown

ADMIN_ACTION = "admin"  # the "action" field of every admin button value
READ_ONLY_SETTING = "read_only"

MODE_ON = "Read-only mode: **on** — write tools are disabled for everyone"
MODE_OFF = "Read-only mode: **off** — tools that write need approval as configured"
ADMINS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class AdminCardView:
    read_only: bool
    changed_by: str | None = None  # open_id of who last toggled
    changed_at: float | None = None
    admins: tuple[str, ...] = ()
    timezone: str = "UTC"
    # Card markdown written by our code (it may hold mentions), shown at the top after a
    # toggle, e.g. "Read-only mode turned on by <at id=ou_x></at>". Not escaped.
    notice: str | None = None
    version: int = 0  # the mode's version this card shows (the toggle acts only on it)
    seal: str = ""  # the seal of the toggle's value (bot.governance.seal)
    # The agent profiles: (name, where it is used), as larkgate.toml routes chats.
    profiles: tuple[tuple[str, tuple[str, ...]], ...] = ()


def admin_button_value(setting: str, value: str, version: int) -> dict[str, str | int]:
    """The callback value of an admin button (``action.value`` in the click event), before
    its seal is added."""
    return {"action": ADMIN_ACTION, "setting": setting, "value": value, "version": version}


def admin_card(view: AdminCardView) -> dict[str, Any]:
    """The admin card (JSON 2.0): post it for the admin command, return it after a toggle."""
    state = "on" if view.read_only else "off"
    elements: list[dict[str, Any]] = []
    if view.notice:
        elements.append(_markdown("notice", view.notice))
    elements.append(_markdown("mode", MODE_ON if view.read_only else MODE_OFF))
    elements.append(_markdown("changed", _changed(view)))
    admins = mentions(view.admins, shown=ADMINS_SHOWN) if view.admins else "none configured"
    elements.append(_markdown("admins", f"**Admins** {admins}"))
    if view.profiles:
        elements.append(_markdown("profiles", _profiles(view.profiles)))
    elements.append(_toggle(view))
    return {
        "schema": "2.0",
        "config": {
            "update_multi": True,
            "summary": {"content": f"larkgate admin: read-only mode {state}"},
        },
        "header": {
            "title": {"tag": "plain_text", "content": "larkgate admin"},
            "subtitle": {"tag": "plain_text", "content": f"Read-only mode is {state}"},
            "template": "red" if view.read_only else "blue",
        },
        "body": {"direction": "vertical", "elements": elements},
    }


def _profiles(profiles: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    lines = ["**Agent profiles** (larkgate.toml)"]
    for name, used in profiles:
        lines.append(f"- **{name}**: {', '.join(used) if used else 'no chat is routed to it'}")
    return "\n".join(lines)


def _changed(view: AdminCardView) -> str:
    if view.changed_by is None and view.changed_at is None:
        return "Last changed: never (this is the configured setting)"
    text = "Last changed"
    if view.changed_by:
        text += f" by {mention(view.changed_by)}"
    if view.changed_at is not None:
        text += f" on {format_time(view.changed_at, view.timezone, date=True)}"
    return text


def _toggle(view: AdminCardView) -> dict[str, Any]:
    read_only = view.read_only
    value: dict[str, Any] = admin_button_value(
        READ_ONLY_SETTING, "off" if read_only else "on", view.version
    )
    if view.seal:
        value["seal"] = view.seal
    button: dict[str, Any] = {
        "tag": "button",
        "element_id": "btn_read_only",
        "type": "primary" if read_only else "danger",
        "text": {
            "tag": "plain_text",
            "content": "Turn read-only off" if read_only else "Turn read-only on",
        },
        "behaviors": [{"type": "callback", "value": value}],
    }
    if not read_only:
        button["confirm"] = {
            "title": {"tag": "plain_text", "content": "Turn read-only mode on?"},
            "text": {
                "tag": "plain_text",
                "content": "Tools that write will be disabled for everyone "
                "until an admin turns read-only mode off.",
            },
        }
    return button
