"""Flooding one conversation: bounded joins, a bounded request, and no message lost.

While a run is held active in a shared group conversation, 300 messages of 20 KB each
arrive in it from three people. Before the bounds, every one of them joined the run as
one pinned ``[USER INTERRUPT]`` of 6 MB, the provider refused the next request and the
group's run failed for everyone. Now the run takes in what its limits allow, the rest
wait for later turns or are refused with a reply, every request stays under the budget,
and each message is accounted for exactly once: read by the run it joined, answered by
its own turn, or refused with a reply saying why.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import select

from bot.engine import ContextGuard, Message
from bot.governance import texts as governance_texts
from bot.runtime.intake.routing import CONVERSATION_FULL
from bot.store import RunStore
from bot.store.models import ConversationMessageRow

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for, text_of
from e2e.test_budgets import ShiftedClock
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]
GROUP = {"chat_type": "group", "chat_id": "oc_team", "mentions": MENTION}
SENDERS = ("ou_alice", "ou_bob", "ou_carol")
FLOOD, SIZE = 300, 20_000
BUDGET = 16_000  # tokens: small, so the history of 20 KB messages needs compaction too
# The fake provider's request limit: what a real one refuses as too long.
PROVIDER_LIMIT_BYTES = 1_000_000
# What every request must stay under: the budget (~4 characters a token) plus JSON.
REQUEST_LIMIT_BYTES = 100_000
OUTCOMES = ("joined", "queued", "refused")  # of handing a message to its conversation


def marker(index: int) -> str:
    return f"flood-{index:03d} "


def is_summary(body: Mapping[str, Any]) -> bool:
    return body["messages"][0]["content"].startswith("You compress")


class HeldModel:
    """Holds the first tool-loop call until released; refuses what a provider would."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.held = False

    async def __call__(self, body: dict[str, Any]) -> Reply:
        if len(json.dumps(body)) > PROVIDER_LIMIT_BYTES:
            return Reply.error(
                400, "maximum context length exceeded", code="context_length_exceeded"
            )
        assert not is_synthesis(body)  # the loop's final reply is the answer
        if is_summary(body):
            return Reply(content="summary of the earlier turns")
        if not self.held:
            self.held = True
            self.entered.set()
            await self.release.wait()
        return Reply(content="answered")


def loop_requests(bot: Bot) -> list[dict[str, Any]]:
    return [
        r.body
        for r in bot.llm_server.requests
        if not is_synthesis(r.body) and not is_summary(r.body)
    ]


def estimate(body: Mapping[str, Any]) -> int:
    messages = [Message(m["role"], m.get("content") or "") for m in body["messages"]]
    return ContextGuard(BUDGET).tokens(messages)


def submitted(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The messages handed to their conversation: for each, the handler logs
    "message <id> <joined|queued|refused> conversation <key>"."""
    handed = set()
    for record in caplog.records:
        words = record.getMessage().split()
        if len(words) == 5 and words[0] == "message" and words[2] in OUTCOMES:
            handed.add(words[1])
    return handed


async def history_message_ids(bot: Bot) -> list[str]:
    table = ConversationMessageRow.__table__
    statement = select(table.c.message_id).where(table.c.role == "user")
    rows = await bot.services.database.transact(
        lambda connection: connection.execute(statement).scalars().all(), write=False
    )
    return [row for row in rows if row]


async def test_a_flood_in_a_shared_group_is_bounded_and_every_message_accounted_for(
    tmp_path, feishu, llm_server, caplog
):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    model = HeldModel()
    llm_server.handler = model
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        llm_context_budget=BUDGET,
        # On, but high enough for 100 messages from each sender: the bounds are tested.
        larkgate_rate_limit_per_minute=500,
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_start", "@_user_1 start the report", sender_open_id=SENDERS[0], **GROUP)
        await model.entered.wait()
        ids = [f"om_flood_{i}" for i in range(FLOOD)]
        for i, message_id in enumerate(ids):
            text = "@_user_1 " + marker(i) + "x" * (SIZE - len(marker(i)))
            await bot.say(message_id, text, sender_open_id=SENDERS[i % 3], **GROUP)

        def refused() -> list[str]:
            return [
                m
                for m in ids
                if any(text_of(r, feishu) == CONVERSATION_FULL for r in bot.replies_to(m))
            ]

        # Every message has been taken in (waiting or joined) or refused.
        await bot.wait_for(lambda: len(bot.services.in_flight) + len(refused()) == FLOOD + 1, 30)
        await bot.wait_for(lambda: submitted(caplog) >= set(ids), 30)
        model.release.set()
        await bot.settle(within=60)

        # Every request stayed under the budget: none reached the provider's limit.
        requests = loop_requests(bot)
        assert max(len(json.dumps(body)) for body in requests) < REQUEST_LIMIT_BYTES
        assert max(estimate(body) for body in requests) <= BUDGET
        assert all(r.status == "completed" for r in await RunStore(bot.services.database).recent())

        # Each message is refused, answered by its own turn, or joined a run: exactly one.
        everyone = ["om_start", *ids]
        refusals = set(refused())
        own_turn = {run.message_id for run in await RunStore(bot.services.database).recent()}
        for message_id in everyone:
            replies = bot.replies_to(message_id)
            if message_id in refusals:
                assert len(replies) == 1
            elif message_id in own_turn:
                assert text_of(replies[0], feishu).startswith("answered")
            else:
                assert replies == []  # joined: answered by the reply of the run it joined
            assert (await bot.services.ledger.get(message_id)).state == "done"
        answered = await history_message_ids(bot)
        assert len(answered) == len(set(answered))  # none answered twice
        assert set(answered) == set(everyone) - refusals  # none silently dropped
        joined = set(answered) - own_turn

        # The bounds held: a run takes in at most 10 messages (here one: 20 KB fills its
        # 8,000 characters), at most 20 wait, the rest are refused with a reply.
        assert 1 <= len(joined) <= 10
        assert len(own_turn) - 1 <= 20
        assert len(refusals) >= FLOOD - 31

        # What joined was read by the model, pinned and cut to 8,000 characters.
        interrupts = [
            m["content"]
            for body in requests
            for m in body["messages"]
            if (m.get("content") or "").startswith("[USER INTERRUPT]")
        ]
        for message_id in joined:
            index = ids.index(message_id)
            (seen,) = {c for c in interrupts if marker(index) in c}
            assert len(seen) < 8_300 and "characters of this message cut" in seen
        # A 20 KB message that starts a turn is pinned cut too.
        first_waiting = min(own_turn - {"om_start"}, key=ids.index)
        own = marker(ids.index(first_waiting))
        questions = [
            c
            for body in requests
            for m in body["messages"]
            if (c := m.get("content") or "").startswith(own)
        ]
        assert any(len(q) <= 8_000 and "characters of this message cut" in q for q in questions)


async def test_the_default_rate_limit_refuses_the_21st_message_a_minute(
    tmp_path, feishu, llm_server
):
    clock = ShiftedClock()
    clock.start_of_next_minute()  # all of it in one rate-limit window
    settings = settings_for(tmp_path, feishu, llm_server)
    assert settings.larkgate_rate_limit_per_minute == 20  # the default, on
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        # One sender, twenty groups: twenty conversations, each answered.
        for i in range(20):
            group = {**GROUP, "chat_id": f"oc_g{i}"}
            await bot.say(f"om_{i}", f"@_user_1 question {i}", sender_open_id="ou_fast", **group)
        await bot.settle(within=30)
        assert all(bot.replies_to(f"om_{i}") for i in range(20))
        calls = len(llm_server.requests)

        await bot.say("om_21", "@_user_1 one more", sender_open_id="ou_fast", **GROUP)
        assert await bot.reply("om_21") == governance_texts.RATE_LIMITED.format(limit=20)
        await bot.settle()
        assert len(llm_server.requests) == calls  # no run for it
        assert (await bot.services.ledger.get("om_21")).state == "done"
        # Told once a window: more messages over the limit are recorded, not answered one
        # by one (each reply would be another Feishu API call).
        for extra in ("om_22", "om_23"):
            await bot.say(extra, "@_user_1 and more", sender_open_id="ou_fast", **GROUP)
        await bot.settle()
        for extra in ("om_22", "om_23"):
            entry = await bot.services.ledger.get(extra)
            assert entry is not None and entry.state == "dropped"
            assert bot.replies_to(extra) == []
        # Someone else in the same minute is not limited by it.
        await bot.say("om_other", "@_user_1 mine", sender_open_id="ou_calm", **GROUP)
        assert (await bot.reply("om_other")).startswith("Answer to:")
