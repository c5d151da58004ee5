"""Golden pairs for inbound events and card callbacks.

Each ``tests/fixtures/inbound/<name>.event.json`` is a decrypted schema-2.0 envelope and
``<name>.expected.json`` is ``parse_message_event(...).to_dict()`` (bot open_id ``ou_bot``),
or ``{"rejected": "<substring of the reason>"}``. ``tests/fixtures/callbacks/`` holds the same
for ``parse_card_action``. Cases are found by glob: a new pair needs no code.

To (re)write the expected files after a deliberate change, run with
``LARKGATE_UPDATE_GOLDEN=1`` and review the diff; rejections keep their hand-written substring.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.feishu.events import (
    CardAction,
    InboundMessage,
    Rejected,
    event_type,
    parse_card_action,
    parse_message_event,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOT_OPEN_ID = "ou_bot"
UPDATE = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"


def _parse_inbound(envelope: Any) -> InboundMessage | Rejected:
    return parse_message_event(envelope, bot_open_id=BOT_OPEN_ID)


PARSERS: dict[str, Callable[[Any], InboundMessage | CardAction | Rejected]] = {
    "inbound": _parse_inbound,
    "callbacks": parse_card_action,
}


def _cases() -> list[Any]:
    cases = []
    for folder in PARSERS:
        for event_file in sorted((FIXTURES / folder).glob("*.event.json")):
            name = event_file.name.removesuffix(".event.json")
            cases.append(pytest.param(folder, event_file, id=f"{folder}/{name}"))
    return cases


def _expected_path(event_file: Path) -> Path:
    return event_file.with_name(event_file.name.replace(".event.json", ".expected.json"))


def _write_expected(path: Path, result: Any) -> None:
    if isinstance(result, Rejected):
        if path.exists() and "rejected" in json.loads(path.read_text()):
            return  # keep the hand-picked substring
        data: Any = {"rejected": result.reason}
    else:
        data = result.to_dict()
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def test_there_are_golden_cases():
    assert len(list((FIXTURES / "inbound").glob("*.event.json"))) >= 20
    assert len(list((FIXTURES / "callbacks").glob("*.event.json"))) >= 4
    for folder in PARSERS:
        for event_file in (FIXTURES / folder).glob("*.event.json"):
            assert _expected_path(event_file).exists() or UPDATE, f"no expected for {event_file}"


@pytest.mark.parametrize(("folder", "event_file"), _cases())
def test_golden_pair(folder: str, event_file: Path):
    envelope = json.loads(event_file.read_text())
    result = PARSERS[folder](envelope)
    expected_path = _expected_path(event_file)
    if UPDATE:
        _write_expected(expected_path, result)
    expected = json.loads(expected_path.read_text())

    if "rejected" in expected:
        assert isinstance(result, Rejected), f"expected a rejection, got {result!r}"
        assert expected["rejected"] in result.reason
        return
    assert not isinstance(result, Rejected), f"unexpectedly rejected: {result.reason}"
    assert result.to_dict() == expected
    # The dict is JSON as it stands, and from_dict is its exact inverse.
    assert json.loads(json.dumps(result.to_dict())) == result.to_dict()
    assert type(result).from_dict(json.loads(json.dumps(expected))) == result


# -- behaviour the golden pairs (all parsed with bot open_id "ou_bot") cannot show ------------


def _text_envelope(text: str, mentions: list[Any] | None = None, **message: Any) -> Any:
    body: dict[str, Any] = {
        "message_id": "om_1",
        "chat_id": "oc_group",
        "chat_type": "group",
        "message_type": "text",
        "content": json.dumps({"text": text}),
        **message,
    }
    if mentions is not None:
        body["mentions"] = mentions
    return {
        "schema": "2.0",
        "header": {"event_id": "evt_1", "event_type": "im.message.receive_v1"},
        "event": {"sender": {"sender_id": {"open_id": "ou_user"}}, "message": body},
    }


BOT_MENTION = {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Larkgate"}
ALL_MENTION = {
    "key": "@_all",
    "id": {"open_id": "", "user_id": "", "union_id": ""},
    "name": "所有人",
}


@pytest.mark.parametrize("bot_open_id", [None, ""])
def test_without_a_bot_open_id_nothing_is_the_bot(bot_open_id: str | None):
    envelope = _text_envelope("@_user_1 @_all hi", [BOT_MENTION, ALL_MENTION])
    result = parse_message_event(envelope, bot_open_id=bot_open_id)
    assert isinstance(result, InboundMessage)
    assert result.text == "@Larkgate @所有人 hi"
    assert not result.mentions_bot


def test_all_mention_is_not_the_bot_mention():
    result = parse_message_event(_text_envelope("@_all hi", [ALL_MENTION]), bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage)
    assert not result.mentions_bot
    assert [m.key for m in result.mentions] == ["@_all"]


def test_longer_placeholders_win_over_their_prefixes():
    mentions = [
        {"key": f"@_user_{n}", "id": {"open_id": f"ou_{n}"}, "name": f"U{n}"} for n in range(1, 13)
    ]
    result = parse_message_event(
        _text_envelope("@_user_12 @_user_1 @_user_10", mentions), bot_open_id="ou_1"
    )
    assert isinstance(result, InboundMessage)
    assert result.text == "@U12 @U10"
    assert result.mentions_bot


def test_mention_without_a_name_keeps_its_placeholder():
    result = parse_message_event(
        _text_envelope("@_user_1 hi", [{"key": "@_user_1", "id": {"open_id": "ou_x"}}]),
        bot_open_id="ou_bot",
    )
    assert isinstance(result, InboundMessage)
    assert result.text == "@_user_1 hi"


def test_rest_style_mention_ids_are_understood():
    mention = {"key": "@_user_1", "id": "ou_bot", "id_type": "open_id", "name": "Larkgate"}
    result = parse_message_event(_text_envelope("@_user_1 /help", [mention]), bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage)
    assert (result.text, result.mentions_bot) == ("/help", True)


def test_already_decoded_content_and_numeric_create_time_are_accepted():
    envelope = _text_envelope("x", create_time=1700000000000)
    envelope["event"]["message"]["content"] = {"text": "decoded already"}
    result = parse_message_event(envelope, bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage)
    assert (result.text, result.create_time_ms) == ("decoded already", 1700000000000)


def test_node_sdk_flattened_message_layout_is_accepted():
    envelope = _text_envelope("hi")
    flat = {"schema": "2.0", "event_type": "im.message.receive_v1", **envelope["event"]}
    result = parse_message_event(flat, bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage)
    assert result.text == "hi"


def test_event_type_reads_the_header():
    assert event_type(_text_envelope("hi")) == "im.message.receive_v1"
    assert (
        event_type({"schema": "2.0", "event_type": "card.action.trigger"}) == "card.action.trigger"
    )
    assert event_type({"header": {}}) == ""
    assert event_type({"header": "x", "event_type": "card.action.trigger"}) == ""


def test_odd_event_types_are_not_echoed_into_the_reason():
    envelope = _text_envelope("hi")
    envelope["header"]["event_type"] = "x" * 10_000 + "\n"
    result = parse_message_event(envelope, bot_open_id="ou_bot")
    assert isinstance(result, Rejected)
    assert result.reason == "not a message event: unrecognised event_type"


def test_card_action_repr_hides_the_update_token():
    action = CardAction(event_id="e", operator_open_id="ou_a", update_token="c-secret")
    assert "c-secret" not in repr(action)
    assert action.to_dict()["update_token"] == "c-secret"


def test_parsed_objects_are_frozen():
    result = parse_message_event(_text_envelope("hi"), bot_open_id="ou_bot")
    assert isinstance(result, InboundMessage)
    with pytest.raises(AttributeError):
        result.text = "changed"  # type: ignore[misc]
