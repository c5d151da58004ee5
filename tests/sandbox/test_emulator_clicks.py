"""What Feishu's client sends for a press (``bot.sandbox.emulator.clicks``): a button's value
from the card as shown, a form's submission with every input by name, and what the client
refuses to send; the question cards keep Feishu's rules for forms."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.feishu.client import FeishuClient
from bot.feishu.question_card import (
    ANSWER_CHARS,
    ANSWER_FIELD,
    SUBMIT_NAME,
    QuestionCardView,
    answer_value,
    option_value,
    question_card,
)
from bot.sandbox.emulator.clicks import (
    ClickRefused,
    button_press,
    form_problems,
    form_submission,
    shown_card,
)

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

OPTIONS = QuestionCardView(
    question_id="q1", question="Which one?", asker="ou_alice", expires_at=0.0, options=("a", "b")
)
FREE = QuestionCardView(question_id="q2", question="Why?", asker="ou_alice", expires_at=0.0)


def _seal(value):
    return {**value, "seal": "s"}


def test_an_option_is_pressed_by_its_label_and_sends_its_value():
    card = question_card(OPTIONS, seal=_seal)
    press = button_press(card, "b")
    assert (press.value, press.name, press.form_value) == (
        _seal(option_value("q1", 1)),
        None,
        None,
    )
    with pytest.raises(ClickRefused, match="0 buttons labelled 'c'"):
        button_press(card, "c")


def test_a_form_is_submitted_with_its_inputs_by_name_and_its_buttons_value():
    card = question_card(FREE, seal=_seal)
    press = form_submission(card, {ANSWER_FIELD: "because\nof reasons"})
    assert press.value == _seal(answer_value("q2"))
    assert press.name == SUBMIT_NAME
    assert press.form_value == {ANSWER_FIELD: "because\nof reasons"}
    # Its Send button submits the form; it is no plain button.
    with pytest.raises(ClickRefused):
        button_press(card, "Send answer")
    assert form_submission(card, {ANSWER_FIELD: "x"}, button="Send answer").form_value


@pytest.mark.parametrize(
    ("inputs", "says"),
    [
        ({}, "required and empty"),
        ({ANSWER_FIELD: ""}, "required and empty"),
        ({ANSWER_FIELD: "x" * (ANSWER_CHARS + 1)}, "more than 1000"),
        ({ANSWER_FIELD: "x", "other": "y"}, "no component named 'other'"),
    ],
)
def test_what_feishus_client_would_not_send_is_refused(inputs, says):
    with pytest.raises(ClickRefused, match=says):
        form_submission(question_card(FREE, seal=None), inputs)


def test_a_card_without_a_form_has_nothing_to_submit():
    with pytest.raises(ClickRefused, match="0 submit buttons"):
        form_submission(question_card(OPTIONS, seal=None), {ANSWER_FIELD: "x"})
    with pytest.raises(ClickRefused, match="0 submit buttons"):
        form_submission(question_card(FREE, seal=None), {ANSWER_FIELD: "x"}, button="Other")


@given(
    question=st.text(max_size=200),
    options=st.lists(st.text(min_size=1, max_size=80), max_size=12),
    state=st.sampled_from(["pending", "answered", "expired", "cancelled"]),
)
def test_every_question_card_keeps_feishus_rules_for_forms(question, options, state):
    view = QuestionCardView(
        question_id="q", question=question, asker="ou_a", expires_at=0.0, options=tuple(options)
    )
    assert form_problems(question_card(replace(view, state=state), seal=_seal)) == []


def test_form_problems_names_what_feishu_refuses():
    nested = {
        "schema": "2.0",
        "body": {
            "elements": [
                {"tag": "column_set", "columns": [{"tag": "form", "name": "f", "elements": []}]},
                {
                    "tag": "form",
                    "elements": [
                        {"tag": "input", "max_length": 5000},
                        {"tag": "button", "name": "b"},
                        {"tag": "input", "name": "b"},
                    ],
                },
            ]
        },
    }
    assert form_problems(nested) == [
        "a form may only be an element of the card's body",
        "a form needs a name",
        "a input in a form needs a name",
        "an input's max_length must be 1..1000",
        "a form needs a submit button",
        "names must be unique in a card: b",
    ]


async def test_shown_card_is_the_card_the_chat_shows_now():
    async with FakeFeishu() as fake, FeishuClient(feishu_config(fake), timeout=5.0) as client:
        card = question_card(FREE, seal=None)
        sent = await client.send_message(
            "chat_id", "oc_1", msg_type="interactive", content=json.dumps(card)
        )
        assert shown_card(fake, sent.message_id) == card
        ended = question_card(replace(FREE, state="expired"), seal=None)
        await client.patch_message(sent.message_id, json.dumps(ended))
        assert shown_card(fake, sent.message_id) == ended
        # A card entity shows its current JSON.
        card_id = await client.create_card(card)
        entity = await client.send_message(
            "chat_id",
            "oc_1",
            msg_type="interactive",
            content=json.dumps({"type": "card", "data": {"card_id": card_id}}),
        )
        assert shown_card(fake, entity.message_id) == card
        text = await client.send_message(
            "chat_id", "oc_1", msg_type="text", content=json.dumps({"text": "hi"})
        )
        assert shown_card(fake, text.message_id) is None
        assert shown_card(fake, "om_nope") is None
