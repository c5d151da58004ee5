"""Whose Feishu account a tool call may use: the person whose turn it is, and only theirs.

Read from the run (its :class:`~bot.turn_context.TurnContext`), never from the model's
arguments. A run that is nobody's turn (the console, a benchmark) has nobody to act as,
nor has a run whose deps are of any other type; a turn that someone else's message joined
(a group conversation everyone shares) does not act as its starter any more, since the
model may be serving the other person's words.
"""

from __future__ import annotations

from typing import Any

from bot.engine import RunContext
from bot.turn_context import TurnContext, turn_of

NOT_A_TURN = (
    "this tool acts as the person who asked, and this run is not a person's turn in a "
    "Feishu chat, so there is nobody to act as. Nothing was done"
)
OTHERS_JOINED = (
    "someone else's message joined this reply, so it no longer acts as the person who "
    "started it: a Feishu account is used only for its owner's own request. Nothing was "
    "done; the person can ask again in a message of their own"
)


def asker_of(run: RunContext[Any] | None) -> tuple[TurnContext | None, str]:
    """(the turn, "") when the call may act as its asker; (None, why not) otherwise."""
    turn = turn_of(run)
    if turn is None or not turn.sender_open_id:
        return None, NOT_A_TURN
    if turn.askers().sole != turn.sender_open_id:
        # Only a run that answers its starter alone acts as them (bot/askers.py).
        return None, OTHERS_JOINED
    return turn, ""
