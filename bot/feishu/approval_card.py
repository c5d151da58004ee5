"""The approval card: what approvers see, as a pure function of a small view model.

One card per approval, rewritten in place as the approval moves on: ``pending`` has
up to three buttons (approve, approve for this person here, deny); ``approved``,
``denied``, ``expired`` and ``cancelled`` have none, a header colour per state and a line
saying what happened, who acted and when. Every button carries
``button_value(approval_id, decision)``, so a click is routed without other state (and
governance checks that the click came from this approval's own card).

Text from outside is data, never markdown. The arguments are shown whole (see
:mod:`bot.feishu.approval_arguments`): in code blocks they cannot close, in a collapsible
panel when long, and when even that cannot hold them, with exactly how much is not shown
and where to read it all; a call nobody can read whole has no approve buttons. Inline text
(the model's reason, notes) is flattened to one line and HTML-escaped, which Feishu
markdown shows literally (``&#42;`` is ``*``). Invisible and control characters show as
``\\uXXXX``, so a bidi override cannot disguise what a call does. Mentions are made only
from well-formed open_ids, never ``all``.

The helpers ``mention``, ``format_time`` and ``escape_markdown`` are shared with
:mod:`bot.feishu.admin_card`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from bot.approval_states import ApprovalState
from bot.timezones import UnknownTimeZone, time_zone

from .approval_arguments import ShownArguments, arguments_elements, visible
from .card_elements import footer as _footer
from .card_elements import markdown as _markdown

APPROVAL_ACTION = "approval"  # the "action" field of every approval button value
DECISIONS = ("approve", "approve_session", "deny")

REASON_CHARS = 500
NOTE_CHARS = 200
TOOL_CHARS = 100
APPROVERS_SHOWN = 10
# A session grant covers the requester, the tool and the conversation: the label says whom.
SESSION_LABEL = "Approve for this person here"
# A call several people asked for (their messages are in one reply) grants it to each.
SESSION_LABEL_SEVERAL = "Approve for these people here"

_HEADERS: dict[str, tuple[str, str]] = {
    "pending": ("Approval needed", "orange"),
    "approved": ("Approved", "green"),
    "denied": ("Denied", "red"),
    "expired": ("Expired", "grey"),
    "cancelled": ("Cancelled", "grey"),
}
_OPEN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_AT_TAG = re.compile(r"<(?=/?at\b)", re.IGNORECASE)
_MARKDOWN_ESCAPES = str.maketrans(
    {ch: f"&#{ord(ch)};" for ch in "&<>*_~`[]|\\"},
)


@dataclass(frozen=True, slots=True)
class ApprovalCardView:
    approval_id: str
    tool: str
    arguments: str  # the whole arguments, readable (plain text, may be multi-line JSON)
    requester: str  # open_id of who started the run that asked
    reason: str | None  # the model's stated reason, if any
    approvers: tuple[str, ...]  # open_ids who may decide
    expires_at: float  # epoch seconds
    state: ApprovalState = "pending"
    decided_by: str | None = None  # open_id; None when the system expired/cancelled it
    decided_at: float | None = None
    session: bool = False  # approved for the rest of the conversation (same tool)
    note: str | None = None  # e.g. "the run was stopped", "the bot restarted"
    timezone: str = "UTC"  # IANA zone used to show times
    # Where the whole call can be read when the card cannot hold it: the console's URL, ""
    # (the console is on, its address unknown) or None (no console).
    console_url: str | None = None
    session_grants: bool = True  # offer "approve for this person here"
    # The tool acts as the requester (their own Feishu user token, not the bot's): the card
    # says so, "as <requester>".
    acts_as_user: bool = False
    # Everyone whose message is in the run that asked, ``requester`` first; () when the
    # requester asked alone. The card names them all: the call is for each of them.
    requesters: tuple[str, ...] = ()
    # The agent profile of the run that asked (larkgate.toml), None for the default agent.
    profile: str | None = None

    @property
    def askers(self) -> tuple[str, ...]:
        return self.requesters or (self.requester,)

    @property
    def several(self) -> bool:
        return len(self.askers) > 1


def button_value(approval_id: str, decision: str) -> dict[str, str]:
    """The callback value of an approval button (``action.value`` in the click event)."""
    return {"action": APPROVAL_ACTION, "decision": decision, "approval_id": approval_id}


def approval_card(view: ApprovalCardView) -> dict[str, Any]:
    """The card (JSON 2.0) for ``view``: post it when pending, PATCH it on every change."""
    tool = _clip(visible(" ".join(view.tool.split())), TOOL_CHARS) or "(unnamed tool)"
    tool = _AT_TAG.sub("<\u200b", tool)
    title, template = _HEADERS.get(view.state, ("Closed", "grey"))
    if view.state == "approved" and view.session:
        title = (
            "Approved for these people here" if view.several else "Approved for this person here"
        )
    subtitle = f"{tool} as the requester" if view.acts_as_user else tool
    shown = shown_arguments(view)
    elements = [
        _markdown("facts", _facts(view, tool)),
        *shown.elements,
        _markdown("people", _people(view)),
    ]
    if view.state == "pending":
        if view.note:
            elements.append(_markdown("note", f"ℹ️ {_inline(view.note, NOTE_CHARS)}"))
        approvable = approvable_from_card(view, shown)
        if approvable and view.session_grants:
            elements.append(_markdown("session_note", _session_note(view, tool)))
        session_label = SESSION_LABEL_SEVERAL if view.several else SESSION_LABEL
        elements.append(_buttons(view.approval_id, approvable, view.session_grants, session_label))
    else:
        elements.append(_markdown("decision", _decision(view)))
    elements.append(_footer(f"Approval ID: {view.approval_id}"))
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": f"{title}: {_clip(tool, 60)}"}},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "subtitle": {"tag": "plain_text", "content": subtitle},
            "template": template,
        },
        "body": {"direction": "vertical", "elements": elements},
    }


def shown_arguments(view: ApprovalCardView) -> ShownArguments:
    """How the card shows the call's arguments (whole, or how much is not shown)."""
    return arguments_elements(view.arguments, console_url=view.console_url)


def approvable_from_card(view: ApprovalCardView, shown: ShownArguments | None = None) -> bool:
    """Whether the card may offer Approve: only when someone can read the whole call (on
    the card, or in the console it links)."""
    shown = shown if shown is not None else shown_arguments(view)
    return shown.complete or view.console_url is not None


# -- shared with the admin card ------------------------------------------------------------


def mention(open_id: str) -> str:
    """``<at id=…></at>`` for a well-formed open_id; anything else as escaped text."""
    if _OPEN_ID.fullmatch(open_id) and open_id.lower() != "all":
        return f"<at id={open_id}></at>"
    return _inline(open_id, 64) or "(unknown)"


def mentions(open_ids: tuple[str, ...], *, shown: int = APPROVERS_SHOWN) -> str:
    text = " ".join(mention(open_id) for open_id in open_ids[:shown])
    if len(open_ids) > shown:
        text += f" and {len(open_ids) - shown} more"
    return text


def people(open_ids: tuple[str, ...], *, shown: int = APPROVERS_SHOWN) -> str:
    """``A``, ``A and B``, ``A, B and C`` as mentions (past ``shown``: "and N more")."""
    named = [mention(open_id) for open_id in open_ids[:shown]]
    if len(open_ids) > shown:
        named.append(f"{len(open_ids) - shown} more")
    if len(named) <= 1:
        return "".join(named)
    return f"{', '.join(named[:-1])} and {named[-1]}"


def format_time(epoch: float, timezone: str, *, date: bool = False) -> str:
    """``HH:MM (zone)`` (``YYYY-MM-DD HH:MM (zone)`` with ``date``), markdown-safe.

    An unknown zone shows UTC rather than failing: the card must still render.
    """
    zone, name = _zone(timezone)
    try:
        moment = datetime.fromtimestamp(epoch, zone)
    except (OverflowError, OSError, ValueError):
        return "(unknown time)"
    shown = moment.strftime("%Y-%m-%d %H:%M" if date else "%H:%M")
    return f"{shown} ({escape_markdown(name)})"


def escape_markdown(text: str) -> str:
    """``text`` with the characters card markdown acts on as HTML entities."""
    return text.translate(_MARKDOWN_ESCAPES)


def _inline(text: str, limit: int) -> str:
    """Outside text for one markdown line: flattened, visible, cut, then escaped."""
    return escape_markdown(_clip(visible(" ".join(text.split())), limit))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _zone(name: str) -> tuple[tzinfo, str]:
    try:
        return time_zone(name), name
    except UnknownTimeZone:  # settings validate it; a card still renders in UTC
        return UTC, "UTC"


# -- the parts of the card -----------------------------------------------------------------


def _facts(view: ApprovalCardView, tool: str) -> str:
    lines = [f"**Requested by** {people(view.askers)}"]
    reason = _inline(view.reason or "", REASON_CHARS)
    if reason:
        lines.append(f"**Reason** {reason}")
    # A code span shows its content literally; only a backtick could end it early.
    lines.append(f"**Tool** `{tool.replace('`', 'ʼ')}`")
    if view.acts_as_user and view.several:
        # A tool acts as a person only in a reply that answers them alone (bot/askers.py).
        lines[-1] += " as the requester"
        lines.append(
            "It runs with the requester's own Feishu account, which is not used while "
            "several people's messages are in this reply: it will not run as anyone."
        )
    elif view.acts_as_user:
        lines[-1] += f" as {mention(view.requester)}"
        lines.append("It runs with their own Feishu account and permissions, not the bot's.")
    if view.profile:  # a name from larkgate.toml: letters, digits, - and _
        lines.append(f"**Agent** {view.profile} (this chat's profile)")
    return "\n".join(lines)


def _people(view: ApprovalCardView) -> str:
    lines = []
    if view.approvers:
        lines.append(f"**Approvers** {mentions(view.approvers)}")
    if view.state == "pending":
        lines.append(f"⏳ Expires at {format_time(view.expires_at, view.timezone)}")
    return "\n".join(lines) or "**Approvers** (none listed)"


def _decision(view: ApprovalCardView) -> str:
    by = f" by {mention(view.decided_by)}" if view.decided_by else ""
    at = f" at {format_time(view.decided_at, view.timezone)}" if view.decided_at is not None else ""
    note = _inline(view.note or "", NOTE_CHARS)
    if view.state == "cancelled":
        return f"⏹ Cancelled{by}{at}" + (f": {note}" if note else "")
    if view.state == "approved":
        what = (
            f"✅ Approved for {people(view.askers)} in this conversation"
            if view.session
            else "✅ Approved"
        )
        line = f"{what}{by}{at}"
    elif view.state == "denied":
        line = f"❌ Denied{by}{at}"
    elif view.state == "expired":
        when = format_time(view.expires_at, view.timezone)
        line = f"⌛ Expired at {when} (no decision within the time limit)"
    else:  # a state this card does not know: show it closed, never clickable
        line = f"⏹ Closed ({_inline(str(view.state), 40)}){by}{at}"
    return f"{line} — {note}" if note else line


def _session_note(view: ApprovalCardView, tool: str) -> str:
    code = f"`{tool.replace('`', 'ʼ')}`"
    if view.several:
        return (
            f"**{SESSION_LABEL_SEVERAL}**: later {code} calls in this conversation run "
            f"without asking, until `/reset`, when asked only by {people(view.askers)} (any "
            "of them, alone or together). A call anyone else asks for too still gets a card."
        )
    return (
        f"**{SESSION_LABEL}**: later {code} calls asked by "
        f"{mention(view.requester)} in this conversation run without asking, until `/reset`. "
        "Anyone else still gets a card."
    )


def _buttons(
    approval_id: str, approvable: bool, session_grants: bool, session_label: str = SESSION_LABEL
) -> dict[str, Any]:
    buttons = []
    if approvable:
        buttons.append(("btn_approve", "Approve", "primary_filled", "approve"))
        if session_grants:
            buttons.append(("btn_session", session_label, "default", "approve_session"))
    buttons.append(("btn_deny", "Deny", "danger", "deny"))
    return {
        "tag": "column_set",
        "element_id": "actions",
        "flex_mode": "flow",
        "horizontal_spacing": "8px",
        "columns": [
            {
                "tag": "column",
                "width": "auto",
                "elements": [
                    {
                        "tag": "button",
                        "element_id": element_id,
                        "type": kind,
                        "text": {"tag": "plain_text", "content": label},
                        "behaviors": [
                            {"type": "callback", "value": button_value(approval_id, decision)}
                        ],
                    }
                ],
            }
            for element_id, label, kind, decision in buttons
        ],
    }
