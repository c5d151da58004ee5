"""``larkgate dev`` delivers a question card's answers over the wire: an option pressed on
the page, and a form submitted with what was typed, reach the bot's card route as Feishu
would send them, and the card the bot answers with replaces the question in the chat.
(``support.questions.QuestionDesk`` stands in for ``ask_user``'s handler.)"""

from __future__ import annotations

import pytest

from bot.app import SERVICES
from bot.feishu.question_card import ANSWER_FIELD, SUBMIT_NAME
from bot.sandbox.people import ADMIN, USER

from support.cards import button_values
from support.env import clear_settings
from support.questions import QuestionDesk
from support.sandbox import card_text, cards


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


@pytest.fixture
def desk(sandbox) -> QuestionDesk:
    return QuestionDesk(sandbox.bot_app[SERVICES])


async def test_an_option_pressed_on_the_page_answers_the_question(sandbox, page, desk):
    card_id = await desk.ask(
        USER.dm_chat_id(), "Deploy where?", asker=USER.open_id, options=("staging", "production")
    )
    messages = await page.until(USER.key, "dm", lambda ms: any(m["id"] == card_id for m in ms))
    (question,) = cards(messages)
    assert "Deploy where?" in card_text(question)

    pressed = await page.click(USER.key, card_id, button_values(question["card"])["production"])
    assert pressed["status"] == 200 and pressed["toast"]["type"] == "success", pressed
    (action,) = desk.clicks
    assert (action.operator_open_id, action.open_message_id) == (USER.open_id, card_id)
    assert action.value["option"] == 1 and action.form_value == {}
    (answered,) = desk.answered
    assert answered.option == 1

    # The card the bot answered with is what the chat shows now.
    (shown,) = cards((await page.transcript(USER.key, "dm"))["messages"])
    assert "Answered" in card_text(shown) and "production" in card_text(shown)
    assert button_values(shown["card"]) == {}


async def test_a_form_submitted_on_the_page_sends_what_was_typed(sandbox, page, desk):
    card_id = await desk.ask(USER.dm_chat_id(), "What should the notes say?", asker=USER.open_id)
    await page.until(USER.key, "dm", lambda ms: any(m["id"] == card_id for m in ms))

    # Someone else's answer is delivered, and refused by the bot.
    refused = await page.submit_form(ADMIN.key, card_id, {ANSWER_FIELD: "mine"})
    assert refused["status"] == 200 and refused["toast"]["type"] == "error"

    typed = "Faster start-up;\nfewer cards. 日本"
    submitted = await page.submit_form(USER.key, card_id, {ANSWER_FIELD: typed})
    assert submitted["status"] == 200 and submitted["toast"]["type"] == "success", submitted
    action = desk.clicks[-1]
    assert action.name == SUBMIT_NAME and action.form_value == {ANSWER_FIELD: typed}
    assert action.value["question_id"] == desk.answered[0].question_id
    assert desk.answered[0].text == typed
    (shown,) = cards((await page.transcript(USER.key, "dm"))["messages"])
    assert "Answered" in card_text(shown) and "fewer cards" in card_text(shown)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"form_value": {ANSWER_FIELD: ""}}, "required and empty"),
        ({"form_value": {ANSWER_FIELD: "x" * 1001}}, "more than 1000"),
        ({"form_value": {"other": "x"}}, "no component named"),
        ({"form_value": {ANSWER_FIELD: "x"}, "button": "Nope"}, "0 submit buttons"),
        ({"form_value": "text"}, "a form_value object"),
    ],
)
async def test_what_feishu_would_not_send_is_refused_and_reaches_nobody(
    sandbox, page, desk, body, says
):
    card_id = await desk.ask(USER.dm_chat_id(), "Why?", asker=USER.open_id)
    request = {"user": USER.key, "message_id": card_id, **body}
    async with page.session.post(page.url + "/api/click", json=request) as resp:
        assert resp.status == 400
        assert says in await resp.text()
    assert desk.clicks == []


async def test_a_message_that_is_no_card_has_no_form(sandbox, page, desk):
    sent = await page.send(USER.key, "dm", "hello")
    request = {"user": USER.key, "message_id": sent["message_id"], "form_value": {"a": "b"}}
    async with page.session.post(page.url + "/api/click", json=request) as resp:
        assert resp.status == 400 and "not a card" in await resp.text()
