"""Conversations end to end: history, commands, interrupts, /stop, errors users see."""

from __future__ import annotations

import logging

import pytest

from bot.engine import OpenAICompatibleLLM
from bot.runtime import texts
from bot.store import RunStore

from e2e.harness import BOT_OPEN_ID, running_bot, settings_for, text_of
from fakes.openai_server import Reply
from support.model_calls import is_synthesis
from support.models import HoldFirstLoopCall


async def test_history_carries_over_and_reset_forgets_it(bot):
    await bot.say("om_1", "my name is Ada")
    await bot.reply("om_1")
    await bot.settle()
    await bot.say("om_2", "what is my name?")
    await bot.reply("om_2")
    await bot.settle()
    second_loop_call = bot.llm_server.requests[1].body["messages"]  # one call a turn
    contents = [m["content"] for m in second_loop_call]
    assert "my name is Ada" in contents
    assert any("Answer to: my name is Ada" in c for c in contents if c)

    await bot.say("om_3", "/reset")
    assert await bot.reply("om_3") == texts.RESET
    await bot.settle()
    await bot.say("om_4", "and now?")
    await bot.reply("om_4")
    after_reset = bot.llm_server.requests[-1].body["messages"]
    assert all("Ada" not in (m["content"] or "") for m in after_reset)


async def test_help(bot):
    await bot.say("om_h", "/help")
    text = await bot.reply("om_h")
    # Written from the commands' one declaration (bot.runtime.intake.commands): every one is in it.
    usages = ["/plan <question>", "/stop", "/reset", "/schedules", "/login", "/logout"]
    usages += ["/help", "/readonly on|off|status", "/admin"]
    for usage in usages:
        assert f"`{usage}`" in text, usage
    assert text.index("`/help`") < text.index("Admins: `/readonly")
    await bot.settle()
    assert bot.llm_server.requests == []


async def test_stop_cancels_the_running_reply_and_says_so(bot):
    gate = HoldFirstLoopCall()
    bot.llm_server.handler = gate
    await bot.say("om_long", "write a long essay")
    await gate.entered.wait()
    await bot.say("om_stop", "/stop")
    assert await bot.reply("om_stop") == texts.STOPPED
    await bot.settle()
    gate.release.set()
    # The stopped run's model call is answered now. Once a later turn of the same
    # conversation is answered too, that answer has come and gone.
    await bot.say("om_after", "still there?")
    await bot.reply("om_after")
    await bot.settle()
    # Its card went up at once; it now says stopped, streaming off (not stuck "Thinking…").
    (card,) = [bot.feishu.cards[m.card_id] for m in bot.replies_to("om_long")]
    assert card.element("answer")["content"] == texts.STOPPED_CARD
    assert card.streaming_mode is False
    assert (await bot.services.ledger.get("om_long")).state == "done"
    runs = await RunStore(bot.services.database).recent()
    assert [run.status for run in runs if run.message_id == "om_long"] == ["cancelled"]

    await bot.say("om_stop2", "/stop")
    assert await bot.reply("om_stop2") == texts.NOTHING_TO_STOP


async def test_a_message_during_a_run_joins_it(bot, caplog):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    gate = HoldFirstLoopCall()
    bot.llm_server.handler = gate
    await bot.say("om_q", "compare Paris and Rome")
    await gate.entered.wait()
    await bot.say("om_more", "also Berlin")
    await bot.wait_for(lambda: "message om_more joined conversation" in caplog.text)
    gate.release.set()
    await bot.reply("om_q")
    await bot.settle()
    assert bot.replies_to("om_more") == []  # answered by the same reply
    loop_calls = [r.body for r in bot.llm_server.requests if not is_synthesis(r.body)]
    seen = [m["content"] or "" for m in loop_calls[-1]["messages"]]
    assert any(c.startswith("[USER INTERRUPT]") and "also Berlin" in c for c in seen)
    assert (await bot.services.ledger.get("om_more")).state == "done"


async def test_conversations_run_side_by_side(bot):
    gate = HoldFirstLoopCall()
    bot.llm_server.handler = gate
    await bot.say("om_slow", "slow one", sender_open_id="ou_alice")
    await gate.entered.wait()
    await bot.say("om_fast", "fast one", sender_open_id="ou_bob")
    assert "Answer to: fast one" in await bot.reply("om_fast")
    (slow,) = bot.replies_to("om_slow")  # its card says it is on it, and nothing more yet
    assert bot.feishu.cards[slow.card_id].element("answer")["content"] == "_Thinking…_"
    gate.release.set()
    await bot.reply("om_slow")


async def test_a_model_that_is_down_gets_a_short_useful_message(
    tmp_path, feishu, llm_server, caplog
):
    llm_server.handler = lambda body: Reply.error(503, "upstream overloaded")
    llm = OpenAICompatibleLLM(
        base_url=llm_server.base_url, api_key="k", model="m", max_retries=1, backoff_base=0.01
    )
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, llm=llm) as bot:
        await bot.say("om_down", "are you there?")
        assert await bot.reply("om_down") == texts.MODEL_UNAVAILABLE
        await bot.settle()
    assert "HTTP 503" in caplog.text  # the admin log says why


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            Reply.error(400, "maximum context length exceeded", code="context_length_exceeded"),
            texts.MODEL_CONTEXT_FULL,
        ),
        (
            Reply.error(401, "Incorrect API key provided", code="invalid_api_key"),
            texts.MODEL_REFUSED_KEY,
        ),
    ],
    ids=["context full", "key refused"],
)
async def test_a_model_that_refuses_the_request_is_not_called_unreachable(
    tmp_path, feishu, llm_server, reply, said
):
    """A refusal that trying again cannot fix says what to change, not "try again"."""
    llm_server.handler = lambda body: reply
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_no", "are you there?")
        assert await bot.reply("om_no") == said
        await bot.settle()


async def test_rate_limited_replies_are_retried_without_duplicates(bot):
    bot.feishu.fail("POST", r"/reply$", 230020, times=1)
    await bot.say("om_rl", "hello")
    await bot.reply("om_rl")
    await bot.settle()
    assert len(bot.replies_to("om_rl")) == 1


async def test_a_missing_scope_is_logged_with_its_name(bot, caplog):
    caplog.set_level(logging.ERROR)
    bot.feishu.fail(
        "POST",
        r"/reply$",
        99991672,
        msg="Access denied. One of the following scopes is required: [im:message:send_as_bot]",
        times=None,
    )
    await bot.say("om_scope", "hello")
    await bot.settle()
    assert bot.replies_to("om_scope") == []
    assert "im:message:send_as_bot" in caplog.text
    assert (await bot.services.ledger.get("om_scope")).state == "done"


async def test_per_sender_scope_in_groups(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_group_scope="chat_sender")
    mention = [("@_user_1", BOT_OPEN_ID, "larkgate")]
    async with running_bot(settings, feishu, llm_server) as bot:
        group = {"chat_type": "group", "chat_id": "oc_team", "mentions": mention}
        await bot.say("om_a1", "@_user_1 I am Alice", sender_open_id="ou_alice", **group)
        await bot.reply("om_a1")
        await bot.settle()
        await bot.say("om_b1", "@_user_1 who am I?", sender_open_id="ou_bob", **group)
        await bot.reply("om_b1")
        bob_call = llm_server.requests[-1].body["messages"]
        assert all("Alice" not in (m["content"] or "") for m in bob_call)


async def test_long_answers_arrive_as_continuation_cards(tmp_path, feishu, llm_server):
    long_answer = "\n\n".join(f"Paragraph {i}. " + "detail " * 200 for i in range(40))

    def handler(body):
        # 200 chunks: what is tested is the split into cards, not the SDK's parsing of
        # 14,000 four-character chunks.
        return Reply(content=long_answer, chunk_size=len(long_answer) // 200)

    llm_server.handler = handler
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_long", "tell me everything")
        await bot.wait_for(lambda: len(bot.replies_to("om_long")) > 1)
        await bot.settle()
        shown = "\n".join(text_of(m, bot.feishu) for m in bot.replies_to("om_long"))
        for i in range(40):
            assert f"Paragraph {i}." in shown
        uuids = {m.uuid for m in bot.replies_to("om_long")}
        assert len(uuids) == len(bot.replies_to("om_long"))


async def test_stop_while_the_question_is_still_being_read_stops_it(bot):
    from e2e.test_media import png, push

    bot.feishu.slow("GET", r"/resources/", 1.5)
    message = bot.feishu.add_image_message("om_img", chat_id="oc_dm", data=png())
    await push(bot, message)
    # The turn has started and waits for its image: no agent holds the queue yet.
    await bot.wait_for(lambda: bot.feishu.count("GET", r"/resources/") >= 1)
    await bot.say("om_stop", "/stop")
    assert await bot.reply("om_stop") == texts.STOPPED
    await bot.settle()
    (card,) = [bot.feishu.cards[m.card_id] for m in bot.replies_to("om_img")]
    assert card.element("answer")["content"] == texts.STOPPED_CARD
    assert card.streaming_mode is False
    assert bot.llm_server.requests == []
    assert (await bot.services.ledger.get("om_img")).state == "done"
