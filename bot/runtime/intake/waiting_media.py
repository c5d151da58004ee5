"""Files and images posted in a group without mentioning the bot, kept for the question.

In a group people drop a file, then ask about it in a later message that mentions the
bot. The file's message is not for the bot (it is dropped like any unaddressed group
message), but its attachments are remembered here, per chat and sender, for a few
minutes; the sender's next question to the bot in that chat reads them.

In memory, per process: with several replicas the question may reach another one, which
then does not see the file (a reply to the file's message always does).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from bot.feishu.content import Attachment
from bot.feishu.events import InboundMessage

KEEP_SECONDS = 600.0
PER_SENDER = 5
SENDERS = 2_000


@dataclass(frozen=True, slots=True)
class Waiting:
    message_id: str
    attachments: tuple[Attachment, ...]
    at: float


class WaitingMedia:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_sender: OrderedDict[tuple[str, str], list[Waiting]] = OrderedDict()

    def keep(self, message: InboundMessage) -> bool:
        """Remember ``message``'s attachments, if it has any; whether it had."""
        readable = tuple(a for a in message.attachments if a.kind in ("image", "file", "audio"))
        if not readable:
            return False
        key = (message.chat_id, message.sender_open_id)
        kept = [w for w in self._by_sender.pop(key, []) if self._fresh(w)]
        kept.append(Waiting(message.message_id, readable, self._clock()))
        self._by_sender[key] = kept[-PER_SENDER:]
        while len(self._by_sender) > SENDERS:
            self._by_sender.popitem(last=False)
        return True

    def take(self, message: InboundMessage) -> tuple[tuple[str, Attachment], ...]:
        """What ``message``'s sender posted in its chat for the bot, oldest first; forgotten
        once taken, so a later question does not read the same files again."""
        kept = self._by_sender.pop((message.chat_id, message.sender_open_id), [])
        return tuple(
            (waiting.message_id, attachment)
            for waiting in kept
            if self._fresh(waiting)
            for attachment in waiting.attachments
        )

    def _fresh(self, waiting: Waiting) -> bool:
        return self._clock() - waiting.at <= KEEP_SECONDS
