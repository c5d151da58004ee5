"""A tool call served inside a person's turn, as the engine's executor serves it: the run's
``deps`` (a real ``TurnContext``) say where the answer goes and whose messages it answers,
which is all the Feishu workspace tools may know of who asks."""

from __future__ import annotations

from bot.turn_context import TurnContext

from support.turns import serving, turn_context


def dm(open_id: str, *, joined: tuple[str, ...] = ()) -> TurnContext:
    """``open_id`` asking the bot in their direct chat with it."""
    return turn_context(
        chat_id=f"oc_dm_{open_id.removeprefix('ou_')}",
        chat_type="p2p",
        sender_open_id=open_id,
        joined=joined,
        message_id="om_asked",
        run_id="run-asked",
    )


def in_group(chat_id: str, open_id: str, *, joined: tuple[str, ...] = ()) -> TurnContext:
    """``open_id`` asking the bot in the group chat ``chat_id``."""
    return turn_context(
        chat_id=chat_id,
        chat_type="group",
        sender_open_id=open_id,
        joined=joined,
        message_id="om_asked",
        run_id="run-asked",
    )


__all__ = ["dm", "in_group", "serving"]
