"""Per-user message rate limits and per-user / per-group daily token budgets.

Counted in the database, so they hold across processes. A message over a limit gets a
clear answer instead of a run; the usage so far is shown in each answer's footer.
Days run midnight to midnight in the configured time zone.

Each limit counts only what it needs: the rate limit (on by default) counts messages
a minute per sender; a run's tokens are counted only while a daily token budget is set.

A run answers everyone whose message is in it (a message sent while the bot works joins
the running reply, ``bot/askers.py``), so its tokens count against each asker's budget, and
once against the group's. Each joined message was admitted on its own, for its sender.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from bot.askers import Askers
from bot.profiles import Profiles
from bot.store.usage import UsageStore
from bot.timezones import time_zone

from . import texts
from .config import BudgetConfig

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a message does not start a run; ``tell``: reply with it (else it is recorded only)."""

    text: str
    tell: bool = True


class Budgets:
    def __init__(
        self,
        config: BudgetConfig,
        usage: UsageStore,
        *,
        timezone: str = "UTC",
        clock: Callable[[], float] = time.time,
        profiles: Profiles | None = None,
    ) -> None:
        self._config = config
        # A chat's profile may set its own budgets (bot.profiles), in place of these.
        self._profiles = profiles or Profiles()
        overrides = [p.budgets for p in self._profiles.profiles.values() if p.budgets]
        self._any_override = any(any(b.values()) for b in overrides)
        self._tokens_override = any(
            b.get("user_daily_tokens") or b.get("group_daily_tokens") for b in overrides
        )
        self._usage = usage
        self._zone = time_zone(timezone)
        self._zone_name = timezone
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Some limit is on (a rate limit or a token budget): messages are admitted by it."""
        return self._config.any or self._any_override

    @property
    def counts_tokens(self) -> bool:
        """A daily token budget is on, so each run's tokens must be counted (a rate limit
        alone needs no count of tokens: it counts messages in ``admit``)."""
        config = self._config
        return bool(config.user_daily_tokens or config.group_daily_tokens) or (
            self._tokens_override
        )

    def config_for(self, chat_id: str, chat_type: str) -> BudgetConfig:
        """The budgets of a chat: its profile's where it sets them, else the settings'."""
        profile = self._profiles.for_chat(chat_id, chat_type)
        if profile is None or not profile.budgets:
            return self._config
        return replace(self._config, **profile.budgets)

    def today(self) -> str:
        return datetime.fromtimestamp(self._clock(), self._zone).strftime("%Y-%m-%d")

    async def admit(self, *, sender: str, chat_id: str, chat_type: str) -> Refusal | None:
        """None when the message may start a run; otherwise why not, and whether to say so."""
        config = self.config_for(chat_id, chat_type)
        if config.messages_per_minute:
            window = int(self._clock()) // WINDOW_SECONDS * WINDOW_SECONDS
            count = await self._usage.hit(f"user:{sender}", window)
            if count > config.messages_per_minute:
                # Told once a window (the first message over the limit, in whichever process
                # counted it): a flood is not answered message by message, each reply being
                # one more Feishu API call.
                return Refusal(
                    texts.RATE_LIMITED.format(limit=config.messages_per_minute),
                    tell=count == config.messages_per_minute + 1,
                )
        if not (config.user_daily_tokens or config.group_daily_tokens):
            return None
        used = await self._usage.usage(self.today(), _subjects(sender, chat_id, chat_type))
        user_limit, group_limit = config.user_daily_tokens, config.group_daily_tokens
        if user_limit and used.get(f"user:{sender}", 0) >= user_limit:
            return Refusal(texts.USER_BUDGET_SPENT.format(limit=user_limit, zone=self._zone_name))
        if group_limit and chat_type != "p2p" and used.get(f"group:{chat_id}", 0) >= group_limit:
            return Refusal(texts.GROUP_BUDGET_SPENT.format(limit=group_limit, zone=self._zone_name))
        return None

    async def record(self, *, askers: Askers, chat_id: str, chat_type: str, tokens: int) -> str:
        """Count a finished run's tokens against each asker's budget and the group's;
        returns the usage line for the answer's footer."""
        if not self.counts_tokens:
            return ""  # no budget needs the count: nothing is written
        config = self.config_for(chat_id, chat_type)
        users = [f"user:{asker}" for asker in askers.everyone]
        subjects = [*users, *_group(chat_id, chat_type)]
        day = self.today()
        await self._usage.add(day, subjects, tokens=tokens, messages=1)
        used = await self._usage.usage(day, subjects)
        parts = []
        if config.user_daily_tokens:
            limit = f"/{config.user_daily_tokens:,} tokens"
            if askers.several:  # one line for all: the most any of them has used
                most = max(used.get(user, 0) for user in users)
                parts.append(f"each asker today: at most {most:,}{limit}")
            else:
                parts.append(f"you today: {used.get(users[0], 0):,}{limit}")
        if config.group_daily_tokens and chat_type != "p2p":
            parts.append(
                f"group today: {used.get(f'group:{chat_id}', 0):,}"
                f"/{config.group_daily_tokens:,} tokens"
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
    return [f"user:{sender}", *_group(chat_id, chat_type)]


def _group(chat_id: str, chat_type: str) -> list[str]:
    """The group's subject, when the chat is a group (a DM has only its person's)."""
    return [] if chat_type == "p2p" else [f"group:{chat_id}"]
