"""Whose Feishu account a tool call may use: the person whose turn it is, and only theirs.

Read from the run (``current_run().deps``, the runtime's turn context), never from the
model's arguments. A run that is nobody's turn (the console, a benchmark) has nobody to act
as; a turn that someone else's message joined (a group conversation everyone shares) does
not act as its starter any more, since the model may be serving the other person's words.
"""

from __future__ import annotations

from bot.askers import askers_of

from ..origin import Origin, origin_of

NOT_A_TURN = (
    "this tool acts as the person who asked, and this run is not a person's turn in a "
    "Feishu chat, so there is nobody to act as. Nothing was done"
)
OTHERS_JOINED = (
    "someone else's message joined this reply, so it no longer acts as the person who "
    "started it: a Feishu account is used only for its owner's own request. Nothing was "
    "done; the person can ask again in a message of their own"
)


def asker_of(deps: object) -> tuple[Origin | None, str]:
    """(the turn, "") when the call may act as its asker; (None, why not) otherwise."""
    origin = origin_of(deps)
    if origin is None or not origin.sender_open_id:
        return None, NOT_A_TURN
    askers = askers_of(deps)
    if askers is None or askers.sole != origin.sender_open_id:
        # Only a run that answers its starter alone acts as them (bot/askers.py).
        return None, OTHERS_JOINED
    return origin, ""
