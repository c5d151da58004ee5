"""The question card: the agent asks the person who asked it (the ``ask_user`` tool).

A pure function of a small view model, rewritten in place as the question moves on, like
the approval card. ``pending`` shows the question and either one button per option (the
button's text is the option) or, without options, a form with one text input and a Send
button. ``answered`` (the answer and who gave it), ``expired`` and ``cancelled`` have no
button and no input.

Only the asker's answer counts (the store's update requires it); the card says so, and
mentions them. Every button's value is ``option_value(question_id, index)`` and the Send
button's ``answer_value(question_id)``, both with ``"action": "question"`` (the card
callback routes clicks by it, ``CardActions.register``). This module does not seal them:
``bot.feishu`` may not import governance, so the caller passes its sealing function
(``ButtonSeal.sealed``) as ``seal``, and checks the seal when the click comes back.
``question_click`` reads such a click (a button's option index, or the form's text) from
a parsed callback.

The question and the options come from the model, the answer from a person: all of it is
data. They are shown only as ``plain_text`` (a div's text, a button's label), which
Feishu never reads as markdown, with invisible and control characters as ``\\uXXXX``
(a bidi override cannot disguise anything) and ``<at`` broken, so that no text can make a
link, a mention, a heading or a button. Markdown holds only our own words, mentions
built from well-formed open_ids, and escaped notes.

Limits (Feishu's, and what fits a card): ``MAX_OPTIONS`` (10) buttons, each label at most
``OPTION_CHARS`` (60) characters (longer options are cut with "…"; the value carries the
index, so the stored option is the answer); options past the tenth are not offered and the
card says how many. The question shows at most ``QUESTION_CHARS`` (2,000) characters; the
input takes at most ``ANSWER_CHARS`` (1,000, Feishu's own maximum for an input).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .approval_arguments import visible
from .approval_card import escape_markdown, format_time, mention
from .card_elements import footer as _footer
from .card_elements import markdown as _markdown
from .events import CardAction

QUESTION_ACTION = "question"  # the "action" field of every question-card button value
MAX_OPTIONS = 10
OPTION_CHARS = 60
QUESTION_CHARS = 2000
ANSWER_CHARS = 1000  # the input's max_length; Feishu allows 1 to 1,000
NOTE_CHARS = 200
FORM_NAME = "question_form"
ANSWER_FIELD = "answer"  # the input's name: the text arrives as form_value["answer"]
SUBMIT_NAME = "question_submit"  # the Send button's name (action.name of a submission)

CardState = Literal["pending", "answered", "expired", "cancelled"]
# What the caller seals a button value with (``ButtonSeal.sealed``); None leaves it as is.
Sealer = Callable[[Mapping[str, Any]], Mapping[str, Any]]

_HEADERS: dict[str, tuple[str, str]] = {
    "pending": ("Question for you", "blue"),
    "answered": ("Answered", "green"),
    "expired": ("Question expired", "grey"),
    "cancelled": ("Question cancelled", "grey"),
}
_AT_TAG = re.compile(r"<(?=/?at\b)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class QuestionCardView:
    question_id: str
    question: str  # as the model wrote it
    asker: str  # open_id: the only person whose answer counts
    expires_at: float  # epoch seconds
    options: tuple[str, ...] = ()  # () asks for a free-text answer
    state: CardState = "pending"
    answer: str | None = None  # the option chosen or the text written
    answered_by: str | None = None  # open_id
    decided_at: float | None = None
    note: str | None = None  # e.g. why it was cancelled
    timezone: str = "UTC"  # IANA zone used to show times


@dataclass(frozen=True, slots=True)
class QuestionClick:
    """A click on a question card, as typed data: an option button (``option``, its index)
    or the form's Send button (``text``, what was typed). ``value`` is the button's whole
    value, for the caller's seal check."""

    question_id: str
    option: int | None
    text: str | None
    value: Mapping[str, Any]


def option_value(question_id: str, index: int) -> dict[str, Any]:
    """The callback value of the button of option ``index`` (before it is sealed)."""
    return {"action": QUESTION_ACTION, "question_id": question_id, "option": index}


def answer_value(question_id: str) -> dict[str, Any]:
    """The callback value of the form's Send button (before it is sealed); the text comes
    with it as ``form_value[ANSWER_FIELD]``."""
    return {"action": QUESTION_ACTION, "question_id": question_id}


def question_card(view: QuestionCardView, *, seal: Sealer | None) -> dict[str, Any]:
    """The card (JSON 2.0) for ``view``: post it pending, PATCH it when the question ends.

    ``seal`` seals each button value (the caller's ``ButtonSeal.sealed``); None leaves them
    unsealed (a card without buttons, or a test)."""
    title, template = _HEADERS.get(view.state, ("Question closed", "grey"))
    elements: list[dict[str, Any]] = [
        _markdown("asker", _asker_line(view)),
        _plain("question", _shown(view.question, QUESTION_CHARS) or "(no question)"),
    ]
    if view.state == "pending":
        sealed = seal or dict
        if view.options:
            elements.extend(_option_elements(view, sealed))
        else:
            elements.append(_form(view.question_id, sealed))
        until = format_time(view.expires_at, view.timezone)
        who = mention(view.asker)
        elements.append(
            _markdown("how", f"Only {who} can answer. ⏳ I wait until {until}.", size="notation")
        )
    else:
        elements.append(_markdown("outcome", _outcome(view)))
        if view.state == "answered" and view.answer is not None:
            elements.append(_plain("answer", _shown(view.answer, ANSWER_CHARS) or "(empty)"))
    elements.append(_footer(f"Question ID: {view.question_id}"))
    summary = _shown(" ".join(view.question.split()), OPTION_CHARS)
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": f"{title}: {summary}"}},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": template,
        },
        "body": {"direction": "vertical", "elements": elements},
    }


def question_click(action: CardAction) -> QuestionClick | None:
    """The question-card click in ``action``, or None when it is not one or is malformed:
    an option button's value names an index (a whole number below ``MAX_OPTIONS``) and
    comes without a form; the Send button's comes with the form's text (a string)."""
    value = action.value
    question_id = value.get("question_id")
    if value.get("action") != QUESTION_ACTION or not isinstance(question_id, str):
        return None
    if not question_id:
        return None
    if "option" in value:
        option = value["option"]
        valid = isinstance(option, int) and not isinstance(option, bool)
        if not valid or not 0 <= option < MAX_OPTIONS or action.form_value:
            return None
        return QuestionClick(question_id, option, None, value)
    text = action.form_value.get(ANSWER_FIELD)
    if not isinstance(text, str):
        return None
    return QuestionClick(question_id, None, text, value)


# -- the parts of the card -----------------------------------------------------------------


def _asker_line(view: QuestionCardView) -> str:
    if view.state == "pending":
        return f"{mention(view.asker)} I need your answer to go on:"
    return f"I asked {mention(view.asker)}:"


def _option_elements(view: QuestionCardView, seal: Sealer) -> list[dict[str, Any]]:
    shown = view.options[:MAX_OPTIONS]
    columns = [
        {
            "tag": "column",
            "width": "auto",
            "elements": [
                {
                    "tag": "button",
                    "element_id": f"option_{index}",
                    "type": "default",
                    "text": {
                        "tag": "plain_text",
                        "content": _shown(" ".join(option.split()), OPTION_CHARS) or "(blank)",
                    },
                    "behaviors": [
                        {
                            "type": "callback",
                            "value": dict(seal(option_value(view.question_id, index))),
                        }
                    ],
                }
            ],
        }
        for index, option in enumerate(shown)
    ]
    elements: list[dict[str, Any]] = [
        {
            "tag": "column_set",
            "element_id": "options",
            "flex_mode": "flow",
            "horizontal_spacing": "8px",
            "columns": columns,
        }
    ]
    hidden = len(view.options) - len(shown)
    if hidden:
        more = f"{hidden} more option{'s' if hidden > 1 else ''} not shown (a card holds "
        more += f"{MAX_OPTIONS})."
        elements.append(_markdown("more", more, size="notation"))
    return elements


def _form(question_id: str, seal: Sealer) -> dict[str, Any]:
    return {
        "tag": "form",
        "element_id": "answer_form",
        "name": FORM_NAME,
        "elements": [
            {
                "tag": "input",
                "element_id": "answer_input",
                "name": ANSWER_FIELD,
                "required": True,
                "max_length": ANSWER_CHARS,
                "input_type": "multiline_text",
                "rows": 3,
                "auto_resize": True,
                "max_rows": 10,
                "width": "fill",
                "placeholder": {"tag": "plain_text", "content": "Your answer"},
            },
            {
                "tag": "button",
                "element_id": "answer_submit",
                "name": SUBMIT_NAME,
                "type": "primary_filled",
                "text": {"tag": "plain_text", "content": "Send answer"},
                "form_action_type": "submit",
                "behaviors": [{"type": "callback", "value": dict(seal(answer_value(question_id)))}],
            },
        ],
    }


def _outcome(view: QuestionCardView) -> str:
    at = f" at {format_time(view.decided_at, view.timezone)}" if view.decided_at else ""
    note = _inline(view.note or "", NOTE_CHARS)
    if view.state == "answered":
        return f"✅ Answered by {mention(view.answered_by or view.asker)}{at}:"
    if view.state == "expired":
        until = format_time(view.expires_at, view.timezone)
        return f"⌛ Expired at {until}: no answer in time."
    if view.state == "cancelled":
        return f"⏹ Cancelled{at}" + (f": {note}" if note else ".")
    return f"⏹ Closed{at}" + (f": {note}" if note else ".")


def _shown(text: str, limit: int) -> str:
    """Outside text for a plain_text node: its lines kept, hidden characters made visible,
    cut to ``limit`` characters, ``<at`` broken (plain text is never markdown; this holds
    even where a client would read it as such)."""
    text = visible(text.replace("\r\n", "\n").strip(), keep="\n")
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return _AT_TAG.sub("<\u200b", text)


def _inline(text: str, limit: int) -> str:
    """Outside text for one markdown line: flattened, visible, cut, then escaped."""
    flat = visible(" ".join(text.split()))
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return escape_markdown(flat)


def _plain(element_id: str, content: str) -> dict[str, Any]:
    return {
        "tag": "div",
        "element_id": element_id,
        "text": {"tag": "plain_text", "content": content},
    }
