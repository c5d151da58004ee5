"""The authorisation card: a person is asked to let the bot act as them in Feishu.

One card per request, rewritten in place when the request ends. ``pending`` says what the
bot wants to do (the purpose), the permissions it asks for, and has one button that opens
Feishu's consent page (the authorization code flow) or Feishu's verification page with the
code to confirm (the device flow); it says that only the person named may consent, and
until when. ``authorised``, ``expired``, ``cancelled`` and ``refused`` have no button and a
line saying what happened.

Everything from outside (the purpose comes from a tool, notes from Feishu) is shown as
escaped inline text; scopes are code spans. The button opens a URL, it sends no callback:
the consent comes back through Feishu (our OAuth callback, or the poll), never a click.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from .approval_arguments import visible
from .approval_card import escape_markdown, format_time, mention
from .card_elements import footer as _footer
from .card_elements import markdown as _markdown

CardState = Literal["pending", "authorised", "expired", "cancelled", "refused"]
Flow = Literal["code", "device"]

PURPOSE_CHARS = 300
NOTE_CHARS = 300
SCOPES_SHOWN = 20
_SCOPE = re.compile(r"[A-Za-z0-9:._-]{1,100}")

_HEADERS: dict[str, tuple[str, str]] = {
    "pending": ("Authorisation needed", "orange"),
    "authorised": ("Authorised", "green"),
    "expired": ("Authorisation expired", "grey"),
    "cancelled": ("Authorisation cancelled", "grey"),
    "refused": ("Authorisation refused", "red"),
}


@dataclass(frozen=True, slots=True)
class AuthorizationCardView:
    request_id: str
    open_id: str  # who must consent
    purpose: str  # what the bot wants to do, e.g. "list your tasks"
    scopes: tuple[str, ...]
    expires_at: float
    flow: Flow = "code"
    state: CardState = "pending"
    url: str = ""  # the consent (or verification) page; pending cards only
    user_code: str = ""  # the device flow's code to confirm on that page
    decided_at: float | None = None
    note: str | None = None
    timezone: str = "UTC"


def authorization_card(view: AuthorizationCardView) -> dict[str, Any]:
    """The card (JSON 2.0) for ``view``: post it pending, PATCH it when the request ends."""
    title, template = _HEADERS.get(view.state, ("Authorisation closed", "grey"))
    elements = [
        _markdown("purpose", _purpose(view)),
        _markdown("scopes", _scopes(view.scopes)),
    ]
    if view.state == "pending":
        elements.append(_markdown("how", _how(view)))
        if view.url:
            elements.append(_button(view.url, view.flow))
    else:
        elements.append(_markdown("outcome", _outcome(view)))
    elements.append(_footer(f"Request ID: {view.request_id}"))
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": title}},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "subtitle": {"tag": "plain_text", "content": "Act as you in Feishu"},
            "template": template,
        },
        "body": {"direction": "vertical", "elements": elements},
    }


def _purpose(view: AuthorizationCardView) -> str:
    purpose = _inline(view.purpose, PURPOSE_CHARS) or "use your Feishu data"
    return (
        f"{mention(view.open_id)} To **{purpose}**, I need to act as you in Feishu, with "
        "your own permissions (not the bot's)."
    )


def _scopes(scopes: tuple[str, ...]) -> str:
    shown = [s for s in scopes if _SCOPE.fullmatch(s)][:SCOPES_SHOWN]
    lines = [f"- `{scope}`" for scope in shown]
    hidden = len(scopes) - len(shown)
    if hidden:
        lines.append(f"- and {hidden} more")
    lines.append("- `offline_access` (so that you need not do this again every two hours)")
    return "**Permissions asked**\n" + "\n".join(lines)


def _how(view: AuthorizationCardView) -> str:
    until = format_time(view.expires_at, view.timezone)
    who = mention(view.open_id)
    if view.flow == "device":
        code = _inline(view.user_code, 40)
        confirm = f" and confirm the code **{code}**" if code else ""
        step = f"Open Feishu's page{confirm}."
    else:
        step = "Press the button and agree on Feishu's page."
    return (
        f"{step} Only {who} can authorise this; anyone else is refused. The request waits "
        f"until {until}, and I carry on by myself once you agree. `/logout` takes it back."
    )


def _outcome(view: AuthorizationCardView) -> str:
    at = f" at {format_time(view.decided_at, view.timezone)}" if view.decided_at else ""
    note = _inline(view.note or "", NOTE_CHARS)
    tail = f": {note}" if note else ""
    if view.state == "authorised":
        return f"✅ Authorised by {mention(view.open_id)}{at}. Carrying on."
    if view.state == "expired":
        until = format_time(view.expires_at, view.timezone)
        return f"⌛ Expired at {until}: nobody authorised in time. Nothing was done as you."
    if view.state == "cancelled":
        return f"⏹ Cancelled{at}{tail}"
    if view.state == "refused":
        return f"⛔ Refused{at}{tail}"
    return f"⏹ Closed{at}{tail}"


def _button(url: str, flow: Flow) -> dict[str, Any]:
    label = "Open Feishu to authorise" if flow == "device" else "Authorise in Feishu"
    return {
        "tag": "button",
        "element_id": "btn_authorise",
        "type": "primary_filled",
        "text": {"tag": "plain_text", "content": label},
        "behaviors": [{"type": "open_url", "default_url": url}],
    }


def _inline(text: str, limit: int) -> str:
    flat = visible(" ".join(text.split()))
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return escape_markdown(flat)
