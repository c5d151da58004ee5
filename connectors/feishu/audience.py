"""Who will read what a workspace tool reads as the app: the run's chat and its askers.

The app's tenant token sees every chat the bot is in and every document, Base, calendar
and tasklist shared with the app. A person must not see through the bot what Feishu would
not show them, and what the bot answers in a chat is read by everyone in it: in a direct
message, the askers (everyone whose message the run answers); in a group, every member.
Both come from the run's turn (``bot.turn_context.current_turn()``), never from the model's
arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.turn_context import current_turn
from connectors.base import ToolError

DIRECT_CHAT = "p2p"  # Feishu's chat_type of a direct message; anything else is a group


@dataclass(frozen=True, slots=True)
class Audience:
    """Where the run answers, and for whom."""

    chat_id: str
    direct: bool  # a direct message: its askers alone read the answer
    askers: tuple[str, ...]  # open_ids; "" for a sender Feishu did not name

    @property
    def one_asker(self) -> bool:
        return len(self.askers) == 1


def audience_of_run() -> Audience | None:
    """The running tool call's audience; None for a run that answers no one in a Feishu
    chat (the console, a benchmark, a test without a chat)."""
    turn = current_turn()
    if turn is None or not turn.chat_id:
        return None
    return Audience(turn.chat_id, turn.chat_type == DIRECT_CHAT, turn.askers().everyone)


def current_audience(doing: str) -> Audience:
    """:func:`audience_of_run`, or a ToolError saying that nothing is read without one."""
    audience = audience_of_run()
    if audience is None:
        raise ToolError(
            f"{doing} is done only for a person asking in a Feishu chat (what the bot reads "
            "as the app must be something everyone reading the answer may see), and this "
            "run answers no one in a chat. Nothing was read."
        )
    return audience


def readers_text(audience: Audience) -> str:
    """Who the audience is, in words, for a refusal."""
    if not audience.direct:
        return "everyone in this group chat"
    return "you" if audience.one_asker else "everyone whose message this reply answers"


__all__ = ["DIRECT_CHAT", "Audience", "audience_of_run", "current_audience", "readers_text"]
