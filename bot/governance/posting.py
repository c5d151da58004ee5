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
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bot.feishu.client import FeishuClient


async def reply_with_card(
    feishu: FeishuClient, *, message_id: str, thread_id: str, card: Mapping[str, Any], uuid: str
) -> str:
    """``card`` as a reply to ``message_id`` (in its thread when it has one); the card's
    message id. The uuid makes a retried post (or a re-run after a takeover) show one card."""
    sent = await feishu.reply_message(
        message_id,
        msg_type="interactive",
        content=json.dumps(card, ensure_ascii=False),
        uuid=uuid,
        reply_in_thread=bool(thread_id),
    )
    message: str = sent.message_id
    return message


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
