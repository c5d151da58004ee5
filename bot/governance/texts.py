"""What governance says in the chat, in one place."""

from __future__ import annotations


def mention(open_id: str) -> str:
    """A mention in card markdown (Feishu shows the person's name)."""
    return f"<at id={open_id}></at>"


ADMIN_ONLY = "Only an admin can {what}; admins are set by the bot's operator (LARKGATE_ADMINS)."
NO_ADMINS = (
    "No admins are configured, so nobody can {what}. The bot's operator sets them in "
    "LARKGATE_ADMINS (comma-separated open_ids)."
)
READONLY_USAGE = "Usage: `/readonly on`, `/readonly off` or `/readonly status`."
READONLY_ON = "🔒 Read-only mode is now **on** (turned on by {who}): tools that write are disabled."
READONLY_OFF = "🔓 Read-only mode is now **off** (turned off by {who}): tools that write are back."
READONLY_ALREADY = "Read-only mode is already **{state}**."
READONLY_STATUS = "Read-only mode is **{state}**{since}."

APPROVAL_GONE = "This approval no longer exists."
APPROVAL_NOT_YOURS = "Only the approvers named on the card can decide this approval."
APPROVAL_ALREADY = {
    "approved": "Already approved.",
    "denied": "Already denied.",
    "expired": "This approval has expired.",
    "cancelled": "This approval was cancelled.",
}
APPROVED = "Approved: the tool runs now."
APPROVED_SESSION = "Approved for this person in this conversation."
APPROVAL_READ_ONLY = (
    "Read-only mode is on, so this write cannot run: the approval was cancelled instead."
)
APPROVAL_WRONG_CARD = (
    "This button does not belong to this approval's card. Decide it on its own card."
)
APPROVAL_UNREADABLE = (
    "This call is too long to show on the card and the web console is off, so it cannot be "
    "approved without being read. Deny it, or ask the operator to enable the console."
)
NO_SESSION_GRANTS = "Approving for the whole conversation is switched off here."
CLICK_ALREADY_HANDLED = "This click was already handled."
ADMIN_CARD_STALE = (
    "This card is out of date: read-only mode changed since it was shown. "
    "Here is the current state; press again to switch it."
)
DENIED = "Denied: the tool will not run."
BUTTON_INACTIVE = "This button is no longer active."

RATE_LIMITED = (
    "You are sending messages faster than this bot allows ({limit} a minute). "
    "Please wait a moment and try again."
)
USER_BUDGET_SPENT = (
    "You have used today's budget of {limit:,} tokens, so I cannot answer now. "
    "It resets at midnight ({zone})."
)
GROUP_BUDGET_SPENT = (
    "This group has used today's budget of {limit:,} tokens, so I cannot answer now. "
    "It resets at midnight ({zone})."
)
