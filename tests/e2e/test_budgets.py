"""Budgets end to end: rate limits and daily token budgets refuse a run with a clear reply.

The bot runs on a clock that is real time plus an offset the test moves (``ShiftedClock``):
the same clock also stamps claim leases and judges the age of events and signed requests
(whose timestamps the fake Feishu takes from real time), so it must stay close to real
time. A rate-limit test moves it by about a minute (well inside the default 900 s event
age); a test that crosses midnight moves it by up to a day and raises
``larkgate_max_event_age_seconds`` to match. The clock moves only while nothing is in
flight, so no lease appears to expire under a running turn.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select

from bot.governance import texts
from bot.store import UsageStore
from bot.store.models import RateWindowRow, UsageDailyRow

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis, user_text

# A day's offset plus room: the clock may run up to a day ahead of the fake's timestamps.
A_FEW_DAYS = 3 * 24 * 3600
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]


class ShiftedClock:
    """Real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def jump_to(self, timestamp: float) -> None:
        """Make it ``timestamp`` now; it runs on from there at real speed."""
        self.offset = timestamp - time.time()

    def start_of_next_minute(self, into: float = 1.0) -> None:
        """Go to ``into`` seconds after the next full minute: a fresh rate-limit window with
        almost a minute left of it."""
        self.jump_to(math.floor(self() / 60 + 1) * 60 + into)


def costing(tokens: Mapping[str, int]):
    """A model whose answer (the loop's final reply, streamed) reports ``tokens`` of
    usage, so a run costs exactly ``tokens``."""

    def handler(body: dict[str, Any]) -> Reply:
        assert not is_synthesis(body)  # the final reply is the answer: no second call
        last_user = user_text([m for m in body["messages"] if m["role"] == "user"][-1])
        return Reply(content=f"Answer to: {last_user}", usage=dict(tokens))

    return handler


def footer(bot: Bot, message_id: str) -> str:
    """The footer of the answer card: a CardKit entity (streamed) or an inline card."""
    (message,) = bot.replies_to(message_id)
    card = bot.feishu.cards[message.card_id].card if message.card_id else message.content
    (content,) = [e["content"] for e in card["body"]["elements"] if e["element_id"] == "footer"]
    return content


async def answered(bot: Bot, message_id: str, text: str, **fields: Any) -> str:
    """Say ``text``, wait until the bot is idle again; returns the visible reply."""
    await bot.say(message_id, text, **fields)
    reply = await bot.reply(message_id)
    await bot.settle()
    return reply


async def count_rows(bot: Bot, table: Any) -> int:
    statement = select(func.count()).select_from(table)
    return await bot.services.database.transact(
        lambda connection: connection.execute(statement).scalar_one(), write=False
    )


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


async def test_rate_limit_refuses_the_extra_message_without_a_run(
    tmp_path, feishu, llm_server, clock
):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_rate_limit_per_minute=2)
    clock.start_of_next_minute()
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        assert (await answered(bot, "om_1", "first")).startswith("Answer to: first")
        assert (await answered(bot, "om_2", "second")).startswith("Answer to: second")
        calls = len(llm_server.requests)

        refusal = await answered(bot, "om_3", "third")
        assert refusal == texts.RATE_LIMITED.format(limit=2)
        assert len(llm_server.requests) == calls  # no run for it
        assert (await bot.services.ledger.get("om_3")).state == "done"
        # Commands are not counted and still answered.
        assert "/reset" in await answered(bot, "om_help", "/help")
        # Another user has a window of their own.
        other = await answered(bot, "om_other", "mine", sender_open_id="ou_other")
        assert other.startswith("Answer to: mine")

        clock.advance(60)  # the next window
        calls = len(llm_server.requests)
        assert (await answered(bot, "om_4", "fourth")).startswith("Answer to: fourth")
        assert len(llm_server.requests) == calls + 1  # one streamed call: the answer
        # A rate limit alone adds no usage line to the footer.
        assert "today" not in footer(bot, "om_4")


async def test_user_daily_budget_refuses_once_spent_and_resets_at_local_midnight(
    tmp_path, feishu, llm_server, clock
):
    zone = ZoneInfo("Asia/Shanghai")
    llm_server.handler = costing({"prompt_tokens": 700, "completion_tokens": 500})
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_user_daily_tokens=2000,
        larkgate_timezone="Asia/Shanghai",
        larkgate_max_event_age_seconds=A_FEW_DAYS,
    )
    # Two minutes before the next midnight in Shanghai (16:00 UTC).
    midnight = datetime.combine(
        datetime.fromtimestamp(clock(), zone).date() + timedelta(days=1),
        datetime.min.time(),
        tzinfo=zone,
    )
    clock.jump_to(midnight.timestamp() - 120)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await answered(bot, "om_1", "first")
        assert "you today: 1,200/2,000 tokens" in footer(bot, "om_1")
        # Under the budget when it starts, a run may go over it.
        await answered(bot, "om_2", "second")
        assert "you today: 2,400/2,000 tokens" in footer(bot, "om_2")
        assert "1200 tokens" in footer(bot, "om_2")  # the run's own count stays too

        calls = len(llm_server.requests)
        refusal = await answered(bot, "om_3", "third")
        assert refusal == texts.USER_BUDGET_SPENT.format(limit=2000, zone="Asia/Shanghai")
        assert "2,000" in refusal and "Asia/Shanghai" in refusal
        assert len(llm_server.requests) == calls
        # Another user has a budget of their own.
        await answered(bot, "om_other", "mine", sender_open_id="ou_other")
        assert "you today: 1,200/2,000 tokens" in footer(bot, "om_other")

        usage = UsageStore(bot.services.database)
        before = (midnight - timedelta(days=1)).strftime("%Y-%m-%d")
        assert await usage.usage(before, ["user:ou_user"]) == {"user:ou_user": 2400}

        clock.jump_to(midnight.timestamp() + 5)  # a new day in Shanghai
        assert (await answered(bot, "om_4", "fourth")).startswith("Answer to: fourth")
        assert "you today: 1,200/2,000 tokens" in footer(bot, "om_4")
        after = midnight.strftime("%Y-%m-%d")
        assert await usage.usage(after, ["user:ou_user"]) == {"user:ou_user": 1200}
        assert await usage.usage(before, ["user:ou_user"]) == {"user:ou_user": 2400}


async def test_group_budget_is_shared_by_the_group_and_not_by_direct_messages(
    tmp_path, feishu, llm_server, clock
):
    llm_server.handler = costing({"prompt_tokens": 100})
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_group_daily_tokens=150,
        larkgate_max_event_age_seconds=A_FEW_DAYS,
    )
    group = {"chat_type": "group", "chat_id": "oc_team", "mentions": MENTION}
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await answered(bot, "om_a1", "@_user_1 hello", sender_open_id="ou_alice", **group)
        assert "group today: 100/150" in footer(bot, "om_a1")
        assert "you today" not in footer(bot, "om_a1")  # no user budget set
        await answered(bot, "om_b1", "@_user_1 hi", sender_open_id="ou_bob", **group)
        assert "group today: 200/150" in footer(bot, "om_b1")

        calls = len(llm_server.requests)
        refusal = await answered(bot, "om_a2", "@_user_1 again", sender_open_id="ou_alice", **group)
        assert refusal == texts.GROUP_BUDGET_SPENT.format(limit=150, zone="UTC")
        assert len(llm_server.requests) == calls
        # Another group has its own budget; a direct message has none.
        other = {**group, "chat_id": "oc_other"}
        await answered(bot, "om_o1", "@_user_1 hey", sender_open_id="ou_alice", **other)
        assert "group today: 100/150" in footer(bot, "om_o1")
        dm = await answered(bot, "om_dm", "just us", sender_open_id="ou_alice", chat_id="oc_dm")
        assert dm.startswith("Answer to: just us")
        assert "today" not in footer(bot, "om_dm")
        # A group message that does not mention the bot is ignored, not refused.
        unmentioned = {"chat_type": "group", "chat_id": "oc_team"}
        await bot.say("om_quiet", "chatting", sender_open_id="ou_bob", **unmentioned)
        await bot.settle()
        assert bot.replies_to("om_quiet") == []

        clock.advance(24 * 3600)
        await answered(bot, "om_b2", "@_user_1 new day", sender_open_id="ou_bob", **group)
        assert "group today: 100/150" in footer(bot, "om_b2")


async def test_by_default_only_the_rate_limit_is_on_and_no_tokens_are_counted(bot):
    await answered(bot, "om_1", "hello")
    await answered(bot, "om_2", "and again")
    budgets = bot.services.governance.budgets
    assert budgets.enabled and not budgets.counts_tokens
    assert "today" not in footer(bot, "om_2")
    # The rate limit counts messages a minute; no budget needs a run's tokens counted.
    assert await count_rows(bot, UsageDailyRow.__table__) == 0
    assert 1 <= await count_rows(bot, RateWindowRow.__table__) <= 2  # one minute, or two


async def test_with_every_limit_off_nothing_is_counted(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_rate_limit_per_minute=0)
    async with running_bot(settings, feishu, llm_server) as bot:
        await answered(bot, "om_1", "hello")
        await answered(bot, "om_2", "and again")
        assert not bot.services.governance.budgets.enabled
        assert await count_rows(bot, UsageDailyRow.__table__) == 0
        assert await count_rows(bot, RateWindowRow.__table__) == 0


async def test_the_synthesized_answer_counts_against_the_budget(tmp_path, feishu, llm_server):
    """With LARKGATE_SYNTHESIS=always a second call writes the answer: it is paid too."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_synthesis(body):
            return Reply(content="the answer", usage={"prompt_tokens": 90})
        return Reply(content="draft", usage={"prompt_tokens": 10})

    llm_server.handler = handler
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_user_daily_tokens=1000, larkgate_synthesis="always"
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await answered(bot, "om_1", "question")
        shown = footer(bot, "om_1")
        assert "100 tokens" in shown  # what the run cost, as the footer says
        assert "you today: 100/1,000 tokens" in shown


async def test_a_profiles_budget_holds_in_its_chats_and_only_there(
    tmp_path, feishu, llm_server, clock
):
    """[profiles.NAME] group_daily_tokens / user_daily_tokens replace the settings' in the
    chats routed to it; elsewhere the settings' (here: none) apply."""
    llm_server.handler = costing({"prompt_tokens": 100})
    config = tmp_path / "larkgate.toml"
    config.write_text(
        '[profiles.tight]\ngroup_daily_tokens = 150\n[groups."oc_tight"]\nprofile = "tight"\n'
    )
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_config=config, larkgate_rate_limit_per_minute=0
    )
    tight = {"chat_type": "group", "chat_id": "oc_tight", "mentions": MENTION}
    loose = {**tight, "chat_id": "oc_loose"}
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await answered(bot, "om_t1", "@_user_1 one", sender_open_id="ou_alice", **tight)
        assert "group today: 100/150" in footer(bot, "om_t1")
        await answered(bot, "om_t2", "@_user_1 two", sender_open_id="ou_bob", **tight)
        refusal = await answered(bot, "om_t3", "@_user_1 three", sender_open_id="ou_bob", **tight)
        assert refusal == texts.GROUP_BUDGET_SPENT.format(limit=150, zone="UTC")
        for n in range(3):  # no budget in a chat of no profile
            reply = await answered(bot, f"om_l{n}", f"@_user_1 {n}", **loose)
            assert reply.startswith(f"Answer to: {n}")
            assert "today" not in footer(bot, f"om_l{n}")
