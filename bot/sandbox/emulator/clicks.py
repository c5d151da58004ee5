"""What Feishu's client sends when a person presses a button on a card: the value of the
button as the card holds it and, for a form's submit button, what was typed into the form.

Feishu builds a ``card.action.trigger`` callback from the card it shows, not from anything
a test makes up: a button sends its callback behavior's ``value`` (``action.value``); the
submit button of a form (``form_action_type: "submit"``) also sends its ``name``
(``action.name``) and every input of its form by the input's name (``action.form_value``),
and does not send at all while a required input is empty or an input holds more than its
``max_length``. These helpers read a card's JSON (2.0) the same way, so that a test or the
``larkgate dev`` page answers a card as a person in Feishu would, and refuse, saying why,
what Feishu's client would refuse (``ClickRefused``).

``form_problems(card)`` lists what breaks Feishu's documented rules for forms (a form only
at the body's root, a name on the form and on every input and button in it, unique across
the card, a submit button, an input's ``max_length`` within 1..1000): a card with any of
them would not work in Feishu.

    card = shown_card(fake, message_id)                  # as the chat shows it now
    press = button_press(card, "production")             # an option button, by its label
    press = form_submission(card, {"answer": "blue"})    # the form's submit button
    envelope = card_action_event(value=press.value, name=press.name,
                                 form_value=press.form_value, ...)   # bot.sandbox.push
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import FakeFeishu

INPUT_MAX_LENGTH = 1000  # Feishu's default and largest max_length for an input
# Form components whose values a submission carries (by their name).
_FIELDS = (
    "input",
    "select_static",
    "multi_select_static",
    "select_person",
    "multi_select_person",
    "date_picker",
    "picker_time",
    "picker_datetime",
    "checker",
)


class ClickRefused(ValueError):
    """A press Feishu's client would not send (the reason is the message)."""


@dataclass(frozen=True, slots=True)
class Press:
    """What a press sends: ``action.value``, and for a form's submit button ``action.name``
    and ``action.form_value``."""

    value: dict[str, Any]
    name: str | None = None
    form_value: dict[str, Any] | None = None


def shown_card(fake: FakeFeishu, message_id: str) -> dict[str, Any] | None:
    """The card ``message_id`` shows now (a card entity's current JSON, or the message's
    own content); None when it is no card."""
    message = fake.message_by_id.get(message_id)
    if message is None or message.msg_type != "interactive":
        return None
    if message.card_id is not None:
        entity = fake.cards.get(message.card_id)
        return entity.card if entity is not None else None
    content = message.content
    return content if isinstance(content, dict) else None


def button_press(card: Mapping[str, Any], label: str) -> Press:
    """Pressing the one button labelled ``label`` (outside a form: in a form, a button
    submits it, see ``form_submission``)."""
    outside = [b for b in _buttons(card.get("body")) if not b[1]]
    found = [button for button, _ in outside if _label(button) == label]
    if len(found) != 1:
        labels = ", ".join(repr(_label(b)) for b, _ in outside) or "none"
        raise ClickRefused(f"{len(found)} buttons labelled {label!r} (the buttons: {labels})")
    value = _callback_value(found[0])
    if value is None:
        raise ClickRefused(f"the button {label!r} sends no callback")
    return Press(value)


def form_submission(
    card: Mapping[str, Any], inputs: Mapping[str, Any], *, button: str | None = None
) -> Press:
    """Submitting the card's form with ``inputs`` (a component's name -> what was typed or
    chosen) by its submit button (the one labelled ``button``; without it, the only one).
    Every component of the form is sent, an unfilled one as ""."""
    submits = [
        (b, form)
        for b, form in _buttons(card.get("body"))
        if form is not None and b.get("form_action_type") == "submit"
    ]
    if button is not None:
        submits = [(b, form) for b, form in submits if _label(b) == button]
    if len(submits) != 1:
        raise ClickRefused(f"{len(submits)} submit buttons to press, not one")
    pressed, form = submits[0]
    fields = {
        node["name"]: node
        for node in _walk(form.get("elements"))
        if node.get("tag") in _FIELDS and isinstance(node.get("name"), str)
    }
    unknown = sorted(set(inputs) - set(fields))
    if unknown:
        raise ClickRefused(f"the form has no component named {', '.join(map(repr, unknown))}")
    form_value: dict[str, Any] = {}
    for name, node in fields.items():
        given = inputs.get(name, "")
        if node.get("required") is True and given in ("", None, []):
            raise ClickRefused(f"{name!r} is required and empty")
        limit = node.get("max_length", INPUT_MAX_LENGTH)
        if node.get("tag") == "input" and isinstance(given, str) and len(given) > limit:
            raise ClickRefused(f"{name!r} holds {len(given)} characters, more than {limit}")
        form_value[name] = given
    value = _callback_value(pressed) or {}
    name = pressed.get("name")
    return Press(value, name if isinstance(name, str) else None, form_value)


def form_problems(card: Mapping[str, Any]) -> list[str]:
    """What in ``card`` breaks Feishu's documented rules for forms ([] when nothing)."""
    problems: list[str] = []
    body = card.get("body")
    root = body.get("elements", []) if isinstance(body, Mapping) else []
    names: list[str] = []
    for node in _walk(body):
        if node.get("tag") == "form" and not any(node is element for element in root):
            problems.append("a form may only be an element of the card's body")
    for form in (node for node in root if isinstance(node, dict) and node.get("tag") == "form"):
        if not isinstance(form.get("name"), str) or not form["name"]:
            problems.append("a form needs a name")
        else:
            names.append(form["name"])
        inside = list(_walk(form.get("elements")))
        if any(node.get("tag") == "form" for node in inside):
            problems.append("a form may not hold a form")
        interactive = [n for n in inside if n.get("tag") in (*_FIELDS, "button")]
        for node in interactive:
            name = node.get("name")
            if not isinstance(name, str) or not name:
                problems.append(f"a {node.get('tag')} in a form needs a name")
            else:
                names.append(name)
            limit = node.get("max_length", INPUT_MAX_LENGTH)
            if node.get("tag") == "input" and not (
                isinstance(limit, int) and 1 <= limit <= INPUT_MAX_LENGTH
            ):
                problems.append(f"an input's max_length must be 1..{INPUT_MAX_LENGTH}")
        if not any(n.get("form_action_type") == "submit" for n in interactive):
            problems.append("a form needs a submit button")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problems.append(f"names must be unique in a card: {', '.join(repeated)}")
    return problems


def _buttons(node: Any, form: dict[str, Any] | None = None) -> Iterator[tuple[dict[str, Any], Any]]:
    """Every button under ``node``, with the form it is in (None outside forms)."""
    if isinstance(node, dict):
        if node.get("tag") == "button":
            yield node, form
        inner = node if node.get("tag") == "form" else form
        for value in node.values():
            yield from _buttons(value, inner)
    elif isinstance(node, list):
        for value in node:
            yield from _buttons(value, form)


def _callback_value(button: Mapping[str, Any]) -> dict[str, Any] | None:
    for behavior in button.get("behaviors") or []:
        if isinstance(behavior, dict) and behavior.get("type") == "callback":
            value = behavior.get("value")
            return dict(value) if isinstance(value, dict) else None
    legacy = button.get("value")  # JSON 1.0's button value
    return dict(legacy) if isinstance(legacy, dict) else None


def _label(button: Mapping[str, Any]) -> str:
    text = button.get("text")
    return str(text.get("content", "")) if isinstance(text, dict) else ""


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
