"""``ask_user`` end to end: the model asks the person it answers, the card takes their
answer (an option, or typed text), and the run goes on with it; only that person's
answer counts; nobody answering is said; the question outlives a restart."""

from __future__ import annotations

import json
from typing import Any

from bot.feishu.question_card import ANSWER_FIELD
from bot.sandbox.push import message_event
from bot.store import CheckpointStore
from bot.store.questions import QuestionStore

from e2e.harness import BOT_OPEN_ID, VERIFICATION_TOKEN, Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

USER = "ou_user"  # the sender of message_event's messages
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]


def asking(options: list[str] | None) -> Any:
    """A model that asks once, then says what it was told."""

    def handler(body: dict[str, Any]) -> Reply:
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if is_synthesis(body):
            return Reply(content="Told: " + body["messages"][-1]["content"])
        if not tools:
            arguments: dict[str, Any] = {"question": "Deploy where?"}
            if options is not None:
                arguments["options"] = options
            return Reply(tool_calls=[("q1", "ask_user", arguments)])
        return Reply(content="Told: " + tools[-1]["content"])

    return handler


def _question_cards(bot: Bot, message_id: str) -> list[Any]:
    return [
        m
        for m in bot.replies_to(message_id)
        if not m.card_id and "Deploy where?" in json.dumps(m.content, ensure_ascii=False)
    ]


async def _question_card(bot: Bot, message_id: str) -> str:
    """The question card's message id, once its question knows it (a click before that
    is refused as not from its card)."""
    await bot.wait_for(lambda: bool(_question_cards(bot, message_id)), within=15)
    card = _question_cards(bot, message_id)[0]
    store = QuestionStore(bot.services.database)

    async def linked() -> bool:
        record = await store.get(_question_id(bot, card.message_id))
        return record is not None and record.card_message_id == card.message_id

    await bot.wait_for(linked, within=15)
    return card.message_id


def _answer(bot: Bot, message_id: str) -> str:
    live = [m for m in bot.replies_to(message_id) if m.card_id]
    card = bot.feishu.cards[live[0].card_id].card
    return "".join(
        e.get("content", "") for e in card["body"]["elements"] if e["element_id"] == "answer"
    )


async def _say(bot: Bot, message_id: str, text: str, **fields: Any) -> None:
    """A message the emulator knows too, so the bot's replies land in its chat (the
    question card's clicks come from there)."""
    fields.setdefault("chat_id", "oc_dm")
    envelope = message_event(
        message_id=message_id, text=text, verification_token=VERIFICATION_TOKEN, **fields
    )
    bot.feishu.add_event_message(envelope)
    await bot.push(envelope)


def _start(tmp_path, feishu, llm_server, owner: str = "first", **overrides: Any):
    settings = settings_for(tmp_path, feishu, llm_server, **overrides)
    return running_bot(settings, feishu, llm_server, owner=owner)


async def test_the_asker_picks_an_option_and_the_run_goes_on_with_it(tmp_path, feishu, llm_server):
    llm_server.handler = asking(["staging", "prod"])
    async with _start(tmp_path, feishu, llm_server) as bot:
        await _say(bot, "om_q1", "deploy the api")
        card = await _question_card(bot, "om_q1")
        answer = await bot.press(card, "prod", by=USER)
        assert answer["toast"]["type"] == "success"
        assert "prod" in json.dumps(answer["card"]["data"], ensure_ascii=False)
        await bot.reply("om_q1")
        await bot.settle()
        assert "answered: prod" in _answer(bot, "om_q1")
        # The question is a step of the answer's card.
        live = next(m for m in bot.replies_to("om_q1") if m.card_id)
        assert "ask_user" in json.dumps(feishu.cards[live.card_id].card)


async def test_a_free_text_answer_comes_through_the_form(tmp_path, feishu, llm_server):
    llm_server.handler = asking(None)
    async with _start(tmp_path, feishu, llm_server) as bot:
        await _say(bot, "om_q2", "deploy the api")
        card = await _question_card(bot, "om_q2")
        typed = "the EU region first [x](https://evil) <at id=all></at>"
        answer = await bot.submit_form(card, {ANSWER_FIELD: typed}, by=USER)
        assert answer["toast"]["type"] == "success"
        await bot.reply("om_q2")
        await bot.settle()
        assert "the EU region first" in _answer(bot, "om_q2")


async def test_in_a_group_only_the_asker_answers(tmp_path, feishu, llm_server):
    llm_server.handler = asking(["staging", "prod"])
    async with _start(tmp_path, feishu, llm_server) as bot:
        await _say(
            bot, "om_q3", "@_user_1 deploy", chat_type="group", chat_id="oc_team", mentions=MENTION
        )
        card = await _question_card(bot, "om_q3")
        stranger = await bot.press(card, "prod", by="ou_mallory")
        assert stranger["toast"]["type"] == "error" and "card" not in stranger
        store = QuestionStore(bot.services.database)
        record = await store.get(_question_id(bot, card))
        assert record is not None and record.state == "pending" and record.asker == USER
        mine = await bot.press(card, "staging", by=USER)
        assert mine["toast"]["type"] == "success"
        await bot.reply("om_q3")
        await bot.settle()
        assert "answered: staging" in _answer(bot, "om_q3")


def _question_id(bot: Bot, card_message_id: str) -> str:
    value = json.dumps(bot.feishu.message_by_id[card_message_id].content)
    return value.split('"question_id": "')[1].split('"')[0]


async def test_nobody_answering_is_said(tmp_path, feishu, llm_server):
    llm_server.handler = asking(["staging", "prod"])
    async with _start(tmp_path, feishu, llm_server, larkgate_question_ttl_seconds=2) as bot:
        await _say(bot, "om_q4", "deploy the api")
        card = await _question_card(bot, "om_q4")
        await bot.reply("om_q4", within=20)
        await bot.settle()
        assert "Nobody answered" in _answer(bot, "om_q4")
        late = await bot.press(card, "prod", by=USER) if _has_buttons(bot, card) else None
        assert late is None or late["toast"]["type"] == "info"


def _has_buttons(bot: Bot, message_id: str) -> bool:
    return '"tag": "button"' in json.dumps(bot.feishu.message_by_id[message_id].content)


async def test_a_question_outlives_a_restart(tmp_path, feishu, llm_server):
    llm_server.handler = asking(["staging", "prod"])
    async with _start(tmp_path, feishu, llm_server, owner="first") as bot:
        await _say(bot, "om_q5", "deploy the api")
        card = await _question_card(bot, "om_q5")
        assert await CheckpointStore(bot.services.database).for_message("om_q5") is not None
    before = len(llm_server.requests)
    async with _start(tmp_path, feishu, llm_server, owner="second") as bot:
        await bot.wait_for(lambda: len(bot.services.questions.waits) == 1, within=30)
        answer = await bot.press(card, "prod", by=USER)
        assert answer["toast"]["type"] == "success"
        await bot.reply("om_q5", within=30)
        await bot.settle()
        assert "answered: prod" in _answer(bot, "om_q5")
        # One question card: the resumed run met its question again.
        assert len(_question_cards(bot, "om_q5")) == 1
        assert len(llm_server.requests) - before == 1


async def test_a_forged_or_misplaced_click_answers_nothing(tmp_path, feishu, llm_server):
    """A value this bot did not seal (a card a prompt-injected model had posted, an edited
    value), or the question's real value clicked from another message, changes nothing."""
    llm_server.handler = asking(["staging", "prod"])
    async with _start(tmp_path, feishu, llm_server) as bot:
        await _say(bot, "om_q6", "deploy the api")
        card = await _question_card(bot, "om_q6")
        question_id = _question_id(bot, card)
        forged = {"action": "question", "question_id": question_id, "option": 1}
        answer = await bot.click(forged, by=USER, card_message_id=card)
        assert answer["toast"]["type"] == "error"
        content = bot.feishu.message_by_id[card].content
        (sealed,) = [
            e["behaviors"][0]["value"] for e in _buttons(content) if e["text"]["content"] == "prod"
        ]
        elsewhere = await bot.click(sealed, by=USER, card_message_id="om_other_card")
        assert elsewhere["toast"]["type"] == "error"
        other_chat = await bot.click(sealed, by=USER, card_message_id=card, chat_id="oc_other")
        assert other_chat["toast"]["type"] == "error"
        record = await QuestionStore(bot.services.database).get(question_id)
        assert record is not None and record.state == "pending"
        mine = await bot.click(sealed, by=USER, card_message_id=card)
        assert mine["toast"]["type"] == "success"
        await bot.reply("om_q6")
        await bot.settle()
        assert "answered: prod" in _answer(bot, "om_q6")


def _buttons(card: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("tag") == "button":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return found
