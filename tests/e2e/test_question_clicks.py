"""A question card's clicks over the wire: a person pressing an option, or typing into the
form and pressing Send, reaches the bot's ``/feishu/card`` route signed and encrypted as
Feishu sends it, and the card action handler gets them as typed data (``question_click``).
``Bot.press`` and ``Bot.submit_form`` read the card the emulator shows, as Feishu's client
does. (``support.questions.QuestionDesk`` stands in for ``ask_user``'s handler.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bot.feishu.question_card import ANSWER_FIELD, SUBMIT_NAME, question_click
from bot.sandbox.emulator.clicks import ClickRefused

from e2e.harness import ENCRYPT_KEY, VERIFICATION_TOKEN
from fakes.feishu_push import signed_request
from support.questions import QuestionDesk

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "callbacks"
ALICE = "ou_alice"


@pytest.fixture
def desk(bot) -> QuestionDesk:
    return QuestionDesk(bot.services)


async def test_pressing_an_option_delivers_its_index(bot, desk):
    card_id = await desk.ask("oc_dm", "Deploy where?", asker=ALICE, options=("staging", "prod"))
    answer = await bot.press(card_id, "prod", by=ALICE)
    assert answer["toast"]["type"] == "success"
    assert "prod" in json.dumps(answer["card"]["data"])
    (action,) = desk.clicks
    assert (action.open_message_id, action.open_chat_id) == (card_id, "oc_dm")
    click = question_click(action)
    assert click is not None and (click.option, click.text) == (1, None)
    assert desk.seal.valid(dict(click.value))


async def test_submitting_the_form_delivers_what_was_typed(bot, desk):
    card_id = await desk.ask("oc_dm", "What should the notes say?", asker=ALICE)
    typed = "Faster start-up.\n<at id=all></at> [x](https://evil) stays text."
    answer = await bot.submit_form(card_id, {ANSWER_FIELD: typed}, by=ALICE)
    assert answer["toast"]["type"] == "success", answer
    (action,) = desk.clicks
    assert action.name == SUBMIT_NAME
    assert action.form_value == {ANSWER_FIELD: typed}
    click = question_click(action)
    assert click is not None and (click.option, click.text) == (None, typed)
    assert desk.seal.valid(dict(click.value))


async def test_only_the_asker_answers_and_the_client_refuses_an_empty_form(bot, desk):
    card_id = await desk.ask("oc_dm", "Why?", asker=ALICE)
    with pytest.raises(ClickRefused, match="required and empty"):
        await bot.submit_form(card_id, {ANSWER_FIELD: ""}, by=ALICE)
    assert desk.clicks == []  # nothing was sent
    refused = await bot.submit_form(card_id, {ANSWER_FIELD: "mine"}, by="ou_mallory")
    assert refused["toast"]["type"] == "error" and desk.answered == []


async def test_feishus_documented_form_submission_reaches_the_handler_typed(bot, desk):
    """The golden payload (Feishu's documented form submission) posted to the route as
    Feishu posts it: the handler gets the button's value and the form's text."""
    envelope = json.loads((FIXTURES / "question_form_submit.event.json").read_text())
    envelope["header"]["token"] = VERIFICATION_TOKEN
    envelope["header"]["app_id"] = bot.feishu.app_id  # the app this bot is
    envelope["header"]["create_time"] = str(int(time.time() * 1_000_000))
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    status, answer = await bot.post("/feishu/card", body, headers)
    assert status == 200
    (action,) = desk.clicks
    click = question_click(action)
    assert click is not None
    assert (click.question_id, click.option) == ("q0123456789abcdef", None)
    assert click.text == "先出码后置完成，但要加对账补偿\nand the EU region first"
    # Its seal is not this desk's: a value this bot did not write answers nothing.
    assert answer["toast"]["type"] == "error" and desk.answered == []
