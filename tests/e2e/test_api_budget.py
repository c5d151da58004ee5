"""Feishu's API quota: every call counted in the ledger, and near the monthly budget the
answers cost fewer calls in steps the chat can see, without ever stopping."""

from __future__ import annotations

import time
from zoneinfo import ZoneInfo

from bot.runtime.api_budget import month_of
from bot.store import ApiCallLedger, Database, upgrade_async

from e2e.harness import answering, running_bot, settings_for, text_of

ADMIN = "ou_admin"
BUDGET = 1000


async def _spent(settings, calls: int) -> None:
    """What the month has used so far, as other processes (or earlier days) left it."""
    await upgrade_async(settings.database_url)
    async with Database(settings.database_url) as db:
        month, _ = month_of(time.time(), ZoneInfo("UTC"))
        await ApiCallLedger(db).add(settings.feishu_app_id, month, calls)


def _card_ops(feishu) -> int:
    return sum(1 for r in feishu.requests if "/cardkit/" in r.path)


async def test_every_call_is_in_the_ledger_and_help_tells_admins(tmp_path, feishu, llm_server):
    llm_server.handler = answering
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_q", "hello")
        await bot.reply("om_q")
        await bot.settle()
        usage = bot.services.api_usage
        await usage.flush()
        # Every HTTP request the fake Feishu saw, the token's included, and no more.
        assert usage.total == len(feishu.requests)
        await bot.say("om_help", "/help", sender_open_id=ADMIN)
        assert "Feishu API calls" in await bot.reply("om_help")
        await bot.say("om_help_user", "/help")
        assert "Feishu API calls" not in await bot.reply("om_help_user")
        metrics = await (await bot.session.get(bot.url + "/metrics")).text()
        assert "larkgate_feishu_api_calls_month" in metrics


async def test_past_85_percent_an_answer_is_one_finished_card(tmp_path, feishu, llm_server):
    llm_server.handler = answering
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_admins=ADMIN, feishu_monthly_api_budget=BUDGET
    )
    await _spent(settings, 860)
    async with running_bot(settings, feishu, llm_server) as bot:
        before = len(feishu.requests)
        await bot.say("om_q", "hello")
        text = await bot.reply("om_q")
        await bot.settle()
        (reply,) = bot.replies_to("om_q")
        assert reply.msg_type == "interactive" and not reply.card_id  # no streaming entity
        assert _card_ops(feishu) == 0
        assert "economy mode" in text
        await bot.services.api_usage.flush()
        answer = [r.path for r in feishu.requests[before:] if "om_q" in r.path]
        assert answer == ["/open-apis/im/v1/messages/om_q/reply"]  # one call, the answer
        # The admins are told once about the step, by one process: a direct message.
        told = [r for r in feishu.requests if r.path.endswith("/im/v1/messages")]
        assert len(told) == 1 and ADMIN in told[0].body.decode()
        await bot.say("om_q2", "and again")
        await bot.reply("om_q2")
        await bot.settle()
        await bot.services.api_usage.flush()
        assert len([r for r in feishu.requests if r.path.endswith("/im/v1/messages")]) == 1


async def test_past_95_percent_answers_are_text_and_past_the_budget_they_go_on(
    tmp_path, feishu, llm_server
):
    llm_server.handler = answering
    settings = settings_for(tmp_path, feishu, llm_server, feishu_monthly_api_budget=BUDGET)
    await _spent(settings, 1200)  # over budget already
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_q", "hello")
        await bot.reply("om_q")
        await bot.settle()
        (reply,) = bot.replies_to("om_q")
        assert reply.msg_type == "text"
        assert "economy mode" in text_of(reply)


async def test_when_the_pace_would_outrun_the_month_updates_come_less_often(
    tmp_path, feishu, llm_server
):
    llm_server.handler = answering
    settings = settings_for(tmp_path, feishu, llm_server, feishu_monthly_api_budget=BUDGET)
    await _spent(settings, 650)
    async with running_bot(settings, feishu, llm_server) as bot:
        assert bot.services.api_usage.delivery().name == "fewer updates"
        await bot.say("om_q", "hello")
        text = await bot.reply("om_q")
        await bot.settle()
        assert "fewer live updates" in text
