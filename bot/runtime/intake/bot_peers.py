"""Messages from other bots: answered only when asked, and never in an endless loop.

A bot's message is answered only when all of these hold (else it is ignored, as every bot
message was before):

- its sender is one of ``LARKGATE_ACCEPT_BOTS`` (by the open_id this app sees for it) and
  is not this bot itself;
- it mentions this bot by open_id (``mentions_bot``: never by name, never @all);
- it is in a group (a bot's direct message is not a question from a person).

Two bots that mention each other would answer each other forever: the count of bots'
messages in a row in a chat's thread (``bot/store/bot_hops.py``, shared by every process)
is capped at ``LARKGATE_BOT_HOPS``. Past it the bot stays silent and says so in the chat
once; a person's message there starts the count over. With no bot accepted nothing is counted:
a person's message then costs nothing more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.conversations.scope import in_app
from bot.feishu.events import InboundMessage
from bot.store.bot_hops import BotHopsStore

logger = logging.getLogger(__name__)

LOOP_CUTOFF = (
    "I have stopped answering bots in this conversation: {hops} bot messages in a row "
    "without a person in between. Write here to let us go on."
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``answer``: run it; else ``reason`` (logged), and ``tell`` the chat of the cutoff."""

    answer: bool
    reason: str = ""
    tell: str | None = None


class BotPeers:
    def __init__(
        self, accepted: frozenset[str], store: BotHopsStore, *, max_hops: int, app: str = ""
    ) -> None:
        self._accepted = accepted
        self._store = store
        self._max_hops = max_hops
        self._app = app

    @property
    def on(self) -> bool:
        return bool(self._accepted)

    def refusal(self, message: InboundMessage, bot_open_id: str) -> str | None:
        """Why a bot's message is not for this bot (None: it is); for a person's, None."""
        if message.sender_type == "user":
            return None
        sender = message.sender_open_id
        if not sender or sender == bot_open_id:
            return "sent by this bot" if sender else "sent by a bot without an open_id"
        if sender not in self._accepted:
            return f"sent by a {message.sender_type or 'non-user'} not in LARKGATE_ACCEPT_BOTS"
        if message.chat_type == "p2p":
            return "a bot's direct message"
        if not message.mentions_bot:
            return "a bot's message that does not mention this bot"
        return None

    async def count(self, message: InboundMessage) -> Verdict:
        """Counts the message in its thread's run of bot messages (when bots are accepted
        at all); whether it may be answered."""
        if not self.on or message.chat_type == "p2p":  # no bot is answered in a DM
            return Verdict(True)
        # By chat and thread, not by conversation: where each sender has a conversation of
        # their own (chat_sender scopes), a person's message would never end a bot's run.
        # Two of the deployment's apps in one group count their own bots' turns.
        scope_key = in_app(self._app, f"{message.chat_id}/{message.thread_id or message.root_id}")
        if message.sender_type == "user":
            await self._store.from_person(scope_key)
            return Verdict(True)
        hops = await self._store.from_bot(scope_key)
        if hops <= self._max_hops:
            return Verdict(True)
        reason = f"{hops} bot messages in a row (LARKGATE_BOT_HOPS={self._max_hops})"
        tell = None
        if await self._store.claim_telling(scope_key):
            tell = LOOP_CUTOFF.format(hops=self._max_hops)
        return Verdict(False, reason, tell)
