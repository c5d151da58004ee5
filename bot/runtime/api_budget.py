"""Feishu API calls: counted, added up across processes, and kept within a monthly budget.

Every HTTP attempt the Feishu client makes is counted here in memory (``record``, the
client's ``on_call``) and added to the database's ledger every few seconds, which answers
with the month's total of every process. With ``FEISHU_MONTHLY_API_BUDGET`` set, the total
picks how an answer is delivered (``Delivery``), in steps a user can see in the footer:

0. live: the card is posted at once (its status line says the bot is on it) and streams,
   about one update a second;
1. fewer updates: the card streams, one update every few seconds (about a third of the
   calls); taken as soon as the month's pace would spend the budget before the month
   ends, or at 60% of it, so that it lasts the month at the current rate;
2. finished cards: nothing while the answer is written, not even the status (the card
   posted at once would cost two calls more an answer), one finished card at the end
   (1 call, 2 for a long answer), from 85%;
3. text only: a plain text reply (1 call), from 95%.

The bot never stops answering because of its own budget: past it, answers stay text.
Each step is told to the admins once a month, by one process (the ledger's claim).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.store.api_calls import ApiCallLedger

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
FEWER_UPDATES_SHARE = 0.6
FINISHED_CARDS_SHARE = 0.85
TEXT_ONLY_SHARE = 0.95
FEWER_UPDATES_CADENCE = 4.0  # seconds between card updates at step 1


@dataclass(frozen=True, slots=True)
class Delivery:
    """How answers are delivered at a budget step."""

    level: int
    name: str
    streaming: bool  # a live card, updated while the answer is written
    text_only: bool
    cadence: float | None  # seconds between updates; None: the configured cadence
    note: str  # what the footer says, so that users see why

    @property
    def economy(self) -> bool:
        return self.level > 0


DELIVERIES = (
    Delivery(0, "live", True, False, None, ""),
    Delivery(
        1,
        "fewer updates",
        True,
        False,
        FEWER_UPDATES_CADENCE,
        "economy mode: fewer live updates (Feishu API budget)",
    ),
    Delivery(
        2,
        "finished cards",
        False,
        False,
        None,
        "economy mode: answers arrive when finished (Feishu API budget)",
    ),
    Delivery(3, "text only", False, True, None, "economy mode: text only (Feishu API budget)"),
)


def budget_level(used: int, budget: int, month_elapsed: float) -> int:
    """The budget step for ``used`` calls ``month_elapsed`` (0..1) into the month."""
    if budget <= 0:
        return 0
    share = used / budget
    if share >= TEXT_ONLY_SHARE:
        return 3
    if share >= FINISHED_CARDS_SHARE:
        return 2
    # The month's pace, judged after its first day (a busy first hour says little).
    projected = used / max(month_elapsed, 1 / 31)
    if share >= FEWER_UPDATES_SHARE or projected > budget:
        return 1
    return 0


def month_of(moment: float, zone: ZoneInfo) -> tuple[str, float]:
    """The month ``moment`` falls in (``YYYY-MM``) and how far into it, 0..1."""
    now = datetime.fromtimestamp(moment, zone)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start.replace(year=start.year + 1, month=1) if start.month == 12
           else start.replace(month=start.month + 1))  # fmt: skip
    elapsed = (now - start).total_seconds() / (end - start).total_seconds()
    return f"{now.year:04d}-{now.month:02d}", elapsed


Notify = Callable[[Delivery, int, int], Awaitable[None]]


class ApiUsage:
    """This process's view of the month's Feishu API calls (see the module docstring)."""

    def __init__(
        self,
        ledger: ApiCallLedger,
        *,
        app_id: str,
        budget: int,
        zone: ZoneInfo,
        clock: Callable[[], float] = time.time,
        flush_seconds: float = FLUSH_SECONDS,
        notify: Notify | None = None,
    ) -> None:
        self._ledger = ledger
        self._app_id = app_id
        self.budget = budget
        self._zone = zone
        self._clock = clock
        self._flush_seconds = flush_seconds
        self._notify = notify
        self._pending = 0
        self._month, _ = month_of(clock(), zone)
        self._known = 0  # the month's total in the ledger, as of the last flush

    # -- what the Feishu client and the replies call ------------------------------------

    def record(self, endpoint: str, code: str) -> None:
        """``FeishuClient``'s ``on_call``: one HTTP attempt, whatever its outcome (Feishu
        counts refused calls too)."""
        self._pending += 1

    @property
    def month(self) -> str:
        return self._month

    @property
    def total(self) -> int:
        """This month's calls: every process's as of the last flush, and ours since."""
        return self._known + self._pending

    def delivery(self) -> Delivery:
        if self.budget <= 0:  # no budget, no step: every answer asks, so skip the arithmetic
            return DELIVERIES[0]
        _, elapsed = month_of(self._clock(), self._zone)
        return DELIVERIES[budget_level(self.total, self.budget, elapsed)]

    def summary(self) -> str:
        """One line for /help, the console and ``larkgate check``."""
        used = f"{self.total:,} Feishu API calls in {self._month}"
        if self.budget <= 0:
            return used + " (no monthly budget set: FEISHU_MONTHLY_API_BUDGET)"
        delivery = self.delivery()
        share = self.total / self.budget
        return f"{used} of a budget of {self.budget:,} ({share:.0%}); answers: {delivery.name}"

    # -- the ledger ---------------------------------------------------------------------

    async def flush(self) -> None:
        """Add what this process counted to the ledger and learn the month's total."""
        month, _ = month_of(self._clock(), self._zone)
        if month != self._month:  # a new month: what was pending counts in the new one
            self._month, self._known = month, 0
        pending, self._pending = self._pending, 0
        try:
            self._known = await self._ledger.add(self._app_id, month, pending)
        except Exception:
            self._pending += pending  # counted at the next flush
            raise
        await self._tell_admins()

    async def refresh(self) -> None:
        """Read the month's total without adding anything (e.g. for ``larkgate check``)."""
        self._month, _ = month_of(self._clock(), self._zone)
        self._known = await self._ledger.total(self._app_id, self._month)

    async def run(self) -> None:
        """For the life of the process: flush every few seconds."""
        while True:
            try:
                await self.flush()
            except Exception:
                logger.exception("adding Feishu API calls to the ledger failed; retrying")
            await asyncio.sleep(self._flush_seconds)

    async def _tell_admins(self) -> None:
        delivery = self.delivery()
        if not delivery.economy or self._notify is None:
            return
        if not await self._ledger.claim_notice(self._app_id, self._month, delivery.level):
            return
        logger.warning("Feishu API budget: %s; answers now: %s", self.summary(), delivery.name)
        try:
            await self._notify(delivery, self.total, self.budget)
        except Exception:
            logger.exception("telling the admins about the Feishu API budget failed")
