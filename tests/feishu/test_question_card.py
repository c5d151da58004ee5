"""The question card (``ask_user``): golden JSON for every state, the values its buttons
send, the click read back as typed data, and what hostile text can do (nothing).

Each ``tests/fixtures/cards/question/<name>.json`` is what the builder returns for the view
of the same name in ``GOLDEN``; ``LARKGATE_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.feishu.events import CardAction, parse_card_action
from bot.feishu.question_card import (
    ANSWER_CHARS,
    ANSWER_FIELD,
    FORM_NAME,
    MAX_OPTIONS,
    OPTION_CHARS,
    QUESTION_ACTION,
    QUESTION_CHARS,
    SUBMIT_NAME,
    CardState,
    QuestionCardView,
    answer_value,
    option_value,
    question_card,
    question_click,
)
from bot.governance.seal import ButtonSeal
from bot.store.questions import MAX_ANSWER_CHARS, QUESTION_STATES

from support.cards import buttons, callback_values, nodes, texts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cards" / "question"
UPDATE = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"
T0 = 1741932000.0  # 2025-03-14 06:00:00 UTC
SEAL = ButtonSeal(b"question-card-test-key-0123456789")
ASKER = "ou_alice"
MENTION = f"<at id={ASKER}></at>"

PENDING = QuestionCardView(
    question_id="q0123456789abcdef",
    question="Which environment should I deploy to?",
    asker=ASKER,
    expires_at=T0 + 600,
    options=("staging", "production"),
)
FREE = replace(
    PENDING,
    question="What should the release notes say?\nOne or two lines is enough.",
    options=(),
)

GOLDEN: dict[str, Callable[[], dict[str, Any]]] = {
    "pending_options": lambda: question_card(PENDING, seal=SEAL.sealed),
    "pending_free_text": lambda: question_card(FREE, seal=SEAL.sealed),
    "pending_many_options": lambda: question_card(
        replace(
            PENDING,
            options=(
                *(f"option {n}" for n in range(11)),
                "a very long option that goes on and on, well past what a button should hold",
            ),
            timezone="Asia/Shanghai",
        ),
        seal=SEAL.sealed,
    ),
    "answered_option": lambda: question_card(
        replace(
            PENDING,
            state="answered",
            answer="production",
            answered_by=ASKER,
            decided_at=T0 + 42,
        ),
        seal=None,
    ),
    "answered_free_text": lambda: question_card(
        replace(
            FREE,
            state="answered",
            answer="Faster start-up.\nFixed: [links](https://x), <at id=all></at> as typed.",
            answered_by=ASKER,
            decided_at=T0 + 90,
        ),
        seal=None,
    ),
    "expired": lambda: question_card(replace(PENDING, state="expired"), seal=None),
    "cancelled": lambda: question_card(
        replace(FREE, state="cancelled", decided_at=T0 + 5, note="the reply was stopped (/stop)"),
        seal=None,
    ),
}


def test_every_fixture_has_a_view_and_every_view_a_fixture():
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(GOLDEN) or UPDATE


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_card(name: str):
    card = GOLDEN[name]()
    path = FIXTURES / f"{name}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n")
    assert card == json.loads(path.read_text())


def _element(card: dict[str, Any], element_id: str) -> dict[str, Any]:
    (found,) = [n for n in nodes(card) if n.get("element_id") == element_id]
    return found


def test_the_card_and_the_store_know_the_same_states_and_answer_limit():
    assert get_args(CardState) == QUESTION_STATES
    assert ANSWER_CHARS == MAX_ANSWER_CHARS


def test_an_options_question_has_one_sealed_button_per_option_labelled_with_it():
    card = question_card(PENDING, seal=SEAL.sealed)
    assert card["schema"] == "2.0" and card["config"]["update_multi"] is True
    labels = [button["text"] for button in buttons(card)]
    assert labels == [
        {"tag": "plain_text", "content": "staging"},
        {"tag": "plain_text", "content": "production"},
    ]
    values = callback_values(card)
    assert values == [SEAL.sealed(option_value(PENDING.question_id, i)) for i in (0, 1)]
    assert values[1] == {
        "action": QUESTION_ACTION,
        "question_id": PENDING.question_id,
        "option": 1,
        "seal": values[1]["seal"],
    }
    assert all(SEAL.valid(value) for value in values)
    assert _element(card, "question")["text"] == {
        "tag": "plain_text",
        "content": PENDING.question,
    }
    assert _element(card, "asker")["content"].startswith(MENTION)
    assert f"Only {MENTION} can answer" in _element(card, "how")["content"]
    assert "until 06:10 (UTC)" in _element(card, "how")["content"]
    assert not [n for n in nodes(card) if n.get("tag") in ("form", "input")]


def test_a_free_text_question_is_a_form_with_one_input_and_a_submit_button():
    card = question_card(FREE, seal=SEAL.sealed)
    (form,) = [n for n in nodes(card) if n.get("tag") == "form"]
    assert form in card["body"]["elements"]  # Feishu wants a form at the card's root
    assert form["name"] == FORM_NAME
    (field,) = [n for n in nodes(form) if n.get("tag") == "input"]
    assert (field["name"], field["max_length"], field["required"]) == (
        ANSWER_FIELD,
        ANSWER_CHARS,
        True,
    )
    (button,) = buttons(card)
    assert (button["name"], button["form_action_type"]) == (SUBMIT_NAME, "submit")
    (value,) = callback_values(card)
    assert value == SEAL.sealed(answer_value(FREE.question_id)) and SEAL.valid(value)
    assert "option" not in value
    # Its lines are kept: a plain text node, never markdown.
    assert _element(card, "question")["text"]["content"] == FREE.question


def test_past_ten_options_the_card_says_how_many_are_not_offered():
    card = GOLDEN["pending_many_options"]()
    labels = [button["text"]["content"] for button in buttons(card)]
    assert labels == [f"option {n}" for n in range(MAX_OPTIONS)]
    assert [value["option"] for value in callback_values(card)] == list(range(MAX_OPTIONS))
    assert _element(card, "more")["content"] == "2 more options not shown (a card holds 10)."


def test_a_long_question_is_cut_with_a_mark():
    card = question_card(replace(PENDING, question="why? " * 1000), seal=None)
    shown = _element(card, "question")["text"]["content"]
    assert len(shown) == QUESTION_CHARS and shown.endswith("…")


def test_a_long_option_is_cut_on_its_button_but_its_value_is_its_index():
    long = "word " * 40
    card = question_card(replace(PENDING, options=("short", long)), seal=None)
    label = buttons(card)[1]["text"]["content"]
    assert label.endswith("…") and len(label) == OPTION_CHARS
    assert callback_values(card)[1] == option_value(PENDING.question_id, 1)


@pytest.mark.parametrize("state", ["answered", "expired", "cancelled"])
def test_an_ended_question_has_no_button_or_input_and_says_how_it_ended(state: str):
    view = replace(PENDING, state=state, answer="staging", answered_by=ASKER, decided_at=T0 + 1)
    card = question_card(view, seal=SEAL.sealed)
    assert buttons(card) == [] and callback_values(card) == []
    assert not [n for n in nodes(card) if n.get("tag") in ("form", "input")]
    assert card["header"]["template"] != "blue"
    outcome = _element(card, "outcome")["content"]
    assert outcome
    if state == "answered":
        assert outcome == f"✅ Answered by {MENTION} at 06:00 (UTC):"
        assert _element(card, "answer")["text"]["content"] == "staging"


def test_the_answer_is_shown_as_written_never_as_markup():
    card = GOLDEN["answered_free_text"]()
    shown = _element(card, "answer")["text"]
    assert shown["tag"] == "plain_text"
    assert "[links](https://x)" in shown["content"]
    assert "<at" not in shown["content"] and "<\u200bat id=all>" in shown["content"]


# -- the click, as typed data ----------------------------------------------------------------


def _action(value: dict[str, Any], form_value: dict[str, Any] | None = None) -> CardAction:
    return CardAction(
        event_id="evt_1",
        operator_open_id=ASKER,
        tag="button",
        value=value,
        form_value=form_value or {},
        open_message_id="om_card",
        open_chat_id="oc_1",
    )


def test_an_option_click_and_a_submission_are_read_as_typed_data():
    value = SEAL.sealed(option_value("q1", 3))
    click = question_click(_action(value))
    assert click is not None
    assert (click.question_id, click.option, click.text) == ("q1", 3, None)
    assert click.value == value and SEAL.valid(dict(click.value))

    value = SEAL.sealed(answer_value("q1"))
    click = question_click(_action(value, {ANSWER_FIELD: "blue, please"}))
    assert click is not None
    assert (click.question_id, click.option, click.text) == ("q1", None, "blue, please")
    assert SEAL.valid(dict(click.value))


@pytest.mark.parametrize(
    ("value", "form_value"),
    [
        ({"action": "approval", "question_id": "q1", "option": 0}, None),
        ({"action": QUESTION_ACTION, "option": 0}, None),
        ({"action": QUESTION_ACTION, "question_id": "", "option": 0}, None),
        ({"action": QUESTION_ACTION, "question_id": 7, "option": 0}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": True}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": "0"}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": -1}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": MAX_OPTIONS}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": 1.0}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1", "option": 0}, {ANSWER_FIELD: "x"}),
        ({"action": QUESTION_ACTION, "question_id": "q1"}, None),
        ({"action": QUESTION_ACTION, "question_id": "q1"}, {ANSWER_FIELD: ["a", "b"]}),
        ({"action": QUESTION_ACTION, "question_id": "q1"}, {"other": "text"}),
    ],
)
def test_a_click_that_is_not_a_well_formed_question_click_is_none(value, form_value):
    assert question_click(_action(value, form_value)) is None


# -- hostile text ----------------------------------------------------------------------------

_outside = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
_hostile = st.one_of(
    _outside,
    st.sampled_from(
        [
            "[click me](https://evil.example)",
            "<at id=all></at> everyone",
            "<AT user_id='ou_boss'>Boss</at>",
            "**Approve** `x` ~~y~~ # heading\n- list\n> quote",
            '{"tag": "button", "behaviors": [{"type": "callback"}]}',
            "\u202eevil\u202c",
            "line\r\nbreak\x00nul",
            "```\nfence",
            "&#60;at id=all&#62;",
        ]
    ),
)


@settings(max_examples=150, derandomize=True)
@given(
    question=_hostile,
    options=st.lists(_hostile, max_size=13),
    answer=_hostile,
    note=_hostile,
    state=st.sampled_from(QUESTION_STATES),
)
def test_hostile_text_cannot_add_a_button_a_link_or_a_mention(
    question, options, answer, note, state
):
    view = QuestionCardView(
        question_id="q1",
        question=question,
        asker=ASKER,
        expires_at=T0,
        options=tuple(options),
        state=state,
        answer=answer,
        answered_by=ASKER,
        decided_at=T0,
        note=note,
    )
    card = question_card(view, seal=SEAL.sealed)
    encoded = json.dumps(card, ensure_ascii=False, allow_nan=False)
    assert json.loads(encoded) == card  # always valid JSON
    assert len(encoded.encode()) < 24_000  # well inside a card's ~30 KB

    # The only buttons are the options (or the one Send button), each with our value.
    expected: list[dict[str, Any]] = []
    if state == "pending" and options:
        expected = [SEAL.sealed(option_value("q1", i)) for i in range(min(len(options), 10))]
    elif state == "pending":
        expected = [SEAL.sealed(answer_value("q1"))]
    assert callback_values(card) == expected
    assert len(buttons(card)) == len(expected)
    for node in nodes(card):
        assert node.get("tag") not in ("a", "img", "action", "select_static", "overflow")
        assert set(node.get("behaviors", [{}])[0]) <= {"type", "value"}

    # Outside text sits in plain text only; markdown holds our words and our mention.
    for content in (n["content"] for n in nodes(card) if n.get("tag") == "markdown"):
        assert content.replace(MENTION, "").count("<") == 0
        assert "[" not in content and "](" not in content and "`" not in content
        assert "\n" not in content
    for content in texts(card):
        assert "<at" not in content.replace(MENTION, "").lower()
        assert "\u202e" not in content and "\x00" not in content and "\r" not in content

    ids = [n["element_id"] for n in nodes(card) if "element_id" in n]
    assert len(ids) == len(set(ids))
    assert all(len(i) <= 20 and i[0].isalpha() for i in ids)


@pytest.mark.parametrize(
    ("name", "option", "text"),
    [
        ("question_option", 1, None),
        ("question_form_submit", None, "先出码后置完成，但要加对账补偿\nand the EU region first"),
    ],
)
def test_feishus_callbacks_of_a_question_card_parse_to_typed_clicks(name, option, text):
    """The golden callbacks (Feishu's documented shape of a button click and of a form
    submission, ``tests/fixtures/callbacks/question_*``) through the callback parser."""
    path = FIXTURES.parents[1] / "callbacks" / f"{name}.event.json"
    action = parse_card_action(json.loads(path.read_text()))
    assert isinstance(action, CardAction)
    click = question_click(action)
    assert click is not None
    assert (click.question_id, click.option, click.text) == ("q0123456789abcdef", option, text)
    assert click.value == action.value and "seal" in click.value
