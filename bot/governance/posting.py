"""Posting a governance card so that a cancellation cannot split the post from its record.

A stop (``/stop``, a shutdown) that lands while Feishu is answering a card's post used to
cancel the wait between "the card is in the chat" and "the request knows its card": the
card then offered buttons or a link nobody could rewrite when the request ended. The post
now finishes first, the caller's ``if_cancelled`` closes the request with its card, and
the cancellation goes on as it came (the same CancelledError, so ``asyncio.timeout`` and
task cancellation counting see nothing unusual).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


async def post_card(
    post: Awaitable[str], *, if_cancelled: Callable[[str | None], Awaitable[object]]
) -> str:
    """The card's message id once ``post`` (which also records it) has finished.

    Cancelled meanwhile: the post is let finish, ``if_cancelled(message_id)`` runs (None
    when the post itself failed), and the CancelledError is raised again."""
    posting = asyncio.ensure_future(post)
    try:
        return await asyncio.shield(posting)
    except asyncio.CancelledError:
        message_id: str | None = None
        with contextlib.suppress(Exception):
            message_id = await posting
        await if_cancelled(message_id)
        raise
