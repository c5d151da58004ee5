"""The bot's own open_id, fetched once from ``/open-apis/bot/v3/info`` and cached.

Mentions are matched by open_id, never by name. The fetch happens at start-up; if
Feishu is unreachable then, it is retried with backoff in the background and every
caller waits for the same fetch (no polling: the free tier counts API calls).
"""

from __future__ import annotations

import asyncio
import logging

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError

logger = logging.getLogger(__name__)

BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class BotIdentity:
    def __init__(self, client: FeishuClient) -> None:
        self._client = client
        self._open_id: str | None = None
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._fetch(), name="bot-identity")

    @property
    def known(self) -> str | None:
        return self._open_id

    async def open_id(self) -> str:
        self.start()
        await self._ready.wait()
        assert self._open_id is not None
        return self._open_id

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _fetch(self) -> None:
        attempt = 0
        while True:
            try:
                info = await self._client.bot_info()
            except FeishuError as exc:
                delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                logger.warning(
                    "fetching the bot's identity failed (%s); retrying in %.0fs", exc, delay
                )
                attempt += 1
                await asyncio.sleep(delay)
                continue
            self._open_id = info.open_id
            self._ready.set()
            logger.info("bot identity: %s (%s)", info.app_name, info.open_id)
            return
