"""Per-user message rate limits and per-user / per-group daily token budgets.

Counted in the database, so they hold across processes. A message over a limit gets a
clear answer instead of a run; the usage so far is shown in each answer's footer.
Days run midnight to midnight in the configured time zone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.store.usage import UsageStore

from . import texts
from .config import BudgetConfig

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


class Budgets:
    def __init__(
        self,
        config: BudgetConfig,
        usage: UsageStore,
        *,
        timezone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._usage = usage
        self._zone = ZoneInfo(timezone)
        self._zone_name = timezone
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self._config.any

    def today(self) -> str:
        return datetime.fromtimestamp(self._clock(), self._zone).strftime("%Y-%m-%d")

    async def admit(self, *, sender: str, chat_id: str, chat_type: str) -> str | None:
        """None when the message may start a run; otherwise what to tell the sender."""
        config = self._config
        if config.messages_per_minute:
            window = int(self._clock()) // WINDOW_SECONDS * WINDOW_SECONDS
            count = await self._usage.hit(f"user:{sender}", window)
            if count > config.messages_per_minute:
                return texts.RATE_LIMITED.format(limit=config.messages_per_minute)
        if not (config.user_daily_tokens or config.group_daily_tokens):
            return None
        used = await self._usage.usage(self.today(), _subjects(sender, chat_id, chat_type))
        user_limit, group_limit = config.user_daily_tokens, config.group_daily_tokens
        if user_limit and used.get(f"user:{sender}", 0) >= user_limit:
            return texts.USER_BUDGET_SPENT.format(limit=user_limit, zone=self._zone_name)
        if group_limit and chat_type != "p2p" and used.get(f"group:{chat_id}", 0) >= group_limit:
            return texts.GROUP_BUDGET_SPENT.format(limit=group_limit, zone=self._zone_name)
        return None

    async def record(self, *, sender: str, chat_id: str, chat_type: str, tokens: int) -> str:
        """Count a finished run's tokens; returns the usage line for the answer's footer."""
        subjects = _subjects(sender, chat_id, chat_type)
        day = self.today()
        await self._usage.add(day, subjects, tokens=tokens, messages=1)
        if not (self._config.user_daily_tokens or self._config.group_daily_tokens):
            return ""
        used = await self._usage.usage(day, subjects)
        parts = []
        if self._config.user_daily_tokens:
            parts.append(
                f"you today: {used.get(f'user:{sender}', 0):,}"
                f"/{self._config.user_daily_tokens:,} tokens"
            )
        if self._config.group_daily_tokens and chat_type != "p2p":
            parts.append(
                f"group today: {used.get(f'group:{chat_id}', 0):,}"
                f"/{self._config.group_daily_tokens:,} tokens"
            )
        return " · ".join(parts)

    async def today_usage(self) -> tuple[str, list[tuple[str, int, int]]]:
        """Today (in the configured zone) and every subject's (subject, tokens, messages)."""
        day = self.today()
        return day, await self._usage.day(day)

    async def purge(self, *, keep_days: int = 2) -> int:
        """Drop counters nobody reads any more (days before yesterday, past minutes)."""
        now = self._clock()
        before_day = datetime.fromtimestamp(now - keep_days * 86_400, self._zone)
        window = int(now) // WINDOW_SECONDS * WINDOW_SECONDS - WINDOW_SECONDS
        return await self._usage.purge(
            before_day=before_day.strftime("%Y-%m-%d"), before_window=window
        )

    async def purge_forever(self, every: float = 3600.0) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.purge()
            except Exception:
                logger.exception("purging usage counters failed; retrying later")


def _subjects(sender: str, chat_id: str, chat_type: str) -> list[str]:
    subjects = [f"user:{sender}"]
    if chat_type != "p2p":
        subjects.append(f"group:{chat_id}")
    return subjects
