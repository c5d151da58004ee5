"""Whether a run may start: one function for a person's message and a scheduled task's firing.

A scheduled task is a message its creator wrote once and the bot sends itself again at
every due time. So each firing passes every check a message passes, in this same function
(the message path and the scheduler both call ``Admission.admit``), and a check added here
later holds for both:

- the group allowlist (``ChatPolicy``): a group taken off it gets no more runs;
- membership: a message's arrival is Feishu's word that its sender and the bot are in the
  chat now. A firing has no such word, so Feishu is asked: the creator must still be in
  the group (a task never runs as someone who left), and so must the bot;
- the budgets (rate limit, daily tokens), for whoever the run is charged to.

Read-only mode is not an admission: every run is offered only the read tools while it is
on, through the same agent factory (``bot/runtime/turn/agents.py``).

What is refused says why. A ``Closed`` chat is closed to the person (not allowed, not a
member, the bot gone): a message is dropped; a task is paused at once and its creator told,
since the next firing would be refused the same. A budget's ``Refusal`` is for now: a
message is answered with it; a firing is recorded as failed and the task tries again at its
next due time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.config import ChatPolicy
from bot.feishu.client import MEMBERS_PER_PAGE, FeishuClient
from bot.feishu.errors import FeishuError
from bot.feishu.events import InboundMessage
from bot.governance.budgets import Budgets, Refusal
from bot.store.schedules import ScheduledTask

logger = logging.getLogger(__name__)

# 2,000 people: a bigger group is not read whole at each firing (every page is an API
# call, and the month's calls are few), so nobody in it is confirmed a member, and its
# tasks do not run.
MAX_MEMBER_PAGES = 20
TOO_BIG = (
    f"the group has more than {MAX_MEMBER_PAGES * MEMBERS_PER_PAGE} members, too many to "
    "confirm at each run that its creator is one of them"
)
# Feishu's answers about the chat itself, from the member list: the bot is not in it
# (232011), no such chat (232006), the chat was dissolved (232009).
BOT_NOT_IN_CHAT = 232011
NO_SUCH_CHAT = frozenset({232006, 232009})


@dataclass(frozen=True, slots=True)
class Entry:
    """Someone who wants a run in a chat: the sender of a message, or a task's creator."""

    person: str
    chat_id: str
    chat_type: str
    # Whether Feishu just delivered this person's message from this chat: its word that
    # they, and the bot, are in it. A scheduled firing has no such word.
    delivered: bool

    @classmethod
    def of_message(cls, message: InboundMessage) -> Entry:
        return cls(message.sender_open_id, message.chat_id, message.chat_type, delivered=True)

    @classmethod
    def of_task(cls, task: ScheduledTask) -> Entry:
        return cls(task.creator, task.chat_id, task.chat_type, delivered=False)

    @property
    def in_group(self) -> bool:
        return self.chat_type != "p2p"


@dataclass(frozen=True, slots=True)
class Closed:
    """The chat is closed to this person, and stays so until someone changes it: a message
    is dropped, a task is paused and its creator told ``text``."""

    text: str


class Admission:
    def __init__(self, policy: ChatPolicy, budgets: Budgets, feishu: FeishuClient) -> None:
        self._policy = policy
        self._budgets = budgets
        # Asked who is in a group when a firing has no message to vouch for it.
        self._feishu = feishu

    async def admit(self, entry: Entry, *, spends: bool) -> Closed | Refusal | None:
        """None when ``entry`` may start a run. ``spends``: the run would be charged to the
        budgets (a question or a firing; a command is not)."""
        closed = await self._closed(entry)
        if closed is not None:
            return closed
        if spends and self._budgets.enabled:
            return await self._budgets.admit(
                sender=entry.person, chat_id=entry.chat_id, chat_type=entry.chat_type
            )
        return None

    async def _closed(self, entry: Entry) -> Closed | Refusal | None:
        if not entry.in_group:
            return None  # a direct message is the person's own
        if not self._policy.group_allowed(entry.chat_id):
            return Closed(f"group {entry.chat_id} is not on the allowlist")
        if entry.delivered:
            return None
        return await self._membership(entry)

    async def _membership(self, entry: Entry) -> Closed | Refusal | None:
        """Whether the person and the bot are in the group now, as Feishu says."""
        if not entry.person:
            return Closed("it has no creator who could be a member of the group")
        page = ""
        try:
            for _ in range(MAX_MEMBER_PAGES):
                members = await self._feishu.chat_members(entry.chat_id, page_token=page)
                if entry.person in members.open_ids:
                    return None
                if not members.next_page:
                    return Closed("its creator is no longer a member of the group")
                page = members.next_page
        except FeishuError as exc:
            if exc.code == BOT_NOT_IN_CHAT:
                return Closed("the bot is no longer in the group")
            if exc.code in NO_SUCH_CHAT:
                return Closed("the group no longer exists")
            # Says nothing about the group (a scope, a rate limit, the network): not run
            # this time, and tried again at the next due time.
            logger.warning("could not read the members of %s: %s", entry.chat_id, exc)
            return Refusal(
                f"Feishu did not say whether its creator is still in the group ({exc.msg})"
            )
        return Closed(TOO_BIG)
