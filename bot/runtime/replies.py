"""Sending the bot's own notices (command answers, help) as replies: idempotent, retried,
degraded when needed. Agent answers go through the live card (``bot.feishu.card_writer``).

Every reply carries a Feishu ``uuid`` derived from the message it answers (and the
part number), so a retried send (after a timeout, a crash, a takeover by another
process) never shows twice. Rate limits and network failures are retried with
backoff; a card Feishu refuses is sent again as plain text; a recalled message or a
missing scope ends the attempt with a log line that says why (and which scope).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.feishu.client import FeishuClient, SentMessage
from bot.feishu.errors import (
    FeishuCardInvalid,
    FeishuError,
    FeishuMessageGone,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuTooLarge,
    FeishuTransportError,
)
from bot.feishu.render import notice_card

logger = logging.getLogger(__name__)

RETRY_DELAYS = (0.5, 2.0, 5.0)


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    message_id: str
    in_thread: bool


class ReplyFailed(Exception):
    """The reply could not be delivered; the reason has been logged."""


class ReplySender:
    def __init__(
        self,
        client: FeishuClient,
        *,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._delays = retry_delays
        self._sleep = sleep

    async def notice(self, target: ReplyTarget, text: str) -> SentMessage:
        return await self._send_card(target, notice_card(text), 0, fallback_text=text)

    async def card(
        self, target: ReplyTarget, card: dict[str, Any], *, fallback_text: str
    ) -> SentMessage:
        """Reply with a card of our own (e.g. the admin card); plain text if it is refused."""
        return await self._send_card(target, card, 0, fallback_text=fallback_text)

    async def _send_card(
        self, target: ReplyTarget, card: dict[str, Any], part: int, *, fallback_text: str
    ) -> SentMessage:
        uuid = reply_uuid(target.message_id, part)
        try:
            return await self._send(
                target, "interactive", json.dumps(card, ensure_ascii=False), uuid
            )
        except (FeishuCardInvalid, FeishuTooLarge) as exc:
            logger.warning(
                "card reply to %s refused (code %s); sending plain text",
                target.message_id,
                exc.code,
            )
        # Degraded: the same text, without card rendering, under its own uuid.
        text = fallback_text if part == 0 else "(continued)"
        content = json.dumps({"text": text[:20_000]}, ensure_ascii=False)
        return await self._send(target, "text", content, reply_uuid(target.message_id, part, "t"))

    async def _send(
        self, target: ReplyTarget, msg_type: str, content: str, uuid: str
    ) -> SentMessage:
        attempt = 0
        while True:
            try:
                return await self._client.reply_message(
                    target.message_id,
                    msg_type=msg_type,
                    content=content,
                    uuid=uuid,
                    reply_in_thread=target.in_thread,
                )
            except (FeishuRateLimited, FeishuTransportError) as exc:
                if attempt >= len(self._delays):
                    logger.error(
                        "reply to %s failed after %d attempts: %s",
                        target.message_id,
                        attempt + 1,
                        exc,
                    )
                    raise ReplyFailed(str(exc)) from exc
                await self._sleep(self._delays[attempt])
                attempt += 1
            except FeishuScopeMissing as exc:
                logger.error(
                    "cannot reply to %s: the app lacks a Feishu scope; grant one of %s in the "
                    "developer console (code %s)",
                    target.message_id,
                    ", ".join(exc.scopes) or "the scopes named by Feishu",
                    exc.code,
                )
                raise ReplyFailed("missing scope") from exc
            except FeishuMessageGone as exc:
                logger.warning(
                    "not replying to %s: the message was recalled or deleted", target.message_id
                )
                raise ReplyFailed("message gone") from exc
            except FeishuError as exc:
                if isinstance(exc, FeishuCardInvalid | FeishuTooLarge):
                    raise
                logger.error(
                    "reply to %s refused by Feishu: code %s %s",
                    target.message_id,
                    exc.code,
                    exc.msg,
                )
                raise ReplyFailed(str(exc)) from exc


def reply_uuid(message_id: str, part: int, variant: str = "") -> str:
    """Deterministic per (message, part): Feishu keeps one message per uuid."""
    digest = hashlib.sha256(f"{message_id}:{part}:{variant}".encode()).hexdigest()
    return f"lg-{digest[:40]}"
