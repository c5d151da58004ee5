"""Posting a governance card so that a cancellation cannot split the post from its record.

A stop (``/stop``, a shutdown) that lands while Feishu is answering a card's post used to
cancel the wait between "the card is in the chat" and "the request knows its card": the
card then offered buttons or a link nobody could rewrite when the request ended. The post
now finishes first and the cancellation is re-raised with the card's message id, so the
caller can close the request and its card together.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable


class CancelledAfterPost(asyncio.CancelledError):
    """The caller was cancelled while its card was being posted; the post was let finish.

    ``message_id`` is the posted card's (None when the post itself failed)."""

    def __init__(self, message_id: str | None) -> None:
        super().__init__()
        self.message_id = message_id


async def post_card(post: Awaitable[str]) -> str:
    """The card's message id once ``post`` (which also records it) has finished."""
    posting = asyncio.ensure_future(post)
    try:
        return await asyncio.shield(posting)
    except asyncio.CancelledError:
        message_id: str | None = None
        with contextlib.suppress(Exception):
            message_id = await posting
        raise CancelledAfterPost(message_id) from None
